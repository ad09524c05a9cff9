"""The offline navigator: descend-loop decisions from lexical similarity, no model, no network.

It makes the decisions an LLM would make from the same rounds, using the relevance the loop
computed for the query over the whole tree (see ``lexicon``):

- search: a candidate whose name matches the query at least ``MATCH_THRESHOLD`` (or whose
  name or alias is within typing distance, ``TYPO_THRESHOLD``) is matched; several equally
  good ones are matched together (ambiguous). If the best match lies below a candidate, it
  jumps there. With no match it heads for the keyword the query would be placed under and
  answers missing there, so the result suggests a parent.
- suggest_parent: it heads for the keyword with the best parent score and matches it when it
  is shown; below ``PARENT_THRESHOLD`` nothing fits and it answers missing (current path).
"""

from __future__ import annotations

from typing import Any

from kwtree.agent.lexicon import char_similarity
from kwtree.agent.navigation import RoundKeyword, RoundRequest

__all__ = ["MATCH_THRESHOLD", "PARENT_THRESHOLD", "TYPO_THRESHOLD", "OfflineNavigator"]

MATCH_THRESHOLD = 0.75
TYPO_THRESHOLD = 0.6
PARENT_THRESHOLD = 0.1
#: Candidates within this much of the best match are matched together.
TIE_MARGIN = 0.02


class OfflineNavigator:
    """Decides rounds from the request's lexical relevance; deterministic."""

    name = "offline"

    def decide(self, request: RoundRequest) -> dict[str, Any]:
        if request.intent == "search":
            return self._search(request)
        return self._place(request)

    def usage(self) -> dict[str, int]:
        return {}

    def _place(self, request: RoundRequest) -> dict[str, Any]:
        score, target = request.relevance.best_parent()
        if target is None or score < PARENT_THRESHOLD:
            return _missing(request, "no keyword resembles it")
        return self._head_for(request, target, f"parent score {score:.2f}", match=True)

    def _search(self, request: RoundRequest) -> dict[str, Any]:
        relevance = request.relevance
        score, target = relevance.best_match()
        typo_score, typo = _closest_spelling(request)
        if typo is not None and typo_score >= TYPO_THRESHOLD and typo_score >= score:
            return {"action": "match", "idx": typo.idx, "reason": f"spelled like {typo.name!r} ({typo_score:.2f})"}
        if target is not None and score >= MATCH_THRESHOLD:
            floor = max(MATCH_THRESHOLD, score - TIE_MARGIN)
            strong = [c.idx for c in request.candidates if relevance.match.get(c.id, 0.0) >= floor]
            if len(strong) == 1:
                return {"action": "match", "idx": strong[0], "reason": f"name matches ({score:.2f})"}
            if strong:
                return {"action": "match", "idxs": strong, "reason": f"{len(strong)} names match equally"}
            return self._head_for(request, target, f"name match {score:.2f} below", match=True)
        parent_score, parent = relevance.best_parent()
        if parent is None or parent_score < PARENT_THRESHOLD or parent == request.current_id:
            return _missing(request, "no keyword names it")
        return self._head_for(request, parent, f"it would belong under parent score {parent_score:.2f}", match=False)

    def _head_for(self, request: RoundRequest, target: str, why: str, *, match: bool) -> dict[str, Any]:
        """Match ``target`` if shown (when ``match``), else jump to the deepest shown candidate
        on its path; missing when none is shown."""
        relevance = request.relevance
        path = relevance.parent_path if request.intent == "suggest_parent" or not match else relevance.match_path
        on_path: list[RoundKeyword] = []
        for candidate in request.candidates:
            if candidate.id == target:
                if match:
                    return {"action": "match", "idx": candidate.idx, "reason": why}
                on_path.append(candidate)
            elif candidate.has_children and candidate.id in path:
                on_path.append(candidate)
        if not on_path:
            return _missing(request, f"{why}, not among these candidates")
        deepest = max(on_path, key=lambda c: c.level)
        return {"action": "jump", "idx": deepest.idx, "reason": f"{why} under {deepest.name!r}"}


def _closest_spelling(request: RoundRequest) -> tuple[float, RoundKeyword | None]:
    best: tuple[float, RoundKeyword | None] = (0.0, None)
    query = request.query
    if len(query) > 64:  # a text, not a name: spelling says nothing
        return best
    for candidate in request.candidates:
        for name in (candidate.name, *candidate.aliases):
            if not 0.75 <= len(name) / len(query) <= 1.34:  # a typo changes a name's length little
                continue
            score = char_similarity(query, name)
            if score > best[0]:
                best = (score, candidate)
    return best


def _missing(request: RoundRequest, why: str) -> dict[str, Any]:
    return {"action": "missing", "suggest_name": request.query, "reason": why}
