"""Keyword abstracts as signposts: a query that matches what a keyword's abstract says leads
to that keyword's memories, even those whose own text shares no word with the query.

- **Which keywords.** Those whose metadata holds an abstract (``ABSTRACT_KEY``, written by
  ``KeywordTree.abstracts``), inside the read's scopes when it has some. The abstract is used
  as stored: a stale one (its subtree changed since) still points at the right keyword, and
  deciding staleness would cost a walk of each subtree on every recall; ``abstracts()`` says
  which are stale and rebuilds them. The stored abstracts' terms are indexed on the first
  recall after a write (one pass over the keywords), so a recall judges only the abstracts
  sharing a term with the query.
- **The signpost's score** is ``relevance.coverage``: the share of the query's weight (its
  terms weighted by rarity, names heavier) that the abstract and overview cover, the very
  measure of the relevance floor. Below ``SIGNPOST_FLOOR`` (full cover) a keyword is no
  signpost.
- **Expansion.** The infos of the ``SIGNPOST_SOURCES`` best signposts' subtrees (at most
  ``INFOS_PER_SIGNPOST`` each) join recall's candidates.
- **Propagation.** An info's ``parent`` is the best signpost score among the keywords it is
  linked to (inside the scopes) and their ancestors, halved per level down (recall's
  ``DESCENT_DECAY``). Its score becomes ``alpha * child + (1 - alpha) * parent`` when that is
  higher than ``child``, its score without signposts (``alpha`` is
  ``RecallWeights.signpost_alpha``; 1 turns signposts off): a signpost lifts, never lowers,
  so an info that ranks well on its own text is not pulled down by a weak signpost above
  it. Its relevance for the floor is at least ``parent``: it was found by what its keyword's
  abstract says.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from kwtree.engine.state import State
from kwtree.memory_schema import ABSTRACT_KEY, ABSTRACT_OVERVIEW, ABSTRACT_TEXT
from kwtree.models import ROOT_ID
from kwtree.retrieval.relevance import QueryTerms, coverage, terms_of

__all__ = ["SIGNPOST_FLOOR", "expansion", "lift", "signpost_scores"]

#: A keyword whose abstract covers less than this share of the query's weight is no signpost:
#: 1.0, an abstract that covers the query as fully as ``relevance`` counts (its heaviest terms).
#: Partial matches lifted whole sessions over better turns on LoCoMo (bench/abstracts.py:
#: R@10 -2.5 at 0.35, -1.2 at 0.8, -0.3 at 1.0; R@5 +0.5 throughout).
SIGNPOST_FLOOR = 1.0
#: The infos of this many best signposts join the candidates, at most this many each.
SIGNPOST_SOURCES = 3
INFOS_PER_SIGNPOST = 50


class _Abstracts:
    """The stored abstracts of one State version: each keyword's two texts, and the keywords
    each term appears in (so a recall judges only the abstracts sharing a term with it)."""

    __slots__ = ("key", "postings", "texts")

    def __init__(self, state: State, key: tuple[int, int, str | None]) -> None:
        self.key = key
        self.texts: dict[str, tuple[str, str]] = {}
        self.postings: dict[str, list[str]] = {}
        keywords = state.keywords
        for kid in state.abstracted:
            keyword = keywords[kid]
            stored = keyword.metadata[ABSTRACT_KEY]
            if keyword.deleted or kid == ROOT_ID or not isinstance(stored, Mapping):
                continue
            texts = (str(stored.get(ABSTRACT_TEXT, "")), str(stored.get(ABSTRACT_OVERVIEW, "")))
            self.texts[kid] = texts
            for term in terms_of(texts[0]) | terms_of(texts[1]):
                self.postings.setdefault(term, []).append(kid)


_last: list[_Abstracts] = []  # the abstracts of the State version read last (one: the current tree's)
_last_lock = threading.Lock()


def _abstracts_of(state: State) -> _Abstracts:
    """The stored abstracts of ``state`` as it is now, built on the first read after a write
    from the keywords that hold one (the caller holds the state lock)."""
    key = (id(state), state.op_count, state.last_op_id)
    with _last_lock:
        if _last and _last[0].key == key:
            return _last[0]
    found = _Abstracts(state, key)
    with _last_lock:
        _last[:] = [found]
    return found


def signpost_scores(state: State, query: QueryTerms | None, scope: set[str] | None) -> dict[str, float]:
    """Each live keyword (inside ``scope``) whose stored abstract and overview cover at least
    ``SIGNPOST_FLOOR`` of ``query``'s weight, with that share."""
    if query is None or query.total <= 0:
        return {}
    abstracts = _abstracts_of(state)
    if not abstracts.texts:
        return {}
    found: dict[str, float] = {}
    for kid in {kid for word in query.weights for kid in abstracts.postings.get(word, ())}:
        if scope is not None and kid not in scope:
            continue
        score = coverage(query, abstracts.texts[kid])
        if score >= SIGNPOST_FLOOR:
            found[kid] = score
    return found


def expansion(state: State, scores: dict[str, float]) -> list[str]:
    """The infos the best signposts lead to: of each of the ``SIGNPOST_SOURCES`` best, the
    infos of its subtree, its own first, at most ``INFOS_PER_SIGNPOST``."""
    found: dict[str, None] = {}
    for kid, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:SIGNPOST_SOURCES]:
        taken = 0
        for node in state.subtree(kid):
            for iid in state.infos_by_keyword.get(node, ()):
                if taken == INFOS_PER_SIGNPOST:
                    break
                found[iid] = None
                taken += 1
    return list(found)


def lift(child: float, parents: Iterable[float], alpha: float) -> tuple[float, float]:
    """``(score, parent)``: the best of ``parents`` (the signpost scores reaching the info) and
    the score it gives, ``alpha * child + (1 - alpha) * parent`` when higher than ``child``."""
    parent = max(parents, default=0.0)
    return max(child, alpha * child + (1 - alpha) * parent), parent
