"""Checking the vector stores against what they were derived from, for ``verify``, and
mending them, for ``repair``.

Each store under ``cache/vectors/`` (one per embedder model) is opened read-only and asked
``VectorStore.check()``: every row's vector against the CRC-32 its key line records, and the
saved hnswlib graph against the rows it says it was built from (their count and digest) and
against its own size and CRC. It reads every vector and the whole graph: about as long as
loading the graph.

A mismatch is an error (``vector-cache-mismatch``), as ``fulltext-mismatch`` is: not data loss
(the log is the truth, and no search returns a row or a graph that does not match, since the
store checks them too), but a cache that a tree must work around at every open. ``repair``
mends it with ``VectorStore.mend()``: the damaged rows are erased in place (their texts are
embedded again by the next writer) and a graph that does not match its rows is deleted (the
next search builds it again); the rows that match stay, so nothing is embedded twice. A store
whose meta.json is unreadable or of a format this version does not read is left to the
``cache-meta`` warning and to the next writer, which empties it.
"""

from __future__ import annotations

from pathlib import Path

from kwtree.ops.verify_segments import Findings
from kwtree.stores.directory import CACHE_DIR
from kwtree.stores.vector_erase import vector_directories
from kwtree.stores.vector_files import META_FILE, VECTORS_FILE, read_json
from kwtree.stores.vector_graph import INDEX_META_FILE
from kwtree.stores.vectors import READABLE_FORMATS, VectorStore

__all__ = ["check_vectors", "mend_vectors"]

_VECTORS = "vectors"
#: What a mismatch of each file costs, and what repair does about it.
_EFFECTS = {
    VECTORS_FILE: "searches skip those rows; `kwtree repair` erases them so that the next writer embeds their "
                  "texts again",
    INDEX_META_FILE: "every open builds the graph again instead of loading it; `kwtree repair` deletes it so that "
                     "a writer saves one built from the rows",
}
#: The finding repair adds for what ``VectorStore.mend`` did to each file, and what follows.
_MENDED = {VECTORS_FILE: ("erased-vectors", "the next writer embeds their texts again"),
           INDEX_META_FILE: ("removed-cache", "the next search builds it again from the rows")}


def _stores(directory: Path) -> list[tuple[Path, str, int]]:
    """(store directory, model, dim) of every store under ``directory`` whose meta.json this
    version reads."""
    found = []
    for store in vector_directories(Path(directory) / CACHE_DIR / _VECTORS):
        meta = read_json(store / META_FILE) or {}
        model, dim = meta.get("model"), meta.get("dim")
        if meta.get("format") in READABLE_FORMATS and isinstance(model, str) and model and type(dim) is int and dim > 0:
            found.append((store, model, dim))
    return found


def check_vectors(directory: Path, findings: Findings) -> None:
    """Add a ``vector-cache-mismatch`` error to ``findings`` for each part of a vector store
    under ``directory`` that does not match what it was derived from. Never writes."""
    for store_dir, model, dim in _stores(directory):
        store = VectorStore(store_dir, model, dim, writable=False)
        try:
            problems = store.check()
        finally:
            store.close()
        rel = store_dir.relative_to(directory)
        for name, problem in problems:
            findings.add("error", "vector-cache-mismatch", str(rel / name), None,
                         f"the vector cache does not match what it was derived from: {problem}; {_EFFECTS[name]}")


def mend_vectors(directory: Path, done: Findings) -> None:
    """Mend every vector store under ``directory`` (``VectorStore.mend``) and add what was
    done to ``done``: ``removed-cache`` for a deleted graph, ``erased-vectors`` for erased
    rows. Raises LockTimeoutError (a store's appenders' lock), StorageError."""
    for store_dir, model, dim in _stores(directory):
        with VectorStore(store_dir, model, dim) as store:
            mended = store.mend()
        rel = store_dir.relative_to(directory)
        for name, sentence in mended:
            code, then = _MENDED[name]
            done.add("info", code, str(rel / name), None, f"{sentence}; {then}")
