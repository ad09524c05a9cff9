"""Reading whole operations back from the log: ``history()`` and the operation ``undo`` needs.

History is read from disk, not kept in memory (a tree of a million keywords would otherwise
carry a million operation records). Lines are grouped into operations by replay's grouper
(``kwtree.engine.replay.group_operations``: the same rows, end markers, torn tails, copies
and checksums), and only the operations that can match (their lines contain the requested
entity id) are decoded in full, before-images and audit included. ``find_operation`` finds
its operation's rows without reading the others: rows start with ``{"op":"<32 hex digits>"``.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kwtree.engine.events import Bound, decode_operation
from kwtree.engine.replay import group_operations, whole_lines
from kwtree.errors import CorruptLogError
from kwtree.models import Info, Keyword, Link, Operation, Relation, entity_key

__all__ = ["find_in", "find_operation", "read_history", "touches"]

_PREFIX = b'{"op":"'
_ID_END = len(_PREFIX) + 32  # where a row's op id ends


def _decode(path: str, first_line: int, rows: list[dict[str, Any]]) -> Operation:
    """The full operation (before-images and audit) of a complete group of ``rows``."""
    try:
        return decode_operation(rows)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptLogError(path, first_line, f"invalid operation: {exc}") from None


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


def _run(data: bytes, at: int, prefix: bytes) -> tuple[int, int, int]:
    """(start, end, after) of the run of whole lines that start with ``prefix`` (a row's
    ``{"op":"<op id>``) around the line starting at ``at``: the rows of one operation (and of
    any copy of it right after), whose rows are consecutive lines; ``after`` ends the line
    that follows the run, which the grouper reads too, so that an operation without its end
    row before the next one starts is damage here as it is to replay."""
    start = at
    while start:
        previous = data.rfind(b"\n", 0, start - 1) + 1
        if not data.startswith(prefix, previous):
            break
        start = previous
    end = at
    while True:
        newline = data.find(b"\n", end)
        if newline < 0:
            break  # (a partial last line: whole_lines leaves it out)
        end = newline + 1
        if not data.startswith(prefix, end):
            break
    return start, end, data.find(b"\n", end) + 1 or len(data)


def _operations(path: str, data: bytes, needle: bytes | None) -> Iterator[tuple[str, int, list[dict[str, Any]]]]:
    """(op id, first line, rows) of the complete operations of one segment, read by the
    grouper; with ``needle``, only of those whose lines hold it, which are found by searching
    the bytes, so that the lines of the others are never parsed."""
    if needle is None:
        for op_id, start, _, rows, _ in group_operations(whole_lines(data), path, 1):
            yield op_id, start + 1, rows
        return
    line, counted = 1, 0  # the line number of byte ``counted``
    at = data.find(needle)
    while at >= 0:
        start = data.rfind(b"\n", 0, at) + 1
        prefix = data[start:start + _ID_END]
        if len(prefix) < _ID_END or not prefix.startswith(_PREFIX):
            # A row in another key order (valid, if not kwtree's own): read every operation.
            yield from _operations(path, data, None)
            return
        start, end, after = _run(data, start, prefix)
        line += data.count(b"\n", counted, start)
        counted = start
        op_id = prefix[len(_PREFIX):].decode()
        for found, first, _, rows, _ in group_operations(whole_lines(data[start:after]), path, line):
            if found == op_id:
                yield found, line + first, rows
        at = data.find(needle, max(end, at + 1))


def read_history(
    segments: Iterable[tuple[str, bytes]],
    entity_id: str | None,
    limit: int | None,
    bound: Bound | None,
) -> list[Operation]:
    """Complete operations, oldest first (by op id), optionally only those touching
    ``entity_id`` and only the newest ``limit`` of them; notes (they change no entity) are
    left out: ``verify`` reports what they say."""
    # A link or relation key ("<id>/<id>[/<type>]") is not in the rows verbatim; its first
    # id is, so that is what the bytes are searched for before parsing.
    needle = entity_id.split("/", 1)[0].encode() if entity_id is not None else None
    found: dict[str, Operation] = {}
    in_order = True
    last = ""
    for path, data in segments:
        for op_id, first_line, rows in _operations(path, data, needle):
            op = _decode(path, first_line, rows)
            if not op.changes or not _in_view(op, bound):
                continue  # (a note, kwtree.models.Note, changed no entity: it is no part of history)
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
    guess = max(bisect.bisect_right(segment_names, op_id) - 1, 0)
    return find_in(((read(index)) for index in [guess, *(i for i in range(len(segment_names)) if i != guess)]),
                   op_id)


def find_in(parts: Iterable[tuple[str, bytes]], op_id: str) -> Operation | None:
    """The complete operation ``op_id`` in the first of ``parts`` ((source, whole rows) each,
    as a store's batches or segments give them) that holds its rows; None when none does, or
    when the rows found have no end row (torn)."""
    needle = _PREFIX + op_id.encode()
    for path, data in parts:
        at = _row_start(data, needle)
        if at < 0:
            continue
        start, _, after = _run(data, at, needle)
        first_line = data.count(b"\n", 0, start) + 1
        for found, first, _, rows, _ in group_operations(whole_lines(data[start:after]), path, first_line):
            if found == op_id:
                return _decode(path, first_line + first, rows)  # the first copy, as replay applies it
        return None  # it has no end row: torn
    return None
