"""Snapshot and restore (DESIGN §4 invariant 7): the archive holds exactly the whole
operations the tree reflects; a restore checks every member before touching anything,
refuses unsafe, altered and truncated archives, and gives back a tree that reads exactly as
the tree did at snapshot time, into a new directory or in place of the current one.

Real files, real tar archives (hostile ones built here with tarfile), a real writer process.
No sleeps: the child reports progress on a pipe and the parent reads it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import child_line, snapshot
from hypothesis import given
from hypothesis import strategies as st

import kwtree
from kwtree import (
    FormatError,
    InvalidInputError,
    KeywordTree,
    NotFoundError,
    ReadOnlyError,
    RelationType,
)
from kwtree.cli.main import main

HANG = 120  # seconds before a stuck child is reported (never reached normally)


# --- helpers -------------------------------------------------------------------------------------


def open_tree(path: Path, **options: Any) -> KeywordTree:
    options.setdefault("durability", "none")
    return KeywordTree(path, worker=False, **options)


def fill(tree: KeywordTree, n: int = 3) -> tuple[list[str], list[str]]:
    """A few keywords (nested), infos, links and a relation; returns (keyword ids, info ids)."""
    kids, iids = [], []
    parent = "root"
    for i in range(n):
        keyword = tree.create_keyword(f"kw{i}-{tree.last_op_id[-8:]}", parent_id=parent, aliases=[f"alias{i}"])
        kids.append(keyword.id)
        parent = keyword.id if i % 2 == 0 else "root"
        iids.append(tree.create_info(f"memory {i} about {keyword.name}", source="test", keyword_ids=[keyword.id]).id)
    tree.relate(kids[0], kids[-1], "see_also", 0.5, "because")
    tree.link_info(iids[0], kids[-1], RelationType.EXAMPLE)
    return kids, iids


def entries(directory: Path, caches: bool = True) -> dict[str, bytes]:
    """Every file under ``directory`` (relative path -> bytes): what 'nothing touched' compares;
    without the rebuildable caches when ``caches`` is False."""
    found = {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
    return {k: v for k, v in found.items() if caches or not k.startswith(("cache/", "outbox."))}


def siblings(path: Path) -> list[str]:
    return sorted(os.listdir(path.parent))


def members(archive: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(archive, "r:") as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else b"") for m in tar.getmembers()]


def header_of(archive: Path) -> dict[str, Any]:
    return json.loads(members(archive)[0][1])


def write_tar(path: Path, items: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in items:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def regular(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = 0o644
    return info


def log_data(directory: Path) -> bytes:
    """The log's data as a reader sees it: segments in order, padding excluded."""
    return b"".join(p.read_bytes().split(b"\0", 1)[0] for p in sorted((directory / "log").glob("*.jsonl")))


def op_ids(data: bytes) -> list[str]:
    """The ids of the whole operations in log data, in file order (a torn tail left out)."""
    whole = data[: data.rfind(b"\n") + 1]
    return [row["op"] for row in map(orjson.loads, whole.splitlines()) if "end" in row]


# --- the archive ---------------------------------------------------------------------------------


def test_archive_holds_manifest_and_whole_operations_with_checksums(tmp_path: Path) -> None:
    source = tmp_path / "tree"
    tree = open_tree(source, durability="full", segment_bytes=4096)  # durable: preallocated padding
    kids, iids = fill(tree, 30)  # several segments
    expected = snapshot(tree, kids, iids)
    assert b"\0" in b"".join(p.read_bytes() for p in (source / "log").glob("*.jsonl"))
    path = Path(tree.snapshot(tmp_path / "s.kwsnap"))
    items = members(path)
    names = [m.name for m, _ in items]
    segments = sorted(p.name for p in (source / "log").glob("*.jsonl"))
    assert len(segments) > 2
    assert names == ["kwtree-snapshot.json", "manifest.json", *[f"log/{s}" for s in segments]]
    assert all(m.isreg() and not m.name.startswith("/") for m, _ in items)
    header = json.loads(items[0][1])
    assert header["kind"] == "kwtree-snapshot" and header["format"] == 1 and header["tree_format"] == 3
    assert header["last_op_id"] == tree.last_op_id and header["view"] is None
    assert header["counts"] == {"operations": tree.tree_metrics()["operations"], "keywords": 30, "infos": 30,
                                "links": 31, "relations": 1}
    listed = {entry["name"]: entry for entry in header["members"]}
    for member, data in items[1:]:
        assert listed[member.name]["size"] == len(data)
        assert listed[member.name]["sha256"] == hashlib.sha256(data).hexdigest()
    assert items[1][1] == (source / "manifest.json").read_bytes()
    assert b"".join(data for _, data in items[2:]) == log_data(source)  # no padding, nothing torn
    assert b"\0" not in b"".join(data for _, data in items[2:])
    assert not any(name.startswith("cache") or name.endswith("outbox.jsonl") for name in names)
    tree.close()

    summary = kwtree.restore(path, tmp_path / "copy")
    assert summary["replaced"] is False and summary["last_op_id"] == header["last_op_id"]
    assert summary["keywords"] == 30 and summary["bytes"] == sum(e["size"] for e in header["members"])
    assert sorted(os.listdir(tmp_path / "copy")) == ["log", "manifest.json"]  # caches come back on open
    with open_tree(tmp_path / "copy") as copy:
        assert snapshot(copy, kids, iids) == expected
    assert siblings(source) == ["copy", "s.kwsnap", "tree"]  # no staging directory left behind


def test_torn_tail_and_padding_are_left_out(tmp_path: Path) -> None:
    source = tmp_path / "tree"
    writer = open_tree(source, durability="full")
    kids, iids = fill(writer)
    whole = log_data(source)
    (segment,) = (source / "log").glob("*.jsonl")
    torn = b'{"op":"' + b"f" * 32 + b'","entity":"info","id":"x","v":1,"content":"half'
    with open(segment, "r+b") as f:  # a writer died mid-write: rows without their end row
        f.seek(len(whole))
        f.write(torn)
    reader = open_tree(source, read_only=True)
    for tree in (reader, writer):
        path = Path(tree.snapshot(tmp_path / f"{id(tree)}.kwsnap"))
        assert b"".join(data for _, data in members(path)[2:]) == whole
        restored = tmp_path / f"r{id(tree)}"
        kwtree.restore(path, restored)
        with open_tree(restored, read_only=True) as copy:
            assert snapshot(copy, kids, iids) == snapshot(reader, kids, iids)
    reader.close()
    writer.close()


def test_default_path_is_beside_the_directory_and_nothing_is_overwritten(tmp_path: Path) -> None:
    source = tmp_path / "tree"
    with open_tree(source) as tree:
        fill(tree)
        path = Path(tree.snapshot())
        assert path == tmp_path / f"tree-{tree.last_op_id}.kwsnap" and path.is_file()
        before = path.read_bytes()
        with pytest.raises(InvalidInputError, match="already exists"):
            tree.snapshot()  # the same state again: the default name is taken
        with pytest.raises(InvalidInputError, match="already exists"):
            tree.snapshot(path)
        assert path.read_bytes() == before
        with pytest.raises(InvalidInputError, match="inside the tree's directory"):
            tree.snapshot(source / "snapshots" / "s.kwsnap")
        with pytest.raises(InvalidInputError, match="inside the tree's directory"):
            tree.snapshot(source / "s.kwsnap")
        with pytest.raises(NotFoundError, match="does not exist"):
            tree.snapshot(tmp_path / "missing" / "s.kwsnap")
        for bad in ("", 42, b"bytes"):
            with pytest.raises(InvalidInputError, match="path"):
                tree.snapshot(bad)  # type: ignore[arg-type]
        assert not [p for p in source.rglob("*") if p.suffix == ".kwsnap"]
        assert siblings(source) == sorted([path.name, "tree"])
    with pytest.raises(kwtree.ClosedError):
        tree.snapshot(tmp_path / "late.kwsnap")


def test_views_snapshot_what_they_show_and_cannot_restore(tmp_path: Path) -> None:
    source = tmp_path / "tree"
    with open_tree(source) as tree:
        kids, iids = fill(tree)
        middle = tree.history()[4]
        kids2, iids2 = fill(tree, 4)
        last = tree.history()[-1]
    everything = (kids + kids2, iids + iids2)
    for number, options in enumerate(({"as_of": middle.op_id}, {"as_of": middle.timestamp}, {"read_only": True},
                                      {"as_of": last.timestamp})):
        view = open_tree(source, **options)
        expected = snapshot(view, *everything)
        path = Path(view.snapshot(tmp_path / f"view{number}.kwsnap"))
        assert header_of(path)["last_op_id"] == view.last_op_id
        with pytest.raises(ReadOnlyError):
            view.restore(path)
        view.close()
        restored = tmp_path / f"restored{number}"
        kwtree.restore(path, restored)
        with open_tree(restored) as copy:
            assert snapshot(copy, *everything) == expected
    assert expected["last_op_id"] == last.op_id  # the last view saw everything


def test_snapshots_after_compaction(tmp_path: Path) -> None:
    source = tmp_path / "tree"
    tree = open_tree(source)
    kids, iids = fill(tree)
    tree.update_info(iids[0], {"content": "memory revised"})
    tree.delete_keyword(kids[1], cascade=True)
    reader = open_tree(source, read_only=True)
    tree.compact()  # swaps log/ under the reader
    expected = snapshot(tree, kids, iids)
    with pytest.raises(kwtree.StorageError, match="refresh"):
        reader.snapshot(tmp_path / "stale.kwsnap")  # its position belongs to the old log
    assert not (tmp_path / "stale.kwsnap").exists()
    reader.refresh()
    for number, t in enumerate((tree, reader)):
        path = Path(t.snapshot(tmp_path / f"c{number}.kwsnap"))
        kwtree.restore(path, tmp_path / f"copy{number}")
        with open_tree(tmp_path / f"copy{number}", read_only=True) as copy:
            assert snapshot(copy, kids, iids) == expected
    reader.close()
    tree.close()


# --- restoring in place --------------------------------------------------------------------------


def test_tree_restore_replaces_its_directory_and_goes_on(tmp_path: Path) -> None:
    source = tmp_path / "tree"
    tree = open_tree(source)
    kids, iids = fill(tree)
    expected = snapshot(tree, kids, iids)
    path = Path(tree.snapshot(tmp_path / "s.kwsnap"))
    later_kids, later_iids = fill(tree, 4)
    tree.delete_keyword(kids[1], cascade=True)
    (source / "notes.txt").write_text("mine")  # not kwtree's: it stays
    (source / ".git").mkdir()
    lock_inode = os.stat(source / "lock").st_ino
    summary = tree.restore(path)
    assert summary["replaced"] is True and summary["last_op_id"] == expected["last_op_id"]
    assert snapshot(tree, kids, iids) == expected
    assert (source / "notes.txt").read_text() == "mine" and (source / ".git").is_dir()
    assert os.stat(source / "lock").st_ino == lock_inode  # open handles elsewhere keep excluding writers
    assert siblings(source) == ["s.kwsnap", "tree"]  # the old directory is gone, no staging left
    for kid in later_kids:
        with pytest.raises(NotFoundError):
            tree.get_keyword(kid)
    again = tree.create_keyword("after restore", parent_id=kids[0])  # usable, and writes land in the new log
    expected = snapshot(tree, kids + [again.id], iids)
    tree.close()
    with open_tree(source) as reopened:
        assert snapshot(reopened, kids + [again.id], iids) == expected


def test_other_instances_follow_a_restore(tmp_path: Path) -> None:
    source = tmp_path / "tree"
    tree = open_tree(source)
    kids, iids = fill(tree)
    expected = snapshot(tree, kids, iids)
    path = Path(tree.snapshot(tmp_path / "s.kwsnap"))
    fill(tree)
    other = open_tree(source)
    reader = open_tree(source, read_only=True)
    kwtree.restore(path, source)
    reader.refresh()
    assert snapshot(reader, kids, iids) == expected
    # catches up on the restored log first
    late = other.create_keyword("written by another instance", llm_auto_place=False)
    with open_tree(source, read_only=True) as fresh:
        assert snapshot(fresh, kids, iids)["keywords"]["root"]["children"][-1] == late.id
        assert fresh.tree_metrics()["operations"] == expected["metrics"]["operations"] + 1
    for t in (tree, other, reader):
        t.close()


def test_failed_restore_puts_the_old_directory_back(tmp_path: Path) -> None:
    """An archive whose checksums hold but whose recorded counts do not match its log: the
    in-place restore fails after the swap, when the reopened tree is compared, and rolls back."""
    source = tmp_path / "tree"
    tree = open_tree(source)
    kids, iids = fill(tree)
    path = Path(tree.snapshot(tmp_path / "s.kwsnap"))
    items = members(path)
    header = json.loads(items[0][1])
    header["counts"]["keywords"] += 1
    lying = write_tar(tmp_path / "lying.kwsnap", [(regular(items[0][0].name), json.dumps(header).encode()),
                                                 *[(regular(m.name), data) for m, data in items[1:]]])
    fill(tree, 2)
    now = snapshot(tree, kids, iids)
    files = entries(source, caches=False)
    with pytest.raises(FormatError, match="replays to"):
        tree.restore(lying)
    assert snapshot(tree, kids, iids) == now and entries(source, caches=False) == files
    assert siblings(source) == ["lying.kwsnap", "s.kwsnap", "tree"]
    tree.create_keyword("still writable")
    with pytest.raises(FormatError, match="replays to"):
        kwtree.restore(lying, tmp_path / "new")  # checked before anything is put in place
    assert siblings(source) == ["lying.kwsnap", "s.kwsnap", "tree"]
    tree.close()


# --- refusing archives ---------------------------------------------------------------------------


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    with open_tree(tmp_path / "source") as tree:
        fill(tree, 4)
        return Path(tree.snapshot(tmp_path / "good.kwsnap"))


@pytest.fixture(params=["new", "tree"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A restore target: a path that does not exist yet, or an existing tree."""
    path = tmp_path / "target"
    if request.param == "tree":
        with open_tree(path) as tree:
            fill(tree, 2)
    return path


def assert_refused(archive: Path, target: Path, error: type[Exception], match: str) -> None:
    """Restoring ``archive`` into ``target`` raises, and nothing is touched or left behind."""
    before = entries(target) if target.exists() else None
    around = siblings(target)
    with pytest.raises(error, match=match):
        kwtree.restore(archive, target)
    assert (entries(target) if target.exists() else None) == before
    assert siblings(target) == around
    if (target / "manifest.json").exists():  # an in-place restore refuses the same way
        with open_tree(target) as tree:
            state = snapshot(tree)
            with pytest.raises(error, match=match):
                tree.restore(archive)
            assert snapshot(tree) == state
        assert siblings(target) == around


@pytest.mark.parametrize("where", ["log", "manifest", "digest"])
def test_an_altered_member_is_refused_with_nothing_touched(archive: Path, target: Path, where: str) -> None:
    data = bytearray(archive.read_bytes())
    items = members(archive)
    with tarfile.open(archive, "r:") as tar:
        infos = tar.getmembers()
    if where == "log":
        at = data.index(b'"content":"memory', infos[2].offset_data) + len(b'"content":"')
        data[at:at + 1] = b"n"  # "memory" -> "nemory": still valid JSON, another checksum
    elif where == "manifest":
        at = data.index(b'"replica_id"', infos[1].offset_data) + len(b'"replica_id": "')
        data[at:at + 1] = b"z" if data[at:at + 1] != b"z" else b"y"
    else:
        digest = json.loads(items[0][1])["members"][-1]["sha256"]
        at = data.index(digest.encode(), infos[0].offset_data)
        data[at:at + 1] = b"0" if data[at:at + 1] != b"0" else b"1"
    altered = archive.with_name("altered.kwsnap")
    altered.write_bytes(bytes(data))
    assert_refused(altered, target, FormatError, "SHA-256 checksum")


def _hostile(archive: Path, evil: tarfile.TarInfo, data: bytes = b"") -> Path:
    """The good archive with ``evil`` in place of its first log segment."""
    items = members(archive)
    rebuilt = [(regular(m.name), body) for m, body in items]
    rebuilt[2] = (evil, data)
    return write_tar(archive.with_name("hostile.kwsnap"), rebuilt)


def test_unsafe_members_are_refused(archive: Path, target: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    segment = members(archive)[2][0].name
    cases: list[tuple[tarfile.TarInfo, str]] = []
    cases.append((regular(str(outside)), "absolute path"))
    cases.append((regular("../outside"), r"'\.\.'"))
    cases.append((regular("log/../../outside"), r"'\.\.'"))
    link = tarfile.TarInfo(segment)
    link.type, link.linkname = tarfile.SYMTYPE, str(outside)
    cases.append((link, "symbolic link"))
    hard = tarfile.TarInfo(segment)
    hard.type, hard.linkname = tarfile.LNKTYPE, "manifest.json"
    cases.append((hard, "hard link"))
    for kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        device = tarfile.TarInfo(segment)
        device.type, device.devmajor, device.devminor = kind, 1, 3
        cases.append((device, "device file"))
    fifo = tarfile.TarInfo(segment)
    fifo.type = tarfile.FIFOTYPE
    cases.append((fifo, "not a regular file"))
    folder = tarfile.TarInfo("log")
    folder.type = tarfile.DIRTYPE
    cases.append((folder, "not a regular file"))
    cases.append((regular("cache/evil.bin"), "not a file a kwtree snapshot holds"))
    for evil, reason in cases:
        hostile = _hostile(archive, evil, b"{}\n" if evil.isreg() else b"")
        assert_refused(hostile, target, FormatError, f"refusing member .*{reason}")
        assert not os.path.lexists(outside)


def test_truncated_archives_are_refused(archive: Path, target: Path) -> None:
    data = archive.read_bytes()
    with tarfile.open(archive, "r:") as tar:
        infos = tar.getmembers()
    last = infos[-1]
    cuts = {
        100: "not a kwtree snapshot",  # inside the first header
        infos[0].offset_data + 10: "truncated",  # inside the snapshot manifest
        infos[1].offset: "truncated",  # right after the snapshot manifest
        last.offset_data + last.size // 2: "truncated",  # inside the last segment
        len(data) // 2: "truncated",
    }
    for cut, reason in cuts.items():
        short = archive.with_name("short.kwsnap")
        short.write_bytes(data[:cut])
        assert_refused(short, target, FormatError, reason)


def test_other_bad_archives_are_refused(archive: Path, target: Path, tmp_path: Path) -> None:
    items = members(archive)
    header = json.loads(items[0][1])

    def with_header(edit: dict[str, Any], extra: list[tuple[tarfile.TarInfo, bytes]] = ()) -> Path:
        body = json.dumps({**header, **edit}).encode()
        rest = [(regular(m.name), data) for m, data in items[1:]]
        return write_tar(tmp_path / "edited.kwsnap", [(regular(items[0][0].name), body), *rest, *extra])

    not_tar = tmp_path / "notes.kwsnap"
    not_tar.write_text("just text\n" * 200)
    assert_refused(not_tar, target, FormatError, "not a kwtree snapshot")
    assert_refused(with_header({"format": 2}), target, FormatError, "newer kwtree")
    assert_refused(with_header({"kind": "something else"}), target, FormatError, "does not describe")
    assert_refused(with_header({}, [(regular("log/" + "f" * 32 + ".jsonl"), b"{}\n")]), target, FormatError,
                   "not in its manifest")
    assert_refused(with_header({"members": header["members"][:-1]}), target, FormatError, "not in its manifest")
    plain = write_tar(tmp_path / "plain.tar", [(regular("manifest.json"), items[1][1])])
    assert_refused(plain, target, FormatError, "first member is not")
    assert_refused(tmp_path / "absent.kwsnap", target, NotFoundError, "no snapshot file")
    assert_refused(tmp_path, target, InvalidInputError, "not a file")


def test_restore_refuses_a_foreign_directory_and_bad_arguments(archive: Path, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a tree")
    assert_refused(archive, foreign, FormatError, "not empty and is not a kwtree directory")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert_refused(archive, a_file, InvalidInputError, "is a file")
    for bad in (None, "", 3):
        with pytest.raises(InvalidInputError, match="data_dir"):
            kwtree.restore(archive, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="snapshot must be"):
        kwtree.restore(None, tmp_path / "x")  # type: ignore[arg-type]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert kwtree.restore(archive, empty)["replaced"] is False  # an empty directory is filled
    nested = tmp_path / "a" / "b" / "tree"
    kwtree.restore(archive, nested)  # missing parents are created
    with open_tree(empty, read_only=True) as one, open_tree(nested, read_only=True) as two:
        assert snapshot(one) == snapshot(two)


# --- invariant 7, and a snapshot under a live writer ---------------------------------------------

STEP = st.tuples(st.sampled_from(["keyword", "info", "update", "move", "delete", "relate", "link", "unlink"]),
                 st.integers(0, 30), st.integers(0, 30))


def apply_steps(tree: KeywordTree, steps: list[tuple[str, int, int]], kids: list[str], iids: list[str]) -> None:
    """Run random public writes (those the state refuses are skipped)."""
    for kind, a, b in steps:
        live = ["root", *kids]
        pick_kw, other_kw = live[a % len(live)], live[b % len(live)]
        try:
            if kind == "keyword":
                kids.append(tree.create_keyword(f"k{len(kids)}", parent_id=pick_kw, llm_auto_place=False).id)
            elif kind == "info":
                iids.append(tree.create_info(f"note {len(iids)}", keyword_ids=[other_kw]).id)
            elif kind == "update" and iids:
                tree.update_info(iids[a % len(iids)], {"content": f"changed {b}"})
            elif kind == "move":
                tree.move_keyword(pick_kw, other_kw)
            elif kind == "delete":
                tree.delete_keyword(pick_kw, cascade=True, info_policy=("reattach", "delete", "keep")[b % 3])
            elif kind == "relate":
                tree.relate(pick_kw, other_kw, "related_to", 1.0 + b)
            elif kind == "link" and iids:
                tree.link_info(iids[a % len(iids)], other_kw, RelationType.RELATED)
            elif kind == "unlink" and iids:
                tree.unlink_info(iids[a % len(iids)], other_kw)
        except kwtree.KwtreeError:
            pass


@given(before=st.lists(STEP, min_size=1, max_size=12), after=st.lists(STEP, min_size=1, max_size=8))
def test_restore_gives_back_the_state_at_snapshot_time(tmp_path_factory: pytest.TempPathFactory,
                                                       before: list[tuple[str, int, int]],
                                                       after: list[tuple[str, int, int]]) -> None:
    base = tmp_path_factory.mktemp("prop")
    tree = open_tree(base / "tree", segment_bytes=4096)
    kids: list[str] = []
    iids: list[str] = []
    apply_steps(tree, before, kids, iids)
    taken = list(kids), list(iids)
    expected = snapshot(tree, *taken)
    path = tree.snapshot(base / "s.kwsnap")
    apply_steps(tree, after, kids, iids)
    kwtree.restore(path, base / "copy")  # into a new directory
    tree.restore(path)  # in place of the tree's own
    with open_tree(base / "copy", read_only=True) as copy:
        assert snapshot(copy, *taken) == expected
        assert snapshot(tree, *taken) == expected
        assert snapshot(tree, kids, iids) == snapshot(copy, kids, iids)  # also about entities written later
    tree.close()


WRITER = """
import sys
from kwtree import KeywordTree
tree = KeywordTree(sys.argv[1], worker=False)  # durable: the log carries preallocated padding
keyword = tree.create_keyword("written", llm_auto_place=False).id
n = 0
while sys.stdin.readline():  # each line: a burst of writes, saying when it started and ended
    for i in range(60):
        tree.batch_create_infos([{"content": f"m{n}.{j}", "keyword_ids": [keyword]} for j in range(3)])
        tree.create_keyword(f"k{n}", parent_id=keyword)
        n += 1
        if i == 0:
            print("writing", flush=True)
    print("wrote", n, flush=True)
"""


def test_a_snapshot_under_a_live_writer_is_a_prefix_of_whole_operations(tmp_path: Path) -> None:
    """Snapshots race a burst of writes in another process. The child writes in bursts the
    parent starts, not forever: a process writing in a tight loop can keep a waiter off the
    writer lock for a long time (flock is polled), and bursts bound that wait without a sleep."""
    source = tmp_path / "tree"
    with open_tree(source) as tree:
        tree.create_keyword("before", llm_auto_place=False)
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(source)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def burst() -> None:
        child.stdin.write("go\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        assert child_line(child, HANG) == "writing"

    writer = open_tree(source, lock_timeout=HANG)  # another writer: its snapshots take the writer lock
    reader = open_tree(source, read_only=True)  # a reader: its snapshots take no lock at all
    taken: list[Path] = []
    try:
        for round_ in range(3):
            burst()
            taken.append(Path(writer.snapshot(tmp_path / f"w{round_}.kwsnap")))
            assert child_line(child, HANG).startswith("wrote")
            burst()
            reader.refresh()
            taken.append(Path(reader.snapshot(tmp_path / f"r{round_}.kwsnap")))
            assert child_line(child, HANG).startswith("wrote")
        burst()
    finally:
        child.send_signal(signal.SIGKILL)  # mid-burst: may leave a torn operation, never in a snapshot
        child.wait(HANG)
        writer.close()
        reader.close()
    final = op_ids(log_data(source))
    watermarks = []
    for number, path in enumerate(taken):
        header = header_of(path)
        restored = tmp_path / f"restored{number}"
        kwtree.restore(path, restored)
        ids = op_ids(log_data(restored))
        assert ids == final[: len(ids)] and ids[-1] == header["last_op_id"]  # a prefix of whole operations
        assert header["counts"]["operations"] == len(ids)
        with open_tree(restored, read_only=True) as copy, \
                open_tree(source, as_of=header["last_op_id"]) as then:
            assert snapshot(copy) == snapshot(then)
        watermarks.append(len(ids))
    assert watermarks == sorted(watermarks) and watermarks[-1] > watermarks[0]


# --- the command line ----------------------------------------------------------------------------


def test_cli_snapshot_and_restore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "tree"
    with open_tree(source) as tree:
        kids, iids = fill(tree)
        expected = snapshot(tree, kids, iids)
    out = tmp_path / "s.kwsnap"
    assert main(["snapshot", str(source), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}\n"
    assert main(["restore", str(out), str(tmp_path / "copy"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["replaced"] is False and report["last_op_id"] == expected["last_op_id"]
    with open_tree(tmp_path / "copy") as copy:
        assert snapshot(copy, kids, iids) == expected
        copy.create_keyword("changed")
    assert main(["restore", str(out), str(tmp_path / "copy")]) == 0
    assert "replaced" in capsys.readouterr().out
    with open_tree(tmp_path / "copy") as copy:
        assert snapshot(copy, kids, iids) == expected
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "x").write_text("x")
    assert main(["restore", str(out), str(tmp_path / "foreign")]) == 1
    assert capsys.readouterr().err.startswith("error: ")
    assert main(["snapshot", str(source), "--out", str(out)]) == 1  # never overwrites
    assert "already exists" in capsys.readouterr().err


def test_lock_name_matches_the_tree() -> None:
    from kwtree.facade.tree import LOCK_NAME
    from kwtree.ops import restore as restoring

    assert restoring.LOCK_NAME == LOCK_NAME
