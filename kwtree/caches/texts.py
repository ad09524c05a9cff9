"""The text the caches hold of each entity: what is embedded, what the full-text index holds,
and which entities changed after an index's watermark. Pure functions of the State."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable

import numpy as np

from kwtree.engine.state import State
from kwtree.models import ROOT_ID, Info, Keyword, info_text

__all__ = ["EntityKey", "entity_text", "search_text", "versions_hold", "versions_upto", "written_after"]

EntityKey = tuple[str, str]  # (kind, id)
#: Versions hashed by ``versions_upto`` before it lets other threads run. The pass over 100,000
#: entities (~0.15 s, the writer's scan at every open) otherwise held the interpreter until the
#: switch interval (5 ms) each time the first search after the open gave it up: that search's
#: CRC of hnsw.bin (42 reads and CRCs of 8 MB) took 0.25-0.28 s instead of 0.05 s.
_HASHED_PER_TURN = 1_000


def entity_text(state: State, kind: str, entity_id: str) -> str | None:
    """The text that is embedded for a live entity (None if it is not live): an info's
    content; a keyword's name, aliases and description."""
    return text_of(state.live_info(entity_id) if kind == "info" else state.live_keyword(entity_id))


def text_of(entity: Info | Keyword | None) -> str | None:
    """The text embedded for this version of an entity (``entity_text``); None for none, a
    deleted one or the root."""
    if entity is None or entity.deleted:
        return None
    if isinstance(entity, Info):
        return entity.content
    if entity.id == ROOT_ID:
        return None
    return " ".join([entity.name, *entity.aliases, entity.description]).strip()


def search_text(state: State, kind: str, entity_id: str) -> str | None:
    """What the full-text index holds for a live entity (None if it is not live): for an
    info, its content and abstract (``kwtree.models.info_text``); for a keyword, its text
    and path."""
    if kind == "info":
        info = state.live_info(entity_id)
        return info_text(info) if info is not None else None
    text = entity_text(state, kind, entity_id)
    if text is None:
        return None
    path = [state.keywords[node].name for node in state.ancestry(entity_id)[1:-1]]
    return " ".join([text, *path])


def versions_upto(state: State, watermark: str, keys: Iterable[EntityKey] | None = None) -> np.ndarray:
    """Digests (sorted uint64) of the current version of every keyword and info (of ``keys``,
    when given) that was written at or before ``watermark``: what a cache records beside its
    watermark, so that a later ``versions_hold`` can tell whether versions at or below it came
    in since (a git merge puts the other branch's operations below it, in op-id order; a branch
    switch brings older ones back)."""
    if keys is None:
        found: list[tuple[str, Info | Keyword]] = [
            *(("info", info) for info in state.infos.values()),
            *(("keyword", keyword) for keyword in state.keywords.values())]
    else:
        found = [(kind, entity) for kind, entity_id in keys
                 if (entity := (state.infos if kind == "info" else state.keywords).get(entity_id)) is not None]
    digests: list[bytes] = []
    for start in range(0, len(found), _HASHED_PER_TURN):
        digests += [hashlib.blake2b(f"{kind}/{entity.id}/{entity.op_id}".encode(), digest_size=8).digest()
                    for kind, entity in found[start : start + _HASHED_PER_TURN] if entity.op_id <= watermark]
        time.sleep(0)  # let a waiting thread (the first search after an open) take the interpreter
    return np.sort(np.frombuffer(b"".join(digests), dtype="<u8"))


def versions_hold(state: State, watermark: str, recorded: np.ndarray) -> bool:
    """Whether every current version written at or before ``watermark`` is among the versions
    ``recorded`` there (``versions_upto``): False when the log holds operations below the
    watermark that the cache never saw."""
    return bool(np.isin(versions_upto(state, watermark), recorded).all())


def written_after(state: State, watermark: str | None) -> set[EntityKey]:
    """Every entity written after ``watermark`` (all of them when None), and the subtree of
    every keyword among them (a rename or move changes its descendants' paths)."""
    changed: set[EntityKey] = set()
    for info in state.infos.values():
        if watermark is None or info.op_id > watermark:
            changed.add(("info", info.id))
    for keyword in state.keywords.values():
        if keyword.id != ROOT_ID and (watermark is None or keyword.op_id > watermark):
            changed.add(("keyword", keyword.id))
            if watermark is not None and not keyword.deleted and state.children.get(keyword.id):
                changed.update(("keyword", kid) for kid in state.subtree(keyword.id))
    return changed
