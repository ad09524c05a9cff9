"""The manifest of a data directory: format version, creation time, replica id and the
segment size every writer of the directory rotates at.

Formats (docs/log-format.md): 1 — the original rows; 2 — every end marker carries a
checksum of its operation and every sealed segment ends with a seal line naming its
successor. kwtree reads and writes both, each in its own format, and moves a directory from
1 to 2 only through ``kwtree upgrade`` (DESIGN §3: never silently)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from kwtree.errors import FormatError
from kwtree.stores.files import fsync_directory, write_atomically

__all__ = ["FORMAT_VERSION", "MANIFEST_NAME", "OLDEST_FORMAT", "Manifest"]

FORMAT_VERSION = 2
OLDEST_FORMAT = 1
MANIFEST_NAME = "manifest.json"
DEFAULT_SEGMENT_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class Manifest:
    format: int
    created_at: float
    replica_id: str
    segment_bytes: int

    @property
    def checksums(self) -> bool:
        """True when the log carries checksums and seals (format 2 and later)."""
        return self.format >= 2

    @classmethod
    def new(cls, segment_bytes: int | None = None) -> Manifest:
        return cls(FORMAT_VERSION, time.time(), os.urandom(8).hex(), segment_bytes or DEFAULT_SEGMENT_BYTES)

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST_NAME
        try:
            raw = orjson.loads(path.read_bytes())
            found = raw["format"]
        except (OSError, orjson.JSONDecodeError, TypeError, KeyError) as exc:
            raise FormatError(f"{path} is not a readable kwtree manifest: {exc}") from None
        if type(found) is not int or found > FORMAT_VERSION:
            raise FormatError(
                f"{directory} was written by a newer kwtree (format {found}); "
                f"this version reads format {FORMAT_VERSION}: upgrade kwtree"
            )
        if found < OLDEST_FORMAT:
            raise FormatError(f"{path} names format {found}, which no kwtree ever wrote; restore it from a backup")
        try:
            return cls(found, float(raw["created_at"]), str(raw["replica_id"]), int(raw["segment_bytes"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"{path} is missing or has a bad field: {exc}") from None

    def save(self, directory: Path) -> None:
        body = orjson.dumps(
            {
                "format": self.format,
                "created_at": self.created_at,
                "replica_id": self.replica_id,
                "segment_bytes": self.segment_bytes,
            },
            option=orjson.OPT_INDENT_2,
        )
        write_atomically(directory / MANIFEST_NAME, body + b"\n")
        fsync_directory(directory)
