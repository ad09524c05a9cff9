"""Info, link and relation writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, KwtreeError, NotFoundError, VersionConflictError
from kwtree.models import Change, Info, Keyword, Link, Relation, RelationType
from kwtree.validate import (
    check_patch,
    clean_int,
    clean_label,
    clean_metadata,
    clean_provenance,
    clean_relation_type,
    clean_text,
    clean_weight,
)
from kwtree.writes import Stamp, name_in_message, new_ids, require_info, require_keyword

__all__ = [
    "API_PROVENANCE",
    "INFO_PATCH_FIELDS",
    "batch_create_infos",
    "create_info",
    "delete_info",
    "link_info",
    "relate",
    "retire_link",
    "retire_relation",
    "unlink_info",
    "unrelate",
    "update_info",
]

INFO_PATCH_FIELDS = ("content", "source", "metadata", "provenance")
_INFO_SPEC_FIELDS = frozenset({"content", "source", "metadata", "keyword_ids", "provenance"})
#: Who said a text written through the API when the call does not say (``kwtree.models.PROVENANCES``).
API_PROVENANCE = "api"


def retire_link(link: Link, op_id: str) -> Change:
    """The change by operation ``op_id`` that tombstones a live link."""
    return Change(dataclasses.replace(link, deleted=True, version=link.version + 1, op_id=op_id), link)


def retire_relation(rel: Relation, op_id: str) -> Change:
    """The change by operation ``op_id`` that tombstones a live relation."""
    return Change(dataclasses.replace(rel, deleted=True, version=rel.version + 1, op_id=op_id), rel)


def _keywords(state: State, keyword_ids: object, field: str) -> list[Keyword]:
    if keyword_ids is None:
        return []
    if type(keyword_ids) is not list and (isinstance(keyword_ids, (str, bytes)) or
                                           not isinstance(keyword_ids, Sequence)):
        raise InvalidInputError(f"{field} must be a list of keyword ids, got {type(keyword_ids).__name__}")
    found: dict[str, Keyword] = {}
    for index, kid in enumerate(keyword_ids):
        try:
            keyword = require_keyword(state, kid, field)
        except KwtreeError as exc:
            name_in_message(exc, f"{field}[{index}]", instead_of=field)
            raise
        found.setdefault(keyword.id, keyword)
    return list(found.values())


def _new_info_changes(
    state: State,
    stamp: Stamp,
    iid: str,
    spec: Mapping[str, object],
    agent_links: Sequence[tuple[str, RelationType]] = (),
) -> list[Change]:
    get = spec.get
    content = clean_text(get("content"), "content", allow_empty=False)
    source = get("source", "")
    if type(source) is not str or source:  # ("" is the common case and needs no check)
        source = clean_text(source, "source", allow_empty=True)
    metadata = clean_metadata(get("metadata"))
    provenance = clean_provenance(get("provenance", API_PROVENANCE))
    keywords = _keywords(state, get("keyword_ids"), "keyword_ids")
    ts, op = stamp.timestamp, stamp.op_id
    changes = [Change(Info(iid, content, source, metadata, 1, ts, ts, False, op, provenance), None)]
    for keyword in keywords:
        link = Link(iid, keyword.id, RelationType.PRIMARY, stamp.actor, ts, False, 1, op)
        changes.append(Change(link, None))
    linked = {keyword.id for keyword in keywords} if agent_links else set()
    for keyword_id, relation in agent_links:
        # The agent chose these on an earlier look at the state; one deleted since is skipped.
        if keyword_id not in linked and state.live_keyword(keyword_id) is not None:
            linked.add(keyword_id)
            changes.append(Change(Link(iid, keyword_id, relation, "agent", ts, False, 1, op), None))
    return changes


def create_info(
    state: State,
    stamp: Stamp,
    content: object,
    source: object,
    keyword_ids: object,
    metadata: object,
    agent_links: Sequence[tuple[str, RelationType]] = (),
    provenance: object = API_PROVENANCE,
) -> list[Change]:
    """The new info (said by ``provenance``) and its links: PRIMARY by the caller to
    ``keyword_ids``, then the ``agent_links`` (keyword id, relation) the agent chose, created
    by "agent"."""
    spec = {"content": content, "source": source, "keyword_ids": keyword_ids, "metadata": metadata,
            "provenance": provenance}
    (iid,) = new_ids(1)
    return _new_info_changes(state, stamp, iid, spec, agent_links)


def batch_create_infos(state: State, stamp: Stamp, specs: object) -> list[Change]:
    if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Sequence):
        raise InvalidInputError(f"specs must be a list of dicts, got {type(specs).__name__}")
    ids = new_ids(len(specs))
    changes: list[Change] = []
    for index, spec in enumerate(specs):
        if type(spec) is not dict and not isinstance(spec, Mapping):
            raise InvalidInputError(f"specs[{index}] must be a dict, got {type(spec).__name__}")
        if not _INFO_SPEC_FIELDS.issuperset(spec):
            unknown = sorted(str(key) for key in spec if key not in _INFO_SPEC_FIELDS)
            raise InvalidInputError(f"specs[{index}] has unknown field(s) {', '.join(unknown)}; "
                                    f"allowed: {', '.join(sorted(_INFO_SPEC_FIELDS))}")
        try:
            changes.extend(_new_info_changes(state, stamp, ids[index], spec))
        except KwtreeError as exc:
            name_in_message(exc, f"specs[{index}].")  # (every message starts with the field it names)
            raise
    return changes


def update_info(state: State, stamp: Stamp, info_id: object, patch: object, version: object) -> list[Change]:
    """The info with ``patch`` applied. ``provenance`` says who said the text: the patch's
    when it gives one; else, when the patch changes the content, "api" (the caller wrote the
    new text); else it is kept."""
    info = require_info(state, info_id)
    patch = check_patch(patch, INFO_PATCH_FIELDS, "use link_info / unlink_info to change its keywords")
    content = clean_text(patch["content"], "content", allow_empty=False) if "content" in patch else info.content
    source = clean_text(patch["source"], "source", allow_empty=True) if "source" in patch else info.source
    metadata = clean_metadata(patch["metadata"]) if "metadata" in patch else info.metadata
    provenance = (clean_provenance(patch["provenance"]) if "provenance" in patch
                  else API_PROVENANCE if content != info.content else info.provenance)
    if version is not None:
        expected = clean_int(version, "version", 1)
        if expected != info.version:
            raise VersionConflictError(info.id, expected, info.version)
    new = dataclasses.replace(
        info,
        content=content,
        source=source,
        metadata=metadata,
        provenance=provenance,
        version=info.version + 1,
        updated_at=stamp.timestamp,
        op_id=stamp.op_id,
    )
    return [Change(new, info)]


def delete_info(state: State, stamp: Stamp, info_id: object) -> list[Change]:
    info = require_info(state, info_id)
    changes = [retire_link(state.links[(info.id, kid)], stamp.op_id) for kid in state.keywords_by_info.get(info.id, ())]
    gone = dataclasses.replace(
        info, deleted=True, version=info.version + 1, updated_at=stamp.timestamp, op_id=stamp.op_id
    )
    changes.append(Change(gone, info))
    return changes


def link_info(
    state: State, stamp: Stamp, info_id: object, keyword_id: object, relation: object, created_by: object
) -> list[Change]:
    info = require_info(state, info_id)
    keyword = require_keyword(state, keyword_id)
    kind = clean_relation_type(relation)
    by = clean_label(created_by, "created_by")
    existing = state.links.get((info.id, keyword.id))
    if existing is not None and not existing.deleted:
        if existing.relation is kind:
            return []
        changed = dataclasses.replace(
            existing, relation=kind, created_by=by, version=existing.version + 1, op_id=stamp.op_id
        )
        return [Change(changed, existing)]
    version = existing.version + 1 if existing is not None else 1
    return [Change(Link(info.id, keyword.id, kind, by, stamp.timestamp, False, version, stamp.op_id), existing)]


def unlink_info(state: State, stamp: Stamp, info_id: object, keyword_id: object) -> list[Change]:
    info = require_info(state, info_id)
    keyword = require_keyword(state, keyword_id)
    link = state.links.get((info.id, keyword.id))
    if link is None or link.deleted:
        raise NotFoundError(f"info {info.id} is not linked to keyword {keyword.name!r} ({keyword.id})")
    return [retire_link(link, stamp.op_id)]


def relate(
    state: State,
    stamp: Stamp,
    from_id: object,
    to_id: object,
    type_: object,
    weight: object,
    reason: object,
) -> list[Change]:
    source = require_keyword(state, from_id, "from_id")
    target = require_keyword(state, to_id, "to_id")
    if source.id == target.id:
        raise InvalidInputError("a keyword cannot be related to itself (from_id == to_id)")
    kind = clean_label(type_, "type")
    value = clean_weight(weight)
    why = clean_text(reason, "reason", allow_empty=True)
    existing = state.relations.get((source.id, target.id, kind))
    if existing is not None and not existing.deleted:
        if existing.weight == value and existing.reason == why:
            return []
        changed = dataclasses.replace(
            existing, weight=value, reason=why, version=existing.version + 1, op_id=stamp.op_id
        )
        return [Change(changed, existing)]
    version = existing.version + 1 if existing is not None else 1
    rel = Relation(source.id, target.id, kind, value, why, stamp.timestamp, False, version, stamp.op_id)
    return [Change(rel, existing)]


def unrelate(state: State, stamp: Stamp, from_id: object, to_id: object, type_: object) -> list[Change]:
    source = require_keyword(state, from_id, "from_id")
    target = require_keyword(state, to_id, "to_id")
    kind = None if type_ is None else clean_label(type_, "type")
    found = [
        rel
        for (to, rtype), rel in state.rel_out.get(source.id, {}).items()
        if to == target.id and (kind is None or rtype == kind)
    ]
    if not found:
        what = "no relation" if kind is None else f"no {kind!r} relation"
        raise NotFoundError(f"keyword {source.name!r} ({source.id}) has {what} to {target.name!r} ({target.id})")
    return [retire_relation(rel, stamp.op_id) for rel in found]
