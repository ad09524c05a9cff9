"""What a scope holds, read from a State: its memories (the infos the pipeline extracted and
those stored verbatim) apart from its archived sessions (the turns and the summaries under
each scope's ``sessions`` branch), the infos of one category branch, the latest session
summary, and the scope an info belongs to.

The mem0-shaped ``kwtree.Memory`` and the lifecycle hooks (``bootstrap``, ``assemble``) read
memories through these functions, so "a memory" means the same to both: an info with a live
link to a keyword inside the scopes that is not inside a ``sessions`` branch.
"""

from __future__ import annotations

from collections.abc import Iterable

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError
from kwtree.memory_schema import (
    ATTRIBUTE,
    BRANCH_KEY,
    KIND,
    SCOPE_KEY,
    SESSIONS_BRANCH,
    SUMMARY_KIND,
    SUPERSEDED_BY,
    VALUE,
)
from kwtree.models import ROOT_ID, Info
from kwtree.retrieval.scopes import clean_scope, scope_keyword, scope_subtree

__all__ = ["all_scopes", "branch_infos", "latest_summary", "memory_keywords", "overview", "scope_memories", "scope_of",
           "stated_names"]


def _branch_subtrees(state: State, inside: set[str], branch: str) -> set[str]:
    found: set[str] = set()
    for kid in inside:
        if kid not in found and state.keywords[kid].metadata.get(BRANCH_KEY) == branch:
            found.update(state.subtree(kid))
    return found


def memory_keywords(state: State, scopes: Iterable[str]) -> set[str]:
    """Ids of the live keywords inside ``scopes`` (checked paths; nested scopes included) that
    hold memories: every one but the ``sessions`` branches and what is under them."""
    inside = scope_subtree(state, scopes)
    return inside - _branch_subtrees(state, inside, SESSIONS_BRANCH)


def _infos_of(state: State, keywords: set[str]) -> list[Info]:
    seen: dict[str, Info] = {}
    for kid in keywords:
        for info_id in state.infos_by_keyword.get(kid, {}):
            info = state.live_info(info_id)
            if info is not None:
                seen[info_id] = info
    return sorted(seen.values(), key=lambda info: (info.created_at, info.id))


def scope_memories(state: State, scopes: Iterable[str]) -> list[Info]:
    """The live memories of ``scopes``, oldest first (by creation, then id)."""
    return _infos_of(state, memory_keywords(state, scopes))


def branch_infos(state: State, scopes: Iterable[str], branch: str) -> list[Info]:
    """The live infos under the ``branch`` branches (e.g. "profile") of ``scopes``, oldest first."""
    return _infos_of(state, _branch_subtrees(state, scope_subtree(state, scopes), branch))


def overview(state: State, scopes: Iterable[str], include_superseded: bool = False) -> list[Info]:
    """What ``scopes`` know of their owner as a whole: the profile, the preferences, then the
    other memories, newest first within each, each text once; superseded values left out unless
    ``include_superseded``."""
    found: dict[str, Info] = {}  # by text: a fact filed under several keys is one fact
    groups = [branch_infos(state, scopes, "profile"), branch_infos(state, scopes, "preferences"),
              scope_memories(state, scopes)]
    for info in [info for group in groups for info in reversed(group)]:
        if include_superseded or not info.metadata.get(SUPERSEDED_BY):
            found.setdefault(info.content, info)
    return list(found.values())


def stated_names(state: State, scopes: Iterable[str]) -> list[str]:
    """The names the owner of ``scopes`` gave as their own (current profile memories of
    attribute ``name``)."""
    return [info.metadata[VALUE] for info in branch_infos(state, scopes, "profile")
            if info.metadata.get(ATTRIBUTE) == "name" and isinstance(info.metadata.get(VALUE), str)
            and not info.metadata.get(SUPERSEDED_BY)]


def latest_summary(state: State, scopes: Iterable[str]) -> Info | None:
    """The summary info of the session committed last inside ``scopes`` (by its last update),
    or None when no session was committed there."""
    inside = scope_subtree(state, scopes)
    summaries = [info for info in _infos_of(state, _branch_subtrees(state, inside, SESSIONS_BRANCH))
                 if info.metadata.get(KIND) == SUMMARY_KIND]
    return max(summaries, key=lambda info: (info.updated_at, info.id), default=None)


def _is_path(scope: str) -> bool:
    try:
        clean_scope(scope)
    except InvalidInputError:
        return False
    return True


def all_scopes(state: State) -> list[str]:
    """The path of every live scope, each before the scopes nested in it, in tree order."""
    found: list[str] = []

    def visit(parent: str) -> None:
        for kid in state.children.get(parent, []):
            path = state.keywords[kid].metadata.get(SCOPE_KEY)
            if isinstance(path, str) and _is_path(path):
                held = scope_keyword(state, path)
                if held is not None and held.id == kid:
                    found.append(path)
                    visit(kid)

    visit(ROOT_ID)
    return found


def scope_of(state: State, info_id: str) -> str | None:
    """The scope path of the memory ``info_id``: that of the innermost scope keyword above a
    keyword it is linked to outside a ``sessions`` branch (the first such link); None when the
    info is not live or is no scope's memory (an archived turn, a summary, a plain info)."""
    if state.live_info(info_id) is None:
        return None
    for kid in state.keywords_by_info.get(info_id, ()):
        if state.live_keyword(kid) is None:
            continue
        path = None
        for node in reversed(state.ancestry(kid)):
            metadata = state.keywords[node].metadata
            if metadata.get(BRANCH_KEY) == SESSIONS_BRANCH:
                break
            scope = metadata.get(SCOPE_KEY)
            if isinstance(scope, str):  # the marker counts only on the scope's own keyword
                held = scope_keyword(state, scope) if _is_path(scope) else None
                path = scope if held is not None and held.id == node else None
                break
        if path is not None:
            return path
    return None
