"""An ``LLMClient`` backed by Anthropic's Messages API.

The answer is forced into the caller's JSON schema through tool use: the request offers one
tool, ``decide``, whose ``input_schema`` is the schema, and ``tool_choice`` makes the model call
it. The tool call's ``input`` is checked against the schema here before it is returned, so a
caller gets a dict of the requested shape or an :class:`~kwtree.errors.LLMError`.
"""

from __future__ import annotations

import json
import os
from typing import Any, Unpack

import anthropic

from kwtree.agent.llm_common import ChatClient, ClientLimits, Retry, is_int, require, retry_decision
from kwtree.errors import LLMError, LLMResponseError, LLMTimeoutError, LLMUnavailableError

__all__ = ["DEFAULT_MODEL", "AnthropicLLMClient"]

DEFAULT_MODEL = "claude-sonnet-4-6"

_TOOL_NAME = "decide"


class AnthropicLLMClient(ChatClient):
    """Answers ``chat(messages, json_schema)`` with a dict that matches ``json_schema``.

    Every call makes at most ``max_retries + 1`` HTTP attempts of at most ``timeout`` seconds
    each, waiting ``min(max_backoff, backoff * 2**attempt)`` (less up to 10% jitter) or the
    server's ``retry-after`` (capped at ``max_backoff``) between them, so a call always ends.
    Rate limits (429), overload (529), other 5xx, connection failures and timeouts are retried.
    ``usage`` and ``last_usage`` count calls, tokens and retries (``kwtree.agent.llm_common``).

    Raises, from the constructor, :class:`InvalidInputError` for a bad argument or no API key;
    from :meth:`chat`, :class:`InvalidInputError` for bad messages or schema,
    :class:`LLMResponseError` when the answer is not of the schema's shape (not retried),
    :class:`LLMTimeoutError` when the last attempt timed out, and :class:`LLMUnavailableError`
    (with ``status_code``) when the API refused or could not be reached.
    """

    def __init__(self, model: str | None = None, api_key: str | None = None, base_url: str | None = None,
                 **limits: Unpack[ClientLimits]) -> None:
        """``limits``: ``timeout``, ``max_retries``, ``max_tokens``, ``backoff``, ``max_backoff``
        (``kwtree.agent.llm_common.ClientLimits`` gives their defaults)."""
        model = model if model is not None else os.environ.get("KWTREE_ANTHROPIC_MODEL") or DEFAULT_MODEL
        super().__init__(model, **limits)
        # An empty ANTHROPIC_API_KEY counts as unset, as it does in the SDK.
        api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY") or None
        require(api_key is not None, "no Anthropic API key: pass api_key=... or set ANTHROPIC_API_KEY")
        require(isinstance(api_key, str) and api_key != "", "api_key must be a non-empty string")
        require(base_url is None or isinstance(base_url, str), f"base_url must be a string, got {base_url!r}")
        # Our own retry loop instead of the SDK's, so the policy and the waits are ours to test.
        # Without base_url the SDK reads ANTHROPIC_BASE_URL, then uses the public endpoint.
        self._sdk = anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=self._timeout, max_retries=0)

    @property
    def name(self) -> str:
        """``"anthropic:<model>"``, for logs and metrics."""
        return f"anthropic:{self._model}"

    def chat(self, messages: list[dict[str, Any]], json_schema: dict[str, Any]) -> dict[str, Any]:
        """Send ``messages`` and return the model's answer, a dict valid against ``json_schema``.

        System messages are joined (blank line between) into the ``system`` parameter; the
        others are sent in order. ``json_schema`` must describe an object.
        """
        system, turns = self._checked(messages, json_schema)
        request: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "messages": turns,
            "tools": [{"name": _TOOL_NAME, "description": "Give your answer.", "input_schema": json_schema}],
            "tool_choice": {"type": "tool", "name": _TOOL_NAME},
        }
        if system:
            request["system"] = system
        with self._metered() as usage:
            reply = self._retrying(lambda: self._attempt(request), usage)
            for key in ("input_tokens", "output_tokens"):  # lenient parsing may leave them out
                tokens = getattr(getattr(reply, "usage", None), key, None)
                usage[key] = tokens if is_int(tokens) else 0
            return self._answer(reply, json_schema)

    def _attempt(self, request: dict[str, Any]) -> object:
        """One HTTP attempt; returns what the SDK parsed from a 2xx reply, raises Retry when
        another attempt may help."""
        try:
            return self._sdk.messages.create(**request)
        except (anthropic.APIResponseValidationError, json.JSONDecodeError) as exc:
            raise LLMResponseError(f"the Anthropic API sent an unreadable reply: {exc}") from exc
        except anthropic.APIError as exc:
            failure, retryable, retry_after = _translate(exc, self._timeout)
            if retryable:
                raise Retry(failure, retry_after) from exc
            raise failure from exc

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
        return self._conforming(getattr(calls[0], "input", None), json_schema)


def _translate(exc: anthropic.APIError, timeout: float) -> tuple[LLMError, bool, float | None]:
    """Our error for a failed attempt, whether another attempt may help, and the wait the
    server asked for (``retry-after`` in seconds; a date or a bad value is ignored)."""
    if isinstance(exc, anthropic.APITimeoutError):
        return LLMTimeoutError(f"no answer from the Anthropic API within {timeout}s"), True, None
    if isinstance(exc, anthropic.APIConnectionError):
        return LLMUnavailableError(f"cannot reach the Anthropic API: {exc.__cause__ or exc}"), True, None
    if not isinstance(exc, anthropic.APIStatusError):
        return LLMUnavailableError(f"the Anthropic API call failed: {exc}"), False, None
    status = exc.status_code
    # api_message and type (the body's error.message and error.type) are new in SDK 2.x.
    kind, detail = getattr(exc, "type", None) or "error", getattr(exc, "api_message", None) or exc.message
    failure = LLMUnavailableError(f"the Anthropic API answered {status} ({kind}): {detail}", status)
    retryable, retry_after = retry_decision(status, exc.response.headers.get)
    return failure, retryable, retry_after
