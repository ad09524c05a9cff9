"""The relevance floor on LoCoMo, and what reading inside a scope costs.

**Floor.** Each conversation of ../shared/data/locomo_dev.json becomes its own memory (a tree,
turns stored as bench/locomo.py stores them). Real pairs: each question with evidence asked of
its own conversation's memory, R@10 of the evidence turns (``recall(question, k=10,
min_score=floor)``) for each floor of the sweep, 0 (no floor) first. Cross pairs: every
question asked of every OTHER conversation's memory; the share for which ``recall(question,
k=10, min_score=floor)`` returns nothing. The issue's target:
at the default floor, >= 90% of cross questions return nothing and real R@10 loses <= 1 point.

**Scopes.** All the conversations in one tree, each under a scope keyword ``user:<id>``; each
question timed as ``recall(question, k=10)`` (every memory) and ``recall(question, k=10,
scope="user:<its conversation>")``, interleaved in the same run; and the floor per scope: R@10
in its own scope at the default floor and at 0, and the share of questions asked in every
other conversation's scope that return nothing.

    .venv/bin/python bench/floor.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo
from stats import cell, summary

from kwtree import KeywordTree
from kwtree.retrieval.relevance import MIN_SCORE

SWEEP = (0.0, 0.3, 0.35, 0.4, 0.45)


def _questions(sample: dict, known: set[str]) -> list[tuple[str, list[str]]]:
    found = []
    for qa in sample["qa"]:
        evidence = locomo.evidence_ids(qa.get("evidence", []), known)
        if evidence:
            found.append((qa["question"], evidence))
    return found


def _floor(samples: list[dict], work: Path) -> dict:
    trees, loaded = [], []
    for number, sample in enumerate(samples):
        tree = KeywordTree(work / f"conv{number}", durability="none")
        _, dia_of, known = locomo.load(tree, sample)
        tree.wait_indexed()
        trees.append(tree)
        loaded.append((dia_of, _questions(sample, known)))
    real: dict[float, list[float]] = {floor: [] for floor in SWEEP}
    empty: dict[float, list[bool]] = {floor: [] for floor in SWEEP}
    for number, (dia_of, questions) in enumerate(loaded):
        for question, evidence in questions:
            for floor in SWEEP:
                top = {dia_of.get(hit.info.id) for hit in trees[number].recall(question, k=10, min_score=floor)}
                real[floor].append(sum(dia in top for dia in evidence) / len(evidence))
                if floor > 0:
                    empty[floor] += [not tree.recall(question, k=10, min_score=floor)
                                     for other, tree in enumerate(trees) if other != number]
    for tree in trees:
        tree.close()
    rows = {str(floor): {"real_R@10": 100 * statistics.mean(real[floor]),
                         "cross_empty_pct": 100 * statistics.mean(empty[floor]) if empty[floor] else 0.0}
            for floor in SWEEP}
    if str(MIN_SCORE) not in rows:
        raise SystemExit(f"the default floor {MIN_SCORE} is not in SWEEP; add it")
    return {"questions": len(real[0.0]), "cross_questions": len(empty[MIN_SCORE]), "sweep": rows,
            "default": MIN_SCORE, "at_default": rows[str(MIN_SCORE)], "no_floor_R@10": rows["0.0"]["real_R@10"]}


def _scopes(samples: list[dict], work: Path) -> dict:
    tree = KeywordTree(work / "scoped", durability="none")
    asked = []
    dia_of: dict[str, str] = {}
    for sample in samples:
        scope = f"user:{sample['sample_id']}"
        holder = tree.create_keyword(scope, llm_auto_place=False, metadata={"scope": scope})
        conv_id, dias, known = locomo.load(tree, sample)
        dia_of.update(dias)
        tree.move_keyword(conv_id, holder.id)
        asked += [(question, evidence, scope) for question, evidence in _questions(sample, known)]
    tree.wait_indexed()
    plain: list[float] = []
    scoped: list[float] = []
    real: dict[float, list[float]] = {0.0: [], MIN_SCORE: []}
    for question, evidence, scope in asked:
        started = time.perf_counter()
        tree.recall(question, k=10)
        middle = time.perf_counter()
        tree.recall(question, k=10, scope=scope)
        plain.append(1000 * (middle - started))
        scoped.append(1000 * (time.perf_counter() - middle))
        for floor in real:
            top = {dia_of.get(hit.info.id) for hit in tree.recall(question, k=10, scope=scope, min_score=floor)}
            real[floor].append(sum(dia in top for dia in evidence) / len(evidence))
    scopes = sorted({scope for _, _, scope in asked})
    empty = [not tree.recall(question, k=10, scope=other) for question, _, scope in asked
             for other in scopes if other != scope]
    tree.close()
    return {"questions": len(asked), "all_ms": summary(plain), "scoped_ms": summary(scoped),
            "real_R@10": 100 * statistics.mean(real[MIN_SCORE]), "no_floor_R@10": 100 * statistics.mean(real[0.0]),
            "cross_questions": len(empty), "cross_empty_pct": 100 * statistics.mean(empty) if empty else 0.0}


def run(quick: bool = False, work: Path | None = None, conversations: int | None = None,
        questions: int | None = None) -> dict:
    """Both measurements over the first ``conversations`` (2 when ``quick``, else all), each
    asking at most ``questions`` of its questions (all by default)."""
    if not locomo.DATA.exists():
        return {"skipped": f"{locomo.DATA} not found (LoCoMo lives in ../shared/data/)"}
    samples = json.loads(locomo.DATA.read_text())[: conversations or (2 if quick else None)]
    for sample in samples:
        sample["qa"] = sample["qa"][:questions]
    with tempfile.TemporaryDirectory(dir=work) as directory:
        return {"conversations": len(samples), "floor": _floor(samples, Path(directory)),
                "scopes": _scopes(samples, Path(directory))}


def markdown(results: dict) -> str:
    if "skipped" in results:
        return f"### Relevance floor and scopes\n\nSkipped: {results['skipped']}."
    floor, scopes = results["floor"], results["scopes"]
    at = floor["at_default"]
    lines = [
        f"### Relevance floor (LoCoMo, {results['conversations']} conversations, one memory each)", "",
        f"{floor['questions']} questions asked of their own conversation (R@10 of the evidence turns), "
        f"{floor['cross_questions']:,} asked of every other conversation (share returning nothing). "
        f"Default floor `min_score={floor['default']}`: real R@10 **{at['real_R@10']:.1f}** "
        f"(no floor: {floor['no_floor_R@10']:.1f}), cross questions returning nothing **{at['cross_empty_pct']:.1f}%** "
        "(target: >= 90%, losing <= 1 point).", "",
        "| min_score | real R@10 | cross: nothing returned |", "|---:|---:|---:|",
    ]
    lines += [f"| {name} | {row['real_R@10']:.1f} | {row['cross_empty_pct']:.1f}% |"
              for name, row in floor["sweep"].items()]
    lines += ["", f"### Recall inside a scope ({scopes['questions']} questions, all conversations in one tree)", ""]
    if "cross_questions" in scopes:  # (results recorded before the floor per scope was measured lack it)
        lines += [f"The floor per scope (each question asked in its own conversation's scope; and in every other "
                  f"conversation's scope, {scopes['cross_questions']:,} pairs): real R@10 "
                  f"**{scopes['real_R@10']:.1f}** at the default floor (no floor: {scopes['no_floor_R@10']:.1f}), "
                  f"cross questions returning nothing **{scopes['cross_empty_pct']:.1f}%** (target: >= 90%, "
                  "losing <= 1 point).", ""]
    lines += ["| call | ms (median / p90 / p99 / max) |", "|---|---|",
              f"| `recall(q, k=10)` (every memory; baseline) | {cell(scopes['all_ms'], 2)} |",
              f"| `recall(q, k=10, scope=\"user:<conversation>\")` | {cell(scopes['scoped_ms'], 2)} |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.quick)
    print(json.dumps(results, indent=1))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
