"""The text the caches hold of each entity: what is embedded, what the full-text index holds,
and which entities changed after an index's watermark. Pure functions of the State."""

from __future__ import annotations

from kwtree.engine.state import State
from kwtree.models import ROOT_ID, info_text

__all__ = ["EntityKey", "entity_text", "search_text", "written_after"]

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
