"""Commit throughput: LoCoMo sessions through ``commit_session`` (offline extractor, turns kept),
next to a plain ``batch_create_infos`` of the same turns.

Each conversation of ../shared/data/locomo_dev.json is its own scope (``user:<sample_id>``);
its sessions are committed in order, each with its date as ``session_time``. The baseline, in
the same run on a fresh tree, writes each session's turns as one ``batch_create_infos`` linked
to a keyword per session (created untimed). Both trees are durable (``durability="full"``) and
run without the embedding worker (``worker=False``): the figures are the write path alone; the
commit's dedup prefilter then sees BM25 hits only, no vectors.

With ``--llm anthropic|openai`` the commits ask that LLM (extraction, placement, dedup), built
from the same environment variables as ``KWTREE_LLM`` (kwtree.agent.llm_env: the key, model
and endpoint of the chosen client, ``KWTREE_LLM_TIMEOUT``, ``KWTREE_LLM_MAX_RETRIES``), and the
table adds the LLM calls, input and output tokens each committed session cost, read from the
client's ``usage``; the timings then include the LLM's answers.

    .venv/bin/python bench/memory_commit.py [--quick] [--llm offline|anthropic|openai]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import cell, summary  # noqa: E402

from kwtree import CommitOptions, KeywordTree, LLMClient, llm_from_env  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo_dev.json"


def session_time(text: str) -> float | None:
    """LoCoMo's session date ("1:56 pm on 8 May, 2023") as epoch seconds (taken as UTC)."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def sessions(sample: dict, named: bool = False) -> list[tuple[str, float | None, list[dict[str, Any]]]]:
    """(session id, date, messages) of one conversation, in order; speaker A is the "user" and
    speaker B the "assistant", or with ``named`` each message's role is its speaker's name (two
    people talking: the extractor reads each one's facts as that person's)."""
    conversation = sample["conversation"]
    found = []
    number = 1
    while f"session_{number}" in conversation:
        messages = []
        for turn in conversation[f"session_{number}"]:
            text = turn["text"] + (f" [image: {turn['blip_caption']}]" if turn.get("blip_caption") else "")
            role = "user" if turn["speaker"] == conversation["speaker_a"] else "assistant"
            if named:
                role = turn["speaker"]
            messages.append({"role": role, "content": f"{turn['speaker']}: {text}"})
        found.append((f"{sample['sample_id']}-s{number}",
                      session_time(conversation.get(f"session_{number}_date_time", "")), messages))
        number += 1
    return found


#: The client's usage figures reported per committed session.
LLM_FIGURES = ("calls", "input_tokens", "output_tokens", "retries")


def run(quick: bool = False, work: Path | None = None, conversations: int | None = None,
        llm: LLMClient | None = None) -> dict[str, Any]:
    """Commit the sessions (through ``llm`` when given, which must have a ``usage`` dict), then
    the baseline; timings, counts and, with ``llm``, what each session cost it."""
    data = json.loads(DATA.read_text())
    samples = data[: conversations or (2 if quick else len(data))]
    plan = [(f"user:{sample['sample_id']}", session) for sample in samples for session in sessions(sample)]
    commit_s: list[float] = []
    batch_s: list[float] = []
    counts = {"extracted": 0, "created": 0, "appended": 0, "merged": 0, "superseded": 0, "skipped": 0}
    spent: dict[str, list[int]] = {figure: [] for figure in LLM_FIGURES}
    fallbacks = 0
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        with KeywordTree(Path(tmp) / "commit", worker=False, llm_client=llm) as tree:
            for scope, (session_id, date, messages) in plan:
                before = dict(getattr(llm, "usage", {}))
                started = time.perf_counter()
                result = tree.commit_session(messages, session_id=session_id, scope=scope,
                                             options=CommitOptions(session_time=date))
                commit_s.append(time.perf_counter() - started)
                for key in counts:
                    counts[key] += getattr(result, key)
                fallbacks += result.fell_back
                if llm is not None:
                    after = getattr(llm, "usage", {})
                    for figure in LLM_FIGURES:
                        spent[figure].append(after.get(figure, 0) - before.get(figure, 0))
            log_commit = tree.tree_metrics()["log_bytes"]
        with KeywordTree(Path(tmp) / "batch", worker=False) as tree:
            for _, (session_id, _, messages) in plan:
                keyword = tree.create_keyword(session_id, llm_auto_place=False)
                specs = [{"content": m["content"], "keyword_ids": [keyword.id]} for m in messages]
                started = time.perf_counter()
                tree.batch_create_infos(specs)
                batch_s.append(time.perf_counter() - started)
            log_batch = tree.tree_metrics()["log_bytes"]
    turns = sum(len(session[2]) for _, session in plan)
    return {
        "conversations": len(samples), "sessions": len(plan), "turns": turns, "counts": counts,
        "commit": {"sessions_per_s": len(plan) / sum(commit_s), "ms": summary([s * 1000 for s in commit_s]),
                   "log_bytes": log_commit},
        "batch": {"sessions_per_s": len(plan) / sum(batch_s), "ms": summary([s * 1000 for s in batch_s]),
                  "log_bytes": log_batch},
        "raw_s": {"commit": commit_s, "batch": batch_s},
        "llm": None if llm is None else {"name": str(getattr(llm, "name", type(llm).__name__)),
                                         "sessions_fell_back": fallbacks, "per_session": spent},
    }


def markdown(result: dict[str, Any]) -> str:
    llm = result.get("llm")
    rows = [
        (f"`commit_session` ({'LLM ' + llm['name'] if llm else 'offline extractor'}, turns kept)", result["commit"]),
        ("baseline: `batch_create_infos` of the same turns", result["batch"]),
    ]
    counts = result["counts"]
    lines = [
        "### Committing sessions (LoCoMo)",
        "",
        f"{result['sessions']} sessions ({result['turns']} turns) of {result['conversations']} LoCoMo "
        "conversations, each committed in order into its own scope; durable writes, no embedding worker.",
        "",
        "| path | sessions/s | ms per session: median / p90 / p99 / max | log bytes |",
        "|---|---|---|---|",
        *(f"| {name} | {row['sessions_per_s']:,.1f} | {cell(row['ms'])} | {row['log_bytes']:,} |"
          for name, row in rows),
        "",
        f"The commits extracted {counts['extracted']} candidates: {counts['created']} created, {counts['appended']} "
        f"appended, {counts['merged']} merged, {counts['superseded']} superseded, {counts['skipped']} skipped. "
        f"Commit ÷ batch (medians): {result['commit']['ms']['median'] / result['batch']['ms']['median']:.1f}×.",
    ]
    if llm:
        per_session = llm["per_session"]
        lines += [
            "",
            f"What each committed session cost the LLM ({llm['name']}; {llm['sessions_fell_back']} of "
            f"{result['sessions']} sessions fell back offline for at least one step):",
            "",
            "| per session | median / p90 / p99 / max | total |",
            "|---|---|---|",
            *(f"| {figure.replace('_', ' ')} | {cell(summary([float(v) for v in values]), 0)} | {sum(values):,} |"
              for figure, values in per_session.items()),
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--llm", choices=("offline", "anthropic", "openai"), default="offline",
                        help="the LLM the commits ask, configured by its environment variables (default: offline)")
    args = parser.parse_args()
    os.environ["KWTREE_LLM"] = args.llm  # one reading of the LLM settings: the CLI's and kwtree mcp's
    print(markdown(run(args.quick, llm=llm_from_env())))
