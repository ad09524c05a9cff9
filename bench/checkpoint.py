"""Would a checkpoint of the materialised state open a large tree faster than replaying its log?

DESIGN §5 allows a state checkpoint under ``cache/`` "if it makes opening large trees faster".
This builds a tree of 50,000 keywords and 100,000 linked infos, then compares opening it (a
full replay of the log) with the cheapest checkpoint Python offers: unpickling the very State
the replay built (protocol 5, from memory, so not even the file read is counted).

    .venv/bin/python bench/checkpoint.py [--keywords N] [--infos N]
"""

from __future__ import annotations

import argparse
import copyreg
import pickle
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kwtree import KeywordTree  # noqa: E402


def _proxy(mapping: dict) -> types.MappingProxyType:
    return types.MappingProxyType(mapping)


copyreg.pickle(types.MappingProxyType, lambda proxy: (_proxy, (dict(proxy),)))


def run(keywords: int = 50_000, infos: int = 100_000) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tree"
        tree = KeywordTree(path, durability="none", worker=False)
        ids: list[str] = []
        for start in range(0, keywords, 2500):
            specs = [{"name": f"k{start + i}x", "parent_id": "root"} for i in range(min(2500, keywords - start))]
            ids += [keyword.id for keyword in tree.batch_create_keywords(specs)]
        for start in range(0, infos, 5000):
            tree.batch_create_infos([{"content": f"memory {start + i} about things",
                                      "keyword_ids": [ids[(start + i) % len(ids)]]}
                                     for i in range(min(5000, infos - start))])
        tree.close()
        rows = sum(1 for segment in (path / "log").glob("*.jsonl") for _ in segment.open("rb"))
        started = time.perf_counter()
        tree = KeywordTree(path, durability="none", worker=False)
        replay_s = time.perf_counter() - started
        blob = pickle.dumps(tree._engine.state, protocol=5)
        started = time.perf_counter()
        pickle.loads(blob)
        unpickle_s = time.perf_counter() - started
        tree.close()
    return {"rows": rows, "replay_s": replay_s, "unpickle_s": unpickle_s, "pickle_mb": len(blob) / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keywords", type=int, default=50_000)
    parser.add_argument("--infos", type=int, default=100_000)
    args = parser.parse_args(argv)
    r = run(args.keywords, args.infos)
    print(f"{r['rows']:,} log rows: open (replay) {r['replay_s']:.2f} s ({r['rows'] / r['replay_s']:,.0f} rows/s); "
          f"unpickling the same State {r['unpickle_s']:.2f} s ({r['pickle_mb']:.0f} MB pickle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
