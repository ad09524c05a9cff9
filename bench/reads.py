"""Read latency at several tree sizes, next to SQLite answering the same questions.

A tree of N keywords (each new keyword goes under a random one of the keywords made so far,
so the tree is about as deep as a real one grows: depth ~ ln N) is built with
``batch_create_keywords``; the same rows go into a SQLite table (id primary key, parent and
normalised-name indexes). Then, for the same random keywords, each call is timed one at a
time: ``get_keyword`` against a primary-key SELECT, ``get_children`` against an indexed
SELECT on the parent, ``get_path`` against a recursive CTE to the root, and
``find_keywords`` (the exact search) against an indexed SELECT on the normalised name.
Samples are in microseconds; the markdown gives median / p90 / p99 / max and the ratio of
medians, and says how each figure grows with N from the numbers measured.

    .venv/bin/python bench/reads.py [--sizes 10000 100000] [--calls 2000]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import growth, summary  # noqa: E402

from kwtree import KeywordTree, normalize_name  # noqa: E402

CALLS = ("get_keyword", "get_children", "get_path", "find_keywords")
_PATH_SQL = """
WITH RECURSIVE up(id, parent, depth) AS (
    SELECT id, parent, 0 FROM kw WHERE id = ?
    UNION ALL SELECT kw.id, kw.parent, up.depth + 1 FROM kw JOIN up ON kw.id = up.parent
) SELECT id, name, parent FROM kw WHERE id IN (SELECT id FROM up)
"""


def _build(work: Path, n: int, seed: int) -> tuple[KeywordTree, sqlite3.Connection, list[str]]:
    rng = random.Random(seed)
    tree = KeywordTree(work / "tree", durability="none", worker=False)
    ids = ["root"]
    rows: list[tuple[str, str, str, str]] = []
    while len(ids) <= n:
        specs = []
        for _ in range(min(10_000, len(ids), n + 1 - len(ids))):  # parents come from earlier batches
            specs.append({"name": f"topic {len(ids) + len(specs)}", "parent_id": ids[rng.randrange(len(ids))]})
        made = tree.batch_create_keywords(specs)
        ids.extend(k.id for k in made)
        rows.extend((k.id, k.name, k.parent_id or "", normalize_name(k.name)) for k in made)
    con = sqlite3.connect(work / "reads.db", isolation_level=None)
    con.execute("CREATE TABLE kw(id TEXT PRIMARY KEY, name TEXT, parent TEXT, name_key TEXT)")
    con.execute("BEGIN")
    con.execute("INSERT INTO kw VALUES ('root', 'root', NULL, 'root')")
    con.executemany("INSERT INTO kw VALUES (?,?,?,?)", rows)
    con.execute("CREATE INDEX kw_parent ON kw(parent)")
    con.execute("CREATE INDEX kw_name ON kw(name_key)")
    con.execute("COMMIT")
    return tree, con, ids[1:]


def _time_each(call, arguments: list) -> list[float]:
    samples = []
    for argument in arguments:
        started = time.perf_counter()
        call(argument)
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


def measure(n: int, calls: int, work: Path, seed: int = 11) -> dict:
    """Samples (µs) of each read through kwtree and through SQLite, on the same keywords."""
    tree, con, ids = _build(work, n, seed)
    try:
        rng = random.Random(seed + 1)
        chosen = [ids[rng.randrange(len(ids))] for _ in range(calls)]
        names = [tree.get_keyword(kid).name for kid in chosen]
        ours = {
            "get_keyword": _time_each(tree.get_keyword, chosen),
            "get_children": _time_each(tree.get_children, chosen),
            "get_path": _time_each(tree.get_path, chosen),
            "find_keywords": _time_each(tree.find_keywords, names),
        }
        theirs = {
            "get_keyword": _time_each(
                lambda kid: con.execute("SELECT * FROM kw WHERE id = ?", (kid,)).fetchone(), chosen),
            "get_children": _time_each(
                lambda kid: con.execute("SELECT * FROM kw WHERE parent = ?", (kid,)).fetchall(), chosen),
            "get_path": _time_each(lambda kid: con.execute(_PATH_SQL, (kid,)).fetchall(), chosen),
            "find_keywords": _time_each(
                lambda name: con.execute("SELECT * FROM kw WHERE name_key = ?", (normalize_name(name),)).fetchall(),
                names),
        }
        depth = sum(len(tree.get_path(kid)) for kid in chosen) / len(chosen)
    finally:
        tree.close()
        con.close()
    return {"n": n, "calls": calls, "mean_path_length": depth,
            "kwtree_us": {name: summary(values) for name, values in ours.items()},
            "sqlite_us": {name: summary(values) for name, values in theirs.items()},
            "raw_us": {"kwtree": {k: [round(v, 2) for v in s] for k, s in ours.items()},
                       "sqlite": {k: [round(v, 2) for v in s] for k, s in theirs.items()}}}


def run(sizes: tuple[int, ...], calls: int, work: Path | None = None) -> dict:
    results = []
    for n in sizes:
        with tempfile.TemporaryDirectory(dir=work) as directory:
            results.append(measure(n, calls, Path(directory)))
    return {"sizes": results}


def markdown(result: dict) -> str:
    sizes = result["sizes"]
    out = [
        "### Reads: single calls, µs (median / p90 / p99 / max), next to SQLite on the same keywords",
        "",
        "Random keywords of a tree where each keyword went under a random earlier one (`bench/reads.py`); SQLite has "
        "the same rows with primary-key, parent and normalised-name indexes (`get_path`: a recursive CTE).",
        "",
        "| N | call | kwtree | SQLite | kwtree ÷ SQLite (medians) |",
        "|---:|---|---|---|---:|",
    ]
    for size in sizes:
        for name in CALLS:
            ours, theirs = size["kwtree_us"][name], size["sqlite_us"][name]
            out.append(
                f"| {size['n']:,} | `{name}` | {ours['median']:.1f} / {ours['p90']:.1f} / {ours['p99']:.1f} / "
                f"{ours['max']:.0f} | {theirs['median']:.1f} / {theirs['p90']:.1f} / {theirs['p99']:.1f} / "
                f"{theirs['max']:.0f} | **{ours['median'] / theirs['median']:.2f}x** |")
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        factor = last["n"] / first["n"]
        out += ["", f"Scaling from {first['n']:,} to {last['n']:,} keywords (mean path length "
                    f"{first['mean_path_length']:.1f} -> {last['mean_path_length']:.1f}):", ""]
        for name in CALLS:
            kwtree_growth = growth(first["kwtree_us"][name]["median"], last["kwtree_us"][name]["median"],
                                   factor, "the keywords")
            sqlite_growth = growth(first["sqlite_us"][name]["median"], last["sqlite_us"][name]["median"],
                                   factor, "the keywords")
            out.append(f"- `{name}`: kwtree {kwtree_growth}; SQLite {sqlite_growth}.")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--calls", type=int, default=2_000)
    args = parser.parse_args(argv)
    print(markdown(run(tuple(args.sizes), args.calls)))  # bench/run.py --only reads also records it
    return 0


if __name__ == "__main__":
    sys.exit(main())
