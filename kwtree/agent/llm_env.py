"""Which LLM the environment names: ``KWTREE_LLM``, read the same way by every surface that
opens a tree for a user (the ``kwtree`` command, ``kwtree mcp``, the Claude Code hooks, and a
program that passes :func:`llm_from_env` to ``KeywordTree(llm_client=...)`` or
``Memory(llm=...)``), so that one setting picks the model for all of them.

``KWTREE_LLM_TIMEOUT`` (seconds per HTTP attempt) and ``KWTREE_LLM_MAX_RETRIES`` bound how long
a failing API is waited for before the agent falls back; each client reads its own endpoint,
key and model (:data:`LLM_CHOICES` says which variables).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from kwtree.agent.clients import LLMClient
from kwtree.errors import InvalidInputError

__all__ = ["LLM_CHOICES", "llm_from_env"]


def _anthropic(limits: dict[str, Any]) -> LLMClient:
    from kwtree.agent.anthropic_client import AnthropicLLMClient  # the SDK is slow to import: only when chosen

    return AnthropicLLMClient(**limits)


def _openai(limits: dict[str, Any]) -> LLMClient:
    from kwtree.agent.openai_client import OpenAILLMClient

    return OpenAILLMClient(**limits)


#: KWTREE_LLM's values: what each one is, and what builds its client (None: no LLM).
LLM_CHOICES: dict[str, tuple[str, Callable[[dict[str, Any]], LLMClient] | None]] = {
    "offline": ("no LLM: the offline navigator and extraction rules (the default)", None),
    "anthropic": ("AnthropicLLMClient: ANTHROPIC_API_KEY, KWTREE_ANTHROPIC_MODEL, ANTHROPIC_BASE_URL", _anthropic),
    "openai": ("OpenAILLMClient, any Chat Completions server: KWTREE_OPENAI_MODEL (required), "
               "KWTREE_OPENAI_BASE_URL or OPENAI_BASE_URL, OPENAI_API_KEY", _openai),
}
_LIMITS = (("KWTREE_LLM_TIMEOUT", "timeout", float), ("KWTREE_LLM_MAX_RETRIES", "max_retries", int))


def llm_from_env() -> LLMClient | None:
    """The LLM client ``KWTREE_LLM`` names, built from that client's environment variables,
    or None for "offline" or unset.

    Raises InvalidInputError naming the variable for an unknown choice (the message lists the
    choices) or a limit that is not a number, and whatever the client's constructor raises for
    a missing setting (no key, no model), which names the variable to set.
    """
    choice = os.environ.get("KWTREE_LLM", "").strip().lower() or "offline"
    if choice not in LLM_CHOICES:
        raise InvalidInputError(f"KWTREE_LLM must be one of {', '.join(map(repr, LLM_CHOICES))}, got {choice!r}")
    build = LLM_CHOICES[choice][1]
    if build is None:
        return None
    limits: dict[str, Any] = {}
    for variable, setting, kind in _LIMITS:
        text = os.environ.get(variable, "").strip()
        if text:
            try:
                limits[setting] = kind(text)
            except ValueError:
                raise InvalidInputError(f"{variable} must be a {kind.__name__}, got {text!r}") from None
    return build(limits)
