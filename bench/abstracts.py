"""Keyword abstracts: what signposts do to LoCoMo recall, and what building abstracts costs.

1. **LoCoMo with and without signposts**: ``bench/locomo.py``'s run twice on the same
   conversations and the default embedder, once as is and once after ``tree.abstracts()``
   (offline, extractive: every session and speaker keyword gets one); R@5/10/25 and the
   ``recall`` latency of each mode, side by side.
2. **Build cost** (offline): a tree of ``keywords`` keywords holding ``per_keyword`` memories
   each (sentences drawn from a fixed vocabulary, seeded); ``tree.abstracts()`` builds them
   all in one operation; keywords/s, next to the baseline measured in the same run: one plain
   ``kwtree.normalize.terms`` pass over the same texts (the tokenising every summary needs).

    .venv/bin/python bench/abstracts.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402

from kwtree import KeywordTree  # noqa: E402
from kwtree.normalize import terms  # noqa: E402

SEED = 15
_WORDS = ("garden", "tomato", "basil", "balcony", "blight", "copper", "spring", "river", "bridge", "concert",
          "violin", "school", "teacher", "paint", "canvas", "museum", "travel", "paris", "train", "ticket", "dog",
          "puppy", "walk", "park", "coffee", "morning", "bakery", "bread", "marathon", "charity", "support",
          "group", "counselor", "adoption", "family", "sister", "camping", "lake", "mountain")


def _sentence(rng: random.Random) -> str:
    words = rng.sample(_WORDS, rng.randint(6, 12))
    return f"{words[0].capitalize()} {' '.join(words[1:])}."


def build_cost(keywords: int, per_keyword: int, work: Path | None) -> dict[str, Any]:
    """Seconds to build ``keywords`` abstracts in one call, and the tokenising baseline."""
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory(dir=work) as directory:
        tree = KeywordTree(Path(directory) / "tree", durability="none", worker=False)
        made = tree.batch_create_keywords([{"name": f"topic {i}"} for i in range(keywords)])
        specs = [{"content": " ".join(_sentence(rng) for _ in range(rng.randint(1, 3))), "keyword_ids": [kw.id]}
                 for kw in made for _ in range(per_keyword)]
        tree.batch_create_infos(specs)
        started = time.perf_counter()
        built = tree.abstracts()
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        for spec in specs:
            terms(spec["content"])
        baseline = time.perf_counter() - started
        started = time.perf_counter()
        tree.abstracts()  # nothing changed: digests only, nothing written
        check = time.perf_counter() - started
        tree.close()
    return {"keywords": len(built), "per_keyword": per_keyword, "seconds": seconds,
            "keywords_per_s": len(built) / seconds, "baseline_seconds": baseline, "fresh_check_seconds": check}


def run(quick: bool = False, work: Path | None = None) -> dict[str, Any]:
    without = locomo.run("hash", quick, work)
    if "skipped" in without:
        return {"skipped": without["skipped"]}
    with_abstracts = locomo.run("hash", quick, work, abstracts=True)
    cost = build_cost(500 if quick else 2_000, 10, work)
    return {"locomo": {"without": without, "with": with_abstracts}, "build": cost}


def markdown(results: dict[str, Any]) -> str:
    if "skipped" in results:
        return f"### Keyword abstracts\n\nSkipped: {results['skipped']}."
    without, with_ = results["locomo"]["without"], results["locomo"]["with"]
    built = with_["abstracts"]
    lines = [
        "### Keyword abstracts: signposts on LoCoMo, and the cost of building them",
        "",
        f"LoCoMo ({without['conversations']} conversations, {without['questions']} questions, the default embedder), "
        f"`recall(question, k=25, under=conversation, min_score=0)`, without abstracts and after `tree.abstracts()` "
        f"built {built['keywords']} (extractive, in {built['seconds']:.2f} s):",
        "",
        "| mode | R@5 without / with | R@10 without / with | R@25 without / with | median `recall` ms without / with |",
        "|---|---|---|---|---|",
    ]
    for mode in locomo.MODES:
        a, b = without["recall"][mode], with_["recall"][mode]
        cells = " | ".join(f"{a[f'R@{k}']:.1f} / {b[f'R@{k}']:.1f}" for k in locomo.KS)
        lines.append(f"| {mode} | {cells} | {without['latency_ms'][mode]['median']:.2f} / "
                     f"{with_['latency_ms'][mode]['median']:.2f} |")
    cost = results["build"]
    lines += ["", f"Build cost (offline, extractive): {cost['keywords']:,} keywords of {cost['per_keyword']} memories "
              f"each in one `abstracts()` call: {cost['seconds']:.2f} s, **{cost['keywords_per_s']:,.0f} keywords/s**; "
              f"baseline, one `normalize.terms` pass over the same texts: {cost['baseline_seconds']:.2f} s; "
              f"a second call with nothing stale (digests only, nothing written): {cost['fresh_check_seconds']:.2f} s."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.quick)
    print(json.dumps(results.get("build", results), indent=1))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
