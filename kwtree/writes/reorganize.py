"""Applying a reorganisation plan: merges, moves and new groups, as ONE operation.

Steps are checked and tried in order on a fork of the state, each against the tree the steps
before it left (so a plan may move a keyword into a group it creates). Any step that fails
fails the whole plan, naming the step. The changes are then folded to one row per entity
(its first before-image and its last state), so ``undo`` of the operation puts everything
back at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from kwtree.engine.state import PUT, State
from kwtree.errors import (
    CycleError,
    DuplicateKeywordError,
    InvalidInputError,
    KwtreeError,
    NotFoundError,
)
from kwtree.models import Change
from kwtree.validate import clean_id, clean_text, shown
from kwtree.writes import Stamp
from kwtree.writes import keywords as keyword_commands
from kwtree.writes.undo import check_consistent, in_apply_order

__all__ = ["STEP_FIELDS", "apply_plan", "clean_plan", "coalesce", "put_changes"]

#: Each step kind and its required fields; every step may also carry a "reason".
STEP_FIELDS: dict[str, tuple[str, ...]] = {
    "merge": ("src_id", "dst_id"),
    "move": ("keyword_id", "new_parent_id"),
    "group": ("parent_id", "name", "member_ids"),
}
_OPTIONAL = {"merge": ("reason",), "move": ("reason",), "group": ("reason", "description")}


def clean_plan(plan: object) -> list[dict[str, Any]]:
    """The plan's steps, checked for shape (not yet against the tree)."""
    if not isinstance(plan, Mapping):
        raise InvalidInputError(
            f"plan must be a dict with a 'steps' list (as reorganize() returns), got {type(plan).__name__}")
    steps = plan.get("steps")
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence):
        raise InvalidInputError("plan['steps'] must be a list of steps")
    if not steps:
        raise InvalidInputError("plan['steps'] is empty: there is nothing to apply")
    cleaned = []
    for index, step in enumerate(steps):
        where = f"steps[{index}]"
        if not isinstance(step, Mapping):
            raise InvalidInputError(f"{where} must be a dict, got {type(step).__name__}")
        kind = step.get("op")
        if type(kind) is not str or kind not in STEP_FIELDS:  # (a dict or list is no key: TypeError)
            raise InvalidInputError(f"{where}: op must be one of {', '.join(STEP_FIELDS)}, got {shown(kind)}")
        allowed = ("op", *STEP_FIELDS[kind], *_OPTIONAL[kind])
        unknown = sorted(str(key) for key in step if key not in allowed)
        missing = [field for field in STEP_FIELDS[kind] if field not in step]
        if unknown or missing:
            raise InvalidInputError(
                f"{where} ({kind}): " + "; ".join(
                    part for part in (
                        f"missing {', '.join(missing)}" if missing else "",
                        f"unknown field(s) {', '.join(unknown)}" if unknown else "",
                    ) if part
                ) + f"; a {kind} step has {', '.join(allowed)}"
            )
        clean: dict[str, Any] = {"op": kind}
        for field in STEP_FIELDS[kind]:
            value = step[field]
            if field == "member_ids":
                if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
                    raise InvalidInputError(f"{where}: member_ids must be a non-empty list of keyword ids")
                clean[field] = [clean_id(member, f"{where}.member_ids") for member in value]
            elif field == "name":
                clean[field] = value  # checked by create_keyword, with its own message
            else:
                clean[field] = clean_id(value, f"{where}.{field}")
        for field in _OPTIONAL[kind]:
            if field in step:
                clean[field] = clean_text(step[field], f"{where}.{field}", allow_empty=True)
        cleaned.append(clean)
    return cleaned


def _step_changes(state: State, stamp: Stamp, step: dict[str, Any]) -> list[Change]:
    kind = step["op"]
    if kind == "merge":
        return keyword_commands.merge_keywords(state, stamp, step["src_id"], step["dst_id"])
    if kind == "move":
        return keyword_commands.move_keyword(state, stamp, step["keyword_id"], step["new_parent_id"])
    parent = step["parent_id"]
    for member in step["member_ids"]:
        keyword = state.live_keyword(member)
        if keyword is None or keyword.parent_id != parent:
            raise InvalidInputError(f"member {member} is not a live child of {parent}")
    created = keyword_commands.create_keyword(
        state, stamp, step["name"], parent, None, step.get("description", ""), None
    )
    put_changes(state, created)
    group_id = created[0].key  # the new keyword's id
    changes = list(created)
    for member in step["member_ids"]:
        moved = keyword_commands.move_keyword(state, stamp, member, group_id)
        put_changes(state, moved)
        changes.extend(moved)
    return changes


def put_changes(state: State, changes: list[Change]) -> None:
    """Apply ``changes`` to a fork of the state (so the next step of a composed operation
    sees them); the rows are stored as they are."""
    for change in changes:
        PUT[type(change.after)](state, change.after)


def _relabel(exc: KwtreeError, where: str) -> KwtreeError:
    if isinstance(exc, DuplicateKeywordError):
        return DuplicateKeywordError(f"{where}: {exc}", exc.existing_id)
    if isinstance(exc, (CycleError, NotFoundError, InvalidInputError)):
        return type(exc)(f"{where}: {exc}")
    return exc


def apply_plan(state: State, stamp: Stamp, plan: object) -> list[Change]:
    """The changes of the whole plan, one per entity, in an order ``apply`` takes as is."""
    steps = clean_plan(plan)
    fork = state.fork()
    recorded: list[Change] = []
    for index, step in enumerate(steps):
        try:
            changes = _step_changes(fork, stamp, step)
        except KwtreeError as exc:
            raise _relabel(exc, f"steps[{index}] ({step['op']})") from None
        if step["op"] != "group":  # a group step put its rows as it went
            put_changes(fork, changes)
        recorded.extend(changes)
    merged = coalesce(recorded)
    check_consistent(state, merged, "reorganize plan")
    return in_apply_order(state, merged)


def coalesce(changes: list[Change]) -> list[Change]:
    """One change per entity: its first before-image and its last state (created and deleted
    within the plan: nothing). Deciders that compose several steps on a fork (a plan here,
    ``kwtree.memory.commit``) fold their changes with it into one operation."""
    first: dict[str, Change] = {}
    last: dict[str, Change] = {}
    for change in changes:
        first.setdefault(change.key, change)
        last[change.key] = change
    merged = []
    for key, opening in first.items():
        before, after = opening.before, last[key].after
        if before is None and after.deleted:
            continue
        version = before.version + 1 if before is not None else 1
        merged.append(Change(dataclasses.replace(after, version=version), before))
    return merged
