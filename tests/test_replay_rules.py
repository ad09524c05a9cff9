"""Replay rules for merged histories (DESIGN §3): two forks of one directory written
independently, their operations united in any order, replay to one deterministic state."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import orjson
import pytest
from helpers import copy_tree_dir, snapshot

from kwtree import ROOT_ID, CorruptLogError, KeywordTree, NotFoundError


def operations(data_dir: Path) -> dict[str, list[bytes]]:
    """op id -> its row lines, from every segment of a directory."""
    ops: dict[str, list[bytes]] = {}
    for segment in sorted((data_dir / "log").glob("*.jsonl")):
        for line in segment.read_bytes().rstrip(b"\0").splitlines():
            ops.setdefault(orjson.loads(line)["op"], []).append(line)
    return ops


def merged(target: Path, *forks: Path, order: str = "sorted", seed: int = 0) -> Path:
    """A directory whose single segment holds the union of the forks' operations."""
    union: dict[str, list[bytes]] = {}
    for fork in forks:
        union.update(operations(fork))
    ids = sorted(union)
    if order == "shuffled":
        random.Random(seed).shuffle(ids)
    elif order == "reversed":
        ids.reverse()
    target.mkdir()
    shutil.copy(forks[0] / "manifest.json", target / "manifest.json")
    (target / "log").mkdir()
    rows = [line for op in ids for line in union[op]]
    (target / "log" / f"{min(ids)}.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    return target


@pytest.fixture
def fork(tmp_path):
    """Build a base tree with ``setup(tree) -> dict``, then copy it into two forks."""

    def make(setup):
        base = tmp_path / "base"
        with KeywordTree(base, durability="none") as tree:
            ids = setup(tree)
        return ids, copy_tree_dir(base, tmp_path / "one"), copy_tree_dir(base, tmp_path / "two")

    return make


def read_all(tmp_path: Path, *forks: Path) -> list[dict]:
    """Snapshots of the merged forks in several line orders (they must all be equal)."""
    snaps = []
    for index, (order, seed) in enumerate([("sorted", 0), ("reversed", 0), ("shuffled", 1), ("shuffled", 2)]):
        with KeywordTree(merged(tmp_path / f"merged{index}", *forks, order=order, seed=seed), read_only=True) as tree:
            snaps.append(snapshot(tree))
    return snaps


def test_concurrent_moves_that_would_form_a_cycle(fork, tmp_path):
    ids, one, two = fork(lambda t: {"a": t.create_keyword("A").id, "b": t.create_keyword("B").id})
    with KeywordTree(one, durability="none") as t:
        a_under_b = t.move_keyword(ids["a"], ids["b"]).op_id
    with KeywordTree(two, durability="none") as t:
        b_under_a = t.move_keyword(ids["b"], ids["a"]).op_id
    snaps = read_all(tmp_path, one, two)
    assert all(s == snaps[0] for s in snaps)
    # Ids order the two moves (within one millisecond their random part does); the first one
    # applies, the second would close a cycle and is skipped.
    first, second = ("a", "b") if a_under_b < b_under_a else ("b", "a")
    with KeywordTree(tmp_path / "merged0", read_only=True) as tree:
        assert tree.get_keyword(ids[first]).parent_id == ids[second]
        assert tree.get_keyword(ids[second]).parent_id == ROOT_ID
        assert [k.id for k in tree.get_path(ids[first])] == [ROOT_ID, ids[second], ids[first]]


def test_child_added_under_a_parent_deleted_in_the_other_fork_moves_under_root(fork, tmp_path):
    ids, one, two = fork(lambda t: {"p": t.create_keyword("P").id})
    with KeywordTree(two, durability="none") as t:
        child = t.create_keyword("C", ids["p"])
        grandchild = t.create_keyword("G", child.id)
    with KeywordTree(one, durability="none") as t:
        t.delete_keyword(ids["p"])  # whichever op id is lower, the child ends under root
    snaps = read_all(tmp_path, one, two)
    assert all(s == snaps[0] for s in snaps)
    with KeywordTree(tmp_path / "merged0", read_only=True) as tree:
        with pytest.raises(NotFoundError):
            tree.get_keyword(ids["p"])
        assert tree.get_keyword(child.id).parent_id == ROOT_ID
        assert tree.get_keyword(child.id).level == 1 and tree.get_keyword(grandchild.id).level == 2
        assert [k.name for k in tree.get_children(ROOT_ID)] == ["C"]


def test_create_under_an_already_deleted_parent_lands_under_root(fork, tmp_path):
    ids, one, two = fork(lambda t: {"p": t.create_keyword("P").id})
    with KeywordTree(one, durability="none") as t:
        t.delete_keyword(ids["p"])
    with KeywordTree(two, durability="none") as t:
        child = t.create_keyword("C", ids["p"])  # in either order: under a deleted parent, or orphaned
    with KeywordTree(merged(tmp_path / "m", one, two), read_only=True) as tree:
        assert tree.get_keyword(child.id).parent_id == ROOT_ID


def test_last_writer_wins_even_after_a_delete(fork, tmp_path):
    ids, one, two = fork(lambda t: {"k": t.create_keyword("K").id})
    with KeywordTree(one, durability="none") as t:
        deleted = t.delete_keyword(ids["k"]).op_id
    with KeywordTree(two, durability="none") as t:
        edited = t.update_keyword(ids["k"], {"description": "edited"}, version=1).op_id
    snaps = read_all(tmp_path, one, two)
    assert all(s == snaps[0] for s in snaps)
    with KeywordTree(tmp_path / "merged0", read_only=True) as tree:
        if edited > deleted:  # the edit is the last write: the keyword lives, edited
            revived = tree.get_keyword(ids["k"])
            assert revived.description == "edited"
            assert revived.version == 3  # created, deleted, edited: the number of writes applied
            assert tree.find_keywords("k") == [revived]
        else:  # the delete is the last write
            with pytest.raises(NotFoundError, match="deleted"):
                tree.get_keyword(ids["k"])
            assert tree.find_keywords("k") == []


def test_concurrent_edits_of_one_keyword_keep_the_later_one(fork, tmp_path):
    ids, one, two = fork(lambda t: {"k": t.create_keyword("K").id})
    with KeywordTree(one, durability="none") as t:
        first = t.update_keyword(ids["k"], {"name": "First"}, version=1)
    with KeywordTree(two, durability="none") as t:
        second = t.update_keyword(ids["k"], {"name": "Second", "aliases": ["2nd"]}, version=1)
    later, earlier = (second, first) if second.op_id > first.op_id else (first, second)
    with KeywordTree(merged(tmp_path / "m", one, two), read_only=True) as tree:
        k = tree.get_keyword(ids["k"])
        assert (k.name, k.aliases, k.version) == (later.name, later.aliases, 3)
        assert tree.find_keywords(later.name) == [k] and tree.find_keywords(earlier.name) == []


def test_links_and_relations_to_a_deleted_keyword_are_inert(fork, tmp_path):
    def setup(t):
        return {"k": t.create_keyword("K").id, "o": t.create_keyword("O").id, "i": t.create_info("memo").id}

    ids, one, two = fork(setup)
    with KeywordTree(one, durability="none") as t:
        t.delete_keyword(ids["k"])
    with KeywordTree(two, durability="none") as t:
        t.link_info(ids["i"], ids["k"])
        t.relate(ids["o"], ids["k"])
    with KeywordTree(merged(tmp_path / "m", one, two), read_only=True) as tree:
        assert tree.get_keywords_of_info(ids["i"]) == []
        assert tree.get_relations(ids["o"]) == []
        metrics = tree.tree_metrics()
        assert (metrics["links"], metrics["relations"], metrics["infos_without_link"]) == (0, 0, 1)


def test_a_duplicated_operation_is_applied_once(tree_dir, tmp_path):
    with KeywordTree(tree_dir, durability="none") as tree:
        a = tree.create_keyword("A")
        tree.update_keyword(a.id, {"description": "x"}, version=1)
        expected = snapshot(tree)
    segment = next((tree_dir / "log").glob("*.jsonl"))
    lines = segment.read_bytes().splitlines()
    segment.write_bytes(b"\n".join([*lines, lines[1]]) + b"\n")  # the create again, at the end
    with KeywordTree(tree_dir, read_only=True) as reopened:
        assert snapshot(reopened) == expected


def test_a_writer_keeps_working_on_a_merged_log(fork, tmp_path):
    ids, one, two = fork(lambda t: {"a": t.create_keyword("A").id})
    with KeywordTree(one, durability="none") as t:
        t.create_keyword("from one")
    with KeywordTree(two, durability="none") as t:
        t.create_keyword("from two")
    target = merged(tmp_path / "m", one, two, order="reversed")
    with KeywordTree(target, durability="none") as tree:
        new = tree.create_keyword("after merge", ids["a"])
        assert new.op_id > max(operations(one)) and new.op_id > max(operations(two))
    with KeywordTree(target, read_only=True) as tree:
        assert sorted(k.name for k in tree.get_children(ROOT_ID)) == ["A", "from one", "from two"]


def test_corrupt_lines_are_reported_with_file_and_line(tree_dir):
    with KeywordTree(tree_dir, durability="none") as tree:
        for name in "ABC":
            tree.create_keyword(name)
    segment = next((tree_dir / "log").glob("*.jsonl"))
    lines = segment.read_bytes().splitlines()
    for broken, detail in [(b'{"op": oops', "unreadable"), (b"[1, 2]", "not a row"),
                           (lines[2].replace(b'"name"', b'"nom"'), "missing field")]:
        segment.write_bytes(b"\n".join([*lines[:2], broken, *lines[3:]]) + b"\n")
        with pytest.raises(CorruptLogError) as error:
            KeywordTree(tree_dir, read_only=True)
        assert (error.value.path, error.value.line) == (str(segment), 3)
        assert f"{segment}:3:" in str(error.value) and detail in str(error.value)
