"""Replay: turn bytes of log rows into complete operations and fold them into a State.

``group_operations`` is the one grouper of rows into operations: replay, the sorted replay's
``parse_operations``, ``history()`` and snapshots of a past view (``operations_in_view``)
read the log through it, and ``verify`` through ``scan_operations``, the same grouper going
on past damage (its docstring is the contract).

``replay_chunk`` is the hot path of every open and refresh. It applies whole operations
only: rows are buffered until the row carrying ``end``, all of them are decoded (so a bad
row raises before anything is applied), then folded in by the State's one reducer
(``kwtree.engine.state.apply_rows``, which live writes use too). A trailing operation
without its end row is left unconsumed (a torn tail, or a write still in progress in
another process).

Out-of-order operation ids (logs merged from two branches) are detected, not handled here:
the caller falls back to ``replay_sorted``, which orders whole operations by id. A copy of
an operation right after itself (a naive merge or copy of lines) is read and skipped here,
so every replay applies an operation once, wherever its copies sit.

Every reader of operations (both replays here, ``history()`` and verify: the grouper) checks an
operation's checksum (format 2, ``kwtree.engine.events.with_checksum``) against the bytes it
already holds with ``check_checksum``, so a changed byte that still reads as JSON is CorruptLogError at
open, refresh and write alike, as other damage in the middle of the log is.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from kwtree.engine.events import CRC_KEY, DECODERS, Bound, checksum_problem, is_op_id
from kwtree.engine.state import State, apply_rows
from kwtree.errors import CorruptLogError
from kwtree.models import NOTE, ROOT_ID, Entity, Keyword, Note
from kwtree.stores.eventlog import seals_start
from kwtree.stores.segments import row_after_damage
from kwtree.validate import shown

__all__ = [
    "ChunkResult", "ChunkStatus", "Damage", "Grouped", "check_checksum", "checksum_issue", "group_operations",
    "operations_in_view", "parse_operations", "replay_chunk", "replay_sorted", "scan_operations", "whole_lines",
]

class ChunkStatus(enum.Enum):
    DONE = "done"  # every complete operation in the chunk was applied
    OUT_OF_ORDER = "out_of_order"  # an operation id not above the last applied one was met
    BOUND_REACHED = "bound_reached"  # the next operation lies past ``Bound.op_id``


@dataclass(frozen=True, slots=True)
class ChunkResult:
    status: ChunkStatus
    consumed_bytes: int  # end of the last whole operation applied (or skipped by the bound)
    consumed_lines: int


def _decode_row(row: dict[str, Any], op: str, path: str, line: int) -> Entity | Note:
    try:
        return DECODERS[row["entity"]](row, op)
    except (KeyError, TypeError, ValueError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise CorruptLogError(path, line, f"invalid row: {detail}") from None


def _check_end(end: object, op: str, rows: int, path: str, line: int) -> float:
    """Validate an end marker; returns the operation's timestamp."""
    if type(end) is not dict or type(end.get("kind")) is not str or type(end.get("actor")) is not str:
        raise CorruptLogError(path, line, "invalid end marker")
    ts = end.get("ts")
    if type(ts) is not float and type(ts) is not int:
        raise CorruptLogError(path, line, "end marker has no numeric 'ts'")
    if end.get("rows") != rows:
        raise CorruptLogError(path, line, f"operation {op} announces {end.get('rows')} rows but has {rows}")
    return float(ts)


def _check_note(entities: list[Any], op: str, path: str, line: int) -> None:
    """A note is an operation of its one row: rows of entities beside it would change the state
    unseen (a note moves neither ``op_count`` nor ``last_op_id``, and history() skips it)."""
    if len(entities) > 1 and any(entity is NOTE for entity in entities):
        raise CorruptLogError(path, line, f"operation {op} holds a note and {len(entities) - 1} other row(s): "
                                          "a note is an operation of one row")


def checksum_issue(encoded: bytes, end: Mapping[str, Any], *, required: bool) -> str | None:
    """What is wrong with the checksum in ``end`` for ``encoded``, an operation's rows as
    read, or None when it matches; an end marker without one is damage only where every
    operation has one (``required``, a format-2 log)."""
    if CRC_KEY in end:
        return checksum_problem(encoded, end)
    if not required:
        return None
    return ("its end marker has no checksum, which every operation of a format-2 log has: the key was damaged, "
            "or the operation comes from a log that was not upgraded")


def check_checksum(
    encoded: bytes, end: Mapping[str, Any], op_id: str, path: str, line: int, *, required: bool
) -> None:
    """Raise CorruptLogError (at ``line``, the operation's end row, where ``verify`` reports it
    too) when ``checksum_issue`` finds one."""
    problem = checksum_issue(encoded, end, required=required)
    if problem is None:
        return
    raise CorruptLogError(
        path, line,
        f"operation {op_id}: {problem}; this is damage in the middle of the log: `kwtree verify` lists the "
        f"damage and `kwtree repair` moves the damaged operation to quarantine/ and keeps every intact one",
    )


def _check_root(entities: list[Entity | Note], path: str, first_line: int) -> None:
    """The first row of the log must be the root keyword (as ``replay_chunk`` requires)."""
    first = entities[0]
    if type(first) is not Keyword or first.id != ROOT_ID:
        raise CorruptLogError(path, first_line, "row before the root keyword exists")


def whole_lines(data: bytes) -> list[bytes]:
    """The whole lines of ``data`` without their newlines: a partial last line (torn, or
    still being written) is left out."""
    lines = data.split(b"\n")
    lines.pop()  # the partial last line, or b"" after the final newline
    return lines


@dataclass(frozen=True, slots=True)
class Damage:
    """What ``group_operations(..., lenient=True)`` could not use, in file order.

    ``kind`` "line": line ``start`` (``stop`` = ``start + 1``) is not a row: ``code`` and
    ``why`` say why. When ``cut`` >= 0 a row begins at that byte of the line (what follows a
    zeroed block, or a damaged newline that ended right at a row's start) and is read on as
    the line's rest; otherwise the whole line is lost.

    ``kind`` "operation": the rows of ``lines[start:stop]`` (the first of them perhaps the
    rest of a damaged line) are not a usable operation, for the reason ``code`` and ``why``
    give at line number ``line``: "incomplete-operation" (another operation began before its
    end row), "checksum", or "" when they were cut short by the damaged line reported next.
    ``rows`` are those rows, parsed.
    """

    kind: str
    start: int
    stop: int
    line: int
    code: str
    why: str
    cut: int = -1
    rows: tuple[dict[str, Any], ...] = ()


class _BadOpId(Exception):
    """A row whose op is not an operation id (the lenient grouper's line damage)."""


def _line_damage(line: bytes, exc: Exception, offset: int) -> tuple[str, str]:
    """(finding code, why) of a whole line that is not a row, found at byte ``offset``."""
    nul = line.find(b"\0")  # (a NUL inside a JSON string is escaped: never part of a row)
    if nul >= 0:
        return "hidden-bytes", (f"a NUL byte at byte {offset + nul} inside the line (a zeroed block or a damaged "
                                "byte): readers stop at it, so the operations after it are hidden")
    if isinstance(exc, orjson.JSONDecodeError):
        return "unreadable-row", f"unreadable row: {exc}"
    if isinstance(exc, _BadOpId):
        return "invalid-op-id", f"invalid operation id {shown(exc.args[0])} (32 lowercase hex digits expected)"
    return "unreadable-row", f"not a row with 'op' and a known 'entity': {exc}"


#: A complete operation as the grouper yields it: (op id, start, stop, items, ts).
Grouped = tuple[str, int, int, list[Any], float]


def group_operations(
    lines: list[bytes], path: str, first_line: int, *, checksums: bool = False, decode: bool = False,
    after: str | None = None, until: str | None = None,
) -> Iterator[Grouped]:
    """The one grouper of log rows into operations: every reader of the log (replay, the
    sorted replay's ``parse_operations``, ``history``, snapshots of a past view, and
    ``verify`` with ``lenient``) reads operations through it.

    ``lines`` are whole lines of one segment (``whole_lines``), the first of them line number
    ``first_line`` of ``path``. Yields ``(op id, start, stop, items, ts)`` for each complete
    operation, lazily, in file order: its rows are ``lines[start:stop]``; ``items`` are the
    rows decoded to entities with ``decode`` (as replay applies them), else the parsed rows;
    ``ts`` is its end marker's timestamp with ``decode``, else 0.0. The contract:

    - A row is a JSON object with an ``op`` and a known ``entity``, and ``op`` is an
      operation id (32 lowercase hex digits); any other whole line is CorruptLogError at it,
      as is, with ``decode``, a row that does not decode (``invalid row``), reported as it
      is read, before the rows after it.
    - An operation is a run of consecutive rows with one op id, ended by the first of them
      that carries ``end``. A row of another operation before that end row is damage in the
      middle of the log (CorruptLogError at the first row of the unended operation); rows
      after the last end row (a torn tail, or an operation still being written) are not
      yielded, and the caller's position stays at the end of the last operation yielded.
    - At its end row each operation's checksum is checked against its bytes as read
      (``check_checksum``; one is required when ``checksums``, a format-2 log). With
      ``decode`` the end marker is checked first (kind, actor, numeric ts, its row count);
      without, a checksum is checked only in an end marker that is an object (the reader
      that decodes it reports any other).
    - A copy of an operation right after itself (same id, after its end row) is a new
      operation: the caller decides to skip it. NUL padding is not a line here: the log
      store hands over data up to the first NUL byte.
    - Replay's stops: with ``after`` (the last op id already applied; "" for none), an
      operation whose id is below the last one met (``after``, then each yielded one) and
      not equal to it, and with ``until``, one whose id is above ``until``, ends the
      iteration at its first row, once that row is known to be a row: nothing more of it is
      read or checked, and the last item yielded is ``(its op id, start, start, [], 0.0)``
      (an empty ``items``: no complete operation has none).
    - ``scan_operations`` reads the same way but goes on past damage: a line that is not a
      row (and a row making up the end of it, which is read on), an operation cut short by
      another or by a damaged line, an operation whose checksum does not match.
    """
    return _group(lines, path, first_line, checksums, decode, after, until, False)


def scan_operations(lines: list[bytes], path: str, first_line: int, *, checksums: bool) -> Iterator[Grouped | Damage]:
    """``group_operations`` for a reader that goes on past damage (``verify``): each piece of
    damage is yielded as a :class:`Damage` where it is met instead of raised, and the
    operations around it are yielded as ``group_operations`` yields them (parsed rows)."""
    return _group(lines, path, first_line, checksums, False, None, None, True)


def _group(
    lines: list[bytes], path: str, first_line: int, checksums: bool, decode: bool,
    after: str | None, until: str | None, lenient: bool,
) -> Iterator[Any]:
    """The grouper itself (see ``group_operations``; ``lenient`` as ``scan_operations``)."""
    loads = orjson.loads
    decoders = DECODERS
    current = ""  # the operation whose rows are being read ("" between operations)
    start = 0  # the index of its first line
    head = b""  # that line's text as read (lenient: the rest of a damaged line)
    pending: list[Any] = []  # its rows (decoded when ``decode``)
    offset = counted = 0  # lenient: where line ``counted`` begins in the data
    for index, line in enumerate(lines):
        try:
            row = loads(line)
            op = row["op"]
            decoder = decoders[row["entity"]]
            if lenient and op != current and not is_op_id(op):
                raise _BadOpId(op)
        except (orjson.JSONDecodeError, KeyError, TypeError, _BadOpId) as exc:
            if not lenient:
                if isinstance(exc, orjson.JSONDecodeError):
                    raise CorruptLogError(path, first_line + index, f"unreadable row: {exc}") from None
                raise CorruptLogError(
                    path, first_line + index, f"not a row with 'op' and a known 'entity': {exc}"
                ) from None
            offset += sum(len(before) + 1 for before in lines[counted:index])  # (only past damage)
            counted = index
            code, why = _line_damage(line, exc, offset)
            if pending:
                yield Damage("operation", start, index, first_line + start, "", "", rows=tuple(pending))
                current, pending = "", []
            cut, rest = row_after_damage(line)
            entity = rest.get("entity") if rest is not None else None
            found = decoders.get(entity) if isinstance(entity, str) else None
            yield Damage("line", index, index + 1, first_line + index, code, why, cut if found else -1)
            if found is None or rest is None:
                continue
            row, op, line, decoder = rest, rest["op"], line[cut:], found
        if op != current:
            if pending:
                why = f"operation {current} has no end row before operation {op} starts"
                if not lenient:
                    raise CorruptLogError(path, first_line + index - len(pending), why)
                yield Damage("operation", start, index, first_line + start, "incomplete-operation", why,
                             rows=tuple(pending))
                pending = []
            if not is_op_id(op):  # (verify's test too: 32 lowercase hex digits)
                raise CorruptLogError(path, first_line + index, f"invalid operation id {op!r}")
            if after is not None:
                if op < after:
                    yield op, index, index, [], 0.0
                    return
                after = op
            if until is not None and op > until:
                yield op, index, index, [], 0.0
                return
            current = op
            start = index
            head = line
        if decode:
            try:  # _decode_row inlined: this loop runs once per row of every open
                pending.append(decoder(row, current))  # (one op id object for all its rows: memory)
            except (KeyError, TypeError, ValueError) as exc:
                detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
                raise CorruptLogError(path, first_line + index, f"invalid row: {detail}") from None
        else:
            pending.append(row)
        if "end" not in row:
            continue
        end = row["end"]
        ts = 0.0
        if decode:
            ts = _check_end(end, op, len(pending), path, first_line + index)
            if start != index:
                _check_note(pending, op, path, first_line + index)
        if decode or type(end) is dict:
            # The CRC of the bytes already in hand: the line itself for the usual one-row operation.
            if start == index:
                encoded = line
            elif head is lines[start]:
                encoded = b"\n".join(lines[start:index + 1])
            else:
                encoded = b"\n".join([head, *lines[start + 1:index + 1]])
            if not lenient:
                check_checksum(encoded, end, op, path, first_line + index, required=checksums)
            else:
                problem = checksum_issue(encoded, end, required=checksums)
                if problem is not None:
                    yield Damage("operation", start, index + 1, first_line + index, "checksum", problem,
                                 rows=tuple(pending))
                    current, pending = "", []
                    continue
        yield op, start, index + 1, pending, ts
        current = ""
        pending = []


def _bytes_of(lines: list[bytes], count: int) -> int:
    """The bytes the first ``count`` lines took in the data they came from (newlines included)."""
    return sum(map(len, lines[:count])) + count


def replay_chunk(
    state: State, data: bytes, path: str, first_line: int, bound: Bound | None = None, *, checksums: bool = False
) -> ChunkResult:
    """Apply the complete operations in ``data`` (whole lines from one segment, starting at
    line number ``first_line``) and say how far it got.

    Operations are read by ``group_operations``, which decodes rows as they are read; each
    is applied only when its end row has been read, so a state never holds part of an
    operation: rows after the last end row (a torn or still-growing operation) are left
    unconsumed, and a bad row raises CorruptLogError before any row of its operation is
    applied (earlier operations stay applied). A complete line that is not a valid row
    raises too, wherever it is, and so does an operation whose checksum does not match its
    bytes (``check_checksum``; one is required of each operation when ``checksums``, a
    format-2 log). A bound by timestamp is not handled here (see ``replay_sorted``).
    """
    assert bound is None or bound.timestamp is None
    lines = whole_lines(data)
    fold = apply_rows
    have_root = ROOT_ID in state.keywords
    last_op = state.last_op_id or ""
    done_lines = 0
    status = ChunkStatus.DONE
    found = group_operations(lines, path, first_line, checksums=checksums, decode=True, after=last_op,
                             until=bound.op_id if bound is not None else None)
    for op, _, done, entities, ts in found:
        if not entities:  # the grouper stopped before ``op``
            status = ChunkStatus.OUT_OF_ORDER if op < last_op else ChunkStatus.BOUND_REACHED
            break
        if not have_root:
            first = entities[0]
            if type(first) is not Keyword or first.id != ROOT_ID:
                # The root comes first in op-id order; if it does not come first in the file,
                # the file is out of order (a merged log) and the sorted replay decides.
                status = ChunkStatus.OUT_OF_ORDER
                break
            have_root = True
        done_lines = done
        if op == last_op:
            continue  # a copy of the operation applied just before
        fold(state, op, ts, entities)
        last_op = op
    return ChunkResult(status, _bytes_of(lines, done_lines), done_lines)


@dataclass(slots=True)
class RawOperation:
    """The rows of one complete operation, where they were found (``data``: its bytes as
    read, when the reader kept them; verify does, for the hash chain)."""

    op_id: str
    rows: list[dict[str, Any]]
    path: str
    first_line: int
    data: bytes = b""


def parse_operations(
    data: bytes, path: str, first_line: int, *, checksums: bool = False
) -> tuple[list[RawOperation], int, int]:
    """Split ``data`` into complete operations without applying them (``group_operations``:
    each one's checksum is checked as ``replay_chunk`` checks it).

    Returns the operations, and the bytes and lines they cover (a torn tail is left out).
    """
    lines = whole_lines(data)
    operations = [
        RawOperation(op, rows, path, first_line + start)
        for op, start, _, rows, _ in group_operations(lines, path, first_line, checksums=checksums)
    ]
    done_lines = 0
    if operations:
        last = operations[-1]
        done_lines = last.first_line - first_line + len(last.rows)
    return operations, _bytes_of(lines, done_lines), done_lines


def operations_in_view(data: bytes, path: str, bound: Bound) -> bytes:
    """The lines of the whole operations in ``data`` (one segment's bytes, read from ``path``)
    that a view bounded by ``bound`` applies: those with an op id up to ``bound.op_id`` and
    an end stamp up to ``bound.timestamp``, in file order; seal lines and a torn tail are left
    out. CorruptLogError as ``group_operations`` raises it, or at an end marker the view
    could not read."""
    lines = whole_lines(data[: seals_start(data)])
    kept: list[bytes] = []
    for op, start, stop, rows, _ in group_operations(lines, path, 1):
        if bound.op_id is not None and op > bound.op_id:
            continue
        if bound.timestamp is not None and _check_end(rows[-1]["end"], op, len(rows), path, stop) > bound.timestamp:
            continue
        kept.extend(lines[start:stop])
    return b"".join(line + b"\n" for line in kept)


def replay_sorted(state: State, operations: Iterable[RawOperation], bound: Bound | None = None) -> None:
    """Apply whole operations in op-id order, whatever order they were found in.

    Copies of one operation (the same id, e.g. after a naive merge) are applied once.
    """
    ordered = sorted(operations, key=lambda raw: raw.op_id)
    last = ""
    for raw in ordered:
        if raw.op_id == last:
            continue
        if bound is not None and bound.op_id is not None and raw.op_id > bound.op_id:
            break
        last = raw.op_id
        entities = [
            _decode_row(row, raw.op_id, raw.path, raw.first_line + offset) for offset, row in enumerate(raw.rows)
        ]
        end_line = raw.first_line + len(raw.rows) - 1
        ts = _check_end(raw.rows[-1]["end"], raw.op_id, len(raw.rows), raw.path, end_line)
        _check_note(entities, raw.op_id, raw.path, end_line)
        if bound is not None and bound.timestamp is not None and ts > bound.timestamp:
            continue
        if ROOT_ID not in state.keywords:
            _check_root(entities, raw.path, raw.first_line)
        apply_rows(state, raw.op_id, ts, entities)
