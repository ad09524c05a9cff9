"""The manifest of a data directory: format version, creation time, replica id, the
segment size every writer of the directory rotates at, and the mode of the files every
writer creates (``file_mode``; absent in manifests written before it existed, which means
the private default), and the embedder its vectors are made with (``embedder``: the spec that
rebuilds it, None for a custom one, and its model name; absent until a writable open records
it, which ``kwtree.caches.embed.tree_embedder`` reads as "the hash embedder" for a tree that
holds anything).

Formats (docs/log-format.md): 1 — the original rows; 2 — every end marker carries a
checksum of its operation and every sealed segment ends with a seal line naming its
successor; 3 — every end marker also names the digest of the operation before it (a hash
chain). kwtree reads and writes each in its own format, and moves a directory to a newer one
only through ``kwtree upgrade`` (DESIGN §3: never silently)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from kwtree.errors import FormatError
from kwtree.stores.files import PRIVATE_FILE_MODE, write_atomically

__all__ = ["FORMAT_VERSION", "MANIFEST_NAME", "OLDEST_FORMAT", "Manifest", "is_file_mode"]

FORMAT_VERSION = 3
OLDEST_FORMAT = 1
MANIFEST_NAME = "manifest.json"
DEFAULT_SEGMENT_BYTES = 64 << 20


def is_file_mode(mode: object) -> bool:
    """Whether ``mode`` may be a tree's file mode: read and write for the owner, at most read
    and write for the group and others, no execute, setuid or sticky bits."""
    return type(mode) is int and mode & ~0o666 == 0 and mode & PRIVATE_FILE_MODE == PRIVATE_FILE_MODE


@dataclass(frozen=True, slots=True)
class Manifest:
    format: int
    created_at: float
    replica_id: str
    segment_bytes: int
    file_mode: int = PRIVATE_FILE_MODE
    embedder: tuple[str | None, str] | None = None

    @property
    def checksums(self) -> bool:
        """True when the log carries checksums and seals (format 2 and later)."""
        return self.format >= 2

    @property
    def chained(self) -> bool:
        """True when every operation names its predecessor's digest (format 3 and later)."""
        return self.format >= 3

    def with_embedder(self, spec: str | None, model: str) -> Manifest:
        """This manifest recording the embedder ``spec`` (None: one no spec builds) of ``model``."""
        return replace(self, embedder=(spec, model))

    @classmethod
    def new(cls, segment_bytes: int | None = None, file_mode: int | None = None) -> Manifest:
        return cls(FORMAT_VERSION, time.time(), os.urandom(8).hex(), segment_bytes or DEFAULT_SEGMENT_BYTES,
                   PRIVATE_FILE_MODE if file_mode is None else file_mode)

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
            manifest = cls(found, float(raw["created_at"]), str(raw["replica_id"]), int(raw["segment_bytes"]),
                           raw.get("file_mode", PRIVATE_FILE_MODE), _embedder(raw.get("embedder")))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"{path} is missing or has a bad field: {exc}") from None
        if manifest.segment_bytes <= 0:
            raise FormatError(f"{path}: segment_bytes must be a positive number of bytes, got {manifest.segment_bytes}")
        if not is_file_mode(manifest.file_mode):
            raise FormatError(f"{path}: file_mode must be a mode between 0o600 and 0o666 granting the owner "
                              f"read and write, got {manifest.file_mode!r}")
        return manifest

    def save(self, directory: Path, *, durable: bool = True) -> None:
        """Replace the directory's manifest with this one; the rename is synced with ``durable``
        (the file's bytes always are: kwtree.stores.files.write_atomically)."""
        fields = {
            "format": self.format,
            "created_at": self.created_at,
            "replica_id": self.replica_id,
            "segment_bytes": self.segment_bytes,
            "file_mode": self.file_mode,
        }
        if self.embedder is not None:  # (older kwtree versions ignore the key)
            fields["embedder"] = {"spec": self.embedder[0], "model": self.embedder[1]}
        body = orjson.dumps(fields, option=orjson.OPT_INDENT_2)
        write_atomically(directory / MANIFEST_NAME, body + b"\n", self.file_mode, sync_directory=durable)


def _embedder(raw: object) -> tuple[str | None, str] | None:
    if raw is None:
        return None
    if not (isinstance(raw, dict) and isinstance(raw.get("model"), str) and isinstance(raw.get("spec"), str | None)):
        raise ValueError(f"embedder must be {{'spec': str or null, 'model': str}}, got {raw!r}")
    return raw["spec"], raw["model"]
