"""Erasing rows of a vector store's files in place: for forget (every row of some entities,
``erase_vectors``) and for the store itself (rows whose vector fails its check,
``erase_rows``). An erased row is zeroed, its key line keeps the entity id but its content
hash becomes zeros and its check a blank row's (``vector_files.erased_key_line``), and the
persisted hnswlib graph (which holds a copy of every vector, and whose digest names the old
lines) is removed.

In place, so row numbers never move: a process that has the store open keeps reading whole
rows at the offsets it knows (a zeroed row is a blank, which no search returns; a key whose
hash is zeros matches no text; a row whose bytes changed under it fails the check it read),
and a crash part-way leaves some rows erased and a rerun erases the rest. The graph files go
first (hnsw.json, then hnsw.bin: without its meta a graph is never loaded); the next process
to search builds the graph again from the rows. Callers hold the store's lock file, as
appenders do (``kwtree.stores.vectors``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import filelock

from kwtree.errors import LockTimeoutError, storage_error
from kwtree.stores.vector_files import (
    KEYS_FILE,
    LOCK_FILE,
    META_FILE,
    VECTORS_FILE,
    erased_key_line,
    parse_keys,
    read_json,
)
from kwtree.stores.vector_graph import remove_graph

__all__ = ["erase_rows", "erase_vectors", "erased_since", "key_lines", "vector_directories"]


def vector_directories(cache: Path) -> list[Path]:
    """The store of every embedder model under ``cache`` (``<data_dir>/cache/vectors``)."""
    if not cache.is_dir():
        return []
    return sorted(path for path in cache.iterdir() if (path / META_FILE).is_file())


def key_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(byte offset, line) of each whole line of a keys file's bytes ``data``."""
    found, offset = [], 0
    for line in data.split(b"\n")[:-1]:
        found.append((offset, line))
        offset += len(line) + 1
    return found


def erase_rows(directory: Path, rows: Mapping[int, tuple[int, bytes]], row_bytes: int) -> dict[int, bytes]:
    """Erase ``rows`` (row number -> (offset of its key line, the line)) of the store in
    ``directory`` in place, after removing its graph; returns the key lines written, by row
    (a line whose hash is zeros already keeps it: only its vector is zeroed). The caller
    holds the store's lock. Raises OSError."""
    remove_graph(directory)
    blank = bytes(row_bytes)
    written = {}
    vectors_fd = os.open(directory / VECTORS_FILE, os.O_WRONLY)
    try:
        keys_fd = os.open(directory / KEYS_FILE, os.O_WRONLY)
        try:
            for row, (offset, line) in sorted(rows.items()):
                os.pwrite(vectors_fd, blank, row * row_bytes)  # the vector first: the key still names it meanwhile
                erased = erased_key_line(line, row_bytes)
                if erased is not None:
                    os.pwrite(keys_fd, erased, offset)
                    written[row] = erased
        finally:
            os.close(keys_fd)
    finally:
        os.close(vectors_fd)
    return written


def erase_vectors(directory: Path, entity_ids: set[str], lock_timeout: float = 30.0) -> int:
    """Zero the vector rows of ``entity_ids`` in the store in ``directory`` and erase their
    content hashes, in place; remove the persisted graph when a row was erased. Returns the
    rows erased now (0 when they were erased before). Raises LockTimeoutError, StorageError."""
    meta = read_json(directory / META_FILE)
    dim = meta.get("dim") if meta else None
    if type(dim) is not int or dim < 1 or not entity_ids:
        return 0
    lock = filelock.FileLock(str(directory / LOCK_FILE), timeout=lock_timeout)
    try:
        lock.acquire()
    except filelock.Timeout as exc:
        raise LockTimeoutError(f"the vector cache lock {lock.lock_file} stayed taken for {lock_timeout:g} s") from exc
    try:
        try:
            lines = key_lines((directory / KEYS_FILE).read_bytes())
        except FileNotFoundError:
            return 0
        keys, _ = parse_keys([line for _, line in lines])  # up to a torn or damaged line: readers stop there too
        hits = {row: lines[row] for row, (entity_id, digest) in enumerate(keys)
                if entity_id in entity_ids and digest.strip("0")}
        return len(erase_rows(directory, hits, 4 * dim)) if hits else 0
    except OSError as exc:
        raise storage_error(f"could not erase vectors in {directory}", exc, directory) from exc
    finally:
        lock.release()


def erased_since(directory: Path, taken: bytes) -> dict[int, bytes]:
    """The key lines among ``taken`` (the first bytes of the store's keys file, as a store
    read them: its rows) that another process erased since (a ``forget``), by row, as they
    are now; empty when none was. A graph built from the rows as they were holds the erased
    vectors: it must never be saved. The caller holds the store's lock. Raises OSError."""
    with open(directory / KEYS_FILE, "rb") as f:
        now = f.read(len(taken))
    if now == taken:
        return {}
    return {row: line for row, ((_, line), (_, old)) in enumerate(zip(key_lines(now), key_lines(taken), strict=False))
            if line != old}
