"""``kwtree.Memory``: mem0's calls and result shapes over a KeywordTree — every method, scoping
by ids (alice never sees bob), infer=False, filters, threshold, history after an update,
delete_all erasing, undo, as_of read-only, and bad input naming the field with nothing
written."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import log_bytes

from kwtree import InvalidInputError, KeywordTree, LimitExceededError, Limits, Memory, NotFoundError, ReadOnlyError

CHAT = [{"role": "user", "content": "Hi, my name is Alice and I live in Paris. I love green tea."},
        {"role": "assistant", "content": "Nice to meet you! Shall I note the marmalade order?"}]
ITEM_KEYS = {"id", "memory", "hash", "metadata", "created_at", "updated_at"}


@pytest.fixture
def mem(tmp_path: Path):
    with Memory(tmp_path / "memory", durability="none") as memory:
        yield memory


def test_add_returns_mem0_events_and_every_read_returns_mem0_items(mem: Memory) -> None:
    added = mem.add(CHAT, user_id="alice")
    assert set(added) == {"results", "op_ids"} and len(added["op_ids"]) == 1
    assert added["results"] and all(set(r) == {"id", "memory", "event"} for r in added["results"])
    assert {r["event"] for r in added["results"]} == {"ADD"}
    assert "I love green tea." in [r["memory"] for r in added["results"]]
    hits = mem.search("green tea", user_id="alice")["results"]
    top = hits[0]
    assert top["memory"] == "I love green tea."
    assert set(top) == ITEM_KEYS | {"score", "relevance", "user_id"}
    assert top["user_id"] == "alice" and top["metadata"]["category"] == "preferences"
    assert top["created_at"].endswith("+00:00") and top["updated_at"] is None
    assert len(top["hash"]) == 32
    got = mem.get(top["id"])
    assert got is not None and set(got) == ITEM_KEYS | {"user_id"} and got["memory"] == top["memory"]
    listed = mem.get_all(user_id="alice")["results"]
    assert top["id"] in [item["id"] for item in listed]
    assert mem.get_all(user_id="alice", limit=1)["results"] == listed[:1]
    assert mem.get("0" * 32) is None


def test_adding_a_held_fact_says_none_and_the_same_messages_again_write_nothing(mem: Memory) -> None:
    mem.add(CHAT, user_id="alice")
    again = mem.add("I love green tea.", user_id="alice")
    assert [r["event"] for r in again["results"]] == ["NONE"]
    frozen = log_bytes(mem.tree.data_dir)
    assert mem.add(CHAT, user_id="alice") == {"results": [], "op_ids": []}
    assert log_bytes(mem.tree.data_dir) == frozen


def test_alice_never_sees_bob(mem: Memory) -> None:
    mem.add("I love green tea.", user_id="alice")
    mem.add("I love green tea.", user_id="bob")
    bob_ids = {item["id"] for item in mem.get_all(user_id="bob")["results"]}
    alice = mem.get_all(user_id="alice")["results"]
    assert bob_ids and alice and not bob_ids & {item["id"] for item in alice}
    assert not bob_ids & {item["id"] for item in mem.search("green tea", user_id="alice")["results"]}
    assert mem.search("green tea", user_id="alice", filters={"user_id": "bob"})["results"] == []
    assert mem.search("green tea", user_id="carol")["results"] == []
    assert {item["user_id"] for item in alice} == {"alice"}


def test_add_s_ids_name_one_scope_path_and_a_read_filters_by_the_ids_it_is_given(mem: Memory) -> None:
    mem.add("I love green tea.", user_id="alice", agent_id="coder", run_id="42")
    mem.add("I love black coffee.", run_id="42")
    (item,) = mem.get_all(user_id="alice")["results"]
    assert mem.tree.memory_scope(item["id"]) == "user:alice/agent:coder/run:42"
    assert (item["user_id"], item["agent_id"], item["run_id"]) == ("alice", "coder", "42")
    assert mem.get_all(user_id="alice", agent_id="coder")["results"] == [item]
    assert mem.get_all(agent_id="coder")["results"] == [item]  # as mem0: every memory of agent coder
    run_42 = mem.get_all(run_id="42")["results"]  # every memory of run 42, whoever's
    assert [found["memory"] for found in run_42] == ["I love green tea.", "I love black coffee."]
    assert "user_id" not in run_42[1]


def test_archived_turns_and_summaries_are_not_memories(mem: Memory) -> None:
    mem.add(CHAT, user_id="alice")
    turn = next(hit.info for hit in mem.tree.recall("marmalade order", scope="user:alice")
                if "marmalade" in hit.info.content and "turn" in hit.info.metadata)
    assert turn.metadata["role"] == "assistant"
    assert mem.search("marmalade order", user_id="alice")["results"] == []
    contents = [item["memory"] for item in mem.get_all(user_id="alice")["results"]]
    assert contents and all("marmalade" not in text and not text.startswith("Session ") for text in contents)
    assert mem.get(turn.id) is None
    with pytest.raises(NotFoundError, match="no memory"):
        mem.update(turn.id, "changed")
    assert mem.tree.get_info(turn.id).content == turn.content


def test_infer_false_stores_each_message_as_it_was(mem: Memory) -> None:
    messages = [{"role": "system", "content": "Be brief."}, *CHAT]
    added = mem.add(messages, user_id="alice", infer=False)
    assert [r["memory"] for r in added["results"]] == [m["content"] for m in CHAT]
    assert {r["event"] for r in added["results"]} == {"ADD"}
    listed = mem.get_all(user_id="alice")["results"]
    assert sorted(item["memory"] for item in listed) == sorted(m["content"] for m in CHAT)
    assert {item["metadata"]["category"] for item in listed} == {"memories"}
    assert mem.add("a plain note", user_id="alice", infer=False)["results"][0]["memory"] == "a plain note"


def test_metadata_goes_on_every_memory_and_filters_follow_mem0s_grammar(mem: Memory) -> None:
    mem.add("I love green tea.", user_id="alice", metadata={"source": "chat", "priority": 3}, infer=False)
    mem.add("I love black coffee.", user_id="alice", metadata={"source": "Email", "priority": 7}, infer=False)

    def found(filters: object) -> list[str]:
        return sorted(i["memory"] for i in mem.get_all(user_id="alice", filters=filters)["results"])  # type: ignore[arg-type]

    tea, coffee = ["I love green tea."], ["I love black coffee."]
    assert found({"source": "chat"}) == tea
    assert found({"source": {"ne": "chat"}}) == coffee
    assert found({"priority": {"gte": 5}}) == coffee
    assert found({"priority": {"gt": 1, "lt": 5}}) == tea
    assert found({"source": {"in": ["chat", "sms"]}}) == tea
    assert found({"source": {"nin": ["chat"]}}) == coffee
    assert found({"source": {"contains": "mail"}}) == coffee
    assert found({"source": {"icontains": "EMAIL"}}) == coffee
    assert found({"source": "*"}) == sorted(coffee + tea)
    assert found({"missing": "*"}) == []
    assert found({"OR": [{"source": "chat"}, {"priority": 7}]}) == sorted(coffee + tea)
    assert found({"AND": [{"source": "chat"}, {"priority": 7}]}) == []
    assert found({"NOT": [{"source": "chat"}]}) == coffee
    assert found({"category": "memories", "user_id": "alice"}) == sorted(coffee + tea)
    searched = mem.search("green tea", user_id="alice", filters={"priority": {"lte": 3}})["results"]
    assert [item["memory"] for item in searched] == tea and searched[0]["metadata"]["source"] == "chat"
    for bad, named in (({"priority": {"between": [1, 2]}}, "filters['priority'] uses the operator 'between'"),
                       ({"priority": {"gt": "5"}}, "filters['priority']['gt'] must be a number"),
                       ({"OR": {"source": "chat"}}, "filters['OR'] must be a non-empty list"),
                       ({"source": {"in": "chat"}}, "filters['source']['in'] must be a list"),
                       ("chat", "filters must be a dict")):
        with pytest.raises(InvalidInputError) as caught:
            mem.search("tea", user_id="alice", filters=bad)  # type: ignore[arg-type]
        assert named in str(caught.value)


def test_threshold_is_the_relevance_floor_of_every_result(mem: Memory) -> None:
    mem.add("I love green tea.", user_id="alice")
    mem.add("I love black coffee.", user_id="alice")
    loose = mem.search("love green tea", user_id="alice", threshold=0.0)["results"]
    strict = mem.search("love green tea", user_id="alice", threshold=0.9)["results"]
    assert [item["memory"] for item in loose] == ["I love green tea.", "I love black coffee."]
    assert loose[1]["relevance"] < 0.9 <= loose[0]["relevance"]
    assert [item["memory"] for item in strict] == ["I love green tea."]
    with pytest.raises(InvalidInputError, match="threshold"):
        mem.search("tea", user_id="alice", threshold=1.5)


def test_update_delete_and_history_in_mem0s_shape_then_undo(mem: Memory) -> None:
    (added,) = mem.add("I prefer window seats", user_id="alice", infer=False)["results"]
    memory_id = added["id"]
    assert mem.update(memory_id, "I prefer aisle seats") == {"message": "Memory updated successfully!"}
    assert mem.get(memory_id)["memory"] == "I prefer aisle seats"  # type: ignore[index]
    assert mem.get(memory_id)["updated_at"] is not None  # type: ignore[index]
    assert mem.delete(memory_id) == {"message": "Memory deleted successfully!"}
    assert mem.get(memory_id) is None
    history = mem.history(memory_id)
    assert [(h["event"], h["old_memory"], h["new_memory"], h["is_deleted"]) for h in history] == [
        ("ADD", None, "I prefer window seats", False),
        ("UPDATE", "I prefer window seats", "I prefer aisle seats", False),
        ("DELETE", "I prefer aisle seats", None, True)]
    assert set(history[0]) == {"id", "memory_id", "old_memory", "new_memory", "event", "created_at", "updated_at",
                               "is_deleted", "actor_id", "role"}
    assert history[0]["updated_at"] is None and history[1]["updated_at"] is not None
    assert {h["memory_id"] for h in history} == {memory_id}
    (undone,) = mem.undo(history[-1]["id"])  # the delete, back
    assert undone.kind == "undo" and mem.get(memory_id)["memory"] == "I prefer aisle seats"  # type: ignore[index]
    assert mem.history("0" * 32) == []


def test_undo_of_an_add_takes_back_every_operation_it_wrote(mem: Memory) -> None:
    added = mem.add(CHAT, user_id="alice", metadata={"source": "chat"})
    assert len(added["op_ids"]) == 1  # the memories and their metadata: one operation
    assert all(mem.get(r["id"])["metadata"]["source"] == "chat" for r in added["results"])  # type: ignore[index]
    mem.undo(added["op_ids"])
    assert mem.get_all(user_id="alice")["results"] == []
    with pytest.raises(InvalidInputError, match="op_id"):
        mem.undo([])


def test_as_of_is_a_read_only_view_of_the_past(mem: Memory) -> None:
    first = mem.add("I love green tea.", user_id="alice", infer=False)
    mem.add("I love black coffee.", user_id="alice", infer=False)
    with mem.as_of(first["op_ids"][-1]) as then:
        assert [i["memory"] for i in then.get_all(user_id="alice")["results"]] == ["I love green tea."]
        with pytest.raises(ReadOnlyError):
            then.add("I love cocoa.", user_id="alice")
    assert len(mem.get_all(user_id="alice")["results"]) == 2


@pytest.mark.parametrize(("call", "named"), [
    (lambda m: m.add("I love tea."), "at least one of user_id, agent_id or run_id"),
    (lambda m: m.add("I love tea.", user_id="a/b"), "user_id must be a non-empty id"),
    (lambda m: m.add("I love tea.", user_id=" alice"), "user_id must be a non-empty id"),
    (lambda m: m.add("I love tea.", run_id=42), "run_id must be a non-empty id"),
    (lambda m: m.add("I love tea.", user_id="alice", metadata=["x"]), "metadata must be a dict"),
    (lambda m: m.add("I love tea.", user_id="alice", infer="yes"), "infer must be True or False"),
    (lambda m: m.add([{"role": "user", "content": None}], user_id="alice"), "messages[0].content"),
    (lambda m: m.add("  ", user_id="alice"), "messages"),
    (lambda m: m.search("tea"), "at least one of user_id"),
    (lambda m: m.search("tea", user_id="alice", limit=0), "limit"),
    (lambda m: m.search("", user_id="alice"), "query"),
    (lambda m: m.get_all(), "at least one of user_id"),
    (lambda m: m.get(None), "memory_id"),
    (lambda m: m.update("0" * 32, ""), "data"),
    (lambda m: m.delete_all(), "at least one of user_id"),
])
def test_bad_input_names_the_field_and_writes_nothing(mem: Memory, call, named: str) -> None:
    mem.add("I love green tea.", user_id="alice", infer=False)
    frozen = log_bytes(mem.tree.data_dir)
    with pytest.raises(InvalidInputError) as caught:
        call(mem)
    assert named in str(caught.value)
    assert log_bytes(mem.tree.data_dir) == frozen


def test_metadata_over_the_limit_takes_the_whole_add_back(tmp_path: Path) -> None:
    with Memory(tmp_path / "memory", durability="none", limits=Limits(metadata_bytes=1024)) as mem:
        frozen = log_bytes(mem.tree.data_dir)
        with pytest.raises(LimitExceededError, match="metadata"):
            mem.add("I love green tea.", user_id="alice", metadata={"note": "x" * 900})
        assert mem.get_all(user_id="alice")["results"] == []
        assert log_bytes(mem.tree.data_dir) == frozen  # one operation, refused whole: nothing written


def test_missing_memories_raise_not_found_and_write_nothing(mem: Memory) -> None:
    frozen = log_bytes(mem.tree.data_dir)
    for call in (lambda: mem.update("0" * 32, "x"), lambda: mem.delete("0" * 32), lambda: mem.forget("0" * 32)):
        with pytest.raises(NotFoundError, match="no memory"):
            call()
    assert log_bytes(mem.tree.data_dir) == frozen


def _bytes_under(directory: Path, needle: bytes) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_delete_all_erases_the_scope_and_leaves_no_byte_of_it(tmp_path: Path) -> None:
    with Memory(tmp_path / "memory", durability="none") as mem:
        mem.add([{"role": "user", "content": "I love zanzibarian quokkas."}], user_id="alice")
        mem.add("I love green tea.", user_id="bob")
        mem.tree.wait_indexed()
        assert _bytes_under(tmp_path / "memory", b"zanzibarian")
        assert mem.delete_all(user_id="alice") == {"message": "Memories deleted successfully!"}
        assert mem.get_all(user_id="alice")["results"] == []
        assert [i["memory"] for i in mem.get_all(user_id="bob")["results"]] == ["I love green tea."]
        frozen = log_bytes(mem.tree.data_dir)
        assert mem.delete_all(user_id="nobody") == {"message": "Memories deleted successfully!"}
        assert log_bytes(mem.tree.data_dir) == frozen
    assert _bytes_under(tmp_path / "memory", b"zanzibarian") == []


def test_forget_erases_one_memory(tmp_path: Path) -> None:
    with Memory(tmp_path / "memory", durability="none") as mem:
        (added,) = mem.add("I hide a quokkaberry jar.", user_id="alice", infer=False)["results"]
        mem.forget(added["id"])
        assert mem.get(added["id"]) is None
    assert _bytes_under(tmp_path / "memory", b"quokkaberry") == []


def test_memory_owns_its_tree_and_closes_it(tmp_path: Path) -> None:
    with Memory(tmp_path / "memory") as mem:
        assert isinstance(mem.tree, KeywordTree) and "read-write" in repr(mem)
    assert "closed" in repr(mem)
    mem.close()  # harmless twice
