"""A session's messages as ``commit_session`` takes them: checked, dated and fingerprinted.

A message is a mapping with ``role`` (a label: "user", "assistant", "system", "tool" ...) and
``content`` (a string). A tool call may carry ``tool_calls`` with an empty or None content;
other keys (``name``, ``tool_call_id``, ``ts`` ...) are kept as they are. ``ts``, when there, is
when it was said: epoch seconds, or an ISO 8601 date or datetime (UTC when it has no zone).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from kwtree.errors import InvalidInputError
from kwtree.memory.candidates import Message
from kwtree.validate import clean_label, clean_text, shown

__all__ = ["MAX_MESSAGES", "clean_messages", "digest", "message_time", "turn_text"]

#: At most this many messages in one session.
MAX_MESSAGES = 100_000


def message_time(value: object, field: str) -> float | None:
    """``value`` (None, epoch seconds or an ISO 8601 string) as epoch seconds."""
    if value is None:
        return None
    if type(value) in (int, float):
        seconds = float(value)  # type: ignore[arg-type]
        if math.isfinite(seconds):
            return seconds
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            pass
        else:
            return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    raise InvalidInputError(f"{field} must be epoch seconds or an ISO 8601 date such as '2023-05-08T13:56:00', "
                            f"got {shown(value)}")


def clean_messages(messages: object) -> list[Message]:
    """The messages, checked (InvalidInputError names ``messages[i].field`` and what to pass)."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidInputError(f"messages must be a list of {{'role', 'content'}} dicts, got {shown(messages)}")
    if len(messages) > MAX_MESSAGES:
        raise InvalidInputError(f"messages holds {len(messages)} messages; at most {MAX_MESSAGES} per commit")
    cleaned: list[Message] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping):
            raise InvalidInputError(f"{where} must be a dict with 'role' and 'content', got {shown(message)}")
        if not all(isinstance(key, str) for key in message):
            raise InvalidInputError(f"{where} has a key that is not a string")
        clean_label(message.get("role"), f"{where}.role")
        content = message.get("content")
        if content is None and message.get("tool_calls"):
            content = ""
        if not isinstance(content, str):
            raise InvalidInputError(f"{where}.content must be a string (a tool call may leave it empty), "
                                    f"got {shown(content)}")
        clean_text(content, f"{where}.content", allow_empty=True)
        message_time(message.get("ts"), f"{where}.ts")
        cleaned.append({**message, "role": message["role"].strip(), "content": content})
    return cleaned


def turn_text(message: Message) -> str:
    """What a turn info holds: the content, or for a tool call without text, its calls."""
    content: str = message["content"]
    if content.strip():
        return content
    calls = message.get("tool_calls")
    if calls:
        return "tool call: " + orjson.dumps(calls, default=str).decode()[:4000]
    return ""


def digest(messages: Sequence[Message]) -> str:
    """A fingerprint of the messages' roles and contents (what a later commit must resend
    unchanged), 32 hex digits."""
    hashed = hashlib.sha256()
    for message in messages:
        part: Any = [message["role"], message["content"]]
        hashed.update(orjson.dumps(part))
        hashed.update(b"\n")
    return hashed.hexdigest()[:32]
