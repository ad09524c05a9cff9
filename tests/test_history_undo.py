"""history(), undo() and as_of views."""

from __future__ import annotations

import pytest
from helpers import snapshot

from kwtree import (
    ROOT_ID,
    InvalidInputError,
    KeywordTree,
    NotFoundError,
    RelationType,
    UndoConflictError,
)


def test_history_lists_operations_oldest_first_with_filters_and_limit(tree):
    a = tree.create_keyword("A")
    b = tree.create_keyword("B")
    info = tree.create_info("memo", keyword_ids=[a.id])
    tree.relate(b.id, a.id)
    tree.update_keyword(b.id, {"description": "d"}, version=1)
    kinds = [op.kind for op in tree.history()]
    assert kinds == ["init", "create_keyword", "create_keyword", "create_info", "relate", "update_keyword"]
    ops = tree.history()
    assert [op.op_id for op in ops] == sorted(op.op_id for op in ops)
    assert ops[-1].op_id == tree.last_op_id and ops[-1].actor == "user"
    assert [op.kind for op in tree.history(limit=2)] == ["relate", "update_keyword"]
    # a keyword's history includes the links and relations that end at it
    assert [op.kind for op in tree.history(entity_id=a.id)] == ["create_keyword", "create_info", "relate"]
    assert [op.kind for op in tree.history(entity_id=info.id)] == ["create_info"]
    assert [op.kind for op in tree.history(entity_id=f"{info.id}/{a.id}")] == ["create_info"]
    assert tree.history(entity_id="f" * 32) == []
    create = tree.history(entity_id=info.id)[0]
    assert create.entity_ids == (info.id, f"{info.id}/{a.id}")
    assert [c.before for c in create.changes] == [None, None]
    update = ops[-1]
    assert update.changes[0].before.description == "" and update.changes[0].after.description == "d"


def test_undo_restores_before_images_as_a_new_operation(tree):
    a = tree.create_keyword("A", description="first")
    tree.update_keyword(a.id, {"description": "second", "aliases": ["x"]}, version=1)
    op = tree.undo(tree.last_op_id)
    assert op.kind == "undo" and dict(op.audit) == {"undo_of": op.changes[0].before.op_id}
    restored = tree.get_keyword(a.id)
    assert (restored.description, restored.aliases, restored.version) == ("first", (), 3)
    assert tree.find_keywords("x") == []


def test_undo_of_a_list_is_one_operation_newest_first_and_all_or_nothing(tree, tree_dir):
    a = tree.create_keyword("A", description="first")
    renamed = tree.update_keyword(a.id, {"description": "second"}, version=1)  # over the create
    info = tree.create_info("memo", keyword_ids=[a.id])
    create_a = tree.history(a.id)[0].op_id
    op = tree.undo([create_a, renamed.op_id])  # the older first: still undone newest first, no conflict
    assert op.kind == "undo" and dict(op.audit) == {"undo_of": [create_a, renamed.op_id]}
    assert len(tree.history()) == 5  # init, 3 writes, ONE undo
    with pytest.raises(NotFoundError):
        tree.get_keyword(a.id)
    assert tree.get_info(info.id).content == "memo"  # its link went with A; the info stays
    tree.undo(op.op_id)  # the undo of the undo: A back as it was, with the link it lost
    assert tree.get_keyword(a.id).description == "second"
    assert [found.id for found in tree.get_infos_of_keyword(a.id)] == [info.id]
    frozen = snapshot(tree), tree.last_op_id
    with pytest.raises(UndoConflictError):  # A was written after the create by more than the list
        tree.undo([create_a, info.op_id])
    with pytest.raises(InvalidInputError, match=r"op_id\[1\]"):
        tree.undo([info.op_id, "not-an-op"])
    assert (snapshot(tree), tree.last_op_id) == frozen


def test_undo_of_a_create_deletes_and_undo_of_the_undo_brings_back(tree):
    a = tree.create_keyword("A")
    info = tree.create_info("memo", keyword_ids=[a.id])
    undone = tree.undo(info.op_id)
    with pytest.raises(NotFoundError):
        tree.get_info(info.id)
    assert tree.get_infos_of_keyword(a.id) == []
    tree.undo(undone.op_id)
    assert tree.get_info(info.id).content == "memo"
    assert tree.get_infos_of_keyword(a.id)[0].id == info.id


def test_undo_of_merge_and_cascade_delete_restore_everything(tree, tree_dir):
    top = tree.create_keyword("Top")
    src = tree.create_keyword("Src", top.id, aliases=["s"])
    dst = tree.create_keyword("Dst", top.id)
    child = tree.create_keyword("Child", src.id)
    info = tree.create_info("memo", keyword_ids=[src.id, child.id])
    tree.link_info(info.id, dst.id, RelationType.EXAMPLE)
    tree.relate(src.id, dst.id)
    tree.relate(child.id, top.id, "part_of")
    ids = [top.id, src.id, dst.id, child.id]
    before = snapshot(tree, ids, [info.id])

    def without_bookkeeping(snap):
        # Undo restores entity states; lists keep arrival order, so a revived keyword or link
        # is listed after the ones that never left: compare those lists as sets.
        return {
            "tree": {k: (sorted(e.get("children", [])), e.get("path"), sorted(e.get("infos", [])),
                         [r[:5] for r in e.get("relations", [])],
                         getattr(e["keyword"], "name", None), getattr(e["keyword"], "aliases", None))
                     for k, e in snap["keywords"].items()},
            "infos": {k: sorted(e.get("keywords", [])) for k, e in snap["infos"].items()},
            "names": snap["names"],
        }

    merge = tree.merge_keywords(src.id, dst.id)
    tree.undo(merge.op_id)
    assert without_bookkeeping(snapshot(tree, ids, [info.id])) == without_bookkeeping(before)
    delete = tree.delete_keyword(top.id, cascade=True, info_policy="delete")
    with pytest.raises(NotFoundError):
        tree.get_info(info.id)
    tree.undo(delete.op_id)
    assert without_bookkeeping(snapshot(tree, ids, [info.id])) == without_bookkeeping(before)


def test_undo_refuses_when_a_later_operation_changed_the_entity_unless_forced(tree):
    a = tree.create_keyword("A")
    first = tree.update_keyword(a.id, {"description": "one"}, version=1)
    tree.update_keyword(a.id, {"description": "two"}, version=2)
    last = tree.last_op_id
    with pytest.raises(UndoConflictError) as conflict:
        tree.undo(first.op_id)
    assert conflict.value.conflicts == {a.id: last}
    assert tree.last_op_id == last
    tree.undo(first.op_id, force=True)
    assert tree.get_keyword(a.id).description == ""


def test_undo_refuses_to_leave_an_inconsistent_tree(tree):
    a = tree.create_keyword("A")
    tree.create_keyword("B", a.id)  # a later op adds a child under A
    with pytest.raises(InvalidInputError, match="still has child"):
        tree.undo(a.op_id)  # would delete A under its child
    n = tree.create_keyword("N")
    q = tree.create_keyword("Q", n.id)
    out = tree.move_keyword(q.id, ROOT_ID)  # Q leaves N ...
    tree.move_keyword(n.id, q.id)  # ... and N moves under Q: undoing the first move closes a cycle
    with pytest.raises(InvalidInputError, match="its own ancestor"):
        tree.undo(out.op_id)
    with pytest.raises(InvalidInputError, match="root"):
        tree.undo(tree.history()[0].op_id, force=True)


def test_undo_that_finds_nothing_to_restore_returns_none(tree):
    a = tree.create_keyword("A")
    update = tree.update_keyword(a.id, {"description": "x"}, version=1)
    tree.update_keyword(a.id, {"description": ""}, version=2)  # back to the before-image by hand
    last = tree.last_op_id
    assert tree.undo(update.op_id, force=True) is None
    assert tree.last_op_id == last


def test_as_of_opens_the_tree_as_it_was(tree_dir):
    with KeywordTree(tree_dir, durability="none") as tree:
        a = tree.create_keyword("A")
        snaps = {tree.last_op_id: snapshot(tree, [a.id])}
        tree.create_keyword("B", a.id)
        snaps[tree.last_op_id] = snapshot(tree, [a.id])
        tree.delete_keyword(a.id, cascade=True)
        snaps[tree.last_op_id] = snapshot(tree, [a.id])
        ops = tree.history()
    for op in ops[1:]:
        with KeywordTree(tree_dir, as_of=op.op_id) as view:
            assert snapshot(view, [a.id]) == snaps[op.op_id]
            assert view.history()[-1].op_id == op.op_id
            assert view.refresh() == 0
        with KeywordTree(tree_dir, as_of=op.timestamp) as view:
            assert snapshot(view, [a.id]) == snaps[op.op_id]


def test_refresh_picks_up_another_writers_operations(tree_dir):
    with KeywordTree(tree_dir, durability="none") as writer, KeywordTree(tree_dir, read_only=True) as reader:
        assert reader.refresh() == 0
        a = writer.create_keyword("A")
        writer.create_keyword("B", a.id)
        assert reader.refresh() == 2
        assert [k.name for k in reader.get_children(a.id)] == ["B"]
        assert reader.last_op_id == writer.last_op_id
        # a second writer instance catches up before it writes
        with KeywordTree(tree_dir, durability="none") as other:
            c = other.create_keyword("C", a.id)
        d = writer.create_keyword("D", a.id)
        assert [k.id for k in writer.get_children(a.id)][1:] == [c.id, d.id]
        assert d.op_id > c.op_id
        assert reader.get_children(ROOT_ID) == [reader.get_keyword(a.id)]
