"""``after_turn`` latency: LoCoMo sessions committed one turn pair at a time, as an agent runtime
calls the hook after each model call, next to plain writes of the same turns.

Each conversation of ../shared/data/locomo_dev.json is its own scope (``user:<sample_id>``);
each session grows by two messages at a time and ``after_turn(messages so far, session_id,
scope)`` is timed after each pair (offline extractor, turns kept). The baselines, in the same
run on fresh trees, write the same pair as two ``create_info`` calls (timed together) and as
one ``batch_create_infos``, linked to a keyword per session. Every tree is durable
(``durability="full"``) with the embedding worker on, as an agent would run it: the timings are
what the caller waits for, the embedding happens afterwards on the worker.

    .venv/bin/python bench/memory_hooks.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkpoint import build  # noqa: E402
from memory_commit import DATA, sessions  # noqa: E402
from stats import cell, summary  # noqa: E402

from kwtree import KeywordTree  # noqa: E402


def _pairs(messages: list[dict[str, Any]]) -> list[int]:
    """The lengths of the conversation after each turn pair (the last pair may be one message)."""
    return list(range(2, len(messages), 2)) + [len(messages)]


def run(quick: bool = False, work: Path | None = None, conversations: int | None = None,
        per_conversation: int | None = None, large: tuple[int, int] | None = None) -> dict[str, Any]:
    """The timings over the first ``conversations`` (default 1 quick, 3 full), each cut to its
    first ``per_conversation`` sessions when given; and in a ``large`` tree of (keywords, infos)
    (default ``LARGE_KEYWORDS``, ``LARGE_INFOS``; a tenth quick)."""
    data = json.loads(DATA.read_text())
    samples = data[: conversations or (1 if quick else 3)]
    plan = [(f"user:{sample['sample_id']}", session) for sample in samples
            for session in sessions(sample)[:per_conversation]]
    hook_ms: list[float] = []
    single_ms: list[float] = []
    batch_ms: list[float] = []
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        with KeywordTree(Path(tmp) / "hooks") as tree:
            for scope, (session_id, _, messages) in plan:
                for end in _pairs(messages):
                    started = time.perf_counter()
                    tree.after_turn(messages[:end], session_id, scope)
                    hook_ms.append((time.perf_counter() - started) * 1000)
            tree.wait_indexed(600)
        for name, samples_ms in (("single", single_ms), ("batch", batch_ms)):
            with KeywordTree(Path(tmp) / name) as tree:
                for _, (session_id, _, messages) in plan:
                    keyword = tree.create_keyword(session_id, llm_auto_place=False)
                    start = 0
                    for end in _pairs(messages):
                        pair = messages[start:end]
                        started = time.perf_counter()
                        if name == "single":
                            for message in pair:
                                tree.create_info(message["content"], keyword_ids=[keyword.id])
                        else:
                            tree.batch_create_infos([{"content": m["content"], "keyword_ids": [keyword.id]}
                                                     for m in pair])
                        samples_ms.append((time.perf_counter() - started) * 1000)
                        start = end
                tree.wait_indexed(600)
        keywords, infos = large or (LARGE_KEYWORDS // (10 if quick else 1), LARGE_INFOS // (10 if quick else 1))
        grown = _large_tree(plan[:LARGE_SESSIONS], Path(tmp), keywords, infos)
    return {"conversations": len(samples), "sessions": len(plan), "pairs": len(hook_ms),
            "after_turn": summary(hook_ms), "create_info": summary(single_ms),
            "batch_create_infos": summary(batch_ms), "raw_ms": {"after_turn": hook_ms}, "large": grown}


#: The tree a long-used memory grows into: ``after_turn`` is timed there too (full run; a tenth quick).
LARGE_KEYWORDS, LARGE_INFOS, LARGE_SESSIONS = 50_000, 100_000, 2


def _large_tree(plan: list[tuple[str, Any]], work: Path, keywords: int, infos: int) -> dict[str, Any]:
    """``after_turn`` of ``plan``'s sessions, pair by pair, into a tree that already holds
    ``keywords`` keywords and ``infos`` infos, and ``create_info`` of each pair's turns into a
    copy of it (the embedding worker off: no vectors of the filler to wait for)."""
    import shutil

    build(work / "large", keywords, infos)
    shutil.copytree(work / "large", work / "large-single")
    hook_ms: list[float] = []
    single_ms: list[float] = []
    with KeywordTree(work / "large", worker=False) as tree:
        for scope, (session_id, _, messages) in plan:
            for end in _pairs(messages):
                started = time.perf_counter()
                tree.after_turn(messages[:end], session_id, scope)
                hook_ms.append((time.perf_counter() - started) * 1000)
    with KeywordTree(work / "large-single", worker=False) as tree:
        for _, (session_id, _, messages) in plan:
            keyword = tree.create_keyword(session_id, llm_auto_place=False)
            start = 0
            for end in _pairs(messages):
                started = time.perf_counter()
                for message in messages[start:end]:
                    tree.create_info(message["content"], keyword_ids=[keyword.id])
                single_ms.append((time.perf_counter() - started) * 1000)
                start = end
    return {"keywords": keywords, "infos": infos, "sessions": len(plan), "pairs": len(hook_ms),
            "after_turn": summary(hook_ms), "create_info": summary(single_ms)}


def markdown(result: dict[str, Any]) -> str:
    rows = [("`after_turn` (incremental `commit_session`, offline extractor, turns kept)", result["after_turn"]),
            ("baseline: `create_info` of each turn of the pair", result["create_info"]),
            ("baseline: `batch_create_infos` of the pair", result["batch_create_infos"])]
    hook = result["after_turn"]
    return "\n".join([
        "### `after_turn` latency (LoCoMo)",
        "",
        f"{result['pairs']} turn pairs of {result['sessions']} sessions of {result['conversations']} LoCoMo "
        "conversations, each session committed a pair at a time as an agent runtime would after each model "
        "call; durable writes, the embedding worker on (embedding is not waited for).",
        "",
        "| call per turn pair | ms: median / p90 / p99 / max |",
        "|---|---|",
        *(f"| {name} | {cell(row)} |" for name, row in rows),
        "",
        f"`after_turn` p50 {hook['median']:.1f} ms, p99 {hook['p99']:.1f} ms; ÷ `create_info` (medians): "
        f"{hook['median'] / result['create_info']['median']:.1f}×.",
        *(["", *_large_markdown(result["large"])] if "large" in result else []),  # (results of before issue 29)
    ])


def _large_markdown(large: dict[str, Any]) -> list[str]:
    hook, single = large["after_turn"], large["create_info"]
    return [
        f"In a tree that already holds {large['keywords']:,} keywords and {large['infos']:,} memories "
        f"({large['pairs']} pairs of {large['sessions']} sessions, the embedding worker off; the first pair "
        "builds the agent's index of every keyword name):",
        "",
        "| call per turn pair | ms: median / p90 / p99 / max |",
        "|---|---|",
        f"| `after_turn` | {cell(hook)} |",
        f"| baseline: `create_info` of each turn of the pair | {cell(single)} |",
        "",
        f"÷ `create_info` (medians): {hook['median'] / single['median']:.1f}×.",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(markdown(run(args.quick)))
