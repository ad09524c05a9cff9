"""Which version of each entity the full-text index holds the text of, so that operations
that come in below its watermark are found: a git merge puts the other branch's operations
below it in op-id order, a branch switch brings older ones back, a compaction rewrites every
entity under new op ids at or below it.

The record is exact, not a lower bound: it names, per entity, the version whose text the
index was last fed (two sorted uint64 arrays of digests, ``kind/id`` and ``kind/id/op id``),
for the index as one commit (watermark, op count) left it. A record that lagged behind the
index would not do: after a branch switch back, an entity whose current version the record
names may hold the text of a later version fed after the record was written (one the
switch dropped). So the shared index's record is written after every commit
(``versions.bin`` beside ``meta.json``: a header line with the commit it describes and a
CRC-32, then the digests), and one that names another commit, fails its check or is missing
counts as unknown: every entity is fed again and documents of entities the state lacks are
removed. Comparing a state with a record hashes every entity (about as long as
``texts.written_after``); this is done at the first catch-up of a process and when the state
moved in a way this process's own writes do not explain, never in a search whose index is
current.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from kwtree.caches.texts import EntityKey
from kwtree.engine.state import State
from kwtree.models import ROOT_ID
from kwtree.stores.files import PRIVATE_FILE_MODE, write_atomically

__all__ = ["VERSIONS_FILE", "IndexedVersions", "read_versions", "write_versions"]

VERSIONS_FILE = "versions.bin"


def _digests(texts: list[str]) -> np.ndarray:
    return np.asarray(np.frombuffer(b"".join(hashlib.blake2b(text.encode(), digest_size=8).digest() for text in texts),
                         dtype="<u8"))


@dataclass(frozen=True)
class IndexedVersions:
    """The version of each entity whose text the index holds, for the index as the commit at
    (``at``, ``ops``) left it. ``keys`` is sorted; ``versions[i]`` is the version of ``keys[i]``."""

    at: str | None
    ops: int | None
    keys: np.ndarray
    versions: np.ndarray

    @staticmethod
    def of(state: State, entities: list[EntityKey] | None = None) -> tuple[list[EntityKey], np.ndarray, np.ndarray]:
        """The entities (every keyword but the root and every info, deleted ones included,
        when None; those of ``entities`` the state knows, else) with the digests of their
        keys and of their current versions."""
        if entities is None:
            entities = [("info", info_id) for info_id in state.infos]
            entities += [("keyword", keyword_id) for keyword_id in state.keywords if keyword_id != ROOT_ID]
        else:
            entities = [(kind, entity_id) for kind, entity_id in entities
                        if entity_id in (state.infos if kind == "info" else state.keywords)]
        names = [f"{kind}/{entity_id}" for kind, entity_id in entities]
        ops = [(state.infos if kind == "info" else state.keywords)[entity_id].op_id for kind, entity_id in entities]
        return entities, _digests(names), _digests([f"{name}/{op}" for name, op in zip(names, ops, strict=True)])

    @classmethod
    def build(cls, at: str | None, ops: int | None, keys: np.ndarray, versions: np.ndarray) -> IndexedVersions:
        order = np.argsort(keys, kind="stable")
        return cls(at, ops, keys[order], versions[order])

    def differing(self, keys: np.ndarray, versions: np.ndarray) -> np.ndarray:
        """For each (key, version): True where the record names another version, or none."""
        if not len(self.keys):
            return np.ones(len(keys), dtype=bool)
        where = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        same: np.ndarray = (self.keys[where] == keys) & (self.versions[where] == versions)
        return ~same

    def lacks_any(self, keys: np.ndarray) -> bool:
        """Whether the record names an entity not among ``keys`` (the index may hold its document)."""
        return not bool(np.isin(self.keys, keys).all())

    def updated(self, at: str | None, ops: int | None, keys: np.ndarray, versions: np.ndarray) -> IndexedVersions:
        """The record once these entities were fed at these versions, for the commit (at, ops)."""
        kept = ~np.isin(self.keys, keys)
        return IndexedVersions.build(at, ops, np.concatenate([self.keys[kept], keys]),
                                     np.concatenate([self.versions[kept], versions]))


def _check(at: str | None, ops: int | None, body: bytes) -> int:
    return zlib.crc32(body, zlib.crc32(orjson.dumps([at, ops])))


def write_versions(directory: Path, record: IndexedVersions, file_mode: int = PRIVATE_FILE_MODE) -> None:
    """Replace ``directory``'s record (atomically; its CRC-32 covers the commit it names and
    every digest). Raises OSError."""
    body = record.keys.astype("<u8").tobytes() + record.versions.astype("<u8").tobytes()
    header = orjson.dumps({"at": record.at, "ops": record.ops, "count": len(record.keys),
                           "check": _check(record.at, record.ops, body)})
    write_atomically(directory / VERSIONS_FILE, header + b"\n" + body, file_mode)


def read_versions(directory: Path, at: str | None, ops: int | None) -> IndexedVersions | None:
    """The record in ``directory`` if it describes the commit (``at``, ``ops``) and passes its
    check; else None (unknown)."""
    try:
        raw = (directory / VERSIONS_FILE).read_bytes()
        line, _, body = raw.partition(b"\n")
        header = orjson.loads(line)
    except (OSError, orjson.JSONDecodeError):
        return None
    if (not isinstance(header, dict) or header.get("at") != at or header.get("ops") != ops
            or type(header.get("count")) is not int or len(body) != 16 * header["count"]
            or header.get("check") != _check(at, ops, body)):
        return None
    count = header["count"]
    keys = np.frombuffer(body[: 8 * count], dtype="<u8")
    versions = np.frombuffer(body[8 * count :], dtype="<u8")
    if count and bool((keys[1:] < keys[:-1]).any()):
        return None  # never written so: not ours
    return IndexedVersions(at, ops, keys, versions)
