"""The embedding worker of one open tree (``EmbeddingWorker``): the outbox of embedding work
(``<data_dir>/outbox.jsonl``) that fills the vector store, the thread that drains it, and the
waiting for it (``wait_indexed``).

Writes hand it the keys of the texts they wrote (``EmbeddingWorker.written``: no I/O); the
thread queues them in the outbox when it is idle, claims work in batches under a lease, embeds
it through the tree's caches and records the results, retrying with a backoff while the disk
refuses a row. Its first step is the repair scan (``repair``): every live text without a vector
is queued, so a lost outbox row costs nothing. Once a backlog is done it saves the vector graph
and records the store's position (``VectorProjection.advance``). ``kwtree worker`` runs the same
loop in its own process (``kwtree.cli.worker``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from kwtree.caches.outbox import (
    ERROR_BACKOFF_MAX,
    WORKER_ERRORS,
    Item,
    Outbox,
    record_results,
    run_worker,
)
from kwtree.caches.texts import EntityKey
from kwtree.caches.vector_projection import VectorProjection
from kwtree.caches.workers import new_worker_id, retire_worker
from kwtree.engine.state import State
from kwtree.errors import DiskFullError, ReadOnlyError
from kwtree.progress import ProgressCallback, Ticker
from kwtree.stores.vector_files import META_FILE

__all__ = ["EmbeddingWorker"]

log = logging.getLogger("kwtree.cache")

T = TypeVar("T")
Reader = Callable[[Callable[[State], T]], T]


class EmbeddingWorker:
    """The outbox of one tree's embedding work and the thread that drains it into ``vectors``."""

    def __init__(self, outbox_path: Path, vectors: VectorProjection, read: Reader[Any],
                 embed: Callable[[list[tuple[str, str, str]]], dict[str, str | None]], *,
                 writes: bool, write_vectors: bool, thread: bool,
                 creating: Callable[[], AbstractContextManager[None]],
                 file_mode: int, progress: ProgressCallback | None = None) -> None:
        """``embed`` embeds (kind, id, text digest) items and stores their vectors (the
        caches' ``embed``); ``write_vectors``: whether this tree embeds and queues work at all;
        ``writes``: whether it writes the shared caches (it then makes a missing vector store,
        under ``creating``, the lock new writers race for). ``thread``: run the worker thread
        (else ``wait_indexed`` drains the outbox itself). ``progress`` is told how
        ``wait_indexed``'s embedding goes (never the thread's background rounds)."""
        self._vectors = vectors
        self._read = read
        self._embed = embed
        self._writes = writes
        self._write_vectors = write_vectors
        self._creating = creating
        self._progress = progress
        self._outbox = Outbox(outbox_path, writable=write_vectors, file_mode=file_mode)
        self._lock = threading.Lock()
        self._unsent: list[EntityKey] = []  # written texts not yet in the outbox
        self._stop = threading.Event()
        self._wake = threading.Event()  # cuts the worker's wait short (close, wait_indexed)
        self._repaired = threading.Event()  # the open's repair scan has queued what it found
        # What the worker's last round failed with (None once a round succeeds again), for
        # outbox_status and wait_indexed; ``_worker_reports`` counts the reports.
        self._worker_state = threading.Condition()
        self._worker_error: Exception | None = None
        self._worker_error_since = 0.0
        self._worker_reports = 0
        self._held: list[Item] = []  # claimed by a wait_indexed round that failed: tried first
        self._thread: threading.Thread | None = None
        self._worker_id = new_worker_id()  # retired by close: its leases are then taken over at once
        if thread:
            self._thread = threading.Thread(target=self._work, name="kwtree-embedder", daemon=True)
            self._thread.start()

    @property
    def runs_thread(self) -> bool:
        """Whether this worker has a thread of its own (it may have died)."""
        return self._thread is not None

    def written(self, keys: Iterable[EntityKey]) -> None:
        """Note texts a committed operation wrote: the thread queues their embedding when it
        is idle (a crash before it does loses nothing: the repair scan of the next open finds
        them). No I/O."""
        with self._lock:
            self._unsent.extend(keys)

    def flush(self) -> None:
        """Move the embeddings the writes asked for into the outbox."""
        with self._lock:
            keys, self._unsent = self._unsent, []
        if keys:
            try:
                work = self._read(lambda state: self._vectors.unembedded(state, keys))
                if work:
                    self._outbox.enqueue(work)
            except BaseException:
                with self._lock:  # queued by the next flush (a full disk may have refused them)
                    self._unsent[:0] = keys
                raise

    def _work(self) -> None:
        try:
            run_worker(self._outbox, self._worker_id, self._process, stop=self._stop, on_idle=self._idle,
                       on_start=self._repair_and_warm, on_error=self._report_worker, wake=self._wake)
        finally:
            self._repaired.set()  # (also if it failed: waiting for it would never end)

    def _process(self, items: list[Item]) -> dict[str, str | None]:
        result = self._embed([(item.kind, item.id, item.hash) for item in items])
        return {item.key: result[f"{item.id}/{item.hash}"] for item in items}

    def _idle(self) -> None:
        """The worker's turn when the outbox has nothing to claim: queue what writes asked
        for, and once a backlog is done, persist the vector graph (``VectorProjection.persist``)
        and record the store's position (``advance``)."""
        self.flush()
        if self._vectors.unsaved and not self._outbox.backlog():
            self._vectors.persist()
            self._vectors.advance()

    def _report_worker(self, error: Exception | None) -> None:
        with self._worker_state:
            if error is not None and self._worker_error is None:
                self._worker_error_since = time.time()
            self._worker_error = error
            self._worker_reports += 1
            self._worker_state.notify_all()

    def _repair_and_warm(self) -> None:
        """The worker's first step: the repair scan (retried by run_worker while the disk
        refuses its rows), then loading or building a large store's graph."""
        try:
            if self._writes and not (self._vectors.directory / META_FILE).exists():
                with self._creating():  # creating the store races other new writers
                    _ = self._vectors.store
            self.repair(full=False)
        except WORKER_ERRORS:
            raise
        except Exception:  # a cache problem must never take the tree down
            log.exception("the repair scan of the vector store failed; it runs again at the next open")
        self._repaired.set()
        try:
            self._vectors.store.warm_up()  # a large store's graph is loaded or built here, not in a query
        except Exception:  # the first search tries again
            log.exception("could not load the vector graph ahead of the first search")

    def repair(self, *, full: bool = True) -> int:
        """Enqueue every live entity whose current text has no vector (``VectorProjection.missing``:
        with ``full``, every row is checked and every entity hashed; without, a store as its
        recorded position found it is trusted and only later writes are hashed); returns how
        many. An open item whose vector is stored is recorded done. Raises ReadOnlyError in a
        tree that does not write vectors."""
        if not self._write_vectors:
            raise ReadOnlyError("a tree that may not write queues no embedding work")
        work = self._vectors.missing(full=full)
        if work:
            self._outbox.enqueue(work)
        # An open item whose text has its vector is done: its worker died between storing
        # the vector and recording it, or a damaged outbox lost the done row. Waiting for its
        # lease to run out (a minute) would be waiting for nothing. (An item whose text this
        # state holds no longer is not judged here: the state may not have read yet the
        # operation that wrote it; the worker that claims it judges it after catching up.)
        store, model = self._vectors.store, self._vectors.model
        embedded = [item for item in self._outbox.open_items() if item.model == model and store.has(item.id, item.hash)]
        if embedded:
            self._outbox.done(self._worker_id, embedded)
        return len(work)

    def wait_indexed(self, timeout: float | None = None) -> bool:
        """Wait until the outbox has no work left; True if it emptied within ``timeout``.
        Without a worker thread (or if it died), the repair scan runs first and the outbox is
        drained here. A tree that does not write vectors only waits for other processes to
        drain it. If the worker thread's last round failed (a full disk), it is woken to try
        again at once, and if that fails too, its error is raised: StorageError
        (DiskFullError), LockTimeoutError; the worker keeps retrying by itself. A tree that
        writes vectors returns with the vector graph saved (``VectorProjection.persist``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.flush()
        with Ticker(self._progress, "embedding", None, "texts") as tick:
            if not self._wait_drained(deadline, tick):
                tick.leave_unfinished()
                return False
        if self._vectors.exists():
            self._vectors.store.refresh()
        if self._write_vectors:  # the backlog is done: save the graph now (if it lags), not in each reader
            try:
                self._vectors.persist()
                self._vectors.advance()
            except WORKER_ERRORS as exc:  # every text is embedded: only readers pay, until a save works
                log.warning("could not save the vector graph: %s", exc)
        return True

    def _wait_drained(self, deadline: float | None, tick: Ticker) -> bool:
        """wait_indexed's loop: False if ``deadline`` passed before the outbox emptied."""
        while True:
            thread = self._thread
            # Nobody else in this process drains it. (A tree that does not write vectors has
            # no worker thread and runs no repair scan: that would queue work.)
            drain_here = self._write_vectors and (thread is None or not thread.is_alive())
            if drain_here and not self._repaired.is_set():
                self._as_worker(functools.partial(self.repair, full=False))
                self._repaired.set()
            elif thread is not None and not drain_here:
                self._raise_worker_error(deadline)
            left = self._outbox.backlog()
            tick.remaining(left)  # (by this process's worker, another one, or here)
            if (self._repaired.is_set() or thread is None) and not left:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            if drain_here and self._as_worker(self._drain_round):
                continue
            time.sleep(0.02)

    def _drain_round(self) -> bool:
        """One round of the work a worker does, here; True if there were items. Items of a
        round that raised (the disk refused a vector or a row) are tried first next time."""
        items = self._held or self._outbox.claim(self._worker_id, 256)
        self._held = items
        if not items:
            return False
        record_results(self._outbox, self._worker_id, items, self._process(items))
        self._held = []
        return True

    def _as_worker(self, step: Callable[[], T]) -> T:
        """Run a worker's step in wait_indexed, reporting its outcome as the worker thread's
        rounds are reported (for outbox_status)."""
        try:
            result = step()
        except WORKER_ERRORS as exc:
            self._report_worker(exc)
            raise
        if self._worker_error is not None:
            self._report_worker(None)
        return result

    def _raise_worker_error(self, deadline: float | None) -> None:
        """If the worker thread's last round failed: wake it to try again now, wait for the
        outcome (until ``deadline``), and raise its error if it failed again."""
        with self._worker_state:
            if self._worker_error is None:
                return
            seen = self._worker_reports
        self._wake.set()
        thread = self._thread
        with self._worker_state:
            self._worker_state.wait_for(
                lambda: self._worker_reports != seen or thread is None or not thread.is_alive(),
                None if deadline is None else max(0.0, deadline - time.monotonic()))
            error = self._worker_error if self._worker_reports != seen else None
        if error is not None:
            message = (f"the embedding worker cannot go on: {error} (it tries again by itself, "
                       f"at most every {ERROR_BACKOFF_MAX:g} s)")
            if isinstance(error, DiskFullError):
                raise DiskFullError(message, error.path) from error
            raise type(error)(message) from error

    def outbox_status(self) -> dict[str, Any]:
        """The outbox's counts, and ``worker_error``: None, or what the embedding worker's
        last round failed with (``error``, ``type``, ``since``), while it retries."""
        flush_error: Exception | None = None
        try:
            self.flush()  # the status counts every write made so far
        except WORKER_ERRORS as exc:  # (a full disk): reported, not raised
            flush_error = exc
        status = self._outbox.status()
        with self._worker_state:
            error, since = self._worker_error, self._worker_error_since
        if error is None and flush_error is not None:
            error, since = flush_error, time.time()
        status["worker_error"] = None if error is None else {
            "error": str(error), "type": type(error).__name__, "since": since}
        return status

    def retry_dead(self) -> int:
        return self._outbox.retry_dead()

    def discard(self, entity_ids: set[str]) -> int:
        """Drop the outbox items of these (forgotten) entities; returns how many."""
        return self._outbox.discard(entity_ids)

    def close(self) -> None:
        """Stop the thread and queue what writes asked for (for a ``kwtree worker``, or the
        next open)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        retire_worker(self._worker_id)
        try:
            self.flush()
        except Exception:  # the repair scan of the next open finds them
            log.exception("could not queue the last writes' embeddings on close")

    def backlog(self) -> int:
        """How many items of the outbox are not done."""
        return self._outbox.backlog()

    def release(self) -> None:
        """Close the outbox's file."""
        self._outbox.close()
