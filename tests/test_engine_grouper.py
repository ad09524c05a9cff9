"""Every reader of the log groups rows into operations with one grouper
(``kwtree.engine.replay.group_operations``): replay, ``parse_operations`` (the sorted replay,
git merge, upgrade, compaction) and ``history`` / ``undo``. So they agree on what an operation
is: the same operations from the same bytes, torn tails left out, copies read once, damage in
the middle of the log an error for each.

The disagreement this fixed: ``history()`` grouped lines by op id on its own and silently
skipped an operation whose end row was missing in the middle of the log, which opening,
refresh and ``verify`` all report as damage.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kwtree import ROOT_ID, CorruptLogError, KeywordTree
from kwtree.engine.replay import (
    Damage,
    group_operations,
    parse_operations,
    replay_chunk,
    scan_operations,
    whole_lines,
)
from kwtree.engine.state import State
from kwtree.testing import apply_step, log_operations, operation_sequences


def _segment(directory: Path) -> Path:
    (segment,) = (directory / "log").glob("*.jsonl")
    return segment


def _write_steps(directory: Path, steps: list[Any]) -> None:
    """A tree in ``directory`` written by the random ``steps``."""
    with KeywordTree(directory, durability="none", worker=False) as tree:
        keyword_ids, info_ids = [ROOT_ID], []
        for step in steps:
            apply_step(tree, step, keyword_ids, info_ids)


def _two_keyword_batch_then_one(directory: Path) -> tuple[str, str]:
    """A tree whose log holds a two-row operation, then a one-row one; returns their keywords."""
    with KeywordTree(directory, durability="none", worker=False) as tree:
        first, _ = tree.batch_create_keywords([{"name": "a", "parent_id": ROOT_ID},
                                               {"name": "b", "parent_id": ROOT_ID}])
        last = tree.create_keyword("c", ROOT_ID)
    return first.id, last.id


def test_history_reports_an_operation_missing_its_end_row_as_opening_does(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    in_batch, after = _two_keyword_batch_then_one(directory)
    with KeywordTree(directory, read_only=True) as tree:
        segment = _segment(directory)
        lines = segment.read_bytes().rstrip(b"\0").splitlines(keepends=True)
        end_row = next(n for n, line in enumerate(lines) if b'"name":"b"' in line)
        assert b'"end":' in lines[end_row] and b'"end":' not in lines[end_row - 1]
        segment.write_bytes(b"".join(lines[:end_row] + lines[end_row + 1:]))  # the batch loses its end row
        for entity in (None, in_batch):
            with pytest.raises(CorruptLogError, match="has no end row before operation"):
                tree.history(entity)
        # (the history of an entity reads only the operations whose rows name it)
        assert [c.after.name for op in tree.history(after) for c in op.changes] == ["c"]
    with pytest.raises(CorruptLogError, match="has no end row before operation"):
        KeywordTree(directory, read_only=True)


def test_history_undo_and_replay_read_copies_and_torn_tails_alike(tmp_path: Path) -> None:
    """A copy of an operation right after itself is read once; a torn last operation not at all."""
    directory = tmp_path / "tree"
    in_batch, after = _two_keyword_batch_then_one(directory)
    segment = _segment(directory)
    data = segment.read_bytes().rstrip(b"\0")
    lines = data.splitlines(keepends=True)
    batch = [n for n, line in enumerate(lines) if b'"name":"a"' in line or b'"name":"b"' in line]
    copied = b"".join(lines[: batch[-1] + 1] + lines[batch[0]: batch[-1] + 1] + lines[batch[-1] + 1:])
    segment.write_bytes(copied + lines[batch[0]])  # and the copy's first row again, torn
    operations, consumed, _ = parse_operations(segment.read_bytes(), "log", 1)
    assert consumed == len(copied)
    assert [op.op_id for op in operations].count(operations[-2].op_id) == 2  # the batch, and its copy
    with KeywordTree(directory, read_only=True) as tree:
        batch_op = tree.history(in_batch)
        assert len(batch_op) == 1 and [c.after.name for c in batch_op[0].changes] == ["a", "b"]
        assert [c.after.name for c in tree.history(after)[0].changes] == ["c"]
        assert len(tree.history()) == len({op.op_id for op in operations})
        assert tree.get_keyword(in_batch).version == 1  # replay applied the batch once


@given(steps=operation_sequences(min_size=1, max_size=20), cut=st.integers(0, 400))
def test_every_reader_sees_the_same_operations(steps: list[Any], cut: int) -> None:
    """From one log, cut anywhere in its last operation: replay, parse_operations, history and
    the testing helper's own reading give the same whole operations."""
    with tempfile.TemporaryDirectory(prefix="kwtree-grouper-") as tmp:
        directory = Path(tmp) / "tree"
        _write_steps(directory, steps)
        expected = [op.op_id for op in log_operations(directory)]
        segment = _segment(directory)
        data = segment.read_bytes().rstrip(b"\0")
        last = log_operations(directory)[-1].rows
        data = data[: len(data) - len(last) + min(cut, len(last) - 1)]  # the last operation torn
        segment.write_bytes(data)
        grouped = [op for op, *_ in group_operations(whole_lines(data), "log", 1, checksums=True)]
        assert grouped == expected[:-1]
        operations, consumed, _ = parse_operations(data, "log", 1, checksums=True)
        assert [op.op_id for op in operations] == grouped
        state = State()
        result = replay_chunk(state, data, "log", 1, checksums=True)
        assert result.consumed_bytes == consumed and state.last_op_id == grouped[-1] if grouped else True
        with KeywordTree(directory, read_only=True) as view:
            assert [op.op_id for op in view.history()] == grouped


# --- verify reads with the same grouper, past damage -------------------------------------------


def _damaged(data: bytes, kind: int, at: int, size: int) -> bytes:
    """``data`` with one kind of damage at byte ``at``: a zeroed block, a changed byte, a
    lost line, a line cut in two."""
    at = at % max(len(data), 1)
    if kind == 0:
        return data[:at] + bytes(min(size, len(data) - at)) + data[at + size:]
    if kind == 1:
        return data[:at] + bytes([data[at] ^ 0x21]) + data[at + 1:]
    start = data.rfind(b"\n", 0, at) + 1
    stop = data.find(b"\n", at) + 1 or len(data)
    if kind == 2:
        return data[:start] + data[stop:]
    return data[:at] + b"\n" + data[at:]


@given(steps=operation_sequences(min_size=1, max_size=12), kind=st.integers(0, 3), at=st.integers(0, 10**6),
       size=st.integers(1, 300))
def test_verify_reads_the_operations_replay_reads_up_to_the_first_damage(
    steps: list[Any], kind: int, at: int, size: int
) -> None:
    """scan_operations (verify's reading) and group_operations (every other reader) are one
    grouper: on an intact log they yield the same operations and no damage; on a damaged one
    the operations before the first damage are the ones group_operations yields before it
    raises, every line is accounted for once, and what follows the damage is read on."""
    with tempfile.TemporaryDirectory(prefix="kwtree-grouper-") as tmp:
        directory = Path(tmp) / "tree"
        _write_steps(directory, steps)
        intact = _segment(directory).read_bytes().rstrip(b"\0")
    lines = whole_lines(intact)
    scanned = list(scan_operations(lines, "log", 1, checksums=True))
    assert not any(isinstance(item, Damage) for item in scanned)
    assert [item[:3] for item in scanned] == [item[:3] for item in group_operations(lines, "log", 1, checksums=True)]

    lines = whole_lines(_damaged(intact, kind, at, size))
    scanned = list(scan_operations(lines, "log", 1, checksums=True))
    strict: list[tuple[str, int, int]] = []
    raised = None
    try:
        strict.extend(item[:3] for item in group_operations(lines, "log", 1, checksums=True))
    except CorruptLogError as exc:
        raised = exc
    first_damage = next((n for n, item in enumerate(scanned) if isinstance(item, Damage)), len(scanned))
    assert (raised is None) == (first_damage == len(scanned))
    before = [item[:3] for item in scanned[:first_damage] if not isinstance(item, Damage)]
    assert before == strict
    covered = 0  # every line once: in an operation, a damaged line, a cut-short operation, or the tail
    for item in scanned:
        if isinstance(item, Damage) and item.kind == "line":
            assert item.start == covered
            covered = item.start if item.cut >= 0 else item.stop
        else:
            start, stop = (item.start, item.stop) if isinstance(item, Damage) else item[1:3]
            assert start == covered and stop > start
            covered = stop
    assert covered <= len(lines)
