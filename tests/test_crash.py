"""Crash safety of the event log, with real files: truncation at every byte offset, torn
tails with and without preallocated zero padding, quarantine of torn bytes by the next
writer, corrupt lines reported at file:line, and trimming of the padding.

DESIGN.md §3 (the event log) and §4.2 (atomicity). No mocks: every test writes a real data
directory, damages its bytes the way a crash or a bad disk would, and reopens it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import orjson
import pytest
from helpers import copy_tree_dir, snapshot

from kwtree import CorruptLogError, KeywordTree, NotFoundError
from kwtree.stores.eventlog import seals_start

PAD = bytes(4096)  # what a crash leaves after the data of a preallocated segment


# --- helpers --------------------------------------------------------------------------------


def segment_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "log").glob("*.jsonl"))


def only_segment(data_dir: Path) -> Path:
    segments = segment_files(data_dir)
    assert len(segments) == 1, segments
    return segments[0]


def data_length(segment: Path) -> int:
    """Bytes of log data in a segment: up to the first NUL (preallocated padding)."""
    return len(segment.read_bytes().split(b"\0")[0])


def split_lines(data: bytes) -> list[tuple[int, int, dict]]:
    """(start, end, row) of every complete line; ``end`` is just past its newline."""
    rows, pos = [], 0
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            return rows
        rows.append((pos, nl + 1, orjson.loads(data[pos:nl])))
        pos = nl + 1


def op_ends(data: bytes) -> list[int]:
    """Byte offset just past the end row of each operation, in file order."""
    return [end for _, end, row in split_lines(data) if "end" in row]


def op_line_ranges(data: bytes) -> list[tuple[int, int]]:
    """(first line, last line), 1-based, of each operation in file order."""
    ranges, first = [], 1
    for number, (_, _, row) in enumerate(split_lines(data), start=1):
        if "end" in row:
            ranges.append((first, number))
            first = number + 1
    return ranges


def quiet_replay(caplog: pytest.LogCaptureFixture) -> None:
    """Thousands of opens of torn logs each log a warning; keep them out of the report."""
    caplog.set_level(logging.ERROR, logger="kwtree")


class History:
    """A durable tree built op by op, with the public state recorded after every op."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.snaps: list[dict] = []  # snaps[k]: state after the first k+1 operations (root is op 1)
        self.known: list[tuple[list[str], list[str]]] = []  # (keyword ids, info ids) known then
        self.keyword_ids: list[str] = []
        self.info_ids: list[str] = []

    def record(self, tree: KeywordTree) -> None:
        kids, iids = list(self.keyword_ids), list(self.info_ids)
        self.snaps.append(snapshot(tree, kids, iids))
        self.known.append((kids, iids))

    def check(self, tree: KeywordTree, whole_ops: int) -> None:
        """``tree`` shows exactly the state after ``whole_ops`` operations, and nothing later."""
        kids, iids = self.known[whole_ops - 1]
        assert snapshot(tree, kids, iids) == self.snaps[whole_ops - 1]
        for later in self.keyword_ids[len(kids):]:
            with pytest.raises(NotFoundError):
                tree.get_keyword(later)
        for later in self.info_ids[len(iids):]:
            with pytest.raises(NotFoundError):
                tree.get_info(later)


def build_history(data_dir: Path) -> History:
    """Singles, a relation, a 3-row batch, a 3-row create_info (2 links), an update and a
    cascading delete (several rows) — the last four are the ones truncation tests cut."""
    h = History(data_dir)
    t = KeywordTree(data_dir, durability="full")
    h.record(t)  # after the root op
    alpha = t.create_keyword("alpha", aliases=["first"], description="the first one")
    h.keyword_ids.append(alpha.id)
    h.record(t)
    beta = t.create_keyword("beta", alpha.id, metadata={"n": 1})
    h.keyword_ids.append(beta.id)
    h.record(t)
    t.relate(alpha.id, beta.id, "see_also", 0.5, "test")
    h.record(t)
    note = t.create_info("a note about beta", "src", keyword_ids=[beta.id])
    h.info_ids.append(note.id)
    h.record(t)
    # --- the last four operations
    batch = t.batch_create_keywords(
        [
            {"name": "x", "ref": "x"},
            {"name": "y", "parent_ref": "x", "aliases": ["why"]},
            {"name": "z", "parent_id": alpha.id, "description": "zed"},
        ]
    )
    h.keyword_ids.extend(k.id for k in batch)
    h.record(t)
    # non-ASCII text, so that some cuts fall inside a multi-byte UTF-8 character
    info = t.create_info("linked twice — 记忆 ✓", keyword_ids=[alpha.id, batch[0].id], metadata={"k": "välue"})
    h.info_ids.append(info.id)
    h.record(t)
    t.update_keyword(beta.id, {"description": "updated", "aliases": ["b"]}, beta.version)
    h.record(t)
    t.delete_keyword(alpha.id, cascade=True)
    h.record(t)
    t.close()
    return h


def expected_ops(ends: list[int], offset: int) -> int:
    """How many whole operations lie in the first ``offset`` bytes."""
    return sum(1 for end in ends if end <= offset)


# --- 1. truncation at every byte offset ---------------------------------------------------------


def test_truncation_at_every_byte_offset_shows_a_prefix_of_whole_operations(tmp_path, caplog):
    quiet_replay(caplog)
    h = build_history(tmp_path / "tree")
    segment = only_segment(h.dir)
    data = segment.read_bytes()
    ends = op_ends(data)
    assert len(ends) == len(h.snaps) == 9
    rows_per_op = [hi - lo + 1 for lo, hi in op_line_ranges(data)]
    assert rows_per_op[-4:-1] == [3, 3, 1] and rows_per_op[-1] >= 3  # multi-row operations get cut
    assert ends[-1] == len(data)

    work = copy_tree_dir(h.dir, tmp_path / "work")
    target = only_segment(work)
    start = ends[-5]  # first byte of the 4th-last operation
    # every byte of the last four operations, and every line boundary of the whole file
    boundaries = {end for _, end, _ in split_lines(data)}
    offsets = sorted(set(range(start, len(data) + 1)) | {o for o in boundaries if o >= ends[0]})
    seen_counts = set()
    fd = os.open(target, os.O_RDWR)  # rewrite one copy in place: cheaper than a copy per offset
    try:
        for padding in (b"", PAD):
            for offset in offsets:
                content = data[:offset] + padding
                os.pwrite(fd, content, 0)
                os.ftruncate(fd, len(content))
                whole = expected_ops(ends, offset)
                tree = KeywordTree(work, read_only=True)
                try:
                    h.check(tree, whole)
                    assert tree.tree_metrics()["operations"] == whole
                except AssertionError as exc:
                    raise AssertionError(f"offset {offset} (padding={bool(padding)}): {exc}") from exc
                finally:
                    tree.close()
                seen_counts.add(whole)
                assert os.pread(fd, len(content) + 1, 0) == content  # a reader never writes
    finally:
        os.close(fd)
    assert seen_counts == set(range(1, len(ends) + 1))  # every prefix, root op alone to all nine


def test_writable_open_of_every_cut_of_the_last_operation_replays_the_prefix(tmp_path, caplog):
    """A writer opening a torn log (no write yet) sees the prefix and leaves the file alone."""
    quiet_replay(caplog)
    h = build_history(tmp_path / "tree")
    data = only_segment(h.dir).read_bytes()
    ends = op_ends(data)
    work = copy_tree_dir(h.dir, tmp_path / "work")
    target = only_segment(work)
    for offset in range(ends[-2], len(data) + 1, 7):
        target.write_bytes(data[:offset] + PAD)
        tree = KeywordTree(work, durability="full")
        h.check(tree, expected_ops(ends, offset))
        assert target.read_bytes() == data[:offset] + PAD
        tree.close()
        # close() trims only zero padding: a torn tail is left for the next writer to quarantine
        assert target.read_bytes() == data[:offset]


# --- 2. the next writer quarantines a torn tail ----------------------------------------------


def _cut_points(data: bytes, ends: list[int]) -> dict[str, int]:
    start = ends[-2]
    lines = [(s, e) for s, e, _ in split_lines(data) if s >= start]
    assert len(lines) >= 3
    return {
        "one_byte": start + 1,
        "mid_first_row": (lines[0][0] + lines[0][1]) // 2,
        "after_first_row": lines[0][1],
        "after_second_row": lines[1][1],
        "mid_end_row": (lines[-1][0] + lines[-1][1]) // 2,
        "end_row_without_newline": len(data) - 1,
    }


@pytest.mark.parametrize("padding", [b"", PAD], ids=["no_padding", "zero_padding"])
@pytest.mark.parametrize(
    "cut", ["one_byte", "mid_first_row", "after_first_row", "after_second_row", "mid_end_row",
            "end_row_without_newline"]
)
def test_next_writer_moves_the_torn_tail_to_quarantine_and_appends_after_the_last_whole_op(
    tmp_path, caplog, cut, padding
):
    data_dir = tmp_path / "tree"
    t = KeywordTree(data_dir, durability="full")
    keep = t.create_keyword("kept")
    before_torn = snapshot(t, [keep.id])
    torn_batch = t.batch_create_keywords([{"name": f"torn{i}"} for i in range(3)])
    t.close()
    segment = only_segment(data_dir)
    data = segment.read_bytes()
    ends = op_ends(data)
    offset = _cut_points(data, ends)[cut]
    last_whole = ends[-2]
    torn = data[last_whole:offset]
    assert torn and offset < len(data)
    segment.write_bytes(data[:offset] + padding)

    caplog.set_level(logging.WARNING, logger="kwtree")
    writer = KeywordTree(data_dir, durability="full")
    assert snapshot(writer, [keep.id]) == before_torn
    assert any("incomplete operation" in r.getMessage() for r in caplog.records)  # reported at open
    assert segment.read_bytes() == data[:offset] + padding  # opening is not writing
    assert not (data_dir / "quarantine").exists()
    new = writer.create_keyword("after crash")
    expected = snapshot(writer, [keep.id, new.id])
    writer.close()

    quarantined = sorted((data_dir / "quarantine").iterdir())
    assert [p.name for p in quarantined] == [f"{segment.stem}.{last_whole}.torn"]
    assert quarantined[0].read_bytes() == torn
    after = segment.read_bytes()
    assert after[:last_whole] == data[:last_whole]
    new_rows = split_lines(after[last_whole:])
    assert b"\0" not in after and after.endswith(b"\n")
    assert sum(e - s for s, e, _ in new_rows) == len(after) - last_whole
    assert len({row["op"] for _, _, row in new_rows}) == 1 and "end" in new_rows[-1][2]
    assert new_rows[0][2]["id"] == new.id

    reopened = KeywordTree(data_dir, read_only=True)
    assert snapshot(reopened, [keep.id, new.id]) == expected
    for k in torn_batch:
        with pytest.raises(NotFoundError):
            reopened.get_keyword(k.id)
    assert reopened.tree_metrics()["operations"] == 3
    reopened.close()


def test_padding_left_by_a_crash_is_reused_without_quarantine(tmp_path):
    data_dir = tmp_path / "tree"
    t = KeywordTree(data_dir, durability="full")
    a = t.create_keyword("a")
    t.close()
    segment = only_segment(data_dir)
    data = segment.read_bytes()
    segment.write_bytes(data + PAD)  # a crash after a whole operation: padding, no torn bytes
    t = KeywordTree(data_dir, durability="full")
    b = t.create_keyword("b")
    expected = snapshot(t, [a.id, b.id])
    t.close()
    after = segment.read_bytes()
    assert not (data_dir / "quarantine").exists()
    assert after.startswith(data) and b"\0" not in after and after.endswith(b"\n")
    assert split_lines(after[len(data):])[0][2]["id"] == b.id
    with KeywordTree(data_dir, read_only=True) as reopened:
        assert snapshot(reopened, [a.id, b.id]) == expected


def test_torn_root_operation_is_quarantined_and_root_recreated(tmp_path, caplog):
    """A crash during the very first write leaves a log with no whole operation at all."""
    quiet_replay(caplog)
    data_dir = tmp_path / "tree"
    KeywordTree(data_dir, durability="full").close()
    segment = only_segment(data_dir)
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) // 2] + PAD)
    with KeywordTree(data_dir, read_only=True) as ro:
        assert ro.last_op_id is None
        with pytest.raises(NotFoundError):
            ro.get_keyword("root")
    with KeywordTree(data_dir, durability="full") as t:
        assert t.get_keyword("root").version == 1
        k = t.create_keyword("child")
    assert (data_dir / "quarantine" / f"{segment.stem}.0.torn").read_bytes() == data[: len(data) // 2]
    with KeywordTree(data_dir, read_only=True) as ro:
        assert [c.id for c in ro.get_children("root")] == [k.id]
        assert ro.tree_metrics()["operations"] == 2


@pytest.mark.parametrize("content", [b"", PAD], ids=["empty", "zero_filled"])
def test_crash_right_after_starting_a_new_segment(tmp_path, content):
    """A writer that dies between creating the next segment and writing to it leaves an empty
    (or all-padding) newest segment: readers see the state before it, the next writer fills it."""
    data_dir = tmp_path / "tree"
    ids = []
    with KeywordTree(data_dir, durability="full", segment_bytes=4096) as t:
        # fill a second segment up to the size at which the next write starts a third one
        while len(segment_files(data_dir)) < 2 or data_length(segment_files(data_dir)[-1]) < 4096:
            ids.append(t.create_keyword(f"k{len(ids)}", description="d" * 80).id)
        expected = snapshot(t, ids)
        last_op = t.last_op_id
    assert len(segment_files(data_dir)) == 2
    early_reader = KeywordTree(data_dir, read_only=True)  # positioned at the end of the second segment
    dead_name = f"{int(last_op, 16) + 12345:032x}"  # the id the dead writer had picked
    empty = data_dir / "log" / f"{dead_name}.jsonl"
    empty.write_bytes(content)
    with KeywordTree(data_dir, read_only=True) as ro:
        assert snapshot(ro, ids) == expected
    assert early_reader.refresh() == 0
    with KeywordTree(data_dir, durability="full", segment_bytes=4096) as t:
        assert snapshot(t, ids) == expected
        new = t.create_keyword("after")
        expected_after = snapshot(t, [*ids, new.id])
    assert not (data_dir / "quarantine").exists()
    assert len(segment_files(data_dir)) == 3  # the next writer used the empty segment
    data = empty.read_bytes()
    assert b"\0" not in data and split_lines(data)[0][2]["id"] == new.id
    with KeywordTree(data_dir, read_only=True) as ro:
        assert snapshot(ro, [*ids, new.id]) == expected_after
    assert early_reader.refresh() == 1
    assert snapshot(early_reader, [*ids, new.id]) == expected_after
    early_reader.close()


# --- 3. corrupt lines are errors, at file:line ---------------------------------------------------


def _corrupt_setup(tmp_path: Path) -> tuple[Path, Path, bytes]:
    data_dir = tmp_path / "tree"
    t = KeywordTree(data_dir, durability="none")
    a = t.create_keyword("a")
    t.batch_create_keywords([{"name": "b1"}, {"name": "b2"}, {"name": "b3"}])
    t.create_info("memo", keyword_ids=[a.id])
    t.create_keyword("last")
    t.close()
    segment = only_segment(data_dir)
    return data_dir, segment, segment.read_bytes()


def _replace_line(data: bytes, number: int, new: bytes | None) -> bytes:
    lines = data.split(b"\n")
    if new is None:
        del lines[number - 1]
    else:
        lines[number - 1] = new
    return b"\n".join(lines)


def _expect_corrupt(data_dir: Path, segment: Path, line: int) -> CorruptLogError:
    for kwargs in ({"read_only": True}, {"durability": "none"}):
        before = segment.read_bytes()
        with pytest.raises(CorruptLogError) as info:
            KeywordTree(data_dir, **kwargs)
        err = info.value
        assert Path(err.path).resolve() == segment.resolve()
        assert err.line == line
        assert str(err).startswith(f"{err.path}:{line}: ")
        assert segment.read_bytes() == before  # a failed open changes nothing ...
        assert not (data_dir / "quarantine").exists()  # ... and quarantines nothing
    return err


# Lines of _corrupt_setup's log: 1 root, 2 a, 3-5 batch, 6-7 info+link, 8 last.


@pytest.mark.parametrize(
    ("line", "new"),
    [
        (2, b"this is not json"),
        (4, b'{"op": 5'),
        (3, b'{"hello": "world"}'),
        (6, b"[1, 2, 3]"),
        (2, b""),
    ],
    ids=["garbage", "truncated_json", "no_op_field", "not_an_object", "empty_line"],
)
def test_unreadable_line_in_the_middle_is_reported_at_its_line(tmp_path, line, new):
    data_dir, segment, data = _corrupt_setup(tmp_path)
    segment.write_bytes(_replace_line(data, line, new))
    _expect_corrupt(data_dir, segment, line)


@pytest.mark.parametrize(
    ("field", "value"),
    [("v", "one"), ("name", 7), ("entity", "gizmo"), ("op", "not-an-op-id-not-an-op-id-123456"), ("created_at", "x")],
)
def test_invalid_row_in_the_middle_is_reported_at_its_line(tmp_path, field, value):
    data_dir, segment, data = _corrupt_setup(tmp_path)
    # line 4 is the middle row of the 3-row batch; a bad op id there would read as a new
    # operation cutting the batch short (tested below), so that one goes on line 3, the
    # batch's first row
    line = 3 if field == "op" else 4
    row = orjson.loads(data.split(b"\n")[line - 1])
    row[field] = value
    segment.write_bytes(_replace_line(data, line, orjson.dumps(row)))
    _expect_corrupt(data_dir, segment, line)


def test_end_marker_with_wrong_row_count_is_corrupt(tmp_path):
    data_dir, segment, data = _corrupt_setup(tmp_path)
    row = orjson.loads(data.split(b"\n")[4])  # line 5: end row of the 3-row batch
    row["end"]["rows"] = 2
    segment.write_bytes(_replace_line(data, 5, orjson.dumps(row)))
    _expect_corrupt(data_dir, segment, 5)


def test_operation_without_end_row_followed_by_another_operation_is_corrupt(tmp_path):
    data_dir, segment, data = _corrupt_setup(tmp_path)
    # drop the end row of the batch (lines 3-5): its first two rows are followed by the info op
    segment.write_bytes(_replace_line(data, 5, None))
    err = _expect_corrupt(data_dir, segment, 3)
    assert "no end row" in err.detail


def test_single_row_operation_stripped_of_its_end_is_corrupt(tmp_path):
    data_dir, segment, data = _corrupt_setup(tmp_path)
    row = orjson.loads(data.split(b"\n")[1])  # line 2: create "a"
    del row["end"]
    segment.write_bytes(_replace_line(data, 2, orjson.dumps(row)))
    _expect_corrupt(data_dir, segment, 2)


@pytest.mark.parametrize("padding", [b"", PAD], ids=["no_padding", "zero_padding"])
def test_garbage_tail_that_is_a_complete_line_is_corrupt_not_torn(tmp_path, padding):
    data_dir, segment, data = _corrupt_setup(tmp_path)
    segment.write_bytes(data + b"garbage, not json\n" + padding)
    _expect_corrupt(data_dir, segment, data.count(b"\n") + 1)


def test_garbage_tail_without_newline_is_a_torn_tail(tmp_path, caplog):
    quiet_replay(caplog)
    data_dir, segment, data = _corrupt_setup(tmp_path)
    segment.write_bytes(data + b"garbage, not json")
    with KeywordTree(data_dir, read_only=True) as ro:
        assert ro.tree_metrics()["operations"] == len(op_ends(data))
    with KeywordTree(data_dir, durability="none") as t:
        t.create_keyword("next")
    assert (data_dir / "quarantine" / f"{segment.stem}.{len(data)}.torn").read_bytes() == b"garbage, not json"


def test_corrupt_line_in_an_older_segment_names_that_segment(tmp_path):
    data_dir = tmp_path / "tree"
    with KeywordTree(data_dir, durability="none", segment_bytes=4096) as t:
        for i in range(60):
            t.create_keyword(f"k{i}", description="x" * 60)
    segments = segment_files(data_dir)
    assert len(segments) >= 3
    second = segments[1]
    data = second.read_bytes()
    second.write_bytes(_replace_line(data, 3, b"{broken"))
    with pytest.raises(CorruptLogError) as info:
        KeywordTree(data_dir, read_only=True)
    assert Path(info.value.path).resolve() == second.resolve()
    assert info.value.line == 3


@pytest.mark.parametrize("tail", [b'{"hello": "world"}\n', b"[1, 2, 3]\n", b"42\n"])
def test_complete_json_tail_line_that_is_not_a_row_is_corrupt(tmp_path, caplog, tail):
    quiet_replay(caplog)
    data_dir, segment, data = _corrupt_setup(tmp_path)
    segment.write_bytes(data + tail)
    with pytest.raises(CorruptLogError) as info:
        KeywordTree(data_dir, read_only=True)
    assert info.value.line == data.count(b"\n") + 1


def test_incomplete_operation_in_a_sealed_segment_reports_its_line(tmp_path, caplog):
    quiet_replay(caplog)
    data_dir = tmp_path / "tree"
    with KeywordTree(data_dir, durability="none", segment_bytes=4096) as t:
        for i in range(60):
            t.create_keyword(f"k{i}", description="x" * 60)
    first = segment_files(data_dir)[0]
    data = first.read_bytes()
    data = data[:seals_start(data)]  # (format 2: a seal line ends it)
    first.write_bytes(data[:-10])  # the sealed segment loses the end of its last operation
    with pytest.raises(CorruptLogError) as info:
        KeywordTree(data_dir, read_only=True)
    assert Path(info.value.path).resolve() == first.resolve()
    assert info.value.line == data.count(b"\n")  # the (single-row) last operation's line


def test_refresh_that_meets_a_corrupt_operation_leaves_the_state_unchanged(tmp_path):
    data_dir = tmp_path / "tree"
    writer = KeywordTree(data_dir, durability="none")
    a = writer.create_keyword("a")
    reader = KeywordTree(data_dir, read_only=True)
    before = snapshot(reader, [a.id])
    batch = writer.batch_create_keywords([{"name": "b1"}, {"name": "b2"}, {"name": "b3"}])
    writer.close()
    segment = only_segment(data_dir)
    data = segment.read_bytes()
    line = data.count(b"\n")  # the end row of the batch
    row = orjson.loads(data.split(b"\n")[line - 1])
    row["v"] = "bad"
    segment.write_bytes(_replace_line(data, line, orjson.dumps(row)))
    with pytest.raises(CorruptLogError) as info:
        reader.refresh()
    assert info.value.line == line
    try:
        assert snapshot(reader, [a.id]) == before
        for k in batch:
            with pytest.raises(NotFoundError):
                reader.get_keyword(k.id)
    finally:
        reader.close()


# --- 4. padding never survives a clean close or a seal -----------------------------------------


def test_close_trims_the_preallocated_padding(tmp_path):
    data_dir = tmp_path / "tree"
    t = KeywordTree(data_dir, durability="full")
    for i in range(5):
        t.create_keyword(f"k{i}")
    segment = only_segment(data_dir)
    live = segment.read_bytes()
    data_end = live.index(b"\0")
    assert len(live) > data_end and not live[data_end:].strip(b"\0")  # preallocated while open
    t.close()
    closed = segment.read_bytes()
    assert closed == live[:data_end]
    assert closed.endswith(b"\n") and b"\0" not in closed
    t.close()  # twice is harmless
    assert segment.read_bytes() == closed


def test_durability_none_never_pads(tmp_path):
    data_dir = tmp_path / "tree"
    with KeywordTree(data_dir, durability="none") as t:
        t.create_keyword("a")
        data = only_segment(data_dir).read_bytes()
        assert b"\0" not in data and data.endswith(b"\n")


def test_sealed_segments_never_have_padding(tmp_path):
    data_dir = tmp_path / "tree"
    t = KeywordTree(data_dir, durability="full", segment_bytes=4096)
    ids = []
    while len(segment_files(data_dir)) < 4:
        ids.append(t.create_keyword(f"k{len(ids)}", description="d" * 80).id)
        *sealed, newest = segment_files(data_dir)
        for segment in sealed:  # checked after every write, while the writer is open
            data = segment.read_bytes()
            assert b"\0" not in data and data.endswith(b"\n")
            assert len(data) >= 4096
            assert split_lines(data)[0][2]["op"] == segment.stem  # named after its first op
        assert b"\0" in newest.read_bytes()  # the newest one is preallocated
    expected = snapshot(t, ids)
    t.close()
    for segment in segment_files(data_dir):
        data = segment.read_bytes()
        assert b"\0" not in data and data.endswith(b"\n")
    with KeywordTree(data_dir, read_only=True) as ro:
        assert snapshot(ro, ids) == expected


def test_two_writers_in_one_process_leave_no_padding_whoever_closes_first(tmp_path):
    data_dir = tmp_path / "tree"
    a = KeywordTree(data_dir, durability="full")
    b = KeywordTree(data_dir, durability="full")
    ka = a.create_keyword("from a", llm_auto_place=False)
    kb = b.create_keyword("from b", llm_auto_place=False)  # written into a's padding
    a.close()  # a's read position is behind b's op: it must not cut b's data
    kb2 = b.create_keyword("from b again", llm_auto_place=False)
    b.close()
    data = only_segment(data_dir).read_bytes()
    assert b"\0" not in data and data.endswith(b"\n")
    with KeywordTree(data_dir, read_only=True) as ro:
        assert {k.id for k in ro.get_children("root")} == {ka.id, kb.id, kb2.id}


def test_crash_padding_is_kept_by_readers_and_trimmed_by_the_next_writers_close(tmp_path):
    """A crash can leave padding; a read-only open never trims it, the next writer's close does."""
    data_dir = tmp_path / "tree"
    with KeywordTree(data_dir, durability="full") as t:
        t.create_keyword("a")
    segment = only_segment(data_dir)
    data = segment.read_bytes()
    segment.write_bytes(data + PAD)
    KeywordTree(data_dir, read_only=True).close()
    assert segment.read_bytes() == data + PAD
    KeywordTree(data_dir, durability="full").close()
    assert segment.read_bytes() == data


def test_copied_directory_with_padding_replays_identically(tmp_path):
    """Backing up a live directory (padding included) gives a copy that opens to the same state."""
    data_dir = tmp_path / "tree"
    t = KeywordTree(data_dir, durability="full")
    a = t.create_keyword("a")
    i = t.create_info("memo", keyword_ids=[a.id])
    expected = snapshot(t, [a.id], [i.id])
    backup = copy_tree_dir(data_dir, tmp_path / "backup")  # while t is open: padding is copied
    t.close()
    assert b"\0" in only_segment(backup).read_bytes()
    with KeywordTree(backup, read_only=True) as ro:
        assert snapshot(ro, [a.id], [i.id]) == expected
