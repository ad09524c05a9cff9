"""The state checkpoint (``kwtree.engine.checkpoint``) against replaying the whole log.

Builds a tree of ``--keywords`` keywords (half of them under another) and ``--infos`` linked
infos, closes it (its close writes ``cache/state.ckpt``), then opens it read-only in fresh
processes, alternately from the checkpoint and by replay (the checkpoint moved aside), and
reports the engine's open time (the whole ``KeywordTree(...)``) and the RSS it added, with
the time one save takes and the file's size against the log's.

    .venv/bin/python bench/checkpoint.py [--keywords N] [--infos N] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from stats import summary  # noqa: E402

from kwtree import KeywordTree  # noqa: E402
from kwtree.engine import checkpoint  # noqa: E402

# "before" is read with the C heap's free pages given back, as the open gives them back after
# it (bench/core.py's memory probe does the same).
_PROBE = r"""
import ctypes, gc, json, os, sys, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
from kwtree import KeywordTree
gc.collect()
trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
if trim is not None:
    trim(0)
before = rss()
started = time.perf_counter()
tree = KeywordTree(sys.argv[1], read_only=True, worker=False)
opened = time.perf_counter() - started
gc.collect()
print(json.dumps({"open_s": opened, "rss": rss() - before, "from_checkpoint": tree._engine._checkpointed > 0}))
"""


def build(path: Path, keywords: int, infos: int) -> None:
    with KeywordTree(path, durability="none", worker=False) as tree:
        ids: list[str] = []
        for start in range(0, keywords, 2500):
            specs = [{"name": f"k{start + i}x", **({"parent_id": ids[(start + i) // 3]} if ids and i % 2 else {})}
                     for i in range(min(2500, keywords - start))]
            ids += [keyword.id for keyword in tree.batch_create_keywords(specs)]
        for start in range(0, infos, 5000):
            tree.batch_create_infos([{"content": f"memory {start + i} about things and more things here",
                                      "keyword_ids": [ids[(start + i) % len(ids)]]}
                                     for i in range(min(5000, infos - start))])


def _probe(path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(path)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def run(keywords: int = 50_000, infos: int = 100_000, runs: int = 5) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tree"
        build(path, keywords, infos)
        ckpt = path / "cache" / checkpoint.CHECKPOINT_NAME
        aside = ckpt.with_name("aside")
        with KeywordTree(path, worker=False) as tree:  # one save, timed
            tree._engine._checkpointed = 0
            started = time.perf_counter()
            covered = tree._engine.save_checkpoint()
            save_s = time.perf_counter() - started
        samples: dict[str, list[dict]] = {"checkpoint": [], "replay": []}
        for _ in range(runs):
            samples["checkpoint"].append(_probe(path))
            ckpt.rename(aside)
            samples["replay"].append(_probe(path))
            aside.rename(ckpt)
        assert all(s["from_checkpoint"] for s in samples["checkpoint"]) and not any(
            s["from_checkpoint"] for s in samples["replay"])
        log_bytes = sum(p.stat().st_size for p in (path / "log").glob("*.jsonl"))
        out = {"keywords": keywords, "infos": infos, "log_bytes": log_bytes, "covered": covered,
               "checkpoint_bytes": ckpt.stat().st_size, "save_s": save_s, "raw": samples}
    for how, values in samples.items():
        out[how] = {"open_s": summary([v["open_s"] for v in values]),
                    "rss_mb": summary([v["rss"] / 1e6 for v in values])}
    out["ratio_open"] = out["checkpoint"]["open_s"]["median"] / out["replay"]["open_s"]["median"]
    out["ratio_rss"] = out["checkpoint"]["rss_mb"]["median"] / out["replay"]["rss_mb"]["median"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keywords", type=int, default=50_000)
    parser.add_argument("--infos", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    r = run(args.keywords, args.infos, args.runs)
    print(f"log {r['log_bytes'] / 1e6:.1f} MB, checkpoint {r['checkpoint_bytes'] / 1e6:.1f} MB, "
          f"one save {r['save_s']:.2f} s")
    for how in ("replay", "checkpoint"):
        o, m = r[how]["open_s"], r[how]["rss_mb"]
        print(f"open by {how}: {o['median']:.3f} s (max {o['max']:.3f}); RSS {m['median']:.1f} MB")
    print(f"checkpoint ÷ replay: open {r['ratio_open']:.2f}×, RSS {r['ratio_rss']:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
