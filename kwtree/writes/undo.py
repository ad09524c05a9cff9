"""Undo: a new operation that puts back the before-image of everything an operation wrote."""

from __future__ import annotations

import dataclasses

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, UndoConflictError
from kwtree.models import (
    ROOT_ID,
    Change,
    Entity,
    Info,
    Keyword,
    Link,
    Operation,
    Relation,
    entity_key,
)
from kwtree.writes.infos import retire_link, retire_relation

__all__ = ["check_consistent", "current_of", "undo"]


def current_of(state: State, entity: Entity) -> Entity | None:
    """The stored version (live or tombstone) of the entity ``entity`` is a version of."""
    if type(entity) is Keyword:
        return state.keywords.get(entity.id)
    if type(entity) is Info:
        return state.infos.get(entity.id)
    if type(entity) is Link:
        return state.links.get((entity.info_id, entity.keyword_id))
    return state.relations.get((entity.from_id, entity.to_id, entity.type))


def _restore(target: Entity, current: Entity, op_id: str, timestamp: float) -> Entity:
    version = current.version + 1
    if type(target) is Keyword or type(target) is Info:
        return dataclasses.replace(target, version=version, op_id=op_id, updated_at=timestamp)
    return dataclasses.replace(target, version=version, op_id=op_id)


def _same_state(a: Entity, b: Entity) -> bool:
    """Equal apart from bookkeeping (version, writer, update time, derived level)."""
    ignore = {"version", "op_id", "updated_at", "level"}
    return all(getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(a) if f.name not in ignore)


def undo(state: State, op: Operation, op_id: str, timestamp: float, force: bool) -> list[Change]:
    """Changes that restore every entity ``op`` wrote to its state before ``op``.

    Raises UndoConflictError when a later operation wrote one of them (unless ``force``),
    and InvalidInputError when the restored state would be inconsistent.
    """
    first: dict[str, Change] = {}
    for change in op.changes:
        first.setdefault(change.key, change)
    conflicts: dict[str, str] = {}
    changes: list[Change] = []
    for key, change in reversed(first.items()):
        current = current_of(state, change.after)
        if current is None:  # pragma: no cover - an applied operation's entities always exist
            raise InvalidInputError(f"cannot undo {op.op_id}: {key} is not in the state")
        if current.op_id != op.op_id:
            conflicts[key] = current.op_id
        before = change.before
        if before is None:
            if current.deleted:
                continue
            target = dataclasses.replace(current, deleted=True)
        else:
            target = before
        if _same_state(target, current):
            continue
        changes.append(Change(_restore(target, current, op_id, timestamp), current))
    if conflicts and not force:
        raise UndoConflictError(op.op_id, conflicts)
    changes = in_apply_order(state, _retire_dependents(state, changes, op_id) + changes)
    check_consistent(state, changes, f"cannot undo {op.op_id}")
    return changes


def in_apply_order(state: State, changes: list[Change]) -> list[Change]:
    """The changes ordered so that applying them one by one never passes through a state
    the reducer would repair: keywords that end live first, each after the parent it is
    restored under; then links, relations and infos; then keywords that end deleted,
    deepest first. (Undoing an operation backwards is not enough: after a forced undo of
    an earlier operation, a child's row can come before the row that revives its parent.)"""
    live: dict[str, Change] = {}  # the keywords that end live, and the parent each ends under
    parents: dict[str, str | None] = {}
    for c in changes:
        if type(c.after) is Keyword and not c.after.deleted:
            live[c.after.id] = c
            parents[c.after.id] = c.after.parent_id
    depth: dict[str | None, int] = {}

    def depth_in_result(kid: str | None) -> int:
        """Depth among the keywords this undo restores (a keyword outside them counts 0)."""
        path: list[str] = []
        while kid in parents and kid not in depth and kid not in path:  # (a cycle stops the walk;
            path.append(kid)  # check_consistent reports it)
            kid = parents[kid]
        below = depth.get(kid, 0)
        for node in reversed(path):
            below += 1
            depth[node] = below
        return below

    restored = [live[kid] for kid in sorted(live, key=depth_in_result)]
    deleted = [(c.after.id, c) for c in changes if type(c.after) is Keyword and c.after.deleted]
    deleted.sort(key=lambda pair: -state.keywords[pair[0]].level)
    others = [c for c in changes if type(c.after) is not Keyword]
    return [*restored, *others, *(c for _, c in deleted)]


def _retire_dependents(state: State, changes: list[Change], op_id: str) -> list[Change]:
    """Changes retiring the live links and relations of every keyword or info that ``changes``
    delete (later operations may have linked or related them), as ``delete_keyword`` and
    ``delete_info`` do; undoing this undo brings them back from their before-images."""
    written = {change.key for change in changes}
    retired: list[Change] = []

    def retire(change: Change) -> None:
        if change.key not in written:
            written.add(change.key)
            retired.append(change)

    for change in changes:
        after, before = change.after, change.before
        if not after.deleted or before is None or before.deleted:
            continue
        if type(after) is Keyword:
            for link in state.infos_by_keyword.get(after.id, {}).values():
                retire(retire_link(link, op_id))
            for rel in (*state.rel_out.get(after.id, {}).values(), *state.rel_in.get(after.id, {}).values()):
                retire(retire_relation(rel, op_id))
        elif type(after) is Info:
            for kid in state.keywords_by_info.get(after.id, ()):
                retire(retire_link(state.links[(after.id, kid)], op_id))
    return retired


def check_consistent(state: State, changes: list[Change], context: str) -> None:
    """Raise InvalidInputError unless applying ``changes`` leaves a consistent tree: the root
    live, every live keyword under a live parent with no cycle, no live children under a
    deleted keyword, and live links and relations only between live entities."""
    keywords: dict[str, Keyword] = {}
    infos: dict[str, Info] = {}
    for change in changes:
        after = change.after
        if type(after) is Keyword:
            keywords[after.id] = after
        elif type(after) is Info:
            infos[after.id] = after

    def keyword_live(kid: str) -> bool:
        found = keywords.get(kid) or state.keywords.get(kid)
        return found is not None and not found.deleted

    def parent_of(kid: str) -> str | None:
        found = keywords.get(kid) or state.keywords[kid]
        return found.parent_id

    for kid, keyword in keywords.items():
        if keyword.deleted:
            if kid == ROOT_ID:
                raise InvalidInputError(f"{context}: the root keyword cannot be deleted")
            live_children = [c for c in state.children.get(kid, ()) if keyword_live(c) and parent_of(c) == kid]
            if live_children:
                raise InvalidInputError(
                    f"{context}: keyword {keyword.name!r} ({kid}) would be deleted while it still has "
                    f"child keyword(s) {live_children} written by later operations; move or delete them first"
                )
            continue
        if kid == ROOT_ID:
            continue
        if keyword.parent_id is None or not keyword_live(keyword.parent_id):
            raise InvalidInputError(
                f"{context}: keyword {keyword.name!r} ({kid}) would return under {keyword.parent_id}, "
                f"which is no longer live"
            )
        seen = {kid}
        current: str | None = keyword.parent_id
        while current is not None:
            if current in seen:
                raise InvalidInputError(f"{context}: keyword {keyword.name!r} ({kid}) would become its own ancestor")
            seen.add(current)
            current = parent_of(current)
    for change in changes:
        after = change.after
        if after.deleted:
            continue
        if type(after) is Link:
            info = infos.get(after.info_id) or state.infos.get(after.info_id)
            if info is None or info.deleted or not keyword_live(after.keyword_id):
                raise InvalidInputError(
                    f"{context}: link {entity_key(after)} would join an entity that is no longer live")
        elif type(after) is Relation and not (keyword_live(after.from_id) and keyword_live(after.to_id)):
            raise InvalidInputError(
                f"{context}: relation {entity_key(after)} would join a keyword that is no longer live")
