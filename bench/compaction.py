"""Compaction of a log in which most rows are superseded versions.

The tree: ``live`` infos created in batches, then ``updates`` single ``update_info`` calls
spread over them (durability none), so that ``updates / (live + updates)`` of the rows are
superseded (80% by default: 200,000 + 800,000 = 1,000,001 rows with the root). Measured:
``compact()`` time, bytes and rows before and after, and the time to open the tree before and
after. Baselines in the same run, on the same log files: reading them and parsing every line
with orjson (the floor of any pass over the log), and copying them (``shutil.copyfile`` +
fsync: the floor of writing a new log).

    .venv/bin/python bench/compaction.py [--live N] [--updates N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kwtree import KeywordTree  # noqa: E402


def build(path: Path, live: int, updates: int) -> None:
    with KeywordTree(path, durability="none", worker=False) as tree:
        ids: list[str] = []
        for start in range(0, live, 10_000):
            batch = tree.batch_create_infos([{"content": f"memory {n}"} for n in range(start, min(live, start + 10_000))])
            ids.extend(info.id for info in batch)
        for n in range(updates):
            tree.update_info(ids[(n * 7919) % live], {"content": f"memory {n} revised"})


def _segments(path: Path) -> list[Path]:
    return sorted((path / "log").glob("*.jsonl"))


def floors(path: Path, scratch: Path) -> dict[str, float]:
    """Seconds to read+parse every line, and to copy every segment with an fsync."""
    started = time.perf_counter()
    rows = 0
    for segment in _segments(path):
        for line in segment.read_bytes().split(b"\n"):
            if line:
                orjson.loads(line)
                rows += 1
    parse = time.perf_counter() - started
    started = time.perf_counter()
    for segment in _segments(path):
        target = scratch / segment.name
        shutil.copyfile(segment, target)
        fd = os.open(target, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return {"parse_s": parse, "copy_s": time.perf_counter() - started, "rows": rows}


def _open_seconds(path: Path) -> float:
    started = time.perf_counter()
    KeywordTree(path, read_only=True, worker=False).close()
    return time.perf_counter() - started


def run(live: int, updates: int, work: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(dir=work) as scratch:
        path = Path(scratch) / "tree"
        started = time.perf_counter()
        build(path, live, updates)
        build_s = time.perf_counter() - started
        copies = Path(scratch) / "copies"
        copies.mkdir()
        floor = floors(path, copies)
        open_before = _open_seconds(path)
        with KeywordTree(path, worker=False) as tree:
            tree.recall("memory", k=1, mode="bm25")  # the full-text index exists, as in use
            report = tree.compact()
        open_after = _open_seconds(path)
    return {
        "live": live, "updates": updates, "build_s": build_s, **floor,
        "compact_s": report.seconds, "bytes_before": report.bytes_before, "bytes_after": report.bytes_after,
        "rows_before": report.rows_before, "rows_after": report.rows_after,
        "open_before_s": open_before, "open_after_s": open_after,
    }


def markdown(result: dict) -> str:
    r = result
    superseded = r["updates"] / (r["rows_before"] or 1)
    return "\n".join([
        f"### Compaction of a {r['rows_before']:,}-row log ({superseded:.0%} superseded rows)",
        "",
        f"{r['live']:,} infos, then {r['updates']:,} updates spread over them (`bench/compaction.py`).",
        "",
        "| what | time | baseline in the same run | ratio |",
        "|---|---|---|---|",
        f"| `compact()` | {r['compact_s']:.2f} s | read + orjson-parse every line {r['parse_s']:.2f} s; copy every "
        f"segment + fsync {r['copy_s']:.2f} s | {r['compact_s'] / r['parse_s']:.1f}x the parse floor |",
        f"| log size | {r['bytes_before'] / 1e6:.1f} MB -> {r['bytes_after'] / 1e6:.1f} MB | | "
        f"**{r['bytes_after'] / r['bytes_before']:.3f}** of the bytes, {r['rows_after'] / r['rows_before']:.3f} "
        f"of the rows |",
        f"| open (replay, no caches) | {r['open_before_s']:.2f} s -> {r['open_after_s']:.2f} s | | "
        f"{r['open_before_s'] / r['open_after_s']:.1f}x faster |",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", type=int, default=200_000)
    parser.add_argument("--updates", type=int, default=800_000)
    args = parser.parse_args(argv)
    print(markdown(run(args.live, args.updates)))  # bench/run.py --only compaction also records it
    return 0


if __name__ == "__main__":
    sys.exit(main())
