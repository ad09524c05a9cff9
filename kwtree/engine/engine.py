"""The Engine: one open data directory and the write path into it.

An Engine owns everything a write touches: the directory and its manifest (file mode, segment
size, checksums), the log store (the durable log and its cross-writer lock), the State
replayed from it (with the lock its readers take), this process's write mutex and the op clock. Everything above it
reads the State through ``read`` (or ``state`` under ``state_lock``) and writes through
``commit``; whole-directory operations hold its locks through ``exclusive``, ``locked`` and
``writing``, and compaction replaces the log through ``replace_log`` inside ``writing``.

Every write goes through ``commit``: take this process's write mutex and the directory's
writer lock, catch up on operations other processes appended, let a decider decide the changes
against that fresh state, encode them, append and sync them, and only then apply them to the
in-memory state and tell the commit listeners (the caches). A decider that raises, or a failed
append, leaves the log and the state as they were. (A store that refuses a stale append itself,
PostgreSQL, takes no writer lock and is not read first: the append is refused when the log
moved on, and the write catches up and decides again.)

Locks are always taken in one order: the write mutex, then the writer lock, then the state
lock (held only while a state is changed or read, never while waiting for another lock).

The durable log is reached only through the log-store seam (``kwtree.stores.logstore``): the
engine keeps the position of the last operation it applied and hands it back to the store's
``tail``, ``append`` and ``replace``; ``kwtree.engine.follower`` applies what ``tail`` gives.
The store is made by the ``log_store`` factory, by default the JSONL ``SegmentStore`` of the
directory. A few calls read the segment files themselves (a snapshot's cut, ``find_operation``,
``log_size``): they need the JSONL store and say so otherwise.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from kwtree.engine import checkpoint
from kwtree.engine.events import (
    GENESIS,
    NOTE_RECHAIN,
    Bound,
    OpClock,
    Stamp,
    encode_note,
    encode_operation,
    op_digest,
    rechain,
    with_prev,
)
from kwtree.engine.follower import follow, newer_versions, replay_store
from kwtree.engine.history import find_in, find_operation, read_history
from kwtree.engine.replay import replay_chunk
from kwtree.engine.state import State, apply
from kwtree.errors import (
    ClosedError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyError,
    StorageError,
)
from kwtree.limits import DEFAULT_LIMITS, Limits
from kwtree.models import Change, Info, Keyword, Operation
from kwtree.stores import leftovers
from kwtree.stores.directory import create_directory
from kwtree.stores.files import PRIVATE_FILE_MODE
from kwtree.stores.logstore import Announcing, Batch, Behind, LogStore, Position, UnlockedAppends
from kwtree.stores.manifest import MANIFEST_NAME, Manifest
from kwtree.stores.modes import apply_file_mode
from kwtree.stores.segments import SegmentStore

__all__ = ["CommitListener", "Decide", "Engine", "LogCut", "LogSize", "LogStoreFactory"]

log = logging.getLogger("kwtree.engine.replay")

T = TypeVar("T")
#: How many times a write to a store without a cross-writer lock (``UnlockedAppends``) may
#: find that another writer appended first before it takes the lock instead.
UNLOCKED_TRIES = 8
#: After a write found that another writer appended first, it waits at random up to this
#: (seconds) times 2, 4, ... 32 (doubling with each refusal) before it reads and decides
#: again: the log takes one append at a time, so a loser that raced again at once would
#: mostly lose again, each loss costing an append refused and a read on a machine those
#: writers share. bench/postgres.py, 4 writers, interleaved rounds on the 2-core VM busy with
#: other work: 0.5 ms made about 900 writes/s, 2 ms 1,550, 4 ms 1,840 (and a longer p99: a
#: loser waits longer while a winner keeps appending on the state it just wrote); 0.1 ms and
#: none, fewer. With the VM quiet, 2 ms against 0.5: 2,100 writes/s against 1,800.
UNLOCKED_BACKOFF = 0.002
#: A decider: the changes one operation makes, decided against the current state.
Decide = Callable[[State, Stamp], list[Change]]
#: Told of every operation this engine commits, with the state it was applied to, while the
#: write locks are still held (the caches note what to index).
CommitListener = Callable[[Operation, State], None]
#: What ``cut_log`` hands its caller: the segment names, the read position just after the
#: last whole operation applied (segment, byte offset, line), and the check that ``log/`` is
#: still the directory that was read.
LogCut = Callable[[list[str], tuple[str | None, int, int], Callable[[], bool]], T]


class LogStoreFactory(Protocol):
    """Opens the log store of a data directory (its manifest exists): ``writable`` stores take
    the cross-writer lock; ``durable`` ones sync as the store's durability needs. The default
    is ``SegmentStore``, the JSONL segments in the directory's ``log/``."""

    def __call__(self, directory: Path, *, writable: bool, durable: bool, lock_timeout: float) -> LogStore: ...


class LogSize(NamedTuple):
    """The size of a log: its bytes, rows (lines) and operations."""

    size: int
    rows: int
    operations: int


class Engine:
    """One open data directory: its log, its State and the write path into them.

    Opening a directory that has no manifest creates the tree there when ``writable`` (else
    NotFoundError). A writable open first finishes a log replacement a crash interrupted,
    removes what killed snapshots and restores left beside the directory, and, when
    ``file_mode`` differs from the manifest's, re-modes the tree's files and records the new
    mode. The log is then replayed (up to ``bound``, an ``as_of`` view, which must name an
    operation the log holds). ``durable`` syncs every append; ``actor`` and ``limits`` stamp
    and bound every operation ``commit`` writes; ``log_store`` opens the durable log (see
    ``LogStoreFactory``), again on every ``reopen``; ``caches_only`` says the directory holds
    only this process's caches (the log is elsewhere), so a read-only open creates it too.
    Raises InvalidInputError (``directory`` is a file), NotFoundError, FormatError,
    CorruptLogError, LockTimeoutError, and OSError, which the caller reports in its terms.
    """

    def __init__(
        self,
        directory: Path,
        *,
        writable: bool,
        durable: bool = True,
        bound: Bound | None = None,
        lock_timeout: float = 10.0,
        segment_bytes: int | None = None,
        file_mode: int | None = None,
        actor: str = "user",
        limits: Limits = DEFAULT_LIMITS,
        log_store: LogStoreFactory = SegmentStore,
        caches_only: bool = False,
    ) -> None:
        self._dir = directory
        self._open_store = log_store
        self._caches_only = caches_only
        self._writable = writable
        self._durable = durable
        self._bound = bound
        self._lock_timeout = lock_timeout
        self._actor = actor
        self._limits = limits
        self._mutex = threading.Lock()  # serialises this process's writes and refreshes
        #: Held while an operation is applied to the state: a reader holding it never sees
        #: half of one. (A plain attribute, never rebound: reads take it on their hot path.)
        self.state_lock = threading.Lock()
        #: The current State. Read it under ``state_lock`` (or use ``read``); only the engine
        #: rebinds it, and only under ``exclusive()``. (A plain attribute: reads are hot.)
        self.state: State
        self._clock = OpClock()
        self._listeners: list[CommitListener] = []
        self._store: LogStore
        self._unlocked: UnlockedAppends | None = None  # the store, when it refuses a stale append itself
        self._position: Position | None = None  # just after the last operation applied (the store's)
        self._checkpointed = 0  # the log bytes the state checkpoint this engine read or wrote covers
        #: The digest of the last operation in the log as followed (a chained store: what the
        #: next append names as ``prev``); GENESIS before the first.
        self._head = GENESIS
        self._held: AbstractContextManager[None] | None = None  # the store's lock, while a write holds it
        self._closed = True  # until the open below succeeds
        self._open(segment_bytes, file_mode)

    # --- opening and closing ----------------------------------------------------------------

    def _open(self, segment_bytes: int | None, file_mode: int | None) -> None:
        directory = self._dir
        if directory.exists() and not directory.is_dir():
            raise InvalidInputError(f"data_dir {directory} is a file, not a directory")
        if not (directory / MANIFEST_NAME).exists():
            if not self._writable and not self._caches_only:
                raise NotFoundError(f"{directory} is not a kwtree directory (it has no {MANIFEST_NAME})")
            create_directory(directory, segment_bytes, PRIVATE_FILE_MODE if file_mode is None else file_mode,
                             self._lock_timeout, durable=self._durable)
        manifest = Manifest.load(directory)
        store: LogStore | None = None
        try:
            store = self._open_store(directory, writable=self._writable, durable=self._durable,
                                     lock_timeout=self._lock_timeout)
            if self._writable:
                leftovers.remove_leftovers(directory)
                if file_mode is not None and file_mode != manifest.file_mode:
                    with store.locked():
                        manifest = apply_file_mode(directory, Manifest.load(directory), file_mode)
            state, position, head = self._replay(store)
            self._check_view_exists(state)
        except BaseException:
            if store is not None:
                store.close()
            raise
        self._file_mode, self._embedder = manifest.file_mode, manifest.embedder
        self._store, self._position, self.state = store, position, state
        self._head = GENESIS if head is None else head
        # (Asked once: a protocol isinstance costs about 10 µs, a tenth of a JSONL write's budget.)
        self._unlocked = store if isinstance(store, UnlockedAppends) else None
        self._observe_clock()
        self._closed = False

    def _replay(self, store: LogStore) -> tuple[State, Position | None, str | None]:
        """The state of ``store``'s log: from the directory's state checkpoint and the
        operations after it when the checkpoint is current (``kwtree.engine.checkpoint``),
        else by replaying the whole log (up to the view's bound)."""
        self._checkpointed = 0
        loaded = None
        if self._bound is None and isinstance(store, SegmentStore):
            loaded = checkpoint.load(self._dir, store, writable=self._writable)
        if loaded is None:
            return replay_store(store, self._bound, self.state_lock)
        try:
            state, position, head = replay_store(store, None, self.state_lock, (loaded.state, loaded.position))
        except StorageError as exc:  # (its position is gone: the log changed under the check)
            log.info("replaying the log of %s from its start: %s", self._dir, exc)
            return replay_store(store, None, self.state_lock)
        self._checkpointed = loaded.covered
        return state, position, loaded.head if head is None else head

    def save_checkpoint(self) -> int | None:
        """Write the state checkpoint if it is due (``checkpoint.is_due``; a closing engine
        calls this), under the writer lock if no one holds it, and only while the log is the
        one the state was read from; returns the log bytes it covers, None when none was
        written. A failure to write it is logged, never raised (it is a cache). Under
        ``exclusive()`` or at close (no write in flight)."""
        store, position = self._store, self._position
        if not self._writable or self._bound is not None or position is None or not isinstance(store, SegmentStore):
            return None
        try:
            if not checkpoint.is_due(checkpoint.log_bytes(self._dir, store, position), self._checkpointed):
                return None
            with self.state_lock:
                state, head = self.state, self._head
                covered = store.if_current(position, lambda: checkpoint.save(
                    self._dir, store, state, position, head, self._file_mode))
        except Exception as exc:  # noqa: BLE001 -- a cache: whatever fails, the close goes on
            log.warning("could not write the state checkpoint of %s: %s: %s", self._dir, type(exc).__name__, exc)
            return None
        if covered is not None:
            self._checkpointed = covered
        return covered

    def _check_view_exists(self, state: State) -> None:
        bound = self._bound
        if bound is None:
            return
        if bound.op_id is not None and state.last_op_id != bound.op_id:
            raise NotFoundError(f"as_of: no operation {bound.op_id} in {self._dir}")
        if bound.timestamp is not None and state.last_op_id is None:
            raise NotFoundError(f"as_of: {self._dir} has no operation at or before timestamp {bound.timestamp}")

    def close(self) -> None:
        """Release the directory: the log store is closed (a writable JSONL store first trims
        the preallocated space of its newest segment under the writer lock, so the log never
        carries padding into git or backups; a warning if the lock or the disk refuses).
        Closing twice is harmless."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            try:
                self.save_checkpoint()
            finally:
                self._store.close()

    def release(self) -> None:
        """Let go of the log store (after a failed open of the owner, or before a restore
        reopens the directory); the engine is closed afterwards."""
        self._closed = True
        self._store.close()

    def reopen(self, check: Callable[[State], None] | None = None) -> None:
        """Inside ``exclusive()``: let go of the directory and open it again, as it is now
        (after a restore put another directory in its place), with the file mode its manifest
        names; ``check`` is then given the replayed state. If the open or the check raises,
        the engine stays closed. The clock, the mutex and the commit listeners carry over, so
        op ids stay ordered across the reopen."""
        self.release()
        self._open(None, None)
        if check is not None:
            try:
                check(self.state)
            except BaseException:
                self.release()
                raise

    # --- what it is ---------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def file_mode(self) -> int:
        """The mode of the files the tree creates (its manifest's)."""
        return self._file_mode

    @property
    def recorded_embedder(self) -> tuple[str | None, str] | None:
        """The ``(spec, model)`` of the embedder the manifest records, None when it records none."""
        return self._embedder

    def record_embedder(self, spec: str | None, model: str) -> None:
        """Record the tree's embedder in its manifest, as durably as the tree's writes (under
        the writer lock: the manifest is re-read there, so another writer's change to it is
        kept). ReadOnlyError."""
        with self.locked():
            Manifest.load(self._dir).with_embedder(spec, model).save(self._dir, durable=self._durable)
        self._embedder = (spec, model)

    @property
    def caches_only(self) -> bool:
        """True when the directory holds only this process's caches (the log is elsewhere)."""
        return self._caches_only

    @property
    def writable(self) -> bool:
        """False for a ``read_only`` open and for an ``as_of`` view."""
        return self._writable

    @property
    def bound(self) -> Bound | None:
        """The ``as_of`` bound of a view, None for the current tree."""
        return self._bound

    @property
    def lock_timeout(self) -> float:
        return self._lock_timeout

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """Raise ClosedError once the engine is closed."""
        if self._closed:
            raise ClosedError(f"this KeywordTree ({self._dir}) was closed; open a new one")

    def check_writable(self) -> None:
        """Raise ClosedError once closed, ReadOnlyError for a read-only open or a view."""
        self.check_open()
        if not self._writable:
            what = "an as_of view" if self._bound is not None else "opened with read_only=True"
            raise ReadOnlyError(f"this KeywordTree is {what} and cannot write; open {self._dir} without it to write")

    # --- reading and following ----------------------------------------------------------------

    def read(self, read: Callable[[State], T]) -> T:
        """``read`` applied to the current state under the state lock."""
        with self.state_lock:
            return read(self.state)

    def _follow(self) -> State:
        """Apply what other processes appended (the caller holds the mutex) and let the
        clock see it, so the next op id is greater than every id in the log."""
        self.state, self._position, head = follow(self._store, self._position, self.state, None, self.state_lock)
        if head is not None:
            self._head = head
        self._observe_clock()
        return self.state

    def _observe_clock(self) -> None:
        state = self.state
        if state.last_op_id is not None:
            self._clock.observe(state.last_op_id, state.last_timestamp)

    def catch_up(self, until: Position | None = None) -> int:
        """Apply the operations other processes appended since the last look; returns how
        many. Never takes the writer lock. A view does not move and returns 0. With
        ``until`` (the end of the log an announcement named), nothing is read when the state
        reflects the log that far already (a write of this process followed past it)."""
        self.check_open()
        if self._bound is not None or (until is not None and self._covers(until)):
            return 0
        with self._mutex:
            if until is not None and self._covers(until):
                return 0
            before = self.state.op_count
            return self._follow().op_count - before

    def try_catch_up(self) -> int | None:
        """``catch_up()`` unless another thread of this process is writing or refreshing:
        then None at once (for a reader that must not wait for a writer)."""
        def caught_up() -> int:
            before = self.state.op_count
            return self._follow().op_count - before

        return self._unless_busy(caught_up, in_view=0)

    def try_newer_versions(self, entity_ids: Collection[str]) -> dict[str, Info | Keyword] | None:
        """The newest versions of ``entity_ids`` that the log holds beyond the state, read
        without applying them (``follower.newer_versions``): what a reader that must not move
        the state (an embedding worker judging another process's text) may look at. None when
        another thread of this process is writing or refreshing (ask again); none of them when
        the log was replaced since the state read it (only a replay tells) or in a view."""
        def newer() -> dict[str, Info | Keyword]:
            return newer_versions(self._store, self._position, entity_ids) or {}

        nothing: dict[str, Info | Keyword] = {}  # (a view: never read past its bound)
        return self._unless_busy(newer, in_view=nothing)

    def _unless_busy(self, work: Callable[[], T], *, in_view: T) -> T | None:
        """``work()`` under the write mutex, unless another thread of this process holds it
        (writing or refreshing): then None at once; ``in_view`` in a view, which never moves."""
        self.check_open()
        if self._bound is not None:
            return in_view
        if not self._mutex.acquire(blocking=False):
            return None
        try:
            return work()
        finally:
            self._mutex.release()

    def _covers(self, position: Position) -> bool:
        mine = self._position
        return mine is not None and mine.generation == position.generation and mine.key >= position.key

    def changes(self) -> Callable[[threading.Event, float], Iterator[Position | None]] | None:
        """The store's announcements of appends (``Announcing.changes``) for a background
        follower, when the store makes them and this engine follows the log (not a view)."""
        store = self._store
        return store.changes if isinstance(store, Announcing) and self._bound is None else None

    def catch_up_locked(self) -> State:
        """Inside ``locked()``: apply what the log holds now beyond the state (after a caller
        changed the log itself, as repair does); returns the state."""
        return self._follow()

    def read_segments(self) -> Iterator[tuple[str, bytes]]:
        """The whole operations of the log as (source, bytes) batches (a segment each in the
        JSONL store), oldest first, read from the store (with what other processes appended).
        Inside ``exclusive()`` (or ``locked()``); consume it there."""
        return ((batch.source, batch.data) for batch in self._store.read(None))

    def history(self, entity_id: str | None, limit: int | None) -> list[Operation]:
        """The operations this engine reflects that wrote ``entity_id`` (all when None),
        oldest first, only the newest ``limit`` when given (see
        :func:`kwtree.engine.history.read_history`). A log that compaction replaced is caught
        up with first."""
        with self._mutex:  # the store is read by one thread at a time
            batches = self._read_log()
            if self._bound is None and self._replaced(batches[0]):
                self._follow()
                batches = self._read_log()
            timestamp = self._bound.timestamp if self._bound is not None else None
            bound = Bound(op_id=self.state.last_op_id, timestamp=timestamp)
            return read_history(((batch.source, batch.data) for batch in itertools.chain(*batches)),
                                entity_id, limit, bound)

    def _read_log(self) -> tuple[list[Batch], Iterator[Batch]]:
        """The log read from its start: its first batch (if any) already read, and the rest."""
        batches = self._store.read(None)
        return list(itertools.islice(batches, 1)), batches

    def _replaced(self, first: list[Batch]) -> bool:
        """True when the log now read (its first batch) is not the one this engine followed."""
        return bool(first) and self._position is not None and first[0].end.generation != self._position.generation

    def _segment_store(self) -> SegmentStore:
        """The JSONL store, for the calls that read its segment files (a snapshot's cut):
        StorageError, saying what to do instead, with another store."""
        store = self._store
        if not isinstance(store, SegmentStore):
            raise StorageError(f"this reads the JSONL segments of a tree's directory; the log of {self._dir} is in "
                               f"{type(store).__name__}, which does not offer them: back a PostgreSQL log up with "
                               "the database's tools, or copy it into a directory of its own with `kwtree migrate "
                               "DIR --to NEW_DIR` and snapshot that (docs/scaling.md)")
        return store

    def find_operation(self, op_id: str) -> Operation | None:
        """Inside ``exclusive()``: the operation ``op_id`` as the log holds it, or None (the
        JSONL store looks first in the segment its id sorts into; another store is read
        from its start)."""
        store = self._store
        if isinstance(store, SegmentStore):
            return find_operation(store.segment_names(), store.read_segment, op_id)
        return find_in(((batch.source, batch.data) for batch in store.read(None)), op_id)

    def log_size(self) -> tuple[int, int]:
        """The log's bytes and its number of segments (0 for a store without segments): a
        store that can tell offers ``size()``; StorageError for one that cannot."""
        with self._mutex:
            self.check_open()
            size: Callable[[], tuple[int, int]] | None = getattr(self._store, "size", None)
            if size is None:
                raise StorageError(f"{type(self._store).__name__} cannot tell the size of its log")
            return size()

    # --- holding the locks --------------------------------------------------------------------

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[State]:
        """This process's write mutex: while it is held no other thread of this process
        writes, refreshes or closes, so the yielded state holds still. ClosedError."""
        self.check_open()
        with self._mutex:
            self.check_open()
            yield self.state

    def _begin_write(self, *, catch_up: bool) -> State:
        """The preamble of every write: take this process's write mutex, then the directory's
        writer lock, then (``catch_up``) apply what other processes appended; returns the
        state. ClosedError, ReadOnlyError, LockTimeoutError, CorruptLogError; on failure
        nothing is held. ``_end_write`` releases. (Plain calls, not a generator context: a
        commit pays this on every write.)"""
        self.check_writable()
        self._mutex.acquire()
        try:
            self.check_writable()
            held = self._store.locked()
            held.__enter__()
            try:
                state = self._follow() if catch_up else self.state
            except BaseException:
                held.__exit__(None, None, None)
                raise
            self._held = held
            return state
        except BaseException:
            self._mutex.release()
            raise

    def _end_write(self) -> None:
        held, self._held = self._held, None
        try:
            assert held is not None
            held.__exit__(None, None, None)
        finally:
            self._mutex.release()

    @contextlib.contextmanager
    def locked(self) -> Iterator[State]:
        """The write mutex, then the directory's writer lock: no other writer, in this
        process or another, writes meanwhile. Nothing is caught up (``writing`` does that).
        ClosedError, ReadOnlyError, LockTimeoutError."""
        state = self._begin_write(catch_up=False)
        try:
            yield state
        finally:
            self._end_write()

    @contextlib.contextmanager
    def writing(self) -> Iterator[State]:
        """``locked()``, with the operations other processes appended applied first: the
        yielded state is the directory's latest. CorruptLogError if the log is damaged."""
        state = self._begin_write(catch_up=True)
        try:
            yield state
        finally:
            self._end_write()

    def commit(self, kind: str, decide: Decide, audit: Mapping[str, Any] | None = None) -> Operation | None:
        """Decide, write and apply one operation of ``kind``; None when ``decide`` returns no
        changes (nothing is written). Durable on return when the engine is. What raises before
        the operation is appended (the decider, LimitExceededError) or the append itself (the
        disk) leaves the log and the state as they were; a commit listener that raises does so
        after the operation was applied.

        What is written was decided on the log's latest state, and ``decide`` may be called
        again: a store that refuses a stale append itself (``UnlockedAppends``, PostgreSQL) is
        written without the cross-writer lock and without reading the log first: ``decide``
        is given the state this engine holds (its follower keeps it current), and when another
        writer appended first the store refuses the append, the state is caught up and
        ``decide`` asked again (after ``UNLOCKED_TRIES`` refusals, the write takes the lock, so
        a writer that keeps losing the race is not starved). An outcome that writes nothing
        (no change, or an error) is given only once decided on a state just read from the log
        (``_decide_unlocked``)."""
        store = self._unlocked
        if store is not None:
            self.check_writable()
            with self._mutex:
                self.check_writable()
                for attempt in range(UNLOCKED_TRIES):
                    if attempt:  # lost a race: let the winners through before trying again
                        time.sleep(random.uniform(0, UNLOCKED_BACKOFF * 2 ** min(attempt, 5)))
                        self._follow()
                    state, op = self._decide_unlocked(kind, decide, audit, latest=attempt > 0)
                    if op is None:
                        return None
                    encoded = self._encode(op)
                    try:
                        self._position = store.append_unlocked(encoded, op.op_id, after=self._position,
                                                               sync=self._durable)
                    except Behind:
                        continue  # another writer appended first: catch up and decide again
                    self._appended(encoded)
                    self._applied(op, state)
                    return op
        state = self._begin_write(catch_up=True)  # what ``writing()`` does, without its generator
        try:
            op = self._decide(kind, decide, audit, state)
            if op is None:
                return None
            encoded = self._encode(op)
            self._position = self._store.append(encoded, op.op_id, after=self._position, sync=self._durable)
            self._appended(encoded)
            self._applied(op, state)
        finally:
            self._end_write()
        return op

    def _decide(self, kind: str, decide: Decide, audit: Mapping[str, Any] | None, state: State) -> Operation | None:
        """The operation ``decide`` makes of ``state`` with the next op id, checked against
        the limits; None when it changes nothing."""
        op_id, timestamp = self._clock.next()
        changes = decide(state, Stamp(op_id, timestamp, self._actor))
        if not changes:
            return None
        self._limits.check_changes(changes)
        return Operation(op_id, kind, self._actor, timestamp, tuple(changes), audit)

    def _decide_unlocked(self, kind: str, decide: Decide, audit: Mapping[str, Any] | None,
                         *, latest: bool) -> tuple[State, Operation | None]:
        """``_decide`` on the state held (``latest``: just read from the log), and that state.
        An append decided on a state the log has moved past is refused by the store, but an
        outcome that writes nothing (no change; an error: a stale version, a name taken, an id
        not found) is refused by nobody: when the state was not just read, the log is read,
        and if it held more, ``decide`` is asked again on the newer state. (Reading first on
        every write instead would cost a round trip to the database each time.)"""
        state = self.state
        try:
            op = self._decide(kind, decide, audit, state)
        except Exception:
            if latest or not self._moved_on():
                raise
            return self.state, self._decide(kind, decide, audit, self.state)
        if op is None and not latest and self._moved_on():
            return self.state, self._decide(kind, decide, audit, self.state)
        return state, op

    def _moved_on(self) -> bool:
        """Apply what other processes appended; whether there was anything."""
        before = self._position
        self._follow()
        return self._position != before

    def _encode(self, op: Operation) -> bytes:
        """``op``'s rows, naming the head as its predecessor when the store is chained."""
        encoded = encode_operation(op)
        return with_prev(encoded, self._head) if self._store.chained else encoded

    def _appended(self, encoded: bytes) -> None:
        """The operation ``encoded`` was appended: it is the head now."""
        if self._store.chained:
            self._head = op_digest(encoded)

    @property
    def head(self) -> str:
        """The digest of the newest operation this engine has followed or written (GENESIS
        for an empty log; meaningful for a chained log, format 3)."""
        return self._head

    def _applied(self, op: Operation, state: State) -> None:
        """Apply an appended operation to the state and tell the listeners."""
        with self.state_lock:
            apply(state, op)
        for listener in self._listeners:
            listener(op, state)

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Call ``listener(op, state)`` after each operation this engine commits, under the
        write mutex (and the cross-writer lock, for a store that has writers take it); what it
        raises reaches the writer (the operation is durable already)."""
        self._listeners.append(listener)

    def cut_log(self, take: LogCut[T]) -> T:
        """Inside ``exclusive()``: ``take(segments, position, rewritten)`` with the log held
        at the last whole operation this engine reflects (JSONL store only). A writable engine
        first takes the writer lock and catches up, and holds the lock while ``take`` runs, so
        the cut is one consistent point of every writer's whole operations; a read-only one or
        a view cuts at what it has read (a view: past its bound, which the snapshot applies)."""
        store = self._segment_store()
        with store.locked() if self._writable else contextlib.nullcontext():
            if self._writable:
                self._follow()
            return take(*store.cut(self._position))

    # --- replacing the log (compaction) -------------------------------------------------------

    def replace_log(self, operations: Iterable[tuple[str, bytes]], check: Callable[[State], None],
                    note: Mapping[str, Any] | None = None) -> LogSize:
        """Inside ``writing()``: make ``operations`` ((op id, encoded rows), in op-id order)
        the whole log, in one atomic step, and return its size (of ``operations``).

        In a chained log (format 3) they are chained anew from GENESIS, whatever ``prev`` they
        carried; when that gives another head than the old log's and ``note`` is given, a note
        of kind ``rechain`` (``kwtree.models.Note``) follows them, its audit
        ``{"rechain": note}``: the log says that it was re-chained and why (the caller decides
        what it may say: an erasure must not name digests of what it erased).

        The store writes them as a new generation; they are replayed into a new State and
        ``check(new_state)`` raises to abort, as does a batch that does not replay whole
        (StorageError): then the log is unchanged. A crash leaves the old log or the new one.
        Afterwards the engine follows the new log and its state is the replayed one; other
        processes replay the new log at their next look.
        """
        checkpoint.discard(self._dir)  # (it describes the old log: what a forget erases must not stay in it)
        self._checkpointed = 0
        rebuilt = State()
        sizes = [0, 0, 0]  # bytes, rows, operations

        def counted() -> Iterator[tuple[str, bytes]]:
            for operation in operations:
                sizes[2] += 1
                yield operation

        def replay(batches: Iterator[Batch]) -> None:
            for batch in batches:
                result = replay_chunk(rebuilt, batch.data, batch.source, batch.first_line, checksums=batch.checksums)
                if result.consumed_bytes != len(batch.data):
                    raise StorageError(f"compaction of {self._dir} aborted, the log is unchanged: a new segment "
                                       f"did not replay whole; please report this")
                sizes[0] += len(batch.data)
                sizes[1] += batch.data.count(b"\n")
            check(rebuilt)

        old, head = self._head, [GENESIS]

        def chained(items: Iterator[tuple[str, bytes]]) -> Iterator[tuple[str, bytes]]:
            for op_id, encoded in rechain(items):
                head[0] = op_digest(encoded)
                yield op_id, encoded
            if note is not None and head[0] != old:
                op_id, timestamp = self._clock.next()
                encoded = with_prev(encode_note(op_id, timestamp, NOTE_RECHAIN, "kwtree", {"rechain": dict(note)}),
                                    head[0])
                head[0] = op_digest(encoded)
                yield op_id, encoded

        written = chained(counted()) if self._store.chained else counted()
        end = self._store.replace(written, after=self._position, check=replay)
        self.state, self._position, self._head = rebuilt, end, head[0]
        return LogSize(*sizes)
