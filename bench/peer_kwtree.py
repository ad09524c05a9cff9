"""kwtree as a peer of the embedded stores in /work/shared/peers: a ``Store`` with the interface
of those peers' driver (``bench.py``), so that one driver measures kwtree and the peers by the
same method on the same workload.

    PYTHONPATH=bench .venv/bin/python /work/shared/peers/bench.py kwtree build --data D --n N --dir S

The peers are handed precomputed vectors; kwtree embeds texts itself. So the tree gets an
embedder that looks texts up and stores exactly the vectors the peers store: the vector the
driver hands over with a text (``bulk_insert``, ``insert_one``, ``vquery``), else the
workload's (``real_vectors.CachedEmbedder`` over ``D``: doc text i -> ``doc_vecs.npy`` row i,
query text i -> ``query_vecs.npy`` row i), for texts an earlier process wrote. Each doc becomes
one info whose ``metadata["doc"]`` is the workload's doc id, so hits map back to the ids the
ground truth uses.

The tree runs with kwtree's defaults: ``durability="full"`` (every write fsynced before it
returns), the embedding worker thread, asynchronous embedding. ``PEER_KWTREE_EMBED=inline``
opens it with ``embed_async=False`` instead, so that ``create_info`` returns only once the
vector is stored and searchable, as an ``add()`` of the peers does.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import real_vectors  # bench/ is on the path: PYTHONPATH for the driver, the importer's for tests

from kwtree import KeywordTree

__all__ = ["BULK_BATCH", "EMBED_MODES", "Store", "WorkloadEmbedder", "versions"]

DIM = 384
K = 10
#: Infos per ``batch_create_infos`` call (one operation, one fsync each). kwtree has no
#: maximum; 10,000 is what its own benchmarks use (bench/retrieval.py).
BULK_BATCH = 10_000
#: How writes embed: "async" (kwtree's default: the worker thread embeds after the write
#: returns) or "inline" (``embed_async=False``: the write returns once its vector is stored).
EMBED_MODES = ("async", "inline")
EMBED = os.environ.get("PEER_KWTREE_EMBED", "async")
TREE_DIR = "tree"


def versions() -> dict[str, Any]:
    from importlib import metadata

    found = {}
    for package in ("kwtree", "numpy", "hnswlib", "tantivy", "orjson"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found | {"embed": EMBED}


class WorkloadEmbedder:
    """kwtree's embedder for the workload in ``data``: serves the vector given for a text by
    ``remember``/``remember_query``, else the workload's own vector of that doc or query text
    (``real_vectors.CachedEmbedder``), and fails on any other text. The workload's 100,500
    texts are read only when a text was not given (on ``load``): an open that embeds nothing,
    and a timed call, never pay for reading them, nor count them in the RSS."""

    model = "cached-peers-workload"
    dim = DIM

    def __init__(self, data: str | os.PathLike[str]) -> None:
        self._data = Path(data)
        self._cached: real_vectors.CachedEmbedder | None = None
        self._docs: dict[str, np.ndarray] = {}
        self._queries: dict[str, np.ndarray] = {}

    def remember(self, texts: list[str], vectors: np.ndarray) -> None:
        self._docs.update(zip(texts, vectors, strict=True))

    def remember_query(self, text: str, vector: np.ndarray) -> None:
        self._queries[text] = vector

    def load(self) -> real_vectors.CachedEmbedder:
        if self._cached is None:
            docs = _texts(self._data / "docs.jsonl")
            queries = _texts(self._data / "queries.jsonl")
            self._cached = real_vectors.CachedEmbedder(
                "peers-workload", docs, np.load(self._data / "doc_vecs.npy", mmap_mode="r"),
                queries, np.load(self._data / "query_vecs.npy"))
        return self._cached

    def embed(self, texts: list[str]) -> np.ndarray:
        if all(text in self._docs for text in texts):
            return np.array([self._docs[text] for text in texts], dtype=np.float32).reshape(len(texts), DIM)
        return np.ascontiguousarray(self.load().embed(texts), dtype=np.float32)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        if all(text in self._queries for text in texts):
            return np.array([self._queries[text] for text in texts], dtype=np.float32).reshape(len(texts), DIM)
        return np.ascontiguousarray(self.load().embed_query(texts), dtype=np.float32)


def _texts(path: Path) -> list[str]:
    with path.open() as file:
        return [json.loads(line)["text"] for line in file]


class Store:
    """One KeywordTree in ``<path>/tree`` holding the workload's docs as infos.

    ``vquery`` modes: "store" is the vector store's top 10 for the given vector (hnswlib,
    as bench/retrieval.py measures it); "recall" is ``tree.recall(qtext, k=10,
    mode="vector")`` end to end, whose query vector is the one the driver passes with ``qtext``.
    ``fts`` has only "or": ``recall(mode="bm25")`` ranks by any of the query's terms, and
    kwtree has no mode that requires them all. Both pass ``min_score=0``: the peers rank and
    have no relevance floor, so neither is compared with one (bench/floor.py measures it).
    """

    vmodes: ClassVar[list[str]] = ["store", "recall"]
    fts_modes: ClassVar[list[str]] = ["or"]

    def __init__(self, path: str | os.PathLike[str], create: bool, n: int | None = None,
                 data: str | os.PathLike[str] | None = None) -> None:
        if data is None:
            raise ValueError("peer_kwtree.Store needs data=<workload directory> for its embedder")
        if EMBED not in EMBED_MODES:
            raise ValueError(f"PEER_KWTREE_EMBED must be one of {EMBED_MODES}, got {EMBED!r}")
        directory = Path(path)
        if create:
            directory.mkdir(parents=True)
        elif not (directory / TREE_DIR).is_dir():
            raise FileNotFoundError(f"{directory} holds no kwtree store (no {TREE_DIR}/)")
        self._embedder = WorkloadEmbedder(data)
        self.tree = KeywordTree(directory / TREE_DIR, embedder=self._embedder, embed_async=EMBED == "async")

    def bulk_insert(self, ids: list[int], texts: list[str], X: np.ndarray) -> dict[str, Any]:
        """Insert every doc, then wait until every vector is stored and the graph is built
        (and saved), so the store answers vector queries when this returns, as the peers' do."""
        self._embedder.remember(texts, np.asarray(X, dtype=np.float32))
        started = time.perf_counter()
        for start in range(0, len(ids), BULK_BATCH):
            self.tree.batch_create_infos([
                {"content": text, "metadata": {"doc": int(doc)}}
                for doc, text in zip(ids[start:start + BULK_BATCH], texts[start:start + BULK_BATCH], strict=True)
            ])
        logged = time.perf_counter()
        self.tree.wait_indexed()
        embedded = time.perf_counter()
        store = self.tree._caches.vectors.store
        store.warm_up()  # builds the hnswlib graph and saves it (stores of 2,000 rows or more)
        graph = time.perf_counter()
        self.tree.recall("warm up", k=1, mode="bm25")  # the first search commits the full-text index
        return {"batch": BULK_BATCH, "log_s": logged - started, "embed_s": embedded - logged,
                "graph_s": graph - embedded, "fulltext_s": time.perf_counter() - graph,
                "rows": len(store), "hnsw": _hnsw_config()}

    def insert_one(self, i: int, text: str, x: np.ndarray) -> None:
        """One ``create_info`` (durability="full": fsynced before it returns)."""
        self._embedder.remember([text], np.asarray(x, dtype=np.float32).reshape(1, DIM))
        self.tree.create_info(text, metadata={"doc": int(i)})

    def vquery(self, q: np.ndarray, qtext: str | None = None, mode: str = "store") -> list[int]:
        if mode == "store":  # every embedded entity here is an info (the root keyword has no text)
            hits = self.tree._caches.vectors.store.search(np.asarray(q, dtype=np.float32), K)
            infos = [self.tree.get_info(info_id) for info_id, _ in hits]
        elif mode == "recall":
            if qtext is None:
                raise ValueError("vquery(mode='recall') needs the query text")
            self._embedder.remember_query(qtext, np.asarray(q, dtype=np.float32))
            infos = [hit.info for hit in self.tree.recall(qtext, k=K, mode="vector", min_score=0)]
        else:
            raise ValueError(f"unknown vquery mode {mode!r}; use one of {self.vmodes}")
        return [info.metadata["doc"] for info in infos]

    def fts(self, qtext: str, mode: str = "or") -> list[int]:
        if mode != "or":
            raise ValueError("kwtree's full-text recall has no AND mode; only 'or'")
        return [hit.info.metadata["doc"] for hit in self.tree.recall(qtext, k=K, mode="bm25", min_score=0)]

    def count(self) -> int:
        return int(self.tree.tree_metrics()["infos"])

    def close(self) -> None:
        """Wait until every write's vector is stored (the peers' stores hold every vector
        when their add() returns), then close the tree."""
        self.tree.wait_indexed()
        self.tree.close()


def _hnsw_config() -> dict[str, Any]:
    from kwtree.stores import vector_graph, vectors

    return {"space": vector_graph.HNSW_SPACE, "M": vector_graph.HNSW_M,
            "ef_construction": vector_graph.HNSW_EF_CONSTRUCTION, "ef_search": vectors.DEFAULT_EF}
