"""Reading whole operations back from the log: ``history()`` and the operation ``undo`` needs.

History is read from disk, not kept in memory (a tree of a million keywords would otherwise
carry a million operation records). Rows start with ``{"op":"<32 hex digits>"``, so lines
are grouped into operations by slicing that id out without parsing, and only the groups
that can match (they contain the requested entity id, or the requested op id) are parsed,
and have their checksum checked (``kwtree.engine.replay.check_checksum``).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Iterator

import orjson

from kwtree.engine.events import decode_operation
from kwtree.engine.replay import Bound, check_checksum
from kwtree.errors import CorruptLogError
from kwtree.models import Info, Keyword, Link, Operation, Relation, entity_key

__all__ = ["find_operation", "read_history", "touches"]

_PREFIX = b'{"op":"'
_ID_SLICE = slice(len(_PREFIX), len(_PREFIX) + 32)


def _groups(path: str, data: bytes) -> Iterator[tuple[str, int, list[bytes]]]:
    """(op id, first line number, lines) of each run of lines sharing an op id."""
    lines = data.split(b"\n")
    lines.pop()
    group: list[bytes] = []
    current = b""
    start = 1
    for index, line in enumerate(lines):
        if not line.startswith(_PREFIX):
            raise CorruptLogError(path, index + 1, "row does not start with its op id")
        op = line[_ID_SLICE]
        if op != current and group:
            yield current.decode(), start, group
            group = []
        if not group:
            current, start = op, index + 1
        group.append(line)
    if group:
        yield current.decode(), start, group


def _decode(path: str, start: int, lines: list[bytes]) -> Operation | None:
    """The operation in ``lines``, or None if it is torn (no end row)."""
    try:
        rows = [orjson.loads(line) for line in lines]
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(path, start, f"unreadable row: {exc}") from None
    if "end" not in rows[-1]:
        return None
    # A copy of an operation right after itself shares its op id, so it lands in the same
    # group: the operation ends at its first end row (copies are applied once, as replay does).
    ends = next(index for index, row in enumerate(rows) if "end" in row) + 1
    rows = rows[:ends]
    if type(rows[-1]["end"]) is dict:  # (decode_operation reports any other end marker)
        check_checksum(b"\n".join(lines[:ends]), rows[-1]["end"], rows[0]["op"], path, start + ends - 1,
                       required=False)
    try:
        return decode_operation(rows)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptLogError(path, start, f"invalid operation: {exc}") from None


def touches(op: Operation, entity_id: str) -> bool:
    """True if ``op`` wrote ``entity_id`` itself (an id, or a link or relation key), or a
    link or relation that ends at it."""
    if "/" in entity_id:
        return any(entity_key(change.after) == entity_id for change in op.changes)
    for change in op.changes:
        e = change.after
        kind = type(e)
        if kind is Keyword or kind is Info:
            if e.id == entity_id:  # type: ignore[union-attr]
                return True
        elif kind is Link:
            if entity_id in (e.info_id, e.keyword_id):  # type: ignore[union-attr]
                return True
        elif kind is Relation and entity_id in (e.from_id, e.to_id):  # type: ignore[union-attr]
            return True
    return False


def _in_view(op: Operation, bound: Bound | None) -> bool:
    if bound is None:
        return True
    if bound.op_id is not None:
        return op.op_id <= bound.op_id
    return bound.timestamp is None or op.timestamp <= bound.timestamp


def read_history(
    segments: Iterable[tuple[str, bytes]],
    entity_id: str | None,
    limit: int | None,
    bound: Bound | None,
) -> list[Operation]:
    """Complete operations, oldest first (by op id), optionally only those touching
    ``entity_id`` and only the newest ``limit`` of them."""
    # A link or relation key ("<id>/<id>[/<type>]") is not in the rows verbatim; its first
    # id is, so that is what lines are screened for before parsing.
    needle = entity_id.split("/", 1)[0].encode() if entity_id is not None else None
    found: dict[str, Operation] = {}
    in_order = True
    last = ""
    for path, data in segments:
        for op_id, start, lines in _groups(path, data):
            if needle is not None and not any(needle in line for line in lines):
                continue
            op = _decode(path, start, lines)
            if op is None or not _in_view(op, bound):
                continue
            if entity_id is not None and not touches(op, entity_id):
                continue
            if op_id <= last:
                in_order = False
            last = max(last, op_id)
            found.setdefault(op_id, op)
    ops = list(found.values())
    if not in_order:
        ops.sort(key=lambda op: op.op_id)
    if limit is not None:
        ops = list(deque(ops, maxlen=limit))
    return ops


def _row_start(data: bytes, needle: bytes) -> int:
    """Offset of the first line that starts with ``needle`` (a before-image that mentions
    the same op id sits inside a line, not at its start), or -1."""
    at = data.find(needle)
    while at > 0 and data[at - 1] != 0x0A:
        at = data.find(needle, at + 1)
    return at


def find_operation(segment_names: list[str], read: Callable[[int], tuple[str, bytes]], op_id: str) -> Operation | None:
    """The complete operation ``op_id``, looking first in the segment its id sorts into.

    ``read(index)`` returns (path, data) of segment ``index``.
    """
    needle = _PREFIX + op_id.encode()
    guess = max(bisect.bisect_right(segment_names, op_id) - 1, 0)
    for index in [guess, *(i for i in range(len(segment_names)) if i != guess)]:
        path, data = read(index)
        at = _row_start(data, needle)
        if at < 0:
            continue
        end = at
        while True:  # the rows of one operation are consecutive lines
            newline = data.find(b"\n", end)
            if newline < 0:
                return None  # its last row is torn
            end = newline + 1
            if not data.startswith(needle, end):
                break
        lines = data[at:end].split(b"\n")[:-1]
        return _decode(path, data.count(b"\n", 0, at) + 1, lines)
    return None
