"""An ``LLMClient`` backed by Anthropic's Messages API.

The answer is forced into the caller's JSON schema through tool use: the request offers one
tool, ``decide``, whose ``input_schema`` is the schema, and ``tool_choice`` makes the model call
it. The tool call's ``input`` is checked against the schema here before it is returned, so a
caller gets a dict of the requested shape or an :class:`~kwtree.errors.LLMError`.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeGuard

import anthropic

from kwtree.errors import (
    InvalidInputError,
    LLMError,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
)
from kwtree.validate import finite_number

__all__ = ["DEFAULT_MODEL", "AnthropicLLMClient"]

DEFAULT_MODEL = "claude-sonnet-4-6"

_TOOL_NAME = "decide"
_ROLES = frozenset({"system", "user", "assistant"})
# The SDK's own policy, kept: request timeout, lock timeout, rate limit, then any 5xx (529 is
# "overloaded"). Other 4xx say the request itself is wrong, so another attempt cannot help.
_RETRY_STATUSES = frozenset({408, 409, 429})
_USAGE_KEYS = ("calls", "input_tokens", "output_tokens", "retries")
_JITTER = 0.1  # a retry waits up to 10% less than its backoff, so parallel clients spread out
_NUMBER_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "timeout": (lambda v: _is_real(v) and v > 0, "a number of seconds > 0"),
    "max_retries": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "max_tokens": (lambda v: _is_int(v) and v >= 1, "an int >= 1"),
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


class AnthropicLLMClient:
    """Answers ``chat(messages, json_schema)`` with a dict that matches ``json_schema``.

    Every call makes at most ``max_retries + 1`` HTTP attempts of at most ``timeout`` seconds
    each, waiting ``min(max_backoff, backoff * 2**attempt)`` (less up to 10% jitter) or the
    server's ``retry-after`` (capped at ``max_backoff``) between them, so a call always ends.
    Rate limits (429), overload (529), other 5xx, connection failures and timeouts are retried.

    Raises, from the constructor, :class:`InvalidInputError` for a bad argument or no API key;
    from :meth:`chat`, :class:`InvalidInputError` for bad messages or schema,
    :class:`LLMResponseError` when the answer is not of the schema's shape (not retried),
    :class:`LLMTimeoutError` when the last attempt timed out, and :class:`LLMUnavailableError`
    (with ``status_code``) when the API refused or could not be reached.
    """

    def __init__(
        self,
        model: str | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 4,
        max_tokens: int = 1024,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
    ) -> None:
        model = model if model is not None else os.environ.get("KWTREE_ANTHROPIC_MODEL") or DEFAULT_MODEL
        _require(isinstance(model, str) and model.strip() != "", f"model must be a non-empty string, got {model!r}")
        # An empty ANTHROPIC_API_KEY counts as unset, as it does in the SDK.
        api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY") or None
        _require(api_key is not None, "no Anthropic API key: pass api_key=... or set ANTHROPIC_API_KEY")
        _require(isinstance(api_key, str) and api_key != "", "api_key must be a non-empty string")
        _require(base_url is None or isinstance(base_url, str), f"base_url must be a string, got {base_url!r}")
        numbers = {"timeout": timeout, "max_retries": max_retries, "max_tokens": max_tokens,
                   "backoff": backoff, "max_backoff": max_backoff}
        for setting, value in numbers.items():
            accepts, wanted = _NUMBER_RULES[setting]
            _require(accepts(value), f"{setting} must be {wanted}, got {value!r}")
        self._model: str = model
        self._timeout = float(timeout)
        self._max_retries = max_retries
        self._max_tokens = max_tokens
        self._backoff = float(backoff)
        self._max_backoff = float(max_backoff)
        # Our own retry loop instead of the SDK's, so the policy and the waits are ours to test.
        # Without base_url the SDK reads ANTHROPIC_BASE_URL, then uses the public endpoint.
        self._sdk = anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=self._timeout, max_retries=0)
        self._sleep: Callable[[float], None] = time.sleep  # the seam tests use to record waits
        self._lock = threading.Lock()
        self._usage = dict.fromkeys(_USAGE_KEYS, 0)
        self._last_usage = dict.fromkeys(_USAGE_KEYS, 0)

    @property
    def model(self) -> str:
        """The model every request names."""
        return self._model

    @property
    def name(self) -> str:
        """``"anthropic:<model>"``, for logs and metrics."""
        return f"anthropic:{self._model}"

    @property
    def usage(self) -> dict[str, int]:
        """Totals over this client's life: ``calls``, ``input_tokens``, ``output_tokens`` and
        ``retries``. Tokens count every answer received, including ones rejected as malformed."""
        with self._lock:
            return dict(self._usage)

    @property
    def last_usage(self) -> dict[str, int]:
        """The same figures for the most recent finished call (all zero before the first)."""
        with self._lock:
            return dict(self._last_usage)

    def chat(self, messages: list[dict[str, Any]], json_schema: dict[str, Any]) -> dict[str, Any]:
        """Send ``messages`` and return the model's answer, a dict valid against ``json_schema``.

        System messages are joined (blank line between) into the ``system`` parameter; the
        others are sent in order. ``json_schema`` must describe an object.
        """
        system, turns = _split_messages(messages)
        _require(isinstance(json_schema, dict), f"json_schema must be a dict, got {type(json_schema).__name__}")
        _require(json_schema.get("type") == "object", "json_schema must have type 'object' (a tool's input)")
        _check_schema(json_schema, "$")
        request: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "messages": turns,
            "tools": [{"name": _TOOL_NAME, "description": "Give your answer.", "input_schema": json_schema}],
            "tool_choice": {"type": "tool", "name": _TOOL_NAME},
        }
        if system:
            request["system"] = system
        usage = {**dict.fromkeys(_USAGE_KEYS, 0), "calls": 1}
        try:
            reply = self._send(request, usage)
            for key in ("input_tokens", "output_tokens"):  # lenient parsing may leave them out
                tokens = getattr(getattr(reply, "usage", None), key, None)
                usage[key] = tokens if _is_int(tokens) else 0
            return self._answer(reply, json_schema)
        finally:
            with self._lock:
                self._last_usage = usage
                for key, value in usage.items():
                    self._usage[key] += value

    def _send(self, request: dict[str, Any], usage: dict[str, int]) -> object:
        """One request under our retry policy; returns what the SDK parsed from a 2xx reply."""
        attempt = 0
        while True:
            try:
                return self._sdk.messages.create(**request)
            except (anthropic.APIResponseValidationError, json.JSONDecodeError) as exc:
                raise LLMResponseError(f"the Anthropic API sent an unreadable reply: {exc}") from exc
            except anthropic.APIError as exc:
                failure, retryable, retry_after = _translate(exc, self._timeout)
                if not retryable or attempt >= self._max_retries:
                    raise failure from exc
            if retry_after is None:
                nominal = min(self._max_backoff, self._backoff * 2.0 ** min(attempt, 60))
                self._sleep(nominal * (1 - _JITTER * random.random()))
            else:
                self._sleep(min(self._max_backoff, retry_after))
            attempt += 1
            usage["retries"] += 1

    def _answer(self, reply: object, json_schema: dict[str, Any]) -> dict[str, Any]:
        """The ``decide`` tool input of ``reply``, checked against ``json_schema``."""
        if not isinstance(reply, anthropic.types.Message):
            raise LLMResponseError(f"the Anthropic API reply is not a message: {str(reply)[:200]!r}")
        if reply.stop_reason == "max_tokens":
            raise LLMResponseError(
                f"the answer was cut off at max_tokens={self._max_tokens}; its JSON may be incomplete "
                f"(raise max_tokens)"
            )
        blocks = [(getattr(b, "type", None), getattr(b, "name", None), b) for b in reply.content]
        calls = [b for kind, name, b in blocks if kind == "tool_use" and name == _TOOL_NAME]
        if not calls:
            seen = [f"{kind}:{name}" if name else kind for kind, name, _ in blocks]
            raise LLMResponseError(
                f"the model did not call the {_TOOL_NAME!r} tool (stop_reason={reply.stop_reason!r}, blocks={seen})"
            )
        answer: object = getattr(calls[0], "input", None)
        if not isinstance(answer, dict):
            raise LLMResponseError(f"the tool input is a {type(answer).__name__}, not a JSON object")
        problem = _mismatch(answer, json_schema, "$")
        if problem is not None:
            raise LLMResponseError(f"the answer does not match the schema: {problem}")
        return answer


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidInputError(message)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return finite_number(value) is not None


def _translate(exc: anthropic.APIError, timeout: float) -> tuple[LLMError, bool, float | None]:
    """Our error for a failed attempt, whether another attempt may help, and the wait the
    server asked for (``retry-after`` in seconds; a date or a bad value is ignored)."""
    if isinstance(exc, anthropic.APITimeoutError):
        return LLMTimeoutError(f"no answer from the Anthropic API within {timeout}s"), True, None
    if isinstance(exc, anthropic.APIConnectionError):
        return LLMUnavailableError(f"cannot reach the Anthropic API: {exc.__cause__ or exc}"), True, None
    if not isinstance(exc, anthropic.APIStatusError):
        return LLMUnavailableError(f"the Anthropic API call failed: {exc}"), False, None
    status, headers = exc.status_code, exc.response.headers
    # api_message and type (the body's error.message and error.type) are new in SDK 2.x.
    kind, detail = getattr(exc, "type", None) or "error", getattr(exc, "api_message", None) or exc.message
    failure = LLMUnavailableError(f"the Anthropic API answered {status} ({kind}): {detail}", status)
    # The API's x-should-retry overrides the status, e.g. "false" on a 429 for a spent budget.
    hint = headers.get("x-should-retry")
    retryable = hint == "true" if hint in ("true", "false") else status in _RETRY_STATUSES or status >= 500
    try:
        retry_after = float(headers.get("retry-after", ""))
    except ValueError:  # absent, or an HTTP date: our own backoff applies
        retry_after = math.nan
    return failure, retryable, retry_after if math.isfinite(retry_after) and retry_after > 0 else None


def _split_messages(messages: object) -> tuple[str, list[dict[str, str]]]:
    if not isinstance(messages, list):
        raise InvalidInputError(f"messages must be a list of dicts, got {type(messages).__name__}")
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        ok = isinstance(message, dict) and message.get("role") in _ROLES and isinstance(message.get("content"), str)
        _require(ok, f"messages[{i}] must be {{'role': 'system'|'user'|'assistant', 'content': str}}")
        if message["role"] == "system":
            system.append(message["content"])
        else:
            turns.append({"role": message["role"], "content": message["content"]})
    _require(bool(turns), "messages must hold at least one 'user' or 'assistant' message")
    return "\n\n".join(system), turns


def _types(schema: dict[str, Any]) -> list[Any]:
    declared = schema.get("type", [])
    return list(declared) if isinstance(declared, list) else [declared]


def _check_schema(schema: object, path: str) -> None:
    """Raise InvalidInputError for a schema (part) the validator cannot enforce."""
    if not isinstance(schema, dict):
        raise InvalidInputError(f"json_schema at {path} must be a dict, got {type(schema).__name__}")
    for name in _types(schema):
        _require(isinstance(name, str) and name in _TYPE_CHECKS, f"json_schema at {path}: unsupported type {name!r}")
    properties = schema.get("properties", {})
    _require(isinstance(properties, dict), f"json_schema at {path} has 'properties' that is not a dict")
    for key, sub in properties.items():
        _check_schema(sub, f"{path}.{key}")
    if "items" in schema:
        _check_schema(schema["items"], f"{path}[]")


def _mismatch(value: object, schema: dict[str, Any], path: str) -> str | None:
    """The first way ``value`` breaks ``schema``, or None when it conforms."""
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
            if key in value and (problem := _mismatch(value[key], sub, f"{path}.{key}")) is not None:
                return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            if (problem := _mismatch(item, schema["items"], f"{path}[{i}]")) is not None:
                return problem
    return None
