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
        assert ', session] "chat-1"' in tree.bootstrap("user:alice")  # still the last real session
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


# --- defects a review found, each reproduced before its fix --------------------------------------


def test_a_scoped_show_of_a_keyword_inside_the_scope_shows_it(two_scopes) -> None:
    tree, box, ids = two_scopes
    alice = ToolBox(tree, scope="user:alice")
    assert alice.run("show", {"id": ids["alice"]})["keyword"]["name"] == "Notes"
    assert box.run("show", {"id": ids["alice"], "scope": "user:alice"})["keyword"]["id"] == ids["alice"]
    assert alice.call("show", {"id": ids["bob"]}).text.startswith("NotFoundError: id: no keyword or memory")
    assert box.call("show", {"id": "f" * 32}).text == f"NotFoundError: id: no keyword or memory {'f' * 32}"


def test_a_pinned_undo_never_reaches_what_lies_outside_the_scope_now(two_scopes) -> None:
    tree, box, ids = two_scopes
    alice, bob = ToolBox(tree, scope="user:alice"), ToolBox(tree, scope="user:bob")
    project = alice.run("create_keyword", {"name": "project"})
    moved = tree.move_keyword(project["keyword"]["id"], ids["bob"])  # someone moves it to bob
    moved_op = tree.history(limit=1)[0].op_id
    bob.run("create_info", {"content": "Bob's bank PIN is 4321.", "keyword_ids": [moved.id]})
    before = log_bytes(tree.data_dir)
    for op_id, force in ((moved_op, False), (project["op_id"], True)):  # pull it back in; delete it from bob
        reply = alice.call("undo", {"op_id": op_id, "force": force})
        assert reply.is_error and reply.text.startswith("NotFoundError: op_id: "), reply.text
    diary = bob.run("create_keyword", {"name": "diary"})
    tree.move_keyword(diary["keyword"]["id"], ids["alice"])  # bob's keyword moved into alice's scope
    pushed = tree.history(limit=1)[0].op_id
    alice.run("create_info", {"content": "Alice's diary entry.", "keyword_ids": [diary["keyword"]["id"]]})
    before = log_bytes(tree.data_dir)
    assert alice.call("undo", {"op_id": pushed}).is_error  # would push alice's entry out to bob
    assert log_bytes(tree.data_dir) == before
    own = alice.run("remember", {"text": "Alice likes rain."})
    assert alice.run("undo", {"op_id": own["op_id"]})["op_id"]  # an operation wholly hers: undone


def test_a_pinned_forget_of_a_memory_filed_in_another_scope_too_is_refused(two_scopes) -> None:
    tree, box, ids = two_scopes
    box.run("link_info", {"info_id": ids["bob_info"], "keyword_id": ids["alice"]})
    alice = ToolBox(tree, scope="user:alice")
    before = log_bytes(tree.data_dir)
    assert alice.call("forget", {"id": ids["bob_info"]}).text.startswith("NotFoundError: id: no keyword or memory")
    assert log_bytes(tree.data_dir) == before
    assert alice.run("forget", {"id": ids["alice_info"]})["memories_erased"] == 1


def test_every_reply_error_and_resource_stays_within_the_budget(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "memory", durability="none") as tree:
        keyword = tree.create_keyword("n", "root")
        info = tree.create_info("hi", keyword_ids=[keyword.id],
                                metadata={f"{n}" + "k" * 200: "v" * 2000 for n in range(6)})
        box = ToolBox(tree, max_result_chars=3000)
        assert len(box.call("show", {"id": info.id}).text) <= 3000
        scopes = ["/".join(f"k{i}:" + "n" * 190 for i in range(8))] * 64
        error = ToolBox(tree, max_result_chars=1000).call("show", {"id": "0" * 32, "scope": scopes})
        assert error.is_error and len(error.text) <= 1000
        deep = box.call("create_info", {"content": "x", "keyword_ids": "[" * 100_000})
        assert deep.is_error and deep.text.startswith("InvalidInputError: create_info: keyword_ids must be")


def test_a_long_text_keeps_most_of_the_budget(tmp_path: Path) -> None:
    cut = fit({"text": "word " * 5000}, 20_000)
    assert len(cut["text"]) >= 18_000 and len(dumps(cut)) <= 20_000
    listed = fit({"memories": [{"text": "word " * 200} for _ in range(100)]}, 20_000)
    assert 10 <= len(listed["memories"]) < 100 and "memories: " in listed["truncated"]


def test_tree_depth_counts_the_levels_below_the_start(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "memory", durability="none") as tree:
        parent = "root"
        for name in "abcde":
            parent = tree.create_keyword(name, parent).id
        box = ToolBox(tree)
        names = [line.strip().split(" ")[1] for line in box.run("tree", {"depth": 1})["text"].splitlines()[1:]]
        assert names == ['"a"']  # a name is stored text: quoted
        assert len(box.run("tree", {"depth": 3})["text"].splitlines()) == 1 + 3


def test_remember_after_forget_stores_the_fact_again_and_refuses_white_space(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "memory", durability="none") as tree:
        alice = ToolBox(tree, scope="user:alice")
        first = alice.run("remember", {"text": "Alice owns a cat."})
        alice.run("forget", {"id": first["memory_ids"][0]})
        again = alice.run("remember", {"text": "Alice owns a cat."})
        assert again["op_id"] and not again["already_stored"]
        assert [info.content for info in tree.memories("user:alice")] == ["Alice owns a cat."]
        before = log_bytes(tree.data_dir)
        assert alice.call("remember", {"text": "   "}).text.startswith("InvalidInputError: remember: text")
        assert log_bytes(tree.data_dir) == before


def test_nested_arguments_are_checked_and_null_means_omitted(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "memory", durability="none") as tree:
        box = ToolBox(tree)
        bogus = box.call("commit_session", {"session_id": "s", "messages": [{"role": "bogus", "content": "hi"}]})
        assert bogus.text == ("InvalidInputError: commit_session: messages[0].role must be one of user, assistant, "
                              "system, got 'bogus'")
        assert not box.call("recall", {"query": "tea", "k": None, "scope": None}).is_error
        assert "required" in box.call("recall", {"query": None}).text


def test_a_pinned_undo_judges_what_the_undo_itself_would_write(two_scopes) -> None:
    """Second review: undoing a create also retires the new keyword's relations (one to bob's
    keyword, hidden from alice), and undoing an undo restores links to a keyword it brings back."""
    tree, box, ids = two_scopes
    alice = ToolBox(tree, scope="user:alice")
    made = alice.run("create_keyword", {"name": "K"})
    tree.relate(ids["bob"], made["keyword"]["id"], "depends_on", 0.9, "bob's reason")
    before = log_bytes(tree.data_dir)
    assert alice.call("undo", {"op_id": made["op_id"]}).text.startswith("NotFoundError: op_id: undoing")
    assert log_bytes(tree.data_dir) == before and tree.get_relations(ids["bob"])
    own = alice.run("create_keyword", {"name": "J"})
    alice.run("create_info", {"content": "alice only", "keyword_ids": [own["keyword"]["id"]]})
    undone = alice.run("undo", {"op_id": own["op_id"]})
    assert alice.run("undo", {"op_id": undone["op_id"]})["op_id"]  # her own undo, undone: J and its link back
    assert tree.get_keyword(own["keyword"]["id"]).name == "J"


def test_second_review_surrogates_dates_big_dicts_and_outside_names(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "memory", durability="none") as tree:
        alice, carol = ToolBox(tree, scope="user:alice"), ToolBox(tree, scope="user:carol")
        for name, arguments in (("remember", {"text": "tea \ud800"}), ("forget", {"scope": "user:alice/run:\ud800"})):
            reply = alice.call(name, arguments)
            assert reply.is_error and "lone surrogate U+D800" in reply.text
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            tree.forget(scope="user:\ud800")
        notes = alice.run("create_keyword", {"name": "Notes"})["keyword"]["id"]
        dated = tree.create_info("a dated memory", keyword_ids=[notes], metadata={"happened_at": 253402300800.0})
        assert alice.run("show", {"id": dated.id})["memory"]["happened_at"] == 253402300800.0
        assert alice.run("recall", {"query": "a dated memory", "min_score": 0})["memories"]
        rich = tree.create_info("a memory with rich metadata", keyword_ids=[notes],
                                metadata={f"field_{n}": n for n in range(3000)})
        shown = alice.call("show", {"id": rich.id})
        assert json.loads(shown.text)["memory"]["text"] == "a memory with rich metadata"
        assert "memory.metadata: " in json.loads(shown.text)["truncated"] and len(shown.text) <= 20_000
        plain = tree.create_keyword("user:carol", "root")  # a plain keyword, not carol's scope
        refused = carol.call("create_keyword", {"name": "Notes"})
        assert refused.text.startswith("DuplicateKeywordError: a keyword of that name") and plain.id not in refused.text
        outside = tree.create_keyword("Elsewhere", "root")
        assert alice.call("show", {"id": outside.id}).text == alice.call("show", {"id": "e" * 32}).text.replace(
            "e" * 32, outside.id)  # an outside keyword reads as an unknown id


def test_the_note_takes_only_the_room_it_needs() -> None:
    cut = fit({"text": "word " * 5000}, MIN_MAX_CHARS)
    assert len(dumps(cut)) <= MIN_MAX_CHARS and len(cut["text"]) >= 700
