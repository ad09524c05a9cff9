"""The vector store's files, read: its JSON metas, sizes, identities and stamps, checksums, the
batches it takes, what it reports (``VectorStoreStats``) and the keys file (``keys.jsonl``, one
line per vector row).

A key line is ``[entity_id, content_hash, check]``: ``check`` is the CRC-32 of the row's vector
bytes as 8 hex digits (``row_check``), so a row whose vector was garbled, or whose line now sits
beside another vector, is told from a sound one. Lines written before checks existed (store
format 1) are ``[entity_id, content_hash]``: their rows are taken as they are. The check has a
fixed width so that erasing a row (``erased_key_line``) rewrites its line in place."""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from kwtree.errors import InvalidInputError

__all__ = ["KEYS_FILE", "LOCK_FILE", "META_FILE", "PARSE_CHUNK", "VECTORS_FILE", "FileStamp", "VectorStoreStats",
           "checked_batch", "erased_key_line", "file_crc", "file_id_and_size", "file_size", "file_stamp",
           "model_directory", "parse_keys", "read_json", "row_check"]

log = logging.getLogger("kwtree.cache")

META_FILE = "meta.json"
VECTORS_FILE = "vectors.f32"
KEYS_FILE = "keys.jsonl"
LOCK_FILE = "lock"
_CRC_CHUNK = 1 << 23
NORM_TOLERANCE = 1e-2  # how far from 1 a row's norm may be


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None if it is missing or not an object."""
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class VectorStoreStats:
    """What a store holds and how its index came to be (for verify, metrics and tests)."""

    rows: int
    indexed_rows: int  # rows in the in-memory hnswlib index (0 when none is built)
    loaded_rows: int  # rows the in-memory index took from hnsw.bin rather than building
    capacity: int  # the in-memory index's max_elements (0 when none)
    persisted_rows: int  # rows covered by the hnsw.bin this process last loaded or saved


#: What tells a file's bytes apart without reading them: device, inode, size, and the times of
#: its last change (mtime; ctime, which no program can set back), or None when it is missing.
FileStamp = tuple[int, int, int, int, int] | None


def file_stamp(path: Path) -> FileStamp:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def file_size(path: Path) -> int:
    return file_id_and_size(path)[1]


def file_id_and_size(path: Path) -> tuple[tuple[int, int] | None, int]:
    """((device, inode), size) of ``path``, or (None, 0) if it does not exist."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None, 0
    return (st.st_dev, st.st_ino), st.st_size


def file_crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CRC_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


_CHECK_DIGITS = 8
_ERASED_HASH = "0"  # repeated to the length of the hash it replaces, so the line keeps its length


def row_check(vector: bytes | memoryview) -> str:
    """What a key line records of its row's vector bytes: their CRC-32, as 8 hex digits."""
    return f"{zlib.crc32(vector):0{_CHECK_DIGITS}x}"


def erased_key_line(line: bytes, row_bytes: int) -> bytes | None:
    """The line ``line`` becomes when its row is erased (zeroed, ``row_bytes`` long): the
    entity id stays, the content hash becomes zeros (it matches no text) and the check is a
    blank row's. As long as ``line``; None if ``line`` is not a key line or is erased already."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not _is_key(value) or not value[1].strip(_ERASED_HASH):
        return None
    erased = [value[0], _ERASED_HASH * len(value[1])]
    if len(value) == 3:
        erased.append(row_check(bytes(row_bytes)))
    out = orjson.dumps(erased)
    return out if len(out) == len(line) else None


def _is_key(value: object) -> bool:
    return (type(value) is list and len(value) in (2, 3) and type(value[0]) is str and type(value[1]) is str
            and (len(value) == 2 or (type(value[2]) is str and len(value[2]) == _CHECK_DIGITS)))


PARSE_CHUNK = 4_096  # key lines per orjson call


def parse_keys(lines: list[bytes]) -> tuple[list[tuple[str, str]], list[str | None]]:
    """Parse whole key lines, stopping at the first unreadable one (with a warning): their
    (entity id, content hash) keys, and their checks (None for a line of store format 1)."""
    keys: list[tuple[str, str]] = []
    checks: list[str | None] = []
    for start in range(0, len(lines), PARSE_CHUNK):
        chunk = lines[start : start + PARSE_CHUNK]
        try:
            # One orjson call per chunk: several times faster than one call per line, while
            # other threads (a search right after open) get the interpreter between chunks.
            # The count check catches a corrupt line that happens to hold two JSON values.
            parsed = orjson.loads(b"[" + b",".join(chunk) + b"]")
        except orjson.JSONDecodeError:
            parsed = None
        found = _chunk_keys(parsed) if parsed is not None and len(parsed) == len(chunk) else None
        if found is None:  # a bad line in it, or lines of both formats: one line at a time
            found = _line_keys(chunk)
        keys.extend(found[0])
        checks.extend(found[1])
        if len(found[0]) < len(chunk):
            break
    return keys, checks


def _chunk_keys(parsed: list[Any]) -> tuple[list[tuple[str, str]], list[str | None]] | None:
    """The keys and checks of parsed lines if all are key lines of one format, else None.
    (Types and lengths are checked a column at a time, in C: a check per line in Python made
    opening a store half again as slow.)"""
    if set(map(type, parsed)) != {list}:
        return None
    shapes = set(map(len, parsed))
    if shapes not in ({2}, {3}):
        return None
    keys = [(p[0], p[1]) for p in parsed]
    if set(map(type, itertools.chain.from_iterable(keys))) != {str}:
        return None
    if shapes == {2}:
        return keys, [None] * len(keys)
    checks = [p[2] for p in parsed]
    if set(map(type, checks)) != {str} or set(map(len, checks)) != {_CHECK_DIGITS}:
        return None
    return keys, checks


def _line_keys(lines: list[bytes]) -> tuple[list[tuple[str, str]], list[str | None]]:
    """Key lines parsed one at a time, up to the first unreadable one (with a warning)."""
    keys: list[tuple[str, str]] = []
    checks: list[str | None] = []
    for line in lines:
        try:
            p = orjson.loads(line)
        except orjson.JSONDecodeError:
            p = None
        if not _is_key(p):
            log.warning("vector cache: unreadable key line %r; ignoring it and the rows after it", line[:80])
            break
        keys.append((p[0], p[1]))
        checks.append(p[2] if len(p) == 3 else None)
    return keys, checks


def model_directory(model: str) -> str:
    """The name of the directory, under ``cache/vectors/``, of the store of ``model``'s vectors:
    readable, and unique per model name (a hash of it ends the name)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", model)[:60]
    return f"{readable}-{hashlib.blake2b(model.encode(), digest_size=4).hexdigest()}"


def checked_batch(keys: Sequence[tuple[str, str]], vectors: np.ndarray, dim: int, model: str) -> list[tuple[str, str]]:
    """The keys of a batch to append, as (entity id, content hash) tuples, once the batch is
    one float32 row of ``dim`` per key, each unit-norm or all zeros (a blank text).
    Raises InvalidInputError naming what is wrong; nothing is written then."""
    if not isinstance(vectors, np.ndarray) or vectors.dtype != np.float32:
        raise InvalidInputError(
            f"vectors must be a float32 numpy array, not {getattr(vectors, 'dtype', type(vectors).__name__)}; "
            f"convert with np.asarray(v, dtype=np.float32)"
        )
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        raise InvalidInputError(
            f"vectors must have shape (n, {dim}) for model {model!r}, not {vectors.shape}"
        )
    checked: list[tuple[str, str]] = []
    for key in keys:
        if (not isinstance(key, tuple | list) or len(key) != 2
                or not all(isinstance(part, str) and part for part in key)):
            raise InvalidInputError(f"each key must be a pair of non-empty strings "
                                    f"(entity_id, content_hash), not {key!r}")
        checked.append((key[0], key[1]))
    if len(checked) != len(vectors):
        raise InvalidInputError(f"got {len(checked)} keys for {len(vectors)} vectors; pass one key per row")
    norms = np.linalg.norm(vectors, axis=1)
    # ~(... <= ...) also catches NaN; an all-zero row is a blank (see add()).
    bad = np.flatnonzero(~(np.abs(norms - 1.0) <= NORM_TOLERANCE) & (norms != 0.0))
    if len(bad):
        raise InvalidInputError(
            f"vector {int(bad[0])} has norm {float(norms[bad[0]]):.4g}; vectors must be finite and "
            f"L2-normalised (divide by np.linalg.norm(v, axis=1, keepdims=True)), or all zeros "
            f"for a text with nothing to embed"
        )
    return checked
