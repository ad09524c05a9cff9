"""Erasing entities from a vector store's files in place (forget): their vector rows are
zeroed and their key lines keep the entity id but lose the content hash, and the persisted
hnswlib graph (which holds a copy of every vector) is removed.

In place, so row numbers never move: a process that has the store open keeps reading whole
rows at the offsets it knows (a zeroed row is a blank, which no search returns; a key whose
hash is zeros matches no text), and a crash part-way leaves some rows erased and a rerun
erases the rest. The graph files go first (hnsw.json, then hnsw.bin: without its meta a
graph is never loaded); the next process to search builds the graph again from the rows.
Works under the store's lock file, as appenders do (``kwtree.stores.vectors``).
"""

from __future__ import annotations

import os
from pathlib import Path

import filelock
import orjson

from kwtree.errors import LockTimeoutError, storage_error
from kwtree.stores.vector_files import read_json
from kwtree.stores.vectors import INDEX_FILE, INDEX_META_FILE, KEYS_FILE, LOCK_FILE, META_FILE, VECTORS_FILE

__all__ = ["erase_vectors", "vector_directories"]

_ERASED_HASH = b"0"  # repeated to the length of the hash it replaces, so the line keeps its length


def vector_directories(cache: Path) -> list[Path]:
    """The store of every embedder model under ``cache`` (``<data_dir>/cache/vectors``)."""
    if not cache.is_dir():
        return []
    return sorted(path for path in cache.iterdir() if (path / META_FILE).is_file())


def erase_vectors(directory: Path, entity_ids: set[str], lock_timeout: float = 30.0) -> int:
    """Zero the vector rows of ``entity_ids`` in the store in ``directory`` and erase their
    content hashes, in place; remove the persisted graph when a row was erased. Returns the
    rows erased now (0 when they were erased before). Raises LockTimeoutError, StorageError."""
    meta = read_json(directory / META_FILE)
    dim = meta.get("dim") if meta else None
    if type(dim) is not int or dim < 1 or not entity_ids:
        return 0
    row_bytes = 4 * dim
    lock = filelock.FileLock(str(directory / LOCK_FILE), timeout=lock_timeout)
    try:
        lock.acquire()
    except filelock.Timeout as exc:
        raise LockTimeoutError(f"the vector cache lock {lock.lock_file} stayed taken for {lock_timeout:g} s") from exc
    try:
        keys = directory / KEYS_FILE
        try:
            data = keys.read_bytes()
        except FileNotFoundError:
            return 0
        hits: list[tuple[int, int, bytes]] = []  # (row, offset of its key line, the erased line)
        offset = 0
        for row, line in enumerate(data.split(b"\n")[:-1]):
            try:
                entity_id, digest = orjson.loads(line)
            except (orjson.JSONDecodeError, ValueError, TypeError):
                break  # a torn or damaged line: readers stop here too
            if entity_id in entity_ids and digest.strip("0"):
                erased = orjson.dumps([entity_id, (_ERASED_HASH * len(digest)).decode()])
                if len(erased) == len(line):
                    hits.append((row, offset, erased))
            offset += len(line) + 1
        if not hits:
            return 0
        for name in (INDEX_META_FILE, INDEX_FILE):
            (directory / name).unlink(missing_ok=True)
        blank = bytes(row_bytes)
        vectors_fd = os.open(directory / VECTORS_FILE, os.O_WRONLY)
        keys_fd = os.open(keys, os.O_WRONLY)
        try:
            for row, at, line in hits:
                os.pwrite(vectors_fd, blank, row * row_bytes)  # the vector first: the key still names it meanwhile
                os.pwrite(keys_fd, line, at)
        finally:
            os.close(vectors_fd)
            os.close(keys_fd)
        return len(hits)
    except OSError as exc:
        raise storage_error(f"could not erase vectors in {directory}", exc, directory) from exc
    finally:
        lock.release()
