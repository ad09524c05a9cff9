"""Damage in the middle of the log and duplicated operations (issue 13, items 1 and 4).

Real bytes of real segments are damaged: a NUL byte inside a row, a zeroed block, a NUL at
the very start of a row (where the data seems to end cleanly), in the newest segment and in
sealed ones; an operation is copied right after itself. Only a real torn tail (an
incomplete last operation with nothing complete after it) may be treated as torn; damage
in the middle is CorruptLogError at open, refresh and write alike, verify reports it, no
writer moves an intact operation aside, and repair keeps every intact operation.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import orjson
import pytest
from helpers import assert_every_open_refuses, dir_bytes
from hypothesis import example, given
from hypothesis import strategies as st

from kwtree import CorruptLogError, KeywordTree, repair_directory, verify_directory

# --- helpers ----------------------------------------------------------------------------------


def segments(directory: Path) -> list[Path]:
    return sorted((directory / "log").glob("*.jsonl"))


def rows(data: bytes) -> list[tuple[int, int, dict]]:
    """(start byte, end byte, row) of each line of a clean segment."""
    found, pos = [], 0
    for line in data.rstrip(b"\0").splitlines(keepends=True):
        found.append((pos, pos + len(line), orjson.loads(line)))
        pos += len(line)
    return found


def ten_infos(directory: Path, **options) -> list[str]:
    with KeywordTree(directory, worker=False, **options) as tree:
        return [tree.create_info(f"memory number {i} " + "x" * 40).id for i in range(10)]


def info_row(segment: Path, content_prefix: str) -> tuple[int, int, int]:
    """(start, end, line number) of the row of the info whose content starts so."""
    for number, (start, end, row) in enumerate(rows(segment.read_bytes()), start=1):
        if row["entity"] == "info" and row["content"].startswith(content_prefix):
            return start, end, number
    raise AssertionError(content_prefix)


def damage(segment: Path, at: int, replacement: bytes) -> bytes:
    data = segment.read_bytes()
    segment.write_bytes(data[:at] + replacement + data[at + len(replacement):])
    return data


def op_ids(directory: Path) -> set[str]:
    with KeywordTree(directory, read_only=True, worker=False) as tree:
        return {op.op_id for op in tree.history()}


# --- item 1: a NUL or a zeroed block in the middle -------------------------------------------------


def test_the_issue_repro_a_nul_inside_the_fifth_row_never_costs_the_later_infos(tree_dir: Path) -> None:
    """Write 10 infos, set one byte inside the 5th info's row to NUL, open, write, reopen:
    today the open warns of a torn write and the write moves infos 5-10 to quarantine/."""
    ids = ten_infos(tree_dir)
    segment = segments(tree_dir)[-1]
    start, end, line = info_row(segment, "memory number 4 ")
    damage(segment, start + 30, b"\0")
    assert_every_open_refuses(tree_dir, segment, line, "NUL", "repair")

    report = verify_directory(tree_dir)
    assert not report.ok
    first = report.errors[0]
    assert (first.file, first.line) == (f"log/{segment.name}", line)

    assert repair_directory(tree_dir).ok
    quarantined = [p for p in (tree_dir / "quarantine").iterdir() if p.suffix == ".bad"]
    assert len(quarantined) == 1 and len(quarantined[0].read_bytes()) == end - start  # that row only
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.create_info("after the repair")
    with KeywordTree(tree_dir, read_only=True, worker=False) as tree:
        kept = {op.changes[0].after.id for op in tree.history() if op.kind == "create_info"}
    assert kept >= set(ids) - {ids[4]} and ids[4] not in kept
    assert verify_directory(tree_dir).ok


@pytest.mark.parametrize("where", ["inside", "line-start", "block"])
def test_damage_in_the_newest_segment_is_an_error_at_open_refresh_and_write(tree_dir: Path, where: str) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        ids = [tree.create_info(f"memory number {i} " + "x" * 40).id for i in range(5)]
    reader = KeywordTree(tree_dir, read_only=True, worker=False)
    writer = KeywordTree(tree_dir, worker=False)  # durable: it pads the segment with zeros
    try:
        with KeywordTree(tree_dir, durability="none", worker=False) as other:  # rows neither has read
            ids += [other.create_info(f"memory number {i} " + "x" * 40).id for i in range(5, 10)]
        segment = segments(tree_dir)[-1]
        start, _end, line = info_row(segment, "memory number 6 ")
        if where == "inside":
            damage(segment, start + 12, b"\0")
        elif where == "line-start":  # the data seems to end cleanly at a row boundary
            damage(segment, start, b"\0")
        else:  # a zeroed block from inside row 6 to inside row 8
            _, stop, _ = info_row(segment, "memory number 8 ")
            damage(segment, start + 5, bytes(stop - 10 - start))
        before = dir_bytes(tree_dir / "log")
        with pytest.raises(CorruptLogError) as caught:
            reader.refresh()
        assert caught.value.line == line
        with pytest.raises(CorruptLogError) as caught:
            writer.create_info("one more")
        assert caught.value.line == line
        with pytest.raises(CorruptLogError):
            KeywordTree(tree_dir, worker=False)
        assert dir_bytes(tree_dir / "log") == before
        assert not (tree_dir / "quarantine").exists()
    finally:
        reader.close()
        writer.close()
    assert repair_directory(tree_dir).ok
    survivors = set(ids[:6]) | set(ids[7 if where != "block" else 9:])
    with KeywordTree(tree_dir, read_only=True, worker=False) as tree:
        kept = {op.changes[0].after.id for op in tree.history() if op.kind == "create_info"}
    assert survivors <= kept


def test_a_nul_at_the_start_of_a_row_in_a_sealed_segment_is_an_error_and_repair_keeps_the_rest(
    tree_dir: Path,
) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False, segment_bytes=4096) as tree:
        ids = [tree.create_info(f"memory {i} " + "y" * 100).id for i in range(80)]
    sealed = segments(tree_dir)[1]
    found = rows(sealed.read_bytes())
    start, _end, _row = found[3]
    damage(sealed, start, b"\0")
    with pytest.raises(CorruptLogError) as caught:
        KeywordTree(tree_dir, read_only=True, worker=False)
    assert (caught.value.path, caught.value.line) == (str(sealed), 4)
    report = verify_directory(tree_dir)
    assert [(f.file, f.line) for f in report.errors][:1] == [(f"log/{sealed.name}", 4)]
    lost = found[3][2]["id"]
    assert repair_directory(tree_dir).ok
    with KeywordTree(tree_dir, read_only=True, worker=False) as tree:
        kept = {op.changes[0].after.id for op in tree.history() if op.kind == "create_info"}
    assert kept == set(ids) - {lost}


def test_a_real_torn_tail_with_a_gap_stays_a_torn_tail_and_the_writer_moves_only_it(tree_dir: Path) -> None:
    ten_infos(tree_dir)
    segment = segments(tree_dir)[-1]
    data = segment.read_bytes().rstrip(b"\0")
    op = "f" * 32
    torn = (b'{"op":"' + op.encode() + b'","entity":"keyword","id":"t1","v":1,"name":"T","parent_id":"root",'
            b'"created_at":1.0}\n' + bytes(300) + b'"entity":"key')  # a power cut left a gap
    segment.write_bytes(data + torn + bytes(4096))
    report = verify_directory(tree_dir)
    assert report.ok and {f.code for f in report.findings} == {"torn-tail"}
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.create_info("the next write")
    assert (tree_dir / "quarantine" / f"{segment.stem}.{len(data)}.torn").read_bytes() == torn
    assert verify_directory(tree_dir).ok


# --- the property: damage at any byte never makes repair lose an intact operation ------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("trust-log") / "tree"
    with KeywordTree(directory, durability="none", worker=False, segment_bytes=4096) as tree:
        kid = tree.create_keyword("topic", llm_auto_place=False).id
        for i in range(30):
            tree.create_info(f"memory {i} " + "m" * 60, keyword_ids=[kid] if i % 3 == 0 else None)
        tree.batch_create_keywords([{"name": f"k{i}"} for i in range(12)])
    with KeywordTree(directory, worker=False) as tree:  # a durable writer: the newest segment padded
        tree.create_info("last one")
    newest = segments(directory)[-1]
    newest.write_bytes(newest.read_bytes() + bytes(3000))
    return directory


def intact_operations(data: bytes, hit: range) -> set[str]:
    """Op ids of the whole operations of ``data`` none of whose bytes lie in ``hit`` (the
    newline ending an operation's last row is its own)."""
    found, group, start, pos = set(), [], 0, 0
    for line in data.rstrip(b"\0").splitlines(keepends=True):
        row = orjson.loads(line)
        group.append(row)
        pos += len(line)
        if "end" in row:
            if not (start < hit.stop and hit.start < pos):
                found.add(row["op"])
            group, start = [], pos
    return found


@pytest.mark.slow
@given(which=st.integers(0, 100), where=st.floats(0, 1), length=st.sampled_from([1, 1, 7, 100, 4096]),
       flip=st.sampled_from([0, 0, 0x20, 0x01, 0xFF]))
@example(which=0, where=0.9921875, length=1, flip=1)  # a bit of the first segment's seal: a successor's name
def test_a_nul_zeroed_block_or_flipped_byte_anywhere_never_makes_repair_lose_an_intact_operation(
    template: Path, which: int, where: float, length: int, flip: int
) -> None:
    """``flip`` 0: ``length`` bytes are zeroed (a 4096-byte block aligned as a disk block);
    otherwise one byte is XORed with it (still valid JSON, or not; a newline gone)."""
    work = Path(tempfile.mkdtemp(prefix="kwtree-trust-log-"))
    try:
        directory = work / "tree"
        shutil.copytree(template, directory)
        files = segments(directory)
        segment = files[which % len(files)]
        original = segment.read_bytes()
        data_end = len(original.rstrip(b"\0"))
        start = min(int(where * data_end), data_end - 1)
        if flip:
            hit = range(start, start + 1)
            segment.write_bytes(original[:start] + bytes([original[start] ^ flip]) + original[start + 1:])
        else:
            if length == 4096:
                start -= start % 4096  # a lost disk block
            hit = range(start, min(start + length, data_end))
            segment.write_bytes(original[:hit.start] + bytes(len(hit)) + original[hit.stop:])
        survivors = {op for path in files if path != segment for op in intact_operations(path.read_bytes(), range(0))}
        survivors |= intact_operations(original, hit)
        try:
            with KeywordTree(directory, worker=False) as tree:  # a writer may open only a torn tail
                tree.create_info("written after the damage")
        except CorruptLogError:
            pass
        report = repair_directory(directory)
        assert report.ok, report.to_text()
        assert survivors <= op_ids(directory)
        notes = [json.loads(p.read_text()) for p in (directory / "quarantine").glob("*.json")] if (
            directory / "quarantine").exists() else []
        spans = [note for note in notes if "bytes" in note]  # quarantined lines
        assert sum(note["bytes"] for note in spans) <= 2 * 4096 + 3 * 200  # only what was hit, with its ops
        # A byte hit in a seal can make it name a successor that never existed: repair accepts
        # the loss of that name only (every real segment is still there, see survivors above).
        real = {f"log/{path.name}" for path in files}
        for note in notes:
            if "bytes" not in note:
                assert note["named_by"] == f"log/{segment.name}" and note["segment"] not in real, note
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- item 4: an operation copied right after itself -------------------------------------------------


def copy_last_operation(segment: Path) -> tuple[str, bytes]:
    """Append a copy of the segment's last operation right after it."""
    found = rows(segment.read_bytes())
    last = found[-1][2]["op"]
    start = min(s for s, _e, row in found if row["op"] == last)
    data = segment.read_bytes().rstrip(b"\0")
    segment.write_bytes(data + data[start:])
    return last, data[start:]


def test_an_operation_copied_right_after_itself_is_applied_once_everywhere(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        keyword = tree.create_keyword("alpha", llm_auto_place=False)
        info = tree.create_info("note", keyword_ids=[keyword.id])
        tree.update_keyword(keyword.id, {"description": "changed"}, 1)
    follower = KeywordTree(tree_dir, read_only=True, worker=False)
    try:
        assert follower.get_keyword(keyword.id).version == 2
        with KeywordTree(tree_dir, durability="none", worker=False) as tree:
            tree.update_info(info.id, {"content": "note, edited"})
        copied, _ = copy_last_operation(segments(tree_dir)[-1])  # a 1-row op
        assert follower.refresh() == 1
        assert follower.get_info(info.id).version == 2
    finally:
        follower.close()
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        assert tree.get_info(info.id).version == 2
        assert tree.get_keyword(keyword.id).version == 2
        tree.update_keyword(keyword.id, {"description": "again"}, 2)  # the optimistic check holds
        merged = tree.merge_keywords(tree.create_keyword("beta", llm_auto_place=False).id, keyword.id)
        original = tree.history(limit=1)[0]
    copied, _ = copy_last_operation(segments(tree_dir)[-1])  # a several-row op
    assert copied == original.op_id and len(original.changes) == 2
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        assert tree.get_keyword(merged.id).version == 4
        assert [op for op in tree.history() if op.op_id == copied] == [original]
        touching = [op.op_id for op in tree.history(merged.id)]
        assert touching[-1] == copied and len(touching) == len(set(touching)) == 5
        after = tree.create_info("later", keyword_ids=[merged.id])
    with KeywordTree(tree_dir, as_of=copied, worker=False) as view:
        assert view.get_keyword(merged.id).version == 4
    with KeywordTree(tree_dir, as_of=after.created_at, worker=False) as view:
        assert view.get_keyword(merged.id).version == 4
    report = verify_directory(tree_dir)
    assert report.ok and "duplicate-operation" in {f.code for f in report.warnings}
