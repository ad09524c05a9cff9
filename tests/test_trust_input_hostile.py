"""Errors that were not KwtreeErrors (issue 25, B21): the four cases a fuzz run found, each
through the paths that took such a value, and their general causes — an int too large for a float
wherever a number is taken, a lone surrogate in any string (ids too), a value nested 5,000
deep wherever an argument is walked or shown. Each call raises a KwtreeError subclass naming
the argument and writes nothing. (tests/test_trust_input_fuzz.py draws such values for every
parameter of every public call.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import log_bytes, snapshot

import kwtree
from kwtree import InvalidInputError, KeywordTree, Memory, RecallWeights

HUGE = 10**400  # beyond the float range: float() and math.isfinite raise OverflowError on it
DEPTH = 5_000  # deeper than Python's recursion limit: repr() or a recursive walk raises RecursionError


def nested(kind: type) -> Any:
    value: Any = "leaf"
    for _ in range(DEPTH):
        value = {"a": value} if kind is dict else [value]
    return value


def not_nested(kind: type) -> Any:
    """A mem0 filter of NOT around NOT ... ``DEPTH`` deep (as a dict, or a one-filter list)."""
    value: Any = {"category": "x"}
    for _ in range(DEPTH):
        value = {"NOT": value if kind is dict else [value]}
    return value


@pytest.fixture
def memory(tmp_path: Path) -> Any:
    with Memory(tmp_path / "memory", durability="none", worker=False) as mem:
        added = mem.add("I love green tea.", user_id="alice", infer=False)
        yield mem, added["results"][0]["id"], added["op_ids"][0]


def assert_refused(tree: KeywordTree, call: Callable[[], object], *named: str) -> InvalidInputError:
    """``call`` raises InvalidInputError naming each of ``named``, and the log and every public
    read are as they were."""
    before_log, before = log_bytes(tree.data_dir), snapshot(tree)
    with pytest.raises(InvalidInputError) as raised:
        call()
    for name in named:
        assert name in str(raised.value), str(raised.value)
    assert log_bytes(tree.data_dir) == before_log and snapshot(tree) == before
    return raised.value


# --- the four cases of the issue -----------------------------------------------------------------


def test_memory_undo_of_a_number_names_op_id(memory: Any) -> None:
    mem, _, _ = memory
    for value in (5, HUGE, None, 2.5, {"op": 1}):
        assert_refused(mem.tree, lambda value=value: mem.undo(value), "op_id")


def test_memory_undo_of_a_list_checks_every_id_before_undoing_any(memory: Any) -> None:
    mem, memory_id, op_id = memory
    assert_refused(mem.tree, lambda: mem.undo([op_id, 5]), "op_id[1]")
    assert mem.get(memory_id) is not None  # the first was not undone either


def test_memory_undo_of_a_list_that_meets_a_conflict_undoes_none_of_it(memory: Any) -> None:
    mem, memory_id, first = memory
    second = mem.add("I walk the dog at seven.", user_id="alice", infer=False)
    mem.update(memory_id, "I love green tea with honey.")  # a later write to what `first` wrote
    before = log_bytes(mem.tree.data_dir), snapshot(mem.tree)
    with pytest.raises(kwtree.UndoConflictError):
        mem.undo([first, second["op_ids"][0]])  # the newer one alone would undo cleanly
    assert (log_bytes(mem.tree.data_dir), snapshot(mem.tree)) == before
    assert mem.get(second["results"][0]["id"]) is not None


@pytest.mark.parametrize("as_of", [HUGE, -HUGE, float("nan")], ids=["huge", "-huge", "nan"])
def test_as_of_beyond_the_float_range_names_as_of(memory: Any, as_of: object) -> None:
    mem, _, _ = memory
    with pytest.raises(InvalidInputError, match="as_of"):
        KeywordTree(mem.tree.data_dir, as_of=as_of)
    assert_refused(mem.tree, lambda: mem.as_of(as_of), "as_of")


@pytest.mark.parametrize("entity_id", ["\ud800", "ab\udfffc"])
def test_history_of_a_lone_surrogate_names_entity_id(memory: Any, entity_id: str) -> None:
    mem, _, _ = memory
    assert_refused(mem.tree, lambda: mem.tree.history(entity_id), "entity_id", "lone surrogate")
    assert_refused(mem.tree, lambda: mem.history(entity_id), "memory_id", "lone surrogate")


@pytest.mark.parametrize("kind", [dict, list])
def test_a_value_nested_5000_deep_is_refused_naming_the_argument(memory: Any, kind: type) -> None:
    mem, memory_id, _ = memory
    tree, deep = mem.tree, nested(kind)
    keyword = mem.tree.get_keywords_of_info(memory_id)[0][0].id
    assert_refused(tree, lambda: tree.undo(deep), "op_id")
    assert_refused(tree, lambda: mem.undo(deep), "op_id")
    assert_refused(tree, lambda: mem.as_of(deep), "as_of")
    with pytest.raises(InvalidInputError, match="as_of"):
        KeywordTree(tree.data_dir, as_of=deep)
    for call, named in [
        (lambda: tree.relate(keyword, "root", deep), "type"),
        (lambda: tree.link_info(memory_id, "root", relation=deep), "relation"),
        (lambda: tree.get_infos_of_keyword(keyword, relation=deep), "relation"),
        (lambda: tree.recall("tea", relation=deep), "relation"),
        (lambda: tree.delete_keyword(keyword, cascade=deep), "cascade"),
        (lambda: tree.undo(mem.tree.last_op_id, force=deep), "force"),  # type: ignore[arg-type]
        (lambda: tree.apply_reorganize_plan({"steps": [{"op": deep}]}), "op"),
        (lambda: tree.batch_create_keywords([{"name": "x", "parent_ref": deep}]), "parent_ref"),
        (lambda: tree.batch_create_keywords([{"name": "x", "ref": deep}]), "ref"),
        (lambda: mem.get_all(user_id="alice", filters={"k": deep}), "filters"),
        (lambda: mem.search("tea", user_id="alice", filters={"k": {"in": [deep]}}), "filters"),
        (lambda: mem.get_all(user_id="alice", filters=not_nested(kind)), "filters"),
    ]:
        assert_refused(tree, call, named)


# --- the general causes ----------------------------------------------------------------------------


@pytest.mark.parametrize("huge", [HUGE, -HUGE], ids=["huge", "-huge"])
def test_an_int_beyond_the_float_range_is_refused_wherever_a_number_is_taken(memory: Any, huge: int) -> None:
    mem, memory_id, _ = memory
    tree = mem.tree
    keyword = tree.get_keywords_of_info(memory_id)[0][0].id
    for call, named in [
        (lambda: tree.relate(keyword, "root", weight=huge), "weight"),
        (lambda: tree.recall("tea", min_score=huge), "min_score"),
        (lambda: tree.recall("tea", since=huge), "since"),
        (lambda: tree.recall("tea", until=huge), "until"),
        (lambda: tree.context("tea", min_score=huge), "min_score"),
        (lambda: tree.wait_indexed(timeout=huge), "timeout"),
        (lambda: tree.history(limit=huge), "limit"),
        (lambda: tree.get_infos_of_keyword(keyword, size=huge), "size"),
        (lambda: mem.search("tea", user_id="alice", limit=huge), "limit"),
        (lambda: mem.search("tea", user_id="alice", threshold=huge), "threshold"),
        (lambda: mem.add([{"role": "user", "content": "I like jazz", "ts": huge}], user_id="alice"), "ts"),
    ]:
        assert_refused(tree, call, named)
    with pytest.raises(InvalidInputError, match="lock_timeout"):
        KeywordTree(tree.data_dir, lock_timeout=huge)
    with pytest.raises(InvalidInputError, match="lock_timeout"):
        kwtree.repair_directory(tree.data_dir, lock_timeout=huge)
    with pytest.raises(InvalidInputError, match=r"RecallWeights\.bm25"):
        RecallWeights(bm25=huge)


def test_a_lone_surrogate_in_any_id_is_refused_naming_it(memory: Any) -> None:
    mem, memory_id, _ = memory
    tree = mem.tree
    bad = "ab\ud800"
    for call, named in [
        (lambda: tree.get_keyword(bad), "keyword_id"),
        (lambda: tree.get_info(bad), "info_id"),
        (lambda: tree.link_info(memory_id, bad), "keyword_id"),
        (lambda: tree.forget(bad), "entity_id"),
        (lambda: mem.get(bad), "memory_id"),
        (lambda: mem.update(bad, "text"), "memory_id"),
        (lambda: mem.delete(bad), "memory_id"),
        (lambda: mem.search("tea", user_id=bad), "user_id"),
        (lambda: mem.get_all(user_id="alice", filters={"k": bad}), "filters"),
    ]:
        error = assert_refused(tree, call, named)
        assert isinstance(error, kwtree.KwtreeError)
