"""What a change costs on the write path: single ``create_keyword`` and ``create_info`` calls
timed for this checkout and for a git revision of it, alternately, in one run.

Run by hand: ``python bench/write_path.py REV [WRITES] [ROUNDS] [DURABILITY]`` (defaults:
3000 writes of each kind per round, 4 rounds, ``none``: the CPU cost alone; ``full`` adds the
fdatasync of every write). Each round runs each side in a fresh process on a fresh tree (the
revision from ``git archive``, put first on PYTHONPATH), so the sides share the machine's
noise. Prints median / p90 / p99 / max in µs per side and the ratio of the medians.

Measured for issue 13 (format-2 checksums, size limits, private files; 2 shared cores):
``python bench/write_path.py aefb461`` gave create_keyword 44 -> 53 µs and create_info
48 -> 57 µs median (about +9 µs each); with ``full`` durability the difference is lost in
the fsync noise (223 against 243 µs, 229 against 249 µs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stats import cell, summary

REPO = Path(__file__).resolve().parent.parent

# One side's run: a fresh tree, WRITES of each kind, the samples as JSON on stdout.
CHILD = """
import json, sys, tempfile, time
from kwtree import KeywordTree
writes, durability = int(sys.argv[1]), sys.argv[2]
with tempfile.TemporaryDirectory() as tmp:
    tree = KeywordTree(tmp + "/tree", worker=False, durability=durability)
    parent = tree.create_keyword("Parent", llm_auto_place=False).id
    keywords, infos = [], []
    for i in range(writes):
        start = time.perf_counter()
        keyword = tree.create_keyword(f"keyword {i}", parent, llm_auto_place=False)
        keywords.append(time.perf_counter() - start)
        start = time.perf_counter()
        tree.create_info(f"memory number {i} about keyword {i}", keyword_ids=[keyword.id])
        infos.append(time.perf_counter() - start)
    tree.close()
import kwtree
print(json.dumps({"module": kwtree.__file__, "create_keyword": keywords, "create_info": infos}))
"""


def run_side(source: Path, writes: int, durability: str) -> dict[str, list[float]]:
    """One run of CHILD importing the kwtree package under ``source`` (run from ``source``,
    which ``python -c`` puts first on sys.path, ahead of any installed kwtree)."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(writes), durability], cwd=source, check=True,
                         capture_output=True, text=True).stdout
    result = json.loads(out)
    if Path(result.pop("module")).parent.parent != source:
        raise SystemExit(f"the child imported kwtree from outside {source}")
    return result


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rev = sys.argv[1]
    writes = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    durability = sys.argv[4] if len(sys.argv) > 4 else "none"
    with tempfile.TemporaryDirectory(prefix="kwtree-write-path-") as tmp:
        archive = Path(tmp) / "rev.tar"
        subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), rev, "kwtree"], check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        samples: dict[str, dict[str, list[float]]] = {rev: {}, "this checkout": {}}
        for _ in range(rounds):
            for side, path in ((rev, Path(tmp)), ("this checkout", REPO)):
                for kind, values in run_side(path, writes, durability).items():
                    samples[side].setdefault(kind, []).extend(values)
    print(f"durability={durability}, {rounds} rounds x {writes} writes; µs median / p90 / p99 / max")
    for kind in ("create_keyword", "create_info"):
        before, after = summary(samples[rev][kind]), summary(samples["this checkout"][kind])
        print(f"{kind:15} {rev}: {cell(before, 0, 1e6)}   this checkout: {cell(after, 0, 1e6)}   "
              f"ratio of medians {after['median'] / before['median']:.2f}")


if __name__ == "__main__":
    main()
