"""``kwtree.integrations.anthropic.memory_tools`` in the real ``anthropic`` SDK's tool-use loop,
against a fake Messages API on 127.0.0.1 (tests/messages_api.py) that plays the model: it asks
for ``recall``, reads the result and answers; it asks to ``remember``, and that lands as one
operation. Nothing touches the network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import pytest
from messages_api import FakeMessagesAPI, Reply

from kwtree import InvalidInputError, KeywordTree
from kwtree.integrations.anthropic import memory_tools
from kwtree.integrations.catalog import TOOLS


def said(*content: dict[str, Any], stop_reason: str) -> Reply:
    return Reply(body={"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
                       "content": list(content), "stop_reason": stop_reason, "stop_sequence": None,
                       "usage": {"input_tokens": 10, "output_tokens": 5}})


def tool_use(name: str, arguments: dict[str, Any], use_id: str = "toolu_01") -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": arguments}


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


@pytest.fixture
def client(api: FakeMessagesAPI) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=api.url, max_retries=0)


def test_the_model_recalls_a_memory_then_answers_from_it(tmp_path: Path, api: FakeMessagesAPI,
                                                        client: anthropic.Anthropic) -> None:
    with KeywordTree(tmp_path / "memory") as tree:
        memory = memory_tools(tree, scope="user:alice")
        memory.call("remember", {"text": "Alice's favourite tea is jasmine."})
        api.script(said(text("Let me check."), tool_use("recall", {"query": "favourite tea"}), stop_reason="tool_use"),
                   said(text("Your favourite tea is jasmine."), stop_reason="end_turn"))
        reply = memory.run(client, model="claude-test", max_tokens=512,
                           messages=[{"role": "user", "content": "What is my favourite tea?"}])
    assert reply.content[0].text == "Your favourite tea is jasmine."
    first, second = (request["body"] for request in api.requests)
    assert [tool["name"] for tool in first["tools"]] == [spec.name for spec in TOOLS]
    assert all(tool["input_schema"]["type"] == "object" and tool["description"] for tool in first["tools"])
    result = second["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_01" and not result["is_error"]
    recalled = json.loads(result["content"])["memories"]
    assert recalled[0]["text"] == "Alice's favourite tea is jasmine."
    assert second["messages"][1]["role"] == "assistant" and second["messages"][1]["content"][1]["name"] == "recall"


def test_the_model_asks_to_remember_and_it_lands_as_one_operation(tmp_path: Path, api: FakeMessagesAPI,
                                                                 client: anthropic.Anthropic) -> None:
    with KeywordTree(tmp_path / "memory") as tree:
        before = len(tree.history())
        memory = memory_tools(tree, scope="user:alice")
        api.script(said(tool_use("remember", {"text": "Alice moved to Leeds in May 2024."}), stop_reason="tool_use"),
                   said(text("I'll remember that."), stop_reason="end_turn"))
        reply = memory.run(client, model="claude-test", max_tokens=512,
                           messages=[{"role": "user", "content": "Remember that I moved to Leeds in May 2024."}])
        assert reply.stop_reason == "end_turn"
        operations = tree.history()[before:]
        assert [op.kind for op in operations] == ["commit_session"]
        assert [info.content for info in tree.memories("user:alice")] == ["Alice moved to Leeds in May 2024."]
        stored = json.loads(api.requests[1]["body"]["messages"][-1]["content"][0]["content"])
        assert stored["op_id"] == operations[0].op_id


def test_a_refused_call_goes_back_to_the_model_as_an_error_and_writes_nothing(
        tmp_path: Path, api: FakeMessagesAPI, client: anthropic.Anthropic) -> None:
    with KeywordTree(tmp_path / "memory") as tree:
        before = len(tree.history())
        memory = memory_tools(tree, scope="user:alice", read_only=True)
        assert "remember" not in {tool["name"] for tool in memory.definitions}
        api.script(said(tool_use("recall", {"query": "tea", "k": 1000}), stop_reason="tool_use"),
                   said(text("Sorry."), stop_reason="end_turn"))
        memory.run(client, model="claude-test", max_tokens=512, messages=[{"role": "user", "content": "tea?"}])
        result = api.requests[1]["body"]["messages"][-1]["content"][0]
        assert result["is_error"] and result["content"].startswith("InvalidInputError: recall: k must be between")
        refusal = memory.call("remember", {"text": "x"})
        assert refusal.is_error and "read-only" in refusal.text
        assert len(tree.history()) == before


def test_a_tool_the_agent_owns_ends_the_loop_for_the_agent_to_answer(tmp_path: Path, api: FakeMessagesAPI,
                                                                    client: anthropic.Anthropic) -> None:
    weather = {"name": "weather", "description": "The weather in a city.",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    with KeywordTree(tmp_path / "memory") as tree:
        memory = memory_tools(tree)
        api.script(said(tool_use("weather", {"city": "Leeds"}), stop_reason="tool_use"))
        reply = memory.run(client, model="claude-test", max_tokens=512, tools=[weather],
                           messages=[{"role": "user", "content": "Weather?"}])
        assert reply.content[0].name == "weather" and len(api.requests) == 1
        assert api.requests[0]["body"]["tools"][0] == weather
        assert memory.results(reply) == []


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="tree"):
        memory_tools(None)  # type: ignore[arg-type]


def test_a_tool_use_the_loop_hands_back_has_not_run(tmp_path: Path, api: FakeMessagesAPI,
                                                    client: anthropic.Anthropic) -> None:
    """The last round's tool uses, and a message that also asks for the agent's own tool, come
    back unrun: the caller answers them, and nothing runs twice (a review found both ran)."""
    weather = {"name": "weather", "description": "The weather.", "input_schema": {"type": "object"}}
    with KeywordTree(tmp_path / "memory") as tree:
        memory = memory_tools(tree, scope="user:alice")
        before = len(tree.history())
        api.script(said(tool_use("remember", {"text": "Alice likes rain."}), stop_reason="tool_use"))
        last = memory.run(client, model="claude-test", max_tokens=64, max_rounds=1,
                          messages=[{"role": "user", "content": "hi"}])
        assert last.stop_reason == "tool_use" and len(tree.history()) == before
        api.script(said(tool_use("remember", {"text": "Alice likes snow."}, "toolu_a"),
                        tool_use("weather", {}, "toolu_b"), stop_reason="tool_use"))
        mixed = memory.run(client, model="claude-test", max_tokens=64, tools=[weather],
                           messages=[{"role": "user", "content": "hi"}])
        assert len(tree.history()) == before
        answered = memory.results(mixed)  # the caller answers ours; weather is its own
        assert [block["tool_use_id"] for block in answered] == ["toolu_a"] and len(tree.history()) == before + 1
