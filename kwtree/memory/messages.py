"""A session's messages as ``commit_session`` takes them: checked, dated and fingerprinted.

A message is a mapping with ``role`` (a label: "user", "assistant", "system", "tool" ...) and
``content`` (a string). A tool call may carry ``tool_calls`` with an empty or None content;
other keys (``name``, ``tool_call_id``, ``ts`` ...) are kept as they are. ``ts``, when there, is
when it was said, read by ``kwtree.memory.when.parse_time`` (epoch seconds, an ISO 8601 date
or datetime, UTC when it has no zone, or LoCoMo's "1:56 pm on 8 May, 2023").
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from kwtree.errors import InvalidInputError
from kwtree.memory.candidates import Message
from kwtree.memory.when import parse_time
from kwtree.validate import clean_label, clean_text, shown

__all__ = ["MAX_MESSAGES", "clean_messages", "digest", "turn_text"]

#: At most this many messages in one session.
MAX_MESSAGES = 100_000


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
        if message.get("tool_calls"):
            _calls_text(message["tool_calls"], f"{where}.tool_calls")
        parse_time(message.get("ts"), f"{where}.ts")
        cleaned.append({**message, "role": message["role"].strip(), "content": content})
    return cleaned


def turn_text(message: Message) -> str:
    """What a turn info holds: the content, or for a tool call without text, its calls."""
    content: str = message["content"]
    if content.strip():
        return content
    calls = message.get("tool_calls")
    if calls:
        return "tool call: " + _calls_text(calls, "tool_calls")[:4000]
    return ""


def _calls_text(calls: object, field: str) -> str:
    """A message's tool calls as JSON (a value JSON lacks as its ``str``); InvalidInputError
    naming ``field`` when they have no such form (a lone surrogate, a key that is no string)."""
    try:
        return orjson.dumps(calls, default=str).decode()
    except TypeError as exc:
        raise InvalidInputError(f"{field} cannot be stored as JSON ({exc}); pass strings, numbers, lists and "
                                f"dicts with string keys") from None


def digest(messages: Sequence[Message]) -> str:
    """A fingerprint of the messages' roles and contents (what a later commit must resend
    unchanged), 32 hex digits."""
    hashed = hashlib.sha256()
    for message in messages:
        part: Any = [message["role"], message["content"]]
        hashed.update(orjson.dumps(part))
        hashed.update(b"\n")
    return hashed.hexdigest()[:32]
