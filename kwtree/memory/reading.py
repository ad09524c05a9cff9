"""What every extractor does alike: read a session (the inputs checked, a message's text, its
speaker, its tool calls and results, the time its sentences are anchored to) and merge the
duplicate candidates it found.

Roles (known ones in any case): ``user`` is the person the memory is about; ``assistant``, ``system`` and
``developer`` are the agent's side (never facts about the user); ``tool`` and ``function``
carry tool results. Any other role is a speaker's name (LoCoMo's two-person chats), and that
speaker's statements are facts about them.

Content is a string, or a list of content blocks as in the Anthropic Messages API: ``text``
blocks are what was said; ``tool_use`` (``id``, ``name``) and ``tool_result``
(``tool_use_id``, ``content``, ``is_error``) blocks are tool calls and their outcomes. The
OpenAI shape is read too: an assistant's ``tool_calls`` (``id``, ``function.name``) and a
``tool`` message's ``tool_call_id``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kwtree.errors import InvalidInputError
from kwtree.memory.candidates import ENTITIES_KEY, Candidate, ExtractContext, Message, PassedOver
from kwtree.memory.when import message_time
from kwtree.validate import finite_number, shown

__all__ = ["AGENT_ROLES", "TOOL_ROLES", "USER_ROLE", "ToolOutcome", "anchor_of", "check_session", "dedupe",
           "provenance_of", "speaker_of", "text_of", "tool_outcomes"]

USER_ROLE = "user"
AGENT_ROLES = frozenset({"assistant", "system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})
#: The provenance (``kwtree.models.PROVENANCES``) of what a message of each known role says;
#: any other role is a named speaker, a person in the conversation: "user".
_ROLE_PROVENANCE = {"assistant": "assistant", "system": "system", "developer": "system", "tool": "tool",
                    "function": "tool"}


def check_session(messages: object, context: object) -> tuple[float | None, ...]:
    """Raise InvalidInputError unless ``messages`` is a sequence of messages (mappings with a
    string ``role`` and a string or list ``content``) and ``context`` an ExtractContext whose
    ``first_new`` lies in ``[0, len(messages)]``. Returns each message's time (its ``ts``, see
    ``kwtree.memory.when.parse_time``), so a bad ``ts`` is refused here too."""
    if not isinstance(context, ExtractContext):
        raise InvalidInputError(f"context must be an ExtractContext, got {type(context).__name__}")
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInputError(
            f"messages must be a list of {{'role', 'content'}} dicts, got {type(messages).__name__}")
    session_time = context.session_time
    if session_time is not None and finite_number(session_time) is None:
        raise InvalidInputError(f"context.session_time must be epoch seconds (a finite number) or None, got "
                                f"{shown(session_time)}; kwtree.memory.when.parse_time reads a date string")
    first_new = context.first_new
    if isinstance(first_new, bool) or not isinstance(first_new, int) or not 0 <= first_new <= len(messages):
        raise InvalidInputError(
            f"context.first_new must be an index in [0, {len(messages)}] (the first message not seen before), "
            f"got {shown(first_new)}")
    times = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidInputError(
                f"messages[{i}] must be a dict with 'role' and 'content', got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role.strip():
            raise InvalidInputError(f"messages[{i}].role must be a non-empty string ('user', 'assistant', 'tool' "
                                    f"or a speaker's name), got {role!r:.40}")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise InvalidInputError(
                f"messages[{i}].content must be a string or a list of content blocks, got {type(content).__name__}")
        times.append(message_time(message, f"messages[{i}].ts"))
    return tuple(times)


def speaker_of(message: Message) -> str | None:
    """Whose facts the message states: ``"the user"`` for role ``user``, the role itself for a
    named speaker, None for the agent's side and tool results."""
    role = str(message["role"]).strip()
    if role.lower() == USER_ROLE:
        return "the user"
    if role.lower() in AGENT_ROLES or role.lower() in TOOL_ROLES:
        return None
    return role


def provenance_of(message: Message) -> str:
    """Who said the message, as the memories drawn from it record it: "user" for the user and
    a named speaker, "assistant", "system" (a system or developer message) or "tool" (a tool
    or function result, also one carried in ``tool_result`` blocks of a user's message)."""
    content = message.get("content")
    if isinstance(content, list) and any(isinstance(block, Mapping) and block.get("type") == "tool_result"
                                         for block in content):
        return "tool"
    return _ROLE_PROVENANCE.get(str(message["role"]).strip().lower(), "user")


def text_of(message: Message) -> str:
    """What was said in the message: its string content, or its ``text`` blocks joined by
    newlines. Tool calls and tool results are not speech and are left out."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(block["text"] for block in content if isinstance(block, Mapping)
                     and block.get("type") == "text" and isinstance(block.get("text"), str))


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool result: the tool's name, whether it failed, its text, and the indices of the
    result's message and (when seen) the call's message."""

    tool: str
    failed: bool
    text: str
    index: int
    call_index: int | None
    duration: float | None


def tool_outcomes(messages: Sequence[Message], first_new: int) -> list[ToolOutcome]:
    """The tool results in ``messages[first_new:]``, each with its tool's name, found from
    the call (``tool_use`` block or ``tool_calls`` entry, in any earlier message) or from the
    result message's own ``name``; ``"unknown tool"`` when neither says."""
    names: dict[str, tuple[str, int]] = {}
    outcomes: list[ToolOutcome] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        for block in blocks:
            if isinstance(block, Mapping) and block.get("type") == "tool_use" and isinstance(block.get("name"), str):
                names[str(block.get("id"))] = (block["name"], index)
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                names[str(call.get("id"))] = (str(call["function"].get("name") or "unknown tool"), index)
        if index < first_new:
            continue
        for block in blocks:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                name, call_index = names.get(str(block.get("tool_use_id")), ("unknown tool", None))
                text = _block_text(block.get("content"))
                outcomes.append(ToolOutcome(name, bool(block.get("is_error")) or _looks_failed(text), text, index,
                                            call_index, _duration(block)))
        if str(message["role"]).strip().lower() in TOOL_ROLES:
            own_name = str(message.get("name") or "unknown tool")
            name, call_index = names.get(str(message.get("tool_call_id")), (own_name, None))
            text = _block_text(content)
            outcomes.append(ToolOutcome(name, bool(message.get("is_error")) or _looks_failed(text), text, index,
                                        call_index, _duration(message)))
    return outcomes


def anchor_of(times: Sequence[float | None], index: int, context: ExtractContext) -> float | None:
    """The time a message's relative dates are read against: its own ``ts``, else the
    session's date."""
    own = times[index]
    return own if own is not None else context.session_time


def _block_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


#: Words that mark a tool result as a failure when the call does not say (``is_error``).
_FAILURE_WORDS = ("error", "failed", "failure", "exception", "traceback", "not found", "denied", "timed out")


def _looks_failed(text: str) -> bool:
    head = text[:500].lower()
    return any(word in head for word in _FAILURE_WORDS)


def _duration(item: Mapping[str, Any]) -> float | None:
    """A ``duration`` (or ``duration_s``) in seconds given with the result, if any."""
    for key in ("duration", "duration_s"):
        value = finite_number(item.get(key))
        if value is not None and value >= 0:
            return value
    return None


def dedupe(candidates: Sequence[Candidate], speakers: frozenset[str] = frozenset(),
           max_entity_sentences: int = 3, passed: list[PassedOver] | None = None) -> list[Candidate]:
    """One candidate per (category, key, content) in order of first appearance, sources merged;
    one per single-valued fact (category, ``facts`` attribute, subject and value: "my wife"
    said twice is one "married"); entity candidates are one per entity (key), their sentences
    joined (at most max_entity_sentences), and names in ``speakers`` (the conversation's own
    speakers) are no entities (nor among the names a candidate mentions). Skill candidates are
    never merged: each is one tool call's outcome. Each candidate folded into an earlier one or
    left out is appended to ``passed`` (when given) with its reason."""
    kept: dict[tuple[str, ...], Candidate] = {}
    for position, candidate in enumerate(candidates):
        if candidate.category == "skills":
            kept[("skills", str(position))] = candidate  # its own identity: never merged
            continue
        names = (candidate.facts or {}).get(ENTITIES_KEY)
        if names and set(names) & speakers:
            candidate = dataclasses.replace(candidate, facts={
                **(candidate.facts or {}), ENTITIES_KEY: [name for name in names if name not in speakers]})
        identity, why = _identity(candidate)
        if candidate.category == "entities" and candidate.key in speakers:
            _pass(passed, candidate, "a speaker of the conversation is no entity")
            continue
        earlier = kept.get(identity)
        if earlier is None:
            kept[identity] = candidate
            continue
        _pass(passed, candidate, why)
        sources = tuple(sorted(set(earlier.sources) | set(candidate.sources)))
        content = earlier.content
        if candidate.category == "entities" and candidate.content not in content \
                and content.count("\n") + 1 < max_entity_sentences:
            content = f"{content}\n{candidate.content}"
        kept[identity] = Candidate(earlier.category, earlier.key, earlier.abstract, content,
                                   max(earlier.confidence, candidate.confidence), sources, earlier.happened_at,
                                   earlier.facts)
    return list(kept.values())


def _identity(candidate: Candidate) -> tuple[tuple[str, ...], str]:
    """What makes two candidates one (``dedupe``), and the reason a later one is folded."""
    facts = candidate.facts or {}
    attribute, value = facts.get("attribute"), facts.get("value")
    if candidate.category == "entities" and not isinstance(attribute, str):
        return ("entities", candidate.key.casefold()), "the same entity as an earlier candidate: its sentence joined"
    if isinstance(attribute, str) and isinstance(value, str):
        return ((candidate.category, "attribute", attribute, str(facts.get("subject")), value.casefold()),
                f"the same {attribute} ({value}) as an earlier candidate: sources joined")
    return ((candidate.category, candidate.key.casefold(), " ".join(candidate.content.casefold().split())),
            "the same memory as an earlier candidate: sources joined")


def _pass(passed: list[PassedOver] | None, candidate: Candidate, reason: str) -> None:
    if passed is not None:
        passed.append(PassedOver(min(candidate.sources, default=-1), candidate.content, reason, candidate.category,
                                 candidate.key))
