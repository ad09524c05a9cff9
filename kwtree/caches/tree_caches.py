"""The caches of one open tree (``TreeCaches``): the full-text index, the vector store, and the outbox
of embedding work that fills the vector store, with the worker thread that drains it. All live under
``<data_dir>/cache/`` (the outbox is ``<data_dir>/outbox.jsonl``) and all can be deleted: they are
rebuilt from the log.

- **Full text** is a projection of the log with a lock of its own (``kwtree.caches.fulltext_projection``):
  writes note what they changed; a search first brings the index up to the tree's state, never waiting for
  the log's writer lock. ``TreeCaches.fulltext`` is it.
- **Vectors** (``kwtree.caches.vector_projection``, ``TreeCaches.vectors``) are eventually consistent: every
  committed text enqueues its embedding in the outbox; a worker thread (or ``kwtree worker``) embeds in
  batches; the scan at open enqueues every live entity whose current text has no vector (only those written
  after the store's recorded position, when its files are as that position found them), so a lost outbox
  row costs nothing. Recall uses what is embedded; a vector of an older text is never returned. A tree that
  may not write (``read_only``, ``as_of``) embeds nothing and queues nothing: it opens the vector store and
  the outbox read-only, searches what writers embedded (a graph it has to build stays in memory) and, in
  ``wait_indexed``, waits for other processes' workers.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from kwtree.caches.embed import Embedder
from kwtree.caches.fulltext_projection import FullTextProjection, Hits
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
from kwtree.models import ROOT_ID, Info, Keyword, Operation
from kwtree.progress import ProgressCallback, Ticker
from kwtree.stores.directory import CACHE_DIR, OUTBOX_NAME
from kwtree.stores.files import PRIVATE_FILE_MODE
from kwtree.stores.vector_files import META_FILE

__all__ = ["TreeCaches"]

log = logging.getLogger("kwtree.cache")

T = TypeVar("T")
Reader = Callable[[Callable[[State], T]], T]


class TreeCaches:
    """The caches of one open tree: its full-text index (``fulltext``), its vector store
    (``vectors``), the outbox of embedding work and the worker thread that drains it."""

    def __init__(
        self,
        data_dir: Path,
        embedder: Embedder,
        read: Reader[Any],
        *,
        writes: bool,
        worker: bool,
        embed_async: bool,
        lock_timeout: float = 10.0,
        try_catch_up: Callable[[], int | None] | None = None,
        write_vectors: bool | None = None,
        file_mode: int = PRIVATE_FILE_MODE,
        progress: ProgressCallback | None = None,
    ) -> None:
        """``writes``: whether this tree writes the shared caches (the full-text index waits
        at most ``lock_timeout`` for its lock; ``try_catch_up`` is ``Engine.try_catch_up``).
        ``write_vectors``: whether this tree embeds, writes the vector store and queues work
        in the outbox; by default, when it ``writes``. ``kwtree worker`` reads the tree
        read-only but writes vectors. ``progress`` is told how the work a caller waits for
        goes (indexing full text, embedding in ``wait_indexed``; never the worker thread's
        background rounds)."""
        self._read = read
        self._progress = progress
        self._writes = writes
        self._write_vectors = writes if write_vectors is None else write_vectors
        self._embed_async = embed_async
        self._cache = data_dir / CACHE_DIR
        #: The full-text index, a projection of the log with a lock of its own.
        self.fulltext = FullTextProjection(self._cache, read, writes=writes, lock_timeout=lock_timeout,
                                           try_catch_up=try_catch_up, file_mode=file_mode, progress=progress)
        #: The vector store of the embedder's model, a projection of the log with a position.
        self.vectors = VectorProjection(self._cache, embedder, read, writes=self._write_vectors, file_mode=file_mode)
        self._outbox = Outbox(data_dir / OUTBOX_NAME, writable=self._write_vectors, file_mode=file_mode)
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
        if worker:
            self._thread = threading.Thread(target=self._work, name="kwtree-embedder", daemon=True)
            self._thread.start()

    def _recover_vanished_vectors(self) -> None:
        """If the vector store's directory was deleted under this tree, queue every text again
        (embedding them here when writes embed inline), so recall does not wait for the next
        open to see vectors again (``VectorProjection.vanished``)."""
        if not self.vectors.vanished():
            return
        self.repair()
        if not self._embed_async and self._thread is None:
            self.wait_indexed()

    # --- writes ------------------------------------------------------------------------------

    def note(self, op: Operation, state: State) -> None:
        """Record what a committed operation changed (call after it was applied). No I/O:
        the write path stays as fast as the log; the worker thread queues the embeddings
        (a crash before it does loses nothing: the repair scan of the next open finds them),
        unless ``embed_async=False``, which embeds here."""
        touched: list[EntityKey] = []
        written: list[EntityKey] = []
        for change in op.changes:
            after = change.after
            if type(after) is Info:
                written.append(("info", after.id))
            elif type(after) is Keyword and after.id != ROOT_ID:
                written.append(("keyword", after.id))
                if state.children.get(after.id):  # its descendants' paths may have changed
                    touched.extend(("keyword", kid) for kid in state.subtree(after.id))
        self.fulltext.note([*written, *touched])
        if self._embed_async:
            with self._lock:
                self._unsent.extend(written)
        if self._embed_async:
            return
        try:
            work = self.vectors.unembedded(state, written)
            self.embed([(kind, entity_id, digest) for kind, entity_id, digest, _ in work])
        except Exception:  # the write is committed; the repair scan embeds it later
            log.exception("embedding inline after operation %s failed; the text is embedded later", op.op_id)

    def _flush(self) -> None:
        """Move the embeddings the writes asked for into the outbox."""
        with self._lock:
            keys, self._unsent = self._unsent, []
        if keys:
            try:
                work = self._read(lambda state: self.vectors.unembedded(state, keys))
                if work:
                    self._outbox.enqueue(work)
            except BaseException:
                with self._lock:  # queued by the next flush (a full disk may have refused them)
                    self._unsent[:0] = keys
                raise

    def embed(self, items: list[tuple[str, str, str]]) -> dict[str, str | None]:
        """``VectorProjection.embed``, once a store deleted under this tree is made again."""
        self._recover_vanished_vectors()  # (may embed everything again itself)
        return self.vectors.embed(items)

    # --- the worker --------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            run_worker(self._outbox, self._worker_id, self._process, stop=self._stop, on_idle=self._idle,
                       on_start=self._repair_and_warm, on_error=self._report_worker, wake=self._wake)
        finally:
            self._repaired.set()  # (also if it failed: waiting for it would never end)

    def _process(self, items: list[Item]) -> dict[str, str | None]:
        result = self.embed([(item.kind, item.id, item.hash) for item in items])
        return {item.key: result[f"{item.id}/{item.hash}"] for item in items}

    def _idle(self) -> None:
        """The worker's turn when the outbox has nothing to claim: queue what writes asked
        for, and once a backlog is done, persist the vector graph (``VectorProjection.persist``)
        and record the store's position (``advance``)."""
        self._flush()
        if self.vectors.unsaved and not self._outbox.backlog():
            self.vectors.persist()
            self.vectors.advance()

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
            if self._writes and not (self.vectors.directory / META_FILE).exists():
                with self.fulltext.locked():  # creating the store races other new writers
                    _ = self.vectors.store
            self.repair(full=False)
        except WORKER_ERRORS:
            raise
        except Exception:  # a cache problem must never take the tree down
            log.exception("the repair scan of the vector store failed; it runs again at the next open")
        self._repaired.set()
        try:
            self.vectors.store.warm_up()  # a large store's graph is loaded or built here, not in a query
        except Exception:  # the first search tries again
            log.exception("could not load the vector graph ahead of the first search")

    def reload_vectors(self, *, rebuild: bool = False) -> int:
        """Read the vector store again from its files (damage done under this tree is seen:
        a store whose meta.json is damaged is emptied, rows after a damaged key line or past
        the end of vectors.f32 are dropped), or with ``rebuild`` delete this model's vectors;
        then queue every live text that has no vector; returns how many were queued
        (``KeywordTree.repair``, ``KeywordTree.reindex``). Raises ReadOnlyError in a tree
        that does not write vectors."""
        self.vectors.reload(rebuild=rebuild)
        return self.repair()

    def erase(self, entity_ids: set[str]) -> tuple[int, int]:
        """Purge what the caches hold of these (forgotten) entities: the full-text index's
        files are removed (tantivy keeps a deleted document's terms until a merge it cannot
        be asked for; the next search rebuilds the index from the state), their vector rows
        are erased in every model's store (``kwtree.stores.vector_erase``) and their outbox
        items dropped. Under the tree's write locks. Returns (vector rows erased, outbox
        items dropped). Raises ReadOnlyError in a tree that does not write."""
        if not self._writes or not self._write_vectors:
            raise ReadOnlyError("a tree that may not write cannot erase its caches")
        self.fulltext.reset()
        erased = self.vectors.erase(entity_ids)
        return erased, self._outbox.discard(entity_ids)

    def repair(self, *, full: bool = True) -> int:
        """Enqueue every live entity whose current text has no vector (``VectorProjection.missing``:
        with ``full``, every row is checked and every entity hashed; without, a store as its
        recorded position found it is trusted and only later writes are hashed); returns how
        many. An open item whose vector is stored is recorded done. Raises ReadOnlyError in a
        tree that does not write vectors."""
        if not self._write_vectors:
            raise ReadOnlyError("a tree that may not write queues no embedding work")
        work = self.vectors.missing(full=full)
        if work:
            self._outbox.enqueue(work)
        # An open item whose text has its vector is done: its worker died between storing
        # the vector and recording it, or a damaged outbox lost the done row. Waiting for its
        # lease to run out (a minute) would be waiting for nothing.
        store, model = self.vectors.store, self.vectors.model
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
        self._flush()
        with Ticker(self._progress, "embedding", None, "texts") as tick:
            if not self._wait_drained(deadline, tick):
                tick.leave_unfinished()
                return False
        if self.vectors.exists():
            self.vectors.store.refresh()
        if self._write_vectors:  # the backlog is done: save the graph now (if it lags), not in each reader
            try:
                self.vectors.persist()
                self.vectors.advance()
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
            self._flush()  # the status counts every write made so far
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

    # --- reads -------------------------------------------------------------------------------

    @property
    def model(self) -> str:
        """The embedder's model name (the vectors this tree searches)."""
        return self.vectors.model

    def vector_hits(self, query: str, kind: str, k: int, within: Collection[str] | None = None) -> Hits:
        """``VectorProjection.hits``, once a store deleted under this tree is made again."""
        self._recover_vanished_vectors()
        return self.vectors.hits(query, kind, k, within)

    # --- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the worker, commit what the full-text index still lacks, persist the vectors
        and their graph (``VectorProjection.persist``); drop a private full-text index."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        retire_worker(self._worker_id)
        try:
            self._flush()  # for a `kwtree worker`, or the next open
        except Exception:  # the repair scan of the next open finds them
            log.exception("could not queue the last writes' embeddings on close")
        self.fulltext.close()
        if self._write_vectors and self.vectors.exists():
            try:
                self.vectors.persist()  # readers (every CLI read) load the graph, not build it
                if not self._outbox.backlog():
                    self.vectors.advance()  # the next open hashes only what is written after
            except Exception as exc:  # noqa: BLE001 -- a cache: the next writer saves it
                log.warning("could not save the vector graph on close: %s", exc)
        for closing in (self.vectors.close, self._outbox.close):
            with contextlib.suppress(Exception):
                closing()
