"""An ``LLMClient`` that speaks the Chat Completions protocol, ``POST {base_url}/chat/completions``,
over stdlib urllib: OpenAI's API and the servers that copy it (Ollama, vLLM, llama.cpp's server,
LM Studio). No SDK: the protocol is one POST, and a dependency would only pin its version.

The answer is asked for as ``response_format: {"type": "json_schema", ...}`` with the caller's
schema (``strict: false``: OpenAI's strict mode refuses schemas with optional properties, which
ours have). A server that does not take that (it answers 400 or 422 naming ``response_format``
or ``json_schema``) is asked once more, at once, for ``{"type": "json_object"}`` with the schema
stated in the system message, and every later call of this client asks that way. Either way the
content is parsed as JSON (a Markdown ```json fence around it is tolerated) and checked against
the schema here (``kwtree.agent.llm_common.mismatch``, as AnthropicLLMClient does), so a caller
gets a dict of the requested shape or an :class:`~kwtree.errors.LLMError`.

Roles are kept: the system messages become the one leading ``system`` message (with a note that
says how to answer), and each user and assistant message is sent whole under its own role. A
caller's data therefore stays where the caller put it (the extractor and the descend loop send
it as a JSON document in a user message, ``kwtree.agent.prompts.build_messages``); nothing of a
user message is ever merged into the system text.

Input is bounded: a request whose messages' contents hold more than ``max_input_chars``
characters in all is refused with InvalidInputError before anything is sent. It is not cut
instead, because the callers' user message is a JSON document and a cut one is neither valid
JSON nor the caller's data; the extractor already cuts its chunks to fit
(``LLMExtractor.max_chunk_chars``).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.error
import urllib.request
from typing import Any, Unpack

from kwtree.agent.llm_common import ChatClient, ClientLimits, Retry, is_int, require, retry_decision
from kwtree.errors import InvalidInputError, LLMResponseError, LLMTimeoutError, LLMUnavailableError

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MAX_INPUT_CHARS", "OpenAILLMClient"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: The most characters of message text one request may carry: the extractor's largest chunk
#: (24,000 characters of conversation, kwtree.memory.llm_extract) with room for its JSON.
DEFAULT_MAX_INPUT_CHARS = 100_000

_SCHEMA_NAME = "decide"
#: The statuses (and the words in the error body) of a server that does not take a json_schema
#: response_format: vLLM and OpenAI answer 400, servers on FastAPI's validation 422.
_FORMAT_STATUSES = frozenset({400, 422})
_FORMAT_WORDS = ("response_format", "json_schema")
#: Appended to the caller's system text. The callers' prompts say "answer with the decide tool"
#: (the Anthropic client's protocol); here that tool's input is the reply's content.
_ANSWER_NOTE = ("Reply with one JSON object and nothing else. Where these instructions say to answer with a tool, "
                "that JSON object is the tool's input.")
_SCHEMA_NOTE = "The JSON object must match this JSON Schema:\n"
_FENCE = re.compile(r"\A```[A-Za-z]*\s*\n(?P<body>.*?)\n?```\Z", re.DOTALL)
_DETAIL_CHARS = 300


class _FormatRefused(Exception):
    """The server refused the json_schema response_format; ``failure`` says how."""

    def __init__(self, failure: LLMUnavailableError) -> None:
        super().__init__(str(failure))
        self.failure = failure


class OpenAILLMClient(ChatClient):
    """Answers ``chat(messages, json_schema)`` with a dict that matches ``json_schema``, from an
    OpenAI-compatible Chat Completions endpoint.

    Settings, each from the argument, else the environment:

    - ``base_url``: ``$KWTREE_OPENAI_BASE_URL``, else ``$OPENAI_BASE_URL``, else
      :data:`DEFAULT_BASE_URL` (e.g. ``http://localhost:11434/v1`` for Ollama).
    - ``model``: ``$KWTREE_OPENAI_MODEL``; required.
    - ``api_key``: ``$OPENAI_API_KEY``; optional: without one no ``Authorization`` header is sent
      (local servers need none).

    Every call makes at most ``max_retries + 1`` HTTP attempts, each waiting at most ``timeout``
    seconds for the connection and for each read, with backoff between them as
    ``kwtree.agent.llm_common.ChatClient`` says; 408, 409, 429, 5xx, connection failures and
    timeouts are retried, other 4xx are not. ``usage`` and ``last_usage`` count calls, tokens
    (the reply's ``usage.prompt_tokens`` and ``completion_tokens``) and retries.

    Raises, from the constructor, :class:`InvalidInputError` naming the bad setting (or the
    missing model); from :meth:`chat`, :class:`InvalidInputError` for bad messages or schema or
    messages over ``max_input_chars`` (nothing is sent), :class:`LLMResponseError` for a refusal,
    a filtered, cut-off, empty or non-JSON answer or one not of the schema's shape (not retried),
    :class:`LLMTimeoutError` when the last attempt timed out, and :class:`LLMUnavailableError`
    (with ``status_code``; None when no answer came back) when the server refused or could not
    be reached.
    """

    def __init__(self, model: str | None = None, api_key: str | None = None, base_url: str | None = None,
                 max_input_chars: int = DEFAULT_MAX_INPUT_CHARS, **limits: Unpack[ClientLimits]) -> None:
        """``limits``: ``timeout``, ``max_retries``, ``max_tokens``, ``backoff``, ``max_backoff``
        (``kwtree.agent.llm_common.ClientLimits`` gives their defaults)."""
        model = model if model is not None else os.environ.get("KWTREE_OPENAI_MODEL") or None
        if model is None:
            raise InvalidInputError("no model for the OpenAI-compatible client: pass model=... or set "
                                    "KWTREE_OPENAI_MODEL (e.g. gpt-4o-mini, or llama3.1 on Ollama)")
        super().__init__(model, **limits)
        if base_url is None:
            base_url = (os.environ.get("KWTREE_OPENAI_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
                        or DEFAULT_BASE_URL)
        require(isinstance(base_url, str) and base_url.startswith(("http://", "https://")),
                f"base_url must start with http:// or https://, got {base_url!r}")
        # An empty OPENAI_API_KEY counts as unset: a local server's shell may export one.
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
        require(api_key is None or (isinstance(api_key, str) and api_key != ""),
                "api_key must be a non-empty string, or None to send no Authorization header")
        require(is_int(max_input_chars) and max_input_chars >= 1,
                f"max_input_chars must be an int >= 1, got {max_input_chars!r}")
        self._base_url = base_url.rstrip("/")
        self._url = f"{self._base_url}/chat/completions"
        self._api_key = api_key
        self._max_input_chars = max_input_chars
        self._json_object = False  # set for good once the server refused a json_schema response_format

    @property
    def name(self) -> str:
        """``"openai:<model>@<base_url>"``, for logs and metrics."""
        return f"openai:{self._model}@{self._base_url}"

    @property
    def base_url(self) -> str:
        """The endpoint's base URL, without a trailing slash."""
        return self._base_url

    @property
    def json_object(self) -> bool:
        """True once the server refused a json_schema response_format: requests then ask for
        a JSON object and state the schema in the system message."""
        return self._json_object

    def chat(self, messages: list[dict[str, Any]], json_schema: dict[str, Any]) -> dict[str, Any]:
        """Send ``messages`` and return the model's answer, a dict valid against ``json_schema``.

        System messages are joined (blank line between) into one leading system message, with
        a note on how to answer; the others are sent in order, each under its own role.
        ``json_schema`` must describe an object.
        """
        system, turns = self._checked(messages, json_schema)
        size = sum(len(message["content"]) for message in messages)  # as given; _checked checked them
        require(size <= self._max_input_chars,
                f"messages hold {size:,} characters, over max_input_chars={self._max_input_chars:,}: "
                "send a shorter conversation, or raise max_input_chars")
        with self._metered() as usage:
            try:
                reply = self._retrying(lambda: self._attempt(system, turns, json_schema, self._json_object), usage)
            except _FormatRefused:
                # Not every server takes a json_schema response_format (older llama.cpp and
                # LM Studio builds, some proxies): ask for a JSON object, now and from now on.
                self._json_object = True
                usage["retries"] += 1
                reply = self._retrying(lambda: self._attempt(system, turns, json_schema, True), usage)
            for key, field in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
                counted = reply.get("usage")
                tokens = counted.get(field) if isinstance(counted, dict) else None
                usage[key] = tokens if is_int(tokens) else 0  # local servers may leave usage out
            return self._answer(reply, json_schema)

    def _body(self, system: str, turns: list[dict[str, str]], json_schema: dict[str, Any],
              json_object: bool) -> bytes:
        note = _ANSWER_NOTE
        if json_object:  # the server will not see the schema, so the model must be told it
            note += f"\n{_SCHEMA_NOTE}{json.dumps(json_schema, ensure_ascii=False)}"
            response_format: dict[str, Any] = {"type": "json_object"}
        else:
            response_format = {"type": "json_schema",
                               "json_schema": {"name": _SCHEMA_NAME, "schema": json_schema, "strict": False}}
        request = {
            "model": self._model,
            "messages": [{"role": "system", "content": f"{system}\n\n{note}" if system else note}, *turns],
            "max_tokens": self._max_tokens,
            "response_format": response_format,
        }
        return json.dumps(request, ensure_ascii=False).encode()

    def _attempt(self, system: str, turns: list[dict[str, str]], json_schema: dict[str, Any],
                 json_object: bool) -> dict[str, Any]:
        """One HTTP attempt; returns the parsed reply of a 2xx answer, raises Retry when
        another attempt may help and _FormatRefused when the json_schema format was refused."""
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "kwtree"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self._url, self._body(system, turns, json_schema, json_object), headers,
                                         method="POST")
        where = f"the OpenAI-compatible API at {self._base_url}"
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, _read_error(exc)
            failure = LLMUnavailableError(f"{where} answered {status}: {_detail(text)}", status)
            if not json_object and status in _FORMAT_STATUSES and any(w in text.lower() for w in _FORMAT_WORDS):
                raise _FormatRefused(failure) from exc
            retryable, retry_after = retry_decision(status, exc.headers.get)
            if retryable:
                raise Retry(failure, retry_after) from exc
            raise failure from exc
        except (OSError, http.client.HTTPException) as exc:  # URLError and socket timeouts are OSErrors
            reason = getattr(exc, "reason", exc)  # URLError wraps the socket's error
            if isinstance(reason, TimeoutError):
                raise Retry(LLMTimeoutError(f"no answer from {where} within {self._timeout}s")) from exc
            raise Retry(LLMUnavailableError(f"cannot reach {where}: {reason}")) from exc
        try:
            reply = json.loads(raw)
        except ValueError as exc:
            raise LLMResponseError(f"{where} sent an unreadable reply: {raw[:200]!r}") from exc
        if not isinstance(reply, dict):
            raise LLMResponseError(f"{where} sent a reply that is not a JSON object: {raw[:200]!r}")
        return reply

    def _answer(self, reply: dict[str, Any], json_schema: dict[str, Any]) -> dict[str, Any]:
        """The JSON object in ``choices[0].message.content``, checked against ``json_schema``."""
        choices = reply.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not isinstance(message, dict):
            raise LLMResponseError(f"the reply holds no choices[0].message: {json.dumps(reply)[:200]}")
        finish = choice.get("finish_reason")
        if message.get("refusal") not in (None, ""):
            raise LLMResponseError(f"the model refused to answer: {str(message['refusal'])[:_DETAIL_CHARS]}")
        if finish == "content_filter":
            raise LLMResponseError("the server's content filter withheld the answer (finish_reason='content_filter')")
        if finish == "length":
            raise LLMResponseError(f"the answer was cut off at max_tokens={self._max_tokens}; its JSON may be "
                                   "incomplete (raise max_tokens)")
        content = message.get("content")
        if not isinstance(content, str) or not content.strip():
            raise LLMResponseError(f"the answer is empty (finish_reason={finish!r})")
        text = content.strip()
        fenced = _FENCE.match(text)
        try:
            answer = json.loads(fenced.group("body") if fenced else text)
        except ValueError as exc:
            raise LLMResponseError(f"the answer is not JSON ({exc}): {text[:200]!r}") from None
        return self._conforming(answer, json_schema)


def _read_error(exc: urllib.error.HTTPError) -> str:
    """The body of an error answer as text ("" when it cannot be read)."""
    try:
        return exc.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return ""


def _detail(text: str) -> str:
    """What an error body says: OpenAI's ``{"error": {"message", "type"}}``, Ollama's
    ``{"error": "..."}``, vLLM's ``{"message": ...}``, else the body's start."""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:_DETAIL_CHARS] or "(no body)"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        kind = error.get("type") or error.get("code")
        return (f"({kind}) " if kind else "") + str(error["message"])[:_DETAIL_CHARS]
    if isinstance(error, str) and error:
        return error[:_DETAIL_CHARS]
    message = body.get("message") if isinstance(body, dict) else None
    return message[:_DETAIL_CHARS] if isinstance(message, str) else text[:_DETAIL_CHARS]
