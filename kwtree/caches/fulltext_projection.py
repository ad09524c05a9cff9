"""The full-text index as a projection of the log: it records the last operation it reflects
(its watermark) and catches up from there, under a lock of its own, never the log's writer lock.

- **Writes** only note what they changed (``note``): no I/O on the write path.
- **A search** first brings the index up to the tree's state: nothing to do when no write is
  pending and the index reflects the state (no lock taken); else, holding the index's lock
  (``cache/lock``, with this process's threads serialised first), the index is read again as
  the last process left it and what it lacks is applied and committed at the state's last op
  id and op count: this process's writes, when nothing else moved the state or the index
  since it last synced; else every entity whose current version is not the one the index
  holds (``kwtree.caches.fulltext_versions``, a record written beside the index with each
  commit), so that operations a git merge put below the watermark, a branch switch brought
  back or a compaction rewrote are found (one pass over the state's entities, at a
  process's first catch-up and when its state moved by other means than its own writes). A
  process holding the log's writer lock (a compaction, a forget, a restore) therefore never
  holds up a search: readers wait at most for another process bringing the index up to date.
- **An index ahead of the tree's state** (another process indexed operations this tree has not
  read yet) holds everything the tree knows: the tree reads the log's newer operations if no
  write of its own process is under way, else searches the index as it is. An index ahead of
  the log itself (a log cut back by a crash without fsync, or replaced by an older one) would
  hide every later write with a lower id: it is rebuilt.
- **A tree that may not write it** (``read_only``, ``as_of``) searches the shared index while
  its watermark and op count are the tree's last op id and op count (a comparison of two
  numbers per read); otherwise it keeps a private index in memory (never
  on disk: a killed process leaves no copy of texts a later ``forget`` erases), fed the same
  way from its own state; operations that forgot entities make it start over.

Lock order: the log's writer lock (when a caller holds it: compaction, forget, repair, restore)
before the index's lock, never the other way round; a reader holding the index's lock never
waits for this process's write mutex (``Engine.try_catch_up``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from kwtree.caches import lexical
from kwtree.caches.fulltext_versions import IndexedVersions, read_versions, write_versions
from kwtree.caches.texts import EntityKey, search_text
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
#: (last op id, op count, texts to feed, the versions the index then holds, whether it may
#: hold documents of entities the state lacks): what ``FullTextProjection._plan`` decides.
_Plan = tuple[str | None, int, dict[EntityKey, str | None], IndexedVersions | None, bool]

log = logging.getLogger("kwtree.cache")
#: How many times a search reads the log's newer operations when another process's index is
#: ahead of this tree, before searching the index as it is.
_AHEAD_TRIES = 3


def _forgets(state: State, texts: list[EntityKey]) -> bool:
    """Whether any of these entities (whose text is gone) was forgotten."""
    return any(entity is not None and is_forgotten(entity)
               for entity in ((state.infos if kind == "info" else state.keywords).get(entity_id)
                              for kind, entity_id in texts))


def _unknown(state: State, kind: str, stored: list[str]) -> list[str]:
    """The ids among ``stored`` of entities of ``kind`` the state does not know."""
    known = state.infos if kind == "info" else state.keywords
    return [entity_id for entity_id in stored if entity_id not in known]


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
        self._synced: tuple[str | None, int | None] | None = None  # ...on top of the index at this commit
        if writes:  # from the open on, nothing is pending on top of an index at the open's state
            self._expected_ops, self._synced = read(lambda state: (state.op_count, (state.last_op_id, state.op_count)))
        #: The versions the index holds (``fulltext_versions``), as last read or written;
        #: a private index's only copy. Touched under the index's lock (or the private lock).
        self._versions: IndexedVersions | None = None
        #: How many times the state was compared with the record of the versions the index
        #: holds (an O(n) pass): for tests and benchmarks that check the hot path skips it.
        self.compared = 0

    # --- the index -----------------------------------------------------------------------

    @property
    def _fulltext(self) -> FullTextIndex:
        index = self._index
        if index is not None:
            return index
        # A writer's open may create the shared index (and delete a broken one first): under the
        # index's lock, as every write of its files, or two processes opening a directory at
        # once delete each other's half-made index. (The index's lock, then the open lock.)
        creating = self._lock.held() if self._writes and not self._private else contextlib.nullcontext()
        with creating, self._open_lock:
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
        only if this process wrote since, or its state moved since it last synced the index
        (a compaction rewrote the log, another process's writes were read: read-only trees
        search the shared index only once it reflects exactly their state); a tree that may
        not write the shared index then does nothing. ``latest``: the caller holds the log's
        writer lock and the state is the log's latest, so an index ahead of it is ahead of the
        log. An index that fails
        (deleted or damaged under us) is rebuilt from the state, once."""
        if not self._writes:
            if not only_if_written:
                self._sync_private()
            return
        for _ in range(_AHEAD_TRIES):
            if only_if_written and not self.pending() and not self._read(self._moved):
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

    def _moved(self, state: State) -> bool:
        with self._state_lock:
            return self._expected_ops is not None and self._expected_ops != state.op_count

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
        """Apply to the index what it lacks of the state, or rebuild it; True if it is ahead
        of the state and ``latest`` is not set (nothing done). What it lacks: the writes this
        process noted, when nothing else moved the state or the index since this process
        last synced it; else every entity whose current version is not the one the index
        holds (``fulltext_versions``: operations a git merge put below the watermark are
        found), and the subtree of every such keyword (its path is in their texts). An index
        that reflects exactly the state (its watermark and op count are the state's) lacks
        nothing. A private index that the operations to apply include a ``forget`` for is
        rebuilt rather than patched: tantivy keeps a deleted document's terms in its segment
        (and in the terms' document frequencies, so in every score) until a merge that cannot
        be asked for, and a reader that caught up with a forget must hold nothing of the
        erased text. (The writer's own index is removed by ``TreeCaches.erase``.)"""
        index = self._fulltext
        if not self._private:
            index.refresh()  # as the last process to commit it left it
        last = self._read(lambda state: state.last_op_id)
        if index.watermark is not None and (last is None or index.watermark > last):
            if not latest:
                return True  # another process indexed operations this tree has not read yet
            log.warning("the full-text index in %s reflects operation %s, past the log's last %s; rebuilding it",
                        self.where, index.watermark, last)
            self.reset()
            index = self._fulltext
        at, ops, texts, versions, foreign = self._read(functools.partial(self._plan, index, self._held_versions(index)))
        if self._private and index.watermark is not None and self._read(functools.partial(
                _forgets, texts=[key for key, text in texts.items() if text is None])):
            log.debug("the operations after %s forgot entities; rebuilding %s", index.watermark, self.where)
            self.reset()
            return self._apply(latest=True)  # from no watermark: a full scan finds nothing forgotten to patch
        if (at, ops) != (index.watermark, index.ops):
            if foreign:
                self._remove_foreign(index)
            if texts:  # (else only the op count moved, as after a compaction: nothing to tell)
                with Ticker(self._progress, "indexing full text", len(texts), "texts") as tick:
                    for (kind, entity_id), text in sorted(texts.items()):  # a fixed order: rebuilds rank alike
                        if text is None:
                            index.delete(kind, entity_id)
                        else:
                            index.upsert(kind, entity_id, text)
                        tick.add()
            index.commit(at, ops)
            self._keep_versions(versions)
        with self._state_lock:
            self._synced = (at, ops)
        return False

    def _held_versions(self, index: FullTextIndex) -> IndexedVersions | None:
        """The record of the versions ``index`` holds as its last commit left it, or None
        (unknown). Read from its file when another process committed since."""
        kept = self._versions
        if index.watermark is None or index.ops is None:
            return None
        if kept is not None and (kept.at, kept.ops) == (index.watermark, index.ops):
            return kept
        if self._private or index.directory is None:
            return None
        self._versions = read_versions(index.directory, index.watermark, index.ops)
        return self._versions

    def _keep_versions(self, versions: IndexedVersions | None) -> None:
        """After a commit: keep the record of what the index now holds, and write it beside
        a shared index (a record that cannot be written leaves the old one, which names
        another commit: unknown, so the next comparison feeds every entity)."""
        self._versions = versions
        index = self._index
        if versions is None or self._private or index is None or index.directory is None:
            return
        try:
            write_versions(index.directory, versions, self._file_mode)
        except OSError as exc:
            log.debug("could not record the versions the full-text index holds: %s", exc)

    def _plan(self, index: FullTextIndex, held: IndexedVersions | None, state: State) -> _Plan:
        """What to feed the index to bring it to ``state`` (see ``_apply``): the state's last
        op id and op count, the text (None: delete) of each entity to feed, the record of
        the versions the index then holds (None: unknown), and whether it may hold documents
        of entities the state lacks. Under the state lock."""
        at, ops = state.last_op_id, state.op_count
        with self._state_lock:
            mine = (self._expected_ops == ops and index.watermark is not None
                    and self._synced == (index.watermark, index.ops))
            pending, self._pending = self._pending, set()
            self._expected_ops = ops
        if (index.watermark, index.ops) == (at, ops):
            return at, ops, {}, held, False  # committed by another process at exactly this state
        if mine:  # only this process's writes since it last synced
            changed = pending
            if held is not None:
                entities, keys, versions = IndexedVersions.of(state, sorted(changed))
                record = held.updated(at, ops, keys, versions)
            else:  # (the record was lost: the index holds the state's versions but these)
                self.compared += 1
                record = IndexedVersions.build(at, ops, *IndexedVersions.of(state)[1:])
            foreign = False
        else:
            self.compared += 1
            entities, keys, versions = IndexedVersions.of(state)
            differ = np.ones(len(keys), dtype=bool) if held is None else held.differing(keys, versions)
            changed = {entities[i] for i in np.flatnonzero(differ)}
            for _, entity_id in [key for key in changed if key[0] == "keyword"]:
                keyword = state.keywords[entity_id]
                if index.watermark is not None and not keyword.deleted and state.children.get(entity_id):
                    changed.update(("keyword", kid) for kid in state.subtree(entity_id))
            # Unknown over a non-empty index: it may hold documents of entities this state
            # lacks (a branch switch dropped them), which only a look at its keys finds.
            foreign = index.watermark is not None and (held is None or held.lacks_any(keys))
            record = IndexedVersions.build(at, ops, keys, versions)
        return at, ops, {key: search_text(state, *key) for key in changed}, record, foreign

    def _remove_foreign(self, index: FullTextIndex) -> None:
        """Delete the documents of entities the state does not know at all."""
        for kind in ("info", "keyword"):
            stored = [key.partition(":")[2] for key in index.all_keys(kind)]
            unknown = self._read(functools.partial(_unknown, kind=kind, stored=stored))
            if unknown:
                log.debug("removing %d documents of %ss this state lacks from %s", len(unknown), kind, self.where)
            for entity_id in unknown:
                index.delete(kind, entity_id)

    def _sync_private(self) -> None:
        """For a tree that may not write the shared index (``read_only``, ``as_of``): search
        the shared index while its watermark and op count are this tree's last op id and op
        count (the writer committed exactly this state: a git merge below an unchanged last
        op id changes the count; an index whose meta.json has no count matches no state);
        else move to a private index in memory and bring that up to the state, from then on at
        every search (after a ``refresh()`` only what it lacks is applied, found as the
        writer finds it). Searching the shared index at another watermark would miss writes (or see
        later ones): deleting the caches would then change what a read-only tree finds."""
        with self._private_lock:
            if not self._private:
                now = self._read(lambda state: (state.last_op_id, state.op_count))
                opened = self._index is not None
                shared = self._fulltext
                if opened and (shared.watermark, shared.ops) != now:
                    shared.refresh()  # the writer may have committed this state since
                if shared.available and (shared.watermark, shared.ops) == now:
                    return
                log.debug("the shared full-text index reflects %s, this tree %s: searching a private index in memory",
                          (shared.watermark, shared.ops) if shared.available else "nothing", now)
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
            self._versions = None
        with self._state_lock:
            self._expected_ops = None  # the private index is fed by a scan of the state

    def reset(self, *, remove_files: bool = True) -> None:
        """Drop the index (the shared one's files too, unless ``remove_files`` is False, under
        the index's lock) so the next use rebuilds it (or reopens it and applies what its
        watermark lacks). A tree that may not write the shared index only drops its private one."""
        with self._open_lock:
            index, self._index = self._index, None
            self._versions = None
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
            index = self._fulltext  # (opened before the state lock: opening may take the index's lock)
            with self._state_lock:
                known = (self._expected_ops == ops and index.watermark is not None
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
