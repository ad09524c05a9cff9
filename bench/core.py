"""Core engine benchmarks, each next to a baseline measured in the same run.

Figures (issue 2 targets in brackets):
- replay: cold open of an N-row log with no caches, in a fresh process, against orjson
  parsing the same file in that process [>= 400k rows/s, within ~4x of the parse];
- durable_write: one create_keyword with durability="full" against SQLite WAL
  synchronous=FULL inserting one row per transaction and a bare 200-byte append + fsync
  [p50 within 1.2x of SQLite];
- batch: a 10,000-keyword batch_create_keywords with durability="none" against SQLite
  executemany of 10,000 rows in one transaction [>= 150k rows/s];
- memory: RSS per keyword after opening N short-named keywords against the same ids and
  names held as bare slotted dataclasses in a dict [<= 800 B/keyword].
"""

from __future__ import annotations

import gc
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def summary(samples: list[float]) -> dict[str, float]:
    """median, p90, p99 and max of raw samples."""
    ordered = sorted(samples)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"median": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "max": ordered[-1], "n": len(ordered)}


# --- replay ------------------------------------------------------------------------------


def build_log(data_dir: Path, rows: int, seed: int = 7) -> int:
    """A realistic log of about ``rows`` rows: keyword batches (parents from recent batches),
    infos linked to keywords, and single updates and moves. Returns the row count."""
    from kwtree import KeywordTree

    rng = random.Random(seed)
    with KeywordTree(data_dir, durability="none") as tree:
        ids = ["root"]
        info_ids: list[str] = []
        written = 1  # the root
        while written < rows:
            written += 5000 + 2 * 1000 + 50  # keyword rows, info + link rows, updates
            recent = ids[-5000:]
            specs = [{"name": f"kw{len(ids) + i}", "parent_id": rng.choice(recent)} for i in range(5000)]
            ids.extend(k.id for k in tree.batch_create_keywords(specs))
            infos = tree.batch_create_infos(
                [{"content": f"memory {len(info_ids) + i} about kw{len(ids) - i}", "keyword_ids": [ids[-1 - i]]}
                 for i in range(1000)]
            )
            info_ids.extend(i.id for i in infos)
            for _ in range(50):
                kid = rng.choice(ids[1:])
                tree.update_keyword(kid, {"description": "edited"}, version=tree.get_keyword(kid).version)
    return written


_OPEN_PROBE = r"""
import gc, json, os, sys, time
data_dir = sys.argv[1]
segments = sorted(os.listdir(os.path.join(data_dir, "log")))
from kwtree import KeywordTree
t0 = time.perf_counter()
tree = KeywordTree(data_dir, read_only=True)
opened = time.perf_counter() - t0
import orjson
lines = []
for name in segments:
    with open(os.path.join(data_dir, "log", name), "rb") as f:
        lines.extend(f.read().rstrip(b"\0").splitlines())
gc.disable()
t0 = time.perf_counter()
for line in lines:
    orjson.loads(line)
parsed = time.perf_counter() - t0
print(json.dumps({"rows": len(lines), "open_s": opened, "parse_s": parsed}))
"""


def bench_replay(rows: int, repeats: int, work: Path) -> dict:
    data_dir = work / f"replay_{rows}"
    if not data_dir.exists():
        build_log(data_dir, rows)
    runs = [
        json.loads(subprocess.run([sys.executable, "-c", _OPEN_PROBE, str(data_dir)], check=True,
                                  capture_output=True, text=True).stdout)
        for _ in range(repeats)
    ]
    n = runs[0]["rows"]
    return {
        "rows": n,
        "open_rows_per_s": summary([n / r["open_s"] for r in runs]),
        "parse_rows_per_s": summary([n / r["parse_s"] for r in runs]),
        "ratio_open_to_parse": summary([r["open_s"] / r["parse_s"] for r in runs]),
        "raw": runs,
    }


# --- durable single writes -------------------------------------------------------------------


def _sqlite_single(path: Path, n: int) -> list[float]:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE kw(id TEXT PRIMARY KEY, name TEXT, parent TEXT, created REAL, version INTEGER)")
    samples = []
    for i in range(n):
        row = (os.urandom(16).hex(), f"keyword {i}", "root", time.time(), 1)
        t = time.perf_counter()
        con.execute("BEGIN")
        con.execute("INSERT INTO kw VALUES (?,?,?,?,?)", row)
        con.execute("COMMIT")
        samples.append(time.perf_counter() - t)
    con.close()
    return samples


def _append_fsync(path: Path, n: int) -> list[float]:
    line = b'{"id":"' + b"x" * 180 + b'"}' + b" " * 9 + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        os.write(fd, line)
        os.fsync(fd)
        samples.append(time.perf_counter() - t)
    os.close(fd)
    return samples


def _kwtree_single(path: Path, n: int, kind: str) -> list[float]:
    from kwtree import KeywordTree

    samples = []
    with KeywordTree(path) as tree:
        keyword = tree.create_keyword("anchor", llm_auto_place=False)
        for i in range(n):
            t = time.perf_counter()
            if kind == "keyword":
                # The write path alone (the agent's placement is measured in placement.py).
                tree.create_keyword(f"keyword {i}", llm_auto_place=False)
            else:
                tree.create_info(f"memory number {i}", keyword_ids=[keyword.id])
            samples.append(time.perf_counter() - t)
    return samples


def bench_durable_write(n: int, rounds: int, work: Path) -> dict:
    """Interleave rounds of the three so that machine noise hits them alike."""
    result: dict[str, list[float]] = {"kwtree_create_keyword": [], "kwtree_create_info": [],
                                      "sqlite_wal_full": [], "append_fsync": []}
    for r in range(rounds):
        result["sqlite_wal_full"] += _sqlite_single(work / f"single_{r}.db", n)
        result["kwtree_create_keyword"] += _kwtree_single(work / f"single_kw_{r}", n, "keyword")
        result["append_fsync"] += _append_fsync(work / f"single_{r}.jsonl", n)
        result["kwtree_create_info"] += _kwtree_single(work / f"single_info_{r}", n, "info")
    out: dict = {name: summary([s * 1e6 for s in samples]) for name, samples in result.items()}
    out["raw_us"] = {name: [round(s * 1e6, 1) for s in samples] for name, samples in result.items()}
    out["ratio_p50_keyword_to_sqlite"] = out["kwtree_create_keyword"]["median"] / out["sqlite_wal_full"]["median"]
    out["ratio_p50_info_to_sqlite"] = out["kwtree_create_info"]["median"] / out["sqlite_wal_full"]["median"]
    return out


# --- batch ------------------------------------------------------------------------------------


def bench_batch(size: int, rounds: int, work: Path) -> dict:
    from kwtree import KeywordTree

    kw_rates, sqlite_rates = [], []
    for r in range(rounds):
        with KeywordTree(work / f"batch_{r}", durability="none") as tree:
            for b in range(3):  # later batches land in a tree that already holds keywords
                specs = [{"name": f"kw {b}-{i}"} for i in range(size)]
                t = time.perf_counter()
                tree.batch_create_keywords(specs)
                kw_rates.append(size / (time.perf_counter() - t))
        db = work / f"batch_{r}.db"
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE kw(id TEXT PRIMARY KEY, name TEXT, parent TEXT, created REAL, version INTEGER)")
        for b in range(3):
            rows = [(os.urandom(16).hex(), f"kw {b}-{i}", "root", time.time(), 1) for i in range(size)]
            t = time.perf_counter()
            con.execute("BEGIN")
            con.executemany("INSERT INTO kw VALUES (?,?,?,?,?)", rows)
            con.execute("COMMIT")
            sqlite_rates.append(size / (time.perf_counter() - t))
        con.close()
    out = {"batch_size": size, "kwtree_rows_per_s": summary(kw_rates), "sqlite_executemany_rows_per_s": summary(sqlite_rates),
           "raw_rows_per_s": {"kwtree": [round(r) for r in kw_rates], "sqlite": [round(r) for r in sqlite_rates]}}
    out["ratio_median_kwtree_to_sqlite"] = out["kwtree_rows_per_s"]["median"] / out["sqlite_executemany_rows_per_s"]["median"]
    return out


# --- memory -----------------------------------------------------------------------------------

_MEMORY_PROBE = r"""
import gc, json, os, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
mode, data_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
from kwtree import KeywordTree
import orjson
gc.collect(); before = rss()
if mode == "kwtree":
    tree = KeywordTree(data_dir, read_only=True)
    count = tree.tree_metrics()["keywords"] + 1
else:
    from dataclasses import dataclass
    @dataclass(slots=True)
    class Row:
        id: str; name: str; parent_id: str; version: int; created_at: float; deleted: bool
    store = {}
    for name in sorted(os.listdir(os.path.join(data_dir, "log"))):
        with open(os.path.join(data_dir, "log", name), "rb") as f:
            for line in f.read().rstrip(b"\0").splitlines():
                r = orjson.loads(line)
                store[r["id"]] = Row(r["id"], r["name"], r.get("parent_id"), r["v"], r["created_at"], False)
    count = len(store)
gc.collect()
print(json.dumps({"bytes_per_keyword": (rss() - before) / count, "keywords": count}))
"""


def bench_memory(n: int, work: Path) -> dict:
    from kwtree import KeywordTree

    data_dir = work / f"memory_{n}"
    if not data_dir.exists():
        with KeywordTree(data_dir, durability="none") as tree:
            for start in range(0, n, 10_000):
                tree.batch_create_keywords([{"name": f"k{start + i}"} for i in range(min(10_000, n - start))])
    out = {}
    for mode in ("kwtree", "slotted_dataclass_dict"):
        runs = [json.loads(subprocess.run([sys.executable, "-c", _MEMORY_PROBE, mode, str(data_dir), str(n)],
                                          check=True, capture_output=True, text=True).stdout) for _ in range(3)]
        out[mode] = summary([r["bytes_per_keyword"] for r in runs])
        out[f"raw_{mode}"] = [round(r["bytes_per_keyword"], 1) for r in runs]
    out["keywords"] = n
    return out


@dataclass(frozen=True)
class Plan:
    replay_rows: tuple[int, ...]
    replay_repeats: int
    write_n: int
    write_rounds: int
    batch_rounds: int
    memory_n: int
    batch_size: int = 10_000


QUICK = Plan(replay_rows=(50_000,), replay_repeats=3, write_n=500, write_rounds=2, batch_rounds=2, memory_n=50_000)
FULL = Plan(replay_rows=(100_000, 1_000_000), replay_repeats=5, write_n=2000, write_rounds=3, batch_rounds=5,
            memory_n=200_000)


def run(plan: Plan, work: Path | None = None) -> dict:
    """Run every core figure; returns the results (raw samples included)."""
    gc.collect()
    with tempfile.TemporaryDirectory(dir=work or BENCH_DIR.parent) as tmp:
        tmp_path = Path(tmp)
        results = {
            "replay": [bench_replay(rows, plan.replay_repeats, tmp_path) for rows in plan.replay_rows],
            "durable_write": bench_durable_write(plan.write_n, plan.write_rounds, tmp_path),
            "batch": bench_batch(plan.batch_size, plan.batch_rounds, tmp_path),
            "memory": bench_memory(plan.memory_n, tmp_path),
        }
    return results


def markdown(results: dict) -> str:
    """The core tables for docs/benchmarks.md."""
    out = ["### Replay: cold open, no caches (fresh process; floor = orjson parsing the same file)", "",
           "| rows | open rows/s (median / p90 / max) | orjson parse rows/s (median) | open ÷ parse time (median / max) |",
           "|---:|---|---:|---|"]
    for r in results["replay"]:
        o, p, q = r["open_rows_per_s"], r["parse_rows_per_s"], r["ratio_open_to_parse"]
        out.append(f"| {r['rows']:,} | {o['median']:,.0f} / {o['p90']:,.0f} / {o['max']:,.0f} | {p['median']:,.0f} | "
                   f"{q['median']:.2f}× / {q['max']:.2f}× |")
    w = results["durable_write"]
    out += ["", "### Durable single writes (µs; same file system, interleaved rounds)", "",
            "| operation | median | p90 | p99 | max | samples |", "|---|---:|---:|---:|---:|---:|"]
    labels = {"kwtree_create_keyword": "kwtree `create_keyword` (durability=full)",
              "kwtree_create_info": "kwtree `create_info` with 1 link (durability=full)",
              "sqlite_wal_full": "SQLite WAL, synchronous=FULL, 1 row per transaction",
              "append_fsync": "bare 200-byte append + fsync"}
    for key, label in labels.items():
        s = w[key]
        out.append(f"| {label} | {s['median']:.0f} | {s['p90']:.0f} | {s['p99']:.0f} | {s['max']:.0f} | {s['n']} |")
    out.append(f"\nRatio of medians, `create_keyword` ÷ SQLite: **{w['ratio_p50_keyword_to_sqlite']:.2f}×** "
               f"(`create_info`: {w['ratio_p50_info_to_sqlite']:.2f}×).")
    b = results["batch"]
    out += ["", f"### Batch of {b['batch_size']:,} keywords, durability=none (rows/s)", "",
            "| writer | median | p90 | max | runs |", "|---|---:|---:|---:|---:|"]
    for key, label in (("kwtree_rows_per_s", "kwtree `batch_create_keywords`"),
                       ("sqlite_executemany_rows_per_s", "SQLite executemany, one transaction")):
        s = b[key]
        out.append(f"| {label} | {s['median']:,.0f} | {s['p90']:,.0f} | {s['max']:,.0f} | {s['n']} |")
    out.append(f"\nRatio of medians, kwtree ÷ SQLite: **{b['ratio_median_kwtree_to_sqlite']:.2f}×**.")
    m = results["memory"]
    out += ["", f"### Memory per keyword ({m['keywords']:,} short-named keywords, RSS delta after open)", "",
            "| holder | bytes/keyword (median / max of 3 processes) |", "|---|---|",
            f"| kwtree, every in-memory index included | {m['kwtree']['median']:.0f} / {m['kwtree']['max']:.0f} |",
            f"| same ids and names as bare slotted dataclasses in a dict | "
            f"{m['slotted_dataclass_dict']['median']:.0f} / {m['slotted_dataclass_dict']['max']:.0f} |"]
    return "\n".join(out)
