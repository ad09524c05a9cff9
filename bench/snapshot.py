"""Snapshot and restore of ~10 MB and ~100 MB logs, next to tar + sha256sum of the same files.

The tree: infos of ~200 characters, each linked to one of 1,000 keywords, written with
``batch_create_infos`` of 1,000 (durability none) until the log holds ``--mb`` megabytes (and
another of a tenth of that); each is built once and reused from a cache directory (``--cache``,
default under /tmp). Measured on each, ``--runs`` times each, interleaved, on warm page cache:

- ``tree.snapshot(path)`` on an open tree: cut, copy, SHA-256 of every member, fsync;
- ``kwtree.restore(archive, new_dir)``: stream + check every member into a staging
  directory, fsync, replay the restored log and compare it with the archive's watermark and
  counts, rename into place; and its first part alone (``stage``: extract + checksums);
- baselines on the same files: ``tar -cf`` + ``sha256sum`` + ``sync`` of the archive, and
  ``tar -xf`` + ``sha256sum -c`` + ``sync`` of the extracted files.

MB/s = log bytes archived ÷ seconds. Every time is kept raw (s); the markdown gives median /
p90 / p99 / max, the ratio of medians to the baseline and how each grows with the log.
``bench/run.py --only snapshot`` records the results in bench/results/snapshot.json.

    .venv/bin/python bench/snapshot.py [--mb 100] [--runs 3] [--cache DIR] [--work DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kwtree  # noqa: E402
from kwtree import KeywordTree  # noqa: E402
from kwtree.stores import snapshot as snapshots  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stats import cell, growth, summary  # noqa: E402

DEFAULT_CACHE = Path(tempfile.gettempdir()) / "kwtree-bench-snapshot"
FILLER = "The agent noted that the billing service retries failed charges with exponential backoff; "


def log_bytes(tree_dir: Path) -> int:
    return sum(p.stat().st_size for p in (tree_dir / "log").glob("*.jsonl"))


def build(tree_dir: Path, megabytes: int) -> None:
    """A tree whose log holds about ``megabytes`` MB (kept for the next run)."""
    partial = tree_dir.with_name(tree_dir.name + ".building")
    shutil.rmtree(partial, ignore_errors=True)
    with KeywordTree(partial, durability="none", worker=False) as tree:
        keywords = [k.id for k in tree.batch_create_keywords([{"name": f"topic {n}"} for n in range(1000)])]
        n = 0
        while log_bytes(partial) < megabytes * 1_000_000:
            tree.batch_create_infos([{"content": f"memo {n + i}: {FILLER}{FILLER[: (n + i) % 40]}",
                                      "source": "bench", "keyword_ids": [keywords[(n + i) % 1000]]}
                                     for i in range(1000)])
            n += 1000
    for cache in ("cache", "outbox.jsonl", "outbox.lock"):  # not archived: keep the directory lean
        path = partial / cache
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    partial.rename(tree_dir)


def _timed(call, *args) -> float:
    started = time.perf_counter()
    call(*args)
    return time.perf_counter() - started


def _shell(command: str, cwd: Path) -> None:
    subprocess.run(["bash", "-c", "set -euo pipefail; " + command], cwd=cwd, check=True)


def one_round(tree: KeywordTree, tree_dir: Path, members: list[str], scratch: Path) -> dict[str, float]:
    """Each measurement once, on fresh output paths; what it wrote is removed untimed."""
    times = {}
    archive, target = scratch / "s.kwsnap", scratch / "restored"
    times["snapshot"] = _timed(tree.snapshot, archive)
    times["restore"] = _timed(kwtree.restore, archive, target)
    shutil.rmtree(target)
    staged: list[Path] = []
    times["stage"] = _timed(lambda: staged.append(snapshots.stage(archive, target)[0]))
    shutil.rmtree(staged[0])
    archive.unlink()
    listed = " ".join(members)
    plain, sums, out = scratch / "s.tar", scratch / "s.sha256", scratch / "x"
    times["tar_create"] = _timed(
        _shell, f"tar -cf {plain} {listed} && sha256sum {listed} > {sums} && sync {plain} {sums}", tree_dir)
    out.mkdir()
    times["tar_extract"] = _timed(_shell, f"tar -xf {plain} && sha256sum --quiet -c {sums} && sync {listed}", out)
    shutil.rmtree(out)
    plain.unlink()
    sums.unlink()
    return times


def run(megabytes: int = 100, runs: int = 3, cache: Path = DEFAULT_CACHE, work: Path | None = None,
        sizes: tuple[int, ...] | None = None) -> dict:
    """Each log size of ``sizes`` in MB (default: a tenth of ``megabytes``, then ``megabytes``)."""
    sizes = sizes or tuple(sorted({max(1, megabytes // 10), megabytes}))
    return {"sizes": [measure(size, runs, cache, work) for size in sizes]}


def measure(megabytes: int, runs: int = 3, cache: Path = DEFAULT_CACHE, work: Path | None = None) -> dict:
    cache.mkdir(parents=True, exist_ok=True)
    tree_dir = cache / f"tree-{megabytes}mb"
    if not (tree_dir / "manifest.json").exists():
        build(tree_dir, megabytes)
    members = ["manifest.json", *sorted(f"log/{p.name}" for p in (tree_dir / "log").glob("*.jsonl"))]
    size = log_bytes(tree_dir) + (tree_dir / "manifest.json").stat().st_size
    samples: dict[str, list[float]] = {}
    scratch = Path(tempfile.mkdtemp(prefix="kwtree-snapshot-bench-", dir=work))
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    try:
        for _ in range(runs):
            for key, seconds in one_round(tree, tree_dir, members, scratch).items():
                samples.setdefault(key, []).append(seconds)
        operations = tree.tree_metrics()["operations"]
    finally:
        tree.close()
        shutil.rmtree(scratch, ignore_errors=True)
    stats = {key: summary(values) for key, values in samples.items()}
    return {
        "bytes": size, "segments": len(members) - 1, "operations": operations, "runs": runs, "s": stats,
        "mb_per_s": {key: size / 1e6 / stat["median"] for key, stat in stats.items()}, "raw_s": samples,
    }


ROWS = (
    ("`tree.snapshot()`: cut, copy + SHA-256 per member, fsync", "snapshot",
     "`tar -cf` + `sha256sum` + `sync` of the same files", "tar_create"),
    ("`kwtree.restore()` into a new directory: extract + check, fsync, replay check, rename", "restore",
     "`tar -xf` + `sha256sum -c` + `sync`", "tar_extract"),
    ("… of which extract + check every member (`stage`)", "stage",
     "`tar -xf` + `sha256sum -c` + `sync`", "tar_extract"),
)


def markdown(result: dict) -> str:
    sizes = result["sizes"]
    names = " and ".join(f"{size['bytes'] / 1e6:.0f} MB" for size in sizes)
    out = [
        f"### Snapshot and restore of logs of {names}",
        "",
        "Logs of infos of ~200 characters written in batches of 1,000: "
        + "; ".join(f"{size['bytes'] / 1e6:.0f} MB in {size['segments']} segment{'s' if size['segments'] > 1 else ''}, "
                    f"{size['operations']:,} operations" for size in sizes)
        + f". Warm page cache (`bench/snapshot.py`), n = {sizes[-1]['runs']} runs a size, interleaved. Seconds, "
        "median / p90 / p99 / max; MB/s = log bytes ÷ median time.",
        "",
        "| log | kwtree | kwtree, s | MB/s | baseline in the same run | baseline, s | MB/s | "
        "kwtree ÷ baseline (medians) |",
        "|---|---|---|---:|---|---|---:|---:|",
    ]
    for size in sizes:
        s, mbs = size["s"], size["mb_per_s"]
        log = f"{size['bytes'] / 1e6:.0f} MB"
        for label, key, base_label, base in ROWS:
            out.append(f"| {log} | {label} | {cell(s[key], 2)} | {mbs[key]:,.0f} | {base_label} | {cell(s[base], 2)} | "
                       f"{mbs[base]:,.0f} | **{s[key]['median'] / s[base]['median']:.2f}×** |")
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        factor = last["bytes"] / first["bytes"]
        out += ["", f"Scaling from {first['bytes'] / 1e6:.0f} MB to {last['bytes'] / 1e6:.0f} MB (medians):", ""]
        labels = {"snapshot": "`tree.snapshot()`", "restore": "`kwtree.restore()`", "stage": "`stage`",
                  "tar_create": "`tar -cf` + `sha256sum` + `sync`",
                  "tar_extract": "`tar -xf` + `sha256sum -c` + `sync`"}
        out += [f"- {label}: {growth(first['s'][key]['median'], last['s'][key]['median'], factor, 'the bytes')}."
                for key, label in labels.items()]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=100, help="largest log size, in MB (default 100; also a tenth)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the built tree is kept")
    parser.add_argument("--work", type=Path, default=None, help="directory for the archives (default: /tmp)")
    args = parser.parse_args(argv)
    print(markdown(run(args.mb, args.runs, args.cache, args.work)))  # bench/run.py --only snapshot records it
    return 0


if __name__ == "__main__":
    sys.exit(main())
