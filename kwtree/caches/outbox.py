"""The outbox: ``outbox.jsonl``, an append-only log of embedding work shared by every worker.

One orjson object per line; ``item`` is the key ``f"{model}/{id}/{hash}"``::

    {"r": "enqueue", "item", "kind", "id", "hash", "model", "ts"}
    {"r": "claim",   "item", "worker", "until", "ts"}
    {"r": "done",    "item", "worker", "ts"}
    {"r": "failed",  "item", "worker", "error", "attempt", "retry_at", "ts"}
    {"r": "dead",    "item", "error", "attempt", "ts"}
    {"r": "retry",   "item", "ts"}

The state is the fold of the rows in file order, by these rules (the ``_FOLD`` table):

- enqueue creates the item, pending. It re-opens a done item (pending, attempts reset): "done"
  only means a vector was written, and an enqueue is only ever written for a text that has no
  vector now (the cache was deleted or damaged since), so the work is needed again. An item
  that is pending, leased, failed or dead is left alone.
- claim leases a known item that is neither done nor dead to ``worker`` until ``until``.
- done always wins: the vector was written, so the item is done even if it was dead or its
  lease had passed to another worker; nothing afterwards changes a done item.
- failed counts only from the worker of the item's latest claim while the item is leased
  (even if that lease expired, as long as nobody claimed it since); otherwise it is only a
  record. Counted, it sets the attempt, error and ``retry_at``. dead (written right after a
  counted failure that reached ``max_attempts``) applies unless the item is done.
- retry re-queues a dead item with its attempts reset.

Rows are flushed to the OS, not fsynced: the outbox is a cache of work, and a lost row costs
at most a re-embed, because the tree's repair scan re-enqueues any live entity without a
vector. For the same reason unreadable lines (a torn tail from a crash, garbage) are skipped
with a warning on logger ``kwtree.caches.outbox``, never raised. Every append and every decision
holds ``filelock.FileLock(<path>.lock)`` after folding what other processes appended.

``Outbox(path, writable=False)`` (the outbox of a tree that may not write) only reads: it
creates no file, not even the lock file, so it folds without the lock, and takes only whole
lines (an append may be under way); the methods that write (``enqueue``, ``claim``, ``done``,
``failed``, ``retry_dead``, ``compact``) raise ReadOnlyError.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import filelock
import orjson

from kwtree.caches.workers import claiming, holder_gone
from kwtree.errors import (
    ClosedError,
    InvalidInputError,
    LockTimeoutError,
    ReadOnlyError,
    StorageError,
    storage_error,
)
from kwtree.stores.files import PRIVATE_FILE_MODE, open_file, write_atomically

__all__ = ["ERROR_BACKOFF_MAX", "WORKER_ERRORS", "Item", "Outbox", "record_results", "run_worker"]

log = logging.getLogger("kwtree.caches.outbox")

KINDS = frozenset({"info", "keyword"})
LOCK_TIMEOUT = 60.0  # seconds; a holder only ever does one append or one compaction
OPEN = ("pending", "leased", "failed")  # statuses that still need work


@dataclass(frozen=True)
class Item:
    """One unit of embedding work; ``attempt`` counts the failures so far."""

    key: str
    kind: str
    id: str
    hash: str
    model: str
    attempt: int = 0


@dataclass
class _Entry:
    item: Item
    status: str = "pending"
    worker: str | None = None
    until: float = 0.0
    retry_at: float = 0.0
    error: str | None = None
    rows: list[bytes] = field(default_factory=list)  # raw rows, kept for compaction until done


def _on_enqueue(box: Outbox, row: dict[str, Any], entry: _Entry | None) -> _Entry | None:
    if entry is not None:
        if entry.status != "done":
            return None
        entry.status, entry.worker, entry.error = "pending", None, None
        entry.item = replace(entry.item, attempt=0)
        box._open[entry.item.key] = entry
        return entry
    if row["kind"] not in KINDS:
        raise ValueError(f"unknown kind {row['kind']!r}")
    entry = _Entry(Item(row["item"], row["kind"], row["id"], row["hash"], row["model"]))
    box._entries[entry.item.key] = box._open[entry.item.key] = entry
    return entry


def _on_claim(box: Outbox, row: dict[str, Any], entry: _Entry | None) -> _Entry | None:
    if entry is None or entry.status not in OPEN:
        return None
    entry.status, entry.worker, entry.until = "leased", row["worker"], float(row["until"])
    return entry


def _on_done(box: Outbox, row: dict[str, Any], entry: _Entry | None) -> _Entry | None:
    if entry is None or entry.status == "done":
        return None
    entry.status = "done"
    box._open.pop(entry.item.key, None)
    box._droppable += len(entry.rows)  # the done row itself is counted by the caller
    entry.rows = []
    return None


def _on_failed(box: Outbox, row: dict[str, Any], entry: _Entry | None) -> _Entry | None:
    if entry is None or entry.status != "leased" or entry.worker != row["worker"]:
        return None
    item, retry_at = replace(entry.item, attempt=int(row["attempt"])), float(row["retry_at"])
    entry.status, entry.error, entry.retry_at, entry.item = "failed", str(row["error"]), retry_at, item
    return entry


def _on_dead(box: Outbox, row: dict[str, Any], entry: _Entry | None) -> _Entry | None:
    if entry is None or entry.status == "done":
        return None
    entry.status, entry.error, entry.item = "dead", str(row["error"]), replace(entry.item, attempt=int(row["attempt"]))
    box._open.pop(entry.item.key, None)
    return entry


def _on_retry(box: Outbox, row: dict[str, Any], entry: _Entry | None) -> _Entry | None:
    if entry is None or entry.status != "dead":
        return None
    entry.status, entry.worker, entry.error = "pending", None, None
    entry.item = replace(entry.item, attempt=0)
    box._open[entry.item.key] = entry
    return entry


# Each handler applies one row and returns the entry whose compacted history needs the row.
_FOLD: dict[str, Callable[[Outbox, dict[str, Any], _Entry | None], _Entry | None]] = {
    "enqueue": _on_enqueue, "claim": _on_claim, "done": _on_done,
    "failed": _on_failed, "dead": _on_dead, "retry": _on_retry,
}


class Outbox:
    """The embedding work queue in ``path``; safe to share between threads and processes.

    Leases are exclusive: while ``until`` has not passed, no other worker is handed the item.
    Every method folds rows that other processes appended first, so answers are current.
    Raises :class:`ClosedError` after :meth:`close`, :class:`LockTimeoutError` when the lock
    stayed taken for ``LOCK_TIMEOUT`` seconds, :class:`StorageError` when an append failed,
    :class:`ReadOnlyError` from a method that writes, on an outbox opened with ``writable=False``.
    """

    compact_min_droppable = 10_000  # rows of done items (and junk) before auto-compaction

    def __init__(self, path: Path, *, lease_seconds: float = 60.0, max_attempts: int = 5,
                 backoff: float = 1.0, max_backoff: float = 300.0,
                 clock: Callable[[], float] = time.time, writable: bool = True,
                 file_mode: int = PRIVATE_FILE_MODE) -> None:
        self.path = Path(path)
        self._file_mode = file_mode  # of the outbox and its lock file, if this creates them
        self.writable = writable
        self.lease_seconds, self.max_attempts = lease_seconds, max_attempts
        self.backoff, self.max_backoff, self.clock = backoff, max_backoff, clock
        self._mutex = threading.RLock()  # threads first; the file lock then excludes processes
        self._file_lock = filelock.FileLock(self.path.with_suffix(".lock"), thread_local=False,
                                            poll_interval=0.002, mode=file_mode)
        self._reader: Any = None  # kept open so the inode number cannot be reused under us
        self._closed = False
        self._reset()

    def _reset(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._open: dict[str, _Entry] = {}  # pending, leased or failed; enqueue order
        self._offset = self._rows = self._droppable = 0
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._mutex:
            if self._closed:
                raise ClosedError(f"outbox {self.path} is closed")
            if not self.writable:  # no lock file: see the module docstring
                self._refresh()
                yield
                return
            try:
                self._file_lock.acquire(timeout=LOCK_TIMEOUT)
            except filelock.Timeout as exc:
                raise LockTimeoutError(f"outbox lock {exc.lock_file} stayed taken for {LOCK_TIMEOUT}s") from exc
            try:
                self._refresh()
                yield
            finally:
                self._file_lock.release()

    def _refresh(self) -> None:
        """Fold the rows appended since the last read; start over if the file was replaced."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._reset()
            return
        if self._reader is not None:
            mine = os.fstat(self._reader.fileno())
            if (mine.st_ino, mine.st_dev) != (st.st_ino, st.st_dev) or st.st_size < self._offset:
                self._reset()  # compacted by another process (or truncated): re-read it all
        if self._reader is None:
            self._reader = open(self.path, "rb")  # noqa: SIM115 - lives as long as the outbox
        self._reader.seek(self._offset)
        data = self._reader.read()
        end = data.rfind(b"\n") + 1
        at = self._offset
        for line in data[:end].split(b"\n")[:-1]:
            self._fold_line(line, at)
            at += len(line) + 1
        if not self.writable:
            # Without the lock, a partial last line may be an append under way: read it later.
            self._offset += end
            return
        if end < len(data):  # under the lock, so no append is in progress: a crash tore it
            log.warning("skipped a torn last line of %s (%d bytes at byte %d)", self.path, len(data) - end, at)
        self._offset += len(data)

    def _fold_line(self, line: bytes, at: int) -> None:
        if not line.strip():
            return
        self._rows += 1
        try:
            row = orjson.loads(line)
            entry = _FOLD[row["r"]](self, row, self._entries.get(row["item"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.warning("skipped an unreadable line of %s at byte %d: %s", self.path, at, exc)
            entry = None
        if entry is not None and entry.status != "done":
            entry.rows.append(line)
        else:
            self._droppable += 1

    def _append(self, rows: list[dict[str, Any]]) -> None:
        """Append ``rows`` in one write, then fold them (the lock is held)."""
        if not rows:
            return
        data = b"".join(orjson.dumps(row) + b"\n" for row in rows)
        try:
            fd = open_file(self.path, os.O_RDWR | os.O_APPEND, self._file_mode)
        except OSError as exc:
            raise storage_error(f"could not open {self.path}", exc, self.path) from exc
        size = -1
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # end a torn line first so our first row stays readable
            view = memoryview(data)
            while view:  # a regular file takes it all at once, barring a full disk
                view = view[os.write(fd, view):]
        except OSError as exc:
            if size >= 0:
                # All or nothing (under the lock, nobody else appends): a part of the rows,
                # say half of a batch of claims, would be folded as if it had been decided.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
            raise storage_error(f"could not append to {self.path}", exc, self.path) from exc
        finally:
            os.close(fd)
        self._refresh()

    def _check_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyError(f"the outbox {self.path} was opened with writable=False: it only reads")

    def _claimable(self, entry: _Entry, now: float, gone: Callable[[str], bool]) -> bool:
        """Pending; leased, but the lease ended or its holder is gone (``workers.holder_gone``,
        asked through ``gone``); or failed, and its retry is due."""
        if entry.status == "leased":
            return entry.until <= now or (entry.worker is not None and gone(entry.worker))
        return entry.status == "pending" or (entry.status == "failed" and entry.retry_at <= now)

    def enqueue(self, items: Iterable[tuple[str, str, str, str]]) -> int:
        """Queue ``(kind, id, hash, model)`` tuples; returns the rows written. Callers queue only
        texts that have no vector now: a done item is therefore queued again (its vector was
        lost with a deleted or damaged cache). An item that is pending, leased, failed or dead
        is not written again (``retry_dead`` re-queues the dead).
        Raises :class:`InvalidInputError` for a kind other than ``info`` or ``keyword``."""
        batch = list(items)
        for kind, *_ in batch:
            if kind not in KINDS:
                raise InvalidInputError(f"kind must be one of {sorted(KINDS)}, not {kind!r}")
        self._check_writable()
        with self._locked():
            now, rows, seen = self.clock(), [], set()
            for kind, entity_id, content_hash, model in batch:
                key = f"{model}/{entity_id}/{content_hash}"
                entry = self._entries.get(key)
                if (entry is None or entry.status == "done") and key not in seen:
                    seen.add(key)
                    rows.append({"r": "enqueue", "item": key, "kind": kind, "id": entity_id,
                                 "hash": content_hash, "model": model, "ts": now})
            self._append(rows)
            return len(rows)

    def claim(self, worker: str, limit: int) -> list[Item]:
        """Lease up to ``limit`` claimable items to ``worker``, oldest first, until now +
        ``lease_seconds``. An expired lease is claimable by anyone, and so is a lease whose
        holder is known to be gone (its tree was closed, its process died: ``workers``)."""
        self._check_writable()
        with self._locked():
            now, gone = self.clock(), functools.cache(holder_gone)
            picked: list[Item] = []
            for entry in self._open.values():
                if len(picked) >= limit:
                    break
                if self._claimable(entry, now, gone):
                    picked.append(entry.item)
            self._append([{"r": "claim", "item": it.key, "worker": worker,
                           "until": now + self.lease_seconds, "ts": now} for it in picked])
            if picked:
                claiming(worker, True)
            return picked

    def done(self, worker: str, items: Iterable[Item]) -> None:
        """Record ``items`` as embedded. Done always wins, whoever holds the lease."""
        self._check_writable()
        with self._locked():
            now = self.clock()
            self._append([{"r": "done", "item": it.key, "worker": worker, "ts": now} for it in items])
            if self._droppable >= self.compact_min_droppable and 4 * self._droppable >= 3 * self._rows:
                try:
                    self._compact()
                except StorageError as exc:  # the done rows are written: compact another time
                    log.warning("%s", exc)

    def failed(self, worker: str, items: Iterable[Item], error: str) -> None:
        """Record a failure of ``items``. It counts (attempt + 1, retry after exponential
        backoff, dead at ``max_attempts``) only if ``worker`` holds the item's latest claim
        and the item is neither done nor dead; otherwise it is only recorded."""
        error = str(error)
        self._check_writable()
        with self._locked():
            now, rows = self.clock(), []
            for it in items:
                entry = self._entries.get(it.key)
                lease = entry if entry is not None and entry.status == "leased" and entry.worker == worker else None
                counts = lease is not None
                attempt = (lease.item.attempt if lease is not None else it.attempt) + 1
                delay = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
                rows.append({"r": "failed", "item": it.key, "worker": worker, "error": error,
                             "attempt": attempt, "retry_at": now + delay, "ts": now})
                if counts and attempt >= self.max_attempts:
                    rows.append({"r": "dead", "item": it.key, "error": error, "attempt": attempt, "ts": now})
            self._append(rows)

    def retry_dead(self) -> int:
        """Re-queue every dead item with its attempts reset; returns how many."""
        self._check_writable()
        with self._locked():
            now = self.clock()
            rows = [{"r": "retry", "item": key, "ts": now}
                    for key, entry in self._entries.items() if entry.status == "dead"]
            self._append(rows)
            return len(rows)

    def status(self) -> dict[str, Any]:
        """Counts of ``pending`` (claimable now), ``leased`` (live lease), ``failed`` (waiting
        for retry), ``done`` (since the last compaction) and ``dead``, plus ``dead_items``."""
        with self._locked():
            now, gone = self.clock(), functools.cache(holder_gone)
            counts = Counter(dict.fromkeys(("pending", "leased", "failed", "done", "dead"), 0))
            dead_items = []
            for entry in self._entries.values():
                if self._claimable(entry, now, gone):
                    counts["pending"] += 1
                else:
                    counts[entry.status] += 1
                if entry.status == "dead":
                    it = entry.item
                    dead_items.append({"kind": it.kind, "id": it.id, "model": it.model,
                                       "error": entry.error, "attempt": it.attempt})
            return {**counts, "dead_items": dead_items}

    def pending_count(self) -> int:
        """Items claimable now."""
        with self._locked():
            now, gone = self.clock(), functools.cache(holder_gone)
            return sum(self._claimable(entry, now, gone) for entry in self._open.values())

    def backlog(self) -> int:
        """Items not yet done nor dead: pending + leased + failed waiting for retry."""
        with self._locked():
            return len(self._open)

    def open_items(self) -> list[Item]:
        """Every item not yet done nor dead (pending, leased, failed), oldest first."""
        with self._locked():
            return [entry.item for entry in self._open.values()]

    def compact(self) -> None:
        """Rewrite the file with only the rows of items that are not done (temp file, fsync,
        atomic replace). Other processes notice the new inode and re-read it."""
        self._check_writable()
        with self._locked():
            self._compact()

    def discard(self, entity_ids: set[str]) -> int:
        """Drop every item of these entities, whatever its status (queued, leased, failed,
        dead: a dead item's error may quote the text), and rewrite the file as ``compact``
        does, so no row of them is left; returns how many items went (forget)."""
        self._check_writable()
        with self._locked():
            gone = [key for key, entry in self._entries.items() if entry.item.id in entity_ids]
            for key in gone:
                del self._entries[key]
                self._open.pop(key, None)
            if gone or self._droppable:
                self._compact()
            return len(gone)

    def _compact(self) -> None:
        keep = [row for entry in self._entries.values() if entry.status != "done" for row in entry.rows]
        try:
            write_atomically(self.path, b"".join(row + b"\n" for row in keep), self._file_mode, sync_directory=True)
        except OSError as exc:
            raise storage_error(f"could not compact {self.path}", exc, self.path) from exc
        self._reset()
        self._refresh()

    def close(self) -> None:
        """Release the file handles; later calls raise :class:`ClosedError`. Idempotent."""
        with self._mutex:
            self._closed = True
            self._reset()


def run_worker(outbox: Outbox, worker: str, process: Callable[[list[Item]], dict[str, str | None]], *,
               batch: int = 64, stop: threading.Event, idle_wait: float = 0.2,
               on_idle: Callable[[], None] | None = None,
               on_start: Callable[[], object] | None = None,
               on_error: Callable[[Exception | None], None] | None = None,
               wake: threading.Event | None = None) -> None:
    """Claim batches and record what ``process`` reports until ``stop`` is set.

    ``process(items)`` returns ``{item.key: None}`` for success or an error message; a key
    it leaves out counts as failed, and if it raises, every item of the batch failed with the
    exception's text. When nothing is claimable, ``on_idle`` runs and the loop waits
    ``idle_wait`` seconds on ``stop``. ``on_start`` runs once before the first claim.

    A round that fails for a reason that is not the items' own (StorageError or
    LockTimeoutError from the outbox, ``on_idle`` or ``process``: a full disk, a lock held
    too long; or an OSError from the outbox or ``on_idle``)
    counts against no item: the loop reports it to ``on_error``, waits (``ERROR_BACKOFF``
    seconds, doubling up to ``ERROR_BACKOFF_MAX``, or until ``wake`` is set) and tries the
    same items again; the first round that succeeds after errors reports None.
    """
    held: list[Item] = []  # claimed, not yet recorded: a failed round tries them again
    backoff = 0.0
    while not stop.is_set():
        try:
            if on_start is not None:
                on_start()  # (a failure here is retried like a round's)
                on_start = None
            items = held or outbox.claim(worker, batch)
            held = items
            if items:
                record_results(outbox, worker, items, _run(process, items))
                held = []
            elif on_idle is not None:
                on_idle()
        except WORKER_ERRORS as exc:
            backoff = min(max(2 * backoff, ERROR_BACKOFF), ERROR_BACKOFF_MAX)
            log.warning("embedding worker %s: %s; trying again in %g s", worker, exc, backoff)
            if on_error is not None:
                on_error(exc)
            _pause(stop, wake, backoff)
            continue
        if backoff:
            backoff = 0.0
            log.info("embedding worker %s works again", worker)
            if on_error is not None:
                on_error(None)
        if not items:
            _pause(stop, wake, idle_wait)


#: What a worker round survives, and retries after a backoff, counting it against no item.
WORKER_ERRORS: tuple[type[Exception], ...] = (StorageError, LockTimeoutError, OSError)
ERROR_BACKOFF = 0.5  # seconds before the first retry after a failed round
ERROR_BACKOFF_MAX = 30.0  # the backoff doubles up to this; ``wake`` cuts a wait short


def _pause(stop: threading.Event, wake: threading.Event | None, seconds: float) -> None:
    if wake is None:
        stop.wait(seconds)
    elif wake.wait(seconds):
        wake.clear()


def _run(process: Callable[[list[Item]], dict[str, str | None]], items: list[Item]) -> dict[str, str | None]:
    try:
        return process(items)
    except (StorageError, LockTimeoutError):
        raise  # the cache's disk or lock, not the items' fault: the round is tried again
    except Exception as exc:  # noqa: BLE001 -- the embedder's failure is the items' failure
        return {it.key: f"{type(exc).__name__}: {exc}" for it in items}


def record_results(outbox: Outbox, worker: str, items: list[Item], results: dict[str, str | None]) -> None:
    """Record what ``process`` reported for ``items``: done for None, failed (grouped by
    error) otherwise; an item missing from ``results`` failed."""
    ok, failures = [], defaultdict(list)
    for it in items:
        error = results.get(it.key, "process returned no result for this item")
        if error is None:
            ok.append(it)
        else:
            failures[str(error)].append(it)
    if ok:
        outbox.done(worker, ok)
    for error, failed_items in failures.items():
        outbox.failed(worker, failed_items, error)
    claiming(worker, False)
