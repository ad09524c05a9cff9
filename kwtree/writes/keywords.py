"""Keyword writes: create, update, aliases, move, merge, delete and batch create."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from kwtree.engine.state import State
from kwtree.errors import (
    CycleError,
    DuplicateKeywordError,
    HasChildrenError,
    InvalidInputError,
    KwtreeError,
    NotFoundError,
    VersionConflictError,
)
from kwtree.models import (
    EMPTY_METADATA,
    INFO_POLICIES,
    ROOT_ID,
    Change,
    Keyword,
    Link,
    Relation,
    RelationType,
)
from kwtree.normalize import normalize_name
from kwtree.validate import (
    check_patch,
    clean_aliases,
    clean_choice,
    clean_flag,
    clean_int,
    clean_metadata,
    clean_name_key,
    clean_text,
    shown,
)
from kwtree.writes import Stamp, name_in_message, new_ids, require_keyword
from kwtree.writes.abstracts import check_user_metadata
from kwtree.writes.infos import retire_link, retire_relation

__all__ = [
    "INFO_POLICIES",
    "KEYWORD_PATCH_FIELDS",
    "add_alias",
    "batch_create_keywords",
    "create_keyword",
    "delete_keyword",
    "merge_keywords",
    "move_keyword",
    "remove_alias",
    "update_keyword",
]

KEYWORD_PATCH_FIELDS = ("name", "aliases", "description", "metadata")
_SPEC_FIELDS = frozenset({"name", "aliases", "description", "metadata", "parent_id", "parent_ref", "ref"})


def _label(keyword: Keyword) -> str:
    return "the root" if keyword.id == ROOT_ID else f"keyword {keyword.name!r} ({keyword.id})"


def _revise(keyword: Keyword, stamp: Stamp, **fields: Any) -> Keyword:
    """The next version of ``keyword`` written by ``stamp``'s operation."""
    return dataclasses.replace(
        keyword, version=keyword.version + 1, updated_at=stamp.timestamp, op_id=stamp.op_id, **fields
    )


def _check_unique_sibling(state: State, parent: Keyword, key: str, exclude: str | None = None) -> None:
    """Raise DuplicateKeywordError if a live child of ``parent`` has a name whose normalised
    key is ``key`` (an alias with that key does not count)."""
    for kid in state.lookup_names(key):
        other = state.keywords[kid]
        if kid != exclude and other.parent_id == parent.id and normalize_name(other.name) == key:
            raise DuplicateKeywordError(
                f"{_label(parent)} already has a child named {other.name!r} ({kid}); "
                f"use that keyword, or choose another name",
                kid,
            )


def _new_keyword(
    stamp: Stamp, kid: str, name: str, parent: Keyword, aliases: tuple[str, ...], description: str, metadata: Any
) -> Keyword:
    ts = stamp.timestamp
    return Keyword(kid, name, aliases, parent.id, description, metadata, 1, ts, ts, False, stamp.op_id,
                   parent.level + 1)


def create_keyword(
    state: State,
    stamp: Stamp,
    name: object,
    parent_id: object,
    aliases: object,
    description: object,
    metadata: object,
) -> list[Change]:
    name, key = clean_name_key(name)
    cleaned_aliases = clean_aliases(aliases, key)
    description = clean_text(description, "description", allow_empty=True)
    cleaned_metadata = check_user_metadata(clean_metadata(metadata))
    parent = require_keyword(state, ROOT_ID if parent_id is None else parent_id, "parent_id")
    _check_unique_sibling(state, parent, key)
    (kid,) = new_ids(1)
    return [Change(_new_keyword(stamp, kid, name, parent, cleaned_aliases, description, cleaned_metadata), None)]


def update_keyword(state: State, stamp: Stamp, keyword_id: object, patch: object, version: object) -> list[Change]:
    keyword = require_keyword(state, keyword_id)
    patch = check_patch(patch, KEYWORD_PATCH_FIELDS, "use move_keyword to change the parent")
    expected = clean_int(version, "version", 1)
    if keyword.id == ROOT_ID and ("name" in patch or "aliases" in patch):
        raise InvalidInputError("the root keyword cannot be renamed or given aliases")
    name, key = keyword.name, normalize_name(keyword.name)
    if "name" in patch:
        name, new_key = clean_name_key(patch["name"])
        if new_key != key:
            assert keyword.parent_id is not None  # only the root has none, and its rename was refused above
            _check_unique_sibling(state, state.keywords[keyword.parent_id], new_key, exclude=keyword.id)
        key = new_key
    aliases = clean_aliases(patch.get("aliases", keyword.aliases), key)
    description = (
        clean_text(patch["description"], "description", allow_empty=True)
        if "description" in patch
        else keyword.description
    )
    metadata = check_user_metadata(clean_metadata(patch["metadata"]), keyword) if "metadata" in patch \
        else keyword.metadata
    if expected != keyword.version:
        raise VersionConflictError(keyword.id, expected, keyword.version)
    new = _revise(keyword, stamp, name=name, aliases=aliases, description=description, metadata=metadata)
    return [Change(new, keyword)]


def add_alias(state: State, stamp: Stamp, keyword_id: object, alias: object) -> list[Change]:
    keyword = require_keyword(state, keyword_id)
    if keyword.id == ROOT_ID:
        raise InvalidInputError("the root keyword cannot be given aliases")
    alias, key = clean_name_key(alias, "alias")
    if key == normalize_name(keyword.name) or any(normalize_name(a) == key for a in keyword.aliases):
        return []
    return [Change(_revise(keyword, stamp, aliases=(*keyword.aliases, alias)), keyword)]


def remove_alias(state: State, stamp: Stamp, keyword_id: object, alias: object) -> list[Change]:
    keyword = require_keyword(state, keyword_id)
    key = clean_name_key(alias, "alias")[1]
    kept = tuple(a for a in keyword.aliases if normalize_name(a) != key)
    if len(kept) == len(keyword.aliases):
        raise NotFoundError(f"{_label(keyword)} has no alias {alias!r}; its aliases are {list(keyword.aliases)}")
    return [Change(_revise(keyword, stamp, aliases=kept), keyword)]


def move_keyword(state: State, stamp: Stamp, keyword_id: object, new_parent_id: object) -> list[Change]:
    keyword = require_keyword(state, keyword_id)
    if keyword.id == ROOT_ID:
        raise InvalidInputError("the root keyword cannot be moved")
    parent = require_keyword(state, new_parent_id, "new_parent_id")
    if parent.id == keyword.parent_id:
        return []
    if state.is_descendant(parent.id, keyword.id):
        where = "itself" if parent.id == keyword.id else f"its descendant {_label(parent)}"
        raise CycleError(f"cannot move {_label(keyword)} under {where}")
    _check_unique_sibling(state, parent, normalize_name(keyword.name), exclude=keyword.id)
    return [Change(_revise(keyword, stamp, parent_id=parent.id, level=parent.level + 1), keyword)]


def merge_keywords(state: State, stamp: Stamp, src_id: object, dst_id: object) -> list[Change]:
    src = require_keyword(state, src_id, "src_id")
    dst = require_keyword(state, dst_id, "dst_id")
    if src.id == dst.id:
        raise InvalidInputError("src_id and dst_id name the same keyword")
    if ROOT_ID in (src.id, dst.id):
        raise InvalidInputError("the root keyword cannot be merged")
    if state.is_descendant(dst.id, src.id):
        raise CycleError(
            f"cannot merge {_label(src)} into its descendant {_label(dst)}: its children would move "
            f"under their own descendant; move {_label(dst)} out of the subtree first"
        )
    changes = [
        Change(_revise(child, stamp, parent_id=dst.id, level=dst.level + 1), child)
        for child in (state.keywords[cid] for cid in state.children.get(src.id, ()))
    ]
    ts = stamp.timestamp
    for info_id, link in list(state.infos_by_keyword.get(src.id, {}).items()):
        changes.append(retire_link(link, stamp.op_id))
        existing = state.links.get((info_id, dst.id))
        if existing is None or existing.deleted:
            version = existing.version + 1 if existing is not None else 1
            moved = Link(info_id, dst.id, link.relation, link.created_by, ts, False, version, stamp.op_id)
            changes.append(Change(moved, existing))
    added: set[tuple[str, str, str]] = set()

    def repoint(rel: Relation, from_id: str, to_id: str) -> None:
        changes.append(retire_relation(rel, stamp.op_id))
        key = (from_id, to_id, rel.type)
        if from_id == to_id or key in added:
            return
        existing = state.relations.get(key)
        if existing is None or existing.deleted:
            added.add(key)
            version = existing.version + 1 if existing is not None else 1
            new = Relation(from_id, to_id, rel.type, rel.weight, rel.reason, ts, False, version, stamp.op_id)
            changes.append(Change(new, existing))

    for rel in list(state.rel_out.get(src.id, {}).values()):
        repoint(rel, dst.id, rel.to_id)
    for rel in list(state.rel_in.get(src.id, {}).values()):
        repoint(rel, rel.from_id, dst.id)
    aliases = clean_aliases((*dst.aliases, src.name, *src.aliases), normalize_name(dst.name))
    changes.append(Change(_revise(dst, stamp, aliases=aliases), dst))
    changes.append(Change(_revise(src, stamp, deleted=True), src))
    return changes


def delete_keyword(
    state: State, stamp: Stamp, keyword_id: object, cascade: object, info_policy: object
) -> list[Change]:
    keyword = require_keyword(state, keyword_id)
    if keyword.id == ROOT_ID:
        raise InvalidInputError("the root keyword cannot be deleted")
    clean_flag(cascade, "cascade")
    policy = clean_choice(info_policy, "info_policy", INFO_POLICIES)
    children = state.children.get(keyword.id)
    if children and not cascade:
        raise HasChildrenError(
            f"{_label(keyword)} has {len(children)} child keyword(s); pass cascade=True to delete "
            f"its whole subtree, or move the children elsewhere first"
        )
    doomed = list(state.subtree(keyword.id))
    doomed_set = set(doomed)
    changes: list[Change] = []
    # Infos whose links all end in the deleted subtree, with the relation to keep for them.
    affected: dict[str, RelationType] = {}
    for kid in doomed:
        for info_id, link in state.infos_by_keyword.get(kid, {}).items():
            changes.append(retire_link(link, stamp.op_id))
            if affected.get(info_id) is not RelationType.PRIMARY:
                affected[info_id] = link.relation
    orphans = [
        info_id
        for info_id in affected
        if state.live_info(info_id) is not None
        and not any(
            kid not in doomed_set and state.live_keyword(kid) is not None
            for kid in state.keywords_by_info.get(info_id, ())
        )
    ]
    if policy == "reattach":
        parent_id = keyword.parent_id
        assert parent_id is not None  # only the root has none, and its deletion was refused above
        for info_id in orphans:
            existing = state.links.get((info_id, parent_id))
            version = existing.version + 1 if existing is not None else 1
            link = Link(info_id, parent_id, affected[info_id], stamp.actor, stamp.timestamp, False, version,
                        stamp.op_id)
            changes.append(Change(link, existing))
    elif policy == "delete":
        for info_id in orphans:
            info = state.infos[info_id]
            gone = dataclasses.replace(
                info, version=info.version + 1, updated_at=stamp.timestamp, op_id=stamp.op_id, deleted=True
            )
            changes.append(Change(gone, info))
    seen: set[tuple[str, str, str]] = set()
    for kid in doomed:
        for rel in (*state.rel_out.get(kid, {}).values(), *state.rel_in.get(kid, {}).values()):
            key = (rel.from_id, rel.to_id, rel.type)
            if key not in seen:
                seen.add(key)
                changes.append(retire_relation(rel, stamp.op_id))
    # Children before parents, so no keyword is ever deleted while it has live children.
    for kid in reversed(doomed):
        node = state.keywords[kid]
        changes.append(Change(_revise(node, stamp, deleted=True), node))
    return changes


def batch_create_keywords(state: State, stamp: Stamp, specs: object) -> list[Change]:
    if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Sequence):
        raise InvalidInputError(f"specs must be a list of dicts, got {type(specs).__name__}")
    ids = new_ids(len(specs))
    ts, op = stamp.timestamp, stamp.op_id
    root = state.keywords[ROOT_ID]
    names = state.names
    by_ref: dict[str, Keyword] = {}
    planned: dict[tuple[str, str], str] = {}  # (parent id, name key) -> id, within this batch
    changes: list[Change] = []
    for index, spec in enumerate(specs):
        try:
            keyword, ref = _batch_keyword(state, spec, ids[index], ts, op, root, names, by_ref, planned)
        except KwtreeError as exc:
            name_in_message(exc, f"specs[{index}]: ")
            raise
        if ref is not None:
            by_ref[ref] = keyword
        changes.append(Change(keyword, None))
    return changes


def _batch_keyword(
    state: State,
    spec: object,
    kid: str,
    ts: float,
    op: str,
    root: Keyword,
    names: dict[str, str | list[str]],
    by_ref: dict[str, Keyword],
    planned: dict[tuple[str, str], str],
) -> tuple[Keyword, str | None]:
    if type(spec) is not dict and not isinstance(spec, Mapping):
        raise InvalidInputError(f"must be a dict, got {type(spec).__name__}")
    if not _SPEC_FIELDS.issuperset(spec):
        unknown = sorted(str(key) for key in spec if key not in _SPEC_FIELDS)
        raise InvalidInputError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_SPEC_FIELDS))}")
    if "name" not in spec:
        raise InvalidInputError("has no 'name'")
    name, key = clean_name_key(spec["name"])
    get = spec.get
    parent_ref = get("parent_ref")
    pid = get("parent_id")
    if parent_ref is not None:
        if pid is not None:
            raise InvalidInputError("gives both parent_id and parent_ref; give one")
        parent = by_ref.get(parent_ref) if type(parent_ref) is str else None
        if parent is None:
            raise InvalidInputError(f"parent_ref {shown(parent_ref)} names no earlier spec's ref")
    elif pid is None:
        parent = root
    else:
        parent = require_keyword(state, pid, "parent_id")
    sibling = (parent.id, key)
    if sibling in planned:
        raise DuplicateKeywordError(
            f"an earlier spec of this batch already creates {name!r} under the same parent", planned[sibling]
        )
    if parent_ref is None and key in names:
        _check_unique_sibling(state, parent, key)
    planned[sibling] = kid
    aliases = get("aliases")
    description = get("description", "")
    if type(description) is not str or description:  # ("" is the common case and needs no check)
        description = clean_text(description, "description", allow_empty=True)
    metadata = get("metadata")
    ref = get("ref")
    if ref is not None:
        if type(ref) is not str or not ref:
            raise InvalidInputError(f"ref must be a non-empty string, got {shown(ref)}")
        if ref in by_ref:
            raise InvalidInputError(f"ref {shown(ref)} is used by an earlier spec")
    keyword = Keyword(
        kid,
        name,
        () if aliases is None else clean_aliases(aliases, key),
        parent.id,
        description,
        EMPTY_METADATA if metadata is None else check_user_metadata(clean_metadata(metadata)),
        1,
        ts,
        ts,
        False,
        op,
        parent.level + 1,
    )
    return keyword, ref
