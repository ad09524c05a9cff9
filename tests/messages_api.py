"""A fake LLM API on 127.0.0.1 for tests: every ``POST`` (Anthropic's ``/v1/messages``, the
Chat Completions ``/v1/chat/completions``) answered from a queue of scripted replies, every
request recorded. The ``api`` fixture (conftest.py) starts one per test; nothing touches the
network. :func:`decided` builds a Messages API answer, :func:`completion` a Chat Completions one.

The three ways an LLM is down, for the agent-failure tests: a port nothing listens on
(:func:`closed_port`: connections are refused), an API that answers every request with an
error (``api.default = error(529, ...)``), and one that accepts and never answers
(``api.default = HANG``: the client's timeout ends the wait)."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer of the fake API; ``body`` is JSON-encoded unless it is bytes.
    ``hang`` holds the request unanswered until the test ends (``api.released``), then closes
    the connection without a reply."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hang: bool = False


#: The reply of an API that accepts a request and never answers it.
HANG = Reply(hang=True)


def error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"type": "error", "error": {"type": kind, "message": text}}, headers or {})


#: What the client tests ask (tests/test_anthropic_client.py, tests/test_openai_client.py): a
#: schema with an enum, a nullable integer, an optional array and no extra keys, two system
#: messages and one user message, and an answer of that shape.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["descend", "stop"]},
        "child": {"type": ["integer", "null"]},
        "reasons": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["action", "child"],
    "additionalProperties": False,
}
MESSAGES = [
    {"role": "system", "content": "You navigate a keyword tree."},
    {"role": "system", "content": "Answer with the decide tool."},
    {"role": "user", "content": "Where does 'tea' go?"},
]
GOOD = {"action": "descend", "child": 2, "reasons": ["drinks"]}


def decided(answer: dict[str, Any]) -> Reply:
    """The reply of a model that called the ``decide`` tool with ``answer`` (what
    AnthropicLLMClient asks for)."""
    return Reply(body={"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
                       "content": [{"type": "tool_use", "id": "toolu_01", "name": "decide", "input": answer}],
                       "stop_reason": "tool_use", "stop_sequence": None,
                       "usage": {"input_tokens": 100, "output_tokens": 20}})


def completion(answer: Any = None, *, content: str | None = None, finish_reason: str = "stop",
               refusal: str | None = None, usage: dict[str, int] | None = None) -> Reply:
    """A Chat Completions answer (what OpenAILLMClient reads): ``answer`` as the message's JSON
    content, or ``content`` as it is; 100 prompt and 20 completion tokens unless ``usage`` says."""
    text = content if content is not None else json.dumps(answer)
    return Reply(body={"id": "chatcmpl-01", "object": "chat.completion", "model": "gpt-test",
                       "choices": [{"index": 0, "finish_reason": finish_reason,
                                    "message": {"role": "assistant", "content": text, "refusal": refusal}}],
                       "usage": usage if usage is not None else {"prompt_tokens": 100, "completion_tokens": 20,
                                                                 "total_tokens": 120}})


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (connections are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


#: Variables of the developer's shell that would point a test's ``kwtree`` process at another
#: LLM, key or proxy.
SHELL_SETTINGS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "KWTREE_ANTHROPIC_MODEL",
                  "OPENAI_API_KEY", "OPENAI_BASE_URL", "KWTREE_OPENAI_BASE_URL", "KWTREE_OPENAI_MODEL",
                  "KWTREE_LLM", "KWTREE_LLM_TIMEOUT", "KWTREE_LLM_MAX_RETRIES", "KWTREE_ON_AGENT_FAILURE",
                  "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def llm_env(url: str, llm: str = "anthropic", **settings: str) -> dict[str, str]:
    """The environment of a ``kwtree`` process whose LLM (``KWTREE_LLM``) is ``llm``'s client
    at ``url``: "anthropic" (key test-key) or "openai" (``url`` is the base URL, model
    gpt-test, no key); one attempt of at most 5 s unless ``settings`` say otherwise
    (``KWTREE_LLM_TIMEOUT="0.5"``), and nothing of the developer's own LLM settings."""
    kept = {name: value for name, value in os.environ.items() if name not in SHELL_SETTINGS}
    endpoint = ({"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": url} if llm == "anthropic"
                else {"KWTREE_OPENAI_BASE_URL": url, "KWTREE_OPENAI_MODEL": "gpt-test"})
    return {**kept, "KWTREE_LLM": llm, **endpoint, "KWTREE_LLM_MAX_RETRIES": "0", "KWTREE_LLM_TIMEOUT": "5",
            **settings}


class FakeMessagesAPI:
    """A ThreadingHTTPServer that answers every ``POST`` from a queue of replies (then
    with ``default``) and records every request's path, headers (lower-cased names) and JSON
    body; ``arrived`` is set when a request has come in."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.default = error(500, "api_error", "nothing scripted")
        self.requests: list[dict[str, Any]] = []
        self.arrived = threading.Event()
        self.released = threading.Event()  # set at teardown, ends any scripted delay or hang
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                api.requests.append({
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(raw),
                })
                reply = api.replies.popleft() if api.replies else api.default
                api.arrived.set()
                if reply.hang:
                    api.released.wait()
                    self.close_connection = True
                    return
                api.released.wait(reply.delay)
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up waiting (the timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # a short poll interval, so shutdown() at teardown returns at once rather than in 0.5 s
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)
