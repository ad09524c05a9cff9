"""What a read-only tree pays for its private full-text index (issue 25, B20): the first
search of a ``read_only=True`` tree whose shared index does not reflect its state, and the
memory it takes, on a tree of ``INFOS`` infos of 12 to 30 Zipf-drawn words.

Run by hand: ``python bench/private_fulltext.py [INFOS] [RUNS]`` (default 10000 infos, 5
runs). It writes a tree (one ``batch_create_infos``, a search so the shared index is
committed, one more info so that index lags by one operation: what a writer that wrote after
its last search and then exited without closing leaves), then in fresh processes
(``read_only=True``, ``worker=False``) times the open, the first ``recall(mode="bm25")`` (which
builds the private index) and a second one, and reads the resident set size (``VmRSS``)
after the open and after the searches. Case ``behind``: the shared index lags one operation; case
``missing``: ``cache/`` deleted. The kwtree imported is this checkout's, or PYTHONPATH's.

Measured here (2 cores shared with other work, so the spread is wide; medians of 5 runs at
10,000 infos, two sessions each, of 3 runs at 50,000; run from outside the checkout, with
``PYTHONPATH`` naming a copy of main for the "before" rows):

| private index | infos | case | first search | RSS growth |
|---|---|---|---|---|
| a file copy in ``$TMPDIR`` (main ``15c025c``) | 10,000 | behind | 0.21-0.25 s | 11 MB |
| a file copy in ``$TMPDIR`` (main ``15c025c``) | 10,000 | missing | 0.98-1.69 s | 28 MB |
| in memory (issue 25, B20) | 10,000 | behind | 1.03-1.34 s | 28 MB |
| in memory (issue 25, B20) | 10,000 | missing | 1.18-2.65 s | 28 MB |
| a file copy in ``$TMPDIR`` (main ``15c025c``) | 50,000 | behind | 0.30 s | 17 MB |
| a file copy in ``$TMPDIR`` (main ``15c025c``) | 50,000 | missing | 8.3 s | 96 MB |
| in memory (issue 25, B20) | 50,000 | behind | 5.8 s | 98 MB |
| in memory (issue 25, B20) | 50,000 | missing | 7.4 s | 98 MB |

The second search costs 2-10 ms in every row. In memory, the index is always built from the
whole state (a copy of the shared index was only possible as files, which a killed process
leaves behind), so a reader behind a writer pays what a reader without a cache always paid.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import sys, time

def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

started = time.perf_counter()
from kwtree import KeywordTree
tree = KeywordTree(sys.argv[1], read_only=True, worker=False)
opened = time.perf_counter()
before = rss()
first = time.perf_counter()
tree.recall("invoice retry worker", k=5, mode="bm25")
second = time.perf_counter()
tree.recall("river mountain coffee", k=5, mode="bm25")
done = time.perf_counter()
after = rss()
print(opened - started, second - first, done - second, before, after)
"""

LAGGING_WRITE = """
import os, sys
from kwtree import KeywordTree
KeywordTree(sys.argv[1], worker=False).create_info("one more memory, written after the last search")
os._exit(0)
"""


def corpus(infos: int) -> list[dict[str, str]]:
    """``infos`` texts of 12-30 words drawn from a 5,000-word Zipf vocabulary (seeded)."""
    rng = random.Random(25)
    vocabulary = [f"{rng.choice('bcdfghklmnprstvz')}{rng.choice('aeiou')}{n:x}word" for n in range(5_000)]
    vocabulary[:8] = ["invoice", "retry", "worker", "river", "mountain", "coffee", "tea", "memory"]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    return [{"content": " ".join(rng.choices(vocabulary, weights, k=rng.randint(12, 30)))} for _ in range(infos)]


def build(directory: Path, infos: int) -> None:
    from kwtree import KeywordTree

    with KeywordTree(directory, durability="none", worker=False) as tree:
        tree.batch_create_infos(corpus(infos))
        tree.recall("memory", mode="bm25")  # commits the shared index at this state
    # A writer that exits without closing (close would bring the shared index up to date).
    subprocess.run([sys.executable, "-c", LAGGING_WRITE, str(directory)], check=True, env=os.environ,
                   cwd=directory.parent)  # not the checkout's: ``-c`` imports from the working directory first


def probe(directory: Path) -> list[float]:
    done = subprocess.run([sys.executable, "-c", PROBE, str(directory)], check=True, capture_output=True,
                          text=True, env=os.environ, cwd=directory.parent)
    return [float(value) for value in done.stdout.split()]


def main() -> None:
    infos = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory(prefix="kwtree-private-fulltext-") as tmp:
        directory = Path(tmp) / "tree"
        build(directory, infos)
        for case in ("behind", "missing"):
            if case == "missing":
                shutil.rmtree(directory / "cache")
            samples = [probe(directory) for _ in range(runs)]
            first = statistics.median(sample[1] for sample in samples)
            second = statistics.median(sample[2] for sample in samples)
            growth = statistics.median((sample[4] - sample[3]) / 1024 for sample in samples)
            opened = statistics.median(sample[0] for sample in samples)
            print(f"{case}: {infos} infos, {runs} runs, median: open {opened:.2f} s, first search {first:.2f} s, "
                  f"second {second * 1000:.1f} ms, RSS growth {growth:.0f} MB")


if __name__ == "__main__":
    main()
