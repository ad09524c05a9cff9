"""Facts that change: ../shared/updates_eval.py on ../shared/data/updates_dev.json, with the
tree's default embedder and with the hash embedder, side by side in one run.

The scorer is the shared one (its docstring and ../shared/data/updates_README.md say what it
measures: 30 hand-written users whose home, job, partner, diet ... change over 3-6 sessions,
all in one tree with a scope each, 324 questions); this file runs it once per embedder in a
subprocess (``--json``) and prints the issue's figures against its targets.

    .venv/bin/python bench/updates.py [--quick]    # --quick: the hash embedder only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCORER = ROOT.parent / "shared" / "updates_eval.py"
DATA = ROOT.parent / "shared" / "data" / "updates_dev.json"
#: The issue's targets on dev, offline: (row, column, at least).
TARGETS = (("current", "cur>stale", 95.0), ("current", "hit@1", 80.0), ("constraint", "hit@5", 90.0),
           ("stable", "hit@5", 90.0), ("distractor", "own-top", 90.0), ("unrelated", "empty", 90.0),
           ("current", "asm-ok", 85.0))


def _score(embedder: str, users: str | None) -> dict:
    more = ["--users", users] if users else []
    # "default" is what a user gets: not the hash embedder bench/run.py sets for the other suites
    env = {name: value for name, value in os.environ.items() if name != "KWTREE_EMBEDDER" or embedder != "default"}
    done = subprocess.run([sys.executable, str(SCORER), str(DATA), "--embedder", embedder, "--json", *more],
                          capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    result: dict = json.loads(done.stdout)
    return result


def run(quick: bool = False, work: Path | None = None, users: str | None = None) -> dict:
    """The scorer's report per embedder ("hash", and "default" unless ``quick``), over every
    user or the comma-separated ``users``."""
    del work  # the scorer keeps its trees in a temporary directory of its own
    if not SCORER.exists() or not DATA.exists():
        return {"skipped": f"{SCORER} or {DATA} not found (they live in ../shared/)"}
    return {"runs": {spec: _score(spec, users) for spec in (("hash",) if quick else ("default", "hash"))}}


def markdown(results: dict) -> str:
    if "skipped" in results:
        return f"### Facts that change (updates dev)\n\nSkipped: {results['skipped']}."
    runs = results["runs"]
    lines = ["### Facts that change (updates dev: 30 users, 324 questions, one tree, a scope each)", "",
             "`../shared/updates_eval.py` (offline extractor, `recall(q, k=10, scope)` at the default floor; "
             "`assemble(q, scope, 300)`); per embedder, the issue's target in the last column.", "",
             "| figure | " + " | ".join(runs) + " | target |", "|---|" + "---:|" * len(runs) + "---:|"]
    for row, column, target in TARGETS:
        cells = [f"{report['table'][row].get(column, float('nan')):.1f}" for report in runs.values()]
        lines.append(f"| {row} {column} | " + " | ".join(cells) + f" | >= {target:.0f} |")
    for label, row, column in (("all hit@1 / hit@5", "all", ("hit@1", "hit@5")),
                               ("all hit@1 / hit@5, min_score=0", "all", ("hit@1 floor0", "hit@5 floor0")),
                               ("answerable questions returning nothing", "all", ("empty",))):
        cells = [" / ".join(f"{report['table'][row][c]:.1f}" for c in column) for report in runs.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " | |")
    counts = [f"{r['commit_counts']['superseded']} of {r['commit_counts']['extracted']}" for r in runs.values()]
    lines.append("| candidates that superseded a fact | " + " | ".join(counts) + " | |")
    seconds = [f"{r['build_s']:.1f} / {r['seconds']:.1f}" for r in runs.values()]
    lines.append("| seconds: build / whole run | " + " | ".join(seconds) + " | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    results = run(parser.parse_args(argv).quick)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
