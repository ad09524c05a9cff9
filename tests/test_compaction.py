"""compact(): every public read survives it, crashes leave the old log or the new one, and
other processes replay the new log (DESIGN §4 invariant 7)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from helpers import log_bytes, snapshot
from hypothesis import given
from hypothesis import strategies as st
from test_properties import FORK_STEP, apply_fork_step, split_operations, write_merged

from kwtree import (
    FormatError,
    InvalidInputError,
    KeywordTree,
    NotFoundError,
    ReadOnlyError,
)
from kwtree.engine.state import State
from kwtree.ops.compaction import differences
from kwtree.stores import logswap

ROOT = Path(__file__).resolve().parent.parent


def build(path: Path, steps, segment_bytes: int | None = None) -> tuple[list[str], list[str]]:
    with KeywordTree(path, durability="none", worker=False, segment_bytes=segment_bytes) as tree:
        a = tree.create_keyword("a")
        b = tree.create_keyword("b", a.id)
        d = tree.create_keyword("d")
        kids, iids = ["root", a.id, b.id, d.id], [tree.create_info("m1", keyword_ids=[b.id, d.id]).id]
        tree.relate(a.id, d.id)
        for _, action, x, y, z in steps:
            apply_fork_step(tree, kids, iids, action, x, y, z)
    return kids, iids


def reads(tree: KeywordTree, kids: list[str], iids: list[str]) -> dict:
    """Every public read about the live entities (the operation count is a size of the log,
    like its bytes: compaction changes it)."""
    live_kids = [k for k in kids if _live(tree.get_keyword, k)]
    live_iids = [i for i in iids if _live(tree.get_info, i)]
    snap = snapshot(tree, live_kids, live_iids)
    del snap["metrics"]["operations"]
    snap["last_op_id"] = tree.last_op_id
    snap["recall"] = [hit.info.id for hit in tree.recall("note m1 edited", k=10, mode="bm25")]
    return snap


def _live(get, entity_id: str) -> bool:
    try:
        get(entity_id)
        return True
    except NotFoundError:
        return False


@pytest.mark.slow
@given(steps=st.lists(FORK_STEP, max_size=30), keep_history=st.booleans(), small_segments=st.booleans())
def test_compaction_preserves_every_read_and_later_writes(steps, keep_history, small_segments) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree"
        kids, iids = build(path, steps, 4096 if small_segments else None)
        with KeywordTree(path, durability="none", worker=False) as tree:
            before = reads(tree, kids, iids)
            report = tree.compact(keep_history=keep_history)
            assert reads(tree, kids, iids) == before
            note = sum(len(line) + 1 for path in (path / "log").glob("*.jsonl")  # (what it replaced: one row)
                       for line in path.read_bytes().splitlines() if b'"entity":"note"' in line)
            assert report.rows_after - (note > 0) <= report.rows_before
            assert report.bytes_after - note <= report.bytes_before
        with KeywordTree(path, durability="none", worker=False) as tree:
            assert reads(tree, kids, iids) == before
            # Versions go on counting: an optimistic update with the version read still works.
            for kid in kids[1:]:
                if _live(tree.get_keyword, kid):
                    old = tree.get_keyword(kid)
                    assert tree.update_keyword(kid, {"description": "later"}, old.version).version == old.version + 1
        assert not logswap.interrupted(path)


def test_compaction_drops_superseded_rows_and_reports_sizes(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        keyword = tree.create_keyword("Topic")
        for n in range(20):
            keyword = tree.update_keyword(keyword.id, {"description": f"v{n}"}, keyword.version)
        gone = tree.create_info("deleted soon", keyword_ids=[keyword.id])
        tree.delete_info(gone.id)
        kept = tree.create_info("kept", keyword_ids=[keyword.id])
        last = tree.last_op_id
        report = tree.compact()
        assert (report.rows_before, report.operations_before) == (1 + 21 + 2 + 2 + 2, 1 + 21 + 2 + 1)
        # root, Topic, kept, its link; and the note that says which log the compaction replaced
        assert (report.rows_after, report.operations_after) == (4 + 1, 1)
        assert report.bytes_after < report.bytes_before and not report.keep_history
        assert tree.last_op_id == last and tree.get_keyword(keyword.id).version == 21
        assert [op.kind for op in tree.history()] == ["compact"]
        with pytest.raises(NotFoundError, match="compact"):
            tree.undo(gone.op_id)  # its creation was folded away
        with pytest.raises(InvalidInputError, match="compaction"):
            tree.undo(last)
        assert tree.get_info(kept.id).content == "kept"


def test_compaction_with_history_keeps_every_operation_once_in_order(tmp_path: Path) -> None:
    kids, iids = build(tmp_path / "a", [])
    with KeywordTree(tmp_path / "a", durability="none", worker=False) as tree:
        tree.create_keyword("later", kids[1])
        ops = split_operations(log_bytes(tmp_path / "a"))
    # A merged log: operations shuffled, some twice.
    shuffled = ops[1:] + ops[:1] + ops[2:4]
    random.Random(7).shuffle(shuffled)
    merged = write_merged(tmp_path / "m", tmp_path / "a", [ops[0], *shuffled])
    with KeywordTree(merged, durability="none", worker=False) as tree:
        before = reads(tree, kids, iids)
        history = [op.op_id for op in tree.history()]
        report = tree.compact(keep_history=True)
        assert report.operations_after == len(ops) < report.operations_before
        assert [op.op_id for op in tree.history()] == sorted(history) == [op_id for op_id, _, _ in ops]
        assert reads(tree, kids, iids) == before
        assert tree.undo(tree.last_op_id) is not None  # before-images kept: undo still works
    assert log_bytes(merged) != b"".join(rows for _, rows, _ in ops)  # the undo was appended


def test_compaction_refuses_bad_input_and_read_only_trees(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        tree.create_keyword("x")
        before = log_bytes(tree_dir)
        with pytest.raises(InvalidInputError, match="keep_history"):
            tree.compact(keep_history="yes")  # type: ignore[arg-type]
        assert log_bytes(tree_dir) == before
    with KeywordTree(tree_dir, read_only=True) as view, pytest.raises(ReadOnlyError):
        view.compact()


def test_differences_names_what_a_read_would_see() -> None:
    from kwtree.models import Keyword

    one, two = State(), State()
    for state in (one, two):
        state.put_keyword(Keyword("root", "", (), None, "", {}, 1, 0.0, 0.0, False, "0" * 32))
    assert differences(one, two) == []
    two.put_keyword(Keyword("k", "x", (), "root", "", {}, 1, 0.0, 0.0, False, "0" * 32))
    assert any(found.startswith("keywords:") for found in differences(one, two))


# --- other processes ---------------------------------------------------------------------------

COMPACT = ("from kwtree import KeywordTree\nimport sys\n"
           "KeywordTree(sys.argv[1], worker=False).compact(keep_history=sys.argv[2] == '1')\n")


def test_open_trees_in_this_process_replay_a_log_another_process_compacted(tree_dir: Path) -> None:
    kids, iids = build(tree_dir, [("A", "info", 1, 0, 3), ("A", "rename", 2, 0, 5), ("A", "delete_info", 0, 0, 0)])
    writer = KeywordTree(tree_dir, worker=False)  # durable: its newest segment carries padding
    reader = KeywordTree(tree_dir, read_only=True)
    try:
        before = reads(writer, kids, iids)
        subprocess.run([sys.executable, "-c", COMPACT, str(tree_dir), "0"], check=True, cwd=ROOT, timeout=120)
        assert [op.kind for op in KeywordTree(tree_dir, read_only=True).history()] == ["compact"]
        reader.refresh()
        assert reads(reader, kids, iids) == before
        new = writer.create_keyword("after compaction")  # catches up first, then appends to the new log
        after = reads(writer, kids, iids)
        assert after["last_op_id"] == new.op_id and new.id in after["keywords"]["root"]["children"]
        assert reader.refresh() == 1 and reader.get_keyword(new.id).name == "after compaction"
    finally:
        writer.close()
        reader.close()
    with KeywordTree(tree_dir, read_only=True) as fresh:
        assert fresh.get_keyword(new.id).name == "after compaction"
        assert [op.kind for op in fresh.history()] == ["compact", "create_keyword"]
        assert reads(fresh, kids, iids) == after


CRASHER = textwrap.dedent("""
    import sys
    from kwtree import KeywordTree
    from kwtree.stores import logswap
    if sys.argv[2] == "rename":
        logswap._exchange = lambda first, second: False  # the portable three-rename path
    with KeywordTree(sys.argv[1], worker=False) as tree:
        print("ready", flush=True)
        n = 0
        while True:
            tree.compact(keep_history=n % 2 == 1)
            n += 1
""")


@pytest.mark.slow
@pytest.mark.parametrize("path", ["exchange", "rename"])
def test_killing_a_compacting_process_leaves_the_old_log_or_the_new_one(tmp_path: Path, path: str) -> None:
    source = tmp_path / "source"
    kids, iids = build(source, [("A", "info", n, 0, n) for n in range(40)] + [("A", "rename", 1, 0, 2)] * 30)
    with KeywordTree(source, durability="none", worker=False) as tree:
        tree.batch_create_infos([{"content": f"bulk {n}", "keyword_ids": [kids[n % 4]]} for n in range(3000)])
        for n in range(300):
            k = tree.get_keyword(kids[1 + n % 3])
            tree.update_keyword(k.id, {"description": f"rev {n}"}, k.version)
        expected = reads(tree, kids, iids)
    rng = random.Random(path)
    for attempt in range(4):
        work = tmp_path / f"run{attempt}"
        shutil.copytree(source, work)
        child = subprocess.Popen([sys.executable, "-c", CRASHER, str(work), path], cwd=ROOT,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 1.5))
        child.kill()
        child.wait()
        try:
            with KeywordTree(work, read_only=True) as view:
                assert reads(view, kids, iids) == expected
        except FormatError as exc:  # only between the renames of the portable path
            assert path == "rename" and "log/" in str(exc)
        with KeywordTree(work, worker=False) as tree:  # a writer finishes or discards the swap
            assert reads(tree, kids, iids) == expected
        assert not logswap.interrupted(work)
        shutil.rmtree(work)


def _new_log_of(source: Path, tmp_path: Path) -> Path:
    """The directory a finished compaction of a copy of ``source`` put in place."""
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    with KeywordTree(copy, durability="none", worker=False) as tree:
        tree.compact()
    return copy / "log"


@pytest.mark.parametrize("leftover", ["compacting", "compacted with the old log", "compacted without a log",
                                      "old beside the new log"])
def test_opening_finishes_or_discards_an_interrupted_swap(tmp_path: Path, leftover: str) -> None:
    source = tmp_path / "tree"
    kids, iids = build(source, [("A", "info", 1, 0, 1), ("A", "rename", 1, 0, 4), ("A", "delete", 3, 0, 0)])
    with KeywordTree(source, read_only=True) as view:
        expected = reads(view, kids, iids)
    old_rows = log_bytes(source)
    new_log = _new_log_of(source, tmp_path)
    if leftover == "compacting":  # crashed while writing the new log: a partial copy
        shutil.copytree(new_log, source / logswap.COMPACTING_DIR)
        segment = next((source / logswap.COMPACTING_DIR).iterdir())
        segment.write_bytes(segment.read_bytes()[:50])
    elif leftover == "compacted with the old log":  # committed, not yet swapped
        shutil.copytree(new_log, source / logswap.COMPACTED_DIR)
    elif leftover == "compacted without a log":  # between the two renames
        shutil.copytree(new_log, source / logswap.COMPACTED_DIR)
        os.rename(source / "log", source / logswap.OLD_LOG_DIR)
        with pytest.raises(FormatError, match="log/"):
            KeywordTree(source, read_only=True)
    else:  # swapped, the old log not yet removed
        os.rename(source / "log", source / logswap.OLD_LOG_DIR)
        shutil.copytree(new_log, source / "log")
    with KeywordTree(source, worker=False) as tree:
        assert reads(tree, kids, iids) == expected
        compacted = [op.kind for op in tree.history()] == ["compact"]
    assert compacted == (leftover != "compacting")
    assert (log_bytes(source) == old_rows) == (leftover == "compacting")
    assert not logswap.interrupted(source)


def test_a_view_by_time_reads_a_compacted_log(tree_dir: Path) -> None:
    """A view by time replays in op-id order, which must accept a compact operation that
    starts with the root and goes on with other rows."""
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        parent = tree.create_keyword("x")
        tree.create_keyword("y", parent.id)
        tree.compact()
        stamp = time.time()
        tree.create_keyword("z")
    with KeywordTree(tree_dir, as_of=stamp) as view:
        assert [k.name for k in view.get_children("root")] == ["x"]
        assert [k.name for k in view.get_children(parent.id)] == ["y"]
