"""``kwtree.stores.files.write_atomically`` is the one way kwtree replaces a file: the manifest,
cache metadata (full-text, vectors), the outbox's compaction, exports and git's files all
go through it (a snapshot archive is published by a hard link instead: it never replaces a
file). These tests pin its promise: the file gets exactly the mode asked for, a
failure leaves the old file and no temporary file, two threads replacing one file never share
a temporary file, and no caller leaves one behind.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import IO

import pytest

from kwtree import KeywordTree
from kwtree.caches.outbox import Outbox
from kwtree.stores.files import write_atomically


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _leftovers(directory: Path) -> list[Path]:
    return [path for path in directory.rglob("*.tmp") if path.is_file()]


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644])
def test_bytes_and_streamed_bodies_give_the_file_and_its_exact_mode(tmp_path: Path, mode: int) -> None:
    target = tmp_path / "f.json"
    write_atomically(target, b"one", mode)
    assert target.read_bytes() == b"one" and _mode(target) == mode

    def body(out: IO[bytes]) -> None:
        for n in range(1000):
            out.write(b"%d," % n)

    write_atomically(target, body, mode, sync_directory=True)
    assert target.read_bytes() == b"".join(b"%d," % n for n in range(1000)) and _mode(target) == mode
    assert _leftovers(tmp_path) == []


def test_a_failing_body_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    write_atomically(target, b"old")

    def body(out: IO[bytes]) -> None:
        out.write(b"half of the new")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_atomically(target, body)
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["f.json"]


def test_a_missing_directory_raises_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "absent" / "f.json", b"x")
    assert os.listdir(tmp_path) == []


def test_threads_replacing_one_file_never_mix_their_bodies(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    bodies = [bytes([65 + n]) * 200_000 for n in range(4)]
    errors: list[BaseException] = []

    def writer(body: bytes) -> None:
        try:
            for _ in range(20):
                write_atomically(target, body)
                assert target.read_bytes() in bodies
        except (AssertionError, OSError) as exc:  # (reported below: a thread's failure is not the test's)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert target.read_bytes() in bodies
    assert _leftovers(tmp_path) == []


def test_no_caller_leaves_a_temporary_file(tmp_path: Path) -> None:
    """The manifest, the full-text and vector metadata, the outbox compaction and an export."""
    directory = tmp_path / "tree"
    with KeywordTree(directory, durability="none") as tree:
        keyword = tree.create_keyword("cats", "root")
        for n in range(5):
            tree.create_info(f"cats purr {n}", keyword_ids=[keyword.id])
        assert tree.wait_indexed(timeout=120)
        tree.compact()
        tree.export(tmp_path / "export.json")
        tree.export(tmp_path / "export.md", format="markdown")
    assert (tmp_path / "export.json").stat().st_size > 0
    assert _mode(tmp_path / "export.json") == _mode(directory / "manifest.json") == 0o600
    assert _leftovers(tmp_path) == []


def test_outbox_compaction_keeps_the_file_mode_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "outbox.jsonl"
    box = Outbox(path, file_mode=0o640)
    try:
        box.enqueue([("info", f"e{n}", f"h{n}", "m1") for n in range(4)])
        box.done("w", box.claim("w", 2))
        box.compact()
        assert len(path.read_bytes().splitlines()) < 6 and box.status()["pending"] == 2
    finally:
        box.close()
    assert _mode(path) == 0o640
    assert _leftovers(tmp_path) == []
