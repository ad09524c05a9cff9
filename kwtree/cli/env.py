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
    """The LLM client KWTREE_LLM names ("anthropic", "openai", or unset/"offline" for none),
    with KWTREE_LLM_TIMEOUT and KWTREE_LLM_MAX_RETRIES: ``kwtree.agent.llm_env.llm_from_env``,
    the one reading of that setting, which programs use too."""
    from kwtree.agent.llm_env import llm_from_env  # not at import: ``kwtree --help`` loads no agent code

    return llm_from_env()


def on_agent_failure() -> str:
    """KWTREE_ON_AGENT_FAILURE: "fallback" (default: warn and go on) or "raise" (exit 1)."""
    from kwtree.facade.agent_calls import ON_AGENT_FAILURE

    choice = os.environ.get("KWTREE_ON_AGENT_FAILURE", "").strip().lower() or "fallback"
    if choice not in ON_AGENT_FAILURE:
        raise InvalidInputError(f"KWTREE_ON_AGENT_FAILURE must be 'fallback' or 'raise', got {choice!r}")
    return choice
