"""PLACEHOLDER: a small rule-based extractor so the commit pipeline can be built and tested
while the real extractor is written elsewhere; it is replaced wholesale at merge.

``default_extractor(llm_client)`` ignores the client and finds: a user's name, where they
live and where they work (profile facts with an ``attribute``), what they like or dislike
(preferences, keyed by the object's first word), and tool results (skills, keyed by the
tool's name, with ``outcome`` and ``duration``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kwtree.memory.candidates import Candidate, ExtractContext, Extractor, Message

__all__ = ["default_extractor"]

_PROFILE = (
    ("name", re.compile(r"\bmy name is ([A-Z][\w-]+)")),
    ("location", re.compile(r"\bI live in ([A-Z][\w -]+?)(?:[.,!?]|$)")),
    ("work", re.compile(r"\bI work (?:at|for|as) ([\w -]+?)(?:[.,!?]|$)")),
)
_LIKES = re.compile(r"\bI (?:really )?(like|love|prefer|enjoy|hate|dislike) ([\w' -]+?)(?:[.,!?]|$)", re.I)


def _profile(text: str, index: int, happened: float | None) -> list[Candidate]:
    found = []
    for attribute, pattern in _PROFILE:
        match = pattern.search(text)
        if match:
            value = match.group(1).strip()
            content = f"The user's {attribute} is {value}."
            found.append(Candidate("profile", attribute, content, content, 0.8, (index,), happened,
                                   {"attribute": attribute, "value": value}))
    return found


def _preferences(text: str, index: int, happened: float | None) -> list[Candidate]:
    found = []
    for match in _LIKES.finditer(text):
        verb, thing = match.group(1).lower(), match.group(2).strip()
        if not thing:
            continue
        content = f"The user {verb}s {thing}."
        found.append(Candidate("preferences", thing.split()[0].lower(), content, content, 0.7, (index,), happened))
    return found


def _skill(message: Message, index: int, happened: float | None) -> list[Candidate]:
    tool = message.get("name") or message.get("tool") or "tool"
    text = str(message.get("content") or "")
    failed = bool(re.search(r"\b(error|failed|exception)\b", text, re.I))
    facts: dict[str, Any] = {"outcome": "failure" if failed else "success"}
    if isinstance(message.get("duration"), (int, float)):
        facts["duration"] = float(message["duration"])
    content = f"{tool} {'failed' if failed else 'succeeded'}: {text[:200]}"
    return [Candidate("skills", str(tool), content, content, 0.6, (index,), happened, facts)]


def _when(message: Message, context: ExtractContext) -> float | None:
    ts = message.get("ts")
    return float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else context.session_time


def default_extractor(llm_client: object = None) -> Extractor:
    """The placeholder rule-based extractor (the client is ignored)."""

    def extract(messages: Sequence[Message], context: ExtractContext) -> list[Candidate]:
        found: list[Candidate] = []
        for index in range(context.first_new, len(messages)):
            message = messages[index]
            happened = _when(message, context)
            if message.get("role") == "tool":
                found.extend(_skill(message, index, happened))
            elif message.get("role") == "user" and isinstance(message.get("content"), str):
                found.extend(_profile(message["content"], index, happened))
                found.extend(_preferences(message["content"], index, happened))
        return found

    return extract
