"""The full-text index as a projection of the log: it records the last operation it reflects
(its watermark) and catches up from there, under a lock of its own, never the log's writer lock.

- **Writes** only note what they changed (``note``): no I/O on the write path.
- **A search** first brings the index up to the tree's state: nothing to do when no write is
  pending and the index reflects the state (no lock taken); else, holding the index's lock
  (``cache/lock``, with this process's threads serialised first), the index is read again as
  the last process left it and what was written after its watermark is applied and committed
  at the state's last op id. A process holding the log's writer lock (a compaction, a forget,
  a restore) therefore never holds up a search: readers wait at most for another process
  bringing the index up to date.
- **An index ahead of the tree's state** (another process indexed operations this tree has not
  read yet) holds everything the tree knows: the tree reads the log's newer operations if no
  write of its own process is under way, else searches the index as it is. An index ahead of
  the log itself (a log cut back by a crash without fsync, or replaced by an older one) would
  hide every later write with a lower id: it is rebuilt.
- **A tree that may not write it** (``read_only``, ``as_of``) searches the shared index while
  its watermark is the tree's last op id; otherwise it keeps a private index in memory (never
  on disk: a killed process leaves no copy of texts a later ``forget`` erases), fed the same
  way from its own state; operations that forgot entities make it start over.

Lock order: the log's writer lock (when a caller holds it: compaction, forget, repair, restore)
before the index's lock, never the other way round; a reader holding the index's lock never
waits for this process's write mutex (``Engine.try_catch_up``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kwtree.caches import lexical
from kwtree.caches.texts import EntityKey, search_text, written_after
from kwtree.engine.state import State
from kwtree.errors import DiskFullError
from kwtree.models import is_forgotten
from kwtree.progress import ProgressCallback, Ticker
from kwtree.stores.directory import CACHE_LOCK
from kwtree.stores.files import PRIVATE_FILE_MODE, make_dir, remove_cache_dir
from kwtree.stores.fulltext import FullTextIndex, is_index_failure
from kwtree.stores.lock import WriterLock

__all__ = ["FullTextProjection", "Hits"]

Hits = list[tuple[str, float]]  # (entity id, score), best first
T = TypeVar("T")
Reader = Callable[[Callable[[State], T]], T]

log = logging.getLogger("kwtree.cache")
#: How many times a search reads the log's newer operations when another process's index is
#: ahead of this tree, before searching the index as it is.
_AHEAD_TRIES = 3


class _IndexLock:
    """The index's lock: this process's threads (re-entrant), then other processes through
    ``cache/lock``, taken at the outermost hold only."""

    def __init__(self, cache: Path, timeout: float, file_mode: int) -> None:
        self._cache, self._timeout, self._file_mode = cache, timeout, file_mode
        self._threads = threading.RLock()
        self._depth = 0
        self._file: WriterLock | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._threads:
            if self._depth == 0:
                if self._file is None:
                    make_dir(self._cache, self._file_mode, exist_ok=True)
                    self._file = WriterLock(self._cache / CACHE_LOCK, self._timeout, file_mode=self._file_mode,
                                            what="the full-text index's lock")
                self._file.acquire()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._file.release()  # type: ignore[union-attr]

    def close(self) -> None:
        with self._threads:
            if self._file is not None:
                self._file.close()
                self._file = None


class FullTextProjection:
    """The full-text index of one open tree, kept in step with its state (module docstring)."""

    def __init__(self, cache: Path, read: Reader[Any], *, writes: bool, lock_timeout: float,
                 try_catch_up: Callable[[], int | None] | None = None, file_mode: int = PRIVATE_FILE_MODE,
                 progress: ProgressCallback | None = None) -> None:
        """``writes``: whether this tree writes the shared index (else it searches it, or a
        private one). ``try_catch_up`` reads the log's newer operations into the state unless
        this process is writing (``Engine.try_catch_up``)."""
        self._cache = cache
        self._read = read
        self._writes = writes
        self._try_catch_up = try_catch_up
        self._file_mode = file_mode
        self._progress = progress
        self._lock = _IndexLock(cache, lock_timeout, file_mode)
        # Opened on first use: opening is not free, and several processes opening a new
        # directory at once would race to create it (a writer creates it under the lock).
        self._index: FullTextIndex | None = None
        self._open_lock = threading.Lock()
        # A tree that may not write the shared index searches a private one, in memory, once
        # the shared one did not reflect exactly its state.
        self._private = False
        self._private_lock = threading.Lock()
        self._state_lock = threading.Lock()  # guards the three below
        self._pending: set[EntityKey] = set()  # written since the last sync by this process
        self._expected_ops: int | None = None  # op count the pending set fully describes...
        self._synced: str | None = None  # ...on top of the index at this watermark

    # --- the index -----------------------------------------------------------------------

    @property
    def _fulltext(self) -> FullTextIndex:
        with self._open_lock:
            if self._index is None:
                self._index = FullTextIndex(None if self._private else self._cache / "fulltext",
                                            writable=self._writes, file_mode=self._file_mode)
            return self._index

    @property
    def where(self) -> str:
        """Where the index this tree searches lives (for messages)."""
        return "this tree's private index in memory" if self._private else str(self._cache / "fulltext")

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The index's lock, for a caller about to remove or rewrite its files."""
        with self._lock.held():
            yield

    # --- writes --------------------------------------------------------------------------

    def note(self, written: Collection[EntityKey]) -> None:
        """Record what an operation this process committed changed (no I/O)."""
        with self._state_lock:
            if self._expected_ops is not None:
                self._expected_ops += 1
            self._pending.update(written)

    def pending(self) -> bool:
        """Whether writes of this process wait to be indexed."""
        with self._state_lock:
            return bool(self._pending)

    # --- bringing it up to date ----------------------------------------------------------

    def sync(self, *, only_if_written: bool = False, latest: bool = False) -> None:
        """Bring the index up to the tree's state (module docstring). ``only_if_written``:
        only if this process wrote since (a tree that may not write the shared index then does
        nothing). ``latest``: the caller holds the log's writer lock and the state is the
        log's latest, so an index ahead of it is ahead of the log. An index that fails
        (deleted or damaged under us) is rebuilt from the state, once."""
        if not self._writes:
            if not only_if_written:
                self._sync_private()
            return
        for _ in range(_AHEAD_TRIES):
            if only_if_written and not self.pending():
                return
            if self._current():
                return
            with self._lock.held():
                ahead = self._apply_or_rebuild(latest=latest)
            if not ahead:
                return
            caught = self._try_catch_up() if self._try_catch_up is not None else None
            if caught is None:
                return  # a write of this process is under way: search the index as it is
            if caught == 0:  # nothing newer in the log: the index is ahead of the log itself
                with self._lock.held():
                    self._apply_or_rebuild(latest=True)
                return

    def _current(self) -> bool:
        """True when nothing was written since the index (as this process last saw it)
        reflected the state: no lock is needed to know there is nothing to do."""
        index = self._index
        if index is None:
            return False
        return bool(self._read(lambda state: self._unchanged(state) and index.watermark == state.last_op_id))

    def _unchanged(self, state: State) -> bool:
        with self._state_lock:
            return not self._pending and self._expected_ops == state.op_count

    def _apply_or_rebuild(self, *, latest: bool) -> bool:
        """Under the index's lock: bring it up to the state; True if it is ahead of the state
        (and ``latest`` is not set: the caller may read the log's newer operations first)."""
        try:
            return self._apply(latest=latest)
        except BaseException as exc:
            if not is_index_failure(exc):
                raise
            if isinstance(exc, DiskFullError):
                # Not damage: keep the files (a rebuild cannot work either); the index is
                # opened again and fed from its watermark once space returns.
                self.reset(remove_files=False)
                raise
            log.warning("the full-text index in %s failed (%s: %s); rebuilding it from the log",
                        self.where, type(exc).__name__, exc)
            self.reset()
            return self._apply(latest=True)

    def _apply(self, *, latest: bool) -> bool:
        """Apply to the index what was written after its watermark, or rebuild it; True if it
        is ahead of the state and ``latest`` is not set (nothing done). A private index that
        the operations to apply include a ``forget`` for is rebuilt rather than patched:
        tantivy keeps a deleted document's terms in its segment (and in the terms' document
        frequencies, so in every score) until a merge that cannot be asked for, and a reader
        that caught up with a forget must hold nothing of the erased text. (The writer's own
        index is removed by ``TreeCaches.erase``.)"""
        index = self._fulltext
        if not self._private:
            index.refresh()  # as the last process to commit it left it
        last = self._read(lambda state: state.last_op_id)
        if index.watermark == last:
            return False
        if index.watermark is not None and (last is None or index.watermark > last):
            if not latest:
                return True  # another process indexed operations this tree has not read yet
            log.warning("the full-text index in %s reflects operation %s, past the log's last %s; rebuilding it",
                        self.where, index.watermark, last)
            self.reset()
            index = self._fulltext

        def plan(state: State) -> tuple[str | None, dict[EntityKey, str | None], bool]:
            with self._state_lock:
                if (self._expected_ops == state.op_count and index.watermark is not None
                        and index.watermark == self._synced):
                    changed = set(self._pending)
                else:
                    changed = written_after(state, index.watermark)
                self._pending.clear()
                self._expected_ops = state.op_count
            texts = {key: search_text(state, *key) for key in changed}
            forgotten = self._private and index.watermark is not None and any(
                entity is not None and is_forgotten(entity)
                for entity in ((state.infos if kind == "info" else state.keywords).get(entity_id)
                               for (kind, entity_id), text in texts.items() if text is None))
            return state.last_op_id, texts, forgotten

        watermark, texts, forgotten = self._read(plan)
        if forgotten:
            log.debug("the operations after %s forgot entities; rebuilding %s", index.watermark, self.where)
            self.reset()
            return self._apply(latest=True)  # from no watermark: a full scan finds nothing forgotten to patch
        if watermark != index.watermark:
            with Ticker(self._progress, "indexing full text", len(texts), "texts") as tick:
                for (kind, entity_id), text in sorted(texts.items()):  # a fixed order: rebuilds rank alike
                    if text is None:
                        index.delete(kind, entity_id)
                    else:
                        index.upsert(kind, entity_id, text)
                    tick.add()
                index.commit(watermark)
        with self._state_lock:
            self._synced = watermark
        return False

    def _sync_private(self) -> None:
        """For a tree that may not write the shared index (``read_only``, ``as_of``): search
        the shared index while its watermark is this tree's last op id (the writer committed
        exactly this state); else move to a private index in memory and bring that up to the
        state, from then on at every search (after a ``refresh()`` only the new operations are
        applied). Searching the shared index at another watermark would miss writes (or see
        later ones): deleting the caches would then change what a read-only tree finds."""
        with self._private_lock:
            if not self._private:
                last = self._read(lambda state: state.last_op_id)
                opened = self._index is not None
                shared = self._fulltext
                if opened and shared.watermark != last:
                    shared.refresh()  # the writer may have committed this state since
                if shared.available and shared.watermark == last:
                    return
                log.debug("the shared full-text index reflects %s, this tree %s: searching a private index in memory",
                          shared.watermark if shared.available else "nothing", last)
                self._go_private()
            self._apply_or_rebuild(latest=True)

    def _go_private(self) -> None:
        """From now on search a private index in memory, built from the whole state at the
        next sync. Call under the private lock.

        Not on disk, not even as a copy of the shared index that only the tail after its
        watermark would be applied to (the first search on 10,000 infos: 0.2 s against 1.0-1.3 s,
        bench/private_fulltext.py): files in a temporary directory outlive a process killed by
        SIGKILL, and would answer queries for texts a later ``forget`` erased, out of its reach."""
        with self._open_lock:
            # The shared index is dropped, not closed: another thread may be searching it
            # (a read-only index holds no writer and has nothing to commit).
            self._index = None
            self._private = True
        with self._state_lock:
            self._expected_ops = None  # the private index is fed by a scan of the state

    def reset(self, *, remove_files: bool = True) -> None:
        """Drop the index (the shared one's files too, unless ``remove_files`` is False, under
        the index's lock) so the next use rebuilds it (or reopens it and applies what its
        watermark lacks). A tree that may not write the shared index only drops its private one."""
        with self._open_lock:
            index, self._index = self._index, None
        if index is not None:
            with contextlib.suppress(BaseException):  # a broken index may fail to close, too
                index.close()
        if remove_files and self._writes:
            with self._lock.held():
                remove_cache_dir(self._cache / "fulltext")
        with self._state_lock:
            self._expected_ops = None  # a full scan feeds the new index

    def rebuild(self) -> None:
        """Delete the index and build it again from the state, now."""
        if not self._writes:
            with self._private_lock:
                self.reset()
                self._apply_or_rebuild(latest=True)
            return
        with self._lock.held():
            self.reset()
            self._apply_or_rebuild(latest=True)

    # --- reads ---------------------------------------------------------------------------

    def text_hits(self, query: str, kind: str, k: int, within: Collection[str] | None = None) -> Hits:
        """Full-text hits of ``kind`` (among ``within``, if given), every write included, scored by their
        texts alone (``kwtree.caches.lexical``); a damaged index is rebuilt (privately, if need be)."""
        self.sync()
        if not (hits := self._search(query, kind, k, within)):
            return hits
        return lexical.bm25(query, lambda words: self.document_frequencies(words, kind, within), self._read(
            lambda state: [(eid, search_text(state, kind, eid) or "") for eid, _ in hits]))

    def indexed_text_hits(self, query: str, kind: str, k: int,
                          most_unindexed: int) -> tuple[list[tuple[str, float]], frozenset[str]]:
        """``text_hits`` over what the index holds already, without bringing it up to date
        (which commits the index: tens of milliseconds), and the ids of ``kind`` written since,
        which the hits may miss or hold at an older text: the caller judges those itself. When
        more than ``most_unindexed`` entities were written since, or which ones is unknown
        (after a start, a rebuild, another process's write), the index is brought up to date
        first and no id is returned."""
        if self._writes:
            ops = self._read(lambda state: state.op_count)
            with self._state_lock:
                known = (self._expected_ops == ops and self._fulltext.watermark is not None
                         and len(self._pending) <= most_unindexed)
                unindexed = frozenset(eid for (what, eid) in self._pending if what == kind) if known else None
            if unindexed is not None:
                return self._search(query, kind, k), unindexed
        return self.text_hits(query, kind, k), frozenset()

    def _search(self, query: str, kind: str, k: int, within: Collection[str] | None = None) -> Hits:
        try:
            hits = self._fulltext.search(query, kind, k, within)
        except BaseException as exc:
            if not is_index_failure(exc):
                raise
            if not self._writes:
                log.warning("the full-text index in %s cannot be searched (%s: %s); rebuilding a private one",
                            self.where, type(exc).__name__, exc)
                with self._private_lock:
                    if not self._private:
                        self._go_private()
            self.rebuild()
            hits = self._fulltext.search(query, kind, k, within)
        return sorted(hits, key=lambda hit: (-hit[1], hit[0]))

    def document_frequencies(self, words: list[str], kind: str,
                             within: Collection[str] | None = None) -> tuple[int, list[int]]:
        """How many documents of ``kind`` the index holds (the live ones of ``within``, if
        given), and how many of them hold each of ``words`` (``normalize.terms``' terms)."""
        self.sync()
        index = self._fulltext
        return index.count(kind) if within is None else len(within), [index.matching(kind, [word], within=within)
                                                                       for word in words]

    # --- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Commit what the index still lacks of this process's writes (for the next open, and
        for read-only trees: they search it while it matches their state), then close it;
        a private index is dropped."""
        try:
            self.sync(only_if_written=True)
        except Exception:  # a cache that cannot be brought up to date is rebuilt next time
            log.exception("could not bring the full-text index up to date on close")
        with self._open_lock:
            index, self._index = self._index, None
        if index is not None:
            with contextlib.suppress(Exception):
                index.close()
        self._lock.close()
