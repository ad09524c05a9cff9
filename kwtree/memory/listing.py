"""Listing a scope's memories by what they are, not by what they say: the filters of
``KeywordTree.list_memories`` and ``kwtree memories``.

A memory is what ``kwtree.memory.shelf`` calls one (an info of a scope outside its ``sessions``
branch). The filters all hold at once:

- ``scopes``: the memories of these scopes (nested ones included); None: of every scope.
- ``category``: the memory's ``category`` metadata ("profile", "preferences", "events" ...).
- ``under``: linked (live) to a keyword of this keyword's subtree.
- ``happened`` / ``recorded``: windows (``kwtree.retrieval.timeline.Window``) on when the
  memory happened (``happened_at``, else when it was recorded) and on when it was recorded.
- ``where``: mem0-style metadata filters (``kwtree.memory.filters``), matched against the
  memory's metadata.
- ``text``: a piece of its content, compared case-insensitively (casefolded).
- ``include_superseded`` False leaves out values the user has since changed.

The matches are ordered oldest first by when they were recorded (``newest_first`` reverses
it), then paged: ``offset`` matches skipped, at most ``limit`` kept, and the page says how many
matched in all, so a caller knows how many remain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kwtree.engine.state import State
from kwtree.memory.filters import matches
from kwtree.memory.shelf import all_scopes, scope_memories, scope_of
from kwtree.memory_schema import CATEGORY, SUPERSEDED_BY
from kwtree.models import Info
from kwtree.retrieval.timeline import Window, in_window

__all__ = ["ListedMemory", "MemoryPage", "MemoryQuery", "list_memories"]


@dataclass(frozen=True, slots=True)
class ListedMemory:
    """One memory of a listing: the info and the scope path it belongs to."""

    info: Info
    scope: str


@dataclass(frozen=True, slots=True)
class MemoryPage:
    """A page of a listing: its memories, how many matched in all, where the page starts and
    how many matches lie after it."""

    memories: list[ListedMemory]
    total: int
    offset: int
    remaining: int


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    """The checked filters of a listing (see the module's docstring)."""

    scopes: tuple[str, ...] | None = None
    category: str | None = None
    under: frozenset[str] | None = None  # the ids of the keyword's subtree
    happened: Window | None = None
    recorded: Window | None = None
    where: Mapping[str, Any] | None = None
    text: str | None = None
    include_superseded: bool = True
    newest_first: bool = False


def _keeps(state: State, info: Info, query: MemoryQuery) -> bool:
    metadata = info.metadata
    if query.category is not None and metadata.get(CATEGORY) != query.category:
        return False
    if not query.include_superseded and metadata.get(SUPERSEDED_BY):
        return False
    if query.under is not None and not any(kid in query.under for kid in state.keywords_by_info.get(info.id, ())):
        return False
    if query.happened is not None and not in_window(info, query.happened):
        return False
    if query.recorded is not None:
        since, until = query.recorded
        if (since is not None and info.created_at < since) or (until is not None and info.created_at > until):
            return False
    if query.text is not None and query.text.casefold() not in info.content.casefold():
        return False
    return query.where is None or matches(query.where, metadata)


def list_memories(state: State, query: MemoryQuery, offset: int, limit: int) -> MemoryPage:
    """The page of the memories ``query`` keeps that starts at match ``offset`` and holds at
    most ``limit`` of them (``query`` and the numbers already checked)."""
    scopes = query.scopes if query.scopes is not None else tuple(p for p in all_scopes(state) if "/" not in p)
    kept = [info for info in scope_memories(state, scopes) if _keeps(state, info, query)]
    if query.newest_first:
        kept.reverse()
    page = kept[offset:offset + limit]
    return MemoryPage([ListedMemory(info, scope_of(state, info.id) or "") for info in page], len(kept), offset,
                      max(0, len(kept) - offset - len(page)))
