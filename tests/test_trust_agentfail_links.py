"""Issue 13, item 5: links and relations whose info or keyword id names nothing.

Each test damages a real log on disk the way a flipped digit or a lost segment does (the row
stays valid JSON), then opens it with the real replay: reads skip the reference, verify
reports it as an error at its file and line, and repair retires it with one appended
operation, keeping every other byte of the log where it was.

Both log formats are covered. In format 1 (no checksums) a flipped digit is found only as a
reference naming nothing. In format 2 the same holds when the damage happened before the
checksum was computed (a buggy writer, a merged log), so the damage helper can re-checksum the
edited operation and re-seal its segment with the project's own encoders; a raw flip on disk
is a ``checksum`` error instead, and repair moves that one operation to quarantine/.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import orjson
import pytest
from helpers import snapshot, without_repair_appends
from hypothesis import given
from hypothesis import strategies as st
from test_trust_log_format import make_format_1

from kwtree import (
    CorruptLogError,
    InvalidInputError,
    KeywordTree,
    NotFoundError,
    repair_directory,
    verify_directory,
)
from kwtree.cli.main import main
from kwtree.engine.events import CRC_KEY, rechain, with_checksum
from kwtree.stores.eventlog import SEAL_PREFIX, encode_seal, seals_start


def segments(directory: Path) -> list[Path]:
    return sorted((directory / "log").glob("*.jsonl"))


def new_tree(directory: Path, log_format: int) -> Path:
    """An empty data directory of ``log_format`` (1: no checksums, no seals; 3: today's)."""
    if log_format == 1:
        make_format_1(directory)
    return directory


def flip(directory: Path, entity: str, field: str, value: str, occurrence: int = 0, *,
         recompute_checksum: bool = True) -> tuple[str, int]:
    """Change the last digit of ``value`` in the ``field`` of the ``occurrence``-th ``entity``
    row holding it (the row stays valid JSON, as after a bit flip). With
    ``recompute_checksum`` the damage predates the checksum (a buggy writer, a merged log): a
    format-2 operation gets the checksum of its new bytes and its segment a seal of what it now
    holds; without it, a bit flipped on disk. Returns (the new id, the 1-based line)."""
    changed = value[:-1] + ("1" if value[-1] != "1" else "2")
    for path in segments(directory):
        lines = path.read_bytes().rstrip(b"\0").split(b"\n")
        for index, line in enumerate(lines):
            if not line or line.startswith(SEAL_PREFIX):
                continue
            row = orjson.loads(line)
            if row["entity"] == entity and row.get(field) == value and occurrence:
                occurrence -= 1
            elif row["entity"] == entity and row.get(field) == value:
                lines[index] = line.replace(f'"{field}":"{value}"'.encode(), f'"{field}":"{changed}"'.encode(), 1)
                assert orjson.loads(lines[index])[field] == changed
                data = b"\n".join(lines)
                path.write_bytes(rechecksum(data, index) if recompute_checksum else data)
                if recompute_checksum:
                    relink(directory)
                return changed, index + 1
    raise AssertionError(f"no {entity} row with {field}={value}")


def rechecksum(data: bytes, index: int) -> bytes:
    """``data`` (a segment) with the operation holding line ``index`` (0-based) checksummed
    afresh and the seal lines, if any, naming the same successors over the new bytes."""
    lines = data.split(b"\n")
    start = index
    while start > 0 and "end" not in orjson.loads(lines[start - 1]):
        start -= 1
    stop = index
    while "end" not in orjson.loads(lines[stop]):
        stop += 1
    last = orjson.loads(lines[stop])
    if CRC_KEY not in last["end"]:
        return data  # format 1: nothing to recompute
    del last["end"][CRC_KEY]
    operation = b"".join(line + b"\n" for line in lines[start:stop]) + orjson.dumps(last) + b"\n"
    assert operation.count(b"\n") == stop - start + 1
    lines[start:stop + 1] = with_checksum(operation).split(b"\n")[:-1]
    data = b"\n".join(lines)
    operations = data[:seals_start(data)]
    successors = [orjson.loads(line)["seal"]["next"] for line in data[len(operations):].splitlines()]
    return operations + b"".join(encode_seal(operations, name) for name in successors)


def relink(directory: Path) -> None:
    """What a buggy writer leaves in a chained log (format 3): every operation linked, as its
    bytes now are, to the one before it in op-id order, with its checksum and its segment's
    seal computed afresh. A log without links (format 1) is left as it is."""
    files = segments(directory)
    found: list[tuple[list[tuple[str, bytes]], list[str]]] = []
    for path in files:
        data = path.read_bytes().rstrip(b"\0")
        operations = data[:seals_start(data)]
        successors = [orjson.loads(line)["seal"]["next"] for line in data[len(operations):].splitlines()]
        ops, rows = [], b""
        for line in operations.splitlines(keepends=True):
            rows += line
            if b'"end":' in line:
                ops.append((orjson.loads(line)["op"], rows))
                rows = b""
        found.append((ops, successors))
    if not any(b'"prev":' in rows for ops, _ in found for _, rows in ops):
        return
    first: dict[str, bytes] = {}
    for ops, _ in found:
        for op_id, rows in ops:
            first.setdefault(op_id, rows)
    chained = dict(rechain(sorted(first.items())))
    for path, (ops, successors) in zip(files, found, strict=True):
        body = b"".join(with_checksum(chained[op_id]) for op_id, _ in ops)
        path.write_bytes(body + b"".join(encode_seal(body, name) for name in successors))


@pytest.fixture(params=[1, 3], ids=["format1", "format3"])
def log_format(request: pytest.FixtureRequest) -> int:
    return request.param


def other_findings(log_format: int) -> list[str]:
    """What verify says of a clean log of ``log_format`` besides the damage under test."""
    return ["old-format"] if log_format == 1 else []


@pytest.fixture
def damaged(tmp_path: Path, log_format: int):
    """A tree (of either format) whose note's link to Python names an info that was never
    written, damaged before any checksum was computed."""
    directory = new_tree(tmp_path / "tree", log_format)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        python = tree.create_keyword("Python", parent_id="root")
        rust = tree.create_keyword("Rust", parent_id="root")
        note = tree.create_info("python is a programming language", keyword_ids=[python.id, rust.id])
        other = tree.create_info("python packaging uses uv", keyword_ids=[python.id])
        relation = tree.relate(python.id, rust.id, "see_also")
    flipped, line = flip(directory, "link", "info_id", note.id)
    return directory, python, rust, note, other, relation, flipped, line


def test_every_read_skips_a_link_whose_info_id_names_nothing(damaged, capsys) -> None:
    directory, python, rust, note, other, _, flipped, _ = damaged
    with KeywordTree(directory, durability="none", worker=False) as tree:
        # Before: KeyError from both reads (and from search's matched infos).
        assert [i.id for i in tree.get_infos_of_keyword(python.id)] == [other.id]
        assert [k.id for k, _ in tree.get_keywords_of_info(note.id)] == [rust.id]
        with pytest.raises(NotFoundError):
            tree.get_keywords_of_info(flipped)
        assert [i.id for i in tree.search("Python").infos] == [other.id]
        hits = {hit.info.id: hit for hit in tree.recall("python language")}
        assert [k.keyword.id for k in hits[note.id].keywords] == [rust.id]
        assert [h.info.id for h in tree.recall("python", under=python.id)] == [other.id]
        assert "python is a programming language" in tree.context("python language")
        assert tree.tree_metrics()["links"] == 2
        exported = tree.export(directory.parent / "out.json")
        assert exported["links"] == 2
        links = json.loads((directory.parent / "out.json").read_text())["links"]
        assert flipped not in {link["info_id"] for link in links}
        assert any(note.id in op.entity_ids for op in tree.history(python.id))
        # Writes that walk the indexes do not trip over it either.
        tree.merge_keywords(python.id, rust.id)
        assert {i.id for i in tree.get_infos_of_keyword(rust.id)} == {note.id, other.id}
    assert main(["infos", str(directory), rust.id]) == 0
    assert note.id in capsys.readouterr().out


def test_a_link_whose_keyword_id_names_nothing_is_skipped_and_undo_still_works(tmp_path: Path, log_format: int) -> None:
    directory = new_tree(tmp_path / "tree", log_format)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        python = tree.create_keyword("Python", parent_id="root")
        note = tree.create_info("python is a language", keyword_ids=[python.id])
        op_id = tree.last_op_id
    flip(directory, "link", "keyword_id", python.id)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert tree.get_keywords_of_info(note.id) == []  # before: KeyError
        assert tree.get_infos_of_keyword(python.id) == []
        assert [h.info.id for h in tree.recall("python")] == [note.id]
        tree.undo(op_id)  # retires the info and the (inert) link, as one operation
        with pytest.raises(NotFoundError):
            tree.get_info(note.id)
        tree.delete_keyword(python.id)


def test_verify_reports_a_dangling_link_as_an_error_at_its_line(damaged, log_format: int) -> None:
    directory, _, _, note, _, _, flipped, line = damaged
    report = verify_directory(directory)
    assert not report.ok  # before: a warning only
    assert sorted(f.code for f in report.findings if f.severity != "error") == other_findings(log_format)
    (error,) = report.errors  # in format 2 the recomputed checksum matches: no checksum error
    assert error.code == "dangling-link"
    assert (error.file, error.line) == (f"log/{segments(directory)[0].name}", line)
    assert f"info {flipped}" in error.message and "kwtree repair" in error.message


def test_repair_retires_the_dangling_link_and_keeps_every_other_row(damaged, log_format: int) -> None:
    directory, python, rust, note, other, _, flipped, _ = damaged
    before = segments(directory)[0].read_bytes().rstrip(b"\0")
    report = repair_directory(directory)
    assert report.ok, report.to_text()
    assert "retired" in {f.code for f in report.findings}
    after = segments(directory)[0].read_bytes().rstrip(b"\0")
    assert after.startswith(before)  # nothing cut, nothing moved: one operation appended
    appended = [orjson.loads(line) for line in after[len(before):].splitlines() if line]
    assert [(row["entity"], row["info_id"], row.get("deleted")) for row in appended] == [("link", flipped, True)]
    assert appended[-1]["end"]["kind"] == "repair"
    assert (CRC_KEY in appended[-1]["end"]) == (log_format == 3)  # written in the directory's format
    again = verify_directory(directory)
    assert again.ok and not again.warnings
    assert sorted(f.code for f in again.findings) == sorted(["retired-link", *other_findings(log_format)])
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert tree.get_info(note.id).content == "python is a programming language"
        assert [i.id for i in tree.get_infos_of_keyword(python.id)] == [other.id]
        assert [k.id for k, _ in tree.get_keywords_of_info(note.id)] == [rust.id]
        assert len(tree.get_relations(python.id)) == 1
        repair_op = tree.last_op_id
        assert repair_op is not None and tree.history(limit=1)[0].kind == "repair"
        with pytest.raises(InvalidInputError, match="no longer live"):
            tree.undo(repair_op)  # only once the info it names is back


def test_a_relation_naming_a_keyword_never_written_is_skipped_reported_and_retired(damaged) -> None:
    directory, python, rust, _, _, relation, _, _ = damaged
    ghost, _ = flip(directory, "relation", "to_id", rust.id)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert tree.get_relations(python.id) == []
        tree.merge_keywords(python.id, rust.id)  # before: re-pointed the relation to rust -> ghost
        assert tree.get_relations(rust.id, direction="both") == []
    report = verify_directory(directory)
    assert {f.code for f in report.errors} == {"dangling-link", "dangling-relation"}
    assert any(f"keyword {ghost}" in f.message for f in report.errors)
    assert repair_directory(directory).ok
    assert verify_directory(directory).ok


def test_a_lost_segment_leaves_links_that_reads_skip_verify_reports_and_repair_retires(
    tmp_path: Path, log_format: int
) -> None:
    """Format 1 cannot tell a lost segment: the tree opens, reads skip the links it left
    naming nothing. Format 2 can: the open refuses (``missing-segment``) until repair accepts
    the loss. Either way repair retires those links and every other memory stays."""
    directory = new_tree(tmp_path / "tree", log_format)
    with KeywordTree(directory, durability="none", worker=False, segment_bytes=4096) as tree:
        python = tree.create_keyword("Python", parent_id="root")
        fillers = []
        while len(segments(directory)) == 1:
            fillers.append(tree.create_keyword(f"filler {tree.last_op_id}", parent_id=python.id).id)
        held: list[str] = []  # all in the second segment but the last, which began the third
        while len(segments(directory)) == 2:
            held.append(tree.create_info("memory " + "x" * 200).id)
        lost = held[:3]
        for info_id in lost:
            tree.link_info(info_id, python.id)
        tree.unlink_info(lost[0], python.id)  # a tombstone naming nothing is reported too
        kept = tree.create_info("kept memory", keyword_ids=[python.id])
        first = 1
    gone = segments(directory)[first]
    gone.unlink()  # the segment holding the infos' creation
    report = verify_directory(directory)
    if log_format == 1:
        with KeywordTree(directory, durability="none", worker=False) as tree:
            assert [i.id for i in tree.get_infos_of_keyword(python.id)] == [kept.id]
        assert [f.code for f in report.errors] == ["dangling-link"] * 3
    else:
        with pytest.raises(CorruptLogError, match=f"{gone.stem}, which is missing"):
            KeywordTree(directory, durability="none", worker=False)
        assert Counter(f.code for f in report.errors) == {"missing-segment": 1, "dangling-link": 3}
    assert {f.message.split()[1] for f in report.errors if f.code == "dangling-link"} == {
        f"{info_id}/{python.id}" for info_id in lost}
    repaired = repair_directory(directory)
    assert repaired.ok, repaired.to_text()
    done = Counter(f.code for f in repaired.findings)
    assert done["retired"] == 3 and done["accepted-loss"] == (log_format == 3)
    again = verify_directory(directory)
    assert again.ok and not again.warnings, again.to_text()
    assert [f.code for f in again.findings if f.code.startswith("retired")] == ["retired-link"] * 3
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert [i.id for i in tree.get_infos_of_keyword(python.id)] == [kept.id]
        assert tree.get_info(kept.id).content == "kept memory"
        assert [k.id for k in tree.get_children(python.id)] == fillers[:-1]  # the last began the second
        assert tree.get_info(held[-1]).content.startswith("memory ")
        assert tree.tree_metrics()["infos"] == 2
        snapshot(tree, info_ids=held)  # every read of every memory, lost ones too, answers


def test_a_dangling_link_in_a_merged_log_out_of_op_id_order_is_reported_and_retired(damaged) -> None:
    directory, python, _, _, other, _, flipped, _ = damaged
    segment = segments(directory)[0]
    lines = segment.read_bytes().rstrip(b"\0").split(b"\n")[:-1]
    ops: list[list[bytes]] = [[]]
    for line in lines:
        ops[-1].append(line)
        if b'"end":' in line:
            ops.append([])
    ops.pop()
    reordered = [ops[0], *reversed(ops[1:])]  # the root first, then newest first: as a naive merge leaves it
    segment.write_bytes(b"".join(line + b"\n" for op in reordered for line in op))
    report = verify_directory(directory)
    assert "out-of-order" in {f.code for f in report.findings}
    assert [f.code for f in report.errors] == ["dangling-link"]
    assert any(flipped in f.message for f in report.errors)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert [i.id for i in tree.get_infos_of_keyword(python.id)] == [other.id]
    assert repair_directory(directory).ok


@pytest.fixture
def flipped_on_disk(tmp_path: Path):
    """A format-2 tree where a link written by an operation of its own (``link_info``) names,
    after a digit flipped on disk, an info never written; its checksum is left as it was."""
    directory = tmp_path / "tree"
    with KeywordTree(directory, durability="none", worker=False) as tree:
        python = tree.create_keyword("Python", parent_id="root")
        rust = tree.create_keyword("Rust", parent_id="root")
        note = tree.create_info("python is a programming language", keyword_ids=[python.id])
        link_op = tree.link_info(note.id, rust.id, "example").op_id
        other = tree.create_info("python packaging uses uv", keyword_ids=[python.id])
        tree.relate(python.id, rust.id, "see_also")
    assert b'"crc"' in segments(directory)[0].read_bytes()
    flipped, line = flip(directory, "link", "info_id", note.id, 1, recompute_checksum=False)
    return directory, python, rust, note, other, link_op, flipped, line


def test_a_digit_flipped_on_disk_is_a_checksum_error_at_its_line_in_verify_and_at_open(flipped_on_disk) -> None:
    directory, python, rust, note, other, _, flipped, line = flipped_on_disk
    report = verify_directory(directory)
    (error,) = report.errors  # the checksum says it first: no dangling-link for a damaged operation
    assert error.code == "checksum"
    assert (error.file, error.line) == (f"log/{segments(directory)[0].name}", line)
    assert "a byte of it was changed" in error.message and "kwtree repair" in error.message
    with pytest.raises(CorruptLogError) as caught:  # the open checks checksums too (damage is never silent)
        KeywordTree(directory, durability="none", worker=False)
    assert (caught.value.path, caught.value.line) == (str(segments(directory)[0]), line)


def test_repair_quarantines_only_the_operation_whose_checksum_fails_and_keeps_the_info_it_named(
    flipped_on_disk,
) -> None:
    directory, python, rust, note, other, link_op, flipped, line = flipped_on_disk
    segment = segments(directory)[0]
    data = segment.read_bytes().rstrip(b"\0")
    damaged_row = data.split(b"\n")[line - 1] + b"\n"
    report = repair_directory(directory)
    assert report.ok, report.to_text()
    (moved,) = (f for f in report.findings if f.code == "quarantined")
    assert (moved.file, moved.line) == (f"log/{segment.name}", line)
    assert "retired" not in {f.code for f in report.findings}  # nothing is left naming nothing
    (bad,) = (directory / "quarantine").glob(f"{segment.stem}.*.bad")
    assert bad.read_bytes() == damaged_row and flipped.encode() in damaged_row  # kept, to be put back by hand
    kept = without_repair_appends(segment.read_bytes().rstrip(b"\0"))  # (the repair's note of what it removed)
    assert kept == data.replace(damaged_row, b"")  # every other byte in place
    again = verify_directory(directory)
    assert again.ok and not again.warnings, again.to_text()
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert tree.get_info(note.id).content == "python is a programming language"  # written by another operation
        assert [k.id for k, _ in tree.get_keywords_of_info(note.id)] == [python.id]
        assert [i.id for i in tree.get_infos_of_keyword(python.id)] == [note.id, other.id]
        assert tree.get_infos_of_keyword(rust.id) == []
        assert len(tree.get_relations(python.id)) == 1
        assert link_op not in {op.op_id for op in tree.history()}
        assert len(tree.history()) == 6  # root, two keywords, two infos, the relation
        snapshot(tree, [python.id, rust.id], [note.id, other.id])


def test_repair_of_a_checksum_failure_retires_the_later_links_to_what_only_that_operation_wrote(
    tmp_path: Path,
) -> None:
    """The damaged operation created the info that a later operation links: repair
    quarantines the creation, and the same repair retires the link the loss leaves naming
    nothing, so verify is clean and every read works."""
    directory = tmp_path / "tree"
    with KeywordTree(directory, durability="none", worker=False) as tree:
        python = tree.create_keyword("Python", parent_id="root")
        rust = tree.create_keyword("Rust", parent_id="root")
        note = tree.create_info("python is a programming language", keyword_ids=[python.id])
        tree.link_info(note.id, rust.id, "example")
        other = tree.create_info("python packaging uses uv", keyword_ids=[python.id])
    _, line = flip(directory, "link", "info_id", note.id, recompute_checksum=False)  # in note's creation
    report = verify_directory(directory)
    assert Counter(f.code for f in report.errors) == {"checksum": 1, "dangling-link": 1}
    (dangling,) = (f for f in report.errors if f.code == "dangling-link")
    assert f"{note.id}/{rust.id} names info {note.id}" in dangling.message
    repaired = repair_directory(directory)
    assert repaired.ok, repaired.to_text()
    assert Counter(f.code for f in repaired.findings if f.code in ("quarantined", "retired")) == {
        "quarantined": 1, "retired": 1}
    again = verify_directory(directory)
    assert again.ok and not again.warnings, again.to_text()
    assert [f.code for f in again.findings if f.code.startswith("retired")] == ["retired-link"]
    with KeywordTree(directory, durability="none", worker=False) as tree:
        with pytest.raises(NotFoundError):
            tree.get_info(note.id)  # its operation is in quarantine/, whole
        assert [i.id for i in tree.get_infos_of_keyword(python.id)] == [other.id]
        assert tree.get_infos_of_keyword(rust.id) == []
        assert [h.info.id for h in tree.recall("python")] == [other.id]
        snapshot(tree, [python.id, rust.id], [note.id, other.id])


History = tuple[Path, list[str], list[str]]


@pytest.fixture(scope="module", params=[1, 3], ids=["format1", "format3"])
def history(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> History:
    """A log (of each format) in two segments or more with links and relations written by
    every kind of operation: create, link, relink, unlink, relate, unrelate, merge, delete, undo."""
    directory = new_tree(tmp_path_factory.mktemp("dangling") / "tree", request.param)
    with KeywordTree(directory, durability="none", worker=False, segment_bytes=4096) as tree:
        kids = [tree.create_keyword(f"kw {n}", parent_id="root").id for n in range(6)]
        iids = [tree.create_info(f"note {n} " + "y" * 60, keyword_ids=kids[n % 3:n % 3 + 2]).id for n in range(8)]
        tree.link_info(iids[0], kids[5], "example")
        tree.link_info(iids[0], kids[5], "source")
        tree.unlink_info(iids[1], kids[1])
        for n in range(5):
            tree.relate(kids[n], kids[n + 1], "see_also")
        tree.unrelate(kids[0], kids[1])
        tree.merge_keywords(kids[3], kids[4])
        tree.delete_info(iids[2])
        op = tree.delete_keyword(kids[2], info_policy="reattach")
        tree.undo(op.op_id)
        tree.batch_create_infos([{"content": "batched", "keyword_ids": [kids[0], kids[4]]}])
    assert len(segments(directory)) >= 2
    return directory, kids, iids


REFERENCE_FIELDS = {"link": ("info_id", "keyword_id"), "relation": ("from_id", "to_id")}


def flip_a_reference(directory: Path, pick: int, end: int, *, recompute_checksum: bool) -> tuple[Path, int]:
    """Flip a digit of one end (``end``) of the ``pick``-th link or relation row (modulo their
    number); returns the segment and the 1-based line of the row."""
    rows = [(orjson.loads(line)) for path in segments(directory)
            for line in path.read_bytes().rstrip(b"\0").split(b"\n") if line and not line.startswith(SEAL_PREFIX)]
    references = [row for row in rows if row["entity"] in REFERENCE_FIELDS]
    index = pick % len(references)
    row = references[index]
    field = REFERENCE_FIELDS[row["entity"]][end]
    earlier = sum(1 for other in references[:index] if other["entity"] == row["entity"] and other[field] == row[field])
    _, line = flip(directory, row["entity"], field, row[field], earlier, recompute_checksum=recompute_checksum)
    path = next(path for path in segments(directory) if row["op"] in op_ids(path))
    return path, line


def op_ids(path: Path) -> list[str]:
    """The op id of each operation of a segment, in its order."""
    return [row["op"] for row in map(orjson.loads, path.read_bytes().rstrip(b"\0").splitlines())
            if "end" in row]


def reads(directory: Path, kids: list[str], iids: list[str]) -> dict:
    """Every public read about the history's entities (raising on anything but a KwtreeError)."""
    with KeywordTree(directory, durability="none", worker=False) as tree:
        seen = snapshot(tree, kids, iids)
        seen["recall"] = [(h.info.id, [k.keyword.id for k in h.keywords]) for h in tree.recall("note", k=20)]
    del seen["last_op_id"], seen["metrics"]["operations"]
    return seen


@given(pick=st.integers(0, 10_000), end=st.integers(0, 1))
def test_a_flipped_id_in_any_reference_row_never_breaks_a_read_and_repair_changes_no_read(
    history: History, pick: int, end: int
) -> None:
    """Any link or relation row, either end, flipped before its checksum was computed (format
    2) or in a log without checksums (format 1): every public read answers (no KeyError),
    verify reports the damage as an error, repair leaves no error, and no read changes by
    repairing."""
    template, kids, iids = history
    work = Path(tempfile.mkdtemp(prefix="kwtree-dangling-"))
    try:
        directory = work / "tree"
        shutil.copytree(template, directory)
        flip_a_reference(directory, pick, end, recompute_checksum=True)
        damaged = reads(directory, kids, iids)
        report = verify_directory(directory)
        assert {f.code for f in report.errors} <= {"dangling-link", "dangling-relation"} and report.errors
        assert repair_directory(directory).ok
        assert verify_directory(directory).ok
        assert reads(directory, kids, iids) == damaged
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("history", [3], ids=["format3"], indirect=True)
@given(pick=st.integers(0, 10_000), end=st.integers(0, 1))
def test_a_raw_flip_in_any_reference_row_is_a_checksum_error_and_repair_loses_only_its_operation(
    history: History, pick: int, end: int
) -> None:
    """Format 2, a digit flipped on disk (checksum not recomputed) in either id of any link or
    relation row: opening refuses the log (CorruptLogError at that operation's end line);
    verify reports a ``checksum`` error at the file and end line of that operation (and
    ``sealed-changed`` if its segment is sealed);
    repair moves exactly that operation's bytes to quarantine/, keeps every other operation,
    retires what the loss leaves naming nothing, and leaves verify clean and every read working."""
    template, kids, iids = history
    work = Path(tempfile.mkdtemp(prefix="kwtree-rawflip-"))
    try:
        directory = work / "tree"
        shutil.copytree(template, directory)
        before = {path.name: op_ids(path) for path in segments(directory)}
        original = {path.name: path.read_bytes() for path in segments(directory)}
        path, line = flip_a_reference(directory, pick, end, recompute_checksum=False)
        lines = path.read_bytes().split(b"\n")
        last = line - 1
        while "end" not in orjson.loads(lines[last]):
            last += 1
        first = line - 1
        while first > 0 and "end" not in orjson.loads(lines[first - 1]):
            first -= 1
        damaged_op = orjson.loads(lines[last])["op"]
        operation = b"".join(row + b"\n" for row in lines[first:last + 1])
        wrote = {orjson.loads(row).get("id") for row in lines[first:last + 1]} - {None}  # infos and keywords
        with pytest.raises(CorruptLogError) as caught:  # the open checks checksums: damage is never silent
            KeywordTree(directory, read_only=True, worker=False)
        assert (caught.value.path, caught.value.line) == (str(path), last + 1)

        report = verify_directory(directory)
        sealed = lines[-2].startswith(SEAL_PREFIX)
        damage = {"checksum": 1, **({"sealed-changed": 1} if sealed else {})}
        consequences = ("dangling-link", "dangling-relation", "cache-watermark")
        assert Counter(f.code for f in report.errors if f.code not in consequences) == damage
        for cache in (f for f in report.errors if f.code == "cache-watermark"):
            assert damaged_op in cache.message  # the open that read applied it; verify does not count it
        (error,) = (f for f in report.errors if f.code == "checksum")
        assert (error.file, error.line) == (f"log/{path.name}", last + 1)
        span = f"line {first + 1}," if first == last else f"lines {first + 1}-{last + 1},"
        assert "a byte of it was changed" in error.message and span in error.message
        for dangling in (f for f in report.errors if f.code.startswith("dangling-")):
            # verify judges the log without the damaged operation, as repair leaves it: a later
            # reference to an info or keyword only that operation wrote names nothing then
            assert dangling.message.split(" names ")[1].split()[1].rstrip(",") in wrote

        repaired = repair_directory(directory)
        assert repaired.ok, repaired.to_text()
        (moved,) = (f for f in repaired.findings if f.code == "quarantined")
        assert (moved.file, moved.line) == (f"log/{path.name}", first + 1)
        (bad,) = (directory / "quarantine").glob(f"{path.stem}.*.bad")
        assert bad.read_bytes() == operation  # the flipped bytes, kept
        assert verify_directory(directory).ok
        after = {path.name: op_ids(path) for path in segments(directory)}
        known = {op for ops in before.values() for op in ops}
        added = [op for ops in after.values() for op in ops if op not in known]
        assert len(added) <= 2  # the note of what repair removed, the repair operation if the loss left
        # references naming nothing
        assert [op for name in sorted(after) for op in after[name]] == [
            op for name in sorted(before) for op in before[name] if op != damaged_op] + added
        assert set(after) - set(before) <= {f"{op}.jsonl" for op in added}  # every intact operation kept, in place
        for name, data in original.items():  # and byte for byte
            if name != path.name:
                data = data.rstrip(b"\0")
                assert (directory / "log" / name).read_bytes().startswith(data[:seals_start(data)])
        reads(directory, kids, iids)
    finally:
        shutil.rmtree(work, ignore_errors=True)
