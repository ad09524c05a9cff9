"""KeywordTree's maintenance methods: ``compact``, ``snapshot`` and ``restore``, ``verify``
and ``repair``, ``export`` and ``load_outline`` (``import_json``, which makes a new tree, is
KeywordTree's own).

They are a base class of KeywordTree, kept here so each module stays readable in one sitting;
they hold the engine's locks through its public contexts (``exclusive``, ``locked``,
``writing``) and replace its log through ``Engine.replace_log``. The file-level work lives in
``kwtree.ops`` (compaction, restore, verify, repair, export) and ``kwtree.stores.snapshot``,
imported on first use so that importing the tree does not load them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kwtree.engine.replay import operations_in_view
from kwtree.facade.forget_calls import ForgetMethods
from kwtree.models import ROOT_ID
from kwtree.progress import Ticker, counted
from kwtree.validate import clean_choice, clean_flag

if TYPE_CHECKING:
    from kwtree.ops.compaction import CompactionReport
    from kwtree.ops.verify import Report
    from kwtree.writes.outline import LoadedOutline

__all__ = ["MaintenanceMethods"]


class MaintenanceMethods(ForgetMethods):
    """The operational side of KeywordTree (see docs/operations.md). (On ForgetMethods:
    ``repair`` finishes an erasure a forget left unfinished.)"""

    def compact(self, keep_history: bool = False) -> CompactionReport:
        """Rewrite the log so that each live entity appears once, at its current version;
        deleted entities and superseded versions go. ``keep_history=True`` keeps every
        operation once, in op-id order, and drops only torn and duplicate rows.

        Every public read answers as before (``last_op_id`` included); without history,
        ``history()``, ``as_of`` and ``undo`` reach only what the new log holds. The new log
        is checked to replay to the same state before it replaces the old one in one atomic
        step: a crash leaves one or the other. Other processes that hold the tree open replay
        the new log at their next refresh or write. Returns sizes before and after.
        Raises StorageError — DiskFullError when the disk is full — if the new log cannot be
        written: it is removed, the log and the state are as before, and the same call works
        once space is freed.
        """
        from kwtree.ops import compaction

        clean_flag(keep_history, "keep_history")
        engine = self._engine
        started = time.perf_counter()
        with engine.writing() as state:
            self._caches.fulltext.sync(latest=True)  # deletions reach it before their tombstones go
            raws, size, rows = compaction.read_log(engine.read_segments(), parse=keep_history)
            count = len(raws) if keep_history else state.op_count
            # The new log is chained anew: it says which log it replaced (docs/log-format.md).
            note = {"reason": "compact", "keep_history": keep_history, "replaced_head": engine.head,
                    "replaced_operations": count}
            with Ticker(self._progress, "rewriting the log", count if keep_history else None,
                        "operations" if keep_history else "entities") as tick:
                operations = (counted(compaction.history_operations(raws), tick) if keep_history
                              else compaction.compacted_operations(state, tick))
                after = engine.replace_log(operations, compaction.same_state(
                    state, f"compaction of {engine.directory}"), note)
        return compaction.CompactionReport(keep_history, size, after.size, rows, after.rows, count, after.operations,
                                           time.perf_counter() - started)

    def reindex(self, vectors: bool = False) -> dict[str, Any]:
        """Rebuild the caches from the log now: the full-text index is deleted and every live
        text indexed again, and with ``vectors`` this tree's embeddings are deleted too and
        every text embedded again, waiting until that is done (by this tree's worker thread,
        or here without one). For a cache suspected wrong, or after a change of the text
        analysis; the log is not touched. Other processes go on searching meanwhile (they
        fall back as they do when a cache is lost). Returns the texts ``indexed``, the texts
        ``embedded`` (0 without ``vectors``) and the ``seconds`` it took. Raises ReadOnlyError
        (read-only or ``as_of``), LockTimeoutError, StorageError (DiskFullError)."""
        clean_flag(vectors, "vectors")
        self._check_writable()
        started = time.perf_counter()
        indexes = self._caches
        indexed = self._read(lambda state: sum(not i.deleted for i in state.infos.values()) + sum(
            not k.deleted and k.id != ROOT_ID for k in state.keywords.values()))
        indexes.fulltext.rebuild()  # under the index's own lock: readers elsewhere wait, writers do not
        embedded = 0
        if vectors:
            embedded = indexes.reload_vectors(rebuild=True)
            indexes.worker.wait_indexed()
        return {"indexed": indexed, "embedded": embedded, "seconds": time.perf_counter() - started}

    def snapshot(self, path: str | os.PathLike[str] | None = None) -> str:
        """Write the tree as this instance reads it to ONE archive file; returns its path.

        The archive (an uncompressed tar, see docs/operations.md) holds the manifest and the
        log up to the last whole operation this tree reflects (never a torn operation or
        padding), with the watermark, counts and a SHA-256 per file; caches are left out. A
        writable tree first catches up with other writers under the writer lock, so the cut
        is one consistent point of whole operations; a read-only tree archives what it has
        read, an ``as_of`` view only the operations it shows. Writers wait only while the cut
        is taken, not during the copy. ``path`` (default ``<dirname>-<last op id>.kwsnap``
        beside the directory) must not exist and must lie outside the directory. Durable on
        return. Raises InvalidInputError, NotFoundError (``path``'s directory is missing),
        StorageError (DiskFullError when the disk is full; no partial archive is left),
        LockTimeoutError."""
        from kwtree.ops.restore import facts_of
        from kwtree.stores import snapshot as snapshots

        self._check_open()
        engine = self._engine
        target = snapshots.clean_target(engine.directory, path)
        with engine.exclusive():
            bound = engine.bound
            in_view = None if bound is None else functools.partial(operations_in_view, bound=bound)
            cut = engine.cut_log(lambda segments, position, rewritten: snapshots.capture(
                engine.directory, segments, position, in_view, rewritten))
            try:  # after the writer lock: only this process changes the state, and not without the mutex
                facts = facts_of(engine.state, engine.bound)
            except BaseException:
                cut.close()
                raise
        with cut:
            return str(cut.write(target, facts, engine.file_mode))

    def restore(self, snapshot: str | os.PathLike[str]) -> dict[str, Any]:
        """Replace this tree's directory with a snapshot's contents and go on with it.

        The archive is checked in full (every member, its size and SHA-256) while it is
        extracted into a new directory beside this one; nothing is touched before that
        passed. Then, under the writer lock, the directory is moved aside, the restored one
        takes its place (with the lock file and files that are not kwtree's, e.g. ``.git``),
        and this tree reopens on it; the old directory is deleted only once the reopened
        tree has the snapshot's watermark and counts. If anything fails before, the old
        directory is put back and the tree reopens on it. Writes after the snapshot are
        discarded; caches are rebuilt. Other instances on the directory replay the restored
        log at their next refresh or write but keep their old caches until they reopen; do
        not use this instance from other threads meanwhile. Returns what ``kwtree.restore``
        returns. Raises ReadOnlyError (read-only or ``as_of``), NotFoundError, FormatError
        (not a snapshot; damaged, altered, unsafe or truncated), LockTimeoutError,
        StorageError."""
        from kwtree.ops.restore import Occupant, restore_archive

        self._check_writable()
        engine = self._engine
        done = restore_archive(snapshot, engine.directory, lock_timeout=engine.lock_timeout,
                               occupant=Occupant(self._vacate, engine.reopen), progress=self._progress)
        self._agent.forget(self._agent.mru.snapshot())
        return done

    @contextlib.contextmanager
    def _vacate(self) -> Iterator[None]:
        """For a restore of this tree's directory: the caches closed and this process's
        writes held off meanwhile; afterwards, if the engine is open (on the restored
        directory, or on the old one put back), caches opened on what it reads."""
        self._caches.close()  # before the mutex: it commits the full-text index under it
        try:
            with self._engine.exclusive():
                self._engine.check_writable()
                yield
        finally:
            if not self._engine.closed:
                self._caches = self._open_caches()

    def verify(self, *, head: str | None = None) -> Report:
        """Check this tree's directory as ``kwtree.ops.verify.verify_directory`` does — every log
        line, the hash chain, the tree replay gives, the manifest, the caches' watermarks — and
        return the findings. Reads the files (so it sees what other processes wrote too), never
        writes and never takes the writer lock. ``report.ok`` is False when there is an error;
        ``report.head`` is the digest of the log's newest operation (format 3): kept elsewhere
        and passed back as ``head=`` later, it proves that nothing up to it changed since
        (InvalidInputError when it is not a digest). A tree whose log is in PostgreSQL has that
        log read through the database (StorageError when it cannot be reached) and checked the
        same way, with its caches."""
        from kwtree.ops.verify import verify_directory

        self._check_open()
        return verify_directory(self._engine.directory, head=head)

    def repair(self) -> Report:
        """Repair this tree's directory as ``kwtree.ops.repair.repair_directory`` does, under this
        tree's write locks: damaged lines (with the rest of their operations) and a torn tail
        go to ``quarantine/``, nothing is deleted; the full-text index is rebuilt; the vector
        store is read again from its files and every text without a vector is queued for the
        embedding worker (``wait_indexed`` waits for it). Then the tree replays the repaired log.
        Last, it finishes the erasure of a forget that a full disk or a crash interrupted
        (``forget``; verify's ``forget-unfinished``) and says so in the report.
        Returns what was done followed by what a verify then finds. A tree whose log is in
        PostgreSQL has only its caches repaired (the database's log is not rewritten).
        Raises ReadOnlyError on a read-only tree or ``as_of`` view, LockTimeoutError, FormatError
        (a newer format), StorageError (DiskFullError when the disk is full: the log is as it
        was, or, when finishing an erasure failed, repaired and the message says what is left)."""
        from kwtree.ops.repair import repair_under_lock, repaired_report
        from kwtree.ops.verify import Finding

        engine = self._engine
        # The writer locks (only the directory's, with the log in PostgreSQL), then the full-text
        # index's: the repair deletes the index's files, which another process may be writing.
        with self._caches_locked(), self._caches.fulltext.locked():
            try:
                done = repair_under_lock(engine.directory)
            finally:  # the log may have been replaced even if a later step failed
                engine.catch_up_locked()
            # The repair deleted the full-text index's files under us: drop the open index
            # too (TreeCaches' own rebuild step), so the next search rebuilds it in full.
            self._caches.fulltext.reset()
            # Vectors are content-addressed, so they are kept; but files damaged under
            # this tree are read again, and every text left without a vector is queued.
            self._caches.reload_vectors()
        self._agent.forget(self._agent.mru.snapshot())
        finished = self._finish_forget()  # (it takes the locks itself)
        if finished is not None:
            done.append(Finding("info", "finished-forget", None, None,
                                f"finished the erasure of forget operation {finished}: the log held the text it "
                                "forgot (a full disk or a crash had stopped its rewrite)"))
        return repaired_report(engine.directory, done)

    def export(self, path: str | os.PathLike[str], format: str = "json") -> dict[str, Any]:
        """Write the live tree to the file ``path``. ``format="json"`` keeps every keyword,
        info, link and relation, and their order (``KeywordTree.import_json`` rebuilds the tree
        from it); ``"markdown"`` is a readable outline. The file is written to a temporary
        name and replaces ``path`` once complete and synced. Returns the path, the format,
        the counts written and the ``last_op_id`` exported. Raises InvalidInputError (bad
        path or format), NotFoundError (no such directory) or StorageError (the disk refused
        the file, DiskFullError when it is full; ``path`` is unchanged, no temporary file is
        left)."""
        from kwtree.ops import export as exporting

        self._check_open()
        clean_choice(format, "format", exporting.EXPORT_FORMATS)
        # O(entities) to list them; they are written after the state lock is released.
        data = self._read(exporting.collect)
        return exporting.write_export(data, path, format, str(self._engine.directory), self.file_mode,
                                      self._progress)

    def load_outline(self, outline: dict[str, Any]) -> LoadedOutline:
        """Add an outline's keywords (under the root, or under an earlier keyword of it),
        infos and relations (see ``kwtree.writes.outline``) in ONE operation: an outline wrong
        anywhere writes nothing, and one ``undo`` takes the whole load back. Returns the new
        keyword ids by ``ref``, the counts and the operation's id. InvalidInputError (or
        DuplicateKeywordError) names the item that is wrong."""
        from kwtree.writes import outline as outlines

        sections = outlines.check_outline(outline)
        op = self._commit("load_outline", lambda state, stamp: outlines.load_outline(state, stamp, sections))
        return outlines.loaded(op, sections)
