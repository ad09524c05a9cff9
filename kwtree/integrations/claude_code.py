"""Claude Code's hooks, answered by kwtree (``kwtree hook EVENT DIR``): a settings file runs the
command, which reads the hook's JSON on stdin.

- ``session-start`` (``SessionStart``): the scope's ``bootstrap`` block (profile, preferences,
  what the last session left open) as ``additionalContext`` for the new session.
- ``prompt`` (``UserPromptSubmit``): the ``assemble`` block for the prompt just submitted.
- ``stop`` (``Stop``): the session's transcript (the hook's ``transcript_path``, Claude Code's
  JSONL) turned into messages and committed with ``after_turn`` under the hook's
  ``session_id``: each Stop commits only the messages the last one did not, as one operation.

A hook never blocks Claude Code: each prints JSON (or nothing) and exits 0, or prints an error
on stderr and exits 1, which Claude Code shows and goes on from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.validate import shown

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree
    from kwtree.memory.commit import CommitResult

__all__ = ["EVENTS", "read_hook_input", "session_start", "stop", "submitted_prompt", "transcript_messages"]

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
    assistant's words with their times, without sub-agents' lines, meta lines and turns that
    hold only tool traffic. A line that is not JSON (one being written) is passed over."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        raise NotFoundError(f"no transcript at {path}") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read the transcript {path}: {exc.strerror}") from None
    messages: list[dict[str, Any]] = []
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant")
                or entry.get("isSidechain") or entry.get("isMeta")):
            continue
        message = entry.get("message")
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            continue
        text = _text(message.get("content")).strip()
        if not text:
            continue
        found: dict[str, Any] = {"role": message["role"], "content": text}
        if isinstance(entry.get("timestamp"), str):
            found["ts"] = entry["timestamp"]
        messages.append(found)
    return messages


def _context(event: str, text: str) -> dict[str, Any] | None:
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}} if text else None


def session_start(tree: KeywordTree, payload: dict[str, Any], scope: str,
                  max_tokens: int = 800) -> dict[str, Any] | None:
    """The ``SessionStart`` hook's output: the scope's ``bootstrap`` block as additional
    context; None when the scope holds nothing yet."""
    return _context("SessionStart", tree.bootstrap(scope, max_tokens))


def submitted_prompt(tree: KeywordTree, payload: dict[str, Any], scope: str,
                     max_tokens: int = 1500) -> dict[str, Any] | None:
    """The ``UserPromptSubmit`` hook's output: the scope's ``assemble`` block for the prompt;
    None when nothing is relevant (or the prompt is empty)."""
    prompt = payload.get("prompt")
    if not isinstance(prompt, str):
        raise InvalidInputError(f"the hook's input has no prompt (a string), got {shown(prompt)}")
    return _context("UserPromptSubmit", tree.assemble(prompt, scope, max_tokens)) if prompt.strip() else None


def stop(tree: KeywordTree, payload: dict[str, Any], scope: str) -> CommitResult:
    """The ``Stop`` hook: ``after_turn`` of the transcript under the hook's session id."""
    messages = transcript_messages(_field(payload, "transcript_path"))
    return tree.after_turn(messages, _field(payload, "session_id"), scope)
