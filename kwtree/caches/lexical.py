"""Full-text scores that are a function of the texts alone, so that a ranking never depends on
how the index happens to be laid out.

tantivy's BM25 reads its statistics from its segments: a document replaced or deleted still
counts in its terms' document frequencies and in the average length until a background merge
drops it, and when merges run depends on thread timing. Two builds of the same memory (or
one tree before and after a merge) then scored the same text differently: 75 of the 324
rankings of the updates benchmark differed between two identical runs. ``bm25`` scores the
documents the index found again, with what does not depend on the layout: the number of live
documents and how many of them hold each term (``FullTextIndex.count`` and ``matching``
count live documents only), each document's own terms, and a fixed reference length in
place of the corpus's average. Equal scores come in text order, then id order.

Imports the ground floor only.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

from kwtree.normalize import terms

__all__ = ["K1", "REFERENCE_LENGTH", "B", "bm25", "idf"]

#: BM25's term-frequency saturation and length normalisation (tantivy's and Lucene's defaults).
K1 = 1.2
B = 0.75
#: The document length (in terms) that BM25's length normalisation treats as average. A
#: constant rather than the corpus's mean, which the index cannot give without its deleted
#: documents; memories and conversation turns are short (LoCoMo's turns: median 14 terms).
REFERENCE_LENGTH = 14.0
_CACHED_TEXTS = 1 << 16


def idf(documents: int, frequency: int) -> float:
    """BM25's inverse document frequency of a term held by ``frequency`` of ``documents``."""
    return math.log(1 + (max(documents - frequency, 0) + 0.5) / (frequency + 0.5))


@lru_cache(maxsize=_CACHED_TEXTS)
def _bag(text: str) -> tuple[Counter[str], int]:
    found = terms(text, cjk_singles=True)  # as FullTextIndex.upsert indexes it
    return Counter(found), len(found)


def bm25(query: str, frequencies: Callable[[list[str]], tuple[int, list[int]]],
         texts: Sequence[tuple[str, str]]) -> list[tuple[str, float]]:
    """Each ``(entity id, text)`` of ``texts`` with its BM25 score for the terms of ``query``,
    best first, equal scores in text then id order (texts holding none of them score 0);
    ``frequencies(terms)`` gives how many live documents there are and how many hold each."""
    words = list(dict.fromkeys(terms(query)))
    documents, counts = frequencies(words)
    weights = {word: idf(documents, frequency) for word, frequency in zip(words, counts, strict=True)}
    scored = []
    for entity_id, text in texts:
        bag, length = _bag(text)
        norm = K1 * (1 - B + B * length / REFERENCE_LENGTH)
        score = sum(weight * bag[word] * (K1 + 1) / (bag[word] + norm)
                    for word, weight in weights.items() if bag[word])
        scored.append((-score, text, entity_id))
    scored.sort()
    return [(entity_id, -negative) for negative, _, entity_id in scored]
