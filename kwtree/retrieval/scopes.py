"""Scopes: whose memories a read may see.

A scope names a subtree of the tree: ``"user:alice"``, ``"agent:coder"``, ``"run:42"``, or a
path of them joined by ``/`` (``"user:alice/run:42"``, a run of alice's). Each segment is
``kind:name``: the kind a lowercase word (letters, digits, ``_``, ``-``; at most 32
characters) and the name any text without ``/``, control characters or surrounding
whitespace. The scope ``"user:alice"`` lives in the keyword named ``user:alice`` under the
root whose metadata ``{"scope": "user:alice"}`` marks it; ``"user:alice/run:42"`` in the
keyword ``run:42`` under it marked ``{"scope": "user:alice/run:42"}``. The marker, not the
name, makes a keyword a scope: a keyword a user names ``user:alice`` is just a keyword.

A read with ``scope=`` sees the live subtrees of the scopes it names (and of the scopes nested
in them) and nothing else; a scope that does not exist yet holds nothing.

History (``operations_inside``) judges each operation against the tree as it was around it:
a change is inside when the entity it wrote was inside the scopes just before the operation
or just after it — a keyword by its place in the tree, a link by its keyword, an info by
its live links, a relation when both its ends are. So a keyword moved out of a scope shows
its move in both scopes' histories (and nothing after), a merge across scopes shows each
scope its own side (the source's tombstone and unlinks in one, the new links in the other),
and an undo is an operation like any other, judged by what it rewrote.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kwtree.engine.state import State, apply
from kwtree.errors import InvalidInputError
from kwtree.memory_schema import SCOPE_KEY
from kwtree.models import ROOT_ID, Change, Info, Keyword, Link, Operation, Relation
from kwtree.normalize import normalize_name
from kwtree.validate import check_unicode, shown

__all__ = [
    "clean_scope", "clean_scopes", "operations_inside", "scope_keyword", "scope_members",
    "scope_specs", "scope_subtree", "segments", "writes_outside",
]

#: At most this many segments in one scope path, and this many scopes in one read.
MAX_DEPTH = 8
MAX_SCOPES = 64
_SEGMENT = re.compile(r"[a-z][a-z0-9_-]{0,31}:[^/\x00-\x1f\x7f]{1,200}")


def clean_scope(scope: object, field: str = "scope") -> str:
    """``scope`` checked (see the module's docstring), as written; InvalidInputError naming
    ``field`` and what is wrong otherwise."""
    if not isinstance(scope, str):
        raise InvalidInputError(f"{field} must be a string such as 'user:alice', got {shown(scope)}")
    check_unicode(scope, field)
    parts = scope.split("/")
    if len(parts) > MAX_DEPTH:
        raise InvalidInputError(f"{field} {shown(scope)} nests {len(parts)} scopes; at most {MAX_DEPTH}")
    for part in parts:
        name = part.split(":", 1)[-1]
        if not _SEGMENT.fullmatch(part) or not name.strip() or name != name.strip():
            raise InvalidInputError(
                f"{field} {shown(scope)}: each part must be kind:name, the kind a lowercase word "
                f"(a-z, 0-9, _ or -) and the name non-empty text without '/' or control characters "
                f"(e.g. 'user:alice' or 'user:alice/run:42'); {shown(part)} is not"
            )
    return scope


def clean_scopes(scope: object, field: str = "scope") -> tuple[str, ...] | None:
    """None for no scope (every memory), else the scopes of ``scope`` (one string or a list
    or tuple of them), checked and without repeats."""
    if scope is None:
        return None
    if isinstance(scope, str):
        return (clean_scope(scope, field),)
    if not isinstance(scope, (list, tuple)):
        raise InvalidInputError(f"{field} must be a scope string or a list of them, got {shown(scope)}")
    if not scope:
        raise InvalidInputError(f"{field} must name at least one scope (None reads every scope)")
    if len(scope) > MAX_SCOPES:
        raise InvalidInputError(f"{field} names {len(scope)} scopes; at most {MAX_SCOPES}")
    return tuple(dict.fromkeys(clean_scope(one, f"{field}[{i}]") for i, one in enumerate(scope)))


def segments(scope: str) -> list[str]:
    """The scope paths from the outermost down to ``scope``: ``"user:a/run:1"`` gives
    ``["user:a", "user:a/run:1"]``."""
    parts = scope.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def scope_keyword(state: State, scope: str) -> Keyword | None:
    """The live keyword that holds ``scope`` (a checked path), or None while it does not exist."""
    parent = ROOT_ID
    found: Keyword | None = None
    for path in segments(scope):
        name = path.rsplit("/", 1)[-1]
        found = None
        for kid in state.lookup_names(normalize_name(name)):
            keyword = state.keywords[kid]
            if keyword.parent_id == parent and keyword.metadata.get(SCOPE_KEY) == path:
                found = keyword
                break
        if found is None:
            return None
        parent = found.id
    return found


def scope_specs(scope: str, find: Callable[[str], Keyword | None]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """How ``scope`` (a checked path) is created: the ``batch_create_keywords`` specs of its
    keywords still missing, outermost first (each named for its segment, marked ``{SCOPE_KEY:
    path}``, its ``ref`` that path), and the parent field of what goes inside the scope
    (``{"parent_id": id}`` of its keyword when that exists, else ``{"parent_ref": scope}``).
    ``find`` gives the live keyword holding a path, as ``scope_keyword`` does, so a write
    creates or reuses the keyword a scoped read will look in. The only place that says what
    makes a scope's keywords: the memory commit and the tools' create both write these specs."""
    specs: list[dict[str, Any]] = []
    parent: dict[str, str] = {"parent_id": ROOT_ID}
    for path in segments(scope):
        existing = find(path)
        if existing is not None:
            parent = {"parent_id": existing.id}
            continue
        specs.append({"name": path.rsplit("/", 1)[-1], "metadata": {SCOPE_KEY: path}, "ref": path, **parent})
        parent = {"parent_ref": path}
    return specs, parent


def scope_subtree(state: State, scopes: Iterable[str]) -> set[str]:
    """Ids of the live keywords inside any of ``scopes`` (checked paths); empty when none exists."""
    inside: set[str] = set()
    for scope in scopes:
        keyword = scope_keyword(state, scope)
        if keyword is not None and keyword.id not in inside:
            inside.update(state.subtree(keyword.id))
    return inside


def scope_members(state: State, scopes: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """The live infos linked (live) to a keyword inside any of ``scopes``, and those live
    keywords: what a scoped read searches (its term statistics are theirs too)."""
    keywords = frozenset(scope_subtree(state, scopes))
    infos = frozenset(iid for kid in keywords for iid in state.infos_by_keyword.get(kid, ())
                      if state.live_info(iid) is not None)
    return infos, keywords


def _linked_inside(state: State, info_id: str, inside: set[str]) -> bool:
    return any(kid in inside for kid in state.keywords_by_info.get(info_id, ()))


def _change_inside(change: Change, linked_before: set[str], after: State, was: set[str], now: set[str]) -> bool:
    entity = change.after
    kind = type(entity)
    if kind is Keyword:
        return entity.id in was or entity.id in now  # type: ignore[union-attr]
    if kind is Link:
        return entity.keyword_id in was or entity.keyword_id in now  # type: ignore[union-attr]
    if kind is Info:
        iid = entity.id  # type: ignore[union-attr]
        return iid in linked_before or _linked_inside(after, iid, now)
    if kind is Relation:
        ends = (entity.from_id, entity.to_id)  # type: ignore[union-attr]
        return all(end in was or end in now for end in ends)
    return False


def operations_inside(operations: Iterable[Operation], scopes: tuple[str, ...]) -> list[Operation]:
    """Of ``operations`` (a whole history, oldest first, as ``read_history`` returns it), those
    that wrote something inside ``scopes`` (see the module's docstring), each with only its
    changes inside; its audit is kept only when every change is inside (an audit may
    describe the rest). The history is replayed into a scratch State (the one reducer) to
    know where each entity was: this reads the whole log."""
    state = State()
    inside = scope_subtree(state, scopes)
    kept: list[Operation] = []
    for op in operations:
        was = inside
        linked_before = {change.after.id for change in op.changes
                         if isinstance(change.after, Info) and _linked_inside(state, change.after.id, was)}
        apply(state, op)
        if any(type(change.after) is Keyword for change in op.changes):
            inside = scope_subtree(state, scopes)
        changes = tuple(change for change in op.changes if _change_inside(change, linked_before, state, was, inside))
        if changes:
            audit = op.audit if len(changes) == len(op.changes) else None
            kept.append(Operation(op.op_id, op.kind, op.actor, op.timestamp, changes, audit))
    return kept


def writes_outside(state: State, changes: Sequence[Change], scopes: tuple[str, ...]) -> str | None:
    """The key of the first of ``changes`` (about to be applied to ``state``) that writes
    something outside ``scopes``, or None when all stay inside, before and after: a keyword
    inside now and put (back) under a parent inside; a memory, when live now, filed only inside;
    a link to a keyword inside now and after, of a memory filed only inside; a relation with both
    ends inside now and after. A scope's own keyword stays inside while its parent is unchanged."""
    now = scope_subtree(state, scopes)
    tops = {keyword.id for keyword in (scope_keyword(state, scope) for scope in scopes) if keyword is not None}
    moved = {change.after.id: change.after for change in changes if type(change.after) is Keyword}

    def after(keyword_id: str, depth: int = 0) -> bool:
        keyword = moved.get(keyword_id)
        if keyword is None:
            return keyword_id in now
        if keyword.deleted or depth > len(moved):  # (a cycle the consistency check refuses anyway)
            return False
        was = state.keywords.get(keyword_id)
        if keyword_id in tops and was is not None and was.parent_id == keyword.parent_id:
            return True
        return keyword.parent_id is not None and after(keyword.parent_id, depth + 1)

    def wholly(info_id: str) -> bool:
        return all(kid in now for kid in state.keywords_by_info.get(info_id, ()))

    for change in changes:
        entity, before = change.after, change.before
        live_before = before is not None and not before.deleted
        if isinstance(entity, Keyword):
            ok = (not live_before or entity.id in now) and (entity.deleted or after(entity.id))
        elif isinstance(entity, Info):
            ok = state.live_info(entity.id) is None or wholly(entity.id)
        elif isinstance(entity, Link):
            ok = ((not live_before or entity.keyword_id in now) and (entity.deleted or after(entity.keyword_id))
                  and (state.live_info(entity.info_id) is None or wholly(entity.info_id)))
        elif isinstance(entity, Relation):
            ends = (entity.from_id, entity.to_id)
            ok = (not live_before or all(end in now for end in ends)) and (entity.deleted or all(map(after, ends)))
        else:
            ok = False
        if not ok:
            return change.key
    return None
