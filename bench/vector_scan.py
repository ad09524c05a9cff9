"""What a writable open's scan of the vector store costs (issue 28): every writable open (a
hook, a CLI write, an agent runtime) first looks for live texts without a vector, in its worker
thread, where it competes with the caller for the interpreter.

For each size, a tree of that many memories (hash embedder) is written, embedded and closed;
then, interleaved, ``runs`` fresh writable opens (no worker thread) each time one scan:
``VectorProjection.missing()`` as an open runs it (the store's recorded position is current:
its rows are trusted and nothing written after it is hashed) and ``missing(full=True)``, the
scan every open ran before the store had a position (every vector read against its check,
every live text hashed) — the baseline, measured in the same run. Both include opening the
store (reading keys.jsonl), which either needs.

    .venv/bin/python bench/vector_scan.py [SIZE ...] [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kwtree import KeywordTree  # noqa: E402
from kwtree.caches.embed import HashEmbedder  # noqa: E402

TOPICS = ["green tea", "the harbour", "sourdough bread", "jazz records", "rust lifetimes", "hiking boots"]
BATCH = 5_000


def _build(directory: Path, size: int) -> None:
    with KeywordTree(directory, durability="none", embedder=HashEmbedder()) as tree:
        for start in range(0, size, BATCH):
            tree.batch_create_infos([{"content": f"memory {n} about {TOPICS[n % len(TOPICS)]} and {n % 97}"}
                                     for n in range(start, min(size, start + BATCH))])
        if not tree.wait_indexed(600):
            raise RuntimeError(f"embedding {size} memories did not finish")


def _scan(directory: Path, full: bool) -> float:
    with KeywordTree(directory, durability="none", embedder=HashEmbedder(), worker=False) as tree:
        started = time.perf_counter()
        work = tree._caches.vectors.missing(full=full)  # (private: the scan alone, not the open)
        elapsed = time.perf_counter() - started
    if work:
        raise RuntimeError(f"the scan found {len(work)} texts without a vector in a drained tree")
    return elapsed * 1e3


def run(sizes: tuple[int, ...] = (20_000,), runs: int = 5, work: Path | None = None) -> dict[str, Any]:
    raw: dict[str, dict[str, list[float]]] = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            directory = Path(tmp) / "tree"
            _build(directory, size)
            _scan(directory, full=False)  # records the position if the build's close did not; not counted
            samples: dict[str, list[float]] = {"position": [], "full": []}
            for _ in range(runs):
                samples["position"].append(_scan(directory, full=False))
                samples["full"].append(_scan(directory, full=True))
            raw[str(size)] = samples
    return {"runs": runs, "raw_ms": raw}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "### A writable open's scan of the vector store",
        "",
        f"`bench/vector_scan.py`: {result['runs']} fresh writable opens each, interleaved; ms, median (min–max). "
        "*position*: the scan an open runs when the store's recorded position is current (rows trusted, "
        "nothing hashed); *full*: every vector checked and every live text hashed, what every open ran "
        "before the store had a position (the baseline). Both include reading keys.jsonl to open the store.",
        "",
        "| memories | position | full (baseline) | position ÷ full |",
        "|---:|---:|---:|---:|",
    ]
    for size, samples in result["raw_ms"].items():
        pos, full = samples["position"], samples["full"]
        lines.append(f"| {int(size):,} | {statistics.median(pos):.0f} ({min(pos):.0f}–{max(pos):.0f}) | "
                     f"{statistics.median(full):.0f} ({min(full):.0f}–{max(full):.0f}) | "
                     f"{statistics.median(pos) / statistics.median(full):.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[20_000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    print(markdown(run(tuple(args.sizes), args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
