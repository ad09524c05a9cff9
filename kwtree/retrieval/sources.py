"""A memory stands for the turns it came from: recall spends no second place on the same
evidence.

The memory pipeline keeps a conversation's turns as infos and writes each extracted memory
with ``SOURCES`` in its metadata: the ids of the turn infos it was extracted from. A memory
and its source turn say the same thing, and a query that matches one matches the other, so
without care half of the ``k`` places go to pairs. ``collapse`` walks the ranking best first
and leaves out a hit whose evidence is already returned: a turn that a memory among the hits
was extracted from (the memory takes the turn's place), or a memory whose source turns (all
of them) are already there through better memories. The caller finds a returned memory's turns by their ids in its
``SOURCES``. Infos without ``SOURCES`` stand for themselves, so a tree not written by the
pipeline ranks as before.

Imports the ground floor only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kwtree.memory_schema import SOURCES
from kwtree.models import Hit

__all__ = ["OVERFETCH", "collapse"]

#: Recall ranks this many times ``k`` hits before collapsing them to ``k``.
OVERFETCH = 3


def _stands_for(hit: Hit) -> set[str]:
    found = hit.info.metadata.get(SOURCES)
    if isinstance(found, list) and found and all(isinstance(source, str) for source in found):
        return set(found)
    return {hit.info.id}


def collapse(hits: Sequence[Hit], k: int) -> list[Hit]:
    """The best ``k`` of ``hits`` (best first), leaving out each hit whose evidence (its
    ``SOURCES``, else itself) the hits kept before it already cover. A memory takes the
    place of the best of its source turns: the turn is left out for it, and it takes the
    turn's score when that is higher, so the hits stay in score order (the distilled memory,
    with its date and abstract, is what a reader wants; the turn is one id away in its
    ``SOURCES``)."""
    memory_of: dict[str, Hit] = {}  # turn id -> the best memory among the hits drawn from it
    for hit in hits:
        if hit.info.metadata.get(SOURCES) is not None:
            for turn in _stands_for(hit) - {hit.info.id}:
                memory_of.setdefault(turn, hit)
    kept: list[Hit] = []
    covered: set[str] = set()
    for hit in hits:
        memory = memory_of.get(hit.info.id)
        if memory is not None and memory.score < hit.score:  # in the turn's place, at the turn's score
            memory = dataclasses.replace(memory, score=hit.score, keywords=list(memory.keywords))
        hit = memory or hit
        evidence = _stands_for(hit)
        if evidence <= covered or hit.info.id in covered:
            continue
        kept.append(hit)
        covered |= evidence | {hit.info.id}
        if len(kept) == k:
            break
    return kept
