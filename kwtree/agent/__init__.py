"""The agent: LLM clients, the descend loop, the MRU cache, the offline navigator and the
reorganisation planner. It reads the State but never touches storage (``kwtree.stores``);
the KeywordTree facade wires it in."""

from typing import Any

from kwtree.agent.clients import LLMClient, StubLLMClient
from kwtree.agent.descend import DescendLoop, Descent, DescentStatus
from kwtree.agent.llm_env import llm_from_env
from kwtree.agent.navigation import LLMNavigator, Navigator, RoundKeyword, RoundRequest
from kwtree.agent.offline import OfflineNavigator
from kwtree.agent.prompts import DECISION_SCHEMA, SYSTEM_PROMPT

__all__ = [
    "DECISION_SCHEMA",
    "SYSTEM_PROMPT",
    "AnthropicLLMClient",
    "DescendLoop",
    "Descent",
    "DescentStatus",
    "LLMClient",
    "LLMNavigator",
    "Navigator",
    "OfflineNavigator",
    "OpenAILLMClient",
    "RoundKeyword",
    "RoundRequest",
    "StubLLMClient",
    "llm_from_env",
]


def __getattr__(name: str) -> Any:
    # The anthropic SDK takes a while to import; only users of its client pay for it.
    if name == "AnthropicLLMClient":
        from kwtree.agent.anthropic_client import AnthropicLLMClient

        return AnthropicLLMClient
    if name == "OpenAILLMClient":  # urllib and http.client: only its users load them
        from kwtree.agent.openai_client import OpenAILLMClient

        return OpenAILLMClient
    raise AttributeError(f"module 'kwtree.agent' has no attribute {name!r}")
