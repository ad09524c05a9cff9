"""How long does kwtree take to start, next to a bare Python?

Each command runs ``runs`` times as a fresh process, interleaved (one round runs every command
once), so a burst of load on this shared machine hits all of them alike: ``python -c pass``
(the baseline), ``import kwtree``, ``from kwtree import KeywordTree`` (the facade and what it
imports), ``kwtree --help``, ``kwtree --version`` and opening and closing a small tree (the
quickstart's sample, 40-odd keywords) in a new process. The table gives the minimum (the
least disturbed run) and the median in ms, and each minimum as a multiple of the baseline's;
the issue's target is ``kwtree --help`` and ``--version`` within about 3x.

    .venv/bin/python bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stats import command_rows  # noqa: E402

from kwtree import KeywordTree  # noqa: E402
from kwtree.cli.outline import load_outline  # noqa: E402

SAMPLE = ROOT / "data" / "quickstart.json"
_OPEN = "import sys, kwtree\nwith kwtree.KeywordTree(sys.argv[1]):\n    pass"


def _script() -> list[str]:
    """The installed ``kwtree`` console script (beside this Python), else ``python -m kwtree``."""
    script = Path(sys.executable).with_name("kwtree")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kwtree"]


def commands(tree: Path) -> dict[str, tuple[str, list[str]]]:
    """key -> (label, argv); ``bare`` is the baseline."""
    python, kwtree = sys.executable, _script()
    return {
        "bare": ("python -c pass (baseline)", [python, "-c", "pass"]),
        "import": ("python -c 'import kwtree'", [python, "-c", "import kwtree"]),
        "facade": ("python -c 'from kwtree import KeywordTree'", [python, "-c", "from kwtree import KeywordTree"]),
        "help": ("kwtree --help", [*kwtree, "--help"]),
        "version": ("kwtree --version", [*kwtree, "--version"]),
        "open": ("open and close a small tree (new process)", [python, "-c", _OPEN, str(tree)]),
    }


#: The commands run as after a normal install, whose bytecode is compiled: if this environment
#: says not to write it, each run would compile kwtree's sources again (~10 ms a module).
_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _once(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT, env=_ENV)
    return time.perf_counter() - started


def run(runs: int = 20, work: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=work) as directory:
        tree = Path(directory) / "sample"
        with KeywordTree(tree, worker=False) as opened:
            load_outline(opened, SAMPLE)
        table = commands(tree)
        raw: dict[str, list[float]] = {key: [] for key in table}
        for _, argv in table.values():
            _once(argv)  # warm the page cache, the bytecode and the tree's caches; not counted
        for _ in range(runs):
            for key, (_, argv) in table.items():
                raw[key].append(_once(argv) * 1e3)
    return {"runs": runs, "labels": {key: label for key, (label, _) in table.items()}, "raw_ms": raw}


def markdown(result: dict[str, Any]) -> str:
    raw = result["raw_ms"]
    lines = [
        "### Start-up: import and the command line (fresh processes)",
        "",
        f"`bench/startup.py`: each command run {result['runs']} times, interleaved; ms, minimum and median, "
        "and the minimum as a multiple of a bare Python's (target for `kwtree --help` / `--version`: about 3x).",
        "",
        "| command | min ms | median ms | x bare (min) |",
        "|---|---:|---:|---:|",
    ]
    return "\n".join([*lines, *command_rows(raw, result["labels"], ["bare"])])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    print(markdown(run(args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
