"""What the ``kwtree`` command reads from its environment: which LLM drives the agent
(``KWTREE_LLM``, with ``KWTREE_LLM_TIMEOUT`` and ``KWTREE_LLM_MAX_RETRIES``) and what a write
does when the agent fails (``KWTREE_ON_AGENT_FAILURE``). Every command that opens a tree
asks here, so they all read the same variables the same way. ``KWTREE_EMBEDDER`` (the
embedder of a new tree) is read by the library itself (``kwtree.caches.embed.default_embedder``):
a command on an existing tree uses the embedder its manifest records, whatever it says."""

from __future__ import annotations

import os
from typing import Any

from kwtree.errors import InvalidInputError

__all__ = ["llm_client", "on_agent_failure"]


def llm_client() -> Any:
    """The LLM client KWTREE_LLM names: "anthropic", or unset/"offline" for none. For
    Anthropic, KWTREE_LLM_TIMEOUT (seconds per attempt) and KWTREE_LLM_MAX_RETRIES bound how
    long a failing API is waited for before the agent falls back."""
    choice = os.environ.get("KWTREE_LLM", "offline").strip().lower()
    if choice in ("", "offline"):
        return None
    if choice == "anthropic":
        from kwtree.agent.anthropic_client import AnthropicLLMClient

        limits: dict[str, Any] = {}
        for variable, setting, kind in (("KWTREE_LLM_TIMEOUT", "timeout", float),
                                        ("KWTREE_LLM_MAX_RETRIES", "max_retries", int)):
            text = os.environ.get(variable, "").strip()
            if text:
                try:
                    limits[setting] = kind(text)
                except ValueError:
                    raise InvalidInputError(f"{variable} must be a {kind.__name__}, got {text!r}") from None
        return AnthropicLLMClient(**limits)
    raise InvalidInputError(f"KWTREE_LLM must be 'anthropic' or 'offline', got {choice!r}")


def on_agent_failure() -> str:
    """KWTREE_ON_AGENT_FAILURE: "fallback" (default: warn and go on) or "raise" (exit 1)."""
    from kwtree.facade.agent import ON_AGENT_FAILURE

    choice = os.environ.get("KWTREE_ON_AGENT_FAILURE", "").strip().lower() or "fallback"
    if choice not in ON_AGENT_FAILURE:
        raise InvalidInputError(f"KWTREE_ON_AGENT_FAILURE must be 'fallback' or 'raise', got {choice!r}")
    return choice
