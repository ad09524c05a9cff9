"""Keeping a State in step with the event log: the initial replay on open, tailing what other
processes append, and the op-id-ordered replay that merged logs need."""

from __future__ import annotations

import logging
import threading

from kwtree.errors import CorruptLogError
from kwtree.replay import (
    Bound,
    ChunkStatus,
    RawOperation,
    parse_operations,
    replay_chunk,
    replay_sorted,
)
from kwtree.state import State
from kwtree.stores.eventlog import EventLog

__all__ = ["follow"]

log = logging.getLogger("kwtree.replay")


def _check_tail(events: EventLog, path: str, at_open: bool) -> None:
    if not events.unconsumed_bytes:
        return
    segment, offset, line = events.position
    if not events.on_last_segment:
        raise CorruptLogError(path, line, f"sealed segment {segment} ends with an incomplete operation (byte {offset})")
    if at_open:
        log.warning(
            "ignored %d bytes of an incomplete operation at the end of %s (byte %d): a torn write "
            "from a crashed writer, or a write still in progress; the next writer moves a torn "
            "tail to quarantine/",
            events.unconsumed_bytes, path, offset,
        )


def follow(events: EventLog, state: State, bound: Bound | None, state_lock: threading.Lock, *, at_open: bool) -> State:
    """Apply every complete operation after the log's read position (up to ``bound``).

    Returns the state: the one passed in, updated in place, or a new one if the log turned
    out to hold operations out of id order and had to be replayed from the start, sorted,
    or if compaction replaced the log since the last look.
    """
    if bound is not None and bound.timestamp is not None:
        # A view by time needs each operation's timestamp before its rows are applied, which
        # the buffered, sorted replay has (and a fixed view never tails afterwards).
        return replay_all_sorted(events, bound)
    if bound is None and events.rewritten():
        log.info("the log in %s was replaced (compacted or restored): replaying it", events.log_dir)
        events.reattach()
        state = State()
    try:
        return _tail(events, state, bound, state_lock, at_open)
    except FileNotFoundError:
        # The log was replaced and the old one removed between the check above and a read.
        if bound is not None or not events.rewritten():
            raise
        events.reattach()
        return _tail(events, State(), bound, state_lock, at_open)


def _tail(events: EventLog, state: State, bound: Bound | None, state_lock: threading.Lock, at_open: bool) -> State:
    while True:
        pending = events.read_pending()
        if pending is None:
            return state
        if not pending.data:  # the common case before a write: nothing new
            if events.next_segment():
                continue
            return state
        with state_lock:
            result = replay_chunk(state, pending.data, pending.path, pending.first_line, bound)
        events.advance(result.consumed_bytes, result.consumed_lines)
        if result.status is ChunkStatus.OUT_OF_ORDER:
            log.info("operations out of id order in %s (a merged log): replaying in op-id order", pending.path)
            return replay_all_sorted(events, bound)
        if result.status is ChunkStatus.BOUND_REACHED:
            return state
        _check_tail(events, pending.path, at_open)
        if not events.next_segment():
            return state


def replay_all_sorted(events: EventLog, bound: Bound | None) -> State:
    """A new State from every complete operation in the log, applied in op-id order."""
    events.rewind()
    operations: list[RawOperation] = []
    while True:
        pending = events.read_pending()
        if pending is None:
            break
        found, nbytes, nlines = parse_operations(pending.data, pending.path, pending.first_line)
        operations.extend(found)
        events.advance(nbytes, nlines)
        _check_tail(events, pending.path, at_open=True)
        if not events.next_segment():
            break
    state = State()
    replay_sorted(state, operations, bound)
    return state
