"""Claude Code's hooks, answered by kwtree (``kwtree hook EVENT DIR``): a settings file runs the
command, which reads the hook's JSON on stdin.

- ``session-start`` (``SessionStart``): the scope's ``bootstrap`` block (profile, preferences,
  what the last session left open) as ``additionalContext`` for the new session.
- ``prompt`` (``UserPromptSubmit``): the ``assemble`` block for the prompt just submitted.
- ``stop`` (``Stop``): the session's transcript (the hook's ``transcript_path``, Claude Code's
  JSONL) turned into messages and committed with ``after_turn`` under the hook's
  ``session_id``: each Stop commits only the messages the last one did not, as one operation.

A hook never blocks Claude Code: each prints JSON (or nothing) and exits 0, or prints an error
on stderr and exits 1, which Claude Code shows and goes on from. A message over the content
limit (a pasted log) is stored cut, with a note, so it never stops later turns; ``session-start``
and ``prompt`` only read: they open the tree read-only (another process may hold the writer
lock, the directory may be read-only) and print nothing before anything was stored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.retrieval.smalltalk import small_talk
from kwtree.validate import shown

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree
    from kwtree.memory.commit import CommitResult

__all__ = ["EVENTS", "prompt_of", "read_hook_input", "session_start", "stop", "submitted_prompt",
           "transcript_messages"]

#: The hook events this module answers: the command's name for each, and Claude Code's.
EVENTS = {"session-start": "SessionStart", "prompt": "UserPromptSubmit", "stop": "Stop"}


def read_hook_input(text: str) -> dict[str, Any]:
    """The hook's input: a JSON object (InvalidInputError otherwise)."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"the hook's input on stdin is not JSON ({exc}); Claude Code sends an object "
                                "with session_id, transcript_path and hook_event_name") from None
    if not isinstance(payload, dict):
        raise InvalidInputError(f"the hook's input must be a JSON object, got {shown(payload)}")
    return payload


def _field(payload: dict[str, Any], name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"the hook's input has no {name} (a non-empty string), got {shown(value)}")
    return value


def _text(content: object) -> str:
    """The words of a transcript message: a string, or the text blocks of a list (tool calls,
    tool results and thinking left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(block["text"] for block in content
                         if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"),
                                                                                                    str))
    return ""


def transcript_messages(path: str | Path) -> list[dict[str, Any]]:
    """The conversation in a Claude Code transcript (JSONL), oldest first: the user's and the
    assistant's words with their times, without sub-agents' lines, meta lines, client command
    lines (``/clear`` and Claude Code's wrappers of it) and turns that hold only tool traffic
    (``after_turn`` cuts a message over the tree's limit). A last line that is not JSON is one
    being written and is passed over; any other, a line that is not an object, or JSONL of
    which no line has a ``type`` makes the file no transcript (InvalidInputError naming it)."""
    try:
        # "\n" only: str.splitlines would also break a line at a U+2028 inside a message.
        lines = Path(path).read_text(encoding="utf-8", errors="replace").split("\n")
    except FileNotFoundError:
        raise NotFoundError(f"no transcript at {path}") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read the transcript {path}: {exc.strerror}") from None
    last = max((number for number, line in enumerate(lines) if line.strip()), default=-1)
    messages: list[dict[str, Any]] = []
    typed = False  # some line has a "type", as every line of Claude Code's does
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == last:  # Claude Code is still writing it
                continue
            raise InvalidInputError(f"the transcript {path} is not Claude Code's JSONL: line {number + 1} is not "
                                    f"JSON ({exc.msg})") from None
        if not isinstance(entry, dict):
            raise InvalidInputError(f"the transcript {path} is not Claude Code's JSONL: line {number + 1} is not a "
                                    f"JSON object")
        typed = typed or isinstance(entry.get("type"), str)
        if entry.get("type") not in ("user", "assistant") or entry.get("isSidechain") or entry.get("isMeta"):
            continue
        message = entry.get("message")
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            continue
        text = _text(message.get("content")).strip()
        if not text or small_talk(text) == "client command":
            continue
        found: dict[str, Any] = {"role": message["role"], "content": text}
        if isinstance(entry.get("timestamp"), str):
            found["ts"] = entry["timestamp"]
        messages.append(found)
    if last >= 0 and not typed:  # another tool's JSONL: storing nothing would look like a quiet session
        raise InvalidInputError(f"the transcript {path} is JSONL but not Claude Code's (no line has a 'type'); "
                                "the Stop hook reads the transcript_path Claude Code passes it")
    return messages


def _context(event: str, text: str) -> dict[str, Any] | None:
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}} if text else None


def session_start(tree: KeywordTree, payload: dict[str, Any], scope: str,
                  max_tokens: int = 800) -> dict[str, Any] | None:
    """The ``SessionStart`` hook's output: the scope's ``bootstrap`` block as additional
    context; None when the scope holds nothing yet."""
    return _context("SessionStart", tree.memory.bootstrap(scope, max_tokens))


def submitted_prompt(tree: KeywordTree, payload: dict[str, Any], scope: str,
                     max_tokens: int = 1500) -> dict[str, Any] | None:
    """The ``UserPromptSubmit`` hook's output: the scope's ``assemble`` block for the prompt;
    None when nothing is relevant (or the prompt is empty)."""
    prompt = prompt_of(payload)
    return _context("UserPromptSubmit", tree.memory.assemble(prompt, scope, max_tokens)) if prompt.strip() else None


def prompt_of(payload: dict[str, Any]) -> str:
    """The prompt a ``UserPromptSubmit`` hook's input holds (InvalidInputError without one)."""
    prompt = payload.get("prompt")
    if not isinstance(prompt, str):
        raise InvalidInputError(f"the hook's input has no prompt (a string), got {shown(prompt)}")
    return prompt


def stop(tree: KeywordTree, payload: dict[str, Any], scope: str) -> CommitResult:
    """The ``Stop`` hook: ``after_turn`` of the transcript under the hook's session id."""
    messages = transcript_messages(_field(payload, "transcript_path"))
    return tree.memory.after_turn(messages, _field(payload, "session_id"), scope)
