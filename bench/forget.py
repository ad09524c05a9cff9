"""Forgetting one info from a log of ``rows`` rows, against compacting the same log.

The log is compaction's (``bench/compaction.py``: infos created in batches, then single
``update_info`` calls spread over them, 80% of the rows superseded versions), with its
full-text index made. Then, ``runs`` times, each on a fresh copy (the copy untimed):
``forget(<one info id>)`` (the forget operation, the rewrite of every row as a new log
generation with history kept, the cache purge), and, as baselines on the same log in the same
run, ``compact()`` and ``compact(keep_history=True)`` (the rewrite forget does, without the
scrub). Forget removes the full-text index, so the first search after it rebuilds it: that
search is timed too, next to the same search on the compacted copy. Raw seconds are kept; the
markdown gives median / p90 / p99 / max and the ratios of medians.

    .venv/bin/python bench/forget.py [--rows N] [--runs N]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compaction import build  # noqa: E402
from stats import cell, summary  # noqa: E402

from kwtree import KeywordTree  # noqa: E402

TIMES = ("forget", "compact", "compact_history", "search_after_forget", "search_after_compact")
QUERY = "memory revised"


def _timed_search(tree: KeywordTree) -> float:
    started = time.perf_counter()
    tree.recall(QUERY, k=5, mode="bm25", min_score=0)
    return time.perf_counter() - started


def measure(rows: int, runs: int, scratch: Path) -> dict:
    """One log of about ``rows`` rows, built once; ``runs`` rounds of each timed call on a copy."""
    live = max(1, rows // 5)
    source = scratch / "source"
    started = time.perf_counter()
    build(source, live, rows - live)
    build_s = time.perf_counter() - started
    with KeywordTree(source, read_only=True, worker=False) as tree:
        victim = tree.recall("memory 7", k=1, mode="bm25", min_score=0)[0].info.id
    samples: dict[str, list[float]] = {name: [] for name in TIMES}
    report = None
    for round_number in range(runs):
        for name in ("forget", "compact", "compact_history"):
            path = scratch / f"{name}-{round_number}"
            shutil.copytree(source, path)
            with KeywordTree(path, worker=False) as tree:
                if name == "forget":
                    report = tree.forget(victim)
                    samples[name].append(report.seconds)
                    samples["search_after_forget"].append(_timed_search(tree))
                else:
                    done = tree.compact(keep_history=name == "compact_history")
                    samples[name].append(done.seconds)
                    if name == "compact_history":
                        samples["search_after_compact"].append(_timed_search(tree))
            shutil.rmtree(path)
    shutil.rmtree(source)
    assert report is not None
    return {
        "rows": rows + 1, "live": live, "runs": runs, "build_s": build_s,  # (rows: with the root)
        "bytes_before": report.bytes_before, "bytes_after": report.bytes_after,
        "rows_rewritten": report.rows_rewritten, "operations": report.operations,
        "s": {name: summary(values) for name, values in samples.items()}, "raw_s": samples,
    }


def run(rows: int, work: Path | None = None, runs: int = 3) -> dict:
    with tempfile.TemporaryDirectory(dir=work) as scratch:
        return measure(rows, runs, Path(scratch))


def markdown(result: dict) -> str:
    t = result["s"]
    ratio = t["forget"]["median"] / t["compact"]["median"]
    ratio_history = t["forget"]["median"] / t["compact_history"]["median"]
    return "\n".join([
        f"### Forgetting one info from a log of {result['rows']:,} rows",
        "",
        f"`forget(info_id)` on a fresh copy of compaction's log ({result['live']:,} infos, then updates spread over "
        f"them; {result['bytes_before'] / 1e6:.1f} MB, {result['operations']:,} operations; the info's "
        f"{result['rows_rewritten']} rows rewritten), `bench/forget.py`; n = {result['runs']} runs. Seconds, "
        "median / p90 / p99 / max.",
        "",
        "| what | kwtree, s | baseline in the same run, s | kwtree ÷ baseline (medians) |",
        "|---|---|---|---:|",
        f"| `forget(info_id)` | {cell(t['forget'], 2)} | `compact()` of the same log: {cell(t['compact'], 2)} | "
        f"**{ratio:.1f}x** |",
        f"| `forget(info_id)` | {cell(t['forget'], 2)} | `compact(keep_history=True)`: "
        f"{cell(t['compact_history'], 2)} | {ratio_history:.1f}x |",
        f"| first BM25 search after it (rebuilds the full-text index) | {cell(t['search_after_forget'], 2)} | "
        f"after `compact(keep_history=True)` (index kept): {cell(t['search_after_compact'], 3)} | "
        f"{t['search_after_forget']['median'] / t['search_after_compact']['median']:.0f}x |",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(markdown(run(args.rows, runs=args.runs)))  # bench/run.py --only forget also records it
    return 0


if __name__ == "__main__":
    sys.exit(main())
