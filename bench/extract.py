"""How long does the offline extractor take per conversation session, and what does it find?

Every LoCoMo dev session (../shared/data/locomo_dev.json; the speakers' names are the roles,
the session's date the anchor) goes through ``kwtree.memory.extract.extract_offline``; the
baseline, measured in the same rounds, is one plain tokenisation pass
(``kwtree.normalize.terms``) over the same text. Rounds are interleaved (one round runs both
over every session), so a burst of load on this shared machine hits both alike. The table
gives ms per session (median, p90, max over sessions of each session's fastest round), the
ratio to the baseline, and the candidates found per category. A count, not a quality figure:
nobody checked which candidates are true.

    .venv/bin/python bench/extract.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kwtree.memory.candidates import CATEGORIES, ExtractContext  # noqa: E402
from kwtree.memory.extract import extract_offline  # noqa: E402
from kwtree.memory.when import parse_time  # noqa: E402
from kwtree.normalize import terms  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo_dev.json"


def sessions() -> list[tuple[list[dict[str, str]], ExtractContext]]:
    """Every session of every dev conversation, as messages and an extraction context."""
    found = []
    for sample in json.loads(DATA.read_text()):
        conversation = sample["conversation"]
        number = 1
        while f"session_{number}" in conversation:
            turns = conversation[f"session_{number}"]
            messages = [{"role": turn["speaker"], "content": turn["text"]} for turn in turns]
            when = parse_time(conversation[f"session_{number}_date_time"])
            found.append((messages, ExtractContext(f"{sample['sample_id']}/{number}", 0, when)))
            number += 1
    return found


def _fastest(samples: list[list[float]]) -> list[float]:
    """Each session's fastest time over the rounds (``samples[round][session]``)."""
    return [min(per_session) for per_session in zip(*samples, strict=True)]


def run(rounds: int = 5, work: Path | None = None) -> dict[str, Any]:
    if not DATA.exists():
        return {"skipped": f"{DATA} not found (LoCoMo lives in ../shared/data/)"}
    loaded = sessions()
    texts = ["\n".join(m["content"] for m in messages) for messages, _ in loaded]
    extract_ms: list[list[float]] = []
    terms_ms: list[list[float]] = []
    counts: Counter[str] = Counter()
    for round_number in range(rounds):
        this_extract, this_terms = [], []
        for (messages, context), text in zip(loaded, texts, strict=True):
            started = time.perf_counter()
            found = extract_offline(messages, context)
            this_extract.append((time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            terms(text)
            this_terms.append((time.perf_counter() - started) * 1e3)
            if round_number == 0:
                counts.update(candidate.category for candidate in found)
        extract_ms.append(this_extract)
        terms_ms.append(this_terms)
    return {
        "rounds": rounds,
        "sessions": len(loaded),
        "turns": sum(len(messages) for messages, _ in loaded),
        "extract_ms": _fastest(extract_ms),
        "terms_ms": _fastest(terms_ms),
        "candidates": {category: counts.get(category, 0) for category in CATEGORIES},
    }


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def markdown(result: dict[str, Any]) -> str:
    title = "### Offline extraction (LoCoMo dev sessions)"
    if "skipped" in result:
        return f"{title}\n\n{result['skipped']}"
    extract, base = result["extract_ms"], result["terms_ms"]
    ratio = statistics.median(e / b for e, b in zip(extract, base, strict=True) if b > 0)
    total = sum(result["candidates"].values())
    lines = [
        title,
        "",
        f"`bench/extract.py`: {result['sessions']} sessions, {result['turns']:,} turns, each session's fastest of "
        f"{result['rounds']} interleaved rounds; baseline: one `kwtree.normalize.terms` pass over the same text.",
        "",
        "| per session | median ms | p90 ms | max ms |",
        "|---|---:|---:|---:|",
        f"| `extract_offline` | {statistics.median(extract):.2f} | {_p90(extract):.2f} | {max(extract):.2f} |",
        f"| `terms` (baseline) | {statistics.median(base):.2f} | {_p90(base):.2f} | {max(base):.2f} |",
        "",
        f"Median ratio to the baseline: {ratio:.1f}x. Candidates found ({total}, "
        f"{total / result['sessions']:.1f} a session; a count, not a quality figure):",
        "",
        "| " + " | ".join(result["candidates"]) + " |",
        "|" + "---:|" * len(result["candidates"]),
        "| " + " | ".join(str(count) for count in result["candidates"].values()) + " |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(markdown(run(args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
