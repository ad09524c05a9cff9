"""The ToolBox every door shares, in-process: argument checks, scopes on each write, the
bounded result (a property), remember, and refusals that write nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import log_bytes
from hypothesis import given
from hypothesis import strategies as st

from kwtree import InvalidInputError, KeywordTree
from kwtree.integrations.bounded import MIN_MAX_CHARS, dumps, fit
from kwtree.integrations.catalog import TOOLS, check_arguments, definitions, spec_of
from kwtree.integrations.toolbox import ToolBox

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=3000),
    lambda inner: st.lists(inner, max_size=60) | st.dictionaries(st.text(max_size=12), inner, max_size=8),
    max_leaves=200,
)


@given(st.dictionaries(st.text(max_size=12), JSON, max_size=6), st.integers(MIN_MAX_CHARS, 6000))
def test_a_fitted_result_is_never_over_the_budget_and_says_when_it_was_cut(result: dict[str, Any],
                                                                         budget: int) -> None:
    fitted = fit(result, budget)
    assert len(dumps(fitted)) <= budget
    if len(dumps(result)) <= budget:
        assert fitted is result
    else:
        assert "truncated" in fitted


def test_arguments_are_held_to_the_schema() -> None:
    recall, create_info = spec_of("recall"), spec_of("create_info")
    assert check_arguments(recall, {"query": "tea", "k": "5"}) == {"query": "tea", "k": 5}  # a number sent as text
    assert check_arguments(create_info, {"content": "x", "keyword_ids": '["a"]'})["keyword_ids"] == ["a"]
    for arguments, words in (({"query": "tea", "k": True}, "k must be an integer"),
                             ({"query": "tea", "k": 101}, "between 1 and 100"),
                             ({"query": "tea", "scope": [1]}, "scope must be a string or an array of strings"),
                             ({"query": 3}, "query must be a string"),
                             ("tea", "must be an object")):
        with pytest.raises(InvalidInputError, match=words):
            check_arguments(recall, arguments)
    with pytest.raises(InvalidInputError, match="relation must be one of primary"):
        check_arguments(spec_of("link_info"), {"info_id": "a", "keyword_id": "b", "relation": "best"})
    read_only = {tool["name"] for tool in definitions(read_only=True)}
    assert read_only == {spec.name for spec in TOOLS if not spec.writes}
    pinned = {tool["name"]: tool for tool in definitions(pinned="user:alice")}
    assert "pinned to 'user:alice'" in pinned["recall"]["input_schema"]["properties"]["scope"]["description"]


@pytest.fixture
def two_scopes(tmp_path: Path) -> tuple[KeywordTree, ToolBox, dict[str, str]]:
    tree = KeywordTree(tmp_path / "memory", durability="none")
    box = ToolBox(tree)
    ids: dict[str, str] = {}
    for who in ("alice", "bob"):
        made = box.run("create_keyword", {"name": "Notes", "scope": f"user:{who}"})
        ids[who] = made["keyword"]["id"]
        ids[f"{who}_info"] = box.run("create_info", {"content": f"{who} keeps notes.", "keyword_ids": [ids[who]],
                                                     "scope": f"user:{who}"})["memory"]["id"]
    yield tree, box, ids
    tree.close()


def test_every_write_named_with_a_scope_stays_inside_it(two_scopes) -> None:
    tree, box, ids = two_scopes
    before = log_bytes(tree.data_dir)
    alice = {"scope": "user:alice"}
    for name, arguments in (
            ("create_keyword", {"name": "Stolen", "parent_id": ids["bob"], **alice}),
            ("create_info", {"content": "x", "keyword_ids": [ids["bob"]], **alice}),
            ("link_info", {"info_id": ids["bob_info"], "keyword_id": ids["alice"], **alice}),
            ("link_info", {"info_id": ids["alice_info"], "keyword_id": ids["bob"], **alice}),
            ("relate", {"from_id": ids["alice"], "to_id": ids["bob"], **alice}),
            ("undo", {"op_id": tree.history(entity_id=ids["bob_info"])[0].op_id, **alice})):
        reply = box.call(name, arguments)
        assert reply.is_error and reply.text.startswith("NotFoundError:"), (name, reply.text)
    refused = box.call("create_info", {"content": "x", "auto_link": True, "keyword_ids": [ids["alice"]], **alice})
    assert refused.is_error and "auto_link" in refused.text
    assert log_bytes(tree.data_dir) == before
    linked = box.run("link_info", {"info_id": ids["alice_info"], "keyword_id": ids["alice"], "relation": "example",
                                   **alice})
    assert linked["relation"] == "example"


def test_a_memory_filed_in_two_scopes_shows_each_scope_only_its_own_keyword(two_scopes) -> None:
    tree, box, ids = two_scopes
    box.run("link_info", {"info_id": ids["alice_info"], "keyword_id": ids["bob"]})
    alice = ToolBox(tree, scope="user:alice")
    shown = alice.run("show", {"id": ids["alice_info"]})
    assert [keyword["id"] for keyword in shown["filed_under"]] == [ids["alice"]]
    assert [keyword["id"] for keyword in box.run("show", {"id": ids["alice_info"]})["filed_under"]] == [
        ids["alice"], ids["bob"]]
    assert alice.call("show", {"id": ids["bob"]}).is_error
    nested = alice.call("forget", {"scope": "user:alice/run:1"})  # nested: allowed, but there is nothing to forget
    assert nested.text.startswith("NotFoundError: scope: no scope 'user:alice/run:1'")


def test_remember_stores_a_fact_once_as_one_operation_without_a_session_summary(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "memory", durability="none") as tree:
        box = ToolBox(tree, scope="user:alice")
        tree.commit_session([{"role": "user", "content": "Hi, I'm Alice. I love green tea."}], session_id="chat-1",
                            scope="user:alice")
        before = len(tree.history())
        first = box.run("remember", {"text": "Alice's locker code is 1234."})
        again = box.run("remember", {"text": "Alice's locker code is 1234."})
        assert len(tree.history()) == before + 1 and again["op_id"] is None and again["already_stored"]
        assert first["memory_ids"] == again["memory_ids"] and len(first["memory_ids"]) == 1
        summaries = [change.after for change in tree.history()[-1].changes
                     if getattr(change.after, "metadata", {}).get("kind") == "session_summary"]
        assert summaries == []
        assert "Session chat-1" in tree.bootstrap("user:alice")  # still the last real session
        texts = [memory["text"] for memory in box.run("recall", {"query": "locker code", "min_score": 0})["memories"]]
        assert texts[0] == "Alice's locker code is 1234." and not any(t.startswith("Session remember") for t in texts)


def test_a_refused_call_names_the_argument_and_writes_nothing(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "memory", durability="none") as tree:
        box = ToolBox(tree)
        box.run("remember", {"text": "seed"})
        before = log_bytes(tree.data_dir)
        for spec in TOOLS:
            reply = box.call(spec.name, {"no_such_argument": 1})
            assert reply.is_error and "unknown argument 'no_such_argument'" in reply.text and reply.data is None
        assert "scope" in box.call("remember", {"text": "x", "scope": "alice"}).text
        assert "exactly one" in box.call("forget", {}).text
        assert log_bytes(tree.data_dir) == before
        with pytest.raises(InvalidInputError, match="max_result_chars"):
            ToolBox(tree, max_result_chars=10)
        reply = ToolBox(tree, max_result_chars=1000).call("tree", {})
        assert not reply.is_error and json.dumps(reply.data)
