"""Bad input and resource limits (issue 13, items 7 and 9): every public call raises a
KwtreeError naming the field, a failed call leaves the log and the state as they were, and
sizes are bounded by ``Limits``. (tests/test_trust_input_fuzz.py throws hostile values at
every public call; tests/test_trust_input_embedding.py bounds the cost of long texts.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import log_bytes, snapshot, tmpfs

import kwtree
from kwtree import (
    InvalidInputError,
    KeywordTree,
    KwtreeError,
    LimitExceededError,
    Limits,
    StorageError,
)
from kwtree.agent.clients import StubLLMClient
from kwtree.validate import MAX_METADATA_DEPTH

DEFAULT = Limits()


def nested(depth: int, kind: type = dict) -> Any:
    """A value with ``depth`` dicts (or lists) around a string."""
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value} if kind is dict else [value]
    return value


@pytest.fixture
def world(tree):
    a = tree.create_keyword("Alpha", llm_auto_place=False)
    b = tree.create_keyword("Beta", llm_auto_place=False)
    info = tree.create_info("a memo", keyword_ids=[a.id])
    return {"tree": tree, "a": a.id, "b": b.id, "info": info.id}


def assert_refused(world, tree_dir, call, error, *texts):
    """``call`` raises ``error`` with every one of ``texts`` in its message, and the log and
    every public read are as they were."""
    tree = world["tree"]
    before_log, before = log_bytes(tree_dir), snapshot(tree, [world["a"], world["b"]], [world["info"]])
    with pytest.raises(error) as raised:
        call(tree, world)
    for text in texts:
        assert text in str(raised.value), f"{text!r} not in {str(raised.value)!r}"
    assert log_bytes(tree_dir) == before_log
    assert snapshot(tree, [world["a"], world["b"]], [world["info"]]) == before
    return raised.value


# --- lone surrogates -----------------------------------------------------------------------

S = "ok\ud800ok"  # what bytes decoded with errors="surrogateescape" can hold

SURROGATE_CASES = [
    ("content", lambda t, w: t.create_info(S)),
    ("source", lambda t, w: t.create_info("x", source=S)),
    ("metadata.k", lambda t, w: t.create_info("x", metadata={"k": S})),
    ("metadata.k[1]", lambda t, w: t.create_info("x", metadata={"k": [1, S]})),
    ("metadata key", lambda t, w: t.create_info("x", metadata={S: 1})),
    ("name", lambda t, w: t.create_keyword(S, llm_auto_place=False)),
    ("name", lambda t, w: t.create_keyword(S)),  # before the agent is asked anything
    ("alias", lambda t, w: t.create_keyword("x", aliases=[S], llm_auto_place=False)),
    ("alias", lambda t, w: t.add_alias(w["a"], S)),
    ("description", lambda t, w: t.create_keyword("x", description=S, llm_auto_place=False)),
    ("name", lambda t, w: t.update_keyword(w["a"], {"name": S}, version=1)),
    ("content", lambda t, w: t.update_info(w["info"], {"content": S})),
    ("type", lambda t, w: t.relate(w["a"], w["b"], type=S)),
    ("reason", lambda t, w: t.relate(w["a"], w["b"], reason=S)),
    ("created_by", lambda t, w: t.link_info(w["info"], w["b"], created_by=S)),
    ("specs[0].content", lambda t, w: t.batch_create_infos([{"content": S}])),
    ("description", lambda t, w: t.batch_create_keywords([{"name": "x", "description": S}])),
    ("query", lambda t, w: t.search(S)),
    ("query", lambda t, w: t.recall(S)),
    ("query", lambda t, w: t.context(S)),
    ("name", lambda t, w: t.find_keywords(S)),
    ("plan['request'].q", lambda t, w: t.apply_reorganize_plan(
        {"steps": [{"op": "move", "keyword_id": w["b"], "new_parent_id": w["a"]}], "request": {"q": S}})),
]


@pytest.mark.parametrize("field, call", SURROGATE_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(SURROGATE_CASES)])
def test_lone_surrogates_are_refused_naming_the_field(world, tree_dir, field, call):
    # Before: TypeError "str is not valid UTF-8: surrogates not allowed" from orjson.
    assert_refused(world, tree_dir, call, InvalidInputError, f"{field}: lone surrogate U+D800 at index 2")


def test_a_surrogate_actor_is_refused_when_opening(tree_dir):
    with pytest.raises(InvalidInputError, match="actor: lone surrogate U\\+D800"):
        KeywordTree(tree_dir, actor=S)
    assert not tree_dir.exists()


# --- deep metadata ---------------------------------------------------------------------------


def test_metadata_nested_deeper_than_the_limit_is_refused_naming_the_path(world, tree_dir):
    # Before: TypeError "Recursion limit reached" from orjson at ~255 levels, RecursionError
    # from the checker at ~1000.
    depth = MAX_METADATA_DEPTH + 1
    error = assert_refused(world, tree_dir, lambda t, w: t.create_info("x", metadata=nested(depth)),
                           InvalidInputError, f"nested deeper than {MAX_METADATA_DEPTH} levels")
    assert str(error).startswith("metadata" + ".a" * MAX_METADATA_DEPTH + ":")
    for value in (nested(300), {"x": nested(5000, list)}):
        assert_refused(world, tree_dir, lambda t, w, v=value: t.create_info("x", metadata=v),
                       InvalidInputError, "nested deeper than")
        assert_refused(world, tree_dir, lambda t, w, v=value: t.update_keyword(w["a"], {"metadata": v}, version=1),
                       InvalidInputError, "nested deeper than")


def test_metadata_nested_to_the_limit_is_stored_and_read_back(tree, tree_dir):
    value = nested(MAX_METADATA_DEPTH)
    info = tree.create_info("deep", metadata=value)
    tree.close()
    with KeywordTree(tree_dir, read_only=True) as again:
        assert dict(again.get_info(info.id).metadata) == value


def test_nested_mappings_and_tuples_are_stored_as_plain_json(tree):
    from types import MappingProxyType

    # Before: a nested MappingProxyType passed the check, then orjson refused it (TypeError).
    info = tree.create_info("x", metadata={"m": MappingProxyType({"t": (1, 2)})})
    assert dict(info.metadata) == {"m": {"t": [1, 2]}}


# --- import_json -----------------------------------------------------------------------------


@pytest.mark.parametrize("relation", [{}, [], {"primary": 1}, ["primary"]])
def test_import_json_refuses_a_dict_or_list_relation(world, tmp_path, relation):
    # Before: TypeError "unhashable type" while checking the file.
    path = Path(world["tree"].export(tmp_path / "export.json")["path"])
    doc = json.loads(path.read_text())
    doc["links"][0]["relation"] = relation
    path.write_text(json.dumps(doc))
    target = tmp_path / "imported"
    with pytest.raises(InvalidInputError, match=r"\$\.links\[0\]\.relation: relation must be"):
        KeywordTree.import_json(path, target, durability="none")
    assert not target.exists()


def test_import_json_refuses_unknown_options_and_bad_paths(world, tmp_path):
    path = world["tree"].export(tmp_path / "export.json")["path"]
    with pytest.raises(InvalidInputError, match=r"unknown option.*colour"):
        KeywordTree.import_json(path, tmp_path / "a", colour="red")
    for bad in ("a\0b", 7, None, "\ud800"):
        with pytest.raises(InvalidInputError, match="path"):
            KeywordTree.import_json(bad, tmp_path / "b")
        with pytest.raises(InvalidInputError, match="data_dir"):
            KeywordTree.import_json(path, bad)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# --- the constructor -------------------------------------------------------------------------


@pytest.mark.parametrize("data_dir", [123, None, b"bytes", "", "a\0b", "\ud800", 1.5, ["x"]])
def test_a_data_dir_that_is_not_a_path_is_refused(data_dir, tmp_path, monkeypatch):
    # Before: KeywordTree(123) raised TypeError, "a\0b" ValueError.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="data_dir"):
        KeywordTree(data_dir)
    assert list(tmp_path.iterdir()) == []


def test_a_data_dir_that_cannot_be_a_directory_is_refused(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(InvalidInputError, match=r"data_dir .* cannot be a kwtree directory"):
        KeywordTree(a_file / "under")  # NotADirectoryError before
    with pytest.raises(InvalidInputError, match="255 bytes"):
        KeywordTree(tmp_path / ("n" * 300))  # OSError ENAMETOOLONG before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.fixture
def read_only_mount(tmp_path):
    """A real read-only file system (a tmpfs mounted ro), unmounted afterwards."""
    with tmpfs(tmp_path / "ro", "size=1m,ro") as mount:
        yield mount


def test_a_data_dir_the_system_refuses_raises_a_storage_error(read_only_mount):
    # Before: a raw OSError (EROFS) from mkdir.
    with pytest.raises(StorageError, match="Read-only file system"):
        KeywordTree(read_only_mount / "tree")


def test_limits_must_be_a_limits_with_positive_integers(tmp_path):
    with pytest.raises(InvalidInputError, match=r"limits must be a kwtree\.Limits"):
        KeywordTree(tmp_path / "t", limits={"content_bytes": 10})
    for bad in (0, -1, 1.5, True, None, "10", 2**80 * 1.0):
        with pytest.raises(InvalidInputError, match=r"Limits\.content_bytes must be an integer >= 1"):
            Limits(content_bytes=bad)
    assert not (tmp_path / "t").exists()


# --- resource limits -------------------------------------------------------------------------


LIMIT_CASES = [
    # (field, the Limits attribute, a call given a text of n bytes)
    ("name", "name_bytes", lambda t, w, s: t.create_keyword(s, llm_auto_place=False)),
    ("name", "name_bytes", lambda t, w, s: t.update_keyword(w["a"], {"name": s}, version=1)),
    ("name", "name_bytes", lambda t, w, s: t.batch_create_keywords([{"name": "ok"}, {"name": s}])),
    ("aliases", "alias_bytes", lambda t, w, s: t.add_alias(w["a"], s)),
    ("aliases", "alias_bytes", lambda t, w, s: t.create_keyword("x", aliases=["fine", s], llm_auto_place=False)),
    ("description", "description_bytes", lambda t, w, s: t.create_keyword("x", description=s, llm_auto_place=False)),
    ("content", "content_bytes", lambda t, w, s: t.create_info(s)),
    ("content", "content_bytes", lambda t, w, s: t.update_info(w["info"], {"content": s})),
    ("content", "content_bytes", lambda t, w, s: t.batch_create_infos([{"content": "ok"}, {"content": s}])),
    ("source", "source_bytes", lambda t, w, s: t.create_info("x", source=s)),
    # {"k":"..."} is the text and 8 bytes more
    ("metadata", "metadata_bytes", lambda t, w, s: t.create_info("x", metadata={"k": _text(len(s.encode()) - 8)})),
    ("type", "label_bytes", lambda t, w, s: t.relate(w["a"], w["b"], type=s)),
    ("created_by", "label_bytes", lambda t, w, s: t.link_info(w["info"], w["b"], created_by=s)),
    ("reason", "reason_bytes", lambda t, w, s: t.relate(w["a"], w["b"], reason=s)),
    ("query", "query_bytes", lambda t, w, s: t.search(s)),
    ("query", "query_bytes", lambda t, w, s: t.recall(s)),
    ("query", "query_bytes", lambda t, w, s: t.context(s)),
    ("name", "query_bytes", lambda t, w, s: t.find_keywords(s)),
]


def _text(size: int) -> str:
    """A text of exactly ``size`` bytes of UTF-8, mostly two-byte characters (so a count of
    characters would pass where the count of bytes must not)."""
    return "é" * (size // 2) + "x" * (size % 2)


@pytest.mark.parametrize("field, limit, call", LIMIT_CASES,
                         ids=[f"{i}-{c[0]}-{c[1]}" for i, c in enumerate(LIMIT_CASES)])
def test_a_value_over_its_limit_is_refused_naming_field_size_and_limit(world, tree_dir, field, limit, call):
    # Before: a 50 MB info and a 50 MB keyword name were accepted.
    bound = getattr(DEFAULT, limit)
    error = assert_refused(world, tree_dir, lambda t, w: call(t, w, _text(bound + 1)), LimitExceededError,
                           field, f"{bound:,} bytes", f"Limits.{limit}")
    assert error.field == field and error.limit == bound and error.size > bound


@pytest.mark.parametrize("field, limit, call", LIMIT_CASES,
                         ids=[f"{i}-{c[0]}-{c[1]}" for i, c in enumerate(LIMIT_CASES)])
def test_a_value_at_its_limit_is_accepted(world, field, limit, call):
    call(world["tree"], world, _text(getattr(DEFAULT, limit)))


def test_a_fifty_megabyte_info_and_name_are_refused_with_their_sizes(world, tree_dir):
    big = "x" * (50 << 20)
    assert_refused(world, tree_dir, lambda t, w: t.create_info(big), LimitExceededError,
                   "content of new info", "52,428,800 bytes is over the limit of 1,048,576 bytes")
    assert_refused(world, tree_dir, lambda t, w: t.create_keyword(big), LimitExceededError,
                   "name of new keyword", "52,428,800 bytes")


def test_too_many_aliases_are_refused_also_by_a_merge(tmp_path):
    with KeywordTree(tmp_path / "t", durability="none", worker=False, limits=Limits(aliases_per_keyword=3)) as tree:
        a = tree.create_keyword("A", aliases=["a1", "a2"], llm_auto_place=False)
        b = tree.create_keyword("B", aliases=["b1"], llm_auto_place=False)
        with pytest.raises(LimitExceededError, match=r"aliases of keyword .*: 4 aliases is over the limit of 3"):
            tree.merge_keywords(b.id, a.id)  # a would answer to a1, a2, B and b1
        with pytest.raises(LimitExceededError, match="4 aliases"):
            tree.create_keyword("C", aliases=["1", "2", "3", "4"], llm_auto_place=False)
        assert tree.get_keyword(b.id).aliases == ("b1",)


def test_limits_are_configurable(tmp_path):
    directory = tmp_path / "t"
    with KeywordTree(directory, durability="none", worker=False, limits=Limits(content_bytes=10)) as tree:
        with pytest.raises(LimitExceededError, match="11 bytes is over the limit of 10 bytes"):
            tree.create_info("x" * 11)
        tree.create_info("x" * 10)
    with KeywordTree(directory, durability="none", worker=False, limits=Limits(content_bytes=4 << 20)) as tree:
        tree.create_info("z" * (2 << 20))


def test_the_size_refused_is_in_bytes_also_when_the_characters_alone_are_over(tmp_path):
    with KeywordTree(tmp_path / "t", durability="none", worker=False, limits=Limits(content_bytes=10)) as tree, \
            pytest.raises(LimitExceededError, match="33 bytes is over the limit of 10 bytes") as refused:
        tree.create_info("€" * 11)  # 11 characters of 3 bytes each: not "11 bytes"
    assert refused.value.size == 33  # (what the error carries too)


def test_an_unchanged_field_over_today_s_limit_does_not_block_other_writes(tmp_path):
    """A limit checks what a write changes: values written under larger limits stay usable."""
    directory = tmp_path / "t"
    generous = Limits(content_bytes=4 << 20, name_bytes=4096)
    with KeywordTree(directory, durability="none", worker=False, limits=generous) as tree:
        info = tree.create_info("z" * (2 << 20))
        long_name = tree.create_keyword("n" * 2000, llm_auto_place=False)
        other = tree.create_keyword("Other", llm_auto_place=False)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        tree.link_info(info.id, other.id)
        tree.update_info(info.id, {"metadata": {"reviewed": True}})
        tree.move_keyword(long_name.id, other.id)
        tree.update_keyword(long_name.id, {"description": "kept"}, version=tree.get_keyword(long_name.id).version)
        tree.undo(tree.last_op_id)
        with pytest.raises(LimitExceededError, match="content of info"):
            tree.update_info(info.id, {"content": "z" * (2 << 20) + "!"})
        assert len(tree.get_info(info.id).content) == 2 << 20


def test_an_oversized_name_is_refused_before_the_agent_is_asked(tmp_path):
    client = StubLLMClient()
    with KeywordTree(tmp_path / "t", durability="none", worker=False, llm_client=client) as tree:
        with pytest.raises(LimitExceededError, match="name of new keyword"):
            tree.create_keyword("n" * 2000)
        with pytest.raises(LimitExceededError, match="content of new info"):
            tree.create_info("c" * (DEFAULT.content_bytes + 1), auto_link=True)
    assert client.requests == []


def test_import_json_applies_the_limits_and_leaves_nothing(world, tmp_path):
    path = world["tree"].export(tmp_path / "export.json")["path"]
    target = tmp_path / "imported"
    with pytest.raises(LimitExceededError, match="content of new info"):
        KeywordTree.import_json(path, target, durability="none", limits=Limits(content_bytes=3))
    assert not target.exists()
    with KeywordTree.import_json(path, target, durability="none", worker=False) as tree:
        assert tree.get_info(world["info"]).content == "a memo"


def test_a_long_actor_is_refused_when_opening(tree_dir):
    with pytest.raises(LimitExceededError, match="actor: 257 bytes"):
        KeywordTree(tree_dir, actor="a" * 257)
    assert not tree_dir.exists()


def test_the_cli_says_which_limit_refused_a_value(tmp_path, capsys):
    from kwtree.cli.main import main

    directory = str(tmp_path / "t")
    assert main(["init", directory]) == 0
    assert main(["add-info", directory, "x" * (DEFAULT.content_bytes + 1)]) == 1
    err = capsys.readouterr().err
    assert "error: content of new info" in err and "1,048,577 bytes is over the limit of 1,048,576 bytes" in err
    assert "hint: the kwtree command uses the default limits" in err


@pytest.mark.parametrize("call", [
    lambda p: kwtree.verify_directory(p), lambda p: kwtree.repair_directory(p),
    lambda p: kwtree.restore(p, "restored"), lambda p: kwtree.restore("x.kwsnap", p),
])
@pytest.mark.parametrize("path", [123, None, "n" * 300, "a\0b", "\ud800"])
def test_the_package_functions_refuse_what_is_not_a_path(call, path, tmp_path, monkeypatch):
    # Before: OSError (name too long) from verify_directory and repair_directory, ValueError
    # (NUL byte) from restore's data_dir.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KwtreeError):
        call(path)
    assert list(tmp_path.iterdir()) == []


def test_normalize_name_refuses_what_is_not_a_string():
    with pytest.raises(InvalidInputError, match="normalize_name takes a string, got int"):
        kwtree.normalize_name(123)  # AttributeError before
