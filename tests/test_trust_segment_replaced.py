"""A log segment replaced under an open tree by another file of the same name (what a git
merge, pull or checkout, rsync and file-sync tools do: write a new file, rename it over the
old one). A process that kept reading (or appending to) the file it had open would go on
with the old, unlinked one: its reads would never show what the new file holds or what others
append to it, and its writes would go where no one reads them. It must read the new log from
its start instead, as after a compaction."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kwtree import KeywordTree
from kwtree.models import ROOT_ID


def _contents(tree: KeywordTree, keyword_id: str) -> set[str]:
    return {info.content for info in tree.get_infos_of_keyword(keyword_id)}


def _swap_log(source: Path, target: Path) -> None:
    """Put ``source``'s segments in ``target``'s log as git does: each one written to a new
    file, renamed over the old."""
    for segment in sorted((source / "log").glob("*.jsonl")):
        temporary = target / "log" / f".{segment.name}.tmp"
        shutil.copyfile(segment, temporary)
        os.replace(temporary, target / "log" / segment.name)


def test_open_trees_follow_a_log_whose_segment_was_renamed_over(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    with KeywordTree(here, worker=False) as tree:
        topic = tree.create_keyword("Python", llm_auto_place=False).id
        tree.create_info("base fact", keyword_ids=[topic])
    shutil.copytree(here, there)
    with KeywordTree(there, worker=False) as other:
        other.create_info("okapi, written on the other machine", keyword_ids=[topic])
    reader = KeywordTree(here, read_only=True, worker=False)
    writer = KeywordTree(here, worker=False)
    try:
        assert _contents(reader, topic) == {"base fact"}
        _swap_log(there, here)  # (the other side's log holds this one's and one more operation)
        reader.refresh()
        assert _contents(reader, topic) == {"base fact", "okapi, written on the other machine"}
        # a write after the swap, by a writer opened before it: it lands in the new file
        writer.create_info("yak, written after the swap", keyword_ids=[topic])
        assert _contents(writer, topic) == {"base fact", "okapi, written on the other machine",
                                            "yak, written after the swap"}
        reader.refresh()
        assert _contents(reader, topic) == _contents(writer, topic)
    finally:
        reader.close()
        writer.close()
    with KeywordTree(here, worker=False) as reopened:  # what the log holds: every acknowledged write
        assert _contents(reopened, topic) == {"base fact", "okapi, written on the other machine",
                                              "yak, written after the swap"}
        assert [k.name for k in reopened.get_children(ROOT_ID)] == ["Python"]
        assert reopened.verify().ok


def test_a_segment_that_sorts_before_the_open_one_is_read_as_itself(tmp_path: Path) -> None:
    """A segment added before the one an open tree holds (a git merge brings the other side's):
    each segment is read under its own name, never the file held open for another (found in
    review: the open file of the old list's position was read again, labelled with the new
    segment's name)."""
    with KeywordTree(tmp_path / "earlier", worker=False) as other:
        other.create_keyword("FromEarlier", llm_auto_place=False)
    with KeywordTree(tmp_path / "tree", worker=False) as tree:
        tree.create_keyword("FromTree", llm_auto_place=False)
    reader = KeywordTree(tmp_path / "tree", read_only=True, worker=False)
    try:
        assert len(reader.history()) == 2
        (segment,) = (tmp_path / "earlier" / "log").glob("*.jsonl")
        shutil.copyfile(segment, tmp_path / "tree" / "log" / segment.name)
        kinds = [(op.kind, op.changes[0].after.name) for op in reader.history() if op.kind == "create_keyword"]
        assert sorted(kinds) == [("create_keyword", "FromEarlier"), ("create_keyword", "FromTree")]
    finally:
        reader.close()
