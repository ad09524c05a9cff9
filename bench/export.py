"""How long do export and import take for a large tree, next to opening it?

Builds a tree of 10,000 keywords (two levels) and 100,000 infos, each linked to two keywords,
plus one relation per 10 keywords, and one of a tenth of that; then measures on each, ``runs``
times in the same run: reopening the source (a full replay of its log: the baseline), ``export``
to JSON, ``export`` to Markdown, ``KeywordTree.import_json`` into a new directory (one operation,
one sync; ``durability="full"``) and the close of the imported tree. Every time is kept raw (s);
the markdown gives median / p90 / p99 / max, each median as a multiple of the open's, the file
sizes, and how each grows with the tree.

    .venv/bin/python bench/export.py [--keywords N] [--infos N] [--runs N]
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

from stats import cell, growth, summary  # noqa: E402

from kwtree import KeywordTree  # noqa: E402

#: (key, label, MB key, what the MB are) per table row; ``open`` is the baseline.
STEPS = (
    ("open", "open the source (replay; baseline)", "log_mb", "log"),
    ("export_json", "export, JSON", "json_mb", "file"),
    ("export_markdown", "export, Markdown", "markdown_mb", "file"),
    ("import", "import_json (one operation, durability full)", "json_mb", "read"),
    ("close", "close of the imported tree (full-text indexing)", None, ""),
)


def _build(path: Path, keywords: int, infos: int) -> None:
    with KeywordTree(path, durability="none", worker=False) as tree:
        tops = [k.id for k in tree.batch_create_keywords(
            [{"name": f"topic {i}", "parent_id": "root"} for i in range(max(1, keywords // 100))])]
        ids = list(tops)
        rest = keywords - len(tops)
        for start in range(0, rest, 2500):
            specs = [{"name": f"keyword {start + i}", "parent_id": tops[(start + i) % len(tops)],
                      "aliases": [f"kw{start + i}"]} for i in range(min(2500, rest - start))]
            ids += [k.id for k in tree.batch_create_keywords(specs)]
        for start in range(0, infos, 5000):
            tree.batch_create_infos([
                {"content": f"memory {n} about topic {n % 97}: some words, 北京 and more words", "source": "bench",
                 "keyword_ids": list(dict.fromkeys([ids[n % len(ids)], ids[(n * 7 + 1) % len(ids)]]))}
                for n in range(start, min(infos, start + 5000))
            ])
        for i in range(0, len(ids) - 1, 10):
            tree.relate(ids[i], ids[i + 1], "see_also", 0.5)


def _timed(call, *args, **kwargs):
    started = time.perf_counter()
    value = call(*args, **kwargs)
    return time.perf_counter() - started, value


def measure(keywords: int, infos: int, runs: int, base: Path) -> dict:
    """One tree size, built once, then ``runs`` rounds of open, exports, import and close."""
    _build(base / "source", keywords, infos)
    samples: dict[str, list[float]] = {key: [] for key, *_ in STEPS}
    same = True
    for _ in range(runs):
        seconds, tree = _timed(KeywordTree, base / "source", read_only=True)
        samples["open"].append(seconds)
        seconds, report = _timed(tree.export, base / "export.json")
        samples["export_json"].append(seconds)
        samples["export_markdown"].append(_timed(tree.export, base / "export.md", format="markdown")[0])
        tree.close()
        seconds, copy = _timed(KeywordTree.import_json, base / "export.json", base / "copy", worker=False)
        samples["import"].append(seconds)
        same = same and copy.tree_metrics()["links"] == report["links"]
        samples["close"].append(_timed(copy.close)[0])  # builds the full-text index of everything imported
        sizes = {"json_mb": (base / "export.json").stat().st_size / 1e6,
                 "markdown_mb": (base / "export.md").stat().st_size / 1e6}
        shutil.rmtree(base / "copy")
        (base / "export.json").unlink()
        (base / "export.md").unlink()
    return {
        "keywords": report["keywords"], "infos": report["infos"], "links": report["links"],
        "relations": report["relations"], "runs": runs, "same_counts": same, **sizes,
        "log_mb": sum(p.stat().st_size for p in (base / "source" / "log").glob("*.jsonl")) / 1e6,
        "s": {key: summary(values) for key, values in samples.items()}, "raw_s": samples,
    }


def run(keywords: int = 10_000, infos: int = 100_000, work: Path | None = None, runs: int = 3,
        sizes: tuple[tuple[int, int], ...] | None = None) -> dict:
    """Each (keywords, infos) of ``sizes`` (default: a tenth of ``keywords`` and ``infos``, then them)."""
    sizes = sizes or ((max(1, keywords // 10), max(1, infos // 10)), (keywords, infos))
    results = []
    for size_keywords, size_infos in sizes:
        with tempfile.TemporaryDirectory(dir=work) as directory:
            results.append(measure(size_keywords, size_infos, runs, Path(directory)))
    return {"sizes": results, "same_counts": all(size["same_counts"] for size in results)}


def markdown(result: dict) -> str:
    sizes = result["sizes"]
    lines = [
        "### Export and import",
        "",
        "Keywords in two levels, infos linked to two keywords each, a relation per 10 keywords (`bench/export.py`): "
        + "; ".join(f"{size['keywords']:,} keywords, {size['infos']:,} infos, {size['links']:,} links, "
                    f"{size['relations']:,} relations" for size in sizes)
        + f". n = {sizes[-1]['runs']} runs a size; seconds, median / p90 / p99 / max.",
        "",
        "| infos | step | seconds | × open (medians) | MB |",
        "|---:|---|---|---:|---:|",
    ]
    for size in sizes:
        tree = f"{size['infos']:,}"
        opened = size["s"]["open"]["median"]
        for key, label, mb, what in STEPS:
            megabytes = f"{size[mb]:.1f} ({what})" if mb else ""
            ratio = f"{size['s'][key]['median'] / opened:.1f}" if key != "open" else "1.0"
            lines.append(f"| {tree} | {label} | {cell(size['s'][key], 2)} | {ratio} | {megabytes} |")
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        factor = last["infos"] / first["infos"]
        lines += ["", f"Scaling from {first['infos']:,} to {last['infos']:,} infos (medians):", ""]
        lines += [f"- {label}: {growth(first['s'][key]['median'], last['s'][key]['median'], factor, 'the tree')}."
                  for key, label, *_ in STEPS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keywords", type=int, default=10_000)
    parser.add_argument("--infos", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    result = run(args.keywords, args.infos, runs=args.runs)
    print(markdown(result))
    if not result["same_counts"]:
        print("error: the imported tree does not have the exported number of links", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
