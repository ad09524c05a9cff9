"""How ``verify`` checks the hash chain of a log (format 3; docs/log-format.md, "The hash
chain"): every operation names the digest of the operation it was appended after in ``prev``,
so a log is a chain from GENESIS to its head, or, after a git merge, a tree of such chains
whose forks a merge note accounts for.

What it reports, over the operations in log order (a copy of an operation counted once):

- **chain-break** (error): an operation whose ``prev`` is no digest, names GENESIS though
  operations come before it, or names no operation before it in the log. The operation
  before it was changed, or operations were removed, moved or inserted; the finding is at
  the first operation the change leaves without its predecessor. (An edit of the newest
  operation leaves nothing after it to notice: that is what a recorded head is for.)
- **chain-missing** (error): an operation without ``prev`` where every operation has one (a
  format-3 log; in a database log, after the first that has one).
- **chain-order** (warning): in a chain that never forked (no branches were merged into it),
  an operation lies after one written later than it: operations were moved. Replay sorts by
  op id, so a move changes no answer: a warning, not an error.
- **chain-fork** (error): more operations follow one than branches merged there (each
  ``merge`` note the git merge driver wrote accounts for one more): an operation was inserted
  beside the chain. A warning in a log merged by other means (a union of rows: operations out
  of id order or copied, segments that forked or grew), which cannot tell the two apart.
- Notes (a re-chaining by compaction, forget, repair or upgrade, a merge of branches) are no
  findings: ``Chain.notes`` (``Report.chain_notes``) says what each one says. An operation
  that follows one a repair removed (its note names the digest) is no break.
- **chain-head**: with a head the user recorded earlier, an error when no operation of the
  log has that digest, else an info saying which operation it is and how many follow.

A log damaged elsewhere (a line verify could not read) breaks the chain after the damage;
those breaks say so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from kwtree.engine.events import GENESIS, NOTE_ENTITY, NOTE_MERGE, PREV_KEY, is_digest, op_digest
from kwtree.engine.replay import RawOperation
from kwtree.ops.verify_segments import Findings

__all__ = ["Chain", "check_chain"]


@dataclass(frozen=True, slots=True)
class Chain:
    """The head of a log as ``check_chain`` found it: the digest of its last operation in
    log order (GENESIS for an empty log), that operation's id, how many operations carry a
    link (0 for a log without a chain), and what its notes say."""

    head: str
    head_op: str | None
    linked: int
    notes: tuple[str, ...] = ()  # what the log's notes say, oldest first, for a person
    lost: tuple[str, ...] = ()  # the digests of operations damage cost (named by those after them)


def _short(digest: object) -> str:
    return f"{digest[:16]}…" if isinstance(digest, str) and len(digest) > 16 else repr(digest)


def _said(end: dict[str, Any]) -> str:
    """What a note's end marker says, for a person."""
    ts = end.get("ts")
    when = datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if type(ts) is float else repr(ts)
    audit = orjson.dumps(end.get("audit")).decode()
    return f"a {end.get('kind')} note written by {end.get('actor')} at {when}: {audit}"


def _where(raw: RawOperation) -> str:
    return f"{raw.path}:{raw.first_line}"


def _end_line(raw: RawOperation) -> int:
    return raw.first_line + len(raw.rows) - 1


def check_chain(operations: Sequence[RawOperation], findings: Findings, *, required: bool,
                after_damage: Collection[str], merged: bool, recorded: str | None = None) -> Chain:
    """Check the links of ``operations`` (every whole valid operation in log order, with its
    ``data``); ``required`` when every operation must carry one (format 3), ``after_damage``
    the ids of operations that come right after damage verify reported (their predecessor was
    lost to it: no break is reported for that), ``merged`` when the log shows it was merged
    from branches by other means than the merge driver (operations out of id order or copied,
    segments that forked or grew): a fork no note accounts for is then a warning, not an
    error; and ``recorded`` a head to look for. See the module docstring.

    Links are judged by op id, not by where operations lie in the files: a writer names an
    operation it had read, which always has a smaller id, and a log merged from two branches
    (by the merge driver, or as a union of rows in any order) is replayed in op-id order too.
    The head is the operation with the greatest id, the one the next writer names."""
    distinct: list[RawOperation] = []
    seen: set[str] = set()
    for raw in operations:
        if raw.op_id not in seen:
            seen.add(raw.op_id)
            distinct.append(raw)
    ordered = sorted(distinct, key=lambda raw: raw.op_id)
    digest_of = {raw.op_id: op_digest(raw.data) for raw in distinct}
    by_digest = {digest_of[raw.op_id]: raw for raw in ordered}
    rank = {raw.op_id: index for index, raw in enumerate(ordered)}
    linked = [raw for raw in ordered if PREV_KEY in raw.rows[-1]["end"]]
    first_linked = linked[0].op_id if linked else None
    followers: dict[str, list[RawOperation]] = {}
    merges: Counter[str] = Counter()
    removed = _removed(ordered)
    lost: list[str] = []
    for raw in distinct:  # (in log order: the first break is reported first)
        end = raw.rows[-1]["end"]
        prev = end.get(PREV_KEY)
        line = _end_line(raw)
        index = rank[raw.op_id]
        if prev is None:
            if required or (first_linked is not None and raw.op_id > first_linked):
                findings.add("error", "chain-missing", raw.path, line,
                             f"operation {raw.op_id} names no predecessor ('prev') in a chained log: the key was "
                             "removed, or a writer that does not chain inserted it")
            continue
        named = by_digest.get(prev) if isinstance(prev, str) else None
        if not is_digest(prev):
            message = f"its 'prev' {_short(prev)} is not a digest (64 lowercase hex digits)"
        elif prev == GENESIS:
            if all(_repair_root(before) for before in ordered[:index]):
                continue  # the first operation, or the first after a root a repair wrote before it
            message = (f"it names the start of a log (GENESIS) though {index} operation(s) were written before it: "
                       "another log was spliced in")
        elif named is not None and rank[named.op_id] < index:
            if raw.rows[-1].get("entity") == NOTE_ENTITY and end.get("kind") == NOTE_MERGE:
                merges[prev] += 1
            else:
                followers.setdefault(prev, []).append(raw)
            continue
        elif named is not None:
            message = (f"it names as its predecessor operation {named.op_id} at {_where(named)}, which was written "
                       "after it (its id is greater): the operations were changed")
        elif raw.op_id in after_damage:
            lost.append(prev)  # its predecessor was lost to the damage reported where it is
            continue
        elif prev in removed:
            continue  # it follows an operation a repair removed, and the repair's note says so
        elif index == 0:
            message = (f"it is the first operation of the log but follows {_short(prev)}, which the log does not "
                       "hold: the operations before it were removed")
        else:
            before = ordered[index - 1]
            message = (f"its predecessor {_short(prev)} is not in the log: operation {before.op_id} at "
                       f"{_where(before)} was changed, or operations between them were removed or inserted")
        findings.add("error", "chain-break", raw.path, line, f"operation {raw.op_id}: {message}")
    for prev, children in followers.items():
        extra = len(children) - 1 - merges[prev]
        if extra <= 0:
            continue
        base = by_digest[prev]
        names = ", ".join(f"{child.op_id} ({_where(child)})" for child in children)
        odd = children[-1]
        why = ("the log was merged from branches without the merge driver (it records where they fork), or "
               f"{extra} operation(s) were inserted beside the chain") if merged else \
            f"{extra} operation(s) were inserted beside the chain"
        findings.add("warning" if merged else "error", "chain-fork", odd.path, _end_line(odd),
                     f"operations {names} all follow operation {base.op_id} at {_where(base)}, and "
                     f"{merges[prev]} merge(s) of branches account for {merges[prev] + 1} of them: {why}")
    if not merges and all(len(children) == 1 for children in followers.values()):
        _check_order(distinct, ordered, findings)
    notes = tuple(_said(raw.rows[-1]["end"]) for raw in ordered if raw.rows[-1].get("entity") == NOTE_ENTITY)
    head = ordered[-1] if ordered else None
    chain = Chain(digest_of[head.op_id] if head is not None else GENESIS, head.op_id if head is not None else None,
                  len(linked), notes, tuple(lost))
    if recorded is not None:
        _check_recorded(recorded, ordered, digest_of, by_digest, findings)
    return chain


def _check_order(distinct: list[RawOperation], ordered: list[RawOperation], findings: Findings) -> None:
    """In a chain that never forked (no branches were merged into it), the operations lie in
    the order they were written, which is op-id order: one out of it was moved. (An upgrade
    chains a log in op-id order whatever order a merge had left it in: only what follows its
    note is judged.)"""
    upgraded = [raw.op_id for raw in ordered if _rechain(raw).get("reason") == "upgrade"]
    since = upgraded[-1] if upgraded else ""
    last: RawOperation | None = None
    for raw in distinct:
        if raw.op_id < since:
            continue
        if last is not None and raw.op_id < last.op_id:
            findings.add("warning", "chain-order", raw.path, _end_line(raw),
                         f"operation {raw.op_id} lies after operation {last.op_id} at {_where(last)}, though it was "
                         "written before it (its id is smaller), and no merge of branches explains it: operations "
                         "were moved (replay applies them in op-id order all the same: no answer changes)")
            return
        last = raw


def _repair_root(raw: RawOperation) -> bool:
    """True for the operation creating the root that a repair writes before a log whose first
    operation does not (``kwtree.ops.repair``)."""
    end = raw.rows[-1]["end"]
    return bool(end.get("kind") == "init" and end.get("actor") == "repair")


def _removed(distinct: list[RawOperation]) -> dict[str, str]:
    """The digests of operations a repair removed (its ``rechain`` notes name them), each
    with what removed it, for a person."""
    removed: dict[str, str] = {}
    for raw in distinct:
        gone = _rechain(raw).get("removed")
        for digest in gone if type(gone) is list else ():
            if is_digest(digest):
                removed[digest] = _said(raw.rows[-1]["end"])
    return removed


def _rechain(raw: RawOperation) -> dict[str, Any]:
    """What a ``rechain`` note says (its audit's ``rechain``); {} for any other operation."""
    end = raw.rows[-1]["end"]
    said = end.get("audit") if raw.rows[-1].get("entity") == NOTE_ENTITY else None
    found = said.get("rechain") if type(said) is dict else None
    return found if type(found) is dict else {}


def _check_recorded(recorded: str, ordered: list[RawOperation], digest_of: dict[str, str],
                    by_digest: dict[str, RawOperation], findings: Findings) -> None:
    """Look for the head a user recorded: the digest of one operation of the log, which
    reaches the log's start through its predecessors."""
    raw = by_digest.get(recorded)
    if raw is None:
        notes = [op for op in ordered if op.rows[-1].get("entity") == NOTE_ENTITY]
        since = "; the log was chained anew since: " + "; ".join(_said(op.rows[-1]["end"]) for op in notes) \
            if notes else ""
        findings.add("error", "chain-head", None, None,
                     f"no operation of the log has the recorded head {recorded}: an operation up to the one it "
                     f"named was changed or removed{since}")
        return
    ancestors = {raw.op_id}
    at = raw
    while True:
        prev = at.rows[-1]["end"].get(PREV_KEY)
        if prev == GENESIS:
            break
        found = by_digest.get(prev) if isinstance(prev, str) else None
        if found is None or found.op_id >= at.op_id:
            findings.add("error", "chain-head", at.path, _end_line(at),
                         f"the recorded head {_short(recorded)} is operation {raw.op_id}, but the chain from it back "
                         f"to the log's start breaks at operation {at.op_id}: an operation before it was changed or "
                         "removed")
            return
        ancestors.add(found.op_id)
        at = found
    aside = [op for op in ordered if op.op_id < raw.op_id and op.op_id not in ancestors
             and op.rows[-1].get("entity") != NOTE_ENTITY]
    after = sum(op.op_id > raw.op_id for op in ordered)
    beside = (f"; {len(aside)} operation(s) written before it are not among its predecessors (a branch merged in, "
              f"or inserted), the first {aside[0].op_id} at {_where(aside[0])}") if aside else ""
    findings.add("warning" if aside else "info", "chain-head", raw.path, _end_line(raw),
                 f"the recorded head {_short(recorded)} is operation {raw.op_id}: it and every operation it follows "
                 f"are as they were when it was recorded; {after} operation(s) were written after it{beside}")
