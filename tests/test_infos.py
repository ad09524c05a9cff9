"""Infos, links and relations."""

from __future__ import annotations

import pytest

from kwtree import (
    InvalidInputError,
    NotFoundError,
    RelationType,
    VersionConflictError,
)


@pytest.fixture
def two(tree):
    return tree.create_keyword("Python"), tree.create_keyword("Go")


def test_create_info_links_as_primary_and_reads_back(tree, two):
    py, go = two
    info = tree.create_info("uses both", source="chat", keyword_ids=[py.id, go.id, py.id], metadata={"score": 0.5})
    assert (info.content, info.source, dict(info.metadata), info.version) == ("uses both", "chat", {"score": 0.5}, 1)
    assert tree.get_info(info.id) == info
    assert tree.get_keywords_of_info(info.id) == [(py, RelationType.PRIMARY), (go, RelationType.PRIMARY)]
    assert tree.get_infos_of_keyword(py.id) == [info]


def test_relation_filter_and_pagination(tree, two):
    py, _ = two
    examples = [tree.create_info(f"example {n}") for n in range(5)]
    related = tree.create_info("related")
    for info in examples:
        tree.link_info(info.id, py.id, RelationType.EXAMPLE)
    tree.link_info(related.id, py.id, "related")
    assert tree.get_infos_of_keyword(py.id, RelationType.EXAMPLE) == examples
    assert tree.get_infos_of_keyword(py.id, RelationType.RELATED) == [tree.get_info(related.id)]
    assert tree.get_infos_of_keyword(py.id, "example", page=1, size=2) == examples[2:4]
    assert tree.get_infos_of_keyword(py.id, page=3, size=2) == []
    assert tree.get_infos_of_keyword(py.id, RelationType.SOURCE) == []


def test_relinking_changes_the_relation_and_same_link_writes_nothing(tree, two):
    py, _ = two
    info = tree.create_info("x", keyword_ids=[py.id])
    last = tree.last_op_id
    same = tree.link_info(info.id, py.id, RelationType.PRIMARY)
    assert tree.last_op_id == last and same.relation is RelationType.PRIMARY
    changed = tree.link_info(info.id, py.id, RelationType.SOURCE, created_by="agent")
    assert (changed.relation, changed.created_by, changed.version) == (RelationType.SOURCE, "agent", 2)
    assert tree.get_keywords_of_info(info.id) == [(py, RelationType.SOURCE)]


def test_unlink_and_relink(tree, two):
    py, _ = two
    info = tree.create_info("x", keyword_ids=[py.id])
    op = tree.unlink_info(info.id, py.id)
    assert op.kind == "unlink_info" and op.entity_ids == (f"{info.id}/{py.id}",)
    assert tree.get_infos_of_keyword(py.id) == [] and tree.get_keywords_of_info(info.id) == []
    with pytest.raises(NotFoundError, match="not linked"):
        tree.unlink_info(info.id, py.id)
    link = tree.link_info(info.id, py.id)
    assert link.version == 3  # created, deleted, created again


def test_update_and_delete_info(tree, two):
    py, _ = two
    info = tree.create_info("first", keyword_ids=[py.id])
    updated = tree.update_info(info.id, {"content": "second", "metadata": {"a": (1, 2)}})
    assert (updated.content, updated.version, dict(updated.metadata)) == ("second", 2, {"a": [1, 2]})
    with pytest.raises(VersionConflictError):
        tree.update_info(info.id, {"source": "s"}, version=1)
    assert tree.update_info(info.id, {"source": "s"}, version=2).source == "s"
    with pytest.raises(InvalidInputError, match="unknown field"):
        tree.update_info(info.id, {"keyword_ids": []})
    op = tree.delete_info(info.id)
    assert sorted(op.entity_ids) == sorted([info.id, f"{info.id}/{py.id}"])
    with pytest.raises(NotFoundError, match="deleted"):
        tree.get_info(info.id)
    assert tree.get_infos_of_keyword(py.id) == []


def test_batch_create_infos_is_one_operation(tree, two):
    py, go = two
    infos = tree.batch_create_infos(
        [{"content": "a", "keyword_ids": [py.id]}, {"content": "b", "source": "s", "keyword_ids": [py.id, go.id]}]
    )
    assert [i.content for i in infos] == ["a", "b"]
    assert len(tree.history(limit=1)[0].changes) == 5
    assert tree.get_infos_of_keyword(py.id) == infos
    last = tree.last_op_id
    with pytest.raises(NotFoundError, match=r"^specs\[1\]\.keyword_ids\[0\]: no keyword has id"):
        tree.batch_create_infos([{"content": "c"}, {"content": "d", "keyword_ids": ["0" * 32]}])
    refused = {  # each message names the spec and its field
        r"^specs\[0\]\.content must not be empty": [{"content": "   "}],
        r"^specs\[1\]\.source must be a string": [{"content": "c"}, {"content": "d", "source": None}],
        r"^specs\[0\]\.metadata must be a dict": [{"content": "c", "metadata": [1]}],
        r"^specs\[0\]\.provenance must be one of": [{"content": "c", "provenance": "me"}],
        r"^specs\[0\]\.keyword_ids must be a list": [{"content": "c", "keyword_ids": py.id}],
        r"^specs\[0\]\.keyword_ids\[1\] must be a non-empty id string": [{"content": "c", "keyword_ids": [py.id, 5]}],
        r"^specs\[1\]\.content must not be empty": [{"content": "c"}, {"content": "\u2003\t"}],
        r"^specs\[0\] has unknown field\(s\) text": [{"text": "c"}],
        r"^specs\[1\] must be a dict": [{"content": "c"}, "d"],
    }
    for message, specs in refused.items():
        with pytest.raises(InvalidInputError, match=message):
            tree.batch_create_infos(specs)
    assert tree.last_op_id == last


def test_relations_directions_types_and_reweighting(tree, two):
    py, go = two
    rust = tree.create_keyword("Rust")
    a = tree.relate(py.id, go.id)
    b = tree.relate(py.id, rust.id, "see_also", weight=2, reason="systems")
    c = tree.relate(rust.id, py.id, "inspired_by")
    assert (a.type, a.weight) == ("related_to", 1.0) and b.weight == 2.0
    assert tree.get_relations(py.id) == [a, b]
    assert tree.get_relations(py.id, type="see_also") == [b]
    assert tree.get_relations(py.id, direction="in") == [c]
    assert tree.get_relations(py.id, direction="both") == [a, b, c]
    last = tree.last_op_id
    assert tree.relate(py.id, go.id) == a and tree.last_op_id == last
    reweighted = tree.relate(py.id, go.id, weight=0.25)
    assert (reweighted.weight, reweighted.version) == (0.25, 2)
    with pytest.raises(InvalidInputError, match="itself"):
        tree.relate(py.id, py.id)
    op = tree.unrelate(py.id, rust.id)
    assert op.entity_ids == (f"{py.id}/{rust.id}/see_also",)
    with pytest.raises(NotFoundError, match="no 'see_also' relation"):
        tree.unrelate(py.id, rust.id, "see_also")
    tree.relate(py.id, go.id, "uses")
    assert len(tree.unrelate(py.id, go.id).changes) == 2  # every type when type is None


def test_relations_to_deleted_keywords_are_removed(tree, two):
    py, go = two
    tree.relate(py.id, go.id)
    tree.relate(go.id, py.id)
    tree.delete_keyword(go.id)
    assert tree.get_relations(py.id, direction="both") == []
    assert tree.tree_metrics()["relations"] == 0
