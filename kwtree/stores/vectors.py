"""The vector cache of one embedder model: embeddings keyed by (entity id, content hash), and
an hnswlib index over them for cosine nearest-neighbour search.

Files in the store's directory (the tree uses ``<data_dir>/cache/vectors/<model slug>/``)::

    meta.json     {"format": 2, "model": ..., "dim": ...}
    vectors.f32   float32 rows, ``dim`` per row, appended
    keys.jsonl    one ``["<entity id>", "<content hash>", "<check>"]`` line per row, in the same
                  order; the check is the CRC-32 of the row's vector (kwtree.stores.vector_files)
    hnsw.bin      the persisted hnswlib graph (label = row number), written by save()/close()
    hnsw.json     what hnsw.bin was derived from: its rows and their digest, its size and CRC
                  (kwtree.stores.vector_graph)
    lock          the appenders' file lock

Everything here is a cache: vectors never enter the event log, nothing is fsynced, and a lost
tail is simply embedded again later (``has`` answers False for it). Appends write a batch's
vector bytes before its key lines, so a key line always points at vector bytes that are
already there; a row counts only when both its whole key line and its whole vector exist.
A crash can leave a torn tail (vector bytes without a key line, a half key line); readers
ignore it and the next appender truncates it under the lock. Readers never take the lock:
``refresh()`` reads whatever whole rows other processes appended since the last look.

Every derived file is checked against its source before it is used: a row whose vector fails
the check its key line records is never searched nor put in a graph, and ``mend()`` (the
repair scan, ``kwtree repair``) erases it in place to be embedded again; a saved graph is
used only if hnsw.json matches the rows now (``vector_graph.graph_problem``), else rebuilt
with a warning, and never saved over rows a forget erased since it was built. ``check()``
lists mismatches for ``verify``. A format-1 store (no checks) is read unchecked (a writer
records format 2).

The hnswlib graph is loaded (or built) on the first search of ``exact_below`` rows or more,
then kept current as rows come; smaller stores, and searches ``among`` given ids, are exact.
The rows' keys are held as keys.jsonl's bytes, told from torn or garbled lines as they are
taken, and a row's line is parsed when that row is returned (``kwtree.stores.vector_keys``):
an open and a first search build no per-row objects; ``has``/``known`` (writers) and
``among`` parse every line once.

A store opened with ``writable=False`` (what trees that may not write use: ``read_only``,
``as_of``) never creates, changes or removes a file, the lock file included: a missing
directory or meta.json is an empty store, an unreadable or foreign-format meta.json is
searched as empty with a warning (left for a writer to empty), and a graph it has to build
stays in memory. It still takes the rows other processes append, on ``refresh()``, and once a
writer has (re)made meta.json, the rows behind it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import filelock
import hnswlib
import numpy as np
import orjson

from kwtree.errors import (
    ClosedError,
    InvalidInputError,
    LockTimeoutError,
    ReadOnlyError,
    StorageError,
    disk_full_error,
    storage_error,
)
from kwtree.stores.files import PRIVATE_FILE_MODE, low_on_space, make_dir, open_file, write_all, write_atomically
from kwtree.stores.vector_erase import erase_rows, erased_since, key_lines
from kwtree.stores.vector_files import (
    KEYS_FILE,
    LOCK_FILE,
    META_FILE,
    VECTORS_FILE,
    FileStamp,
    VectorStoreStats,
    checked_batch,
    file_crc,
    file_id_and_size,
    file_size,
    file_stamp,
    read_json,
    row_check,
)
from kwtree.stores.vector_graph import (
    INDEX_FILE,
    INDEX_META_FILE,
    graph_meta,
    graph_problem,
    load_graph,
    new_graph,
    remove_graph,
)
from kwtree.stores.vector_keys import KeyRows
from kwtree.stores.vector_picker import Accept, Picker

__all__ = ["VectorStore", "VectorStoreStats"]

log = logging.getLogger("kwtree.cache")

FORMAT = 2  # 2: key lines carry their vector's check
READABLE_FORMATS = (1, 2)  # format 1 stores (no checks) are read as they are, rows unchecked

# Query-time ef. max(64, 2k) gives recall@10 of only 0.88 on 100k low-rank vectors; 112
# gives 0.951, 128 gives 0.962 (160: 0.977, 256: 0.994) at about 1.8x the latency of 64:
# 11-12x faster than numpy brute force measured in the same run (bench/vectors.py).
DEFAULT_EF = 128
DEFAULT_EXACT_BELOW = 2_000
# When accept() rejects rows, the search widens: 4x the rows fetched and 4x the ef each
# round, so that the deeper ranks it now relies on are found as well as the first ones
# (keeping ef fixed dropped recall@10 to 0.94 with half of the entities rejected; scaling it
# gives 0.97). Once ef would pass rows / WIDEN_LIMIT the graph costs about as much as a
# brute force pass, which is exact: the search finishes with one.
WIDEN_LIMIT = 32
# persist() saves the graph again once the saved one lags by this many rows: a process that
# loads it adds the lagging rows itself (about 0.5 ms a row here), which stays well under
# what building the graph of a store large enough for one costs (seconds).
PERSIST_LAG_ROWS = 500
# Rows added to the graph in one call up to which it is built by one thread (deterministic).
_DETERMINISTIC_BUILD = 20_000

# What is known of a row's vector against its key line's check (``VectorStore._row_state``).
_UNCHECKED, _SOUND, _DAMAGED = 0, 1, 2


class VectorStore:
    """Embeddings of one model in ``directory``; see the module docstring for the files.

    Opening never fails because of the cache's state (a missing or corrupt meta.json with
    data present empties the store, with a warning); it raises InvalidInputError only when
    meta.json names another model or dimension. ``add`` returns once its rows are written
    to the OS (not fsynced) and visible to this process's searches. ``writable=False``
    writes nothing, ever (see the module docstring): ``add`` and ``save`` raise
    ReadOnlyError, and damage a writer would repair is searched as an empty store.
    Thread-safe.
    """

    def __init__(
        self,
        directory: Path | str,
        model: str,
        dim: int,
        *,
        exact_below: int = DEFAULT_EXACT_BELOW,
        ef: int = DEFAULT_EF,
        lock_timeout: float = 30.0,
        writable: bool = True,
        file_mode: int = PRIVATE_FILE_MODE,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidInputError("model must be a non-empty string naming the embedder model")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidInputError(f"dim must be a positive integer, not {dim!r}")
        self.directory = Path(directory)
        self.model = model
        self.dim = dim
        self.exact_below = exact_below
        self.ef = ef
        self.writable = writable
        self._row_bytes = 4 * dim
        self._vectors_path = self.directory / VECTORS_FILE
        self._keys_path = self.directory / KEYS_FILE
        self._index_path = self.directory / INDEX_FILE
        self._index_meta_path = self.directory / INDEX_META_FILE
        self._mutex = threading.RLock()
        self._closed = False
        self._rows = KeyRows()  # each row's key and check, as its key line records them
        self._row_state = bytearray()  # per row: _UNCHECKED, _SOUND or _DAMAGED
        self._damage_logged = False
        #: The row files' stamps when every row in them was known sound (see checked_stamp).
        self._vouched: tuple[FileStamp, FileStamp] | None = None
        self._matrix: np.ndarray | None = None  # memmap of the rows, rebuilt when they grow
        self._file_ids: tuple[tuple[int, int] | None, tuple[int, int] | None] = (None, None)
        self._vec_fd = -1
        self._keys_fd = -1
        self._index: hnswlib.Index | None = None
        self._loaded_rows = 0
        self._persisted_rows = 0
        # False while a store that may not write finds no valid meta.json: it holds no rows
        # then, and looks again at each refresh (a writer may be creating or emptying it).
        self._meta_ok = True
        self._file_mode = file_mode  # of every file (and, as a directory mode, directory) it creates
        # (Only acquiring creates the lock file; a read-only store never does.)
        self._lock = filelock.FileLock(str(self.directory / LOCK_FILE), timeout=lock_timeout, mode=file_mode)
        try:
            if writable:
                make_dir(self.directory, file_mode, parents=True, exist_ok=True)
            self._open_meta()
            self._read_new_rows()
        except OSError as exc:
            raise storage_error(f"could not open the vector cache {self.directory}", exc, self.directory) from exc

    # --- opening and reading --------------------------------------------------------------

    def _check_meta(self, meta: dict[str, Any] | None) -> bool:
        """True if ``meta`` is a valid meta of a readable format, this model and dim; raises on a mismatch."""
        if meta is None or meta.get("format") not in READABLE_FORMATS:
            return False
        dim, model = meta.get("dim"), meta.get("model")
        if not isinstance(dim, int) or not isinstance(model, str):
            return False
        if dim != self.dim or model != self.model:
            raise InvalidInputError(
                f"the vector store {self.directory} holds {dim}-d vectors of model {model!r}; "
                f"it cannot take {self.dim}-d vectors of model {self.model!r}: use one directory "
                f"per model, or delete this one to re-embed everything"
            )
        return True

    def _open_meta(self) -> None:
        meta_path = self.directory / META_FILE
        found = read_json(meta_path)
        if self._check_meta(found) and (not self.writable or (found is not None and found["format"] == FORMAT)):
            return
        if not self.writable:
            # Emptying the store is the writer's job: until one does, search nothing (its rows
            # may belong to another model or format) and write nothing.
            self._meta_ok = False
            if any(file_size(p) for p in self._data_files()):
                state = "missing or unreadable" if found is None else f"of format {found.get('format')!r}"
                log.warning("vector cache %s: meta.json is %s; searching the store as empty (a tree "
                            "that may write it empties it and embeds everything again)", self.directory, state)
            return
        with self._locked():
            found = read_json(meta_path)
            if self._check_meta(found):
                if found is not None and found["format"] != FORMAT:
                    # Format 1: its rows stay, unchecked; the lines appended from now on carry
                    # checks, which a format-1 reader cannot read: it empties the store instead.
                    write_atomically(meta_path, self._meta_body(), self._file_mode)
                return  # (or another process created it meanwhile)
            data_files = self._data_files()
            if any(file_size(p) for p in data_files):
                state = "missing or unreadable" if found is None else f"of format {found.get('format')!r}"
                log.warning("vector cache %s: meta.json is %s; emptying the store (its vectors "
                            "will be embedded again)", self.directory, state)
            for path in data_files:
                # Unlink rather than truncate: another process may still map the old file.
                path.unlink(missing_ok=True)
            write_atomically(meta_path, self._meta_body(), self._file_mode)

    def _meta_body(self) -> bytes:
        return orjson.dumps({"format": FORMAT, "model": self.model, "dim": self.dim})

    def _data_files(self) -> tuple[Path, ...]:
        """The files meta.json describes (emptied with it)."""
        return self._vectors_path, self._keys_path, self._index_path, self._index_meta_path

    def _read_new_rows(self) -> int:
        """Take the whole rows appended since the last look; the caller holds the mutex."""
        if not self._meta_ok:
            if not self._check_meta(read_json(self.directory / META_FILE)):
                return 0
            self._meta_ok = True  # a writer made (or remade) the store: its rows are ours now
        keys_id, keys_size = file_id_and_size(self._keys_path)  # keys first: their vectors came before
        vec_id, vec_size = file_id_and_size(self._vectors_path)
        vec_rows = vec_size // self._row_bytes
        rows = len(self._rows)
        replaced = (keys_id, vec_id) != self._file_ids
        if replaced:
            self._close_append_fds()  # they may point at unlinked files
            self._file_ids = (keys_id, vec_id)
        if rows and (replaced or keys_size < self._rows.size or vec_rows < rows):
            log.warning("vector cache %s was replaced or shrank under this process (emptied by "
                        "another one?); reading it again", self.directory)
            self._forget_rows()
            rows = 0
        if keys_size == self._rows.size or vec_rows == rows:
            return 0
        with open(self._keys_path, "rb") as f:
            f.seek(self._rows.size)
            data = f.read(keys_size - self._rows.size)
        # Whole lines only (a torn one is left), and a key line counts only with its whole vector.
        new = self._rows.take(data, vec_rows - rows)
        if new:
            self._row_state.extend(bytes(new))  # _UNCHECKED until a search or a graph needs them
            self._matrix = None
        return new

    def _forget_rows(self) -> None:
        self._rows, self._row_state = KeyRows(), bytearray()
        self._matrix = None
        self._index = None
        self._loaded_rows = self._persisted_rows = 0

    def _rows_matrix(self) -> np.ndarray:
        """The rows as an (n, dim) float32 array mapped from vectors.f32 (no private copy)."""
        rows = len(self._rows)
        if self._matrix is None or len(self._matrix) != rows:
            if rows == 0:
                self._matrix = np.empty((0, self.dim), dtype=np.float32)
            else:
                self._matrix = np.memmap(self._vectors_path, dtype=np.float32, mode="r", shape=(rows, self.dim))
        return self._matrix

    def _row_sound(self, row: int) -> bool:
        """Whether row ``row``'s vector matches the check its key line records (checked once;
        a row of a format-1 line has no check and counts as sound)."""
        state = self._row_state[row]
        if state == _UNCHECKED:
            check = self._rows.check(row)
            sound = check is None or row_check(self._rows_matrix()[row]) == check
            state = self._row_state[row] = _SOUND if sound else _DAMAGED
            if not sound and not self._damage_logged:  # once per store: a garbled file damages many rows
                self._damage_logged = True
                log.warning("vector cache %s: the vector of row %d (entity %s) does not match its key line's check; "
                            "such rows are never searched (a writer's repair scan embeds their texts again)",
                            self.directory, row, self._rows.key(row)[0])
        return state == _SOUND

    def _damaged_rows(self, start: int, end: int) -> list[int]:
        """The rows in [start, end) whose vector fails its check (each row is checked once)."""
        return [row for row in range(start, end) if self._row_state[row] != _SOUND and not self._row_sound(row)]

    # --- writing ----------------------------------------------------------------------------

    def _check_writable(self) -> None:
        self._check_open()
        if not self.writable:
            raise ReadOnlyError(f"the vector store {self.directory} was opened with writable=False")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the appenders' file lock (threads are serialised by the mutex first)."""
        try:
            self._lock.acquire()
        except filelock.Timeout as exc:
            raise LockTimeoutError(
                f"another process has held the vector cache lock {self._lock.lock_file} for over "
                f"{self._lock.timeout:g} s; wait for it to finish or pass a larger lock_timeout"
            ) from exc
        try:
            yield
        finally:
            self._lock.release()

    def _append_fds(self) -> tuple[int, int]:
        if self._vec_fd < 0:
            self._vec_fd = open_file(self._vectors_path, os.O_WRONLY | os.O_APPEND, self._file_mode)
            self._keys_fd = open_file(self._keys_path, os.O_WRONLY | os.O_APPEND, self._file_mode)
            # The files may have just been created: remember which ones these are.
            keys_st, vec_st = os.fstat(self._keys_fd), os.fstat(self._vec_fd)
            self._file_ids = ((keys_st.st_dev, keys_st.st_ino), (vec_st.st_dev, vec_st.st_ino))
        return self._vec_fd, self._keys_fd

    def _close_append_fds(self) -> None:
        for fd in (self._vec_fd, self._keys_fd):
            if fd >= 0:
                os.close(fd)
        self._vec_fd = self._keys_fd = -1

    def add(self, keys: Sequence[tuple[str, str]], vectors: np.ndarray) -> None:
        """Append one row per (entity_id, content_hash) key, skipping keys already stored
        (the first vector stored for a key stays; so does the first of a key repeated in a batch).

        Each row is a unit vector, or all zeros for a text the embedder found nothing in (the
        embedders' promise for blank texts): such a blank row is stored, so ``has`` is True
        and the text is not embedded again, but no search ever returns it.

        Raises InvalidInputError for a wrong shape, dtype, key or norm (nothing written),
        ReadOnlyError for a store opened with ``writable=False``, LockTimeoutError when
        another appender holds the lock past ``lock_timeout``, and StorageError when the
        disk refuses the write (the torn tail is trimmed later).
        """
        checked = checked_batch(keys, vectors, self.dim, self.model)
        with self._mutex:
            self._check_writable()
            with self._locked():
                self._read_new_rows()
                chosen: list[int] = []
                in_batch: set[tuple[str, str]] = set()
                for i, key in enumerate(checked):
                    if not self._rows.has(key) and key not in in_batch:
                        in_batch.add(key)
                        chosen.append(i)
                if not chosen:
                    return
                new_keys = [checked[i] for i in chosen]
                block = np.ascontiguousarray(vectors[chosen]).tobytes()
                view, size = memoryview(block), self._row_bytes
                checks = [row_check(view[n * size:(n + 1) * size]) for n in range(len(new_keys))]
                lines = b"".join(orjson.dumps([*key, check]) + b"\n"
                                 for key, check in zip(new_keys, checks, strict=True))
                try:
                    vouched = self._stamps() == self._vouched  # (nothing but this store wrote since)
                    self._trim_torn_tail()
                    vec_fd, keys_fd = self._append_fds()
                    # Vectors before keys: a whole key line always has its vector behind it.
                    write_all(vec_fd, block)
                    write_all(keys_fd, lines)
                    self._vouched = self._stamps() if vouched else None
                except OSError as exc:
                    # Cut what this batch wrote (shrinking needs no space), so that the store
                    # holds whole rows only and takes the batch again once space returns.
                    with contextlib.suppress(OSError):
                        self._trim_torn_tail()
                    raise storage_error(f"could not append to the vector cache {self.directory}",
                                        exc, self.directory) from exc
                self._rows.take(lines, len(new_keys))
                self._row_state.extend(bytes([_SOUND]) * len(new_keys))  # checked as they were made
                self._matrix = None
            self._index_tail()

    def _trim_torn_tail(self) -> None:
        """Cut bytes beyond the last whole row; the caller holds the lock and has read every row."""
        for path, end in ((self._keys_path, self._rows.size), (self._vectors_path, len(self._rows) * self._row_bytes)):
            size = file_size(path)
            if size > end:
                log.warning("vector cache %s: dropping a torn tail of %d bytes from %s",
                            self.directory, size - end, path.name)
                os.truncate(path, end)

    # --- the hnswlib index ------------------------------------------------------------------

    def _index_tail(self) -> None:
        """Add the rows the in-memory index lacks (no-op when no index is built yet)."""
        index = self._index
        rows = len(self._rows)
        if index is None or index.element_count >= rows:
            return
        start = index.element_count
        if rows > index.max_elements:
            index.resize_index(max(rows, 2 * index.max_elements))
        block = self._rows_matrix()[start:rows]
        damaged = self._damaged_rows(start, rows)
        if damaged:  # in the graph as blanks, which no search returns: never their garbled bytes
            block = np.array(block)
            block[np.array(damaged) - start] = 0.0
        # One thread for a graph of modest size: hnswlib's threads insert in whatever order they
        # run, so two processes building the graph from the same rows would search differently
        # (the cache-invariant test of read-only recall caught it under load). Past that size
        # the build's time matters more, and every thread is used.
        threads = 1 if rows - start <= _DETERMINISTIC_BUILD else -1
        index.add_items(block, np.arange(start, rows), num_threads=threads)

    def _ensure_index(self) -> hnswlib.Index:
        if self._index is not None:
            self._index_tail()
            return self._index
        self._index = self._load_index()
        if self._index is not None:
            self._index_tail()
            return self._index
        rows = len(self._rows)
        index = new_graph(self.dim, rows)
        self._index = index
        self._loaded_rows = 0
        self._index_tail()
        if rows >= self.exact_below and self.writable:
            # A build costs about 100x a save (bench/vectors.py): keep it even if close() is
            # never reached. (A read-only store keeps it in memory only.)
            try:
                self.save()
            except StorageError as exc:
                log.warning("%s", exc)
        return index

    def _index_meta(self, rows: int) -> dict[str, Any]:
        """hnsw.json of a graph of our first ``rows`` rows (hnsw.bin's size and CRC aside)."""
        return graph_meta(self.model, self.dim, rows, self._rows.digest(rows))

    def _plausible_persisted_rows(self) -> int:
        """Rows covered by the persisted index per hnsw.json, if it matches our rows and the
        size of hnsw.bin (the CRC is checked only when loading); else 0."""
        meta = read_json(self._index_meta_path)
        if meta is None or graph_problem(self.directory, meta, len(self._rows), self._index_meta, crc=False):
            return 0
        return int(meta["rows"])

    def _saved_graph_problem(self, meta: dict[str, Any] | None) -> str | None:
        """Why the saved graph, whose hnsw.json reads ``meta``, must not be used; None if it
        may, or if there is none."""
        if meta is None and not self._index_path.exists():
            return None
        return graph_problem(self.directory, meta, len(self._rows), self._index_meta)

    def _load_index(self) -> hnswlib.Index | None:
        """The persisted index if it was built from a prefix of our rows and is sound, else None."""
        meta = read_json(self._index_meta_path)
        rows = meta.get("rows") if meta else None
        if isinstance(rows, int) and rows > len(self._rows):
            self._read_new_rows()  # saved by a process that has seen rows we have not
        index, problem = None, self._saved_graph_problem(meta)
        if meta is None and problem is None:
            return None  # no graph saved
        if problem is None:
            assert meta is not None  # graph_problem names a missing hnsw.json
            index, problem = load_graph(self.directory, self.dim, meta["rows"], len(self._rows))
        if index is None:
            log.warning("vector cache %s: not using the persisted index: %s; rebuilding it from "
                        "the vectors", self.directory, problem)
            return None
        self._loaded_rows = self._persisted_rows = index.element_count
        return index

    # --- public API -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the vector store {self.directory} was closed; open a new VectorStore")

    def __len__(self) -> int:
        return len(self._rows)

    def has(self, entity_id: str, content_hash: str) -> bool:
        """Whether a vector of this entity's text with this content hash is stored. (The first
        call parses every key line: ``vector_keys``.)"""
        with self._mutex:
            return self._rows.has((entity_id, content_hash))

    def known(self) -> set[tuple[str, str]]:
        """A copy of every stored (entity_id, content_hash) key."""
        with self._mutex:
            return self._rows.known()

    def checked_stamp(self) -> tuple[FileStamp, FileStamp] | None:
        """The stamps (``vector_files.file_stamp``) of keys.jsonl and vectors.f32 while they are
        what this store vouched for (every row checked by ``mend``, or taken by ``trust``) plus
        its own appends: a proof, for ``trust``, that every row is sound. None when anything
        else changed them since (another process's rows, damage), or they hold no rows."""
        with self._mutex:
            self._check_open()
            try:
                self._read_new_rows()
                stamps = self._stamps()
            except OSError:
                return None
            sound = stamps == self._vouched and self._holds_exactly(stamps) and not self._damaged_rows(0, len(self))
            return stamps if sound else None

    def trust(self, stamps: tuple[FileStamp, FileStamp]) -> bool:
        """If keys.jsonl and vectors.f32 are still as ``checked_stamp`` found them (in this
        process or another), count their rows as checked (no vector is read): True."""
        with self._mutex:
            self._check_open()
            try:
                self._read_new_rows()
                if self._stamps() != stamps or not self._holds_exactly(stamps):
                    return False
            except OSError:
                return False
            self._row_state = self._row_state.replace(bytes([_UNCHECKED]), bytes([_SOUND]))
            self._vouched = stamps
            return True

    def _stamps(self) -> tuple[FileStamp, FileStamp]:  # (keys first: their vectors came before)
        return file_stamp(self._keys_path), file_stamp(self._vectors_path)

    def _holds_exactly(self, stamps: tuple[FileStamp, FileStamp]) -> bool:
        keys, vectors = stamps
        return (keys is not None and vectors is not None and len(self._rows) > 0
                and keys[2] == self._rows.size and vectors[2] == len(self._rows) * self._row_bytes)

    def refresh(self) -> int:
        """Take rows other processes appended since the last look; returns how many."""
        with self._mutex:
            self._check_open()
            new = self._read_new_rows()
            self._index_tail()
            return new

    def warm_up(self) -> None:
        """Load or build the index now rather than on the first search (no-op for small stores).
        A store that may write saves a graph it had to build."""
        with self._mutex:
            self._check_open()
            if len(self._rows) >= self.exact_below:
                self._ensure_index()

    def stats(self) -> VectorStoreStats:
        with self._mutex:
            index = self._index
            return VectorStoreStats(
                rows=len(self._rows),
                indexed_rows=index.element_count if index is not None else 0,
                loaded_rows=self._loaded_rows if index is not None else 0,
                capacity=index.max_elements if index is not None else 0,
                persisted_rows=self._persisted_rows,
            )

    def check(self) -> list[tuple[str, str]]:
        """What in the store does not match what it was derived from, as (the file, a
        sentence): rows whose vector fails the check its key line records, and a persisted
        graph the store must not use (``vector_graph.graph_problem``; a graph that merely
        lags is fine). Reads every row and hnsw.bin, writes nothing: what ``verify`` asks."""
        with self._mutex:
            self._check_open()
            # hnsw.json before the rows: a graph saved meanwhile covers only rows already there.
            meta = read_json(self._index_meta_path)
            self._read_new_rows()
            rows = len(self._rows)
            problems = []
            damaged = self._damaged_rows(0, rows)
            if damaged:
                first = f"row {damaged[0]}, entity {self._rows.key(damaged[0])[0]}"
                problems.append((VECTORS_FILE, f"{len(damaged)} of its {rows} rows hold vectors that do not match "
                                               f"the checks their key lines record (the first: {first})"))
            problem = self._saved_graph_problem(meta) if meta is not None else None  # (no hnsw.json: no graph)
            if problem is not None:
                problems.append((INDEX_META_FILE, f"its saved graph does not match the rows: {problem}"))
            return problems

    def mend(self, *, graph: bool = True) -> list[tuple[str, str]]:
        """Make the store match what ``check`` compares, for a writer; returns what was done, as
        (the file, a sentence): every row whose vector fails its check is erased in place
        (zeroed; its key line keeps the entity id with a hash that matches no text, so ``has``
        is False for that text and the repair scan embeds it again), and, with ``graph``, a
        persisted graph the store must not use is deleted (the next search builds it from the
        rows). Rows keep their numbers, so other processes keep reading the store. Raises
        ReadOnlyError, LockTimeoutError, StorageError."""
        with self._mutex:
            self._check_writable()
            done: list[tuple[str, str]] = []
            try:
                with self._locked():
                    self._read_new_rows()
                    if self._stamps() != self._vouched:  # changed by others: every row is read again
                        self._row_state = bytearray(len(self._rows))
                    damaged = self._damaged_rows(0, len(self._rows))
                    if damaged:
                        self._erase_rows(damaged)
                        done.append((VECTORS_FILE, f"erased {len(damaged)} rows whose vectors failed their checks"))
                    self._vouched = self._stamps()
                    problem = self._saved_graph_problem(read_json(self._index_meta_path)) if graph else None
                    if problem is not None:
                        remove_graph(self.directory)
                        self._persisted_rows = 0
                        done.append((INDEX_META_FILE, f"deleted the saved graph: {problem}"))
            except OSError as exc:
                raise storage_error(f"could not mend the vector cache {self.directory}", exc, self.directory) from exc
            return done

    def _take_rows(self, rows: Collection[int], lines: Mapping[int, bytes]) -> None:
        """Take rows erased in place (by ``mend``, or a forget elsewhere; the caller holds the
        lock): ``rows`` whose vectors changed, and ``lines``, the key lines of some of them as
        they are now. Their vectors are checked again, the graph built again. A line that no
        erasure wrote (not a key line as long as the old one) means the file was changed some
        other way: every row is read again."""
        if not all(self._rows.replace(row, line) for row, line in lines.items()):
            log.warning("vector cache %s: a key line changed length or form in place; reading the rows again",
                        self.directory)
            self._forget_rows()
            self._read_new_rows()
            return
        for row in rows:
            self._row_state[row] = _UNCHECKED
        self._index = None
        self._loaded_rows = self._persisted_rows = 0

    def _erase_rows(self, rows: list[int]) -> None:
        """Erase ``rows`` in place (see mend); the caller holds the lock and has read every row."""
        lines = key_lines(self._keys_path.read_bytes()[: self._rows.size])
        self._take_rows(rows, erase_rows(self.directory, {row: lines[row] for row in rows}, self._row_bytes))

    def search(self, query: np.ndarray, k: int, accept: Accept | None = None,
               among: Collection[str] | None = None) -> list[tuple[str, float]]:
        """The ``k`` entities (of ``among``, if given: their rows compared exactly) whose rows are
        most similar to ``query``, best first (equal similarities in entity id order).

        Each entity appears once, with the cosine similarity (in [-1, 1]) of its best row that
        ``accept(entity_id, content_hash)`` allows (all rows when ``accept`` is None). Fewer
        than ``k`` hits means no other row is accepted. Sees this process's adds and the rows
        taken by the last ``refresh()``. The first search of ``exact_below`` rows or more loads
        or builds the index (``warm_up()`` does it ahead). Raises InvalidInputError for a
        query that is not a finite non-zero vector of ``dim`` floats or a k below 1."""
        q = np.asarray(query)
        if q.dtype.kind != "f" or q.shape not in ((self.dim,), (1, self.dim)):
            raise InvalidInputError(f"query must be a float vector of shape ({self.dim},), "
                                    f"not {q.dtype} {q.shape}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"k must be a positive integer, not {k!r}")
        q = q.reshape(self.dim).astype(np.float32)
        norm = float(np.linalg.norm(q))
        if not np.isfinite(norm) or norm == 0.0:
            raise InvalidInputError("query must be a finite, non-zero vector")
        q /= norm
        with self._mutex:
            self._check_open()
            # Loading the index may take rows saved by other processes: count rows after it.
            index = self._ensure_index() if len(self._rows) >= self.exact_below and among is None else None
            rows = len(self._rows)
            if rows == 0:
                return []
            picker = Picker(self._rows.key, k, accept, self._rows_matrix, self._row_sound, q)
            if index is None:
                return picker.exact(q, None if among is None else np.array(
                    [row for row, (eid, _) in enumerate(self._rows.every_key()) if eid in among], dtype=np.int64))
            # 2k: room for a few rejected or repeated rows without a second round.
            fetch, ef = 2 * k, max(self.ef, 2 * k)
            while fetch * 4 <= rows:  # beyond a quarter of the rows, exact is as cheap
                index.set_ef(ef)
                try:
                    labels, distances = index.knn_query(q, k=fetch, num_threads=1)
                except RuntimeError:
                    break  # hnswlib found fewer than `fetch` rows: let the exact pass answer
                hits = picker.pick(labels[0], 1.0 - distances[0])
                if len(hits) == k:
                    return hits
                fetch, ef = fetch * 4, ef * 4
                if ef * WIDEN_LIMIT > rows:
                    break
            return picker.exact(q, None)

    def save(self) -> None:
        """Persist the in-memory index as hnsw.bin + hnsw.json, unless hnsw.bin already covers
        as many rows. Raises StorageError if the disk refuses (the old files stay usable),
        ReadOnlyError for a store opened with ``writable=False``."""
        with self._mutex:
            self._check_writable()
            index = self._index
            if index is None or index.element_count <= self._persisted_rows:
                return
            rows = index.element_count
            tmp = self.directory / f".{INDEX_FILE}.{os.getpid()}.{id(self):x}.tmp"
            try:
                index.save_index(str(tmp))
                os.chmod(tmp, self._file_mode)  # hnswlib creates it with the umask's mode
                meta = self._index_meta(rows) | {"size": file_size(tmp), "crc32": file_crc(tmp)}
                with self._locked():
                    if self._plausible_persisted_rows() > rows:
                        tmp.unlink()  # another process saved more
                    elif erased := erased_since(self.directory, self._rows.data):
                        tmp.unlink()  # it holds vectors another process's forget erased
                        self._take_rows(erased, erased)
                        return
                    else:
                        # hnsw.json first: a crash before the new one is written leaves a graph
                        # that nothing describes (never loaded: one rebuild), not a mismatch.
                        self._index_meta_path.unlink(missing_ok=True)
                        os.replace(tmp, self._index_path)
                        write_atomically(self._index_meta_path, orjson.dumps(meta), self._file_mode)
            except (OSError, RuntimeError) as exc:
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
                what = f"could not save the vector index of {self.directory}"
                if isinstance(exc, RuntimeError) and low_on_space(self.directory):
                    raise disk_full_error(what, self.directory, f"hnswlib: {exc}") from exc
                raise storage_error(what, exc, self.directory) from exc
            self._persisted_rows = rows

    def persist(self) -> bool:
        """Make the saved graph (hnsw.bin) cover the store's rows, so that no process opening
        the store has to build it: for a store searched through a graph (at least
        ``exact_below`` rows) whose saved graph is missing or lags by ``PERSIST_LAG_ROWS`` rows
        or more, load or build the graph in memory and save it. Returns whether it saved.
        Raises StorageError (DiskFullError) if the disk refuses (the old files stay usable),
        ReadOnlyError for a store opened with ``writable=False``."""
        with self._mutex:
            self._check_writable()
            rows = len(self._rows)
            if rows < self.exact_below:
                return False
            saved = self._persisted_rows if self._index is not None else self._plausible_persisted_rows()
            if saved and rows - saved < PERSIST_LAG_ROWS:
                return False
            self._ensure_index()  # (saves a graph it had to build)
            if self._persisted_rows < rows:
                self.save()
            if self._index is None:  # the save found rows another process erased: build it again
                self._ensure_index()
            return True

    def close(self) -> None:
        """Save the index (a failure is logged, not raised: it is a cache; a read-only store
        saves nothing) and release files."""
        with self._mutex:
            if self._closed:
                return
            if self.writable:
                try:
                    self.save()
                except StorageError as exc:
                    log.warning("%s", exc)
            self.discard()

    def discard(self) -> None:
        """Release the files without saving anything (for a store whose directory is gone)."""
        with self._mutex:
            self._close_append_fds()
            self._index = None
            self._matrix = None
            self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VectorStore({str(self.directory)!r}, model={self.model!r}, dim={self.dim}, rows={len(self._rows)})"
