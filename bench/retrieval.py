"""Recall speed through the public API at 10,000 and 100,000 infos, against baselines in the same run.

At each size N (the first N docs of the shared synthetic corpus, /work/shared/baselines/corpus.py:
docs of 25–35 Zipf-drawn words, two-word queries):

- BM25: ``tree.recall(q, k=10, mode="bm25")`` against SQLite FTS5 (``MATCH 'a OR b' ORDER BY
  bm25 LIMIT 10``) on the same docs and queries. Target: kwtree's median at most 0.2x FTS5's.
- Vectors: the same texts embedded by the default embedder; the vector store's top 10 against
  exact numpy brute force (``X @ q`` + argpartition) on the same stored vectors: recall@10 and
  latency of both, and ``tree.recall(q, mode="vector")`` end to end against the same brute force,
  then the same queries again (their vectors from the tree's cache of query vectors).
  Targets: recall@10 >= 0.95, at least 10x faster than brute force.
- Hybrid: ``tree.recall(q, k=10)`` (bm25 + vectors + tree) against the FTS5 query plus the
  brute-force scan: per query, the sum of the two baselines' times, each from its own pass (timed
  in one loop, the FTS5 query let numpy's BLAS threads fall asleep and slowed the scan).

The baselines are handed the query's vector (embedded beforehand); kwtree's ``recall`` embeds
it inside the time measured. Then the vector figures again on 100k real-model vectors of real
sentences (``bench/real_vectors.py``, cached; skipped when not cached). Every latency is kept
raw (ms) in the result; the markdown gives median / p90 / p99 / max, the ratio of medians to
the baseline, and how each median grows from the smallest N to the largest.

    .venv/bin/python bench/retrieval.py [--docs N] [--queries N] [--sizes N ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kwtree import KeywordTree  # noqa: E402
from kwtree.caches.embed import embed_queries  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fulltext  # noqa: E402
import real_vectors  # noqa: E402
from stats import cell, growth, summary  # noqa: E402

CORPUS = ROOT.parent / "shared" / "baselines" / "corpus.py"
SMALLEST = 10_000
VECTOR_QUERIES, WARM_UP = 200, 50
#: (kwtree figure, its baseline) per table row, in order.
PAIRS = (("bm25", "fts5"), ("hnsw", "brute"), ("recall_vector", "brute"), ("recall_vector_again", "brute"),
         ("hybrid", "fts5_brute"))


def _corpus():
    spec = importlib.util.spec_from_file_location("shared_corpus", CORPUS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ms(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return 1000 * (time.perf_counter() - started)


def _figures(samples: dict[str, list[float]]) -> dict:
    """Summaries (ms) of every latency and the raw samples, rounded to 0.1 µs."""
    return {"ms": {name: summary(values) for name, values in samples.items()},
            "raw_ms": {name: [round(v, 4) for v in values] for name, values in samples.items()}}


def run(n_docs: int = 100_000, n_queries: int = 1_000, work: Path | None = None,
        sizes: tuple[int, ...] | None = None) -> dict:
    """The figures at each of ``sizes`` (default: 10,000 and ``n_docs``), then on real vectors."""
    if not CORPUS.exists():
        return {"skipped": f"{CORPUS} not found"}
    corpus = _corpus()
    docs = corpus.docs()
    queries = corpus.queries()[:n_queries]
    sizes = tuple(sorted(set(sizes or (min(SMALLEST, n_docs), n_docs))))
    result: dict = {"queries": len(queries), "sizes": [measure(docs[:n], queries, work) for n in sizes]}
    result["real_vector"] = run_real(n_docs, work)
    return result


def measure(docs: list[str], queries: list[tuple[str, str]], work: Path | None = None) -> dict:
    """Every figure on one corpus size: kwtree and its baselines on the same docs and queries."""
    result: dict = {"docs": len(docs)}
    samples: dict[str, list[float]] = {}
    texts = [f"{a} {b}" for a, b in queries]
    n_vector = max(1, min(VECTOR_QUERIES, len(texts) - WARM_UP))
    with tempfile.TemporaryDirectory(dir=work) as directory:
        con, result["fts5_build_s"] = fulltext.fts5_build(docs, Path(directory) / "fts.db")
        tree = KeywordTree(Path(directory) / "tree", durability="none", worker=False)
        try:
            samples["fts5"] = [_ms(lambda a=a, b=b: con.execute(fulltext.FTS5_SQL, (f"{a} OR {b}",)).fetchall())
                               for a, b in queries]
            started = time.perf_counter()
            for start in range(0, len(docs), 10_000):
                tree.batch_create_infos([{"content": text} for text in docs[start : start + 10_000]])
            result["load_s"] = time.perf_counter() - started
            started = time.perf_counter()
            tree.recall("warm up", mode="bm25")  # the first search indexes the log's infos
            result["fulltext_build_s"] = time.perf_counter() - started
            samples["bm25"] = [_ms(lambda q=q: tree.recall(q, k=10, mode="bm25", min_score=0)) for q in texts]

            started = time.perf_counter()
            tree.wait_indexed()  # worker=False: embeds the outbox inline
            result["embed_s"] = time.perf_counter() - started
            vector = vector_figures(tree, texts[:n_vector], texts[n_vector : n_vector + WARM_UP])
            samples.update(vector.pop("samples"))
            result.update(vector)
            tree._caches.vectors.queries.clear()  # the hybrid pass embeds its queries, as a new question does
            samples["hybrid"] = [_ms(lambda q=q: tree.recall(q, k=10, min_score=0)) for q in texts[:n_vector]]
            # The naive hybrid: the FTS5 query and the brute-force scan, each at its own pass's speed.
            samples["fts5_brute"] = [fts + brute for fts, brute in zip(samples["fts5"], samples["brute"], strict=False)]
        finally:
            tree.close()
            con.close()
    return {**result, **_figures(samples)}


def vector_figures(tree: KeywordTree, queries: list[str], warmup: list[str]) -> dict:
    """The vector store's top 10 against numpy brute force over the same stored vectors
    (recall@10 and latency samples of each, ms) and ``recall(mode="vector")`` end to end,
    for ``queries``, after a pass of ``warmup`` queries (other ones, so no answer is cached);
    ``samples`` holds the raw latencies, the other keys are single figures.

    Each method runs in its own pass: interleaving them would let every brute-force scan
    (the whole N x d matrix) evict the graph from the CPU caches before the next graph
    query, which measured the graph at twice its cost.
    """
    indexes = tree._caches
    store = indexes.vectors.store
    started = time.perf_counter()
    store.warm_up()
    hnsw_build_s = time.perf_counter() - started
    matrix = np.fromfile(store.directory / "vectors.f32", dtype=np.float32).reshape(-1, store.dim)
    ids = [entity_id for entity_id, _ in store._rows.every_key()]  # row order, as vectors.f32
    for vector in embed_queries(indexes.vectors.embedder, warmup):
        store.search(vector, 10)
    vectors = embed_queries(indexes.vectors.embedder, queries)
    hnsw_ms, found = [], []
    for vector in vectors:
        started = time.perf_counter()
        found.append(store.search(vector, 10))
        hnsw_ms.append(1000 * (time.perf_counter() - started))
    brute_ms, exact = [], []
    for vector in vectors:
        started = time.perf_counter()
        scores = matrix @ vector
        top = np.argpartition(-scores, 10)[:10]
        brute_ms.append(1000 * (time.perf_counter() - started))
        exact.append({ids[row] for row in top})
    hits = sum(len(truth & {entity_id for entity_id, _ in got}) / 10 for truth, got in zip(exact, found, strict=True))
    for query in warmup:
        tree.recall(query, k=10, mode="vector", min_score=0)
    end_to_end = [_ms(lambda q=q: tree.recall(q, k=10, mode="vector", min_score=0)) for q in queries]
    again = [_ms(lambda q=q: tree.recall(q, k=10, mode="vector", min_score=0)) for q in queries]
    return {
        "recall_at_10": hits / len(vectors),
        "hnsw_build_s": hnsw_build_s,
        "dim": store.dim,
        "model": indexes.vectors.embedder.model,
        "samples": {"hnsw": hnsw_ms, "brute": brute_ms, "recall_vector": end_to_end, "recall_vector_again": again},
    }


def run_real(n_docs: int, work: Path | None = None) -> dict:
    """The vector figures on real-model embeddings of real sentences (bench/real_vectors.py)."""
    embedder = real_vectors.load(n_docs)
    if isinstance(embedder, str):
        return {"skipped": embedder}
    docs, questions = real_vectors.texts(n_docs)
    with tempfile.TemporaryDirectory(dir=work) as directory:
        tree = KeywordTree(Path(directory) / "tree", durability="none", worker=False, embedder=embedder)
        for start in range(0, len(docs), 10_000):
            tree.batch_create_infos([{"content": text} for text in docs[start : start + 10_000]])
        tree.wait_indexed()
        figures = vector_figures(tree, questions[:VECTOR_QUERIES], questions[VECTOR_QUERIES : VECTOR_QUERIES + WARM_UP])
        tree.close()
    return {**figures, **_figures(figures.pop("samples")), "docs": len(docs)}


_WHAT = {
    "bm25": ("`recall(mode=\"bm25\")`", "SQLite FTS5 OR query"),
    "hnsw": ("vector store top 10", "numpy brute force"),
    "recall_vector": ("`recall(mode=\"vector\")` end to end (top 10 of 50 fused with the tree's scores)",
                      "the same brute force"),
    "recall_vector_again": ("`recall(mode=\"vector\")` again, the same queries (vectors from the query cache)",
                            "the same brute force"),
    "hybrid": ("`recall()` hybrid (bm25 + vectors + tree)", "FTS5 OR query + brute force (per-query sum)"),
}


def _row(n: str, figures: dict, ours: str, theirs: str, note: str = "") -> str:
    mine, base = figures["ms"][ours], figures["ms"][theirs]
    ratio = mine["median"] / base["median"]
    faster = "" if ours == "bm25" else f" ({1 / ratio:.1f}x faster)" if ratio < 1 else f" ({ratio:.1f}x slower)"
    return (f"| {n} | {_WHAT[ours][0]}{note} | {cell(mine, 2)} | {_WHAT[ours][1]}: {cell(base, 2)} | "
            f"**{ratio:.3f}x**{faster}{_target(ours, ratio)} |")


def _target(ours: str, ratio: float) -> str:
    if ours == "bm25":
        return f"; target <= 0.2x {'met' if ratio <= 0.2 else 'MISSED'}"
    if ours == "hnsw":
        return f"; target >= 10x faster {'met' if ratio <= 0.1 else 'MISSED'}"
    return ""


def markdown(result: dict) -> str:
    if "skipped" in result:
        return f"### Recall speed\n\nSkipped: {result['skipped']}."
    sizes = result["sizes"]
    first, last = sizes[0], sizes[-1]
    counts = f"n = {first['ms']['bm25']['n']:,} queries for BM25 and FTS5, {first['ms']['hnsw']['n']:,} for the others"
    names = " and ".join(f"{size['docs']:,}" for size in sizes)
    out = [
        f"### Recall speed at {names} infos",
        "",
        f"Shared synthetic corpus (two-word queries, top 10; {counts}), `bench/retrieval.py`. Latencies in ms, "
        "median / p90 / p99 / max; the baselines run on the same docs and queries in the same run and are handed "
        "the query's vector, which `recall()` computes inside its time. Each method is timed in its own pass; the "
        "hybrid's baseline is, query by query, the FTS5 time plus the brute-force time.",
        "",
        "| N | what | kwtree, ms | baseline in the same run, ms | kwtree ÷ baseline (medians) |",
        "|---:|---|---|---|---|",
    ]
    for size in sizes:
        n = f"{size['docs']:,}"
        for ours, theirs in PAIRS:
            if ours not in size["ms"]:
                continue  # a result stored before the row was measured (bench/results/retrieval.json)
            note = f", recall@10 **{size['recall_at_10']:.3f}** (target >= 0.95)" if ours == "hnsw" else ""
            out.append(_row(n, size, ours, theirs, note))
    real = result.get("real_vector", {"skipped": "not run"})
    if "skipped" not in real:
        for ours, theirs in [pair for pair in PAIRS[1:4] if pair[0] in real["ms"]]:
            note = f", recall@10 **{real['recall_at_10']:.3f}**" if ours == "hnsw" else ""
            out.append(_row(f"{real['docs']:,}", real, ours, theirs, f" — real e5 vectors ({real['dim']}-d){note}"))
    out += ["", "Setup times (one run each): " + "; ".join(
        f"{size['docs']:,} infos: load {size['load_s']:.1f} s (batches of 10,000, durability none), full-text "
        f"index on the first search {size['fulltext_build_s']:.1f} s, embedding ({size['dim']}-d default embedder) "
        f"{size['embed_s']:.1f} s, hnswlib graph {size['hnsw_build_s']:.1f} s; FTS5 build {size['fts5_build_s']:.1f} s"
        for size in sizes) + "."]
    if len(sizes) > 1:
        factor = last["docs"] / first["docs"]
        out += ["", f"Scaling from {first['docs']:,} to {last['docs']:,} infos (medians):", ""]
        for ours, theirs in PAIRS:
            if ours.startswith("recall_vector"):
                continue  # its baseline is the brute force, stated on the row above
            out.append(f"- {_WHAT[ours][0]}: kwtree "
                       f"{growth(first['ms'][ours]['median'], last['ms'][ours]['median'], factor, 'the infos')}; "
                       f"{_WHAT[ours][1]} "
                       f"{growth(first['ms'][theirs]['median'], last['ms'][theirs]['median'], factor, 'the infos')}.")
        end_to_end = growth(first["ms"]["recall_vector"]["median"], last["ms"]["recall_vector"]["median"], factor,
                            "the infos")
        out.append(f"- {_WHAT['recall_vector'][0]}: {end_to_end}; "
                   f"recall@10 of the vector store {first['recall_at_10']:.3f} -> {last['recall_at_10']:.3f}.")
    out += _real_note(real)
    return "\n".join(out)


def _real_note(real: dict) -> list[str]:
    if "skipped" in real:
        return ["", f"Real-model vectors: skipped ({real['skipped']})."]
    return [
        "",
        "The synthetic corpus is random words: the default embedder's vectors of it spread like random data, the worst "
        "case for a graph index. The real-vector rows use multilingual-e5-small (the `.[e5]` extra) on "
        f"{real['docs']:,} real sentences (a LoCoMo turn joined with a WordNet gloss) with LoCoMo's questions as "
        f"queries (`bench/real_vectors.py`; hnswlib graph built in {real['hnsw_build_s']:.0f} s). Each method is "
        f"timed in its own pass after {WARM_UP} warm-up queries (other questions): timed in turns, every brute-force "
        "scan of the whole matrix evicted the graph from the CPU caches and the graph measured at twice its cost.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="default: 10000 and --docs")
    args = parser.parse_args(argv)
    print(markdown(run(args.docs, args.queries, sizes=tuple(args.sizes) if args.sizes else None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
