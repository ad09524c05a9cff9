"""Full-text benchmark: kwtree's FullTextIndex against SQLite FTS5 on the shared corpus.

The corpus is /work/shared/baselines/corpus.py (imported by path, not copied): 100,000 docs
of 25-35 Zipf-drawn words and 1,000 two-word queries. Each run indexes it into a fresh
FullTextIndex (every doc an ``info``; ``upsert`` per doc, then one ``commit``) and a fresh
FTS5 table (unicode61, one transaction, then ``optimize``), then times each query, top 10
by BM25: ``FullTextIndex.search(q, "info", 10)`` (ids included) against FTS5's
``WHERE docs MATCH 'a OR b' ORDER BY bm25(docs) LIMIT 10``, as fts_bench.py does. It also
times read-your-writes: one ``upsert`` and then a ``search``, which commits it.

Target: kwtree's p50 at most 0.2x FTS5's p50 (OR queries).

Usage: .venv/bin/python bench/fulltext.py [--runs 3] [--docs 100000] [--corpus PATH] [--dir DIR]
Prints a markdown table: query latencies are median / p90 / p99 / max over every query of every
run (ms; the raw samples are in the result, ``raw_ms``), index times over the runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import cell, summary

from kwtree.stores.fulltext import FullTextIndex

DEFAULT_CORPUS = Path("/work/shared/baselines/corpus.py")
RYW_ROUNDS = 20


def load_corpus(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("fts_corpus", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import the corpus generator {path}; pass --corpus PATH")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def kwtree_run(docs: list[str], queries: list[tuple[str, str]], scratch: Path) -> dict:
    directory = scratch / "fulltext"
    index = FullTextIndex(directory)
    started = time.perf_counter()
    for n, body in enumerate(docs):
        index.upsert("info", str(n), body)
    index.commit("0" * 32)
    index_s = time.perf_counter() - started
    latencies, results = [], []
    for a, b in queries:
        t = time.perf_counter()
        hits = index.search(f"{a} {b}", "info", 10)
        latencies.append((time.perf_counter() - t) * 1e3)
        results.append({entity_id for entity_id, _ in hits})
    ryw = []
    for n in range(RYW_ROUNDS):
        t = time.perf_counter()
        index.upsert("info", f"new{n}", f"freshword{n} {docs[n]}")
        found = index.search(f"freshword{n}", "info", 10)
        ryw.append((time.perf_counter() - t) * 1e3)
        if [entity_id for entity_id, _ in found] != [f"new{n}"]:
            raise AssertionError(f"read-your-writes failed in round {n}: {found}")
    size = dir_mb(directory)
    index.close()
    return {"index_s": index_s, "size_mb": size, "query": summary(latencies), "ryw": summary(ryw),
            "raw_ms": {"query": latencies, "ryw": ryw},
            "hits": sum(map(len, results)) / len(results), "results": results}


def fts5_build(docs: list[str], path: Path) -> tuple[sqlite3.Connection, float]:
    """An FTS5 table of ``docs`` (rowid = position) at ``path``, and the seconds it took."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("CREATE VIRTUAL TABLE docs USING fts5(body, tokenize='unicode61')")
    started = time.perf_counter()
    con.execute("BEGIN")
    con.executemany("INSERT INTO docs(rowid, body) VALUES (?, ?)", enumerate(docs))
    con.execute("COMMIT")
    con.execute("INSERT INTO docs(docs) VALUES('optimize')")
    return con, time.perf_counter() - started


FTS5_SQL = "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT 10"


def fts5_run(docs: list[str], queries: list[tuple[str, str]], scratch: Path) -> dict:
    path = scratch / "fts.db"
    con, index_s = fts5_build(docs, path)
    latencies, results = [], []
    for a, b in queries:
        t = time.perf_counter()
        rows = con.execute(FTS5_SQL, (f"{a} OR {b}",)).fetchall()
        latencies.append((time.perf_counter() - t) * 1e3)
        results.append({str(rowid) for (rowid,) in rows})
    con.close()
    return {"index_s": index_s, "size_mb": os.path.getsize(path) / 1e6, "query": summary(latencies),
            "raw_ms": {"query": latencies}, "hits": sum(map(len, results)) / len(results), "results": results}


def run(docs: list[str], queries: list[tuple[str, str]], runs: int, base: Path | None) -> dict:
    out: dict[str, list[dict]] = {"kwtree": [], "fts5": []}
    for _ in range(runs):
        for name, engine in (("kwtree", kwtree_run), ("fts5", fts5_run)):
            scratch = Path(tempfile.mkdtemp(prefix="kwtree-fts-", dir=base))
            try:
                out[name].append(engine(docs, queries, scratch))
            finally:
                shutil.rmtree(scratch)
    return out


def median(rows: list[dict], *keys: str) -> float:
    values = []
    for row in rows:
        for key in keys:
            row = row[key]
        values.append(row)
    return statistics.median(values)


def pooled(rows: list[dict], key: str) -> dict[str, float]:
    """stats.summary of one latency over every run's raw samples (ms)."""
    return summary([value for row in rows for value in row["raw_ms"][key]])


def index_s(rows: list[dict]) -> dict[str, float]:
    return summary([row["index_s"] for row in rows])


def markdown(out: dict, n_docs: int, n_queries: int) -> str:
    kw, fts = out["kwtree"], out["fts5"]
    overlap = statistics.mean(
        len(a & b) / max(1, len(b)) for a, b in zip(kw[0]["results"], fts[0]["results"], strict=True)
    )
    lines = [
        (f"### Full text: {n_docs:,} docs, {n_queries:,} two-word OR queries, top 10 "
         f"({len(kw)} runs)"),
        "",
        "| engine | index, s (median / p90 / p99 / max) | size (MB) | query, ms (median / p90 / p99 / max) | "
        "queries | avg hits |",
        "|---|---|---:|---|---:|---:|",
    ]
    for name, rows in (("kwtree FullTextIndex.search", kw), ("SQLite FTS5 bm25", fts)):
        query = pooled(rows, "query")
        lines.append(
            f"| {name} | {cell(index_s(rows), 2)} | {median(rows, 'size_mb'):.1f} | "
            f"{cell(query, 3)} | {query['n']:,} | {median(rows, 'hits'):.1f} |"
        )
    ratio = pooled(kw, "query")["median"] / pooled(fts, "query")["median"]
    ryw = pooled(kw, "ryw")
    lines += [
        "",
        f"- kwtree ÷ FTS5, medians of the query times = **{ratio:.3f}x** "
        f"(target <= 0.2x: {'met' if ratio <= 0.2 else 'MISSED'}); index time "
        f"{index_s(kw)['median'] / index_s(fts)['median']:.2f}x FTS5's (medians).",
        f"- Top-10 overlap with FTS5 (run 1): {overlap:.1%} of FTS5's ids.",
        (f"- Read-your-writes (upsert + search that commits it, {RYW_ROUNDS} rounds a run): "
         f"{cell(ryw, 1)} ms (median / p90 / p99 / max, n = {ryw['n']})."),
        "- kwtree index time includes `normalize.terms` in Python and the commit.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--docs", type=int, default=None, help="use only the first N docs")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--dir", type=Path, default=None, help="scratch parent directory")
    args = parser.parse_args()
    corpus = load_corpus(args.corpus)
    docs = corpus.docs()[: args.docs]
    queries = [(str(a), str(b)) for a, b in corpus.queries()]
    out = run(docs, queries, args.runs, args.dir)
    print(markdown(out, len(docs), len(queries)))


if __name__ == "__main__":
    main()
