"""A changed byte that keeps a format-2 row valid JSON is found when the log is read, not
only by ``verify`` (issue 13, items 1 and 6).

Each operation's end marker carries ``crc`` (kwtree.engine.events.with_checksum). Opening a tree,
``refresh()``, the catch-up before every write, ``as_of`` views, merged logs and
``history()`` check it, so such damage is ``CorruptLogError`` naming the segment and the
operation's line, as a NUL byte in the middle is; ``repair()`` quarantines that operation
and keeps every intact one. Format 1 (no checksums) reads as before, and a torn tail in the
newest segment stays a torn tail.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from helpers import assert_every_open_refuses, dir_bytes
from test_trust_log_format import make_format_1

from kwtree import CorruptLogError, KeywordTree, repair_directory, verify_directory


def segments(directory: Path) -> list[Path]:
    return sorted((directory / "log").glob("*.jsonl"))


def info_line(segment: Path, content: str) -> tuple[int, bytes]:
    """(line number, bytes) of the row of the info whose content is ``content``."""
    for number, line in enumerate(segment.read_bytes().rstrip(b"\0").split(b"\n"), start=1):
        if line.startswith(b'{"op"') and orjson.loads(line).get("content") == content:
            return number, line
    raise AssertionError(content)


def change(segment: Path, old: bytes, new: bytes) -> None:
    """Replace the one occurrence of ``old`` (same length as ``new``) in ``segment``."""
    assert len(old) == len(new)
    data = segment.read_bytes()
    assert data.count(old) == 1, old
    segment.write_bytes(data.replace(old, new))


def content(i: int) -> str:
    return f"memory number {i} " + "x" * 40


def write_infos(directory: Path, numbers: range, **options) -> list[str]:
    with KeywordTree(directory, durability="none", worker=False, **options) as tree:
        return [tree.create_info(content(i)).id for i in numbers]


def kept_infos(directory: Path) -> set[str]:
    with KeywordTree(directory, read_only=True, worker=False) as tree:
        return {op.changes[0].after.id for op in tree.history() if op.kind == "create_info"}


def damage_row(segment: Path, number: int, what: str) -> int:
    """Change one byte of info ``number``'s row so that it stays a valid row; its line."""
    line, row = info_line(segment, content(number))
    parsed = orjson.loads(row)
    if what == "content":
        changed = number - number % 10 + (number + 3) % 10  # another last digit
        change(segment, row, row.replace(b"number %d " % number, b"number %d " % changed))
    elif what == "info-id":
        old = parsed["id"].encode()
        change(segment, row, row.replace(old, old[:-1] + (b"0" if old[-1:] != b"0" else b"1")))
    else:  # "op-id": just after the root's, so the operations are out of id order (the sorted replay reads them)
        root = orjson.loads(segments(segment.parent.parent)[0].read_bytes().split(b"\n")[0])["op"]
        change(segment, row, row.replace(parsed["op"].encode(), b"%032x" % (int(root, 16) + 1)))
    return line


@pytest.mark.parametrize("what", ["content", "info-id", "op-id"])
def test_a_changed_byte_that_stays_valid_json_is_an_error_at_open_and_repair_keeps_the_rest(
    tree_dir: Path, what: str
) -> None:
    ids = write_infos(tree_dir, range(10))
    segment = segments(tree_dir)[-1]
    line = damage_row(segment, 4, what)
    assert_every_open_refuses(tree_dir, segment, line, "checksum", "repair")

    report = verify_directory(tree_dir)
    assert [(f.code, f.line) for f in report.errors] == [("checksum", line)]
    assert repair_directory(tree_dir).ok
    assert kept_infos(tree_dir) == set(ids) - {ids[4]}
    assert verify_directory(tree_dir).ok


def test_a_changed_byte_in_a_sealed_segment_is_an_error_at_open(tree_dir: Path) -> None:
    ids = write_infos(tree_dir, range(80), segment_bytes=4096)
    sealed = segments(tree_dir)[1]
    first = orjson.loads(sealed.read_bytes().split(b"\n")[2])
    number = int(first["content"].split()[2])
    line = damage_row(sealed, number, "content")
    with pytest.raises(CorruptLogError) as caught:
        KeywordTree(tree_dir, read_only=True, worker=False)
    assert (caught.value.path, caught.value.line) == (str(sealed), line)
    assert repair_directory(tree_dir).ok
    assert kept_infos(tree_dir) == set(ids) - {first["id"]}


@pytest.mark.parametrize("what", ["content", "op-id"])
def test_a_tree_already_open_sees_the_error_at_refresh_and_at_its_next_write(tree_dir: Path, what: str) -> None:
    ids = write_infos(tree_dir, range(5))
    reader = KeywordTree(tree_dir, read_only=True, worker=False)
    writer = KeywordTree(tree_dir, worker=False)
    try:
        ids += write_infos(tree_dir, range(5, 10))  # operations neither has read yet
        segment = segments(tree_dir)[-1]
        line = damage_row(segment, 7, what)
        before = dir_bytes(tree_dir)
        with pytest.raises(CorruptLogError) as caught:
            reader.refresh()
        assert (caught.value.path, caught.value.line) == (str(segment), line)
        with pytest.raises(CorruptLogError) as caught:
            writer.create_info("one more")
        assert (caught.value.path, caught.value.line) == (str(segment), line)
        assert dir_bytes(tree_dir) == before  # the refused write changed nothing
    finally:
        reader.close()
        writer.close()
    assert repair_directory(tree_dir).ok
    assert kept_infos(tree_dir) == set(ids) - {ids[7]}


def test_history_and_as_of_views_check_the_checksum_too(tree_dir: Path) -> None:
    write_infos(tree_dir, range(10))
    with KeywordTree(tree_dir, read_only=True, worker=False) as tree:
        last = tree.history()[-1]
        segment = segments(tree_dir)[-1]
        line = damage_row(segment, 6, "content")
        with pytest.raises(CorruptLogError) as caught:
            tree.history()  # read from disk
        assert (caught.value.path, caught.value.line) == (str(segment), line)
    for as_of in (last.op_id, last.timestamp):
        with pytest.raises(CorruptLogError) as caught:
            KeywordTree(tree_dir, read_only=True, worker=False, as_of=as_of)
        assert (caught.value.path, caught.value.line) == (str(segment), line)


def test_an_end_marker_that_lost_its_checksum_key_is_an_error_in_format_2(tree_dir: Path) -> None:
    write_infos(tree_dir, range(10))
    segment = segments(tree_dir)[-1]
    line, row = info_line(segment, content(3))
    change(segment, row, row.replace(b',"crc":', b',"crd":'))
    with pytest.raises(CorruptLogError) as caught:
        KeywordTree(tree_dir, read_only=True, worker=False)
    assert (caught.value.path, caught.value.line) == (str(segment), line)
    assert "checksum" in caught.value.detail


def test_a_format_1_tree_has_no_checksums_to_check_and_reads_as_before(tree_dir: Path) -> None:
    make_format_1(tree_dir)
    ids = write_infos(tree_dir, range(10))
    segment = segments(tree_dir)[-1]
    assert b'"crc"' not in segment.read_bytes()
    damage_row(segment, 4, "content")  # undetectable without checksums: what `kwtree upgrade` is for
    with KeywordTree(tree_dir, worker=False) as tree:
        assert tree.get_info(ids[4]).content == content(7)
        tree.create_info("written to a format-1 log")
    assert b'"crc"' not in segments(tree_dir)[-1].read_bytes()


def test_a_torn_tail_cut_inside_the_checksum_stays_a_torn_tail(tree_dir: Path) -> None:
    ids = write_infos(tree_dir, range(10))
    segment = segments(tree_dir)[-1]
    data = segment.read_bytes().rstrip(b"\0")
    _, last = info_line(segment, content(9))
    later = last.replace(orjson.loads(last)["op"].encode(), b"f" * 32)  # an operation after it
    torn = later[: later.rfind(b',"crc":') + 9]  # ... that a crash cut inside its checksum
    segment.write_bytes(data + torn)
    report = verify_directory(tree_dir)
    assert report.ok and [f.code for f in report.findings] == ["torn-tail"]
    with KeywordTree(tree_dir, read_only=True, worker=False) as tree:
        assert tree.tree_metrics()["infos"] == 10
    with KeywordTree(tree_dir, worker=False) as tree:  # the writer moves the torn tail aside
        tree.create_info("the next write")
    assert (tree_dir / "quarantine" / f"{segment.stem}.{len(data)}.torn").read_bytes() == torn
    assert verify_directory(tree_dir).ok
    assert kept_infos(tree_dir) >= set(ids)


def test_a_compacted_log_is_checksummed_opens_and_its_damage_is_found(tree_dir: Path) -> None:
    ids = write_infos(tree_dir, range(30), segment_bytes=4096)
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.compact()
    data = b"".join(path.read_bytes() for path in segments(tree_dir))
    ends = [orjson.loads(line)["end"] for line in data.split(b"\n") if b'"end":' in line]
    assert ends and all("crc" in end for end in ends)
    with KeywordTree(tree_dir, read_only=True, worker=False) as tree:
        assert {tree.get_info(info_id).content for info_id in ids} == {content(i) for i in range(30)}
    # damage in a compacted operation is found at open like any other
    segment = segments(tree_dir)[0]
    row = next(line for line in segment.read_bytes().split(b"\n") if content(12).encode() in line)
    change(segment, row, row.replace(b"number 12 ", b"number 13 "))
    with pytest.raises(CorruptLogError) as caught:
        KeywordTree(tree_dir, read_only=True, worker=False)
    assert caught.value.path == str(segment) and "checksum" in caught.value.detail
