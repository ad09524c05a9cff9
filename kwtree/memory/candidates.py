"""What extraction produces and what it reads: messages, candidate memories, the categories.

A message is a mapping with ``role`` and ``content`` (a string; tool calls and results may
carry other keys, kept as they are) and optionally ``ts``: when it was said, as epoch seconds
or an ISO 8601 date or datetime. A :class:`Candidate` is one memory an extractor found in
them; the write policy of its ``category`` decides where it goes (``kwtree.memory.policies``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kwtree.models import HAPPENED_AT  # defined on the ground floor, where retrieval reads it too

__all__ = ["CATEGORIES", "ENTITIES_KEY", "HAPPENED_AT", "Candidate", "ExtractContext", "Extractor", "Message"]

#: The categories of memories, in the order a context block shows them.
CATEGORIES = ("profile", "preferences", "entities", "patterns", "events", "cases", "skills")

Message = Mapping[str, Any]
#: ``Candidate.facts[ENTITIES_KEY]``: the names a memory mentions. The commit files the memory
#: under each name's keyword of the ``entities`` category too (a link, not a second memory
#: holding the same words).
ENTITIES_KEY = "entities"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One memory found in a conversation.

    ``category`` is one of CATEGORIES; ``key`` the routing key (the topic, entity or tool the
    memory is about: one keyword per key for the aggregating categories); ``abstract`` one or
    two sentences; ``content`` the memory itself; ``confidence`` in [0, 1]; ``sources`` the
    indices (in the session's messages) it was drawn from; ``happened_at`` when the fact
    happened (epoch seconds) if known; ``facts`` extra structured fields a policy may use
    (a skill's ``outcome`` and ``duration``, a profile fact's ``attribute``, the names it
    mentions under ``ENTITIES_KEY``)."""

    category: str
    key: str
    abstract: str
    content: str
    confidence: float
    sources: tuple[int, ...]
    happened_at: float | None = None
    facts: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ExtractContext:
    """What an extractor knows besides the messages: the index of the first message not
    seen before (earlier ones are context only: extract nothing from them), the session's
    date (epoch seconds, the anchor for "yesterday" and "last Friday") and its id."""

    session_id: str
    first_new: int
    session_time: float | None


class Extractor(Protocol):
    """Finds candidate memories in ``messages[context.first_new:]``."""

    def __call__(self, messages: Sequence[Message], context: ExtractContext) -> list[Candidate]: ...
