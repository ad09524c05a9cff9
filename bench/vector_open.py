"""What opening a vector store costs a reader (issue 25, B15): every CLI read opens the store
read-only, loads the saved hnswlib graph, checks it against the rows it was built from, and
searches once.

Run by hand: ``python bench/vector_open.py [ROWS ...] [--runs N]`` (default 10000 and 100000
rows, 5 runs). For each size it writes a store of 512-d low-rank unit vectors (the default
embedder's dimension) with ``VectorStore.add`` in batches of 1,000, builds and saves the graph
once, then times, in this process, ``runs`` read-only opens: the open (reads keys.jsonl), the
load of the saved graph (``warm_up``: the checks of hnsw.json against the rows, hnsw.bin's CRC,
hnswlib's load) and the first search. It prints the median and range of each. Run it from two
checkouts (``PYTHONPATH=<checkout> python bench/vector_open.py``) to compare them: it uses only
the store's public methods. Where the store has ``mend`` (issue 25 on), it also times what a
writer's repair scan adds at each open: ``mend(graph=False)``, one pass over every row's vector
against the check its key line records (in the worker thread, off the read path).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from kwtree.stores.vectors import VectorStore

DIM, LATENT, BATCH, SEED = 512, 32, 1_000, 0


def low_rank(n: int, rng: np.random.Generator, w: np.ndarray) -> np.ndarray:
    x = rng.standard_normal((n, LATENT), dtype=np.float32) @ w
    x += 0.1 * np.linalg.norm(x, axis=1, keepdims=True) / np.sqrt(DIM) * rng.standard_normal((n, DIM), dtype=np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def build(directory: Path, rows: int) -> np.ndarray:
    """A store of ``rows`` rows with its graph saved; returns a query."""
    rng = np.random.default_rng(SEED)
    w = rng.standard_normal((LATENT, DIM), dtype=np.float32)
    with VectorStore(directory, "bench", DIM) as store:
        for start in range(0, rows, BATCH):
            count = min(BATCH, rows - start)
            store.add([(f"{i:032x}", f"{i:032x}") for i in range(start, start + count)], low_rank(count, rng, w))
        store.persist()
    return low_rank(1, rng, w)[0]


def measure(directory: Path, query: np.ndarray, runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"open": [], "load": [], "search": [], "total": []}
    for _ in range(runs):
        t0 = time.perf_counter()
        store = VectorStore(directory, "bench", DIM, writable=False)
        t1 = time.perf_counter()
        store.warm_up()
        t2 = time.perf_counter()
        store.search(query, 10)
        t3 = time.perf_counter()
        assert store.stats().loaded_rows == len(store), "the saved graph was not loaded"
        store.close()
        times["open"].append(t1 - t0)
        times["load"].append(t2 - t1)
        times["search"].append(t3 - t2)
        times["total"].append(t3 - t0)
    if hasattr(VectorStore, "mend"):
        times["writer's row check"] = []
        for _ in range(runs):
            with VectorStore(directory, "bench", DIM) as store:
                t0 = time.perf_counter()
                store.mend(graph=False)
                times["writer's row check"].append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for rows in args.rows:
        scratch = Path(tempfile.mkdtemp(prefix="kwtree-vector-open-"))
        try:
            query = build(scratch / "store", rows)
            times = measure(scratch / "store", query, args.runs)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        cells = [f"{name} {statistics.median(v) * 1e3:.0f} ms ({min(v) * 1e3:.0f}-{max(v) * 1e3:.0f})"
                 for name, v in times.items()]
        print(f"{rows:,} rows, {args.runs} read-only opens: " + ", ".join(cells))


if __name__ == "__main__":
    main()
