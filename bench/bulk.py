"""Bulk loads against SQLite's ``executemany`` in one transaction, interleaved round by round.

- keywords: three batches of ``size`` ``batch_create_keywords`` (one under the root, the later
  ones into a tree that already holds keywords) against ``executemany`` of the same rows into a
  keyword table (primary key, a parent index);
- infos: ``batch_create_infos`` of ``size`` infos of ~120 characters, each linked to one of 100
  keywords, against ``executemany`` into an info table and a link table (primary keys, a
  keyword index on the links), both in one transaction;
- load: ``kwtree load``'s work (``load_outline``: read an outline file of ``size // 10``
  keywords, ``size`` infos and ``size // 10`` relations, add them as one operation) against
  reading the same JSON and the SQLite inserts of every kind (rows counted: keywords + infos +
  links + relations);
- floor (keywords only): the least work any kwtree write of those keywords does in Python: the
  same keyword objects, row dicts and JSON bytes, and the same id, children and name indexes,
  with no checks, no log and no operation around them.

kwtree runs with ``durability="none"`` (SQLite with ``synchronous=OFF``: neither syncs) and the
embedding worker off: what is timed is the write, which returns before its texts are embedded
(``kwtree load`` then waits for the embedding with a progress bar unless ``--no-wait``; that is
the embedder's own cost, in the retrieval suite's table of embedders).

    .venv/bin/python bench/bulk.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))

from stats import summary  # noqa: E402

_SCHEMA = """
PRAGMA journal_mode=WAL;
PRAGMA synchronous=OFF;
CREATE TABLE keyword(id TEXT PRIMARY KEY, name TEXT, parent TEXT, created REAL, version INTEGER);
CREATE INDEX keyword_parent ON keyword(parent);
CREATE TABLE info(id TEXT PRIMARY KEY, content TEXT, source TEXT, created REAL, version INTEGER);
CREATE TABLE link(info TEXT, keyword TEXT, relation TEXT, created REAL, version INTEGER,
                  PRIMARY KEY (info, keyword));
CREATE INDEX link_keyword ON link(keyword);
CREATE TABLE relation(source TEXT, target TEXT, type TEXT, weight REAL, created REAL, version INTEGER,
                      PRIMARY KEY (source, target, type));
CREATE INDEX relation_target ON relation(target);
"""


def _text(rng_index: int) -> str:
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")
    return " ".join(words[(rng_index * 7 + k * 3) % 10] + str(rng_index + k) for k in range(16))[:120]


def _sqlite(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.executescript(_SCHEMA)
    return con


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _uuid() -> str:
    return os.urandom(16).hex()


def _keywords_round(size: int, work: Path, tag: str) -> tuple[list[float], list[float]]:
    from kwtree import KeywordTree

    kwtree_s, sqlite_s = [], []
    with KeywordTree(work / f"kw-{tag}", durability="none", worker=False) as tree:
        for b in range(3):
            specs = [{"name": f"kw {b}-{i}"} for i in range(size)]
            kwtree_s.append(_timed(lambda specs=specs: tree.batch_create_keywords(specs)))
    con = _sqlite(work / f"kw-{tag}.db")
    for b in range(3):
        rows = [(_uuid(), f"kw {b}-{i}", "root", time.time(), 1) for i in range(size)]

        def insert(rows: list = rows) -> None:
            con.execute("BEGIN")
            con.executemany("INSERT INTO keyword VALUES (?,?,?,?,?)", rows)
            con.execute("COMMIT")

        sqlite_s.append(_timed(insert))
    con.close()
    return kwtree_s, sqlite_s


def _floor_round(size: int) -> list[float]:
    import orjson

    from kwtree.models import EMPTY_METADATA, Keyword
    from kwtree.normalize import normalize_name
    from kwtree.writes import new_ids

    keywords: dict[str, Keyword] = {}
    children: list[str] = []
    names: dict[str, str] = {}
    out = []
    for b in range(3):
        specs = [{"name": f"kw {b}-{i}"} for i in range(size)]

        def build(specs: list = specs) -> bytes:
            ts, op = time.time(), "0" * 32
            rows = []
            for kid, spec in zip(new_ids(len(specs)), specs, strict=True):
                name = spec["name"]
                keyword = Keyword(kid, name, (), "root", "", EMPTY_METADATA, 1, ts, ts, False, op, 1)
                rows.append({"op": op, "entity": "keyword", "id": kid, "v": 1, "name": name, "parent_id": "root",
                             "created_at": ts})
                keywords[kid] = keyword
                children.append(kid)
                names[normalize_name(name)] = kid
            return orjson.dumps(rows)

        out.append(_timed(build))
    return out


def _linked_specs(size: int, keyword_ids: list[str], offset: int) -> list[dict]:
    return [{"content": _text(offset + i), "keyword_ids": [keyword_ids[i % len(keyword_ids)]]} for i in range(size)]


def _infos_round(size: int, work: Path, tag: str) -> tuple[float, float]:
    from kwtree import KeywordTree

    with KeywordTree(work / f"info-{tag}", durability="none", worker=False) as tree:
        keyword_ids = [k.id for k in tree.batch_create_keywords([{"name": f"topic {i}"} for i in range(100)])]
        specs = _linked_specs(size, keyword_ids, 0)
        kwtree_s = _timed(lambda: tree.batch_create_infos(specs))
    con = _sqlite(work / f"info-{tag}.db")
    topics = [_uuid() for _ in range(100)]
    now = time.time()
    infos = [(_uuid(), _text(i), "", now, 1) for i in range(size)]
    links = [(info[0], topics[i % 100], "primary", now, 1) for i, info in enumerate(infos)]

    def insert() -> None:
        con.execute("BEGIN")
        con.executemany("INSERT INTO info VALUES (?,?,?,?,?)", infos)
        con.executemany("INSERT INTO link VALUES (?,?,?,?,?)", links)
        con.execute("COMMIT")

    sqlite_s = _timed(insert)
    con.close()
    return kwtree_s, sqlite_s


def _outline(size: int, path: Path) -> int:
    """An outline of ``size // 10`` keywords (two levels), ``size`` linked infos and a
    relation from each keyword to the next; its rows."""
    keywords = [{"ref": f"k{i}", "name": f"topic {i}", **({"parent": f"k{i % 10}"} if i >= 10 else {})}
                for i in range(max(size // 10, 10))]
    infos = [{"content": _text(i), "keywords": [f"k{i % len(keywords)}"]} for i in range(size)]
    relations = [{"from": f"k{i}", "to": f"k{(i + 1) % len(keywords)}", "type": "see_also"}
                 for i in range(len(keywords))]
    path.write_text(json.dumps({"keywords": keywords, "infos": infos, "relations": relations}))
    return 2 * len(keywords) + 2 * len(infos)


def _load_round(size: int, work: Path, tag: str) -> tuple[float, float, int]:
    from kwtree import KeywordTree
    from kwtree.cli.outline import load_outline

    outline = work / f"outline-{tag}.json"
    rows = _outline(size, outline)
    with KeywordTree(work / f"load-{tag}", durability="none", worker=False) as tree:
        kwtree_s = _timed(lambda: load_outline(tree, outline))
    con = _sqlite(work / f"load-{tag}.db")

    def insert() -> None:
        data = json.loads(outline.read_text())
        now = time.time()
        ids = {item["ref"]: _uuid() for item in data["keywords"]}
        keyword_rows = [(ids[item["ref"]], item["name"], ids.get(item.get("parent"), "root"), now, 1)
                        for item in data["keywords"]]
        info_rows = [(_uuid(), item["content"], "", now, 1) for item in data["infos"]]
        link_rows = [(info[0], ids[ref], "primary", now, 1)
                     for info, item in zip(info_rows, data["infos"], strict=True) for ref in item["keywords"]]
        relation_rows = [(ids[item["from"]], ids[item["to"]], item["type"], 1.0, now, 1) for item in data["relations"]]
        con.execute("BEGIN")
        con.executemany("INSERT INTO keyword VALUES (?,?,?,?,?)", keyword_rows)
        con.executemany("INSERT INTO info VALUES (?,?,?,?,?)", info_rows)
        con.executemany("INSERT INTO link VALUES (?,?,?,?,?)", link_rows)
        con.executemany("INSERT INTO relation VALUES (?,?,?,?,?,?)", relation_rows)
        con.execute("COMMIT")

    sqlite_s = _timed(insert)
    con.close()
    return kwtree_s, sqlite_s, rows


def run(size: int = 10_000, rounds: int = 5, work: Path | None = None) -> dict:
    """Every figure, ``rounds`` interleaved rounds (rows/s; raw samples included)."""
    samples: dict[str, list[float]] = {name: [] for name in (
        "keywords_kwtree", "keywords_sqlite", "keywords_floor", "infos_kwtree", "infos_sqlite", "load_kwtree",
        "load_sqlite")}
    load_rows = 0
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        path = Path(tmp)
        for r in range(rounds):
            kwtree_s, sqlite_s = _keywords_round(size, path, str(r))
            samples["keywords_kwtree"] += [size / s for s in kwtree_s]
            samples["keywords_sqlite"] += [size / s for s in sqlite_s]
            samples["keywords_floor"] += [size / s for s in _floor_round(size)]
            kwtree_one, sqlite_one = _infos_round(size, path, str(r))
            samples["infos_kwtree"].append(2 * size / kwtree_one)  # rows: an info and its link each
            samples["infos_sqlite"].append(2 * size / sqlite_one)
            kwtree_one, sqlite_one, load_rows = _load_round(size, path, str(r))
            samples["load_kwtree"].append(load_rows / kwtree_one)
            samples["load_sqlite"].append(load_rows / sqlite_one)
    out: dict = {"size": size, "rounds": rounds, "load_rows": load_rows,
                 "rows_per_s": {name: summary(values) for name, values in samples.items()},
                 "raw_rows_per_s": {name: [round(v) for v in values] for name, values in samples.items()}}
    medians = {name: s["median"] for name, s in out["rows_per_s"].items()}
    out["ratios"] = {
        "keywords": medians["keywords_kwtree"] / medians["keywords_sqlite"],
        "keywords_floor": medians["keywords_floor"] / medians["keywords_sqlite"],
        "keywords_to_floor": medians["keywords_kwtree"] / medians["keywords_floor"],
        "infos": medians["infos_kwtree"] / medians["infos_sqlite"],
        "load": medians["load_kwtree"] / medians["load_sqlite"],
    }
    return out


def markdown(results: dict) -> str:
    size, ratios, rates = results["size"], results["ratios"], results["rows_per_s"]
    out = [f"### Bulk loads against SQLite `executemany` in one transaction (rows/s, {results['rounds']} "
           "interleaved rounds)", "",
           "kwtree with `durability=\"none\"` and the embedding worker off, SQLite with `synchronous=OFF` "
           "(neither syncs); the embedding that follows a load is the embedder's cost (see the embedders table). "
           "Floor: the same keyword objects, row dicts, JSON bytes and id, children and name indexes built in a "
           "bare Python loop with no checks, no log and no operation (what any write of them costs here).", "",
           "| load | kwtree (median / p90 / max) | SQLite executemany (median / max) | kwtree ÷ SQLite (medians) |",
           "|---|---|---|---:|"]
    rows = (
        ("keywords", f"{size:,} keywords, 3 batches (`batch_create_keywords`)", size),
        ("infos", f"{size:,} infos with a link each (`batch_create_infos`; 2 rows per info)", size),
        ("load", f"`kwtree load` of an outline: {results['load_rows']:,} rows (keywords, infos, links, relations)",
         size),
    )
    for key, label, _ in rows:
        k, s = rates[f"{key}_kwtree"], rates[f"{key}_sqlite"]
        out.append(f"| {label} | {k['median']:,.0f} / {k['p90']:,.0f} / {k['max']:,.0f} | "
                   f"{s['median']:,.0f} / {s['max']:,.0f} | **{ratios[key]:.2f}×** |")
    f = rates["keywords_floor"]
    out.append(f"| floor for the keywords (no checks, no log) | {f['median']:,.0f} / {f['p90']:,.0f} / "
               f"{f['max']:,.0f} | | {ratios['keywords_floor']:.2f}× |")
    out.append(f"\n`batch_create_keywords` runs at {ratios['keywords_to_floor']:.2f}× the floor's rate.")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 5")
    parser.add_argument("--size", type=int, default=10_000)
    args = parser.parse_args()
    results = run(args.size, 3 if args.quick else 5)
    print(json.dumps(results["ratios"], indent=2))
    print(markdown(results))


if __name__ == "__main__":
    main()
