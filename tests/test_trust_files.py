"""Issue 13, item 8: memories are private by default.

Every file kwtree creates is 0o600 and every directory 0o700, exactly, whatever the umask;
the files tantivy writes itself live in 0o700 directories. ``file_mode`` loosens it, is
recorded in the manifest, and re-modes an existing tree. Exports and snapshots are private
too. A process running as another user (``nobody``) cannot read a memory.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kwtree import KeywordTree
from kwtree.errors import InvalidInputError

SECRET = "the vault code is 7351-secret-memory"
TANTIVY_DIR = Path("cache", "fulltext", "index")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _fill(directory: Path, **options: object) -> None:
    """A tree with every kind of file: log (two generations), caches, outbox, quarantine."""
    with KeywordTree(directory, **options) as tree:
        kw = tree.create_keyword("vault", llm_auto_place=False)
        tree.create_info(SECRET, keyword_ids=[kw.id])
        assert tree.wait_indexed(30)
        assert tree.recall("vault code")
        tree.compact()
        tree.create_info("another memory", keyword_ids=[kw.id])
    segment = sorted((directory / "log").glob("*.jsonl"))[-1]
    with open(segment, "ab") as f:  # a torn operation, which the next writer quarantines
        f.write(b'{"torn": ')
    with KeywordTree(directory) as tree:
        tree.create_info("after the torn tail")


def _modes(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): _mode(p) for p in sorted(directory.rglob("*"))}


def _check_private(directory: Path, file_mode: int, dir_mode: int, *, filled: bool = True) -> None:
    modes = _modes(directory)
    if filled:  # by _fill: every kind of file is there
        assert "quarantine" in modes and "outbox.jsonl" in modes and "lock" in modes
        assert any(name.startswith("cache/vectors/") for name in modes)
    assert _mode(directory) == dir_mode
    for name, mode in modes.items():
        path = directory / name
        if path.is_dir():
            assert mode == dir_mode, (name, oct(mode))
        elif Path(name).parent == TANTIVY_DIR:
            # tantivy writes these with the umask's mode: its directory keeps them from others
            assert _mode(path.parent) == dir_mode
        else:
            assert mode == file_mode, (name, oct(mode))


_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.test_trust_files import _fill
_fill(Path(sys.argv[1]), durability="none")
"""


def test_every_file_and_directory_is_private_whatever_the_umask(tmp_path: Path) -> None:
    # A child with umask 0 (a library must not change the caller's umask to get this).
    directory = tmp_path / "tree"
    root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run([sys.executable, "-c", _CHILD.format(root=root), str(directory)],
                          capture_output=True, text=True, timeout=300, umask=0)
    assert done.returncode == 0, done.stderr
    _check_private(directory, 0o600, 0o700)
    assert json.loads((directory / "manifest.json").read_bytes())["file_mode"] == 0o600


def test_the_callers_umask_is_left_alone(tmp_path: Path) -> None:
    before = os.umask(0o022)
    try:
        _fill(tmp_path / "tree", durability="none")
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(before)


def test_export_and_snapshot_are_private(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "tree", durability="none", worker=False) as tree:
        tree.create_info(SECRET)
        tree.export(tmp_path / "out.json")
        tree.export(tmp_path / "out.md", format="markdown")
        archive = Path(tree.snapshot(tmp_path / "tree.kwsnap"))
    assert _mode(tmp_path / "out.json") == 0o600
    assert _mode(tmp_path / "out.md") == 0o600
    assert _mode(archive) == 0o600


def test_a_looser_file_mode_is_recorded_and_used_by_every_writer(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    with KeywordTree(directory, durability="none", file_mode=0o640, segment_bytes=4096) as tree:
        assert tree.file_mode == 0o640
        tree.create_info(SECRET)
        tree.export(tmp_path / "out.json")
        archive = Path(tree.snapshot(tmp_path / "tree.kwsnap"))
    assert json.loads((directory / "manifest.json").read_bytes())["file_mode"] == 0o640
    # A later writer that does not pass file_mode creates files with the recorded mode.
    with KeywordTree(directory, durability="none") as tree:
        assert tree.file_mode == 0o640
        for n in range(40):  # past segment_bytes: new segments
            tree.create_info(f"memory {n} " + "x" * 200)
    assert len(list((directory / "log").glob("*.jsonl"))) > 1
    _check_private(directory, 0o640, 0o750, filled=False)
    assert _mode(tmp_path / "out.json") == 0o640 and _mode(archive) == 0o640


def test_passing_another_file_mode_remodes_an_existing_tree(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    _fill(directory, durability="none")
    (directory / "notes.txt").write_text("the user's own file")
    os.chmod(directory / "notes.txt", 0o604)
    with KeywordTree(directory, durability="none", file_mode=0o660):
        pass
    modes = _modes(directory)
    assert modes.pop("notes.txt") == 0o604  # not kwtree's: untouched
    assert _mode(directory) == 0o770
    for name, mode in modes.items():
        expected = 0o770 if (directory / name).is_dir() else 0o660
        assert mode == expected, (name, oct(mode))
    with KeywordTree(directory, durability="none", file_mode=0o600):
        pass
    (directory / "notes.txt").unlink()
    _check_private(directory, 0o600, 0o700)


@pytest.mark.parametrize("bad", [0o644 | 0o100, 0o400, 0o1600, "0o600", 0o700, -1])
def test_a_bad_file_mode_is_refused_and_nothing_is_created(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidInputError, match="file_mode"):
        KeywordTree(tmp_path / "tree", file_mode=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "tree").exists()


_NOBODY = """
import json, os, sys
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
secret = sys.argv[1].encode()
readable, leaked = [], []
for path in sys.argv[2:]:
    try:
        if os.path.isdir(path):
            os.listdir(path)
            readable.append(path)
            continue
        with open(path, "rb") as f:
            data = f.read()
    except PermissionError:
        continue
    readable.append(path)
    if secret in data:
        leaked.append(path)
print(json.dumps({"uid": os.getuid(), "readable": readable, "leaked": leaked}))
"""


def _as_nobody(paths: list[Path]) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-I", "-c", _NOBODY, SECRET, *map(str, paths)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="dropping privileges to user nobody needs root")
def test_another_user_cannot_read_a_memory(tmp_path: Path) -> None:
    # A world-searchable place (pytest's tmp_path is private to root): the data directory's
    # own mode is then all that keeps other users out, or, when the user made the directory
    # 0o755 themselves, the modes of every file and directory in it.
    home = Path(tempfile.mkdtemp(prefix="kwtree-nobody-", dir="/tmp"))
    try:
        os.chmod(home, 0o755)
        made_by_kwtree = home / "tree"
        made_by_user = home / "mine"
        made_by_user.mkdir(mode=0o755)
        os.chmod(made_by_user, 0o755)
        paths: list[Path] = []
        for directory in (made_by_kwtree, made_by_user):
            _fill(directory, durability="none")
            with KeywordTree(directory, durability="none", worker=False) as tree:
                tree.export(home / f"{directory.name}.json")
                tree.snapshot(home / f"{directory.name}.kwsnap")
            paths += [directory, *sorted(directory.rglob("*"))]
        paths += [home / "tree.json", home / "tree.kwsnap", home / "mine.json", home / "mine.kwsnap"]
        assert any(SECRET.encode() in p.read_bytes() for p in paths if p.is_file())
        seen = _as_nobody(paths)
        assert seen["uid"] == 65534
        assert seen["leaked"] == []
        # nobody may list the user's own 0o755 directory, and nothing else
        assert seen["readable"] == [str(made_by_user)]
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=True)
