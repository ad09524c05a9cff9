"""What the HTTP LLM clients share, whatever protocol they speak.

:class:`ChatClient` holds the settings every client takes (checked once, here), the retry loop
with its backoff, and the usage figures (``usage``, ``last_usage``); ``AnthropicLLMClient``
(``anthropic_client.py``) and ``OpenAILLMClient`` (``openai_client.py``) build on it and add only
their protocol: how a request is built, how one attempt is made, how an answer is read. The
messages are checked by :func:`split_messages` and the caller's JSON schema by
:func:`check_object_schema`; the answer is checked against that schema by :func:`mismatch`, so
both clients refuse the same shapes with the same words.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypedDict, TypeGuard, TypeVar

from kwtree.errors import InvalidInputError, LLMError, LLMResponseError
from kwtree.validate import finite_number

__all__ = [
    "RETRY_STATUSES",
    "USAGE_KEYS",
    "ChatClient",
    "ClientLimits",
    "Retry",
    "check_object_schema",
    "is_int",
    "mismatch",
    "require",
    "retry_decision",
    "split_messages",
]

_T = TypeVar("_T")

_ROLES = frozenset({"system", "user", "assistant"})
#: Request timeout, lock timeout and rate limit are retried, and any 5xx (Anthropic's 529 is
#: "overloaded"). Other 4xx say the request itself is wrong, so another attempt cannot help.
RETRY_STATUSES = frozenset({408, 409, 429})
USAGE_KEYS = ("calls", "input_tokens", "output_tokens", "retries")
_JITTER = 0.1  # a retry waits up to 10% less than its backoff, so parallel clients spread out
_NUMBER_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "timeout": (lambda v: _is_real(v) and v > 0, "a number of seconds > 0"),
    "max_retries": (lambda v: is_int(v) and v >= 0, "an int >= 0"),
    "max_tokens": (lambda v: is_int(v) and v >= 1, "an int >= 1"),
    "backoff": (lambda v: _is_real(v) and v >= 0, "a number of seconds >= 0"),
    "max_backoff": (lambda v: _is_real(v) and v >= 0, "a number of seconds >= 0"),
}
_TYPE_CHECKS: dict[str, Callable[[object], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class ClientLimits(TypedDict, total=False):
    """The settings every client takes as keywords, with :class:`ChatClient`'s defaults:
    ``timeout`` (30.0 s per attempt), ``max_retries`` (4), ``max_tokens`` (1024, the answer's
    limit), ``backoff`` (0.5 s) and ``max_backoff`` (8.0 s)."""

    timeout: float
    max_retries: int
    max_tokens: int
    backoff: float
    max_backoff: float


class Retry(Exception):
    """Raised by one attempt of a :class:`ChatClient` that failed in a way another attempt may
    mend. ``failure`` is what the call raises when no attempt is left; ``retry_after`` is the
    wait in seconds the server asked for (None: the client's own backoff applies)."""

    def __init__(self, failure: LLMError, retry_after: float | None = None) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.retry_after = retry_after


class ChatClient:
    """The settings, retry loop and usage figures of an HTTP LLM client.

    Every call makes at most ``max_retries + 1`` attempts, waiting ``min(max_backoff, backoff *
    2**attempt)`` (less up to 10% jitter) or the server's ``retry-after`` (capped at
    ``max_backoff``) between them, so a call always ends. Raises InvalidInputError, naming the
    setting, for a bad one.
    """

    def __init__(self, model: str, *, timeout: float = 30.0, max_retries: int = 4, max_tokens: int = 1024,
                 backoff: float = 0.5, max_backoff: float = 8.0) -> None:
        require(isinstance(model, str) and model.strip() != "", f"model must be a non-empty string, got {model!r}")
        numbers = {"timeout": timeout, "max_retries": max_retries, "max_tokens": max_tokens,
                   "backoff": backoff, "max_backoff": max_backoff}
        for setting, value in numbers.items():
            accepts, wanted = _NUMBER_RULES[setting]
            require(accepts(value), f"{setting} must be {wanted}, got {value!r}")
        self._model: str = model
        self._timeout = float(timeout)
        self._max_retries = max_retries
        self._max_tokens = max_tokens
        self._backoff = float(backoff)
        self._max_backoff = float(max_backoff)
        self._sleep: Callable[[float], None] = time.sleep  # the seam tests use to record waits
        self._lock = threading.Lock()
        self._usage = dict.fromkeys(USAGE_KEYS, 0)
        self._last_usage = dict.fromkeys(USAGE_KEYS, 0)

    @property
    def model(self) -> str:
        """The model every request names."""
        return self._model

    @property
    def usage(self) -> dict[str, int]:
        """Totals over this client's life: ``calls``, ``input_tokens``, ``output_tokens`` and
        ``retries`` (HTTP attempts after a call's first). Tokens count every answer received,
        including ones rejected as malformed."""
        with self._lock:
            return dict(self._usage)

    @property
    def last_usage(self) -> dict[str, int]:
        """The same figures for the most recent finished call (all zero before the first)."""
        with self._lock:
            return dict(self._last_usage)

    @staticmethod
    def _checked(messages: object, json_schema: object) -> tuple[str, list[dict[str, str]]]:
        """:func:`split_messages` of ``messages``, once ``json_schema`` passed
        :func:`check_object_schema`: what every ``chat`` checks before it sends anything."""
        system, turns = split_messages(messages)
        check_object_schema(json_schema)
        return system, turns

    @staticmethod
    def _conforming(answer: object, json_schema: dict[str, Any]) -> dict[str, Any]:
        """``answer`` when it is a JSON object of ``json_schema``'s shape; else LLMResponseError."""
        if not isinstance(answer, dict):
            raise LLMResponseError(f"the answer is a {type(answer).__name__}, not a JSON object")
        problem = mismatch(answer, json_schema)
        if problem is not None:
            raise LLMResponseError(f"the answer does not match the schema: {problem}")
        return answer

    @contextmanager
    def _metered(self) -> Iterator[dict[str, int]]:
        """The figures of one call, to fill in; they are added to ``usage`` however it ends."""
        usage = {**dict.fromkeys(USAGE_KEYS, 0), "calls": 1}
        try:
            yield usage
        finally:
            with self._lock:
                self._last_usage = usage
                for key, value in usage.items():
                    self._usage[key] += value

    def _retrying(self, attempt: Callable[[], _T], usage: dict[str, int]) -> _T:
        """``attempt()``'s result, calling it again after each :class:`Retry` while retries
        are left (counting them in ``usage``); then the last Retry's ``failure`` is raised."""
        attempts = 0
        while True:
            try:
                return attempt()
            except Retry as retry:
                if attempts >= self._max_retries:
                    raise retry.failure from retry.__cause__
                wait = retry.retry_after
            if wait is None:
                nominal = min(self._max_backoff, self._backoff * 2.0 ** min(attempts, 60))
                self._sleep(nominal * (1 - _JITTER * random.random()))
            else:
                self._sleep(min(self._max_backoff, wait))
            attempts += 1
            usage["retries"] += 1


def require(condition: bool, message: str) -> None:
    """Raise InvalidInputError(``message``) unless ``condition`` holds."""
    if not condition:
        raise InvalidInputError(message)


def is_int(value: object) -> TypeGuard[int]:
    """True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return finite_number(value) is not None


def retry_decision(status: int, header: Callable[[str], str | None]) -> tuple[bool, float | None]:
    """Whether another attempt may help after an HTTP ``status``, and the wait the server asked
    for (``retry-after`` in seconds; a date or a bad value is ignored). ``header`` looks a
    response header up by name, case-insensitively."""
    # The API's x-should-retry overrides the status, e.g. "false" on a 429 for a spent budget.
    hint = header("x-should-retry")
    retryable = hint == "true" if hint in ("true", "false") else status in RETRY_STATUSES or status >= 500
    try:
        retry_after = float(header("retry-after") or "")
    except ValueError:  # absent, or an HTTP date: our own backoff applies
        retry_after = math.nan
    return retryable, retry_after if math.isfinite(retry_after) and retry_after > 0 else None


def split_messages(messages: object) -> tuple[str, list[dict[str, str]]]:
    """The system messages joined (blank line between), and the user and assistant turns in
    order, each kept whole under its own role: no turn's text is ever moved into the system
    text, so data a caller sends as a user message cannot become an instruction. Raises
    InvalidInputError naming the message that is not ``{'role', 'content': str}``."""
    if not isinstance(messages, list):
        raise InvalidInputError(f"messages must be a list of dicts, got {type(messages).__name__}")
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        ok = isinstance(message, dict) and message.get("role") in _ROLES and isinstance(message.get("content"), str)
        require(ok, f"messages[{i}] must be {{'role': 'system'|'user'|'assistant', 'content': str}}")
        if message["role"] == "system":
            system.append(message["content"])
        else:
            turns.append({"role": message["role"], "content": message["content"]})
    require(bool(turns), "messages must hold at least one 'user' or 'assistant' message")
    return "\n\n".join(system), turns


def check_object_schema(json_schema: object) -> None:
    """Raise InvalidInputError unless ``json_schema`` describes an object with only the parts
    :func:`mismatch` enforces (``type``, ``properties``, ``items``, ``required``, ``enum``,
    ``additionalProperties``)."""
    if not isinstance(json_schema, dict):
        raise InvalidInputError(f"json_schema must be a dict, got {type(json_schema).__name__}")
    require(json_schema.get("type") == "object", "json_schema must have type 'object' (a tool's input)")
    _check_schema(json_schema, "$")


def _types(schema: dict[str, Any]) -> list[Any]:
    declared = schema.get("type", [])
    return list(declared) if isinstance(declared, list) else [declared]


def _check_schema(schema: object, path: str) -> None:
    """Raise InvalidInputError for a schema (part) the validator cannot enforce."""
    if not isinstance(schema, dict):
        raise InvalidInputError(f"json_schema at {path} must be a dict, got {type(schema).__name__}")
    for name in _types(schema):
        require(isinstance(name, str) and name in _TYPE_CHECKS, f"json_schema at {path}: unsupported type {name!r}")
    properties = schema.get("properties", {})
    require(isinstance(properties, dict), f"json_schema at {path} has 'properties' that is not a dict")
    for key, sub in properties.items():
        _check_schema(sub, f"{path}.{key}")
    if "items" in schema:
        _check_schema(schema["items"], f"{path}[]")


def mismatch(value: object, schema: dict[str, Any], path: str = "$") -> str | None:
    """The first way ``value`` breaks ``schema`` (one :func:`check_object_schema` accepted),
    or None when it conforms."""
    types = _types(schema)
    if types and not any(_TYPE_CHECKS[name](value) for name in types):
        return f"{path} should be {' or '.join(types)}, got {type(value).__name__} {value!r:.80}"
    # True == 1 in Python, but not in JSON Schema, so an enum match must agree on bool-ness too.
    if "enum" in schema and not any(
        value == e and isinstance(value, bool) == isinstance(e, bool) for e in schema["enum"]
    ):
        return f"{path} should be one of {schema['enum']!r}, got {value!r:.80}"
    if isinstance(value, dict):
        properties: dict[str, Any] = schema.get("properties") or {}
        missing = [key for key in schema.get("required", ()) if key not in value]
        if missing:
            return f"{path} lacks required key(s) {missing}"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(properties))
            if extra:
                return f"{path} has key(s) the schema does not allow: {extra}"
        for key, sub in properties.items():
            if key in value and (problem := mismatch(value[key], sub, f"{path}.{key}")) is not None:
                return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            if (problem := mismatch(item, schema["items"], f"{path}[{i}]")) is not None:
                return problem
    return None
