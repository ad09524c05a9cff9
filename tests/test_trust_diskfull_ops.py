"""Issue 25, B16 and B23: a full disk under the calls that rewrite or copy the whole log —
``forget`` (by id, by keyword, ``scope=``), ``compact()`` with and without history,
``snapshot()``, ``export()`` (JSON and Markdown), ``repair()`` / ``repair_directory()`` and
``kwtree upgrade``.

Each raises ``DiskFullError`` naming what it was writing and saying to free space and call
again (before: a raw ``OSError [Errno 28]`` or a ``StorageError``), leaves nothing partial
behind (no ``log.compacting/``, temporary archive, half export or quarantine copy), leaves
the log and the state as they were, and works once space is freed.

forget is two steps: its operation (the tombstones) is committed before the log is rewritten
to erase the text. When the rewrite meets the full disk the entities are gone but their text
is still in the log: the error says so, ``verify`` reports the unfinished erasure naming the
forget operation, a writable open on the still-full disk opens anyway, and once space is
freed the next forget, ``repair()`` or writable open finishes it.

A real full disk: the ``disk`` fixture's tmpfs, filled by ``helpers.fill_disk`` until about
200 KB are left (the issue's case: the forget operation's append fits, the rewrite does not).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import dir_bytes, fill_disk, log_bytes, says_disk_full, snapshot
from test_forget import holders
from test_trust_log_format import make_format_1

import kwtree
from kwtree import DiskFullError, KeywordTree, NotFoundError
from kwtree.cli.main import main
from kwtree.memory_schema import SCOPE_KEY
from kwtree.ops.upgrade import upgrade_directory
from kwtree.stores.manifest import FORMAT_VERSION, Manifest

SECRET = "zanzibarquux"
#: Free bytes left on the disk: a small operation's append fits, a copy of the log does not.
LEAVE = 200 << 10
#: Infos in the tree: about 750 KB of log, 650 KB of them live after a forget.
SECRET_INFOS, OTHER_INFOS = 100, 600
PADDING = "lorem ipsum dolor sit amet " * 36  # ~1 KB per info


def build(directory: Path) -> dict[str, Any]:
    """A tree with a scope holding SECRET in a keyword and its infos, and a larger one without."""
    with KeywordTree(directory, durability="none", worker=False) as tree:
        alice = tree.create_keyword("user:alice", metadata={SCOPE_KEY: "user:alice"}, llm_auto_place=False)
        bob = tree.create_keyword("user:bob", metadata={SCOPE_KEY: "user:bob"}, llm_auto_place=False)
        secrets = tree.create_keyword(f"{SECRET} drinks", parent_id=alice.id, description=f"what {SECRET} means")
        others = tree.create_keyword("Weather", parent_id=bob.id)
        infos = [tree.create_info(f"{SECRET} fact {i}: {PADDING}", keyword_ids=[secrets.id]).id
                 for i in range(SECRET_INFOS)]
        kept = [tree.create_info(f"weather fact {i}: {PADDING}", keyword_ids=[others.id]).id
                for i in range(OTHER_INFOS)]
        tree.recall(SECRET, mode="bm25")  # the full-text index holds it too
    return {"alice": alice.id, "secrets": secrets.id, "others": others.id, "infos": infos, "kept": kept}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    directory = tmp_path_factory.mktemp("diskfull") / "tree"
    return directory, build(directory)


@pytest.fixture
def on_disk(disk: Path, base: tuple[Path, dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    """A copy of the base tree on the small disk."""
    source, ids = base
    return shutil.copytree(source, disk / "tree"), ids


def leftovers(directory: Path) -> list[str]:
    """What a rewrite of the log or an atomic write may leave beside the log or a file."""
    return sorted(name for name in os.listdir(directory)
                  if name.startswith(("log.", ".")) or name.endswith(".tmp"))


def said(raised: pytest.ExceptionInfo[DiskFullError], disk: Path) -> str:
    """The error's message without the disk's path (which holds the test's name)."""
    return str(raised.value).replace(str(disk), "<disk>")


def reads(tree: KeywordTree, ids: dict[str, Any]) -> dict[str, Any]:
    """Every public read, but the count of operations (compaction without history changes it)."""
    found = snapshot(tree, [ids["secrets"], ids["others"]], ids["infos"][:5] + ids["kept"][:5])
    del found["metrics"]["operations"]
    return found


# --- forget ----------------------------------------------------------------------------------------

TARGETS = {"info": lambda ids: {"entity_id": ids["infos"][0]},
           "keyword": lambda ids: {"entity_id": ids["secrets"]},
           "scope": lambda ids: {"scope": "user:alice"}}


def _forget(tree: KeywordTree, ids: dict[str, Any], target: str) -> kwtree.ForgetReport:
    arguments = TARGETS[target](ids)
    return tree.forget(arguments.pop("entity_id", None), **arguments)


def _pending(directory: Path, op_id: str) -> None:
    """verify reports the unfinished erasure of ``op_id`` as an error that says how to finish it."""
    report = kwtree.verify_directory(directory)
    errors = [f for f in report.errors if f.code == "forget-unfinished"]
    assert [f for f in report.errors if f.code != "forget-unfinished"] == [], report.to_text()
    assert len(errors) == 1 and op_id in errors[0].message, report.to_text()
    assert "still" in errors[0].message and "forget" in errors[0].message and "repair" in errors[0].message


@pytest.mark.parametrize("finish", ["forget", "repair", "open"])
@pytest.mark.parametrize("target", list(TARGETS))
def test_a_forget_on_a_full_disk_says_the_text_is_still_in_the_log_and_is_finished_later(
        disk: Path, on_disk: tuple[Path, dict[str, Any]], target: str, finish: str,
        caplog: pytest.LogCaptureFixture) -> None:
    directory, ids = on_disk
    erased = f"{SECRET} fact 0:" if target == "info" else SECRET  # the text this forget erases
    tree = KeywordTree(directory, durability="none", worker=False)
    filler = fill_disk(disk, LEAVE)
    with pytest.raises(DiskFullError) as raised:
        _forget(tree, ids, target)
    says_disk_full(raised, directory)
    op_id = tree.last_op_id
    assert tree.history()[-1].kind == "forget" and op_id in str(raised.value)
    assert "still in the log" in said(raised, disk) and "forget again" in said(raised, disk)
    with pytest.raises(NotFoundError):  # the forget operation is committed: the entities are gone
        tree.get_info(ids["infos"][0])
    assert leftovers(directory) == []
    assert any("/log/" in path for path in holders(directory, erased))
    _pending(directory, op_id)
    with caplog.at_level(logging.WARNING, logger="kwtree"):  # a writable open tries, and still opens
        KeywordTree(directory, durability="none", worker=False).close()
    assert any(op_id in record.getMessage() and "is full" in record.getMessage() for record in caplog.records)
    _pending(directory, op_id)
    assert leftovers(directory) == []

    filler.unlink()
    if finish == "forget":
        report = _forget(tree, ids, target)
        assert report.already_forgotten_by == op_id and report.log_rewritten
    elif finish == "repair":
        report = tree.repair()
        assert report.ok and [f.code for f in report.findings if op_id in f.message] == ["finished-forget"]
    else:
        tree.close()
        with caplog.at_level(logging.WARNING, logger="kwtree"):
            tree = KeywordTree(directory, durability="none", worker=False)
        assert any(f"finished the erasure of forget operation {op_id}" in r.getMessage() for r in caplog.records)
    tree.close()
    assert holders(directory, erased) == []
    assert kwtree.verify_directory(directory).ok
    with KeywordTree(directory, read_only=True) as reader:
        assert reader.tree_metrics()["infos"] == OTHER_INFOS + (SECRET_INFOS - 1 if target == "info" else 0)


def test_the_next_forget_of_another_target_finishes_an_erasure_a_full_disk_stopped(
        disk: Path, on_disk: tuple[Path, dict[str, Any]]) -> None:
    directory, ids = on_disk
    with KeywordTree(directory, durability="none", worker=False) as tree:
        filler = fill_disk(disk, LEAVE)
        with pytest.raises(DiskFullError):
            tree.forget(ids["infos"][0])
        filler.unlink()
        tree.forget(ids["kept"][0])
    assert holders(directory, f"{SECRET} fact 0:") == []
    assert kwtree.verify_directory(directory).ok


# --- compaction ------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep_history", [False, True])
def test_compaction_on_a_full_disk_changes_nothing_and_works_after(
        disk: Path, on_disk: tuple[Path, dict[str, Any]], keep_history: bool) -> None:
    directory, ids = on_disk
    with KeywordTree(directory, durability="none", worker=False) as tree:
        tree.recall(SECRET, mode="bm25")  # nothing for the full-text index to write first
        before, log_before, files = reads(tree, ids), log_bytes(directory), sorted(os.listdir(directory))
        filler = fill_disk(disk, LEAVE)
        for _ in range(2):  # and again: nothing was left half done
            with pytest.raises(DiskFullError) as raised:
                tree.compact(keep_history=keep_history)
            says_disk_full(raised, directory)
            assert "could not write the new log" in said(raised, disk)
            assert log_bytes(directory) == log_before and sorted(os.listdir(directory)) == files
            assert reads(tree, ids) == before
        filler.unlink()
        tree.compact(keep_history=keep_history)
        assert reads(tree, ids) == before
    with KeywordTree(directory, read_only=True) as reader:
        assert reads(reader, ids) == before
    assert kwtree.verify_directory(directory).ok


# --- snapshot and export ---------------------------------------------------------------------------


def test_a_snapshot_on_a_full_disk_leaves_no_partial_archive_and_works_after(
        disk: Path, on_disk: tuple[Path, dict[str, Any]]) -> None:
    directory, _ = on_disk
    with KeywordTree(directory, durability="none", worker=False) as tree:
        filler = fill_disk(disk, LEAVE)
        for path in (None, disk / "backup.kwsnap"):
            with pytest.raises(DiskFullError) as raised:
                tree.snapshot(path)
            says_disk_full(raised, disk)
            assert "could not write the snapshot" in said(raised, disk)
            assert sorted(os.listdir(disk)) == ["filler", "tree"]
        filler.unlink()
        archive = Path(tree.snapshot(disk / "backup.kwsnap"))
    assert kwtree.restore(archive, disk / "restored")["infos"] == SECRET_INFOS + OTHER_INFOS


@pytest.mark.parametrize("format", ["json", "markdown"])
def test_an_export_on_a_full_disk_leaves_the_old_file_and_no_temporary(
        disk: Path, on_disk: tuple[Path, dict[str, Any]], format: str) -> None:
    directory, _ = on_disk
    target = disk / f"export.{format}"
    target.write_bytes(b"an older export")
    with KeywordTree(directory, durability="none", worker=False) as tree:
        filler = fill_disk(disk, LEAVE)
        with pytest.raises(DiskFullError) as raised:
            tree.export(target, format=format)
        says_disk_full(raised, target)
        assert "could not write the export" in said(raised, disk) and "is unchanged" in said(raised, disk)
        assert target.read_bytes() == b"an older export"
        assert sorted(os.listdir(disk)) == ["export." + format, "filler", "tree"]
        filler.unlink()
        assert tree.export(target, format=format)["infos"] == SECRET_INFOS + OTHER_INFOS
    assert SECRET.encode() in target.read_bytes()


# --- repair and upgrade ----------------------------------------------------------------------------


def _damage(directory: Path) -> None:
    """Break one row in the middle of the log, so repair must rewrite its segment."""
    segment = sorted((directory / "log").glob("*.jsonl"))[0]
    data = segment.read_bytes()
    segment.write_bytes(data.replace(b"weather fact 300:", b"weather fact 300\n", 1))


@pytest.mark.parametrize("how", ["tree", "directory"])
def test_repair_on_a_full_disk_changes_nothing_and_works_after(
        disk: Path, on_disk: tuple[Path, dict[str, Any]], how: str) -> None:
    directory, _ = on_disk
    tree = KeywordTree(directory, durability="none", worker=False) if how == "tree" else None
    try:
        _damage(directory)
        before = dir_bytes(directory)
        filler = fill_disk(disk, LEAVE)
        for _ in range(2):
            with pytest.raises(DiskFullError) as raised:
                tree.repair() if tree is not None else kwtree.repair_directory(directory)
            says_disk_full(raised, directory)
            assert "could not write the new log" in said(raised, disk)
            assert dir_bytes(directory) == before  # no log.compacting/, no quarantine copy
        filler.unlink()
        report = tree.repair() if tree is not None else kwtree.repair_directory(directory)
        assert report.ok and any(f.code == "quarantined" for f in report.findings)
    finally:
        if tree is not None:
            tree.close()
    assert kwtree.verify_directory(directory).ok


def test_upgrade_on_a_full_disk_changes_nothing_and_works_after(
        disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = disk / "tree"
    make_format_1(directory)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        for i in range(400):
            tree.create_info(f"fact {i}: {PADDING}")
    before = dir_bytes(directory)
    filler = fill_disk(disk, LEAVE)
    with pytest.raises(DiskFullError) as raised:
        upgrade_directory(directory)
    says_disk_full(raised, directory)
    assert "could not write the new log" in said(raised, disk)
    assert dir_bytes(directory) == before
    assert main(["upgrade", str(directory)]) == 1
    err = capsys.readouterr().err
    assert "is full" in err and "free space" in err, err
    assert dir_bytes(directory) == before and Manifest.load(directory).format == 1
    filler.unlink()
    assert main(["upgrade", str(directory)]) == 0
    assert Manifest.load(directory).format == FORMAT_VERSION and kwtree.verify_directory(directory).findings == ()
