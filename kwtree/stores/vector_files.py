"""The vector store's files, read: its JSON metas, sizes and identities, checksums and the
keys file (``keys.jsonl``, one ``[entity_id, content_hash]`` row per vector)."""

from __future__ import annotations

import logging
import zlib
from pathlib import Path
from typing import Any

import orjson

__all__ = ["PARSE_CHUNK", "file_crc", "file_id_and_size", "file_size", "parse_keys", "read_json"]

log = logging.getLogger("kwtree.cache")
_CRC_CHUNK = 1 << 23


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None if it is missing or not an object."""
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


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


def _is_key(value: object) -> bool:
    return type(value) is list and len(value) == 2 and type(value[0]) is str and type(value[1]) is str


PARSE_CHUNK = 4_096  # key lines per orjson call


def parse_keys(lines: list[bytes]) -> list[tuple[str, str]]:
    """Parse whole key lines, stopping at the first unreadable one (with a warning)."""
    keys: list[tuple[str, str]] = []
    for start in range(0, len(lines), PARSE_CHUNK):
        chunk = lines[start : start + PARSE_CHUNK]
        try:
            # One orjson call per chunk: several times faster than one call per line, while
            # other threads (a search right after open) get the interpreter between chunks.
            # The count check catches a corrupt line that happens to hold two JSON values.
            parsed = orjson.loads(b"[" + b",".join(chunk) + b"]")
        except orjson.JSONDecodeError:
            break
        if len(parsed) != len(chunk) or not all(map(_is_key, parsed)):
            break
        keys.extend((p[0], p[1]) for p in parsed)
    else:
        return keys
    lines = lines[len(keys):]  # the chunk with a bad line: one line at a time
    for line in lines:
        try:
            p = orjson.loads(line)
        except orjson.JSONDecodeError:
            p = None
        if not _is_key(p):
            log.warning("vector cache: unreadable key line %r; ignoring it and the rows after it", line[:80])
            break
        keys.append((p[0], p[1]))
    return keys
