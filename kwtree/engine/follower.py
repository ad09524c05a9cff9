"""Keeping a State in step with the durable log, through the log-store seam
(``kwtree.stores.logstore``): the initial replay on open, tailing what other processes
appended, starting over on a log that was replaced, the op-id-ordered replay that merged
logs need, and the background follower of a shared log that announces its appends.

The store hands out whole operations only: what follows them (a torn tail, which is withheld;
damage in the middle of the log, CorruptLogError) is the store's to judge (for the JSONL store,
``kwtree.stores.segments.check_tail``). A whole operation whose checksum does not match its
bytes is found by the replay itself (``kwtree.engine.replay.check_checksum``, told by
``Batch.checksums`` that every operation carries one).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator
from typing import NamedTuple

from kwtree.engine.events import GENESIS, Bound, decode_info, decode_keyword, last_operation, op_digest
from kwtree.engine.replay import (
    ChunkStatus,
    RawOperation,
    parse_operations,
    replay_chunk,
    replay_sorted,
)
from kwtree.engine.state import State
from kwtree.errors import ClosedError, KwtreeError
from kwtree.heap import collector_paused, release_freed
from kwtree.models import Info, Keyword
from kwtree.stores.logstore import LogStore, Position

__all__ = ["FOLLOW_POLL", "BackgroundFollower", "Followed", "follow", "newer_versions", "replay_store"]

log = logging.getLogger("kwtree.engine.replay")

#: How often a background follower asks the log when no append was announced, seconds.
FOLLOW_POLL = 1.0
#: How long closing a tree waits for its follower to end, seconds.
STOP_WAIT = 2.0


class Followed(NamedTuple):
    """What ``follow`` read: the state, the position to pass next time (and to
    ``LogStore.append``), and, for a chained store (format 3), the digest of the last
    operation in the log as read (what the next append names as ``prev``; GENESIS for an
    empty log read from its start), or None when it read no operation (the head is as it was)
    or the store is not chained."""

    state: State
    position: Position | None
    head: str | None


def _head(data: bytes) -> str:
    """The digest of the last operation in ``data`` (a batch's whole operations)."""
    return op_digest(last_operation(data))


def follow(
    store: LogStore, position: Position | None, state: State, bound: Bound | None, state_lock: threading.Lock,
) -> Followed:
    """Apply every whole operation ``store`` holds after ``position`` (None: the whole log;
    up to ``bound``); returns the state, the position and the head (see ``Followed``).

    The state is the one passed in, updated in place, or a new one when the store says the
    log was replaced (a ``restart`` batch) or the log holds operations out of id order and is
    replayed from the start, sorted. Once ``bound`` is reached the position is the end of the
    batch that reached it (past the bound: a view with a bound never tails again, and a
    snapshot of it keeps only the operations up to the bound). Torn tails, checksums and
    replaced logs are the store's business.
    """
    if bound is not None and bound.timestamp is not None:
        # A view by time needs each operation's timestamp before its rows are applied, which
        # the buffered, sorted replay has (and a fixed view never tails afterwards).
        return _replay_store_sorted(store, bound)
    last = b""  # the data of the last batch that had any (its last operation is the head)
    fresh = position is None  # read from the start of a log (an empty one has GENESIS for head)
    for batch in store.tail(position):
        if batch.restart:
            log.info("the log was replaced (compacted or restored): replaying it")
            state = State()
            last, fresh = b"", True
        if batch.data:
            last = batch.data
            with state_lock:
                result = replay_chunk(state, batch.data, batch.source, batch.first_line, bound,
                                      checksums=batch.checksums)
            if result.status is ChunkStatus.OUT_OF_ORDER:
                log.info("operations out of id order in %s (a merged log): replaying in op-id order", batch.source)
                return _replay_store_sorted(store, bound)
            if result.status is ChunkStatus.BOUND_REACHED:
                return Followed(state, batch.end, None)
        position = batch.end
    # (Asked after reading: an upgrade may have changed the format of the log read anew.)
    head = None if not store.chained else _head(last) if last else GENESIS if fresh else None
    return Followed(state, position, head)


def newer_versions(store: LogStore, position: Position | None,
                   entity_ids: Collection[str]) -> dict[str, Info | Keyword] | None:
    """The newest version of each of ``entity_ids`` (infos and keywords) among the operations
    ``store`` holds after ``position``, read but applied to no state (one they do not write is
    absent); None when the log was replaced since ``position`` (then only a replay tells)."""
    wanted = set(entity_ids)
    found: dict[str, tuple[str, Info | Keyword]] = {}  # id -> (the op that wrote it, the version)
    for batch in store.tail(position):
        if batch.restart:
            return None
        if not batch.data:
            continue
        for operation in parse_operations(batch.data, batch.source, batch.first_line, checksums=batch.checksums)[0]:
            for row in operation.rows:
                if row.get("id") in wanted and row["entity"] in ("info", "keyword"):
                    entity = decode_info(row, operation.op_id) if row["entity"] == "info" else \
                        decode_keyword(row, operation.op_id)
                    newest = found.get(entity.id)
                    if newest is None or operation.op_id >= newest[0]:  # (a merged log: op ids, not places)
                        found[entity.id] = (operation.op_id, entity)
    return {entity_id: entity for entity_id, (_, entity) in found.items()}


def replay_store(store: LogStore, bound: Bound | None, state_lock: threading.Lock,
                 start: tuple[State, Position] | None = None) -> Followed:
    """A new State from the whole log in ``store`` (up to ``bound``), as ``follow`` from the
    start gives it, or from ``start`` (a state and the position it stands at: a checkpoint),
    with the garbage collector paused meanwhile: replay allocates millions of objects that
    never form cycles. Afterwards the memory used only on the way (the rows as read, the
    indexes' outgrown tables, a checkpoint's columns) goes back to the system
    (``kwtree.heap.release_freed``)."""
    try:
        with collector_paused():
            if start is None:
                return follow(store, None, State(), bound, state_lock)
            return follow(store, start[1], start[0], bound, state_lock)
    finally:
        release_freed()


def _replay_store_sorted(store: LogStore, bound: Bound | None) -> Followed:
    """A new State from every whole operation in ``store``, applied in op-id order, the
    position at the end of the log, and the digest of the operation with the greatest id
    (the newest: what the next append names, wherever a merge put it in the log)."""
    operations: list[RawOperation] = []
    position = None
    newest: tuple[str, bytes] = ("", b"")  # (op id, its rows)
    for batch in store.read(None):
        found = parse_operations(batch.data, batch.source, batch.first_line, checksums=batch.checksums)[0]
        operations.extend(found)
        position = batch.end
        top = max(found, key=lambda raw: raw.op_id, default=None)
        if top is not None and top.op_id > newest[0]:
            lines = batch.data.split(b"\n")
            start = top.first_line - batch.first_line
            newest = (top.op_id, b"".join(line + b"\n" for line in lines[start:start + len(top.rows)]))
    state = State()
    replay_sorted(state, operations, bound)
    head = (op_digest(newest[1]) if newest[0] else GENESIS) if store.chained else None
    return Followed(state, position, head)


class BackgroundFollower:
    """A daemon thread that applies what other processes append to a shared log as the log
    announces it (``kwtree.stores.logstore.Announcing.changes``), and at least every
    ``poll`` seconds when no announcement comes: it calls ``catch_up`` (what ``refresh()``
    does), given the announced end of the log (it reads nothing when the state reflects it).
    A catch-up that fails (the database unreachable) is logged once, until one succeeds
    again, and retried at the next announcement or poll; the thread ends when ``catch_up``
    raises ClosedError or ``stop`` is called."""

    def __init__(self, changes: Callable[[threading.Event, float], Iterator[Position | None]],
                 catch_up: Callable[[Position | None], int], name: str, poll: float = FOLLOW_POLL) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(changes(self._stop, poll), catch_up),
                                        name=f"kwtree-follower {name}", daemon=True)
        self._thread.start()

    def _run(self, changes: Iterator[Position | None], catch_up: Callable[[Position | None], int]) -> None:
        failing = False
        try:
            for announced in changes:
                if self._stop.is_set():
                    return
                try:
                    catch_up(announced)
                except ClosedError:
                    return
                except KwtreeError as exc:
                    if not failing:
                        log.warning("following the shared log failed (%s); trying again at its next change", exc)
                    failing = True
                else:
                    if failing:
                        log.info("following the shared log again")
                    failing = False
        finally:
            close = getattr(changes, "close", None)
            if close is not None:
                close()  # the listening connection

    def stop(self) -> None:
        """Stop following and wait for the thread to end: about one listening tick and a
        catch-up in progress, at most ``STOP_WAIT`` seconds (a thread still connecting to an
        unreachable server is left to end by itself: it is a daemon, it closes its own
        connection, and a catch-up on a closed tree ends it)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT)
