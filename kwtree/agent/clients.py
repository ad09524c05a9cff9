"""The LLM client seam, and the scripted client tests drive the agent with."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

import orjson

from kwtree.errors import InvalidInputError, LLMResponseError

__all__ = ["LLMClient", "StubLLMClient", "request_document"]


@runtime_checkable
class LLMClient(Protocol):
    """Anything that answers a chat with one JSON object shaped by ``json_schema``.

    Implementations raise (preferably an ``LLMError``) on a failed call or on an answer that
    is not a JSON object of that shape; the descend loop turns any exception into a fallback.
    """

    def chat(self, messages: list[dict[str, Any]], json_schema: dict[str, Any]) -> dict[str, Any]: ...


def request_document(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The request document of a round: the JSON content of the last user message."""
    for message in reversed(messages):
        if message.get("role") == "user":
            try:
                document = orjson.loads(message["content"])
            except (orjson.JSONDecodeError, TypeError, KeyError) as exc:
                raise LLMResponseError(f"the last user message is not a JSON document: {exc}") from None
            if not isinstance(document, dict):
                raise LLMResponseError("the last user message is not a JSON object")
            return document
    raise LLMResponseError("the messages hold no user message")


Decision = dict[str, Any] | BaseException | Callable[[dict[str, Any]], Any]
EXHAUSTED = {"action": "missing", "reason": "stub exhausted"}


class StubLLMClient:
    """Answers with scripted decisions, in order, then ``{"action": "missing", "reason":
    "stub exhausted"}``.

    Each item is a dict (returned as is), an exception instance (raised), or a callable that
    receives the parsed request document and returns the decision (or raises). Every request
    document received is kept in ``requests``, every message list in ``conversations``.
    """

    name = "stub"

    def __init__(self, decisions: Iterable[Decision] = ()) -> None:
        if isinstance(decisions, (str, bytes, dict)):
            raise InvalidInputError("decisions must be a list of dicts, exceptions or callables")
        self._decisions = list(decisions)
        for index, item in enumerate(self._decisions):
            if not (isinstance(item, (dict, BaseException)) or callable(item)):
                raise InvalidInputError(
                    f"decisions[{index}] must be a dict, an exception or a callable, got {type(item).__name__}"
                )
        self.requests: list[dict[str, Any]] = []
        self.conversations: list[list[dict[str, Any]]] = []
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """How many scripted decisions have not been used yet."""
        return len(self._decisions)

    def chat(self, messages: list[dict[str, Any]], json_schema: dict[str, Any]) -> dict[str, Any]:
        document = request_document(messages)
        with self._lock:
            self.requests.append(document)
            self.conversations.append(copy.deepcopy(messages))
            item = self._decisions.pop(0) if self._decisions else dict(EXHAUSTED)
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            item = item(document)
        return item
