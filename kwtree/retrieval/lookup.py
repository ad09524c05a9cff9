"""The read side of ``search``: exact lookup and turning a walk of the agent into a result.

Functions here take the State (the caller holds its lock) and build public results.
"""

from __future__ import annotations

import re
import unicodedata

from kwtree.agent.descend import Descent, DescentStatus
from kwtree.engine.state import State
from kwtree.models import (
    ROOT_ID,
    Info,
    Keyword,
    RelationType,
    SearchResult,
    SearchStatus,
)
from kwtree.normalize import CJK_CHARS, normalize_name

__all__ = ["INFOS_PER_RESULT", "from_descent", "keyword_path", "links_for_text", "matched", "names_in_text"]

#: A matched keyword comes with at most this many of its infos (the first page).
INFOS_PER_RESULT = 50
#: Spans of at most this many words are looked up as names in a text.
MAX_NAME_WORDS = 5
_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
_WORD = re.compile(r"\w+")


def keyword_path(state: State, keyword_id: str) -> list[Keyword]:
    """The keywords from the root down to ``keyword_id``."""
    return [state.keywords[kid] for kid in state.ancestry(keyword_id)]


def _infos(state: State, keyword_id: str) -> list[Info]:
    found: list[Info] = []
    for info_id in state.infos_by_keyword.get(keyword_id, {}):
        info = state.infos[info_id]
        if not info.deleted:
            found.append(info)
            if len(found) == INFOS_PER_RESULT:
                break
    return found


def matched(state: State, keyword_id: str, descent: Descent | None = None) -> SearchResult:
    """MATCHED: the keyword, its path and its first infos."""
    result = SearchResult(
        SearchStatus.MATCHED,
        node=state.keywords[keyword_id],
        path=keyword_path(state, keyword_id),
        infos=_infos(state, keyword_id),
    )
    if descent is not None:
        result.reason, result.rounds, result.trace = descent.reason, descent.rounds, descent.trace
    return result


def ambiguous(state: State, keyword_ids: list[str], reason: str) -> SearchResult:
    return SearchResult(SearchStatus.AMBIGUOUS, candidates=[state.keywords[kid] for kid in keyword_ids], reason=reason)


def from_descent(state: State, descent: Descent) -> SearchResult:
    """The search result of the agent's walk; keywords deleted meanwhile are left out."""
    live = [kid for kid in descent.keyword_ids if state.live_keyword(kid) is not None]
    if descent.status is DescentStatus.MATCHED and live:
        return matched(state, live[0], descent)
    if descent.status is DescentStatus.AMBIGUOUS and live:
        result = ambiguous(state, live, descent.reason)
    else:
        parent = descent.suggested_parent_id
        result = SearchResult(
            SearchStatus.NOT_FOUND,
            suggested_parent_id=parent if parent is not None and state.live_keyword(parent) is not None else ROOT_ID,
            suggested_name=descent.suggested_name or descent.query,
            reason=descent.reason or "missing",
        )
    result.rounds, result.trace = descent.rounds, descent.trace
    return result


def names_in_text(state: State, text: str) -> list[str]:
    """Ids of live keywords whose name or alias occurs in ``text`` as a run of up to five
    words (or, in CJK text, as a run of two to eight characters, or as a whole run of one
    character: "猫" alone names 猫, but 中 is not named by 中国); longest names first."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    found: dict[str, int] = {}

    def look(span: str) -> None:
        key = normalize_name(span)
        if key:
            for kid in state.lookup_names(key):
                if kid != ROOT_ID:
                    found[kid] = max(found.get(kid, 0), len(key))

    words = _WORD.findall(folded)
    for start in range(len(words)):
        for end in range(start + 1, min(start + MAX_NAME_WORDS, len(words)) + 1):
            look("".join(words[start:end]))
    for run in _CJK_RUN.findall(folded):
        for start in range(len(run)):
            for end in range(start + min(2, len(run)), min(start + 8, len(run)) + 1):
                look(run[start:end])
    return sorted(found, key=lambda kid: -found[kid])


def links_for_text(descent: Descent, named: list[str], limit: int) -> list[tuple[str, RelationType]]:
    """The links an info gets from the agent: the walk's match first, then the keywords named
    in its text, then the walk's ambiguous candidates; the first PRIMARY, the rest RELATED."""
    found: list[str] = []
    if descent.status is DescentStatus.MATCHED:
        found.extend(descent.keyword_ids)
    found.extend(named)
    if descent.status is DescentStatus.AMBIGUOUS:
        found.extend(descent.keyword_ids)
    ordered = list(dict.fromkeys(found))[:limit]
    return [(kid, RelationType.PRIMARY if i == 0 else RelationType.RELATED) for i, kid in enumerate(ordered)]
