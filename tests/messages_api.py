"""A fake Anthropic Messages API on 127.0.0.1 for tests: ``POST /v1/messages`` answered from a
queue of scripted replies, every request recorded. The ``api`` fixture (conftest.py) starts
one per test; nothing touches the network."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer of the fake API; ``body`` is JSON-encoded unless it is bytes."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"type": "error", "error": {"type": kind, "message": text}}, headers or {})


class FakeMessagesAPI:
    """A ThreadingHTTPServer that answers ``POST /v1/messages`` from a queue of replies and
    records every request's path, headers (lower-cased names) and JSON body."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.released = threading.Event()  # set at teardown, ends any scripted delay early
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                api.requests.append({
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(raw),
                })
                reply = api.replies.popleft() if api.replies else error(500, "api_error", "nothing scripted")
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
