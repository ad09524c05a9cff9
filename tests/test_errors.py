"""Every bad-input path raises a specific KwtreeError with a useful message and leaves the
log and the state exactly as they were."""

from __future__ import annotations

import math

import pytest
from helpers import log_bytes, snapshot

from kwtree import (
    ROOT_ID,
    ClosedError,
    CycleError,
    DuplicateKeywordError,
    FormatError,
    HasChildrenError,
    InvalidInputError,
    KeywordTree,
    KwtreeError,
    NotFoundError,
    ReadOnlyError,
    VersionConflictError,
)

MISSING = "0" * 32


@pytest.fixture
def world(tree):
    a = tree.create_keyword("A")
    b = tree.create_keyword("B", a.id)
    gone = tree.create_keyword("Gone")
    tree.delete_keyword(gone.id)
    info = tree.create_info("memo", keyword_ids=[a.id])
    dead_info = tree.create_info("dead")
    tree.delete_info(dead_info.id)
    return {"tree": tree, "a": a.id, "b": b.id, "gone": gone.id, "info": info.id, "dead_info": dead_info.id}


# (call, expected error, text the message must contain)
CASES = [
    # names
    (lambda t, w: t.create_keyword(""), InvalidInputError, "empty"),
    (lambda t, w: t.create_keyword("   \t"), InvalidInputError, "empty"),
    (lambda t, w: t.create_keyword(None), InvalidInputError, "string"),
    (lambda t, w: t.create_keyword(42), InvalidInputError, "string"),
    (lambda t, w: t.create_keyword("a\nb"), InvalidInputError, "control character"),
    (lambda t, w: t.create_keyword("..."), InvalidInputError, "normalisation"),
    (lambda t, w: t.create_keyword("A"), DuplicateKeywordError, "already has a child"),
    (lambda t, w: t.create_keyword("x", aliases="py"), InvalidInputError, "list of strings"),
    (lambda t, w: t.create_keyword("x", aliases=[""]), InvalidInputError, "alias"),
    (lambda t, w: t.create_keyword("x", description=3), InvalidInputError, "description"),
    (lambda t, w: t.create_keyword("x", metadata=[1]), InvalidInputError, "metadata must be a dict"),
    (lambda t, w: t.create_keyword("x", metadata={1: "a"}), InvalidInputError, "keys must be strings"),
    (lambda t, w: t.create_keyword("x", metadata={"f": math.nan}), InvalidInputError, "finite"),
    (lambda t, w: t.create_keyword("x", metadata={"s": {1, 2}}), InvalidInputError, "not JSON"),
    (lambda t, w: t.create_keyword("x", metadata={"big": 2**70}), InvalidInputError, "64 bits"),
    # ids
    (lambda t, w: t.create_keyword("x", parent_id=MISSING), NotFoundError, "no keyword"),
    (lambda t, w: t.create_keyword("x", parent_id=w["gone"]), NotFoundError, "deleted"),
    (lambda t, w: t.create_keyword("x", parent_id=7), InvalidInputError, "id string"),
    (lambda t, w: t.create_keyword("x", parent_id=""), InvalidInputError, "id string"),
    (lambda t, w: t.get_keyword(MISSING), NotFoundError, "no keyword"),
    (lambda t, w: t.get_keyword(w["gone"]), NotFoundError, "deleted"),
    (lambda t, w: t.get_keyword(None), InvalidInputError, "id string"),
    (lambda t, w: t.get_children(MISSING), NotFoundError, "no keyword"),
    (lambda t, w: t.get_path(w["gone"]), NotFoundError, "deleted"),
    (lambda t, w: t.get_info(MISSING), NotFoundError, "no info"),
    (lambda t, w: t.get_info(w["dead_info"]), NotFoundError, "deleted"),
    (lambda t, w: t.get_keywords_of_info(MISSING), NotFoundError, "no info"),
    (lambda t, w: t.find_keywords(""), InvalidInputError, "empty"),
    # updates
    (lambda t, w: t.update_keyword(w["a"], {"name": "Z"}, version=9), VersionConflictError, "current version is 1"),
    (lambda t, w: t.update_keyword(w["a"], {"name": "Z"}, version="1"), InvalidInputError, "version"),
    (lambda t, w: t.update_keyword(w["a"], {"name": "Z"}, version=True), InvalidInputError, "version"),
    (lambda t, w: t.update_keyword(w["a"], {"colour": 1}, version=1), InvalidInputError, "unknown field"),
    (lambda t, w: t.update_keyword(w["a"], ["name"], version=1), InvalidInputError, "patch must be a dict"),
    (lambda t, w: t.update_keyword(w["a"], {}, version=1), InvalidInputError, "empty"),
    (lambda t, w: t.update_keyword(w["a"], {"name": ""}, version=1), InvalidInputError, "empty"),
    (lambda t, w: t.update_keyword(w["gone"], {"name": "x"}, version=1), NotFoundError, "deleted"),
    (lambda t, w: t.add_alias(w["a"], ""), InvalidInputError, "alias"),
    (lambda t, w: t.remove_alias(w["a"], "never"), NotFoundError, "no alias"),
    # structure
    (lambda t, w: t.move_keyword(w["a"], w["b"]), CycleError, "descendant"),
    (lambda t, w: t.move_keyword(w["a"], w["a"]), CycleError, "itself"),
    (lambda t, w: t.move_keyword(ROOT_ID, w["a"]), InvalidInputError, "root"),
    (lambda t, w: t.move_keyword(w["a"], MISSING), NotFoundError, "new_parent_id"),
    (lambda t, w: t.merge_keywords(w["a"], w["b"]), CycleError, "descendant"),
    (lambda t, w: t.merge_keywords(w["a"], w["a"]), InvalidInputError, "same keyword"),
    (lambda t, w: t.merge_keywords(w["gone"], w["a"]), NotFoundError, "src_id"),
    (lambda t, w: t.delete_keyword(w["a"]), HasChildrenError, "cascade=True"),
    (lambda t, w: t.delete_keyword(w["a"], cascade="yes"), InvalidInputError, "cascade"),
    (lambda t, w: t.delete_keyword(w["b"], info_policy="drop"), InvalidInputError, "info_policy"),
    (lambda t, w: t.delete_keyword(ROOT_ID, cascade=True), InvalidInputError, "root"),
    # infos, links, relations
    (lambda t, w: t.create_info(""), InvalidInputError, "content"),
    (lambda t, w: t.create_info(b"bytes"), InvalidInputError, "content must be a string"),
    (lambda t, w: t.create_info("x", source=None), InvalidInputError, "source"),
    (lambda t, w: t.create_info("x", keyword_ids=w["a"]), InvalidInputError, "list of keyword ids"),
    (lambda t, w: t.create_info("x", keyword_ids=[MISSING]), NotFoundError, "keyword_ids[0]"),
    (lambda t, w: t.update_info(w["info"], {"content": ""}), InvalidInputError, "content"),
    (lambda t, w: t.update_info(w["info"], {"content": "y"}, version=5), VersionConflictError, "version"),
    (lambda t, w: t.delete_info(w["dead_info"]), NotFoundError, "deleted"),
    (lambda t, w: t.link_info(w["info"], w["a"], relation="best"), InvalidInputError, "relation must be"),
    (lambda t, w: t.link_info(w["info"], w["a"], created_by=""), InvalidInputError, "created_by"),
    (lambda t, w: t.link_info(w["dead_info"], w["a"]), NotFoundError, "info"),
    (lambda t, w: t.unlink_info(w["info"], w["b"]), NotFoundError, "not linked"),
    (lambda t, w: t.get_infos_of_keyword(w["a"], page=-1), InvalidInputError, "page"),
    (lambda t, w: t.get_infos_of_keyword(w["a"], size=0), InvalidInputError, "size"),
    (lambda t, w: t.get_infos_of_keyword(w["a"], relation="nope"), InvalidInputError, "relation"),
    (lambda t, w: t.relate(w["a"], w["a"]), InvalidInputError, "itself"),
    (lambda t, w: t.relate(w["a"], w["b"], type=""), InvalidInputError, "type"),
    (lambda t, w: t.relate(w["a"], w["b"], weight=math.inf), InvalidInputError, "weight"),
    (lambda t, w: t.relate(w["a"], w["b"], weight=True), InvalidInputError, "weight"),
    (lambda t, w: t.relate(w["a"], w["b"], reason=None), InvalidInputError, "reason"),
    (lambda t, w: t.relate(w["a"], w["gone"]), NotFoundError, "to_id"),
    (lambda t, w: t.unrelate(w["a"], w["b"]), NotFoundError, "no relation"),
    (lambda t, w: t.get_relations(w["a"], direction="sideways"), InvalidInputError, "direction"),
    # batches, history, undo
    (lambda t, w: t.batch_create_keywords({"name": "x"}), InvalidInputError, "list of dicts"),
    (lambda t, w: t.batch_create_infos("content"), InvalidInputError, "list of dicts"),
    (lambda t, w: t.history(limit=0), InvalidInputError, "limit"),
    (lambda t, w: t.history(entity_id=3), InvalidInputError, "entity_id"),
    (lambda t, w: t.undo("not-an-op"), InvalidInputError, "op_id"),
    (lambda t, w: t.undo(MISSING), NotFoundError, "no operation"),
    (lambda t, w: t.undo(t.last_op_id, force="yes"), InvalidInputError, "force"),
]


@pytest.mark.parametrize("call, error, text", CASES)
def test_bad_input_raises_a_specific_error_and_changes_nothing(world, tree_dir, call, error, text):
    tree = world["tree"]
    ids = [world[k] for k in ("a", "b", "gone")]
    before_log = log_bytes(tree_dir)
    before = snapshot(tree, ids, [world["info"], world["dead_info"]])
    with pytest.raises(error) as raised:
        call(tree, world)
    assert isinstance(raised.value, KwtreeError)
    assert text in str(raised.value)
    assert log_bytes(tree_dir) == before_log
    assert snapshot(tree, ids, [world["info"], world["dead_info"]]) == before


def test_closed_tree_refuses_every_call(tree_dir):
    tree = KeywordTree(tree_dir, durability="none")
    tree.close()
    tree.close()  # harmless
    for call in (lambda: tree.get_keyword(ROOT_ID), lambda: tree.create_keyword("x"), tree.refresh,
                 tree.tree_metrics, tree.history, lambda: tree.last_op_id):
        with pytest.raises(ClosedError, match="closed"):
            call()
    with pytest.raises(ClosedError), tree:
        pass


def test_read_only_views_refuse_writes(tree_dir):
    with KeywordTree(tree_dir, durability="none") as tree:
        tree.create_keyword("A")
        first = tree.history()[0].op_id
    for view in (KeywordTree(tree_dir, read_only=True), KeywordTree(tree_dir, as_of=first)):
        with view:
            with pytest.raises(ReadOnlyError):
                view.create_keyword("B")
            with pytest.raises(ReadOnlyError):
                view.undo(first)


def test_constructor_arguments_are_checked(tmp_path):
    with pytest.raises(InvalidInputError, match="durability"):
        KeywordTree(tmp_path / "x", durability="fast")
    with pytest.raises(InvalidInputError, match="as_of"):
        KeywordTree(tmp_path / "x", as_of="yesterday")
    with pytest.raises(InvalidInputError, match="as_of"):
        KeywordTree(tmp_path / "x", as_of=[1])
    with pytest.raises(InvalidInputError, match="finite"):
        KeywordTree(tmp_path / "x", as_of=float("nan"))
    with pytest.raises(InvalidInputError, match="read_only"):
        KeywordTree(tmp_path / "x", read_only="no")
    with pytest.raises(InvalidInputError, match="actor"):
        KeywordTree(tmp_path / "x", actor="")
    with pytest.raises(InvalidInputError, match="segment_bytes"):
        KeywordTree(tmp_path / "x", segment_bytes=10)
    with pytest.raises(InvalidInputError, match="lock_timeout"):
        KeywordTree(tmp_path / "x", lock_timeout=-1)
    assert not (tmp_path / "x").exists()


def test_directories_that_are_not_kwtree_are_refused(tmp_path):
    with pytest.raises(NotFoundError, match="not a kwtree directory"):
        KeywordTree(tmp_path / "missing", read_only=True)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FormatError, match="not empty"):
        KeywordTree(tmp_path / "busy")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInputError, match="is a file"):
        KeywordTree(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with KeywordTree(tmp_path / "empty", durability="none") as tree:
        assert tree.get_children(ROOT_ID) == []


def test_newer_or_broken_manifest_is_refused(tree_dir):
    KeywordTree(tree_dir, durability="none").close()
    manifest = tree_dir / "manifest.json"
    manifest.write_text('{"format": 99, "created_at": 0, "replica_id": "x", "segment_bytes": 4096}')
    with pytest.raises(FormatError, match="newer kwtree"):
        KeywordTree(tree_dir)
    manifest.write_text("{not json")
    with pytest.raises(FormatError, match="manifest"):
        KeywordTree(tree_dir)


def test_as_of_must_name_an_operation_of_this_log(tree_dir):
    with KeywordTree(tree_dir, durability="none") as tree:
        tree.create_keyword("A")
        created = tree.history()[0].timestamp
    with pytest.raises(NotFoundError, match="no operation"):
        KeywordTree(tree_dir, as_of="f" * 32)
    with pytest.raises(NotFoundError, match="no operation at or before"):
        KeywordTree(tree_dir, as_of=created - 10)
