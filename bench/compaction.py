"""Compaction of a log in which most rows are superseded versions, at two log sizes.

The tree: ``live`` infos created in batches, then ``updates`` single ``update_info`` calls
spread over them (durability none), so that ``updates / (live + updates)`` of the rows are
superseded (80% by default: 200,000 + 800,000 = 1,000,001 rows with the root); and the same at a
tenth of the size. Each tree is built once, its full-text index made (as in use); then, ``runs``
times: a copy of it (untimed) is compacted, and the time to open the tree before and after is
measured. Baselines in the same run, on the same log files, as often: reading them and parsing
every line with orjson (the floor of any pass over the log), and copying them
(``shutil.copyfile`` + fsync: the floor of writing a new log). Every time is kept raw (s); the
markdown gives median / p90 / p99 / max, the ratio of medians, and how each grows with the log.

    .venv/bin/python bench/compaction.py [--live N] [--updates N] [--runs N]
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import cell, growth, summary  # noqa: E402

from kwtree import KeywordTree  # noqa: E402

TIMES = ("compact", "parse", "copy", "open_before", "open_after")


def build(path: Path, live: int, updates: int) -> None:
    with KeywordTree(path, durability="none", worker=False) as tree:
        ids: list[str] = []
        for start in range(0, live, 10_000):
            batch = tree.batch_create_infos([{"content": f"memory {n}"}
                                             for n in range(start, min(live, start + 10_000))])
            ids.extend(info.id for info in batch)
        for n in range(updates):
            tree.update_info(ids[(n * 7919) % live], {"content": f"memory {n} revised"})
        tree.recall("memory", k=1, mode="bm25")  # the full-text index exists, as in use


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
    return {"parse": parse, "copy": time.perf_counter() - started, "rows": rows}


def _open_seconds(path: Path) -> float:
    started = time.perf_counter()
    KeywordTree(path, read_only=True, worker=False).close()
    return time.perf_counter() - started


def measure(live: int, updates: int, runs: int, scratch: Path) -> dict:
    """One log size: built once, then ``runs`` rounds of floors, opens and a compaction of a copy."""
    source = scratch / "source"
    started = time.perf_counter()
    build(source, live, updates)
    build_s = time.perf_counter() - started
    samples: dict[str, list[float]] = {name: [] for name in TIMES}
    for round_number in range(runs):
        copies = scratch / "copies"
        copies.mkdir()
        floor = floors(source, copies)
        shutil.rmtree(copies)
        samples["parse"].append(floor["parse"])
        samples["copy"].append(floor["copy"])
        samples["open_before"].append(_open_seconds(source))
        path = scratch / f"compacted-{round_number}"
        shutil.copytree(source, path)
        with KeywordTree(path, worker=False) as tree:
            report = tree.compact()
        samples["compact"].append(report.seconds)
        samples["open_after"].append(_open_seconds(path))
        shutil.rmtree(path)
    shutil.rmtree(source)
    return {
        "live": live, "updates": updates, "runs": runs, "build_s": build_s, "rows": floor["rows"],
        "bytes_before": report.bytes_before, "bytes_after": report.bytes_after,
        "rows_before": report.rows_before, "rows_after": report.rows_after,
        "s": {name: summary(values) for name, values in samples.items()}, "raw_s": samples,
    }


def run(live: int, updates: int, work: Path | None = None, runs: int = 3,
        sizes: tuple[tuple[int, int], ...] | None = None) -> dict:
    """Each (live, updates) of ``sizes`` (default: a tenth of ``live`` and ``updates``, then them)."""
    sizes = sizes or ((max(1, live // 10), updates // 10), (live, updates))
    results = []
    for size_live, size_updates in sizes:
        with tempfile.TemporaryDirectory(dir=work) as scratch:
            results.append(measure(size_live, size_updates, runs, Path(scratch)))
    return {"sizes": results}


def markdown(result: dict) -> str:
    sizes = result["sizes"]
    last = sizes[-1]
    superseded = last["updates"] / (last["rows_before"] or 1)
    names = " and ".join(f"{size['rows_before']:,}" for size in sizes)
    out = [
        f"### Compaction of logs of {names} rows ({superseded:.0%} superseded rows)",
        "",
        f"Infos, then {last['updates'] / last['live']:g} updates per info spread over them (`bench/compaction.py`); "
        f"each `compact()` on a fresh copy of the same log, n = {last['runs']} runs a size. Seconds, "
        "median / p90 / p99 / max.",
        "",
        "| rows | what | kwtree, s | baseline in the same run, s | kwtree ÷ baseline (medians) |",
        "|---:|---|---|---|---:|",
    ]
    for size in sizes:
        t, rows = size["s"], f"{size['rows_before']:,}"
        reopen = t["open_after"]["median"] / t["open_before"]["median"]
        out += [
            f"| {rows} | `compact()` | {cell(t['compact'], 2)} | read + orjson-parse every line: "
            f"{cell(t['parse'], 2)} | **{t['compact']['median'] / t['parse']['median']:.1f}x** |",
            f"| {rows} | `compact()` | {cell(t['compact'], 2)} | copy every segment + fsync: {cell(t['copy'], 2)} | "
            f"{t['compact']['median'] / t['copy']['median']:.1f}x |",
            f"| {rows} | open after compaction (replay, no caches) | {cell(t['open_after'], 2)} | "
            f"open before compaction: {cell(t['open_before'], 2)} | **{reopen:.2f}x** |",
        ]
    out += ["", "| rows | log size before -> after | bytes kept | rows kept |", "|---:|---|---:|---:|"]
    out += [f"| {size['rows_before']:,} | {size['bytes_before'] / 1e6:.1f} MB -> {size['bytes_after'] / 1e6:.1f} MB | "
            f"**{size['bytes_after'] / size['bytes_before']:.3f}** | {size['rows_after'] / size['rows_before']:.3f} |"
            for size in sizes]
    if len(sizes) > 1:
        first = sizes[0]
        factor = last["rows_before"] / first["rows_before"]
        labels = {"compact": "`compact()`", "parse": "read + parse floor", "copy": "copy + fsync floor",
                  "open_before": "open before compaction", "open_after": "open after compaction"}
        out += ["", f"Scaling from {first['rows_before']:,} to {last['rows_before']:,} rows (medians):", ""]
        out += [f"- {label}: {growth(first['s'][name]['median'], last['s'][name]['median'], factor, 'the rows')}."
                for name, label in labels.items()]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", type=int, default=200_000)
    parser.add_argument("--updates", type=int, default=800_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(markdown(run(args.live, args.updates, runs=args.runs)))  # bench/run.py --only compaction also records it
    return 0


if __name__ == "__main__":
    sys.exit(main())
