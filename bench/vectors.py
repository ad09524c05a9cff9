"""Vector search benchmark: kwtree's VectorStore (hnswlib, cosine, M=16, ef_construction=200)
against exact numpy brute force on the same vectors and queries.

Data as /work/shared/baselines/hnsw_bench.py with DATA=lowrank: N vectors of dim 384, a
32-d latent Gaussian projected to 384-d plus 10% noise, L2-normalised, fixed seed; the
queries are drawn the same way (same projection). Ground truth is exact top-10 by cosine.

Figures:
- build, incremental: ``VectorStore.add`` in batches of --batch rows, each batch inserted into
  the live index (``warm_up()`` after each add, so the index exists as soon as the store
  passes ``exact_below`` rows);
- build, bulk: the same adds into a fresh store with no index (appends only), then the first
  search, which builds the index from vectors.f32;
- search: ``VectorStore.search(q, 10)`` one query at a time, p50 / p99 and recall@10 against
  the exact top 10; brute force: ``X @ q`` + ``argpartition`` + sort of the top 10 on an
  in-memory float32 array (the baseline of the target, timed as hnsw_bench.py does), p50 /
  p99 on the same queries;
- filtered search: ``accept`` rejects half of the entities (a cheap Python predicate), recall
  against the exact filtered top 10;
- close (saves hnsw.bin), reopen: open + ``warm_up()`` (loads the persisted index) + first
  search.

Targets (issue): recall@10 >= 0.95 and p50 >= 10x faster than brute force.

Usage: .venv/bin/python bench/vectors.py [--n 100000] [--queries 1000] [--batch 1000] [--dir DIR]
Prints a markdown table; writes nothing but its scratch store, which it deletes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import hnswlib
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kwtree.stores.vectors import DEFAULT_EF, DEFAULT_EXACT_BELOW, VectorStore  # noqa: E402 (this checkout's kwtree)

DIM, LATENT, K, SEED = 384, 32, 10, 0


def low_rank(n: int, n_queries: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Rows and queries as hnsw_bench.py's DATA=lowrank."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((LATENT, DIM), dtype=np.float32)

    def draw(m: int) -> np.ndarray:
        x = rng.standard_normal((m, LATENT), dtype=np.float32) @ w
        x += (0.1 * np.linalg.norm(x, axis=1, keepdims=True) / np.sqrt(DIM)
              * rng.standard_normal((m, DIM), dtype=np.float32))
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    return draw(n), draw(n_queries)


def exact_top(x: np.ndarray, queries: np.ndarray, mask: np.ndarray | None = None) -> list[set[int]]:
    """Exact top-K row sets per query, in chunks (a full Q @ X.T would need 400 MB)."""
    out: list[set[int]] = []
    for start in range(0, len(queries), 100):
        scores = queries[start:start + 100] @ x.T
        if mask is not None:
            scores[:, ~mask] = -np.inf
        out.extend(set(row.tolist()) for row in np.argpartition(-scores, K, axis=1)[:, :K])
    return out


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def brute_force(x: np.ndarray, q: np.ndarray) -> float:
    t = time.perf_counter()
    s = x @ q
    idx = np.argpartition(-s, K)[:K]
    idx[np.argsort(-s[idx])]
    return time.perf_counter() - t


def timed_searches(store: VectorStore, queries: np.ndarray, truth: list[set[int]],
                   accept=None) -> tuple[list[float], float]:
    lat, found = [], 0
    for q, exact in zip(queries, truth, strict=True):
        t = time.perf_counter()
        hits = store.search(q, K, accept)
        lat.append(time.perf_counter() - t)
        found += len(exact & {int(e) for e, _ in hits})
    return lat, found / (len(queries) * K)


def run(n: int, n_queries: int, batch: int, scratch: Path) -> dict:
    x, queries = low_rank(n, n_queries)
    keys = [(str(i), "h") for i in range(n)]  # entity id = row number, for recall
    truth = exact_top(x, queries)
    half = np.arange(n) % 2 == 0
    truth_half = exact_top(x, queries[:200], half)
    out: dict = {}

    bulk_dir = scratch / "bulk"
    t = time.perf_counter()
    with VectorStore(bulk_dir, "bench", DIM) as store:
        for start in range(0, n, batch):
            store.add(keys[start:start + batch], x[start:start + batch])
        out["append_s"] = time.perf_counter() - t
        t = time.perf_counter()
        store.search(queries[0], K)
        out["bulk_build_s"] = time.perf_counter() - t
    shutil.rmtree(bulk_dir)

    store_dir = scratch / "incremental"
    store = VectorStore(store_dir, "bench", DIM)
    t = time.perf_counter()
    for start in range(0, n, batch):
        store.add(keys[start:start + batch], x[start:start + batch])
        store.warm_up()
    out["incremental_build_s"] = time.perf_counter() - t
    store.search(queries[0], K)  # warm caches before timing

    out["search"], out["recall"] = timed_searches(store, queries, truth)
    # A loop of its own, as hnsw_bench.py: interleaving it with the store's searches let
    # numpy's BLAS threads fall asleep between calls and inflated its p50 several times.
    out["brute"] = [brute_force(x, q) for q in queries]
    out["filtered"], out["filtered_recall"] = timed_searches(
        store, queries[:200], truth_half, lambda entity_id, _h: int(entity_id) % 2 == 0)

    t = time.perf_counter()
    store.close()
    out["close_s"] = time.perf_counter() - t
    out["index_mb"] = (store_dir / "hnsw.bin").stat().st_size / 1e6
    out["vectors_mb"] = (store_dir / "vectors.f32").stat().st_size / 1e6

    t = time.perf_counter()
    store = VectorStore(store_dir, "bench", DIM)
    out["open_s"] = time.perf_counter() - t
    t = time.perf_counter()
    store.warm_up()
    out["load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    store.search(queries[1], K)
    out["first_search_s"] = time.perf_counter() - t
    out["loaded_rows"] = store.stats().loaded_rows
    store.close()
    return out


def markdown(out: dict, n: int, n_queries: int, batch: int) -> str:
    def p(name: str, q: float) -> str:
        return f"{pct(out[name], q) * 1e3:.3f}"

    speedup = pct(out["brute"], 0.5) / pct(out["search"], 0.5)
    recall = out["recall"]
    rows = [
        (f"build, incremental (add in batches of {batch:,}, index live)", f"{out['incremental_build_s']:.1f} s"),
        ("build, bulk: appends only", f"{out['append_s']:.2f} s"),
        ("build, bulk: first search builds the index from vectors.f32", f"{out['bulk_build_s']:.1f} s"),
        ("VectorStore.search p50 / p99", f"{p('search', 0.5)} / {p('search', 0.99)} ms"),
        ("numpy brute force p50 / p99", f"{p('brute', 0.5)} / {p('brute', 0.99)} ms"),
        ("speed-up at p50 (target >= 10x)", f"**{speedup:.1f}x** ({'met' if speedup >= 10 else 'MISSED'})"),
        ("recall@10 vs brute force (target >= 0.95)", f"**{recall:.4f}** ({'met' if recall >= 0.95 else 'MISSED'})"),
        ("search, accept rejects half the entities: p50 / p99", f"{p('filtered', 0.5)} / {p('filtered', 0.99)} ms"),
        ("recall@10 of that filtered search (200 queries)", f"{out['filtered_recall']:.4f}"),
        (f"close: save hnsw.bin ({out['index_mb']:.0f} MB; vectors.f32 is {out['vectors_mb']:.0f} MB)",
         f"{out['close_s']:.2f} s"),
        ("reopen: open (reads keys.jsonl)", f"{out['open_s'] * 1e3:.0f} ms"),
        (f"reopen: load the persisted index (CRC + hnswlib, {out['loaded_rows']:,} rows)",
         f"{out['load_s'] * 1e3:.0f} ms"),
        ("reopen: first search", f"{out['first_search_s'] * 1e3:.2f} ms"),
    ]
    header = [
        f"### Vector search: {n:,} x {DIM} low-rank vectors, {n_queries:,} queries, k={K}",
        "",
        (f"hnswlib {getattr(hnswlib, '__version__', '0.8.0')}, numpy {np.__version__}, {os.cpu_count()} CPUs; "
         f"M=16, ef_construction=200, ef={DEFAULT_EF}, exact below {DEFAULT_EXACT_BELOW:,} rows."),
        "",
        "| figure | value |",
        "|---|---|",
    ]
    return "\n".join(header + [f"| {name} | {value} |" for name, value in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--dir", type=Path, default=None, help="scratch parent directory")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="kwtree-vectors-", dir=args.dir))
    try:
        out = run(args.n, args.queries, args.batch, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(markdown(out, args.n, args.queries, args.batch))


if __name__ == "__main__":
    main()
