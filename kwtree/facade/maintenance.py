"""KeywordTree's maintenance methods: ``compact``, ``snapshot`` and ``restore``, ``verify``
and ``repair``, ``export`` and ``import_json``.

They are a base class of KeywordTree, kept here so each module stays readable in one sitting;
they use the tree's locks, its event log and its state the way its write path does. The
file-level work lives in ``kwtree.ops.compaction`` and ``kwtree.stores.logswap``,
``kwtree.stores.snapshot``, ``kwtree.ops.verify`` and ``kwtree.ops.export``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import shutil
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from kwtree.caches.coordinator import Indexes
from kwtree.caches.embed import Embedder
from kwtree.engine.events import with_checksum
from kwtree.engine.follower import follow
from kwtree.engine.replay import RawOperation, parse_operations, replay_chunk
from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, StorageError
from kwtree.ops import export as exporting
from kwtree.ops.compaction import (
    CompactionReport,
    compacted_operations,
    differences,
    history_operations,
)
from kwtree.ops.repair import repair_under_lock
from kwtree.ops.verify import Report, verify_directory
from kwtree.stores import logswap
from kwtree.stores import snapshot as snapshots
from kwtree.stores.eventlog import encode_seal
from kwtree.stores.lock import LOCK_NAME, WriterLock, release
from kwtree.validate import clean_choice, clean_flag, clean_path

__all__ = ["MaintenanceMethods"]

log = logging.getLogger("kwtree")
Tree = TypeVar("Tree", bound="MaintenanceMethods")


class MaintenanceMethods:
    """The operational side of KeywordTree (see docs/operations.md)."""

    def compact(self, keep_history: bool = False) -> CompactionReport:
        """Rewrite the log so that each live entity appears once, at its current version;
        deleted entities and superseded versions go. ``keep_history=True`` keeps every
        operation once, in op-id order, and drops only torn and duplicate rows.

        Every public read answers as before (``last_op_id`` included); without history,
        ``history()``, ``as_of`` and ``undo`` reach only what the new log holds. The new log
        is checked to replay to the same state before it replaces the old one in one atomic
        step: a crash leaves one or the other. Other processes that hold the tree open replay
        the new log at their next refresh or write. Returns sizes before and after.
        """
        clean_flag(keep_history, "keep_history")
        self._check_writable()
        assert self._lock is not None and self._log is not None
        started = time.perf_counter()
        with self._mutex:
            self._check_writable()
            with self._lock:
                logswap.recover(self._dir)
                self._state = follow(self._log, self._state, None, self._state_lock, at_open=False)
                if self._log.unconsumed_bytes:
                    self._log.quarantine_tail()
                self._indexes.sync_fulltext_locked()  # deletions reach it before their tombstones go
                raws, sizes = self._read_whole_log(parse=keep_history)
                operations = history_operations(raws) if keep_history else compacted_operations(self._state)
                rebuilt, after = self._write_new_log(operations)
                logswap.swap_in(self._dir)
                self._log.reattach()
                self._log.seek_end()
                self._state = rebuilt
        return CompactionReport(keep_history, sizes[0], after[0], sizes[1], after[1], sizes[2], after[2],
                                time.perf_counter() - started)

    def _read_whole_log(self, *, parse: bool) -> tuple[list[RawOperation], tuple[int, int, int]]:
        """The log's (bytes, rows, operations), and its whole operations when ``parse``."""
        assert self._log is not None
        raws: list[RawOperation] = []
        total = rows = 0
        for index in range(len(self._log.segments)):
            path, data = self._log.read_segment(index)
            total += len(data)
            rows += data.count(b"\n")
            if parse:
                raws.extend(parse_operations(data, path, 1)[0])
        return raws, (total, rows, len(raws) if parse else self._state.op_count)

    def _write_new_log(self, operations: Iterator[tuple[str, bytes]]) -> tuple[State, tuple[int, int, int]]:
        """Write ``operations`` as the segments of ``log.compacting/`` and check that they
        replay to the current state; returns that replayed state and the new log's (bytes,
        rows, operations)."""
        assert self._log is not None
        target = logswap.new_log_dir(self._dir)
        rebuilt = State()
        parts: list[bytes] = []
        first: str | None = None
        size = total = rows = count = 0
        checksums = self._log.checksums
        written: tuple[str, bytes] | None = None  # the last segment, sealed once its successor is known

        def write(next_segment: str | None) -> None:
            if written is not None:
                name, data = written
                seal = encode_seal(data, next_segment) if checksums and next_segment is not None else b""
                logswap.write_segment(target, name, data + seal)

        def flush() -> None:
            nonlocal written
            assert first is not None
            data = b"".join(parts)
            segment = str(target / f"{first}.jsonl")
            if replay_chunk(rebuilt, data, segment, 1, checksums=checksums).consumed_bytes != len(data):
                raise StorageError(f"compaction of {self._dir} aborted, the log is unchanged: a new segment "
                                   f"did not replay whole; please report this")
            write(first)
            written = (first, data)

        try:
            for op_id, data in operations:
                if first is None:
                    first = op_id
                if checksums:
                    data = with_checksum(data)
                parts.append(data)
                size += len(data)
                total += len(data)
                rows += data.count(b"\n")
                count += 1
                if size >= self._log.segment_bytes:
                    flush()
                    parts, first, size = [], None, 0
            if parts:
                flush()
            write(None)
            logswap.seal(target)
            found = differences(self._state, rebuilt)
            if found:
                raise StorageError(f"compaction of {self._dir} aborted, the log is unchanged: the new log "
                                   f"would not replay to the same state ({'; '.join(found)}); please report this")
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return rebuilt, (total, rows, count)

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
        StorageError, LockTimeoutError."""
        self._check_open()
        target = snapshots.clean_target(self._dir, path)
        assert self._log is not None
        with self._mutex:
            self._check_open()
            with self._lock or contextlib.nullcontext():
                if self._writable:
                    self._state = follow(self._log, self._state, None, self._state_lock, at_open=False)
                    self._observe_clock()
                cut = snapshots.capture(self._dir, self._log.segments, self._log.position, self._bound,
                                        self._log.rewritten)
            try:  # after the writer lock: only this process changes the state, and not without the mutex
                facts = snapshots.facts_of(self._state, self._bound)
            except BaseException:
                cut.close()
                raise
        with cut:
            return str(cut.write(target, facts, self.file_mode))

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
        self._check_writable()
        snapshots.target_replaces(self._dir)  # refuses a directory holding the working directory
        staging, header = snapshots.stage(snapshot, self._dir)
        assert self._lock is not None and self._indexes is not None
        old_indexes = self._indexes
        settings = (self._lock.timeout, *self._index_options)
        old_indexes.close()  # before the mutex: it commits the full-text index under it
        failure: BaseException | None = None
        with self._mutex:
            try:
                self._check_writable()
                with self._lock:
                    aside = snapshots.swap_in(staging, self._dir)
            except BaseException:
                snapshots.discard(staging)
                if not self._closed:  # the directory is as it was; only its caches were closed
                    self._indexes = Indexes(self._dir, settings[1], self._read, write_locks=self._write_locks,
                                            worker=settings[2], embed_async=settings[3],
                                            file_mode=self.file_mode)
                raise
            self._closed = True
            self._finalizer.detach()
            release(self._log, self._lock)
            try:
                self._reopen(settings)
                snapshots.check_state(self._state, header, snapshot)
            except BaseException as exc:
                self._closed = True
                failure = exc
        if failure is not None:
            try:  # outside the mutex: closing the caches takes it
                self._put_back(aside, settings, reopened=self._indexes is not old_indexes)
            except BaseException:
                log.exception("could not reopen %s after a failed restore; it stays closed", self._dir)
            raise failure
        snapshots.discard(aside)
        self._agent.forget(self._agent.mru.snapshot())
        return snapshots.summary(header, self._dir, snapshot, replaced=True)

    def _reopen(self, settings: tuple[float, Embedder, bool, bool]) -> None:
        """Open the directory again (after a restore swapped it) with this tree's options."""
        lock_timeout, embedder, worker, embed_async = settings
        self._file_mode = None  # the restored manifest's
        try:
            self._open(None, lock_timeout)
            self._indexes = Indexes(self._dir, embedder, self._read, write_locks=self._write_locks,
                                    worker=worker, embed_async=embed_async, file_mode=self.file_mode)
        except BaseException:
            release(self._log, self._lock)
            raise
        self._closed = False
        self._finalizer = weakref.finalize(self, release, self._log, self._lock)

    def _put_back(self, aside: Path, settings: tuple[float, Embedder, bool, bool], *, reopened: bool) -> None:
        """After a failed restore: close the restored tree, return the old directory, reopen it."""
        if reopened:
            self._indexes.close()
            self._finalizer.detach()
            release(self._log, self._lock)
        lock = WriterLock(self._dir / LOCK_NAME, settings[0])
        try:
            with lock:
                snapshots.swap_back(aside, self._dir)
        finally:
            lock.close()
        with self._mutex:
            self._reopen(settings)


    def verify(self) -> Report:
        """Check this tree's directory as ``kwtree.ops.verify.verify_directory`` does — every log
        line, the tree replay gives, the manifest, the caches' watermarks — and return the
        findings. Reads the files (so it sees what other processes wrote too), never writes and
        never takes the writer lock. ``report.ok`` is False when there is an error."""
        self._check_open()
        return verify_directory(self._dir)

    def repair(self) -> Report:
        """Repair this tree's directory as ``kwtree.ops.repair.repair_directory`` does, under this
        tree's write locks: damaged lines (with the rest of their operations) and a torn tail
        go to ``quarantine/``, nothing is deleted; the full-text index is rebuilt; the vector
        store is read again from its files and every text without a vector is queued for the
        embedding worker (``wait_indexed`` waits for it). Then the tree replays the repaired log. Returns what was done followed by what a verify then finds.
        Raises ReadOnlyError on a read-only tree or ``as_of`` view, LockTimeoutError, FormatError
        (a newer format), StorageError."""
        self._check_writable()
        assert self._lock is not None and self._log is not None
        with self._mutex:
            self._check_writable()
            with self._lock:
                try:
                    report = repair_under_lock(self._dir)
                finally:  # the log may have been replaced even if a later step failed
                    self._state = follow(self._log, self._state, None, self._state_lock, at_open=False)
                    self._observe_clock()
                # The repair deleted the full-text index's files under us: drop the open index
                # too (Indexes' own rebuild step), so the next search rebuilds it in full.
                self._indexes._reset_fulltext()
                # Vectors are content-addressed, so they are kept; but files damaged under
                # this tree are read again, and every text left without a vector is queued.
                self._indexes.reload_vectors()
        self._agent.forget(self._agent.mru.snapshot())
        return report

    def export(self, path: str | os.PathLike[str], format: str = "json") -> dict[str, Any]:
        """Write the live tree to the file ``path``. ``format="json"`` keeps every keyword,
        info, link and relation, and their order (``KeywordTree.import_json`` rebuilds the tree
        from it); ``"markdown"`` is a readable outline. The file is written to a temporary
        name and replaces ``path`` once complete and synced. Returns the path, the format,
        the counts written and the ``last_op_id`` exported. Raises InvalidInputError (bad
        path or format), NotFoundError (no such directory) or StorageError (the disk refused
        the file; ``path`` is unchanged)."""
        self._check_open()
        clean_choice(format, "format", exporting.EXPORT_FORMATS)
        with self._state_lock:  # O(entities) to list them; they are written after the lock is released
            data = exporting.collect(self._state)
        return exporting.write_export(data, path, format, str(self._dir), self.file_mode)

    @classmethod
    def import_json(cls: type[Tree], path: str | os.PathLike[str], data_dir: str | os.PathLike[str],
                    **options: Any) -> Tree:
        """Create a tree in ``data_dir`` (new or empty) equivalent to the JSON export at
        ``path`` — the same ids, fields, times and order — written as ONE operation (kind
        ``"import"``, one sync) after the tree's ``init``; ``options`` are KeywordTree's
        (e.g. ``durability="none"`` for a bulk load). Returns the open tree. The whole file is
        checked first: InvalidInputError names the JSON path of the first problem, a missing
        file raises NotFoundError, a ``data_dir`` that is not new or empty InvalidInputError;
        then nothing is written. If the write fails, what the import created is removed.
        An import that was killed leaves a tree holding only its ``init`` (or less): importing
        into it again resumes (any other tree is refused as not empty)."""
        known = inspect.signature(cls).parameters
        unknown = sorted(str(name) for name in options if name == "data_dir" or name not in known)
        if unknown:
            raise InvalidInputError(f"import_json got unknown option(s) {', '.join(unknown)}; the options are "
                                    f"KeywordTree's: {', '.join(name for name in known if name != 'data_dir')}")
        clean_path(data_dir, "data_dir")
        plan = exporting.read_export(path)
        was_new = exporting.prepare_import_target(data_dir)
        tree = cls(data_dir, **options)
        if tree._state.op_count > 1:  # a tree that was there before, not one an import left
            tree.close()
            raise InvalidInputError(f"data_dir {data_dir} holds a tree that is not empty; "
                                    f"import into a new or empty directory")
        try:
            tree._commit("import", lambda state, stamp: exporting.import_changes(plan, state, stamp), plan.audit)
        except BaseException:
            ours = tree._state.op_count <= 1  # nothing but our init: no other writer got there first
            tree.close()
            if ours:
                exporting.discard_import_target(data_dir, was_new)
            raise
        return tree
