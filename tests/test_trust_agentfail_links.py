"""Issue 13, item 5: links and relations whose info or keyword id names nothing.

Each test damages a real log on disk the way a flipped digit or a lost segment does (the row
stays valid JSON), then opens it with the real replay: reads skip the reference, verify
reports it as an error at its file and line, and repair retires it with one appended
operation, keeping every other byte of the log where it was.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import orjson
import pytest
from helpers import snapshot
from hypothesis import given
from hypothesis import strategies as st

from kwtree import InvalidInputError, KeywordTree, NotFoundError, repair_directory, verify_directory
from kwtree.cli import main


def segments(directory: Path) -> list[Path]:
    return sorted((directory / "log").glob("*.jsonl"))


def flip(directory: Path, entity: str, field: str, value: str, occurrence: int = 0) -> tuple[str, int]:
    """Change the last digit of ``value`` in the ``field`` of the ``occurrence``-th ``entity``
    row holding it (the row stays valid JSON, as after a bit flip). Returns (the new id, the
    1-based line)."""
    changed = value[:-1] + ("1" if value[-1] != "1" else "2")
    for path in segments(directory):
        lines = path.read_bytes().rstrip(b"\0").split(b"\n")
        for index, line in enumerate(lines):
            if not line:
                continue
            row = orjson.loads(line)
            if row["entity"] == entity and row.get(field) == value and occurrence:
                occurrence -= 1
            elif row["entity"] == entity and row.get(field) == value:
                lines[index] = line.replace(f'"{field}":"{value}"'.encode(), f'"{field}":"{changed}"'.encode(), 1)
                assert orjson.loads(lines[index])[field] == changed
                path.write_bytes(b"\n".join(lines))
                return changed, index + 1
    raise AssertionError(f"no {entity} row with {field}={value}")


@pytest.fixture
def damaged(tmp_path: Path):
    """A tree whose note's link to Python names an info that was never written."""
    directory = tmp_path / "tree"
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


def test_a_link_whose_keyword_id_names_nothing_is_skipped_and_undo_still_works(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
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


def test_verify_reports_a_dangling_link_as_an_error_at_its_line(damaged) -> None:
    directory, _, _, note, _, _, flipped, line = damaged
    report = verify_directory(directory)
    assert not report.ok  # before: a warning only
    (error,) = report.errors
    assert error.code == "dangling-link"
    assert (error.file, error.line) == (f"log/{segments(directory)[0].name}", line)
    assert f"info {flipped}" in error.message and "kwtree repair" in error.message


def test_repair_retires_the_dangling_link_and_keeps_every_other_row(damaged) -> None:
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
    again = verify_directory(directory)
    assert again.ok and not again.warnings
    assert [f.code for f in again.findings] == ["retired-link"]
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


def test_a_lost_segment_leaves_links_that_reads_skip_verify_reports_and_repair_retires(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    with KeywordTree(directory, durability="none", worker=False, segment_bytes=4096) as tree:
        python = tree.create_keyword("Python", parent_id="root")
        while len(segments(directory)) == 1:
            tree.create_keyword(f"filler {tree.last_op_id}", parent_id=python.id)
        held: dict[str, int] = {}  # info id -> the segment its creation went to
        while len(segments(directory)) == 2:
            held[tree.create_info("memory " + "x" * 200).id] = len(segments(directory)) - 1
        lost = [info_id for info_id, index in held.items() if index == 1][:3]
        for info_id in lost:
            tree.link_info(info_id, python.id)
        tree.unlink_info(lost[0], python.id)  # a tombstone naming nothing is reported too
        kept = tree.create_info("kept memory", keyword_ids=[python.id])
        first = 1
    segments(directory)[first].unlink()  # the segment holding the infos' creation
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert [i.id for i in tree.get_infos_of_keyword(python.id)] == [kept.id]
    report = verify_directory(directory)
    assert [f.code for f in report.errors] == ["dangling-link"] * 3
    assert repair_directory(directory).ok
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert [i.id for i in tree.get_infos_of_keyword(python.id)] == [kept.id]
        assert tree.get_info(kept.id).content == "kept memory"


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


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[str]]:
    """A log in two segments with links and relations written by every kind of operation:
    create, link, relink, unlink, relate, unrelate, merge, delete, undo."""
    directory = tmp_path_factory.mktemp("dangling") / "tree"
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


@given(pick=st.integers(0, 10_000), end=st.integers(0, 1))
def test_a_flipped_id_in_any_reference_row_never_breaks_a_read_and_repair_changes_no_read(
    history: tuple[Path, list[str], list[str]], pick: int, end: int
) -> None:
    """Any link or relation row, either end: every public read answers (no KeyError), verify
    reports the damage as an error, repair leaves no error, and no read changes by repairing."""
    template, kids, iids = history
    work = Path(tempfile.mkdtemp(prefix="kwtree-dangling-"))
    try:
        directory = work / "tree"
        shutil.copytree(template, directory)
        rows = [(orjson.loads(line)) for path in segments(directory)
                for line in path.read_bytes().rstrip(b"\0").split(b"\n") if line]
        references = [row for row in rows if row["entity"] in REFERENCE_FIELDS]
        index = pick % len(references)
        row = references[index]
        field = REFERENCE_FIELDS[row["entity"]][end]
        earlier = sum(1 for other in references[:index] if other["entity"] == row["entity"] and other[field] == row[field])
        flip(directory, row["entity"], field, row[field], earlier)

        def reads() -> dict:
            with KeywordTree(directory, durability="none", worker=False) as tree:
                seen = snapshot(tree, kids, iids)
                seen["recall"] = [(h.info.id, [k.keyword.id for k in h.keywords]) for h in tree.recall("note", k=20)]
            del seen["last_op_id"], seen["metrics"]["operations"]
            return seen

        damaged = reads()
        report = verify_directory(directory)
        assert {f.code for f in report.errors} <= {"dangling-link", "dangling-relation"} and report.errors
        assert repair_directory(directory).ok
        assert verify_directory(directory).ok
        assert reads() == damaged
    finally:
        shutil.rmtree(work, ignore_errors=True)
