"""How long a read-only ``kwtree recall`` takes on a tree that a bulk load just wrote
(issue 13, item 10): every CLI read opens the tree read-only, and used to build the hnswlib
graph itself (seconds) when the writer had never saved it.

Run by hand: ``python bench/cold_recall.py [INFOS] [RUNS] [MODE]`` (default 10000 infos, 3
runs, ``vector``; the CLI's default mode is ``hybrid``).
It writes a tree with ``batch_create_infos`` and the default worker thread, waits for the
embeddings, closes it, then times ``python -m kwtree recall DIR QUERY --mode vector`` in fresh
processes (the open, the search and the exit; the kwtree of this checkout, or PYTHONPATH's).

Measured here (2 shared cores, 10,000 infos, 3 runs), median (range): before the fix (no
graph saved: each read-only open built it) vector 6.2 s (4.8-6.7), hybrid 8.0 s (7.2-8.2);
after, vector 1.2 s (0.9-1.4), hybrid 0.8 s (0.7-0.9). The writer pays one build instead
(the bulk load to closed tree took 3-4 s before, 8-9 s after).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kwtree import KeywordTree

WORDS = ["invoice", "retry", "billing", "cache", "tree", "memory", "agent", "vector", "graph",
         "queue", "worker", "disk", "apple", "pear", "plum", "river", "mountain", "city", "coffee",
         "tea", "jazz", "python", "rust"]


def main() -> None:
    infos = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    mode = sys.argv[3] if len(sys.argv) > 3 else "vector"
    with tempfile.TemporaryDirectory(prefix="kwtree-cold-recall-") as tmp:
        directory = Path(tmp) / "tree"
        started = time.perf_counter()
        with KeywordTree(directory, durability="none") as tree:
            tree.batch_create_infos([{"content": " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11)) + f" {i}"}
                                     for i in range(infos)])
            assert tree.wait_indexed(600)
        print(f"bulk load of {infos} infos, embedded, closed: {time.perf_counter() - started:.1f} s")
        saved = sorted(p.name for p in (directory / "cache" / "vectors").rglob("hnsw.*"))
        print(f"saved graph files: {saved or 'none'}")
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "kwtree", "recall", str(directory), "how are invoices retried",
                            "--mode", mode, "--k", "5"], check=True, stdout=subprocess.DEVNULL, env=os.environ)
            times.append(time.perf_counter() - started)
        print(f"read-only `kwtree recall --mode {mode}`, {runs} runs: median {statistics.median(times):.2f} s, "
              f"max {max(times):.2f} s ({', '.join(f'{t:.2f}' for t in times)})")


if __name__ == "__main__":
    main()
