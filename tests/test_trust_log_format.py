"""A self-describing log (issue 13, item 6; issue 25): checksums in end markers, seal lines
naming each segment's successor, the hash chain (format 3), newer formats only behind an
explicit ``kwtree upgrade``.

Real segment files are changed: a byte flip that stays valid JSON, a deleted middle or newest
segment; compaction, repair and the git merge driver write logs that verify clean; a real
format-1 directory is read, written and upgraded through the CLI.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import orjson
import pytest
from helpers import copy_tree_dir, snapshot

from kwtree import (
    CorruptLogError,
    DamagedDirectoryError,
    KeywordTree,
    repair_directory,
    verify_directory,
)
from kwtree.cli.main import main
from kwtree.ops.git import merge_files
from kwtree.ops.upgrade import upgrade_directory
from kwtree.stores.manifest import FORMAT_VERSION, Manifest


def segments(directory: Path) -> list[Path]:
    return sorted((directory / "log").glob("*.jsonl"))


def codes(report, severity: str | None = None) -> set[str]:
    return {f.code for f in report.findings if severity is None or f.severity == severity}


def many_segments(directory: Path, count: int = 60) -> list[str]:
    with KeywordTree(directory, durability="none", worker=False, segment_bytes=4096) as tree:
        return [tree.create_info(f"memory {i} " + "s" * 150).id for i in range(count)]


def infos(directory: Path) -> set[str]:
    with KeywordTree(directory, read_only=True, worker=False) as tree:
        return {op.changes[0].after.id for op in tree.history() if op.kind == "create_info"}


def test_a_new_log_is_format_3_chained_checksummed_and_sealed(tree_dir: Path) -> None:
    many_segments(tree_dir)
    assert Manifest.load(tree_dir).format == FORMAT_VERSION == 3
    files = segments(tree_dir)
    assert len(files) >= 4
    previous = "0" * 64  # each end marker names the SHA-256 of the operation before, without its crc
    for index, path in enumerate(files):
        lines = path.read_bytes().splitlines()
        rows = [orjson.loads(line) for line in lines]
        assert all(list(row["end"])[-2:] == ["prev", "crc"] for row in rows if "end" in row)
        for line, row in zip(lines, rows, strict=True):
            if "end" in row:
                assert row["end"]["prev"] == previous
                previous = hashlib.sha256(line[:line.rindex(b',"crc":')] + b"}}\n").hexdigest()
        if index + 1 < len(files):
            assert rows[-1] == {"seal": {"next": files[index + 1].stem, "bytes": len(b"\n".join(lines[:-1])) + 1,
                                         "crc": rows[-1]["seal"]["crc"]}}
        else:
            assert "seal" not in rows[-1]
    report = verify_directory(tree_dir)
    assert report.findings == () and report.head == previous


def test_a_byte_flip_that_stays_valid_json_is_found_by_verify_and_repair_drops_only_its_operation(
    tree_dir: Path,
) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:  # one segment, never sealed
        ids = [tree.create_info(f"memory {i} " + "s" * 150).id for i in range(10)]
    segment = segments(tree_dir)[-1]
    data = segment.read_bytes()
    at = data.index(b"memory 4 ")
    segment.write_bytes(data[:at] + b"memory 7 " + data[at + 9:])  # still a valid row
    report = verify_directory(tree_dir)
    assert [f.code for f in report.errors] == ["checksum"]  # (and no break in the chain after it: the same damage)
    assert report.errors[0].line == data[:at].count(b"\n") + 1
    repaired = repair_directory(tree_dir)
    assert repaired.ok and "chain-gap" in codes(repaired)
    assert infos(tree_dir) == set(ids) - {ids[4]}
    assert verify_directory(tree_dir).ok


@pytest.mark.parametrize("which", ["middle", "newest"])
def test_a_missing_segment_is_an_error_at_open_and_in_verify_and_repair_accepts_the_loss(
    tree_dir: Path, which: str
) -> None:
    ids = many_segments(tree_dir)
    files = segments(tree_dir)
    gone = files[len(files) // 2] if which == "middle" else files[-1]
    before = files[files.index(gone) - 1]
    lost = {row["id"] for row in map(orjson.loads, gone.read_bytes().splitlines()) if row.get("entity") == "info"}
    gone.unlink()
    with pytest.raises(CorruptLogError, match="missing") as caught:
        KeywordTree(tree_dir, read_only=True, worker=False)
    assert caught.value.path == str(before)
    report = verify_directory(tree_dir)
    assert (report.errors[0].code, report.errors[0].file) == ("missing-segment", f"log/{before.name}")
    assert codes(report, "error") <= {"missing-segment", "cache-watermark"}  # the index saw the lost ones
    assert gone.stem in report.errors[0].message

    repaired = repair_directory(tree_dir)
    assert repaired.ok and "accepted-loss" in codes(repaired)
    notes = list((tree_dir / "quarantine").glob(f"{gone.stem}.missing.*.json"))
    assert len(notes) == 1 and json.loads(notes[0].read_text())["segment"] == f"log/{gone.name}"
    assert infos(tree_dir) == set(ids) - lost
    assert verify_directory(tree_dir).findings == ()
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.create_info("after the loss")
    assert verify_directory(tree_dir).ok


def test_a_sealed_segment_that_lost_an_operation_is_an_error(tree_dir: Path) -> None:
    many_segments(tree_dir)
    sealed = segments(tree_dir)[1]
    lines = sealed.read_bytes().splitlines(keepends=True)
    sealed.write_bytes(b"".join(lines[:2] + lines[3:]))  # a whole operation gone: every row intact
    report = verify_directory(tree_dir)
    assert [f.code for f in report.errors] == ["sealed-changed"]
    assert repair_directory(tree_dir).ok
    assert verify_directory(tree_dir).findings == ()


def test_compaction_writes_a_checksummed_sealed_chain(tree_dir: Path) -> None:
    many_segments(tree_dir)
    for keep_history in (True, False):
        with KeywordTree(tree_dir, durability="none", worker=False) as tree:
            tree.compact(keep_history=keep_history)
            expected = snapshot(tree)
        assert len(segments(tree_dir)) >= (3 if keep_history else 1)
        assert verify_directory(tree_dir).findings == ()
        with KeywordTree(tree_dir, read_only=True, worker=False) as tree:
            assert snapshot(tree) == expected


def test_two_branches_that_each_started_a_segment_merge_into_a_fork_not_a_gap(tmp_path: Path) -> None:
    base = tmp_path / "base"
    many_segments(base, 20)
    ours, theirs = copy_tree_dir(base, tmp_path / "ours"), copy_tree_dir(base, tmp_path / "theirs")
    for directory, label in ((ours, "ours"), (theirs, "theirs")):
        with KeywordTree(directory, durability="none", worker=False) as tree:
            for i in range(25):
                tree.create_info(f"{label} {i} " + "b" * 150)
    merged = tmp_path / "merged"
    copy_tree_dir(ours, merged)
    for path in segments(theirs):  # what git and the kwtree merge driver do, segment by segment
        target = merged / "log" / path.name
        if not target.exists():
            shutil.copyfile(path, target)
            continue
        common = base / "log" / path.name
        merge_files(common if common.exists() else "/dev/null", target, path)
    report = verify_directory(merged)
    assert report.ok, report.to_text()
    assert "segment-fork" in codes(report, "warning")
    with KeywordTree(merged, read_only=True, worker=False) as tree:
        assert tree.tree_metrics()["infos"] == 20 + 25 + 25


def make_format_1(directory: Path) -> None:
    directory.mkdir(parents=True)
    (directory / "log").mkdir()
    manifest = Manifest.new(4096)
    Manifest(1, manifest.created_at, manifest.replica_id, manifest.segment_bytes).save(directory)


def test_a_format_1_directory_is_read_and_written_as_it_is_and_upgraded_only_by_the_command(
    tree_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_format_1(tree_dir)
    ids = many_segments(tree_dir, 40)
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        tree.create_info("written by the new kwtree")
        expected = snapshot(tree, info_ids=ids)
        history = tree.history()
    assert Manifest.load(tree_dir).format == 1  # never upgraded silently
    log = b"".join(path.read_bytes() for path in segments(tree_dir))
    assert b'"crc"' not in log and b'"seal"' not in log
    assert codes(verify_directory(tree_dir)) == {"old-format"}

    assert main(["upgrade", str(tree_dir)]) == 0
    assert "from format 1 to 3" in capsys.readouterr().out
    assert Manifest.load(tree_dir).format == 3
    report = verify_directory(tree_dir)
    assert report.findings == () and report.head is not None
    assert report.chain_notes and '"reason":"upgrade","from_format":1' in report.chain_notes[0]
    with KeywordTree(tree_dir, read_only=True, worker=False) as tree:
        assert snapshot(tree, info_ids=ids) == expected
        assert tree.history() == history  # (the note that says the chain began here is no part of history)
    assert str(upgrade_directory(tree_dir)).endswith("nothing to do")


def test_upgrade_refuses_a_damaged_directory_and_changes_nothing(tree_dir: Path) -> None:
    make_format_1(tree_dir)
    many_segments(tree_dir, 10)
    segment = segments(tree_dir)[-1]
    data = segment.read_bytes()
    segment.write_bytes(data.replace(b"memory 3 ", b"memory 3\n", 1))
    before = {path.name: path.read_bytes() for path in segments(tree_dir)}
    with pytest.raises(DamagedDirectoryError, match="repair"):
        upgrade_directory(tree_dir)
    assert {path.name: path.read_bytes() for path in segments(tree_dir)} == before
    assert Manifest.load(tree_dir).format == 1


def test_a_tree_open_during_the_upgrade_writes_the_new_format_afterwards(tree_dir: Path) -> None:
    make_format_1(tree_dir)
    many_segments(tree_dir, 30)
    writer = KeywordTree(tree_dir, worker=False)
    try:
        writer.create_info("before the upgrade")
        assert upgrade_directory(tree_dir).format_after == 3
        writer.create_info("after the upgrade")  # replays the new log, then writes format 3
        for i in range(30):
            writer.create_info(f"more {i} " + "a" * 150)  # starts and seals new segments
    finally:
        writer.close()
    assert verify_directory(tree_dir).findings == ()
