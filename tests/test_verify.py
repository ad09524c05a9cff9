"""verify() and repair() on real data directories: damage is made to the bytes of real log
segments (a garbled middle line, a torn tail, a sealed segment cut mid-operation, data hidden
behind a NUL, a lost root, a bad manifest, a cache watermark ahead of the log), merged
histories are built from two real forks, and the CLI runs in-process through ``main``.

The property test garbles, cuts or deletes a random byte range of a valid multi-segment log
and checks the repair promise: the directory opens, verify finds no error, every operation
before the damage survives, and the quarantined bytes plus the remaining log bytes give back
every byte that was there.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import orjson
import pytest
from helpers import copy_tree_dir, snapshot, without_repair_appends
from hypothesis import given
from hypothesis import strategies as st

from kwtree import (
    CorruptLogError,
    DamagedDirectoryError,
    FormatError,
    KeywordTree,
    LockTimeoutError,
    NotFoundError,
    ReadOnlyError,
    repair_directory,
    verify_directory,
)
from kwtree.cli.main import main
from kwtree.ops.verify import MAX_PER_CODE, Report
from kwtree.stores.eventlog import seals_start
from kwtree.stores.lock import LOCK_NAME, WriterLock

# --- helpers ----------------------------------------------------------------------------------


def digest(directory: Path) -> dict[str, str]:
    """Every file and directory under ``directory`` with a hash of its bytes."""
    found = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        found[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def segments(directory: Path) -> list[Path]:
    return sorted((directory / "log").glob("*.jsonl"))


def operations(data: bytes) -> list[tuple[str, int, int, int, int]]:
    """(op id, first line, last line, start byte, end byte) of each whole operation."""
    found, pos, first, start = [], 0, 1, 0
    for number, line in enumerate(data.rstrip(b"\0").splitlines(keepends=True), start=1):
        row = orjson.loads(line)
        pos += len(line)
        if "end" in row:
            found.append((row["op"], first, number, start, pos))
            first, start = number + 1, pos
    return found


def without(source: Path, target: Path, segment: str, start: int, end: int) -> Path:
    """A copy of the directory ``source`` (log and manifest only) whose segment lacks [start, end)."""
    (target / "log").mkdir(parents=True)
    shutil.copyfile(source / "manifest.json", target / "manifest.json")
    for path in segments(source):
        data = path.read_bytes().rstrip(b"\0")
        if path.name == segment:
            data = data[:start] + data[end:]
        (target / "log" / path.name).write_bytes(data)
    return target


def codes(report: Report, severity: str | None = None) -> set[str]:
    return {f.code for f in report.findings if severity is None or f.severity == severity}


def populate(tree: KeywordTree) -> tuple[list[str], list[str]]:
    """Keywords, infos (one linked to two keywords: a 3-row operation), a relation, updates,
    a merge, a cascading delete and an undo."""
    a = tree.create_keyword("Alpha", llm_auto_place=False, aliases=["first"])
    b = tree.create_keyword("Beta", parent_id=a.id, description="under alpha")
    c = tree.create_keyword("Gamma", parent_id=b.id)
    d = tree.create_keyword("Delta", llm_auto_place=False)
    batch = tree.batch_create_keywords([{"name": "x", "ref": "x"}, {"name": "y", "parent_ref": "x"}])
    note = tree.create_info("a note linked twice — 记忆", keyword_ids=[a.id, b.id], source="chat")
    other = tree.create_info("another memory", keyword_ids=[d.id])
    tree.relate(a.id, d.id, "see_also", 0.5, "why not")
    tree.update_keyword(b.id, {"description": "changed"}, 1)
    tree.move_keyword(c.id, d.id)
    tree.update_info(other.id, {"content": "another memory, edited"})
    tree.merge_keywords(batch[1].id, batch[0].id)
    tree.link_info(other.id, c.id, "related")
    tree.unlink_info(other.id, c.id)
    tree.delete_keyword(d.id, cascade=True)
    tree.undo(tree.history(limit=1)[0].op_id)
    return [a.id, b.id, c.id, d.id, *(k.id for k in batch)], [note.id, other.id]


def build(directory: Path, segment_bytes: int | None = None) -> tuple[list[str], list[str]]:
    with KeywordTree(directory, durability="none", worker=False, segment_bytes=segment_bytes) as tree:
        return populate(tree)


def state_of(directory: Path, kids: list[str], iids: list[str]) -> dict:
    with KeywordTree(directory, read_only=True, worker=False) as tree:
        return snapshot(tree, kids, iids)


# --- a clean log --------------------------------------------------------------------------------


def test_a_healthy_tree_has_no_findings_and_verify_counts_its_log(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="full", worker=False) as tree:
        populate(tree)
        tree.recall("memory")  # a full-text cache with a watermark
        report = tree.verify()  # the newest segment carries preallocated padding now
        metrics = tree.tree_metrics()
    assert report.ok and report.findings == ()
    assert report.operations == metrics["operations"] and report.segments == metrics["log_segments"]
    assert report.bytes == metrics["log_bytes"]
    assert report.rows == sum(len(p.read_bytes().rstrip(b"\0").splitlines()) for p in segments(tree_dir))
    assert verify_directory(tree_dir).to_json()["ok"] is True


def test_a_compacted_log_verifies_clean(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        populate(tree)
        tree.compact()  # rows with "wrote" and versions above 1 on an entity's first row
        assert tree.verify().findings == ()


def test_bad_arguments_raise_specific_errors(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="does not exist"):
        verify_directory(tmp_path / "nowhere")
    with pytest.raises(NotFoundError, match="not a kwtree directory"):
        verify_directory(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        repair_directory(tmp_path / "file")
    with pytest.raises(ValueError, match="path must be"):
        verify_directory(42)  # type: ignore[arg-type]
    build(tmp_path / "tree")
    with pytest.raises(ValueError, match="lock_timeout"):
        repair_directory(tmp_path / "tree", lock_timeout=-1)


# --- damage in the middle -------------------------------------------------------------------------


def test_a_garbled_middle_line_is_an_error_at_its_line_and_repair_quarantines_its_whole_operation(
    tree_dir: Path, tmp_path: Path
) -> None:
    kids, iids = build(tree_dir)
    segment = segments(tree_dir)[0]
    data = segment.read_bytes()
    _op_id, first, last, start, end = next(op for op in operations(data) if op[2] - op[1] == 2)  # the 3-row op
    lines = data.splitlines(keepends=True)
    lines[first] = lines[first][:40] + b"\xff garbage\n"  # its second row (line first + 1)
    segment.write_bytes(b"".join(lines))
    damaged = segment.read_bytes()
    with pytest.raises(CorruptLogError):
        KeywordTree(tree_dir, read_only=True)

    before = digest(tree_dir)
    report = verify_directory(tree_dir)
    assert digest(tree_dir) == before  # verify changed nothing
    assert not report.ok
    error = report.errors[0]
    assert (error.code, error.file, error.line) == ("unreadable-row", f"log/{segment.name}", first + 1)
    assert f"lines {first}-{last}" in error.message
    assert f"error\tlog/{segment.name}:{first + 1}\t" in report.to_text()
    with pytest.raises(DamagedDirectoryError, match="1 error"):
        report.check()

    new_end = start + len(damaged) - len(data) + (end - start)
    reference = without(tree_dir, tmp_path / "reference", segment.name, start, new_end)
    repaired = repair_directory(tree_dir)
    assert repaired.ok and "quarantined" in codes(repaired, "info")
    bad = tree_dir / "quarantine" / f"{segment.stem}.{start}.bad"
    assert bad.read_bytes() == damaged[start:new_end]  # all three rows of the operation, as they were
    note = json.loads(Path(f"{bad}.json").read_text())
    assert (note["segment"], note["offset"], note["first_line"], note["last_line"]) == (
        f"log/{segment.name}", start, first, last)
    assert without_repair_appends(segment.read_bytes()) == damaged[:start] + damaged[new_end:]
    # The other operations are intact: the state is the one of the log without that operation.
    assert state_of(tree_dir, kids, iids) == state_of(reference, kids, iids)
    assert verify_directory(tree_dir).ok


def test_a_torn_tail_in_the_padding_is_a_warning_and_repair_moves_exactly_it(tree_dir: Path) -> None:
    kids, iids = build(tree_dir)
    expected = state_of(tree_dir, kids, iids)
    segment = segments(tree_dir)[-1]
    data = segment.read_bytes()
    op = "f" * 32
    torn = (b'{"op":"' + op.encode() + b'","entity":"keyword","id":"t1","v":1,"name":"T","parent_id":"root",'
            b'"created_at":1.0}\n{"op":"' + op.encode() + b'","entity":"key')
    segment.write_bytes(data + torn + bytes(4096))  # a crashed durable writer: torn rows, then padding
    report = verify_directory(tree_dir)
    assert report.ok and codes(report) == {"torn-tail"}
    assert report.findings[0].line == len(data.splitlines()) + 1
    assert state_of(tree_dir, kids, iids) == expected  # readers ignore it

    repaired = repair_directory(tree_dir)
    assert repaired.ok
    assert (tree_dir / "quarantine" / f"{segment.stem}.{len(data)}.torn").read_bytes() == torn
    assert segment.read_bytes() == data  # the padding was not data: it is gone
    assert state_of(tree_dir, kids, iids) == expected
    assert codes(verify_directory(tree_dir)) == {"quarantine"}


def test_a_sealed_segment_cut_mid_operation_is_an_error_and_repair_drops_that_operation(
    tree_dir: Path, tmp_path: Path
) -> None:
    kids, iids = build(tree_dir, segment_bytes=4096)
    for round in range(3):
        with KeywordTree(tree_dir, durability="none", worker=False) as tree:
            tree.batch_create_keywords([{"name": f"k{round}-{i} " + "x" * 200} for i in range(30)])
    sealed = segments(tree_dir)[0]
    assert len(segments(tree_dir)) >= 3
    data = sealed.read_bytes()
    _op_id, first, _last, start, end = operations(data)[-1]
    sealed.write_bytes(data[:end - 7])  # inside the last line of its last operation (its seal line goes too)
    with pytest.raises(CorruptLogError, match="sealed segment"):
        KeywordTree(tree_dir, read_only=True)
    report = verify_directory(tree_dir)
    error = report.errors[0]
    assert (error.code, error.file, error.line) == ("sealed-tail", f"log/{sealed.name}", first)

    reference = without(tree_dir, tmp_path / "reference", sealed.name, start, len(data))
    assert repair_directory(tree_dir).ok
    assert (tree_dir / "quarantine" / f"{sealed.stem}.{start}.bad").read_bytes() == data[start:end - 7]
    assert state_of(tree_dir, kids, iids) == state_of(reference, kids, iids)
    assert verify_directory(tree_dir).ok


def test_a_nul_hiding_operations_is_an_error_and_only_its_operation_goes_to_quarantine(tree_dir: Path) -> None:
    _kids, _iids = build(tree_dir)
    segment = segments(tree_dir)[-1]
    data = segment.read_bytes()
    ops = operations(data)
    cut, end = ops[-2][3], ops[-2][4]  # the first byte of an operation: readers would stop there
    segment.write_bytes(data[:cut] + b"\0" + data[cut + 1:])
    report = verify_directory(tree_dir)
    assert [(f.code, f.line) for f in report.errors] == [("hidden-bytes", ops[-2][1])]
    assert repair_directory(tree_dir).ok
    assert (tree_dir / "quarantine" / f"{segment.stem}.{cut}.bad").read_bytes() == b"\0" + data[cut + 1:end]
    assert without_repair_appends(segment.read_bytes()) == data[:cut] + data[end:]  # the operation after it stays
    assert verify_directory(tree_dir).ok


def test_a_lost_root_operation_gets_a_new_one_and_everything_else_stays(tree_dir: Path, tmp_path: Path) -> None:
    kids, iids = build(tree_dir)
    expected = state_of(tree_dir, kids, iids)
    segment = segments(tree_dir)[0]
    data = segment.read_bytes()
    root_end = operations(data)[0][4]
    segment.write_bytes(b"#" + data[1:])  # the root's line no longer parses
    with pytest.raises(CorruptLogError):
        KeywordTree(tree_dir, read_only=True)
    assert {"unreadable-row", "row-before-root"} <= codes(verify_directory(tree_dir), "error")
    repaired = repair_directory(tree_dir)
    assert repaired.ok and "wrote-root" in codes(repaired)
    assert (tree_dir / "quarantine" / f"{segment.stem}.0.bad").read_bytes() == b"#" + data[1:root_end]
    new_root = segments(tree_dir)[0]
    assert (new_root.name < segment.name
            and orjson.loads(new_root.read_bytes().splitlines()[0])["end"]["actor"] == "repair")
    got = state_of(tree_dir, kids, iids)
    assert got["keywords"].keys() == expected["keywords"].keys() and got["infos"] == expected["infos"]
    assert not verify_directory(tree_dir).errors


def test_many_bad_lines_are_listed_up_to_a_limit(tree_dir: Path) -> None:
    build(tree_dir)
    segment = segments(tree_dir)[0]
    data = segment.read_bytes()
    first_end = operations(data)[0][4]
    segment.write_bytes(data[:first_end] + b"not json\n" * (MAX_PER_CODE + 20) + data[first_end:])
    report = verify_directory(tree_dir)
    listed = [f for f in report.findings if f.code == "unreadable-row"]
    assert len(listed) == MAX_PER_CODE + 1 and listed[-1].message == "20 more 'unreadable-row' findings not listed"
    assert repair_directory(tree_dir).ok


# --- merged histories: warnings, not errors ------------------------------------------------------


def test_merged_histories_give_warnings_not_errors(tmp_path: Path) -> None:
    base = tmp_path / "base"
    with KeywordTree(base, durability="none", worker=False) as tree:
        a = tree.create_keyword("a", llm_auto_place=False)
        d = tree.create_keyword("d", llm_auto_place=False)
        b = tree.create_keyword("b", llm_auto_place=False)
        c = tree.create_keyword("c", parent_id=b.id)
        e = tree.create_keyword("e", llm_auto_place=False)
        info = tree.create_info("memo", keyword_ids=[a.id])
    base_ops = {op[0] for seg in segments(base) for op in operations(seg.read_bytes())}
    forks = {name: copy_tree_dir(base, tmp_path / name) for name in "AB"}
    fork_a = KeywordTree(forks["A"], durability="none", worker=False)
    fork_b = KeywordTree(forks["B"], durability="none", worker=False)
    with fork_a, fork_b:  # interleaved, so that the two forks' op ids interleave
        fork_a.move_keyword(a.id, d.id)
        fork_b.move_keyword(d.id, a.id)  # with A's move: a cycle
        fork_a.delete_keyword(b.id, cascade=True)
        x = fork_b.create_keyword("x", parent_id=c.id)  # c is deleted in A
        fork_b.link_info(info.id, c.id)
        fork_a.update_keyword(e.id, {"name": "e1"}, 1)
        fork_b.update_keyword(e.id, {"name": "e2"}, 1)  # stored version 2 twice
    merged = tmp_path / "merged"
    (merged / "log").mkdir(parents=True)
    shutil.copyfile(base / "manifest.json", merged / "manifest.json")
    rows = []
    for name in "BA":  # a union merge: B's new operations, then A's file (out of id order)
        data = b"".join(p.read_bytes().rstrip(b"\0") for p in segments(forks[name]))
        for op_id, _, _, start, end in operations(data):
            if name == "A" or op_id not in base_ops:
                rows.append(data[start:end])
    (merged / "log" / segments(base)[0].name).write_bytes(b"".join(rows))

    report = verify_directory(merged)
    assert report.ok, report.to_text()
    assert {"parent-cycle", "parent", "inert-link", "version"} <= codes(report, "warning")
    assert "out-of-order" in codes(report, "info")
    moved = [f.message for f in report.findings if f.code == "parent"]
    assert any(d.id in m and "cycle" in m for m in moved) and any(x.id in m and "deleted" in m for m in moved)
    with KeywordTree(merged, read_only=True, worker=False) as tree:  # it opens as it is
        assert tree.get_keyword(x.id).parent_id == "root"
    assert repair_directory(merged).ok  # warnings are left alone


def test_copies_of_an_operation_are_a_warning(tree_dir: Path) -> None:
    kids, iids = build(tree_dir)
    expected = state_of(tree_dir, kids, iids)
    segment = segments(tree_dir)[0]
    data = segment.read_bytes()
    _, first, _, start, end = operations(data)[3]
    segment.write_bytes(data + data[start:end])  # a naive merge repeated an operation
    report = verify_directory(tree_dir)
    assert report.ok and codes(report) == {"duplicate-operation", "out-of-order"}
    duplicate = next(f for f in report.findings if f.code == "duplicate-operation")
    assert duplicate.line == len(data.splitlines()) + 1 and f":{first}" in duplicate.message
    assert state_of(tree_dir, kids, iids) == expected


# --- caches and the manifest ---------------------------------------------------------------------


def test_a_cache_watermark_ahead_of_the_log_is_found_and_repair_rebuilds_the_cache(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        tree.create_info("apple pie recipe")
        zebra = tree.create_info("zebra crossing")
        assert tree.recall("zebra", mode="bm25")[0].info.id == zebra.id  # indexed, watermark = its op
    segment = segments(tree_dir)[-1]
    data = segment.read_bytes()
    last_op = operations(data)[-1]
    segment.write_bytes(data[:last_op[3]])  # the log loses its last operation, the cache does not
    meta = tree_dir / "cache" / "fulltext" / "meta.json"
    assert orjson.loads(meta.read_bytes())["watermark"] == last_op[0]

    report = verify_directory(tree_dir)
    assert [(f.code, f.file) for f in report.errors] == [("cache-watermark", "cache/fulltext/meta.json")]
    repaired = repair_directory(tree_dir)
    assert repaired.ok and "removed-cache" in codes(repaired) and not meta.exists()
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        assert tree.recall("zebra", mode="bm25") == []
        assert [h.info.content for h in tree.recall("apple", mode="bm25")] == ["apple pie recipe"]
        last = tree.last_op_id
    assert orjson.loads(meta.read_bytes())["watermark"] == last
    assert verify_directory(tree_dir).findings == ()


def test_an_unreadable_manifest_is_replaced_and_a_newer_one_is_refused(tree_dir: Path) -> None:
    build(tree_dir)
    manifest = tree_dir / "manifest.json"
    original = manifest.read_bytes()
    manifest.write_bytes(b"{not json")
    assert [f.code for f in verify_directory(tree_dir).errors] == ["manifest"]
    assert repair_directory(tree_dir).ok
    assert [p.read_bytes() for p in (tree_dir / "quarantine").glob("manifest.json.*.bad")] == [b"{not json"]
    KeywordTree(tree_dir, read_only=True).close()

    manifest.write_bytes(original.replace(b'"format": 3', b'"format": 99'))
    report = verify_directory(tree_dir)
    assert not report.ok and "newer" in report.errors[0].message
    before = digest(tree_dir)
    with pytest.raises(FormatError, match="newer"):
        repair_directory(tree_dir)
    assert digest(tree_dir) == before


def test_repair_waits_for_the_writer_lock_and_changes_nothing_without_it(tree_dir: Path) -> None:
    build(tree_dir)
    segments(tree_dir)[0].write_bytes(b"junk\n" + segments(tree_dir)[0].read_bytes())
    before = digest(tree_dir)
    lock = WriterLock(tree_dir / LOCK_NAME, 0)
    with lock, pytest.raises(LockTimeoutError):
        repair_directory(tree_dir, lock_timeout=0)
    lock.close()
    assert digest(tree_dir) == before
    assert repair_directory(tree_dir, lock_timeout=0).ok


# --- the tree's methods and the CLI ----------------------------------------------------------------


def test_tree_repair_quarantines_a_torn_tail_and_goes_on_after_a_lying_index(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        tree.create_info("apple pie")
        tree.recall("apple", mode="bm25")
    meta = tree_dir / "cache" / "fulltext" / "meta.json"
    meta.write_bytes(orjson.dumps({"format": 2, "watermark": "f" * 32}))  # ahead of every op
    assert codes(verify_directory(tree_dir), "error") == {"cache-watermark"}
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    try:
        zebra = tree.create_info("zebra crossing")
        # An index ahead of the log is rebuilt at its next use rather than trusted.
        assert [h.info.id for h in tree.recall("zebra", mode="bm25")] == [zebra.id]
        segment = segments(tree_dir)[-1]
        with open(segment, "ab") as out:
            out.write(b'{"op":"' + b"f" * 32 + b'","entity":"info"')  # another process crashed
        assert codes(tree.verify()) == {"torn-tail"}  # the index committed a real watermark meanwhile
        report = tree.repair()
        assert report.ok and {"quarantined", "removed-cache"} <= codes(report)
        assert [h.info.id for h in tree.recall("zebra", mode="bm25")] == [zebra.id]
        kiwi = tree.create_info("kiwi")
        assert tree.get_info(kiwi.id).content == "kiwi"
    finally:
        tree.close()
    assert not verify_directory(tree_dir).errors
    with KeywordTree(tree_dir, read_only=True) as view:
        assert view.get_info(zebra.id).content == "zebra crossing"
        with pytest.raises(ReadOnlyError):
            view.repair()
        assert view.verify().ok


def test_a_tree_open_elsewhere_replays_the_repaired_log_at_its_next_write(tree_dir: Path) -> None:
    kids, iids = build(tree_dir)
    other = KeywordTree(tree_dir, durability="full", worker=False)  # keeps log/ and its newest segment open
    try:
        segment = segments(tree_dir)[-1]
        data = segment.read_bytes().rstrip(b"\0")
        segment.write_bytes(data + b'{"op":"' + b"f" * 32 + b'","entity":"info","id":"i","v":1')  # a crash
        first = segments(tree_dir)[0]
        created = first.read_bytes()
        delta_op = orjson.loads(next(line for line in created.splitlines() if b'"name":"Delta"' in line))["op"]
        first.write_bytes(created.replace(b'"name":"Delta"', b'"name":Delta"', 1))  # and a bad line
        report = repair_directory(tree_dir)
        assert report.ok and [f.code for f in report.findings].count("quarantined") == 2
        late = other.create_keyword("late", llm_auto_place=False)  # lands in the repaired log
        assert other.refresh() == 0
    finally:
        other.close()
    assert not verify_directory(tree_dir).errors
    with KeywordTree(tree_dir, read_only=True, worker=False) as view:
        assert view.get_keyword(late.id).name == "late"
        assert delta_op not in {op.op_id for op in view.history()}  # it went to quarantine
        assert view.get_keyword(kids[0]).name == "Alpha"


def test_cli_verify_exits_1_on_errors_and_repair_fixes_them(tree_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build(tree_dir)
    segment = segments(tree_dir)[0]
    data = segment.read_bytes()
    segment.write_bytes(data[:50] + b"\n" + data[50:])  # splits the root's line in two
    assert main(["verify", str(tree_dir)]) == 1
    out, err = capsys.readouterr()
    first = out.splitlines()[0].split("\t")
    assert first[:2] == ["error", f"log/{segment.name}:1"] and out.splitlines()[-1].startswith("summary\t")
    assert err.startswith("error: ") and "kwtree repair" in err
    assert main(["verify", str(tree_dir), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is False and document["findings"][0]["line"] == 1

    assert main(["repair", str(tree_dir)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"info\tlog/{segment.name}:1\tmoved ") and err == ""
    assert main(["verify", str(tree_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


# --- the repair property ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid log of several segments, the newest ending in zero padding (a crashed durable
    writer); built once for this module."""
    directory = tmp_path_factory.mktemp("verify-template") / "tree"
    build(directory, segment_bytes=4096)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        tree.batch_create_keywords([{"name": f"name {i} " + "z" * 120} for i in range(40)])
        for i in range(5):
            tree.create_info(f"memory {i}", keyword_ids=[tree.find_keywords(f"name {i} " + "z" * 120)[0].id])
    newest = segments(directory)[-1]
    newest.write_bytes(newest.read_bytes() + bytes(2048))
    return directory


DAMAGE = st.sampled_from(["garble", "cut", "delete"])
GARBAGE = st.binary(min_size=1, max_size=40) | st.lists(
    st.sampled_from([b"\n", b"{", b"}", b'"', b"\0", b"a", b"0", b":", b","]), min_size=1, max_size=12
).map(b"".join)


def test_the_template_log_is_valid_and_has_several_segments(template: Path) -> None:
    report = verify_directory(template)
    assert report.findings == () and report.segments >= 3


@given(damage=DAMAGE, which=st.integers(0, 100), where=st.floats(0, 1), length=st.integers(1, 300), garbage=GARBAGE)
def test_repair_after_random_damage_opens_verifies_and_keeps_every_byte(
    template: Path, damage: str, which: int, where: float, length: int, garbage: bytes
) -> None:
    work = Path(tempfile.mkdtemp(prefix="kwtree-repair-"))
    try:
        directory = work / "tree"
        shutil.copytree(template, directory)
        files = segments(directory)
        segment = files[which % len(files)]
        original = segment.read_bytes()
        data_end = len(original.rstrip(b"\0"))
        start = min(int(where * data_end), data_end - 1)
        if damage == "cut":
            damaged = original[:start]
        elif damage == "delete":
            damaged = original[:start] + original[start + length:]
        else:
            damaged = original[:start] + garbage + original[start + length:]
        segment.write_bytes(damaged)
        survivors = {op[0] for path in files if path != segment for op in operations(path.read_bytes())}
        survivors.update(op[0] for op in operations(original) if op[4] <= start)
        before = {path.name: path.read_bytes() for path in segments(directory)}

        report = repair_directory(directory)
        assert report.ok, report.to_text()
        assert not verify_directory(directory).errors
        with KeywordTree(directory, read_only=True, worker=False) as tree:
            kept = {op.op_id for op in tree.history()}
        assert survivors <= kept
        # Nothing deleted: each old segment = what it keeps + its quarantined pieces, in place.
        notes = [json.loads(p.read_text()) for p in (directory / "quarantine").glob("*.json")] if (
            directory / "quarantine").exists() else []
        for name, old in before.items():
            pieces = sorted((n["offset"], n) for n in notes if n["segment"] == f"log/{name}")
            remaining = (directory / "log" / name).read_bytes().rstrip(b"\0")
            remaining = remaining[:seals_start(remaining)]  # repair seals what it keeps afresh
            if name == max(before):
                remaining = without_repair_appends(remaining)
            rebuilt, taken, position = bytearray(), 0, 0
            for offset, note in pieces:
                rebuilt += remaining[taken:taken + offset - position]
                taken += offset - position
                stem = f"{Path(name).stem}.{offset}"
                piece = next(p for p in (directory / "quarantine").iterdir()
                             if p.name.startswith(stem + ".") and p.suffix in (".bad", ".torn"))
                rebuilt += piece.read_bytes()
                position = offset + note["bytes"]
            rebuilt += remaining[taken:]
            assert bytes(rebuilt) == old.rstrip(b"\0")[:seals_start(old.rstrip(b"\0"))], name
        new = {path.name for path in segments(directory)} - set(before)
        assert all("wrote-root" in codes(report) for _ in new) and len(new) <= 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
