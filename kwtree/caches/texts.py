"""The text the caches hold of each entity: what is embedded, what the full-text index holds,
and which entities changed after an index's watermark. Pure functions of the State."""

from __future__ import annotations

import hashlib

import numpy as np

from kwtree.engine.state import State
from kwtree.models import ROOT_ID, info_text

__all__ = ["EntityKey", "entity_text", "search_text", "versions_upto", "written_after"]

EntityKey = tuple[str, str]  # (kind, id)


def entity_text(state: State, kind: str, entity_id: str) -> str | None:
    """The text that is embedded for a live entity (None if it is not live): an info's
    content; a keyword's name, aliases and description."""
    if kind == "info":
        info = state.live_info(entity_id)
        return info.content if info is not None else None
    keyword = state.live_keyword(entity_id)
    if keyword is None or keyword.id == ROOT_ID:
        return None
    return " ".join([keyword.name, *keyword.aliases, keyword.description]).strip()


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


def versions_upto(state: State, watermark: str) -> np.ndarray:
    """Digests (sorted uint64) of the current version of every keyword and info that was
    written at or before ``watermark``: what a cache records beside its watermark, so that a
    later ``written_after`` can tell whether versions at or below it came in since (a git merge
    puts the other branch's operations below it, in op-id order; a branch switch brings older
    ones back)."""
    digests = [hashlib.blake2b(f"{kind}/{entity.id}/{entity.op_id}".encode(), digest_size=8).digest()
               for kind, entities in (("info", state.infos), ("keyword", state.keywords))
               for entity in entities.values() if entity.op_id <= watermark]
    return np.sort(np.frombuffer(b"".join(digests), dtype="<u8"))


def written_after(state: State, watermark: str | None, versions: np.ndarray | None = None) -> set[EntityKey]:
    """Every entity written after ``watermark`` (all of them when None), and the subtree of
    every keyword among them (a rename or move changes its descendants' paths). With the
    ``versions`` recorded at the watermark (``versions_upto``): all of them too when a version
    at or below it is not among those (the log holds operations below the watermark that the
    cache never saw)."""
    if watermark is not None and versions is not None:
        now = versions_upto(state, watermark)
        if not np.isin(now, versions, assume_unique=False).all():
            watermark = None
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
