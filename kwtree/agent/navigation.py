"""One round of the descend loop as a navigator sees it, and the navigator seam.

A navigator gets a ``RoundRequest`` (the query, where the loop stands, the candidates) and
answers a decision dict: ``{"action", "idx" | "idxs", "suggest_name", "reason"}``. The LLM
navigator sends the request document to an ``LLMClient``; the offline navigator decides from
the lexical relevance the loop computed for the query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from kwtree.agent.clients import LLMClient
from kwtree.agent.lexicon import Relevance
from kwtree.agent.prompts import DECISION_SCHEMA, build_messages

__all__ = ["MAX_QUERY_CHARS", "LLMNavigator", "Navigator", "RoundKeyword", "RoundRequest"]

#: Longer queries (an info's content) are cut to this many characters in the prompt.
MAX_QUERY_CHARS = 2000


@dataclass(frozen=True, slots=True)
class RoundKeyword:
    """A keyword shown in a round: ``idx`` is what the navigator answers with."""

    idx: int
    id: str
    name: str
    path: str  # names from the top down to this keyword, " > "-joined, root excluded
    aliases: tuple[str, ...]
    description: str
    level: int
    has_children: bool


@dataclass(slots=True)
class RoundRequest:
    intent: str  # "search" or "suggest_parent"
    query: str
    description: str
    round: int  # 1-based
    current_path: list[str]  # names, root excluded; empty on the first round
    current_id: str  # the keyword the current path ends at (the root on the first round)
    candidates: list[RoundKeyword]
    relevance: Relevance = field(default_factory=Relevance)

    def document(self) -> dict[str, Any]:
        """The request document the LLM sees (no ids)."""
        document: dict[str, Any] = {
            "intent": self.intent,
            "query": self.query[:MAX_QUERY_CHARS],
            "round": self.round,
            "current_path": self.current_path,
            "candidates": [{"idx": c.idx, "name": c.name, "path": c.path} for c in self.candidates],
        }
        if self.description:
            document["description"] = self.description[:MAX_QUERY_CHARS]
        return document


class Navigator(Protocol):
    """Decides one round. ``name`` says which navigator decided, for the audit trail."""

    name: str

    def decide(self, request: RoundRequest) -> Any: ...

    def usage(self) -> dict[str, int]:
        """Tokens and calls so far (zeros for a navigator that calls no model)."""
        ...


class LLMNavigator:
    """Asks an LLM client: one chat per round."""

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.name = str(getattr(client, "name", type(client).__name__))

    def decide(self, request: RoundRequest) -> Any:
        return self.client.chat(build_messages(request.document()), DECISION_SCHEMA)

    def usage(self) -> dict[str, int]:
        reported = getattr(self.client, "usage", None)
        if callable(reported):
            reported = reported()
        if not isinstance(reported, dict):
            return {}
        return {key: value for key, value in reported.items() if type(value) is int}
