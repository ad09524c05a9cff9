"""Issue 13, item 11 (a)-(d): interrupted imports resume, what killed snapshots and restores
leave is cleaned up safely, and restore refuses hostile archives before writing them.

Kills are real SIGKILLs of child processes, taken at a chosen point: the child installs a
profile hook (its own code, not a patch of kwtree's) that reports when kwtree enters a
function and then waits for the parent, which kills it there.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import kwtree
from kwtree import KeywordTree
from kwtree.errors import FormatError, InvalidInputError, StorageError
from tests.helpers import child_line, tmpfs

ROOT = str(Path(__file__).resolve().parent.parent)

_PAUSE = """
import sys
sys.path.insert(0, {root!r})
module, function, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
calls = 0

def hook(frame, event, arg):
    global calls
    code = frame.f_code
    if event == "call" and code.co_name == function and code.co_filename.endswith(module):
        calls += 1
        if calls == nth:
            sys.setprofile(None)
            print("paused", flush=True)
            sys.stdin.readline()  # the parent kills us here

from kwtree import KeywordTree
import kwtree
action, args = sys.argv[4], sys.argv[5:]
sys.setprofile(hook)
if action == "snapshot":
    with KeywordTree(args[0], worker=False) as tree:
        tree.snapshot(args[1] if len(args) > 1 else None)
elif action == "restore":
    kwtree.restore(args[0], args[1])
elif action == "import":
    KeywordTree.import_json(args[0], args[1], worker=False).close()
print("finished", flush=True)
"""


class Paused:
    """A child process stopped inside ``function`` of kwtree's ``module`` (its ``nth`` call)."""

    def __init__(self, module: str, function: str, action: str, *args: object, nth: int = 1) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _PAUSE.format(root=ROOT), module, function, str(nth), action, *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert child_line(self.proc, 60) == "paused"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(60) == -signal.SIGKILL


def _tree(directory: Path, infos: int = 30) -> None:
    with KeywordTree(directory, durability="none", worker=False) as tree:
        kw = tree.create_keyword("topic", llm_auto_place=False)
        for n in range(infos):
            tree.create_info(f"memory number {n} " + "lorem ipsum " * 20, keyword_ids=[kw.id])


def _hidden(parent: Path) -> list[str]:
    return sorted(name for name in os.listdir(parent) if name.startswith("."))


# --- (a) an interrupted import ---------------------------------------------------------------------


def test_an_import_killed_after_init_can_be_run_again(tmp_path: Path) -> None:
    _tree(tmp_path / "source")
    with KeywordTree(tmp_path / "source", worker=False) as tree:
        tree.export(tmp_path / "export.json")
        expected = tree.tree_metrics()
    target = tmp_path / "target"
    child = Paused("export.py", "import_changes", "import", tmp_path / "export.json", target)
    child.kill()
    assert (target / "manifest.json").exists()  # the init was written, the import was not
    with KeywordTree.import_json(tmp_path / "export.json", target, worker=False) as tree:
        metrics = tree.tree_metrics()
    assert {k: metrics[k] for k in ("keywords", "infos", "links")} == {
        k: expected[k] for k in ("keywords", "infos", "links")}


def test_an_import_still_refuses_a_tree_with_data(tmp_path: Path) -> None:
    _tree(tmp_path / "source", infos=2)
    with KeywordTree(tmp_path / "source", worker=False) as tree:
        tree.export(tmp_path / "export.json")
    with pytest.raises(InvalidInputError, match="not empty"):
        KeywordTree.import_json(tmp_path / "export.json", tmp_path / "source", worker=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(InvalidInputError, match="not empty"):
        KeywordTree.import_json(tmp_path / "export.json", tmp_path / "other", worker=False)


# --- (b) what killed snapshots and restores leave ---------------------------------------------


def test_a_killed_snapshot_leaves_a_partial_archive_that_the_next_open_removes(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    _tree(directory)
    child = Paused("snapshot.py", "_stream", "snapshot", directory)
    try:
        partial = [tmp_path / name for name in _hidden(tmp_path)]
        assert len(partial) == 1 and partial[0].name.endswith(".tmp") and partial[0].stat().st_size > 0
        # While its writer lives, neither an open nor another snapshot removes it.
        with KeywordTree(directory, worker=False) as tree:
            tree.snapshot(tmp_path / "other.kwsnap")
        assert partial[0].exists()
    finally:
        child.kill()
    assert partial[0].exists()
    with KeywordTree(directory, worker=False):
        pass
    assert _hidden(tmp_path) == []


def test_a_killed_snapshot_to_a_chosen_path_is_removed_by_the_next_snapshot_there(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    _tree(directory)
    (tmp_path / "backups").mkdir()
    (tmp_path / "backups" / ".someone-elses.123.0badcafe.tmp").write_bytes(b"not a kwtree archive")
    child = Paused("snapshot.py", "_stream", "snapshot", directory, tmp_path / "backups" / "a.kwsnap")
    child.kill()
    assert len(_hidden(tmp_path / "backups")) == 2
    with KeywordTree(directory, worker=False) as tree:
        tree.snapshot(tmp_path / "backups" / "b.kwsnap")
    assert _hidden(tmp_path / "backups") == [".someone-elses.123.0badcafe.tmp"]
    assert sorted(os.listdir(tmp_path / "backups"))[1:] == ["b.kwsnap"]


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_killed_restore_leaves_a_staging_directory_that_the_next_open_removes(
        tmp_path: Path, target_exists: bool) -> None:
    _tree(tmp_path / "source")
    with KeywordTree(tmp_path / "source", worker=False) as tree:
        archive = tree.snapshot(tmp_path / "source.kwsnap")
    target = tmp_path / "target"
    if target_exists:
        _tree(target, infos=1)
    # Paused while copying the log segment (the second member): the manifest is staged.
    child = Paused("archive.py", "_copy_member", "restore", archive, target, nth=2)
    try:
        staging = [tmp_path / name for name in _hidden(tmp_path)]
        assert len(staging) == 1 and ".restoring-" in staging[0].name
        with KeywordTree(target, worker=False):  # its restore is alive: left alone
            pass
        assert staging[0].exists()
    finally:
        child.kill()
    with KeywordTree(target, worker=False) as tree:
        assert tree.tree_metrics()["infos"] == (1 if target_exists else 0)
    assert _hidden(tmp_path) == []


def test_a_killed_restore_is_cleaned_up_by_the_next_restore(tmp_path: Path) -> None:
    _tree(tmp_path / "source")
    with KeywordTree(tmp_path / "source", worker=False) as tree:
        archive = tree.snapshot(tmp_path / "source.kwsnap")
    target = tmp_path / "target"
    Paused("archive.py", "_copy_member", "restore", archive, target, nth=2).kill()
    assert len(_hidden(tmp_path)) == 1
    assert kwtree.restore(archive, target)["infos"] == 30
    assert _hidden(tmp_path) == []


# --- (c), (d) hostile archives ------------------------------------------------------------------


def _members(archive: Path) -> tuple[dict[str, object], list[tuple[str, bytes]]]:
    with tarfile.open(archive) as tar:
        found = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    return orjson.loads(found[0][1]), found[1:]


def _block(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")


def _craft(path: Path, header: dict[str, object], members: list[tuple[str, bytes]], *,
           sparse: tuple[str, int] | None = None) -> Path:
    """An archive with ``members`` and right sizes and digests, and optionally a last member
    that declares ``size`` bytes it holds only as a hole (a sparse file)."""
    entries = [{"name": n, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in members]
    if sparse is not None:
        entries.append({"name": sparse[0], "size": sparse[1], "sha256": "0" * 64})
    raw = orjson.dumps({**header, "members": entries}, option=orjson.OPT_INDENT_2) + b"\n"
    with open(path, "wb") as out:
        for name, data in [("kwtree-snapshot.json", raw), *members]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            out.write(_block(info) + data + bytes(-len(data) % 512))
        if sparse is not None:
            info = tarfile.TarInfo(sparse[0])
            info.size, info.mtime = sparse[1], 1_700_000_000
            out.write(_block(info))
            out.seek(sparse[1] + (-sparse[1] % 512), os.SEEK_CUR)  # a hole: nothing is written
        out.write(bytes(1024))
    return path


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    _tree(tmp_path / "source", infos=5)
    with KeywordTree(tmp_path / "source", worker=False) as tree:
        return Path(tree.snapshot(tmp_path / "source.kwsnap"))


def test_restore_refuses_a_manifest_with_a_segment_size_of_zero(tmp_path: Path, archive: Path) -> None:
    header, members = _members(archive)
    for bad in (0, -5):
        manifest = json.loads(members[0][1])
        manifest["segment_bytes"] = bad
        crafted = _craft(tmp_path / f"bad{bad}.kwsnap", header, [(members[0][0], json.dumps(manifest).encode()),
                                                                 *members[1:]])
        with pytest.raises(FormatError, match="segment_bytes must be a positive"):
            kwtree.restore(crafted, tmp_path / "target")
        assert not (tmp_path / "target").exists() and _hidden(tmp_path) == []


def test_opening_a_tree_whose_manifest_has_a_segment_size_of_zero_fails_clearly(tree_dir: Path) -> None:
    KeywordTree(tree_dir, durability="none").close()
    manifest = json.loads((tree_dir / "manifest.json").read_bytes())
    manifest["segment_bytes"] = 0
    (tree_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match="segment_bytes must be a positive"):
        KeywordTree(tree_dir)


def test_restore_refuses_a_log_with_bytes_after_a_nul(tmp_path: Path, archive: Path) -> None:
    header, members = _members(archive)
    name, segment = members[-1]
    hidden = segment + b"\0" + b'{"hidden": "bytes a reader would never see"}\n'
    crafted = _craft(tmp_path / "nul.kwsnap", header, [*members[:-1], (name, hidden)])
    with pytest.raises(FormatError, match="NUL byte at byte"):
        kwtree.restore(crafted, tmp_path / "target")
    assert not (tmp_path / "target").exists() and _hidden(tmp_path) == []


def _written_bytes() -> int:
    """Bytes this process has passed to write() so far (Linux /proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs (a real small disk)."""
    with tmpfs(tmp_path / "disk", "size=16m") as mount:
        yield mount


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts written bytes with Linux /proc/self/io")
def test_restore_refuses_a_sparse_archive_declaring_a_gib_before_writing(
        tmp_path: Path, archive: Path, small_disk: Path) -> None:
    header, members = _members(archive)
    crafted = _craft(tmp_path / "sparse.kwsnap", header, members[:1],
                     sparse=("log/" + "f" * 32 + ".jsonl", 1 << 30))
    assert crafted.stat().st_size > 1 << 30 and crafted.stat().st_blocks * 512 < 1 << 20
    before = _written_bytes()
    with pytest.raises(StorageError, match=r"disk is full.*nothing was written"):
        kwtree.restore(crafted, small_disk / "target")
    assert _written_bytes() - before < 1 << 20
    assert os.listdir(small_disk) == []


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts written bytes with Linux /proc/self/io")
def test_restore_stops_a_sparse_member_within_one_chunk(tmp_path: Path, archive: Path) -> None:
    # Room enough on the disk: the zeros of the hole are refused as they are read.
    header, members = _members(archive)
    crafted = _craft(tmp_path / "sparse.kwsnap", header, members[:1],
                     sparse=("log/" + "f" * 32 + ".jsonl", 64 << 20))
    before = _written_bytes()
    with pytest.raises(FormatError, match="NUL byte at byte 0"):
        kwtree.restore(crafted, tmp_path / "target")
    assert _written_bytes() - before < 1 << 20
    assert not (tmp_path / "target").exists() and _hidden(tmp_path) == []
