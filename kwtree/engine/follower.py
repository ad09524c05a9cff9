"""Keeping a State in step with the event log: the initial replay on open, tailing what other
processes append, and the op-id-ordered replay that merged logs need.

After each segment's data, the JSONL store's ``check_tail`` (``kwtree.stores.segments``)
decides what the bytes after the last whole operation are. Only a torn tail — an incomplete
last operation of the newest segment with nothing after it that completes an operation; zero
padding is normal — is ignored (and left for the next writer to move to quarantine/).
Anything else is damage in the middle of the log, CorruptLogError at the damaged line, at
open, refresh and write alike: a NUL byte or a zeroed block hiding whole operations after it,
an incomplete operation at the end of a sealed segment, or a seal naming a successor segment
the log lacks (format 2). A whole
operation whose checksum does not match its bytes is found by the replay itself (format 2:
``kwtree.engine.replay.check_checksum``, told by ``EventLog.checksums`` that every operation has one).
"""

from __future__ import annotations

import logging
import threading

from kwtree.engine.events import Bound
from kwtree.engine.replay import (
    ChunkStatus,
    RawOperation,
    parse_operations,
    replay_chunk,
    replay_sorted,
)
from kwtree.engine.state import State
from kwtree.stores.eventlog import EventLog
from kwtree.stores.logstore import LogStore, Position
from kwtree.stores.segments import check_tail

__all__ = ["follow", "follow_store"]

log = logging.getLogger("kwtree.engine.replay")


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
        if pending.data:  # (usually nothing is new before a write)
            with state_lock:
                result = replay_chunk(state, pending.data, pending.path, pending.first_line, bound,
                                      checksums=events.checksums)
            events.advance(result.consumed_bytes, result.consumed_lines)
            if result.status is ChunkStatus.OUT_OF_ORDER:
                log.info("operations out of id order in %s (a merged log): replaying in op-id order", pending.path)
                return replay_all_sorted(events, bound)
            if result.status is ChunkStatus.BOUND_REACHED:
                return state
        check_tail(events, pending, at_open)
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
        found, nbytes, nlines = parse_operations(pending.data, pending.path, pending.first_line,
                                                 checksums=events.checksums)
        operations.extend(found)
        events.advance(nbytes, nlines)
        check_tail(events, pending, at_open=True)
        if not events.next_segment():
            break
    state = State()
    replay_sorted(state, operations, bound)
    return state


def follow_store(
    store: LogStore, position: Position | None, state: State, bound: Bound | None, state_lock: threading.Lock,
) -> tuple[State, Position | None]:
    """Apply every whole operation ``store`` holds after ``position`` (None: the whole log;
    up to ``bound``); returns the state and the position to pass next time (and to
    ``LogStore.append``).

    The state is the one passed in, updated in place, or a new one when the store says the
    log was replaced (a ``restart`` batch) or the log holds operations out of id order and is
    replayed from the start, sorted. Once ``bound`` is reached the position stays before the
    batch that reached it: a view with a bound never tails again. This is ``follow`` over the
    log-store seam: torn tails, checksums and replaced logs are the store's business.
    """
    if bound is not None and bound.timestamp is not None:
        return _replay_store_sorted(store, bound)  # (as ``follow``: a view by time replays sorted)
    for batch in store.tail(position):
        if batch.restart:
            log.info("the log was replaced (compacted or restored): replaying it")
            state = State()
        if batch.data:
            with state_lock:
                result = replay_chunk(state, batch.data, batch.source, batch.first_line, bound,
                                      checksums=batch.checksums)
            if result.status is ChunkStatus.OUT_OF_ORDER:
                log.info("operations out of id order in %s (a merged log): replaying in op-id order", batch.source)
                return _replay_store_sorted(store, bound)
            if result.status is ChunkStatus.BOUND_REACHED:
                return state, position
        position = batch.end
    return state, position


def _replay_store_sorted(store: LogStore, bound: Bound | None) -> tuple[State, Position | None]:
    """A new State from every whole operation in ``store``, applied in op-id order, and the
    position at the end of the log."""
    operations: list[RawOperation] = []
    position = None
    for batch in store.read(None):
        operations.extend(parse_operations(batch.data, batch.source, batch.first_line,
                                           checksums=batch.checksums)[0])
        position = batch.end
    state = State()
    replay_sorted(state, operations, bound)
    return state, position
