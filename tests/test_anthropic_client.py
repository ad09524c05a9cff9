"""AnthropicLLMClient against a fake Messages API on 127.0.0.1: the request it sends, how it
checks the answer, its retry policy and its usage figures. Nothing here touches the network,
and no test sleeps: every client records its backoff waits instead of sleeping them."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest
from messages_api import GOOD, MESSAGES, SCHEMA, FakeMessagesAPI, Reply, error

from kwtree.agent import anthropic_client
from kwtree.agent.anthropic_client import DEFAULT_MODEL, AnthropicLLMClient
from kwtree.errors import (
    InvalidInputError,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
)


def message(answer: Any = GOOD, *, stop_reason: str = "tool_use", name: str = "decide") -> Reply:
    content = [{"type": "tool_use", "id": "toolu_01", "name": name, "input": answer}]
    return Reply(body={
        "id": "msg_01", "type": "message", "role": "assistant", "model": "echo",
        "content": content, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20},
    })


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key, model, endpoint or proxy from the developer's shell leaks into a test."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS",
                 "KWTREE_ANTHROPIC_MODEL", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                 "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make_client(api: FakeMessagesAPI, sleeps: list[float]) -> Callable[..., AnthropicLLMClient]:
    def make(**kwargs: Any) -> AnthropicLLMClient:
        options: dict[str, Any] = {"api_key": "test-key", "base_url": api.url, "model": "claude-test", "timeout": 5.0,
                                   "backoff": 0.001, "max_backoff": 0.01, **kwargs}
        client = AnthropicLLMClient(**options)
        client._sleep = sleeps.append
        return client

    return make


def test_public_names_are_pinned() -> None:
    assert sorted(anthropic_client.__all__) == ["AnthropicLLMClient", "DEFAULT_MODEL"]


def test_good_answer_forces_the_tool_and_counts_usage(api, make_client) -> None:
    api.script(message(), message({"action": "stop", "child": None}))
    client = make_client(max_tokens=300)

    assert client.chat(MESSAGES, SCHEMA) == GOOD
    assert client.chat(MESSAGES, SCHEMA) == {"action": "stop", "child": None}

    sent = api.requests[0]
    assert sent["path"] == "/v1/messages"
    # SDK 2.12 sends the API key as a bearer token, not as x-api-key.
    assert sent["headers"]["authorization"] == "Bearer test-key"
    assert "anthropic-version" in sent["headers"]
    assert sent["body"]["model"] == "claude-test"
    assert sent["body"]["max_tokens"] == 300
    assert sent["body"]["system"] == "You navigate a keyword tree.\n\nAnswer with the decide tool."
    assert sent["body"]["messages"] == [{"role": "user", "content": "Where does 'tea' go?"}]
    assert [t["name"] for t in sent["body"]["tools"]] == ["decide"]
    assert sent["body"]["tools"][0]["input_schema"] == SCHEMA
    assert sent["body"]["tool_choice"] == {"type": "tool", "name": "decide"}
    assert client.usage == {"calls": 2, "input_tokens": 200, "output_tokens": 40, "retries": 0}
    assert client.last_usage == {"calls": 1, "input_tokens": 100, "output_tokens": 20, "retries": 0}
    assert (client.model, client.name) == ("claude-test", "anthropic:claude-test")


@pytest.mark.parametrize(
    ("reply", "complaint"),
    [
        (message({"action": "descend", "child": "2"}), r"\$\.child should be integer or null"),
        (message({"action": "descend", "child": True}), r"\$\.child should be integer or null"),
        (message({"action": "descend"}), r"lacks required key\(s\) \['child'\]"),
        (message({"action": "fly", "child": 1}), r"\$\.action should be one of"),
        (message({**GOOD, "mood": "ok"}), r"does not allow: \['mood'\]"),
        (message({**GOOD, "reasons": ["a", 3]}), r"\$\.reasons\[1\] should be string"),
        (message(["descend", 2]), "not a JSON object"),
        (message(GOOD, name="other"), "did not call the 'decide' tool"),
        (message({"action": "desc"}, stop_reason="max_tokens"), "cut off at max_tokens"),
        (Reply(body={"id": "m", "type": "message", "role": "assistant", "model": "echo",
                     "content": [{"type": "text", "text": "I think descend."}], "stop_reason": "end_turn",
                     "usage": {"input_tokens": 9, "output_tokens": 4}}), r"blocks=\['text'\]"),
        (Reply(body=b"{not json"), "unreadable reply"),
    ],
)
def test_malformed_answers_raise_response_error_without_retry(api, make_client, reply, complaint) -> None:
    api.script(reply)
    client = make_client()
    with pytest.raises(LLMResponseError, match=complaint):
        client.chat(MESSAGES, SCHEMA)
    assert len(api.requests) == 1
    assert client.usage["calls"] == 1


def test_overloaded_then_success_retries_once(api, make_client, sleeps) -> None:
    api.script(error(529, "overloaded_error", "Overloaded"), message())
    client = make_client()
    assert client.chat(MESSAGES, SCHEMA) == GOOD
    assert len(api.requests) == 2
    assert api.requests[0]["body"] == api.requests[1]["body"]
    assert client.usage == {"calls": 1, "input_tokens": 100, "output_tokens": 20, "retries": 1}
    assert len(sleeps) == 1


def test_rate_limit_honours_retry_after_capped_by_max_backoff(api, make_client, sleeps) -> None:
    api.script(
        error(429, "rate_limit_error", "slow down", {"retry-after": "0.05"}),
        error(429, "rate_limit_error", "slow down", {"retry-after": "30"}),
        message(),
    )
    client = make_client(backoff=0.001, max_backoff=1.0)
    assert client.chat(MESSAGES, SCHEMA) == GOOD
    assert sleeps == [0.05, 1.0]
    assert client.last_usage["retries"] == 2


def test_exhausted_retries_raise_unavailable_with_the_last_status(api, make_client, sleeps) -> None:
    api.script(*[error(529, "overloaded_error", "Overloaded")] * 3)
    client = make_client(max_retries=2, backoff=0.001, max_backoff=1.0)
    with pytest.raises(LLMUnavailableError, match="Overloaded") as caught:
        client.chat(MESSAGES, SCHEMA)
    assert caught.value.status_code == 529
    assert len(api.requests) == 3
    assert client.usage["retries"] == 2
    # exponential backoff, each wait at most 10% under its nominal value
    assert 0.0009 <= sleeps[0] <= 0.001 and 0.0018 <= sleeps[1] <= 0.002


def test_server_can_forbid_a_retry(api, make_client) -> None:
    api.script(error(429, "rate_limit_error", "spend limit reached", {"x-should-retry": "false"}))
    with pytest.raises(LLMUnavailableError, match="spend limit") as caught:
        make_client().chat(MESSAGES, SCHEMA)
    assert caught.value.status_code == 429
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "invalid_request_error"), (401, "authentication_error"), (403, "permission_error"),
     (404, "not_found_error")],
)
def test_client_errors_are_not_retried(api, make_client, status, kind) -> None:
    api.script(error(status, kind, f"explained {status}"))
    client = make_client()
    with pytest.raises(LLMUnavailableError, match=f"{status} \\({kind}\\): explained {status}") as caught:
        client.chat(MESSAGES, SCHEMA)
    assert caught.value.status_code == status
    assert len(api.requests) == 1
    assert client.usage["retries"] == 0


def test_timeout_is_retried_then_raises_timeout_error(api, make_client) -> None:
    api.script(Reply(delay=10, body={}), Reply(delay=10, body={}))
    client = make_client(timeout=0.3, max_retries=1)
    with pytest.raises(LLMTimeoutError, match=r"within 0\.3s"):
        client.chat(MESSAGES, SCHEMA)
    assert len(api.requests) == 2
    assert client.usage["retries"] == 1


def test_unreachable_api_raises_unavailable_without_status(make_client) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago, so nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client(base_url=f"http://127.0.0.1:{port}", max_retries=1)
    with pytest.raises(LLMUnavailableError, match="cannot reach") as caught:
        client.chat(MESSAGES, SCHEMA)
    assert caught.value.status_code is None
    assert client.usage["retries"] == 1


def test_key_and_model_come_from_the_environment(api, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("KWTREE_ANTHROPIC_MODEL", "claude-from-env")
    api.script(message())
    client = AnthropicLLMClient(base_url=api.url)
    assert client.chat(MESSAGES, SCHEMA) == GOOD
    assert api.requests[0]["body"]["model"] == "claude-from-env"
    assert api.requests[0]["headers"]["authorization"] == "Bearer env-key"
    assert client.name == "anthropic:claude-from-env"


def test_default_model(api) -> None:
    assert AnthropicLLMClient(api_key="k", base_url=api.url).model == DEFAULT_MODEL == "claude-sonnet-4-6"


def test_missing_key_says_what_to_do() -> None:
    with pytest.raises(InvalidInputError, match=r"pass api_key=\.\.\. or set ANTHROPIC_API_KEY"):
        AnthropicLLMClient()


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout": 0}, {"timeout": -1.0}, {"timeout": float("inf")}, {"timeout": "30"},
     {"max_retries": -1}, {"max_retries": 1.5}, {"max_retries": True}, {"max_tokens": 0},
     {"backoff": -0.1}, {"max_backoff": float("nan")}, {"model": ""}, {"api_key": ""}, {"base_url": 3}],
)
def test_bad_constructor_arguments(kwargs) -> None:
    with pytest.raises(InvalidInputError, match=next(iter(kwargs))):
        AnthropicLLMClient(**{"api_key": "k", **kwargs})


@pytest.mark.parametrize(
    ("messages", "schema", "complaint"),
    [
        ([{"role": "tool", "content": "x"}], SCHEMA, r"messages\[0\]"),
        ([{"role": "user", "content": 3}], SCHEMA, r"messages\[0\]"),
        ([{"role": "system", "content": "only a system prompt"}], SCHEMA, "at least one"),
        ("hello", SCHEMA, "must be a list"),
        (MESSAGES, {"type": "string"}, "type 'object'"),
        (MESSAGES, {"type": "object", "properties": {"x": {"type": "date"}}}, r"\$\.x: unsupported type"),
    ],
)
def test_bad_chat_arguments_send_nothing(api, make_client, messages, schema, complaint) -> None:
    with pytest.raises(InvalidInputError, match=complaint):
        make_client().chat(messages, schema)
    assert api.requests == []


def test_usage_adds_up_across_threads(api, make_client) -> None:
    api.script(*[message()] * 8)
    client = make_client()
    workers = [threading.Thread(target=client.chat, args=(MESSAGES, SCHEMA)) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert client.usage == {"calls": 8, "input_tokens": 800, "output_tokens": 160, "retries": 0}
