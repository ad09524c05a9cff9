"""The JSONL segment store: the embedded ``LogStore`` (``kwtree.stores.logstore``) of a data
directory, a thin adapter over the proven parts — ``EventLog`` (segments, preallocation,
checksums, seals, torn tails), ``WriterLock`` (flock) and ``logswap`` (the atomic swap of a
whole new log).

Positions are ``(segment name, byte offset, line number)`` of the ``log/`` directory whose
inode is the generation. The store keeps one ``EventLog`` as its reading cursor; a tail from
the position it last gave continues from there without a seek, so the catch-up before a write
costs what it cost before the seam.

Whole operations: a segment's new bytes are cut after the last complete line that carries an
end marker (``whole_operations_end``); an unreadable complete line is left in, so the reader's
replay reports it with its line number. ``check_tail`` then decides what the bytes after the
cut are: nothing, padding, a torn tail (withheld; the next append moves it to
``quarantine/``), or damage (CorruptLogError).

Beyond the protocol, a few JSONL-only calls read the segment files themselves (a snapshot's
cut, the lookup of one operation by id, the log's size): the engine uses them through this
class by name and says so when it was given another store.
"""

from __future__ import annotations

import logging
import os
import shutil
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import orjson

from kwtree.engine.events import is_op_id, with_checksum
from kwtree.errors import CorruptLogError, StorageError
from kwtree.stores import logswap
from kwtree.stores.directory import create_directory
from kwtree.stores.eventlog import SEGMENT_SUFFIX, EventLog, Pending, encode_seal
from kwtree.stores.files import PRIVATE_FILE_MODE
from kwtree.stores.lock import LOCK_NAME, WriterLock, release
from kwtree.stores.logstore import Batch, Position
from kwtree.stores.manifest import Manifest

__all__ = ["SegmentStore", "check_tail", "completes_an_operation", "row_after_damage", "whole_operations_end"]

log = logging.getLogger("kwtree.engine.replay")

T = TypeVar("T")

_ROW_START = b'{"op":"'


def _row(line: bytes) -> dict[str, object] | None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return row if type(row) is dict else None


def whole_operations_end(data: bytes) -> int:
    """How many leading bytes of ``data`` (rows from the start of a line) hold whole
    operations: up to the last complete line with an end marker, leaving out the rows of an
    operation still without one (a torn or still-growing one). A complete last line that is
    not a readable row is kept, so the replay reports it where it is."""
    end = data.rfind(b"\n") + 1
    if not end:
        return 0
    start = data.rfind(b"\n", 0, end - 1) + 1
    row = _row(data[start:end - 1])
    if row is None or "end" in row or not is_op_id(row.get("op")):
        return end
    # Rows of the incomplete operation are consecutive and share its id (written first, at
    # the start of each row): step back over them.
    prefix = _ROW_START + str(row["op"]).encode() + b'"'
    while start:
        previous = data.rfind(b"\n", 0, start - 1) + 1
        if not data.startswith(prefix, previous):
            break
        start = previous
    return start


def completes_an_operation(data: bytes) -> bool:
    """True if a whole line of ``data`` is, or ends in, a readable row carrying an end
    marker: bytes after damage that complete an operation, which a torn write never leaves."""
    for line in data.split(b"\n")[:-1]:
        if b'"end":' not in line:
            continue
        row = _row(line)
        if row is None or not is_op_id(row.get("op")):
            row = row_after_damage(line)[1]
        if row is not None and "end" in row:
            return True
    return False


def row_after_damage(line: bytes) -> tuple[int, dict[str, object] | None]:
    """(where, row) of a readable row that makes up the end of a damaged ``line`` (one that
    is not a row itself): what follows a zeroed block or a damaged newline that ended right
    at a row's start. (-1, None) when there is none. A nested object (a before-image) never
    passes for a row: it is followed by at least the closing brace of its row."""
    at = line.find(_ROW_START, 1)
    while at > 0:
        try:
            row = orjson.loads(line[at:])
        except orjson.JSONDecodeError:
            row = None
        if type(row) is dict and is_op_id(row.get("op")):
            return at, row
        at = line.find(_ROW_START, at + 1)
    return -1, None


def check_tail(events: EventLog, pending: Pending, at_open: bool) -> None:
    """Raise CorruptLogError unless what follows the consumed operations of ``pending``'s
    segment is nothing, zero padding, or (in the newest segment) a torn tail.

    Only a torn tail — an incomplete last operation of the newest segment with nothing after
    it that completes an operation — is ignored (and left for the next writer to move to
    quarantine/). Anything else is damage in the middle of the log: a NUL byte or a zeroed
    block hiding whole operations after it, an incomplete operation at the end of a sealed
    segment, or a seal naming a successor segment the log lacks (format 2).
    """
    if not at_open and events.clean_end():  # before every write: keep it to a few microseconds
        return
    missing = events.missing_successors()
    if missing:
        segment, _, line = events.position
        raise CorruptLogError(
            pending.path, line,
            f"the seal of segment {segment} names its successor {missing[0]}, which is missing from the log: the "
            f"operations it held are lost (a deleted file, a partial copy or restore); put it back from a backup or "
            f"snapshot, or run `kwtree repair` to accept the loss",
        )
    newest = events.on_last_segment
    partial = events.unconsumed_bytes
    hidden = events.hidden_bytes(thorough=at_open or bool(partial) or not newest)
    if not partial and not hidden:
        return
    segment, offset, line = events.position
    path = pending.path
    if hidden:
        data = pending.data
        nul_line = line + data.count(b"\n", len(data) - partial)
        whole = completes_an_operation(hidden)
        if not newest or whole:
            among = ", whole operations among them" if whole else " in a sealed segment"
            raise CorruptLogError(
                path, nul_line,
                f"a NUL byte at byte {offset + partial} hides {len(hidden) - 1} bytes of data after it{among}: damage "
                f"in the middle of the log (a zeroed block or a damaged byte; a torn write never leaves a whole "
                f"operation after it); `kwtree verify` lists the damage and `kwtree repair` moves the damaged "
                f"operation to quarantine/ and keeps every intact one",
            )
    if not newest:
        raise CorruptLogError(path, line, f"sealed segment {segment} ends with an incomplete operation (byte {offset})")
    if at_open:
        log.warning(
            "ignored %d bytes of an incomplete operation at the end of %s (byte %d): a torn write "
            "from a crashed writer, or a write still in progress; the next writer moves a torn "
            "tail to quarantine/",
            events.unconsumed_bytes, path, offset,
        )


class SegmentStore:
    """The log of one data directory as JSONL segments (see the module docstring and
    docs/log-format.md); a ``LogStore``.

    ``writable`` stores take the writer lock file and may append and replace; ``durable``
    ones preallocate and ``fdatasync`` (``sync`` of ``append`` still decides each write).
    Opening a writable store finishes a log swap a crash interrupted (under the lock).
    Raises FormatError when ``directory`` is not a tree's (no manifest or no ``log/``).
    """

    def __init__(self, directory: Path, *, writable: bool = True, durable: bool = True,
                 lock_timeout: float = 10.0) -> None:
        self.directory = directory
        manifest = Manifest.load(directory)
        self.segment_bytes = manifest.segment_bytes
        self._lock: WriterLock | None = None
        self._events: EventLog | None = None
        self._held = False
        self._at_end: tuple[Position | None] | None = None  # (end of log,) while caught up under the lock
        self._hold = _Held(self)
        self._read_through = False  # the last tail or read reached the end of the log
        self._given: Position | None = None  # the end of the log as last handed out, while the cursor stands there
        self._generation: tuple[int, str] = (-1, "")  # the cursor's generation, and as positions name it
        try:
            if writable:
                self._lock = WriterLock(directory / LOCK_NAME, lock_timeout, file_mode=manifest.file_mode)
                if logswap.interrupted(directory):
                    with self._lock:
                        logswap.recover(directory)
            self._events = EventLog(directory, manifest.segment_bytes, writable=writable, preallocate=durable,
                                    checksums=manifest.checksums, chained=manifest.chained)
        except BaseException:
            self.close()
            raise
        # Descriptors are released even if the owner never closes the store (but only close()
        # trims the newest segment's preallocated padding: a finalizer never takes the lock).
        self._finalizer = weakref.finalize(self, release, self._events, self._lock)

    @classmethod
    def create(cls, directory: Path, *, segment_bytes: int | None = None, file_mode: int = PRIVATE_FILE_MODE,
               durable: bool = True, lock_timeout: float = 10.0) -> SegmentStore:
        """Make ``directory`` (new or empty) a data directory with an empty log, or open the
        one there, and return its writable store."""
        create_directory(directory, segment_bytes, file_mode, lock_timeout, durable=durable)
        return cls(directory, durable=durable, lock_timeout=lock_timeout)

    @property
    def chained(self) -> bool:
        """Format 3: every operation names its predecessor's digest (the manifest's, as of
        the last time this store read the log from a new start)."""
        return self._cursor.chained

    @property
    def _cursor(self) -> EventLog:
        """The reading cursor (StorageError once closed)."""
        if self._events is None:
            raise StorageError(f"the log store of {self.directory} is closed")
        return self._events

    # --- reading -----------------------------------------------------------------------------

    def _position(self) -> Position:
        events = self._cursor
        generation = events.generation
        if generation != self._generation[0]:
            self._generation = (generation, str(generation))
        return Position(self._generation[1], events.position)

    def tail(self, after: Position | None) -> Iterator[Batch]:
        events = self._cursor
        given, self._given = self._given, None
        self._at_end = None  # the cursor moves: caught up again only once this is read through
        self._read_through = False
        if after is not None and after is given and not events.rewritten():
            # The catch-up before every write: the cursor stands where the caller's position
            # is, and usually nothing is new. Answer that without a generator.
            pending = events.read_pending()
            if pending is not None and not pending.data:
                check_tail(events, pending, False)
                if not events.next_segment():
                    self._caught_up(after)
                    return iter(())
            return self._batches(after, restart=False, thorough=False, follow=True)
        restart = False
        if events.rewritten():
            events.reattach()
            restart = after is not None
        elif after is not None and after.generation != str(events.generation):
            restart = True  # (this store already moved on to the new log, in an earlier read)
        if after is None or restart:
            events.rewind()
        elif after.key != events.position:
            self._seek(after)
        return self._batches(None if restart else after, restart=restart, thorough=after is None or restart,
                             follow=True)

    def read(self, after: Position | None) -> Iterator[Batch]:
        events = self._cursor
        self._at_end = self._given = None
        self._read_through = False
        if after is not None and (after.generation != str(events.generation) or events.rewritten()):
            raise StorageError(f"the log of {self.directory} was replaced since that position was read: "
                               f"read it again from the start")
        if events.rewritten():
            events.reattach()
        if after is None:
            events.rewind()
        elif after.key != events.position:
            self._seek(after)
        return self._batches(after, restart=False, thorough=after is None, follow=False)

    def _seek(self, after: Position) -> None:
        segment, offset, line = after.key
        try:
            self._cursor.seek(segment, offset, line)  # type: ignore[arg-type]
        except FileNotFoundError:
            raise StorageError(f"the log of {self.directory} no longer holds position {after.key}") from None

    def _batches(self, given: Position | None, *, restart: bool, thorough: bool, follow: bool) -> Iterator[Batch]:
        """The rest of the log from the cursor (at ``given``), segment by segment. A log
        replaced while this reads it (the old one removed under it) is read again from the
        start when ``follow``. Read through under the lock, it marks the store caught up."""
        events = self._cursor
        while True:
            try:
                for batch in self._segment_batches(restart=restart, thorough=thorough):
                    restart = False
                    given = batch.end
                    yield batch
                break
            except FileNotFoundError as exc:
                if not follow or not events.rewritten():
                    raise StorageError(f"could not read the log of {self.directory}: {exc}") from exc
                log.info("the log in %s was replaced while it was read: reading the new one", self.directory)
                events.reattach()
                restart, thorough = True, True
        if restart:  # a new, empty log: say so with one empty batch
            given = self._position()
            yield Batch(b"", str(events.log_dir), 1, events.checksums, given, restart=True)
        self._caught_up(given)

    def _caught_up(self, end: Position | None) -> None:
        """The cursor stands at ``end``, the end of the log, as the caller now knows it."""
        self._read_through = True
        self._given = end
        if self._held:
            self._at_end = (end,)

    def _segment_batches(self, *, restart: bool, thorough: bool) -> Iterator[Batch]:
        events = self._cursor
        while True:
            pending = events.read_pending()
            if pending is None:
                return
            nbytes = whole_operations_end(pending.data)
            if nbytes or restart:
                nlines = pending.data.count(b"\n", 0, nbytes)
                segment, offset, line = events.position
                end = Position(str(events.generation), (segment, offset + nbytes, line + nlines))
                data = pending.data if nbytes == len(pending.data) else pending.data[:nbytes]  # (no copy at open)
                yield Batch(data, pending.path, pending.first_line, events.checksums, end, restart)
                restart = False
                events.advance(nbytes, nlines)
            check_tail(events, pending, thorough)
            if not events.next_segment():
                return

    # --- JSONL only: the segment files themselves ----------------------------------------------
    # Not part of the LogStore protocol: a snapshot archives segment files, undo looks an
    # operation up in the segment its id sorts into, and metrics count segments. Another store
    # gives these its own way (or the engine says it cannot).

    def generation(self) -> str:
        """The generation of the log this store reads now, as its positions name it."""
        return str(self._cursor.generation)

    def if_current(self, at: Position, action: Callable[[], T]) -> T | None:
        """``action()`` under the writer lock, taken without waiting, when ``at`` is a position
        in the log as it is now (not replaced since); None, nothing done, when another process
        holds the lock or the log was replaced. For a cache that must never describe a
        replaced log (a forget erased texts from it). Only for a writable store."""
        lock = self._lock
        if lock is None or not lock.try_acquire():
            return None
        try:
            events = self._cursor
            if events.rewritten() or at.generation != str(events.generation):
                return None
            return action()
        finally:
            lock.release()

    def segment_names(self) -> list[str]:
        """The names of the current log's segments (each its first op id), oldest first."""
        return self._cursor.segments

    def read_segment(self, index: int) -> tuple[str, bytes]:
        """(path, data) of segment ``index`` of ``segment_names()``, as a whole (a torn tail
        included), padding and seal lines excluded; read from disk, the cursor unmoved."""
        return self._cursor.read_segment(index)

    def size(self) -> tuple[int, int]:
        """The log's bytes of data on disk (padding excluded) and its number of segments."""
        events = self._cursor
        return events.size_bytes(), len(events.segments)

    def torn_bytes(self) -> int:
        """The bytes the last read withheld after the whole operations of the newest segment
        (a torn or still growing operation): 0 when the log ends cleanly."""
        return self._cursor.unconsumed_bytes

    def cut(self, at: Position | None) -> tuple[list[str], tuple[str | None, int, int], Callable[[], bool]]:
        """For a snapshot cut at ``at`` (a position this store gave, or None for an empty log):
        the segment names, ``at`` as (segment, byte offset, line), and the check that ``log/``
        is still the directory that was read (False once the log was replaced)."""
        events = self._cursor
        if at is None:
            return events.segments, (None, 0, 1), events.rewritten
        segment, offset, line = at.key
        if at.generation != str(events.generation):
            return events.segments, (segment, offset, line), lambda: True  # type: ignore[return-value]
        return events.segments, (segment, offset, line), events.rewritten  # type: ignore[return-value]

    # --- writing -----------------------------------------------------------------------------

    def locked(self) -> _Held:
        # A plain class, not a generator context: the engine holds it around every write,
        # and a generator context costs about 3 µs a write.
        if self._lock is None:
            raise StorageError(f"this log store of {self.directory} was opened read-only: it has no writer lock")
        return self._hold

    def _check_at_end(self, what: str, after: Position | None) -> None:
        if not self._held:
            raise StorageError(f"{what} of the log of {self.directory} outside its writer lock: nothing was "
                               f"written; take store.locked() and tail the log first")
        if self._at_end is None or self._at_end[0] != after:
            raise StorageError(f"{what} of the log of {self.directory} at {after}, which is not the end of the log "
                               f"as read under this lock: nothing was written; tail the log and decide again")

    def append(self, encoded: bytes, op_id: str, *, after: Position | None, sync: bool = True) -> Position:
        # (On every write: the checks and the new position are spelled out inline.)
        at_end = self._at_end  # (set only while the lock is held)
        if at_end is None or (at_end[0] is not after and at_end[0] != after):
            self._check_at_end("an append", after)
        self._at_end = self._given = None  # until the append has succeeded
        events = self._cursor
        events.append(encoded, op_id, sync=sync)
        generation = self._generation
        if generation[0] != events.generation:
            generation = self._generation = (events.generation, str(events.generation))
        end = Position(generation[1], events.position)
        self._at_end, self._given, self._read_through = (end,), end, True
        return end

    def replace(
        self, operations: Iterable[tuple[str, bytes]], *, after: Position | None,
        check: Callable[[Iterator[Batch]], None] | None = None,
    ) -> Position:
        self._check_at_end("a replacement", after)
        events = self._cursor
        if logswap.recover(self.directory) and events.rewritten():
            self._at_end = None
            raise StorageError(f"the log of {self.directory} was replaced by a replacement a crash had interrupted, "
                               f"finished now: nothing else was changed; tail the log and decide again")
        if events.unconsumed_bytes:
            events.quarantine_tail()  # a torn tail is not an operation: keep it aside, as an append would
        target = logswap.new_log_dir(self.directory)
        try:
            written = self._write_generation(target, operations, events.checksums)
            logswap.seal(target)
            if check is not None:
                generation = str(os.stat(target).st_ino)  # kept by the rename that swaps it in
                check(_batches_of(target, written, generation, events.checksums))
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        logswap.swap_in(self.directory)
        events.reattach()
        events.seek_end()
        end = self._position()
        self._caught_up(end)
        return end

    def _write_generation(self, target: Path, operations: Iterable[tuple[str, bytes]],
                          checksums: bool) -> list[tuple[str, bytes]]:
        """Write ``operations`` as the segments of ``target``, each sealed (format 2) once its
        successor is known; returns (name, data without its seal) of each segment."""
        segments: list[tuple[str, bytes]] = []
        parts: list[bytes] = []
        first: str | None = None
        size = 0

        def flush() -> None:
            assert first is not None
            if segments and checksums:
                name, data = segments[-1]
                logswap.write_segment(target, name, data + encode_seal(data, first))
            elif segments:
                logswap.write_segment(target, *segments[-1])
            segments.append((first, b"".join(parts)))

        for op_id, data in operations:
            if first is None:
                first = op_id
            parts.append(with_checksum(data) if checksums else data)
            size += len(parts[-1])
            if size >= self.segment_bytes:
                flush()
                parts, first, size = [], None, 0
        if parts:
            flush()
        if segments:
            logswap.write_segment(target, *segments[-1])
        return segments

    def close(self) -> None:
        events, lock = self._events, self._lock
        self._events = self._lock = None
        if hasattr(self, "_finalizer"):
            self._finalizer.detach()
        if events is not None and lock is not None and self._read_through:
            # Trimming is a log write. While another process holds the lock it is a writer of
            # this log, which trims the padding when it closes: waiting for it would hold up
            # this close for nothing (and a writer killed meanwhile leaves the padding to the
            # next one: replay reads a log with padding as it is).
            try:
                if lock.try_acquire():
                    try:
                        events.trim_padding()
                    finally:
                        lock.release()
                else:
                    log.debug("%s: another process holds the writer lock; it trims the log padding", self.directory)
            except OSError as exc:
                log.warning("could not trim the log padding of %s on close: %s", self.directory, exc)
        for handle in (events, lock):
            if handle is not None:
                handle.close()


class _Held:
    """``SegmentStore.locked()``: the writer lock, and the store's note that it is held."""

    __slots__ = ("_store",)

    def __init__(self, store: SegmentStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        store = self._store
        lock = store._lock
        if lock is None:
            raise StorageError(f"the log store of {store.directory} is closed")
        lock.acquire()
        store._held = True

    def __exit__(self, *exc: object) -> None:
        store = self._store
        store._held = False
        store._at_end = None
        lock = store._lock
        if lock is not None:
            lock.release()


def _batches_of(target: Path, segments: list[tuple[str, bytes]], generation: str,
                checksums: bool) -> Iterator[Batch]:
    for name, data in segments:
        end = Position(generation, (name, len(data), data.count(b"\n") + 1))
        yield Batch(data, str(target / f"{name}{SEGMENT_SUFFIX}"), 1, checksums, end)
