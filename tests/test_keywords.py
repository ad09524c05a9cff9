"""Keyword API semantics: create, update, aliases, move, merge, delete, batch, lookups."""

from __future__ import annotations

import uuid

import pytest

from kwtree import (
    ROOT_ID,
    CycleError,
    DuplicateKeywordError,
    HasChildrenError,
    InvalidInputError,
    KeywordTree,
    NotFoundError,
    RelationType,
    VersionConflictError,
)


def names(keywords) -> list[str]:
    return [k.name for k in keywords]


def test_root_is_created_once_on_first_open(tree_dir):
    with KeywordTree(tree_dir, durability="none") as first:
        root = first.get_keyword(ROOT_ID)
        assert (root.name, root.level, root.parent_id, root.version) == ("root", 0, None, 1)
    with KeywordTree(tree_dir, durability="none") as again:
        assert again.get_keyword(ROOT_ID) == root
        assert [op.kind for op in again.history()] == ["init"]


def test_create_defaults_to_root_and_levels_and_paths_are_derived(tree):
    a = tree.create_keyword("Programming")
    b = tree.create_keyword("Python", a.id, aliases=["py"], description="a language", metadata={"k": [1, 2]})
    c = tree.create_keyword("asyncio", b.id)
    assert a.parent_id == ROOT_ID and (a.level, b.level, c.level) == (1, 2, 3)
    assert names(tree.get_path(c.id)) == ["root", "Programming", "Python", "asyncio"]
    assert tree.get_children(a.id) == [b]
    assert b.description == "a language" and dict(b.metadata) == {"k": [1, 2]} and b.aliases == ("py",)
    assert len(a.id) == 32 and int(a.id, 16) >= 0 and a.id[12] == "4"  # uuid4 hex


def test_names_are_stripped_and_aliases_deduplicated_by_normal_form(tree):
    k = tree.create_keyword("  Python  ", aliases=["py", "PY", "Python", "p-y", "Ｐｙ"])
    assert k.name == "Python"
    assert k.aliases == ("py",)  # "PY", "p-y", "Ｐｙ" normalise to "py"; "Python" is the name


def test_find_keywords_normalises_case_width_punctuation_and_spacing(tree):
    a = tree.create_keyword("Machine Learning", aliases=["ML"])
    b = tree.create_keyword("北京大学")
    assert tree.find_keywords("machine-learning") == [a]
    assert tree.find_keywords("ｍｌ") == [a]
    assert tree.find_keywords("北京 大学") == [b]
    assert tree.find_keywords("deep learning") == []


def test_same_name_under_different_parents_is_allowed_and_found_twice(tree):
    animals = tree.create_keyword("Animals")
    langs = tree.create_keyword("Languages")
    snake = tree.create_keyword("Python", animals.id)
    lang = tree.create_keyword("python", langs.id)
    assert tree.find_keywords("PYTHON") == [snake, lang]


def test_duplicate_sibling_names_are_refused_with_the_existing_id(tree):
    first = tree.create_keyword("Python")
    with pytest.raises(DuplicateKeywordError) as info:
        tree.create_keyword("python ")
    assert info.value.existing_id == first.id
    other = tree.create_keyword("Snake")
    with pytest.raises(DuplicateKeywordError):
        tree.update_keyword(other.id, {"name": "PYTHON"}, version=1)
    # an alias equal to a sibling's name does not count as a duplicate name
    assert tree.add_alias(other.id, "python").aliases == ("python",)


def test_update_keyword_checks_version_and_patch_fields(tree):
    k = tree.create_keyword("Python")
    updated = tree.update_keyword(k.id, {"description": "lang", "aliases": ["py"]}, version=1)
    assert (updated.version, updated.description, updated.aliases) == (2, "lang", ("py",))
    assert updated.created_at == k.created_at and updated.updated_at >= k.updated_at
    with pytest.raises(VersionConflictError) as conflict:
        tree.update_keyword(k.id, {"description": "again"}, version=1)
    assert (conflict.value.expected, conflict.value.actual) == (1, 2)
    with pytest.raises(InvalidInputError, match="unknown field"):
        tree.update_keyword(k.id, {"parent_id": ROOT_ID}, version=2)
    with pytest.raises(InvalidInputError, match="empty"):
        tree.update_keyword(k.id, {}, version=2)
    renamed = tree.update_keyword(k.id, {"name": "Py"}, version=2)
    assert renamed.aliases == ()  # the alias "py" now repeats the name
    assert tree.find_keywords("python") == []
    assert tree.find_keywords("py") == [renamed]


def test_root_cannot_be_renamed_moved_merged_deleted_or_aliased(tree):
    a = tree.create_keyword("A")
    with pytest.raises(InvalidInputError):
        tree.update_keyword(ROOT_ID, {"name": "top"}, version=1)
    with pytest.raises(InvalidInputError):
        tree.add_alias(ROOT_ID, "top")
    with pytest.raises(InvalidInputError):
        tree.move_keyword(ROOT_ID, a.id)
    with pytest.raises(InvalidInputError):
        tree.merge_keywords(ROOT_ID, a.id)
    with pytest.raises(InvalidInputError):
        tree.merge_keywords(a.id, ROOT_ID)
    with pytest.raises(InvalidInputError):
        tree.delete_keyword(ROOT_ID, cascade=True)
    assert tree.update_keyword(ROOT_ID, {"description": "everything"}, version=1).description == "everything"


def test_aliases_add_and_remove(tree):
    k = tree.create_keyword("Kubernetes")
    k2 = tree.add_alias(k.id, "k8s")
    assert k2.aliases == ("k8s",) and k2.version == 2
    assert tree.add_alias(k.id, "K8S") == k2  # already answers to it: nothing written
    assert tree.find_keywords("k8s") == [k2]
    k3 = tree.remove_alias(k.id, "K8s")
    assert k3.aliases == () and tree.find_keywords("k8s") == []
    with pytest.raises(NotFoundError, match="no alias"):
        tree.remove_alias(k.id, "kube")


def test_move_keyword_moves_the_subtree_and_refuses_cycles(tree):
    a = tree.create_keyword("A")
    b = tree.create_keyword("B", a.id)
    c = tree.create_keyword("C", b.id)
    d = tree.create_keyword("D")
    with pytest.raises(CycleError, match="itself"):
        tree.move_keyword(a.id, a.id)
    with pytest.raises(CycleError, match="descendant"):
        tree.move_keyword(a.id, c.id)
    moved = tree.move_keyword(b.id, d.id)
    assert moved.parent_id == d.id and moved.level == 2
    assert tree.get_keyword(c.id).level == 3
    assert names(tree.get_path(c.id)) == ["root", "D", "B", "C"]
    assert tree.get_children(a.id) == []
    last = tree.last_op_id
    assert tree.move_keyword(b.id, d.id) == tree.get_keyword(b.id)  # same parent: no write
    assert tree.last_op_id == last
    with pytest.raises(NotFoundError):
        tree.move_keyword(b.id, "f" * 32)


def test_merge_keywords_repoints_children_links_and_relations_in_one_operation(tree):
    py = tree.create_keyword("Python", aliases=["py"])
    dup = tree.create_keyword("python3", aliases=["py3"])
    child = tree.create_keyword("asyncio", dup.id)
    other = tree.create_keyword("Go")
    both = tree.create_info("linked to both", keyword_ids=[py.id, dup.id])
    only = tree.create_info("linked to dup", keyword_ids=[dup.id])
    tree.link_info(only.id, dup.id, RelationType.EXAMPLE)
    tree.relate(dup.id, other.id, "see_also", 0.5, "why")
    tree.relate(other.id, dup.id, "compares_to")
    tree.relate(py.id, dup.id, "same_as")  # would become a self-relation: dropped
    before = len(tree.history())
    merged = tree.merge_keywords(dup.id, py.id)
    assert len(tree.history()) == before + 1
    assert merged.id == py.id and merged.aliases == ("py", "python3", "py3")
    with pytest.raises(NotFoundError, match="deleted"):
        tree.get_keyword(dup.id)
    assert tree.get_keyword(child.id).parent_id == py.id
    assert {i.id for i in tree.get_infos_of_keyword(py.id)} == {both.id, only.id}
    assert tree.get_keywords_of_info(only.id) == [(merged, RelationType.EXAMPLE)]
    assert [(k.id, r) for k, r in tree.get_keywords_of_info(both.id)] == [(py.id, RelationType.PRIMARY)]
    out = [(r.to_id, r.type, r.weight, r.reason) for r in tree.get_relations(py.id)]
    assert out == [(other.id, "see_also", 0.5, "why")]
    assert [(r.from_id, r.type) for r in tree.get_relations(py.id, direction="in")] == [(other.id, "compares_to")]
    assert tree.find_keywords("py3") == [merged] and tree.find_keywords("python3") == [merged]


def test_merge_refuses_same_keyword_and_merging_into_a_descendant(tree):
    a = tree.create_keyword("A")
    b = tree.create_keyword("B", a.id)
    with pytest.raises(InvalidInputError, match="same keyword"):
        tree.merge_keywords(a.id, a.id)
    with pytest.raises(CycleError):
        tree.merge_keywords(a.id, b.id)
    merged = tree.merge_keywords(b.id, a.id)  # into an ancestor is fine
    assert "B" in merged.aliases


def test_delete_requires_cascade_for_children(tree):
    a = tree.create_keyword("A")
    tree.create_keyword("B", a.id)
    with pytest.raises(HasChildrenError):
        tree.delete_keyword(a.id)
    op = tree.delete_keyword(a.id, cascade=True)
    assert op.kind == "delete_keyword"
    assert tree.get_children(ROOT_ID) == []
    with pytest.raises(NotFoundError):
        tree.delete_keyword(a.id, cascade=True)


@pytest.mark.parametrize("policy", ["reattach", "delete", "keep"])
def test_delete_info_policies(tree, policy):
    parent = tree.create_keyword("Parent")
    doomed = tree.create_keyword("Doomed", parent.id)
    leaf = tree.create_keyword("Leaf", doomed.id)
    keeper = tree.create_keyword("Keeper")
    orphan = tree.create_info("only under the doomed subtree", keyword_ids=[leaf.id])
    tree.link_info(orphan.id, doomed.id, RelationType.EXAMPLE)
    shared = tree.create_info("also linked elsewhere", keyword_ids=[doomed.id, keeper.id])
    tree.relate(leaf.id, keeper.id)
    tree.delete_keyword(doomed.id, cascade=True, info_policy=policy)
    assert tree.get_keywords_of_info(shared.id) == [(tree.get_keyword(keeper.id), RelationType.PRIMARY)]
    assert tree.get_relations(keeper.id, direction="in") == []
    if policy == "reattach":
        assert tree.get_keywords_of_info(orphan.id) == [(tree.get_keyword(parent.id), RelationType.PRIMARY)]
    elif policy == "delete":
        with pytest.raises(NotFoundError):
            tree.get_info(orphan.id)
    else:
        assert tree.get_keywords_of_info(orphan.id) == []
        assert tree.tree_metrics()["infos_without_link"] == 1


def test_batch_create_keywords_is_one_operation_with_parent_refs(tree):
    existing = tree.create_keyword("Existing")
    created = tree.batch_create_keywords(
        [
            {"name": "Food", "ref": "food"},
            {"name": "Sushi", "parent_ref": "food", "aliases": ["寿司"]},
            {"name": "Tuna", "parent_ref": "food", "ref": "tuna"},
            {"name": "Fatty tuna", "parent_ref": "tuna"},
            {"name": "Under existing", "parent_id": existing.id, "description": "d", "metadata": {"a": 1}},
        ]
    )
    assert names(created) == ["Food", "Sushi", "Tuna", "Fatty tuna", "Under existing"]
    assert len({k.op_id for k in created}) == 1
    assert names(tree.get_path(created[3].id)) == ["root", "Food", "Tuna", "Fatty tuna"]
    assert created[4].parent_id == existing.id and created[4].level == 2
    assert tree.find_keywords("寿司") == [created[1]]
    assert tree.batch_create_keywords([]) == []


def test_batch_ids_are_distinct_uuid4s(tree):
    created = tree.batch_create_keywords([{"name": f"k{i}"} for i in range(2000)])
    ids = [uuid.UUID(k.id) for k in created]
    assert all(u.version == 4 and u.variant == uuid.RFC_4122 for u in ids)
    assert [u.hex for u in ids] == [k.id for k in created] and len(set(ids)) == 2000


def test_batch_create_is_all_or_nothing(tree):
    last = tree.last_op_id
    bad_specs = [
        [{"name": "A"}, {"name": ""}],
        [{"name": "A"}, {"name": "a"}],  # duplicate siblings within the batch
        [{"name": "A", "parent_ref": "nope"}],
        [{"name": "A", "ref": "x"}, {"name": "B", "ref": "x"}],
        [{"name": "A", "parent_id": ROOT_ID, "parent_ref": "x"}],
        [{"name": "A", "colour": "red"}],
        [{"aliases": ["x"]}],
        ["not a dict"],
        [{"name": "A", "parent_id": "0" * 32}],
        [{"name": "A", "description": None}],  # (the empty description skips the check; nothing else does)
        [{"name": "A", "description": 0}],
        [{"name": "A", "description": "bad \ud800 text"}],
    ]
    for specs in bad_specs:
        with pytest.raises((InvalidInputError, NotFoundError)) as info:
            tree.batch_create_keywords(specs)
        assert str(info.value).startswith("specs[")
    assert tree.last_op_id == last
    assert tree.get_children(ROOT_ID) == []


def test_get_children_keeps_arrival_order_after_moves(tree):
    a = tree.create_keyword("A")
    b = tree.create_keyword("B")
    c = tree.create_keyword("C")
    x = tree.create_keyword("X", a.id)
    tree.move_keyword(a.id, c.id)
    tree.move_keyword(x.id, ROOT_ID)
    assert names(tree.get_children(ROOT_ID)) == ["B", "C", "X"]
    assert names(tree.get_children(c.id)) == ["A"]
    assert b.level == 1
