"""How long do export and import take for a large tree, next to opening it?

Builds a tree of 10,000 keywords (two levels) and 100,000 infos, each linked to two keywords,
plus one relation per 10 keywords; then measures, in the same run: reopening the source (a full
replay of its log: the baseline), ``export`` to JSON, ``export`` to Markdown, and
``KeywordTree.import_json`` into a new directory (one operation, one sync; ``durability="full"``).
Prints a markdown table with each time as a multiple of the open, and the file sizes.

    .venv/bin/python bench/export.py [--keywords N] [--infos N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kwtree import KeywordTree  # noqa: E402


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


def run(keywords: int = 10_000, infos: int = 100_000, work: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(dir=work) as directory:
        base = Path(directory)
        _build(base / "source", keywords, infos)
        started = time.perf_counter()
        tree = KeywordTree(base / "source", read_only=True)
        open_s = time.perf_counter() - started
        started = time.perf_counter()
        report = tree.export(base / "export.json")
        export_json_s = time.perf_counter() - started
        started = time.perf_counter()
        tree.export(base / "export.md", format="markdown")
        export_md_s = time.perf_counter() - started
        tree.close()
        started = time.perf_counter()
        copy = KeywordTree.import_json(base / "export.json", base / "copy", worker=False)
        import_s = time.perf_counter() - started
        same = copy.tree_metrics()["links"] == report["links"]
        started = time.perf_counter()
        copy.close()  # builds the full-text index of everything imported (any large batch pays it)
        close_s = time.perf_counter() - started
        return {
            "keywords": report["keywords"], "infos": report["infos"], "links": report["links"],
            "relations": report["relations"], "open_s": open_s, "export_json_s": export_json_s,
            "export_markdown_s": export_md_s, "import_s": import_s, "close_s": close_s, "same_counts": same,
            "json_mb": (base / "export.json").stat().st_size / 1e6,
            "markdown_mb": (base / "export.md").stat().st_size / 1e6,
            "log_mb": sum(p.stat().st_size for p in (base / "source" / "log").glob("*.jsonl")) / 1e6,
        }


def markdown(result: dict) -> str:
    r = result
    rows = [
        ("open the source (replay; baseline)", r["open_s"], r["log_mb"], "log"),
        ("export, JSON", r["export_json_s"], r["json_mb"], "file"),
        ("export, Markdown", r["export_markdown_s"], r["markdown_mb"], "file"),
        ("import_json (one operation, durability full)", r["import_s"], r["json_mb"], "read"),
        ("close of the imported tree (full-text indexing)", r["close_s"], 0.0, "-"),
    ]
    lines = [
        f"### Export and import ({r['keywords']:,} keywords, {r['infos']:,} infos, {r['links']:,} links, "
        f"{r['relations']:,} relations)",
        "",
        "| step | seconds | × open | MB |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {name} | {seconds:.2f} | {seconds / r['open_s']:.1f} | {mb:.1f} ({what}) |"
              for name, seconds, mb, what in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keywords", type=int, default=10_000)
    parser.add_argument("--infos", type=int, default=100_000)
    args = parser.parse_args(argv)
    result = run(args.keywords, args.infos)
    print(markdown(result))
    if not result["same_counts"]:
        print("error: the imported tree does not have the exported number of links", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
