"""The Claude Code hook recipe of docs/embedding-in-agents.md, run as written: the settings
file's commands in a real shell (``$HOME`` pointed at a temporary directory), fed the hooks'
JSON on stdin and a transcript in Claude Code's JSONL format."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from messages_api import HANG, FakeMessagesAPI, closed_port, llm_env

from kwtree import KeywordTree
from kwtree.integrations.claude_code import transcript_messages

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "kwtree"
pytestmark = pytest.mark.skipif(not SCRIPT.exists() or shutil.which("bash") is None,
                                reason="needs the installed kwtree script and bash")


def settings() -> dict[str, str]:
    """The hook commands of the docs' settings.json, by event."""
    text = (ROOT / "docs" / "embedding-in-agents.md").read_text(encoding="utf-8")
    block = next(found for found in re.findall(r"```json\n(.*?)```", text, re.S) if '"hooks"' in found)
    hooks = json.loads(block)["hooks"]
    return {event: entries[0]["hooks"][0]["command"] for event, entries in hooks.items()}


def hook(event: str, payload: Any, home: Path,
         environment: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the docs' command for ``event`` in bash, in ``environment`` (default: this process's)."""
    env = {**(os.environ if environment is None else environment), "HOME": str(home),
           "PATH": f"{SCRIPT.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run(["bash", "-c", settings()[event]], input=stdin, env=env, capture_output=True, text=True,
                          timeout=120)


def line(kind: str, content: Any, **more: Any) -> str:
    role = "assistant" if kind == "assistant" else "user"
    return json.dumps({"type": kind, "message": {"role": role, "content": content}, "sessionId": "cc-1",
                       "timestamp": "2024-05-08T10:00:00.000Z", **more})


FIRST = [
    line("user", "Hi, I'm Alice. I love green tea and I live in Leeds."),
    line("assistant", [{"type": "thinking", "thinking": "greet"}, {"type": "text", "text": "Nice to meet you!"},
                       {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "x"}}]),
    line("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "file text"}]),
    line("user", "Caveat: local command output", isMeta=True),
    line("assistant", [{"type": "text", "text": "A sub-agent's words."}], isSidechain=True),
    json.dumps({"type": "summary", "summary": "Greeting"}),
]
LATER = [line("user", "I work as a nurse at the General."), line("assistant", [{"type": "text", "text": "Noted."}])]


def test_the_transcript_keeps_only_the_conversation(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("\n".join(FIRST) + '\n{"type": "user", "mess', encoding="utf-8")  # a line being written
    assert transcript_messages(transcript) == [
        {"role": "user", "content": "Hi, I'm Alice. I love green tea and I live in Leeds.",
         "ts": "2024-05-08T10:00:00.000Z"},
        {"role": "assistant", "content": "Nice to meet you!", "ts": "2024-05-08T10:00:00.000Z"}]


def test_the_settings_recipe_loads_memory_and_commits_the_transcript_turn_by_turn(tmp_path: Path) -> None:
    memory = tmp_path / ".kwtree" / "memory"
    transcript = tmp_path / "transcript.jsonl"
    start = {"session_id": "cc-1", "transcript_path": str(transcript), "hook_event_name": "SessionStart",
             "source": "startup", "cwd": str(tmp_path)}
    empty = hook("SessionStart", start, tmp_path)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", "")

    stop = {**start, "hook_event_name": "Stop", "stop_hook_active": False}
    transcript.write_text("\n".join(FIRST) + "\n", encoding="utf-8")
    done = hook("Stop", stop, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    with transcript.open("a", encoding="utf-8") as file:
        file.write("\n".join(LATER) + "\n")
    assert hook("Stop", stop, tmp_path).returncode == 0
    assert hook("Stop", stop, tmp_path).returncode == 0  # nothing new: nothing written
    with KeywordTree(memory, read_only=True) as tree:
        commits = [op for op in tree.history() if op.kind == "commit_session"]
        assert len(commits) == 2 and {op.actor for op in commits} == {"agent"}
        remembered = " ".join(info.content for info in tree.memories("user:me"))
        assert "green tea" in remembered and "nurse" in remembered and "sub-agent" not in remembered

    loaded = hook("SessionStart", start, tmp_path)
    assert loaded.returncode == 0
    context = json.loads(loaded.stdout)["hookSpecificOutput"]
    assert context["hookEventName"] == "SessionStart" and "green tea" in context["additionalContext"]
    prompt = {**start, "hook_event_name": "UserPromptSubmit", "prompt": "Where do I work?"}
    answered = json.loads(hook("UserPromptSubmit", prompt, tmp_path).stdout)["hookSpecificOutput"]
    assert answered["hookEventName"] == "UserPromptSubmit" and "nurse" in answered["additionalContext"]


def test_a_bad_hook_input_is_an_error_that_does_not_block_claude_code(tmp_path: Path) -> None:
    for payload, words in (("not json", "is not JSON"), ({"session_id": "s"}, "no transcript_path"),
                           ({"session_id": "s", "transcript_path": str(tmp_path / "gone.jsonl")}, "no transcript")):
        done = hook("Stop", payload, tmp_path)
        assert done.returncode == 1 and words in done.stderr, done.stderr  # 1: shown, not blocking (2 would be)
    rewound = tmp_path / "t.jsonl"
    rewound.write_text("\n".join(FIRST) + "\n", encoding="utf-8")
    stop = {"session_id": "cc-2", "transcript_path": str(rewound), "hook_event_name": "Stop"}
    assert hook("Stop", stop, tmp_path).returncode == 0
    before = sorted(p.read_bytes() for p in (tmp_path / ".kwtree" / "memory" / "log").glob("*.jsonl"))
    rewound.write_text(line("user", "Something else entirely.") + "\n", encoding="utf-8")
    done = hook("Stop", stop, tmp_path)
    assert done.returncode == 1 and "InvalidInputError" not in done.stdout and "messages" in done.stderr
    assert sorted(p.read_bytes() for p in (tmp_path / ".kwtree" / "memory" / "log").glob("*.jsonl")) == before


def test_an_empty_prompt_adds_nothing_and_a_zero_budget_is_an_error(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    empty = subprocess.run([str(SCRIPT), "hook", "prompt", str(memory), "--scope", "user:me"],
                           input=json.dumps({"session_id": "s", "prompt": "  "}), capture_output=True, text=True,
                           timeout=120)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", "")
    zero = subprocess.run([str(SCRIPT), "hook", "session-start", str(memory), "--max-tokens", "0"],
                          input=json.dumps({"session_id": "s"}), capture_output=True, text=True, timeout=120)
    assert zero.returncode == 1 and "max_tokens" in zero.stderr


@pytest.mark.parametrize("kind", ["refused", "hangs"])
def test_the_stop_hook_with_the_llm_down_commits_the_transcript_and_warns(tmp_path: Path, api: FakeMessagesAPI,
                                                                          kind: str) -> None:
    """The hook's LLM (``KWTREE_LLM=anthropic``) refuses connections, or never answers (the
    client's 0.5 s timeout ends the wait): the Stop hook commits the transcript with what the
    offline rules find, exits 0, and says on stderr what the LLM did not do."""
    if kind == "refused":
        url, failed = f"http://127.0.0.1:{closed_port()}", "LLMUnavailableError: cannot reach the Anthropic API"
    else:
        api.default = HANG
        url, failed = api.url, "LLMTimeoutError: no answer from the Anthropic API within 0.5s"
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text("\n".join(FIRST) + "\n", encoding="utf-8")
    stop = {"session_id": "cc-1", "transcript_path": str(transcript), "hook_event_name": "Stop"}
    done = hook("Stop", stop, tmp_path, llm_env(url, KWTREE_LLM_TIMEOUT="0.5"))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr  # before: exit 1, nothing committed
    assert done.stderr.startswith(f"warning: the LLM failed ({failed}"), done.stderr
    assert done.stderr.endswith("; done offline instead: extraction\n") and done.stderr.count("\n") == 1
    with KeywordTree(tmp_path / ".kwtree" / "memory", read_only=True) as tree:
        commit = next(op for op in tree.history() if op.kind == "commit_session")
        assert commit.audit["commit_session"]["fallbacks"][0]["step"] == "extraction"
        assert "I love green tea" in " ".join(info.content for info in tree.memories("user:me"))
