"""Placement quality on a real hierarchy: WordNet 3.0 noun subtrees (food, device, animal).

Build the tree from ../shared/data/wordnet30_noun_subtrees.tsv (names, lemmas as aliases,
glosses as descriptions), hide a fixed random sample of leaves, then place each hidden leaf
with ``create_keyword(name, description=gloss)`` through the offline navigator (no LLM, no
network) and score where it landed: the exact original parent, and the correct ancestor at
depths 1, 2 and 3. Baselines measured in the same run on the same tree:

- kNN: the parent of the existing keyword whose name and gloss are most similar to the leaf's
  (TF-IDF cosine over the same terms the navigator uses) — the classic lexical answer;
- global best parent: the navigator's own parent score taken over the whole tree at once, with
  no descend loop (what the loop's rounds and candidate lists cost, if anything).

    .venv/bin/python bench/placement.py [--quick] [--seed N]
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import cell, summary  # noqa: E402

from kwtree import DuplicateKeywordError, KeywordTree  # noqa: E402
from kwtree.agent.lexicon import terms  # noqa: E402
from kwtree.normalize import normalize_name  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "wordnet30_noun_subtrees.tsv"
#: The benchmark's sample. The scoring weights were tuned on seeds 7, 11 and 12, never this one.
SEED = 2026
HIDDEN = 300


def load_rows(path: Path = DATA) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def build_specs(rows: list[dict[str, str]], hidden: set[str]) -> list[dict]:
    """Batch specs for every row not hidden; names that collide after kwtree's normalisation
    (WordNet keeps e.g. "menorah" and "Menorah" apart) get the synset offset appended."""
    seen: set[tuple[str, str]] = set()
    specs = []
    for row in rows:
        if row["id"] in hidden:
            continue
        name = row["name"]
        if (row["parent"], normalize_name(name)) in seen:
            name = f"{name} [{row['id']}]"
        seen.add((row["parent"], normalize_name(name)))
        lemmas = [lemma.strip() for lemma in row["lemmas"].split(";") if lemma.strip()]
        aliases = [lemma for lemma in lemmas if normalize_name(lemma) != normalize_name(name)]
        spec = {"ref": row["id"], "name": name, "aliases": list(dict.fromkeys(aliases)), "description": row["gloss"]}
        if row["parent"]:
            spec["parent_ref"] = row["parent"]
        specs.append(spec)
    return specs


def _ancestors(by_id: dict[str, dict[str, str]], wordnet_id: str | None) -> list[str]:
    chain: list[str] = []
    while wordnet_id:
        chain.append(wordnet_id)
        wordnet_id = by_id[wordnet_id]["parent"]
    return chain[::-1]


class Score:
    """Exact parent and correct ancestor at depths 1-3 (depth 1 = food/device/animal)."""

    def __init__(self) -> None:
        self.n = 0
        self.hits = Counter()

    def add(self, by_id: dict[str, dict[str, str]], truth_parent: str, got_parent: str | None) -> None:
        self.n += 1
        truth, got = _ancestors(by_id, truth_parent), _ancestors(by_id, got_parent)
        self.hits["exact"] += got_parent == truth_parent
        for depth in (1, 2, 3):
            self.hits[f"depth{depth}"] += (len(truth) >= depth and len(got) >= depth
                                           and got[depth - 1] == truth[depth - 1])

    def shares(self) -> dict[str, float]:
        return {key: 100.0 * self.hits[key] / self.n for key in ("exact", "depth1", "depth2", "depth3")}


def knn_parent(rows_by_term: dict[str, set[str]], profiles: dict[str, Counter], query: Counter,
               total: int) -> str | None:
    """Parent ref of the most similar existing keyword (TF-IDF cosine)."""
    idf = {t: math.log(total / (len(rows_by_term.get(t, ())) + 0.5)) + 0.1 for t in query}
    qnorm = math.sqrt(sum((query[t] * idf[t]) ** 2 for t in query)) or 1.0
    best, best_ref = 0.0, None
    touched = set().union(*(rows_by_term.get(t, set()) for t in query)) if query else set()
    for ref in touched:
        profile = profiles[ref]
        dot = sum(query[t] * idf[t] * profile[t] * idf[t] for t in query if t in profile)
        norm = math.sqrt(sum((c * math.log(total / (len(rows_by_term[t]) + 0.5)) + 0.1) ** 2
                             for t, c in profile.items()))
        if dot / (qnorm * norm) > best:
            best, best_ref = dot / (qnorm * norm), ref
    return best_ref


def _typo(name: str) -> str:
    """The name with two neighbouring letters in its middle swapped ("python" -> "pyhton")."""
    middle = len(name) // 2
    return name[: middle - 1] + name[middle] + name[middle - 1] + name[middle + 1 :]


def _search_latency(tree: KeywordTree, specs: list[dict]) -> dict:
    """search() on existing names (exact hits) and on misspelled ones (the offline loop),
    against an indexed SQLite lookup of the same normalised names."""
    database = sqlite3.connect(":memory:")
    database.execute("CREATE TABLE keyword (id TEXT, norm TEXT)")
    database.execute("CREATE INDEX by_norm ON keyword (norm)")
    database.executemany("INSERT INTO keyword VALUES (?, ?)", [(s["ref"], normalize_name(s["name"])) for s in specs])
    timings: dict[str, list[float]] = {"exact": [], "typo": [], "sqlite": []}
    found = 0
    for spec in specs:
        key = normalize_name(spec["name"])
        started = time.perf_counter()
        database.execute("SELECT id FROM keyword WHERE norm = ?", (key,)).fetchall()
        timings["sqlite"].append(time.perf_counter() - started)
        started = time.perf_counter()
        tree.search(spec["name"])
        timings["exact"].append(time.perf_counter() - started)
        started = time.perf_counter()
        result = tree.search(_typo(spec["name"]))
        timings["typo"].append(time.perf_counter() - started)
        found += result.node is not None and result.node.name == spec["name"]
    database.close()
    return {"n": len(specs), "typo_found_pct": 100.0 * found / max(1, len(specs)),
            "us": {key: summary([1e6 * v for v in values]) for key, values in timings.items()},
            "raw_us": {key: [round(1e6 * v, 1) for v in values] for key, values in timings.items()}}


def run(quick: bool = False, seed: int = SEED, work: Path | None = None, data: Path = DATA,
        hide: int | None = None) -> dict:
    """Build, hide ``hide`` leaves (default 300; 60 with ``quick``), place them, score."""
    if not data.exists():
        return {"skipped": f"{data} not found (the WordNet data set lives in ../shared/data/)"}
    rows = load_rows(data)
    by_id = {row["id"]: row for row in rows}
    has_children = {row["parent"] for row in rows}
    leaves = [row for row in rows if row["id"] not in has_children]
    hidden_rows = random.Random(seed).sample(leaves, hide or (60 if quick else HIDDEN))
    hidden = {row["id"] for row in hidden_rows}
    specs = build_specs(rows, hidden)

    with tempfile.TemporaryDirectory(dir=work) as directory:
        tree = KeywordTree(Path(directory) / "tree", durability="none")
        made = tree.batch_create_keywords(specs)
        ref_of = {keyword.id: spec["ref"] for spec, keyword in zip(specs, made, strict=True)}

        # Baseline 1: kNN over the same terms.
        profiles = {spec["ref"]: Counter(terms(" ".join([spec["name"], *spec["aliases"], spec["description"]])))
                    for spec in specs}
        rows_by_term: dict[str, set[str]] = {}
        for ref, profile in profiles.items():
            for term in profile:
                rows_by_term.setdefault(term, set()).add(ref)
        knn = Score()
        for row in hidden_rows:
            neighbour = knn_parent(rows_by_term, profiles, Counter(terms(f"{row['name']} {row['gloss']}")),
                                   len(profiles))
            knn.add(by_id, row["parent"], by_id[neighbour]["parent"] or None if neighbour else None)

        # Baseline 2: the navigator's parent score over the whole tree, no loop.
        best = Score()
        for row in hidden_rows:
            relevance = tree._agent.relevance(tree._read, row["name"], row["gloss"])
            _, parent = relevance.best_parent()
            best.add(by_id, row["parent"], ref_of.get(parent) if parent else None)

        # kwtree: create_keyword through the descend loop and the offline navigator.
        placed = Score()
        latencies, rounds, duplicates = [], Counter(), 0
        for row in hidden_rows:
            started = time.perf_counter()
            try:
                keyword = tree.create_keyword(row["name"], description=row["gloss"])
            except DuplicateKeywordError as exc:
                # The chosen parent already has a child of that name (WordNet repeats names
                # across synsets): scored where the agent put it, nothing is written.
                duplicates += 1
                placed.add(by_id, row["parent"], ref_of.get(tree.get_keyword(exc.existing_id).parent_id))
                continue
            latencies.append(time.perf_counter() - started)
            ref_of[keyword.id] = row["id"]
            placed.add(by_id, row["parent"], ref_of.get(keyword.parent_id))
        for op in tree.history()[-(len(hidden_rows) - duplicates):]:
            agent = op.audit["agent"] if op.audit else {}
            rounds[len([r for r in agent.get("rounds", []) if "round" in r])] += 1
        stats = tree.agent_stats()
        search = _search_latency(tree,
                                 [spec for spec in specs if len(spec["name"]) >= 6][:: max(1, len(specs) // 300)][:300])
        tree.close()

    latencies.sort()
    return {
        "seed": seed,
        "hidden": len(hidden_rows),
        "tree_size": len(specs),
        "kwtree": placed.shares(),
        "knn": knn.shares(),
        "global_best_parent": best.shares(),
        "llm_calls": stats["usage"].get("calls", 0),
        "navigator": stats["navigator"],
        "fallbacks": stats["fallbacks"],
        "rounds": dict(sorted(rounds.items())),
        "duplicates": duplicates,
        "search": search,
        "placement_ms": summary([1000 * v for v in latencies]),
        "raw_placement_ms": [round(1000 * v, 2) for v in latencies],
    }


def markdown(result: dict) -> str:
    if "skipped" in result:
        return f"### Placement (WordNet)\n\nSkipped: {result['skipped']}."
    lines = [
        "### Placement quality (WordNet 3.0 noun subtrees)",
        "",
        f"{result['hidden']} leaves hidden at random (seed {result['seed']}) from a {result['tree_size']:,}-keyword "
        f"tree (food, device, animal; depth up to 13), each placed with `create_keyword(name, description=gloss)` "
        f"through the **{result['navigator']}** navigator: LLM calls = {result['llm_calls']}. Share placed under the "
        "exact original parent, and under the correct ancestor at depths 1–3 (depth 1 = food / device / animal):",
        "",
        "| method | exact parent | depth 1 | depth 2 | depth 3 |",
        "|---|---|---|---|---|",
    ]
    for label, key in (("**kwtree create_keyword (descend loop, offline)**", "kwtree"),
                       ("baseline: parent of the most similar keyword (TF-IDF kNN)", "knn"),
                       ("baseline: navigator's parent score over the whole tree, no loop", "global_best_parent")):
        s = result[key]
        lines.append(f"| {label} | {s['exact']:.1f}% | {s['depth1']:.1f}% | {s['depth2']:.1f}% | {s['depth3']:.1f}% |")
    rounds = ", ".join(f"{n} rounds: {count}" for n, count in result["rounds"].items())
    lines += [
        "",
        f"Rounds per placement: {rounds}. Refused as duplicates of a child of the chosen parent "
        f"(scored where the agent put them): {result['duplicates']}. Fallbacks: {result['fallbacks'] or 'none'}. "
        f"Placement latency (whole `create_keyword`, durability none; n = {result['placement_ms']['n']}), ms, "
        f"median / p90 / p99 / max: {cell(result['placement_ms'])}.",
    ]
    search = result.get("search")
    if search:
        lines += [
            "",
            f"`search()` on the same tree, {search['n']} names, µs (median / p90 / p99 / max): exact hit "
            f"{cell(search['us']['exact'], 0)}, against an indexed SQLite lookup of the same normalised name "
            f"{cell(search['us']['sqlite'], 0)} "
            f"(**{search['us']['exact']['median'] / search['us']['sqlite']['median']:.2f}x**); "
            f"the name with two letters swapped, through the offline loop, {cell(search['us']['typo'], 0)}, "
            "finding the intended keyword "
            f"{search['typo_found_pct']:.0f}% of the time.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    print(markdown(run(args.quick, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
