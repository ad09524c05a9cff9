"""The manifest of a data directory: format version, creation time, replica id and the
segment size every writer of the directory rotates at."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from kwtree.errors import FormatError
from kwtree.stores.files import fsync_directory, write_atomically

__all__ = ["FORMAT_VERSION", "MANIFEST_NAME", "Manifest"]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
DEFAULT_SEGMENT_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class Manifest:
    format: int
    created_at: float
    replica_id: str
    segment_bytes: int

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
        if found < FORMAT_VERSION:  # pragma: no cover - there is no older format yet
            raise FormatError(
                f"{directory} uses the older format {found}; run `kwtree upgrade {directory}` first"
            )
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
