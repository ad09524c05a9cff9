"""The vector store's persisted hnswlib graph: ``hnsw.bin`` (hnswlib's file; label n is row n
of the store) and ``hnsw.json``, which says what the graph was derived from.

``hnsw.json`` records the graph's format and hnswlib settings, the model and dimension, the
number of rows it covers, a digest of those rows (``rows_digest``: their keys and the checks
of their vectors, as the key lines record them), and the size and CRC-32 of ``hnsw.bin``.
A graph is used only when all of it matches: the settings, rows the store still holds in the
same order (the digest), and the bytes of hnsw.bin (checked before hnswlib reads them: a
flipped byte inside a graph is not detected by hnswlib and would crash the process at search
time). Anything else — a store whose rows were lost and embedded again in another order, a
graph saved by another format, a damaged hnsw.bin — is a ``graph_problem``: the store builds
the graph again from its rows, never searches the old one.

The digest is one CRC-32 over the keys, not a pass over the vectors: each key line already
holds its vector's check, and rows are checked against it when a search returns them. A store
computes it from keys.jsonl's bytes without parsing them (``vector_keys.KeyRows.digest``,
about 15 ms for 100,000 rows); ``rows_digest`` is its definition.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import hnswlib
import orjson

from kwtree.heap import release_freed
from kwtree.stores.vector_files import file_crc, file_size

__all__ = [
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "HNSW_SEED",
    "HNSW_SPACE",
    "INDEX_FILE",
    "INDEX_FORMAT",
    "INDEX_META_FILE",
    "INITIAL_CAPACITY",
    "graph_meta",
    "graph_problem",
    "load_graph",
    "new_graph",
    "remove_graph",
    "rows_digest",
]

INDEX_FORMAT = 2  # 2: hnsw.json records the digest of the rows (format 1 named only the last key)
INDEX_FILE = "hnsw.bin"
INDEX_META_FILE = "hnsw.json"
HNSW_SPACE = "cosine"
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 200
HNSW_SEED = 100
INITIAL_CAPACITY = 1_024
_FILE_FIELDS = ("size", "crc32")  # what hnsw.json says of hnsw.bin itself
_DIGEST_FIELD = "rows_crc32"


def rows_digest(keys: Sequence[tuple[str, str]], checks: Sequence[str | None], rows: int) -> int:
    """The digest of the first ``rows`` rows: a CRC-32 over their keys and vector checks, in
    order. Equal digests mean the same entities' texts in the same rows, with the same vectors."""
    return zlib.crc32(orjson.dumps(checks[:rows]), zlib.crc32(orjson.dumps(keys[:rows])))


def graph_meta(model: str, dim: int, rows: int, digest: int) -> dict[str, Any]:
    """hnsw.json of a graph of ``rows`` rows with digest ``digest`` (hnsw.bin's size and CRC aside)."""
    return {"format": INDEX_FORMAT, "model": model, "dim": dim, "rows": rows, "space": HNSW_SPACE,
            "M": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION, _DIGEST_FIELD: digest}


def graph_problem(directory: Path, found: dict[str, Any] | None, stored_rows: int,
                  expected: Callable[[int], dict[str, Any]], *, crc: bool = True) -> str | None:
    """Why the graph in ``directory``, described by ``found`` (its hnsw.json, None if missing
    or unreadable), must not be used by a store of ``stored_rows`` rows whose hnsw.json for a
    graph of n rows would be ``expected(n)``; None if it may. ``crc=False`` leaves out the
    CRC of hnsw.bin (its size is still compared)."""
    if found is None:
        return "hnsw.json is missing or unreadable"
    rows = found.get("rows")
    if type(rows) is not int or not 0 < rows <= stored_rows:
        return f"it covers {rows!r} rows but the store has {stored_rows}"
    wanted = expected(rows)
    described = {key: value for key, value in found.items() if key not in _FILE_FIELDS}
    if {**described, _DIGEST_FIELD: None} != {**wanted, _DIGEST_FIELD: None}:
        return "it was written by another format or with other settings"
    if described[_DIGEST_FIELD] != wanted[_DIGEST_FIELD]:
        return (f"it was built from other rows (the digest of its {rows} rows differs from the store's: "
                f"vectors lost and embedded again, in another order)")
    path = directory / INDEX_FILE
    if file_size(path) != found.get("size") or (crc and file_crc(path) != found.get("crc32")):
        return "hnsw.bin does not match the size and CRC recorded in hnsw.json"
    return None


def new_graph(dim: int, rows: int) -> hnswlib.Index:
    """An empty graph with room for ``rows`` rows and a quarter more."""
    index = hnswlib.Index(space=HNSW_SPACE, dim=dim)
    index.init_index(max_elements=max(INITIAL_CAPACITY, rows + rows // 4), M=HNSW_M,
                     ef_construction=HNSW_EF_CONSTRUCTION, random_seed=HNSW_SEED)
    return index


def load_graph(directory: Path, dim: int, rows: int, stored_rows: int) -> tuple[hnswlib.Index | None, str | None]:
    """hnswlib's load of hnsw.bin (checked by ``graph_problem`` first), with room for
    ``stored_rows`` rows and a quarter more: (the graph, None), or (None, why not)."""
    index = hnswlib.Index(space=HNSW_SPACE, dim=dim)
    capacity = max(INITIAL_CAPACITY, stored_rows + stored_rows // 4)
    try:
        index.load_index(str(directory / INDEX_FILE), max_elements=capacity)
    except (RuntimeError, OSError, MemoryError) as exc:
        return None, f"hnswlib could not load it ({exc})"
    if index.element_count != rows:
        return None, f"hnsw.bin holds {index.element_count} rows, not {rows}"
    release_freed()  # (what the store's load of its keys freed: ~22 MB at 100,000 rows)
    return index, None


def remove_graph(directory: Path) -> bool:
    """Delete the persisted graph (hnsw.json first: without it, hnsw.bin is never loaded);
    returns whether there was one. Raises OSError."""
    found = False
    for name in (INDEX_META_FILE, INDEX_FILE):
        path = directory / name
        found = path.exists() or found
        path.unlink(missing_ok=True)
    return found
