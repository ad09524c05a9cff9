"""The forget operation: what ``forget`` deletes, decided against the state, and the
tombstone an erased entity's rows become.

Forgetting is two steps (``kwtree.ops.erasure`` has the second): this decider writes an
ordinary operation of kind ``forget`` that deletes the entities, each as a new version that
already holds the tombstone; then every earlier row of those entities is rewritten to the
same tombstone. An entity is *erased* when a ``forget`` operation wrote it: the set of erased
ids is read from the log itself, so a rerun after a crash finds what is left to do.

The tombstone keeps what the structure needs (ids, versions, parents, times, the deleted
flag, link and relation endpoints) and drops every text and what was said about it: an info's
content, source and provenance (who said it: "unknown" again), a keyword's name, aliases and
description, a relation's reason; metadata becomes ``{"forgotten_by": <op id>}``. Every row
stays a valid row for the codec and replay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kwtree.engine.events import Stamp
from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.models import (
    FORGOTTEN_BY,
    ROOT_ID,
    UNKNOWN_PROVENANCE,
    Change,
    Entity,
    Info,
    Keyword,
    Operation,
    Relation,
    is_forgotten,
)
from kwtree.normalize import normalize_name
from kwtree.validate import clean_id, clean_metadata
from kwtree.writes.abstracts import ABSTRACT_KEY, quotes, stored_abstract
from kwtree.writes.infos import retire_link

__all__ = [
    "FORGET_KIND", "FORGOTTEN_BY", "ForgetPlan", "forget_entity", "forget_subtree", "is_forgotten", "last_forget",
    "refuse_forgotten", "revise_survivors", "tombstone",
]

#: The kind of the operation that deletes what ``forget`` erases.
FORGET_KIND = "forget"


def tombstone(entity: Entity, op_id: str) -> Entity:
    """``entity`` without its text: what each of its rows becomes once operation ``op_id``
    forgot it (links carry no text and come back unchanged)."""
    mark = MappingProxyType({FORGOTTEN_BY: op_id})
    if type(entity) is Info:
        return dataclasses.replace(entity, content="", source="", metadata=mark, provenance=UNKNOWN_PROVENANCE)
    if type(entity) is Keyword:
        return dataclasses.replace(entity, name="", aliases=(), description="", metadata=mark)
    if type(entity) is Relation:
        return dataclasses.replace(entity, reason="")
    return entity


def last_forget(state: State) -> str | None:
    """The id of the last forget operation that erased an entity (the newest ``forgotten_by``
    of a tombstone in ``state``), None when nothing was forgotten."""
    return max(state.forgotten.values(), default=None)


def refuse_forgotten(state: State, op: Operation) -> None:
    """For ``undo``: InvalidInputError when ``op`` is a forget operation or wrote an entity one
    erased. Undoing it could only bring back tombstones (the text is gone from the log), and
    bringing an erased memory back to life, empty, is not what anyone asks undo for."""
    if op.kind == FORGET_KIND:
        raise InvalidInputError(f"operation {op.op_id} forgot content, which was erased from the log: it cannot be "
                                f"undone; write the memories again if you want them back")
    for change in op.changes:
        current: Info | Keyword | None = None
        if type(change.after) is Info:
            current = state.infos.get(change.after.id)
        elif type(change.after) is Keyword:
            current = state.keywords.get(change.after.id)
        if current is not None and is_forgotten(current):
            raise InvalidInputError(f"operation {op.op_id} wrote {current.id}, which operation "
                                    f"{current.metadata[FORGOTTEN_BY]} forgot: its content was erased, so the "
                                    f"operation cannot be undone (not even with force=True)")


@dataclass(slots=True)
class ForgetPlan:
    """What the decider found, for the report: the ids it erases, and the infos it keeps
    (each with the live keywords outside the forgotten subtree that still hold it)."""

    infos: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    kept: dict[str, tuple[str, ...]] = field(default_factory=dict)
    links: int = 0
    relations: int = 0
    abstracts: list[str] = field(default_factory=list)  # live keywords whose abstract was dropped
    aliases: list[str] = field(default_factory=list)  # live keywords that lost an erased keyword's name
    already: str | None = None  # the op that forgot the target before (a rerun), if any


def _erase(entity: Info | Keyword, stamp: Stamp) -> Change:
    """The new version that deletes ``entity`` and holds its tombstone."""
    gone = dataclasses.replace(entity, deleted=True, version=entity.version + 1, updated_at=stamp.timestamp,
                               op_id=stamp.op_id)
    return Change(tombstone(gone, stamp.op_id), entity)


def forget_entity(state: State, stamp: Stamp, entity_id: object, plan: ForgetPlan) -> list[Change]:
    """Forget the info or keyword ``entity_id`` (live or deleted): an info alone, a keyword
    with its subtree. Nothing when it is forgotten already (``plan.already`` says by which
    operation). NotFoundError when no entity has the id; InvalidInputError for the root."""
    eid = clean_id(entity_id, "entity_id")
    found: Info | Keyword | None = state.infos.get(eid) or state.keywords.get(eid)
    if found is None:
        raise NotFoundError(f"entity_id: no info or keyword has id {eid!r}; nothing was forgotten")
    if is_forgotten(found):
        plan.already = found.metadata[FORGOTTEN_BY]
        return []
    if type(found) is Keyword:
        if found.id == ROOT_ID:
            raise InvalidInputError("entity_id: the root keyword cannot be forgotten; forget its children or a scope")
        return forget_subtree(state, stamp, found.id, plan)
    holders = list(state.keywords_by_info.get(eid, ()))
    changes = [retire_link(state.links[(eid, kid)], stamp.op_id) for kid in holders]
    plan.links = len(changes)
    changes.append(_erase(found, stamp))
    plan.infos.append(eid)
    return changes + drop_abstracts(state, stamp, plan, holders, set())


def _all_descendants(state: State, keyword_id: str) -> list[str]:
    """``keyword_id`` and every keyword ever placed under it, live or deleted (a deleted
    keyword keeps the parent it had), parents first."""
    under: dict[str, list[str]] = {}
    for keyword in state.keywords.values():
        if keyword.parent_id is not None:
            under.setdefault(keyword.parent_id, []).append(keyword.id)
    found, seen, stack = [], {keyword_id}, [keyword_id]
    while stack:
        node = stack.pop()
        found.append(node)
        for kid in under.get(node, ()):
            if kid not in seen:
                seen.add(kid)
                stack.append(kid)
    return found


def forget_subtree(state: State, stamp: Stamp, keyword_id: str, plan: ForgetPlan) -> list[Change]:
    """Forget the keyword ``keyword_id`` and everything under it: every keyword (live, or
    deleted while it was under it), every info linked only inside (live, or deleted once
    linked inside), and the links and relations touching them. An info that a live keyword
    outside still holds is kept, losing its links into the subtree (``plan.kept``)."""
    doomed = _all_descendants(state, keyword_id)
    inside = set(doomed)
    changes: list[Change] = []
    linked: dict[str, bool] = {}  # info id -> whether a live link holds it inside
    for (info_id, kid), link in state.links.items():
        if kid in inside:
            linked[info_id] = linked.get(info_id, False) or not link.deleted
            if not link.deleted:
                changes.append(retire_link(link, stamp.op_id))
    plan.links = len(changes)
    for info_id, held in linked.items():
        info = state.infos.get(info_id)
        if info is None or is_forgotten(info):
            continue
        outside = tuple(kid for kid in state.keywords_by_info.get(info_id, ())
                        if kid not in inside and state.live_keyword(kid) is not None)
        if outside and not info.deleted:
            if held:
                plan.kept[info_id] = outside
            continue
        changes.append(_erase(info, stamp))
        plan.infos.append(info_id)
    seen: set[tuple[str, str, str]] = set()
    for kid in doomed:
        for rel in _relations_of(state, kid):
            key = (rel.from_id, rel.to_id, rel.type)
            if key not in seen:
                seen.add(key)
                gone = dataclasses.replace(rel, deleted=True, version=rel.version + 1, op_id=stamp.op_id)
                changes.append(Change(tombstone(gone, stamp.op_id), rel))
    plan.relations = len(seen)
    # Children before parents, so no keyword is ever deleted while it has live children.
    for kid in reversed(doomed):
        keyword = state.keywords[kid]
        if not is_forgotten(keyword):
            changes.append(_erase(keyword, stamp))
            plan.keywords.append(kid)
    return changes + drop_abstracts(state, stamp, plan, [keyword_id], inside)


def drop_abstracts(state: State, stamp: Stamp, plan: ForgetPlan, holders: Iterable[str],
                   inside: set[str]) -> list[Change]:
    """The next version of each live keyword outside ``inside`` (the erased subtree) that
    still holds something of what this forget erases: without its stored abstract
    (``kwtree.writes.abstracts``) when that summarised the erased memories (it is at or above
    ``holders``, the keywords that held them) or ``quotes`` an erased text (built before the
    memory moved away). The log rewrite then drops the same from the older versions
    (``kwtree.ops.erasure``), and finds the keywords a merge gave an erased keyword's name,
    whose aliases a second forget operation prunes (``revise_survivors`` with ``names``)."""
    above = {node for kid in holders if kid in state.keywords for node in state.ancestry(kid)}
    erased = [state.infos[iid] for iid in plan.infos] + [state.keywords[kid] for kid in plan.keywords]
    texts = [text for entity in erased for text in entity_texts(entity)]
    return revise_survivors(state, stamp, plan, lambda keyword, stored: keyword.id not in inside and (
        keyword.id in above or quotes(stored, texts)))


def revise_survivors(state: State, stamp: Stamp, plan: ForgetPlan, chosen: Callable[[Keyword, Mapping[str, Any]], bool],
                     names: Mapping[str, set[str]] | None = None, only: set[str] | None = None) -> list[Change]:
    """The next version of each live keyword (of ``only``, when given) that this forget does
    not erase, without its stored abstract when ``chosen`` picks it and without its aliases
    whose ``normalize_name`` is in ``names[keyword id]`` (the erased names a merge gave it);
    their ids go to ``plan.abstracts`` and ``plan.aliases``."""
    changes: list[Change] = []
    erased = set(plan.keywords)
    for keyword in state.keywords.values():
        if keyword.deleted or keyword.id == ROOT_ID or keyword.id in erased or (
                only is not None and keyword.id not in only):
            continue
        stored = stored_abstract(keyword)
        drop = stored is not None and chosen(keyword, stored)
        pruned = (names or {}).get(keyword.id, set())
        aliases = tuple(alias for alias in keyword.aliases if normalize_name(alias) not in pruned)
        if not drop and aliases == keyword.aliases:
            continue
        metadata = {key: value for key, value in keyword.metadata.items() if not (drop and key == ABSTRACT_KEY)}
        new = dataclasses.replace(keyword, aliases=aliases, metadata=clean_metadata(metadata),
                                  version=keyword.version + 1, updated_at=stamp.timestamp, op_id=stamp.op_id)
        changes.append(Change(new, keyword))
        if drop:
            plan.abstracts.append(keyword.id)
        if aliases != keyword.aliases:
            plan.aliases.append(keyword.id)
    return changes


def entity_texts(entity: Info | Keyword) -> list[str]:
    """The texts of an info (content, source) or a keyword (name, aliases, description)."""
    if type(entity) is Info:
        return [text for text in (entity.content, entity.source) if text]
    assert type(entity) is Keyword
    return [text for text in (entity.name, *entity.aliases, entity.description) if text]


def _relations_of(state: State, keyword_id: str) -> Iterable[Relation]:
    """The live relations at either end of ``keyword_id``."""
    yield from state.rel_out.get(keyword_id, {}).values()
    yield from state.rel_in.get(keyword_id, {}).values()
