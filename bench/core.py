"""Core engine benchmarks at several sizes, each next to a baseline measured in the same run.

- replay: open an N-row log with no caches and with warm caches, in fresh processes, and the
  first text search after each, against orjson parsing the same lines in that process;
- writes_at_size: durable create_keyword / create_info into those trees, against SQLite
  (WAL, synchronous=FULL, one row per transaction) inserting into a table of N rows;
- durable_write: the same into new trees, interleaved with SQLite and a bare 200-byte
  append + fsync on the same file system;
- memory: RSS per keyword and per info after opening N of them (strings counted apart),
  against the same rows in SQLite (bytes of file, and of cache after reading them all).
"""

from __future__ import annotations

import gc
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from stats import cell, growth, summary  # noqa: E402

# --- replay ------------------------------------------------------------------------------


def build_log(data_dir: Path, rows: int, seed: int = 7) -> int:
    """A realistic log of about ``rows`` rows: keyword batches (each keyword under a random
    earlier one, so the tree is about as deep as a real one grows: depth ~ ln N),
    infos linked to keywords, and single updates and moves. Returns the row count."""
    from kwtree import KeywordTree

    rng = random.Random(seed)
    with KeywordTree(data_dir, durability="none") as tree:
        ids = ["root"]
        info_ids: list[str] = []
        written = 1  # the root
        batch = min(5000, max(50, rows // 20))  # keywords per round; a round adds 1.41x as many rows
        while written < rows:
            written += batch + 2 * (batch // 5) + batch // 100  # keyword rows, info + link rows, updates
            specs = [{"name": f"kw{len(ids) + i}", "parent_id": ids[rng.randrange(len(ids))]} for i in range(batch)]
            ids.extend(k.id for k in tree.batch_create_keywords(specs))
            infos = tree.batch_create_infos(
                [{"content": f"memory {len(info_ids) + i} about kw{len(ids) - i}", "keyword_ids": [ids[-1 - i]]}
                 for i in range(batch // 5)]
            )
            info_ids.extend(i.id for i in infos)
            for _ in range(batch // 100):
                kid = rng.choice(ids[1:])
                tree.update_keyword(kid, {"description": "edited"}, version=tree.get_keyword(kid).version)
    return written


_OPEN_PROBE = r"""
import gc, json, os, shutil, sys, time
data_dir, caches = sys.argv[1], sys.argv[2]
if caches == "none":
    shutil.rmtree(os.path.join(data_dir, "cache"), ignore_errors=True)
segments = sorted(os.listdir(os.path.join(data_dir, "log")))
from kwtree import KeywordTree
t0 = time.perf_counter()
tree = KeywordTree(data_dir, worker=False)
opened = time.perf_counter() - t0
t0 = time.perf_counter()
hits = tree.recall("memory about kw5", k=10, mode="bm25", min_score=0)  # timing, not relevance
searched = time.perf_counter() - t0
assert hits, "the first search found nothing"
tree.close()  # commits the full-text index: the next "warm" open finds it current
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
print(json.dumps({"rows": len(lines), "open_s": opened, "first_search_s": searched, "parse_s": parsed}))
"""


def _probe(code: str, *args: object) -> dict:
    """Run a probe in a fresh process (nothing cached in this one) and return its JSON line."""
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def replay_dir(rows: int, work: Path) -> Path:
    """A tree built by :func:`build_log` with about ``rows`` log rows, built once per run."""
    data_dir = work / f"replay_{rows}"
    if not data_dir.exists():
        build_log(data_dir, rows)
    return data_dir


#: From this size, the slowest measurements (a no-cache open, the memory probes) run once.
ONCE_FROM = 1_000_000


def bench_replay(rows: int, repeats: int, work: Path) -> dict:
    """Open (replay) with no caches and with warm caches, and the first text search after
    each, in fresh processes; the floor is orjson parsing the same lines in that process.
    The embedding worker is off (``worker=False``): vector caches are the retrieval suite's."""
    data_dir = replay_dir(rows, work)
    runs: dict[str, list[dict]] = {"none": [], "warm": []}
    # From 1M rows a no-cache open's rebuild of the full-text index takes most of a minute:
    # it runs once there, and the table says n.
    cold_repeats = 1 if rows >= ONCE_FROM else repeats
    for repeat in range(repeats):  # alternate, so that machine noise hits both alike
        for caches in ("none", "warm") if repeat < cold_repeats else ("warm",):
            runs[caches].append(_probe(_OPEN_PROBE, data_dir, caches))
    n = runs["none"][0]["rows"]
    parse = [r["parse_s"] for r in runs["none"] + runs["warm"]]
    out: dict = {"rows": n, "parse_rows_per_s": summary([n / s for s in parse]), "raw": runs}
    for caches, samples in runs.items():
        out[caches] = {
            "open_rows_per_s": summary([n / r["open_s"] for r in samples]),
            "open_s": summary([r["open_s"] for r in samples]),
            "first_search_s": summary([r["first_search_s"] for r in samples]),
            "ratio_open_to_parse": summary([r["open_s"] / r["parse_s"] for r in samples]),
        }
    return out


# --- durable single writes -------------------------------------------------------------------


def _sqlite_single(path: Path, n: int) -> list[float]:
    con = _sqlite_with_rows(path, 0)
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


def _sqlite_with_rows(path: Path, rows: int) -> sqlite3.Connection:
    """A WAL, synchronous=FULL database whose table already holds ``rows`` rows."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE kw(id TEXT PRIMARY KEY, name TEXT, parent TEXT, created REAL, version INTEGER)")
    con.execute("BEGIN")
    con.executemany("INSERT INTO kw VALUES (?,?,?,?,?)",
                    ((os.urandom(16).hex(), f"kw{i}", "root", time.time(), 1) for i in range(rows)))
    con.execute("COMMIT")
    return con


def bench_writes_at_size(rows: int, n: int, work: Path) -> dict:
    """Durable single writes into the :func:`replay_dir` tree of ``rows`` rows (already
    holding its keywords and infos), next to SQLite inserting into a table of as many rows,
    one row per transaction; the three are interleaved ten writes at a time."""
    from kwtree import KeywordTree

    con = _sqlite_with_rows(work / f"sized_{rows}.db", rows)
    samples: dict[str, list[float]] = {"kwtree_create_keyword": [], "kwtree_create_info": [], "sqlite_wal_full": []}
    with KeywordTree(replay_dir(rows, work), worker=False) as tree:
        anchor = tree.create_keyword(f"anchor {rows}", llm_auto_place=False)
        for start in range(0, n, 10):
            for i in range(start, start + 10):
                t = time.perf_counter()
                tree.create_keyword(f"sized keyword {i}", llm_auto_place=False)
                samples["kwtree_create_keyword"].append(time.perf_counter() - t)
                t = time.perf_counter()
                tree.create_info(f"sized memory {i}", keyword_ids=[anchor.id])
                samples["kwtree_create_info"].append(time.perf_counter() - t)
                t = time.perf_counter()
                con.execute("BEGIN")
                con.execute("INSERT INTO kw VALUES (?,?,?,?,?)",
                            (os.urandom(16).hex(), f"new {i}", "root", time.time(), 1))
                con.execute("COMMIT")
                samples["sqlite_wal_full"].append(time.perf_counter() - t)
    con.close()
    out: dict = {"rows": rows, **{name: summary([v * 1e6 for v in values]) for name, values in samples.items()}}
    out["raw_us"] = {name: [round(v * 1e6, 1) for v in values] for name, values in samples.items()}
    return out


# --- memory -----------------------------------------------------------------------------------

# "before" is read with the C heap's free pages given back (glibc's malloc_trim, where there is
# one), as kwtree's open gives them back after its replay: else the open would return pages the
# imports freed, and the delta would leave out part of what the open holds.
_MEMORY_PROBE = r"""
import ctypes, gc, json, os, sqlite3, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
holder, kind, path = sys.argv[1], sys.argv[2], sys.argv[3]
from kwtree import KeywordTree
gc.collect()
trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
if trim is not None:
    trim(0)
before = rss()
if holder == "kwtree":
    tree = KeywordTree(path, read_only=True)
    state = tree._engine.state
    table = state.infos if kind == "info" else state.keywords
    count = len(table) if kind == "info" else len(table) - 1  # not the root
    gc.collect(); delta = rss() - before
    # A tree opened from its state checkpoint makes entities as they are read: read them all.
    for index in (state.keywords, state.infos, state.links, state.names, state.children, state.infos_by_keyword,
                  state.keywords_by_info):
        for _ in index.values():
            pass
    gc.collect(); read = rss() - before
    seen, strings = set(), 0
    def add(value):
        global strings
        if isinstance(value, str) and id(value) not in seen:
            seen.add(id(value)); strings += sys.getsizeof(value)
    for entity in table.values():
        for field in ("id", "name", "parent_id", "description", "content", "source", "op_id"):
            add(getattr(entity, field, None))
        for alias in getattr(entity, "aliases", ()):
            add(alias)
    if kind == "info":
        for link in state.links.values():
            add(link.info_id); add(link.keyword_id); add(link.created_by); add(link.op_id)
    print(json.dumps({"count": count, "bytes": delta / count, "read_bytes": read / count,
                      "string_bytes": strings / count}))
else:
    con = sqlite3.connect(path)
    con.execute("PRAGMA cache_size=-4000000")  # up to 4 GB: every page read stays cached
    count = con.execute(f"SELECT count(*) FROM {kind}").fetchone()[0]
    for _ in con.execute(f"SELECT * FROM {kind}"):
        pass
    if kind == "info":
        for _ in con.execute("SELECT * FROM link"):
            pass
    gc.collect(); delta = rss() - before
    size = sum(os.path.getsize(path + suffix) for suffix in ("", "-wal") if os.path.exists(path + suffix))
    print(json.dumps({"count": count, "bytes": delta / count, "file_bytes": size / count}))
"""

_WORDS = ["the", "meeting", "moved", "to", "thursday", "after", "lunch", "because", "anna", "was",
          "travelling", "to", "berlin", "for", "the", "conference", "on", "graph", "databases",
          "and", "she", "asked", "to", "keep", "notes", "about", "budget", "decisions"]


def _memory_data(kind: str, n: int, work: Path) -> tuple[Path, Path]:
    """A tree of ``n`` keywords, or of ``n`` infos of about 120 characters each linked to one
    of 100 keywords, and a SQLite file holding the same rows (primary keys, a link table)."""
    from kwtree import KeywordTree

    rng = random.Random(n)
    data_dir, db = work / f"memory_{kind}_{n}", work / f"memory_{kind}_{n}.db"
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("BEGIN")
    con.execute("CREATE TABLE keyword(id TEXT PRIMARY KEY, name TEXT, parent TEXT, description TEXT, version INT, "
                "created REAL, updated REAL, op_id TEXT)")
    con.execute("CREATE INDEX keyword_parent ON keyword(parent)")
    con.execute("CREATE TABLE info(id TEXT PRIMARY KEY, content TEXT, source TEXT, version INT, created REAL, "
                "updated REAL, op_id TEXT)")
    con.execute("CREATE TABLE link(info TEXT, keyword TEXT, relation TEXT, created REAL, op_id TEXT, "
                "PRIMARY KEY (info, keyword))")
    con.execute("CREATE INDEX link_keyword ON link(keyword)")
    with KeywordTree(data_dir, durability="none", worker=False) as tree:
        def keywords(specs: list[dict]) -> list:
            made = tree.batch_create_keywords(specs)
            con.executemany("INSERT INTO keyword VALUES (?,?,?,?,?,?,?,?)",
                            ((k.id, k.name, k.parent_id, k.description, k.version, k.created_at, k.updated_at,
                              k.op_id) for k in made))
            return made

        if kind == "keyword":
            for start in range(0, n, 10_000):
                keywords([{"name": f"k{start + i}"} for i in range(min(10_000, n - start))])
        else:
            anchors = [k.id for k in keywords([{"name": f"topic {i}"} for i in range(100)])]
            for start in range(0, n, 10_000):
                specs = [{"content": f"{start + i}: " + " ".join(rng.choices(_WORDS, k=18)),
                          "keyword_ids": [rng.choice(anchors)]} for i in range(min(10_000, n - start))]
                made = tree.batch_create_infos(specs)
                con.executemany("INSERT INTO info VALUES (?,?,?,?,?,?,?)",
                                ((i.id, i.content, i.source, i.version, i.created_at, i.updated_at, i.op_id)
                                 for i in made))
                con.executemany("INSERT INTO link VALUES (?,?,?,?,?)",
                                ((i.id, spec["keyword_ids"][0], "primary", i.created_at, i.op_id)
                                 for i, spec in zip(made, specs, strict=True)))
    con.execute("COMMIT")
    con.close()
    return data_dir, db


def bench_memory(n: int, repeats: int, work: Path) -> dict:
    """Resident bytes per keyword and per info after opening ``n`` of them (RSS delta over
    the open, in fresh processes; the bytes of the entities' strings counted apart), next to
    SQLite: bytes per row of its file, and RSS delta after reading every row into a cache
    large enough to keep them."""
    out: dict = {"n": n}
    repeats = 1 if n >= ONCE_FROM else repeats
    for kind in ("keyword", "info"):
        data_dir, db = _memory_data(kind, n, work)
        ours = [_probe(_MEMORY_PROBE, "kwtree", kind, data_dir) for _ in range(repeats)]
        theirs = [_probe(_MEMORY_PROBE, "sqlite", kind, db) for _ in range(repeats)]
        out[kind] = {
            "kwtree_bytes": summary([r["bytes"] for r in ours]),
            "kwtree_read_bytes": summary([r["read_bytes"] for r in ours]),
            "kwtree_string_bytes": ours[0]["string_bytes"],
            "sqlite_cache_bytes": summary([r["bytes"] for r in theirs]),
            "sqlite_file_bytes": theirs[0]["file_bytes"],
            "raw": {"kwtree": ours, "sqlite": theirs},
        }
        shutil.rmtree(data_dir)
        db.unlink()
    return out


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]  # log rows (replay, writes into a tree of that size) and entities (memory)
    replay_repeats: int
    sized_writes: int
    write_n: int
    write_rounds: int
    memory_repeats: int


QUICK = Plan(sizes=(10_000, 50_000), replay_repeats=3, sized_writes=100, write_n=300, write_rounds=2,
             memory_repeats=2)
FULL = Plan(sizes=(10_000, 100_000, 1_000_000), replay_repeats=3, sized_writes=300, write_n=2000, write_rounds=3,
            memory_repeats=2)


def run(plan: Plan, work: Path | None = None) -> dict:
    """Run every core figure; returns the results (raw samples included)."""
    gc.collect()
    with tempfile.TemporaryDirectory(dir=work or BENCH_DIR.parent) as tmp:
        tmp_path = Path(tmp)
        replay, sized = [], []
        for rows in plan.sizes:
            replay.append(bench_replay(rows, plan.replay_repeats, tmp_path))
            sized.append(bench_writes_at_size(rows, plan.sized_writes, tmp_path))  # after: it adds rows
            shutil.rmtree(replay_dir(rows, tmp_path))
        results = {
            "replay": replay,
            "writes_at_size": sized,
            "durable_write": bench_durable_write(plan.write_n, plan.write_rounds, tmp_path),
            "memory": [bench_memory(n, plan.memory_repeats, tmp_path) for n in plan.sizes],
        }
    return results


def _scaling(label: str, values: list[tuple[int, float]], what: str) -> str:
    (first_n, first), (last_n, last) = values[0], values[-1]
    return f"- {label}: {growth(first, last, last_n / first_n, what)}."


def markdown(results: dict) -> str:
    """The core tables for docs/benchmarks.md."""
    replay = results["replay"]
    out = ["### Open (replay), with no caches and with warm caches (fresh process each)", "",
           "The floor is orjson parsing the same lines in the same process. The first text search "
           "after a no-cache open rebuilds the full-text index; after a warm open it loads it. The "
           "embedding worker is off here (vector caches are the retrieval suite's).", "",
           "| log rows | caches | open s (median / p90 / p99 / max) | rows/s (median) | open ÷ orjson parse "
           "(median / max) | first text search s (median / max) |",
           "|---:|---|---|---:|---|---|"]
    for r in replay:
        for caches, label in (("none", "none"), ("warm", "warm")):
            c = r[caches]
            out.append(f"| {r['rows']:,} | {label} (n = {c['open_s']['n']}) | {cell(c['open_s'], 3)} | "
                       f"{c['open_rows_per_s']['median']:,.0f} | "
                       f"{c['ratio_open_to_parse']['median']:.2f}× / {c['ratio_open_to_parse']['max']:.2f}× | "
                       f"{c['first_search_s']['median']:.3f} / {c['first_search_s']['max']:.3f} |")
    if len(replay) > 1:
        out += ["", "Scaling, from the medians:", "",
                _scaling("open time, no caches",
                         [(r["rows"], r["none"]["open_s"]["median"]) for r in replay], "the rows"),
                _scaling("open time, warm caches",
                         [(r["rows"], r["warm"]["open_s"]["median"]) for r in replay], "the rows"),
                _scaling("first text search after a no-cache open (index rebuild)",
                         [(r["rows"], r["none"]["first_search_s"]["median"]) for r in replay], "the rows"),
                _scaling("first text search after a warm open",
                         [(r["rows"], r["warm"]["first_search_s"]["median"]) for r in replay], "the rows"),
                _scaling("orjson parse time", [(r["rows"], 1 / r["parse_rows_per_s"]["median"] * r["rows"])
                                              for r in replay], "the rows")]
    sized = results["writes_at_size"]
    out += ["", "### Durable single writes into trees of N log rows (µs: median / p90 / p99 / max)", "",
            "Into the replay trees above (keywords and linked infos), embedding worker off; SQLite: a table "
            "already holding N rows, WAL, synchronous=FULL, one row per transaction; interleaved.", "",
            "| log rows | kwtree `create_keyword` | kwtree `create_info` | SQLite insert "
            "| keyword ÷ SQLite (medians) |",
            "|---:|---|---|---|---:|"]
    for r in sized:
        out.append(f"| {r['rows']:,} | {cell(r['kwtree_create_keyword'], 0)} | {cell(r['kwtree_create_info'], 0)} | "
                   f"{cell(r['sqlite_wal_full'], 0)} | "
                   f"**{r['kwtree_create_keyword']['median'] / r['sqlite_wal_full']['median']:.2f}×** |")
    if len(sized) > 1:
        out += ["", "Scaling, from the medians:", ""]
        for key, label in (("kwtree_create_keyword", "kwtree `create_keyword`"),
                           ("kwtree_create_info", "kwtree `create_info`"), ("sqlite_wal_full", "SQLite insert")):
            out.append(_scaling(label, [(r["rows"], r[key]["median"]) for r in sized], "the rows"))
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
    memory = results["memory"]
    out += ["", "### Memory per keyword and per info (RSS delta after opening N of them, fresh processes)", "",
            "Infos are about 120 characters, each linked to one of 100 keywords (its link included). A tree whose "
            "log holds 4 MB or more opens from its state checkpoint and makes entities as they are read, so kwtree "
            "is measured right after the open and again after reading every entity and index; the ratio is of the "
            "second. \"strings\" is what the entities' distinct string objects (ids, names, text, op ids) take; "
            "\"structure\" is the rest of the second figure: objects, dicts and indexes. SQLite holds the same "
            "rows (primary keys, a parent index, a link table); its cache figure is the RSS delta after reading "
            "every row with a cache large enough to keep them.", "",
            "| N | entity | kwtree bytes after the open (median / max of the processes) | after reading all (median) "
            "| strings | structure | SQLite file bytes | SQLite cache bytes (median) | kwtree read ÷ SQLite file |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for m in memory:
        for kind in ("keyword", "info"):
            e = m[kind]
            total = e["kwtree_bytes"]["median"]
            read = e["kwtree_read_bytes"]["median"]
            out.append(f"| {m['n']:,} | {kind} | {total:,.0f} / {e['kwtree_bytes']['max']:,.0f} | {read:,.0f} | "
                       f"{e['kwtree_string_bytes']:,.0f} | {read - e['kwtree_string_bytes']:,.0f} | "
                       f"{e['sqlite_file_bytes']:,.0f} | {e['sqlite_cache_bytes']['median']:,.0f} | "
                       f"{read / e['sqlite_file_bytes']:.2f}× |")
    if len(memory) > 1:
        out += ["", "Scaling, from the medians:", ""]
        for kind in ("keyword", "info"):
            out.append(_scaling(f"kwtree bytes per {kind}", [(m["n"], m[kind]["kwtree_bytes"]["median"])
                                                            for m in memory], f"the {kind}s"))
    return "\n".join(out)
