"""The log-store seam: the one way the engine reaches the durable event log.

A log store keeps a sequence of **operations** (each the JSONL rows ``encode_operation``
gives, the end row last) in the order they were appended, and offers five things: append an
encoded operation durably, read the operations after a position, tail what other writers
appended (learning when the log was replaced), replace the whole log with a new generation,
and the cross-writer lock. The JSONL segment store (``kwtree.stores.segments``) is the first
implementation; one contract suite (``tests/logstore_contract.py``) runs against every one.

What stays inside a store, never in the engine: how positions are made (a segment and a byte
offset, a sequence number), torn tails (a store never hands out part of an operation; the
JSONL store ignores a torn tail and moves it to ``quarantine/`` before its next append),
checksums (the JSONL store adds one to every operation it appends, and each ``Batch`` says
whether every operation in it must carry one), preallocation, sealing, and how a new
generation is swapped in (an atomic directory swap; a transaction).

A store backed by a database (PostgreSQL, in a later issue) maps onto the same calls: a
position is a generation and a sequence number, ``append`` inserts one row in a
transaction and refuses when ``after`` is not the newest position (the database enforces
the order), ``tail`` selects the rows after a sequence number, ``replace`` writes a new
generation and makes it current in one transaction, and ``locked`` is an advisory lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kwtree.errors import StorageError

__all__ = ["Announcing", "Batch", "Behind", "LogStore", "Position", "UnlockedAppends"]


@dataclass(frozen=True, slots=True)
class Position:
    """Where a reader of a log stands: just after the last whole operation it was given.

    Opaque to the engine: it only keeps the newest one it received and hands it back.
    ``generation`` names the version of the log it belongs to (a replaced log has a new
    one); ``key`` is the store's own (a segment and an offset; a sequence number). Equal
    positions mean the same place. A position is meaningful to the store instance that
    returned it (and to no other store).
    """

    generation: str
    key: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class Batch:
    """Whole operations read from a log, oldest first.

    ``data`` is their rows, each ``\\n``-terminated, as appended (the JSONL store's with the
    checksum it added): never part of an operation, possibly empty. ``source`` and
    ``first_line`` say where the first row is (for CorruptLogError: a segment path and its
    line number; a table). ``checksums`` is True when every operation in ``data`` must carry a
    checksum in its end marker (a reader treats a missing or wrong one as damage). ``end`` is
    the position just after the batch. ``restart`` is True on the first batch of a log that
    replaced the one the reader was following (compaction, repair, restore, upgrade): the
    reader drops the state it built and applies from this batch on, the new log's first.
    """

    data: bytes
    source: str
    first_line: int
    checksums: bool
    end: Position
    restart: bool = False


@runtime_checkable
class LogStore(Protocol):
    """The durable event log of one tree, as the engine uses it.

    Readers never take the lock; appending and replacing happen only under ``locked()``.
    One instance is used by one thread at a time (the engine serialises its calls), and
    reads one ``tail`` or ``read`` at a time: starting one abandons the one before.
    Operations are returned in the order they were appended; a store does not sort them
    (merged logs may hold ids out of order: the engine decides what to do about that).

    """

    @property
    def chained(self) -> bool:
        """True when every operation appended must name its predecessor's digest in ``prev``
        (``kwtree.engine.events``, "the hash chain"): a JSONL log of format 3, a database log.
        The engine adds it; a store only says whether it is wanted (it may change when the log
        is replaced, as ``kwtree upgrade`` does)."""
        ...

    def tail(self, after: Position | None) -> Iterator[Batch]:
        """The whole operations appended after ``after`` (None: the whole current log),
        in batches produced lazily, each durable and complete when it is produced.

        A write in progress in another process, or a torn operation a crashed writer left,
        is withheld (the JSONL store logs a torn tail when it reads from the start). If
        ``after`` belongs to a log that was replaced since (or the log is replaced while
        this reads it), the next batch has ``restart`` set and the batches from there on
        hold the new log from its start (an empty new log gives one empty restart batch).
        Yields nothing when nothing is new. Never takes the lock.

        Raises CorruptLogError where the log is damaged in a way a torn tail cannot
        explain (with the source and line), StorageError when the store cannot be read.
        """
        ...

    def read(self, after: Position | None) -> Iterator[Batch]:
        """The whole operations after ``after`` (None: from the start) of the current log, as
        ``tail`` gives them but never a restart: for a reader that needs one log read
        through (a history scan, a replay in id order). Raises StorageError if ``after``
        belongs to a replaced log or the log is replaced while this reads it (read again
        from the start), and what ``tail`` raises."""
        ...

    def append(self, encoded: bytes, op_id: str, *, after: Position | None, sync: bool = True) -> Position:
        """Append one operation (``encode_operation``'s rows; ``op_id`` is its id) and return
        the position just after it.

        Only under ``locked()`` and only at the end of the log: ``after`` must be the end
        of the log as the caller last read it during this hold of the lock (the ``end`` of
        the last batch of a ``tail`` it read to the end, or the previous append's result;
        None when that tail yielded nothing from an empty log). Otherwise StorageError, and
        nothing is written: the caller tails and decides again. (This is the optimistic
        check a database store enforces with its own sequence; the JSONL store checks it
        against its reading cursor.)

        Durability: with ``sync`` (the default) the operation is on stable storage when this
        returns; without it, it survives a crash of the process but maybe not of the
        machine. A crash during the call leaves either the whole operation or none of it
        visible to readers (a torn remainder is the store's to clean up). Raises
        StorageError (DiskFullError when the disk is full) with nothing committed.
        """
        ...

    def replace(
        self, operations: Iterable[tuple[str, bytes]], *, after: Position | None,
        check: Callable[[Iterator[Batch]], None] | None = None,
    ) -> Position:
        """Replace the whole log with ``operations`` ((op id, encoded rows), in order) as a
        new generation, and return the position at its end.

        Only under ``locked()`` and with ``after`` the end of the log as the caller read it
        under this hold of the lock (as for ``append``; otherwise StorageError and nothing
        changes): the new log was derived from the operations up to there, and no operation
        appended after it may be dropped. What the old log held that was not an operation (a
        torn tail) is the store's to keep aside (the JSONL store moves it to quarantine/).

        The new log is written and made durable first; ``check``, if given, then reads it
        (raising aborts the replacement: the old log stays, the error propagates); only then
        does it become the log, in one atomic step, so a crash at any moment leaves either
        the old log or the new one. The returned position is this store's end of the log for
        a following ``append``; other readers learn of the new log at their next ``tail`` (a
        ``restart`` batch). Raises StorageError with the old log unchanged.
        """
        ...

    def locked(self) -> AbstractContextManager[None]:
        """The cross-writer lock: while held, no other store instance (in this process or
        another, on this machine or, for a shared store, another) appends or replaces.
        Waits up to the store's lock timeout, then raises LockTimeoutError. Not re-entrant.
        Released when the holder dies, even by SIGKILL."""
        ...

    def close(self) -> None:
        """Release what the store holds (descriptors, connections). A writable JSONL store
        that read its log through first trims the padding of its newest segment under the
        lock (a failure is only logged; one whose last read stopped at damage, as a failed
        open does, leaves the files as they are). Calling it twice is harmless."""
        ...


@runtime_checkable
class Announcing(Protocol):
    """A log store shared across machines that announces appends (PostgreSQL's ``NOTIFY``),
    so that a reader can follow the log without asking it again and again."""

    def changes(self, stop: threading.Event, poll: float) -> Iterator[Position | None]:
        """Yield whenever the log may have changed, until ``stop`` is set: the position at
        the end of the log an announced append (or replace) left, or None when ``poll``
        seconds passed without an announcement (the fallback for announcements that never
        arrive) and each time the listening connection was (re)made (what was appended while
        nobody listened). The listening connection is the generator's own; a lost one is made
        again, waiting up to ``poll`` seconds between attempts. Never raises for the store
        being unreachable."""
        ...


class Behind(StorageError):
    """An append (or replace) at a position that is not the end of the log: another writer
    appended first, or the log was replaced. Nothing was written; tail and decide again."""


@runtime_checkable
class UnlockedAppends(Protocol):
    """A log store that refuses a stale append by itself (a database's unique key), so a
    writer needs no cross-writer lock around its decision: it decides on the state it has
    followed and appends; refused (:class:`Behind`), it follows the log and decides again."""

    def append_unlocked(self, encoded: bytes, op_id: str, *, after: Position | None, sync: bool = True) -> Position:
        """``LogStore.append`` without holding ``locked()``: the operation is inserted only
        if ``after`` is still the end of the log (else Behind, nothing written). It waits
        while another holds ``locked()`` (a compaction, a forget), up to the lock timeout
        (then LockTimeoutError), so a holder's decisions are never appended behind."""
        ...
