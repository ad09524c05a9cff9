"""Test helpers: a snapshot of every public read (``kwtree.testing.public_reads``), copies
of data directories, and child processes."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from kwtree.ops import git as kwgit
from kwtree.testing import public_reads as snapshot

__all__ = ["HANG", "Child", "assert_every_open_refuses", "child_line", "copy_tree_dir", "dir_bytes", "fill_disk",
           "log_bytes", "says_disk_full", "snapshot", "tmpfs"]

HANG = 120  # seconds before a stuck child is reported as a failure (never reached normally)
#: Whether the thorough hypothesis profile runs (KWTREE_HYPOTHESIS_PROFILE=thorough, see conftest):
#: slow tests then run the sizes their issues asked for, not the default profile's few.
THOROUGH = os.environ.get("KWTREE_HYPOTHESIS_PROFILE") == "thorough"


@contextlib.contextmanager
def tmpfs(mount_point: Path, options: str) -> Iterator[Path]:
    """A real small file system at ``mount_point`` (created here): a tmpfs mounted with
    ``options`` (e.g. ``"size=8m"``, ``"size=1m,ro"``), unmounted afterwards. The test is
    skipped, saying why, where mounting is not permitted (it needs root)."""
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill_disk(disk: Path, leave: int = 0) -> Path:
    """Write a file on the file system holding ``disk`` until it is full (ENOSPC), then give
    back ``leave`` bytes of it (rounded by the file system to its blocks); delete the file
    to free the space."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (b"\0" * (1 << 16), b"\0"):
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as exc:
                assert exc.errno == 28, exc  # ENOSPC
        if leave:
            os.ftruncate(fd, max(os.fstat(fd).st_size - leave, 0))
    finally:
        os.close(fd)
    return filler


def says_disk_full(exc: pytest.ExceptionInfo[Exception], path: Path) -> None:
    """The DiskFullError's message says the disk holding ``path`` is full and to free space,
    not the system's bare "short write"."""
    message = str(exc.value)
    assert "is full" in message and "free space" in message and str(path) in message, message
    assert "short write" not in message


def assert_every_open_refuses(directory: Path, segment: Path, line: int, *words: str) -> None:
    """Opening ``directory`` writable, read-only and without fsync each raises CorruptLogError
    at ``segment``:``line`` whose detail holds every one of ``words``, and no open changes
    any file (no writer moves the damage, or what follows it, aside)."""
    from kwtree import CorruptLogError, KeywordTree

    before = dir_bytes(directory)
    for options in ({}, {"read_only": True}, {"durability": "none"}):
        with pytest.raises(CorruptLogError) as caught:
            KeywordTree(directory, worker=False, **options)
        assert (caught.value.path, caught.value.line) == (str(segment), line)
        assert all(word in caught.value.detail for word in words), caught.value.detail
    assert dir_bytes(directory) == before


def copy_tree_dir(source: Path, target: Path) -> Path:
    """Copy a data directory (log, manifest) without its lock file, nor the temporary files of
    atomic replacements (a tree still open may be writing one, gone by the time it is copied)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("lock", ".*.tmp"))
    return target


def dir_bytes(directory: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and directory (None) under ``directory``: equal before and
    after something means it created, changed and removed nothing there."""
    return {str(path.relative_to(directory)): None if path.is_dir() else path.read_bytes()
            for path in sorted(directory.rglob("*"))}


def log_bytes(data_dir: Path) -> bytes:
    """The concatenated log segments of a directory, padding included."""
    return b"".join(p.read_bytes() for p in sorted((data_dir / "log").glob("*.jsonl")))


def child_line(proc: subprocess.Popen[str], hang: float) -> str:
    """The next line a child process prints (without its newline); an AssertionError with
    its exit code and stderr if it exits first."""
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        proc.wait(hang)
        raise AssertionError(f"child exited ({proc.returncode}) early: {proc.stderr.read()}")  # type: ignore[union-attr]
    return line.rstrip("\n")


class Child:
    """A Python child process running ``code`` (or a script: ``code`` a path ending in .py);
    talks line by line over stdin/stdout. The ``children`` fixture (conftest.py) starts them
    and kills what is left at the end of the test."""

    def __init__(self, code: str, *args: object) -> None:
        program = [code] if code.endswith(".py") else ["-c", textwrap.dedent(code)]
        self.proc = subprocess.Popen(
            [sys.executable, *program, *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def readline(self) -> str:
        return child_line(self.proc, HANG)

    def expect(self, prefix: str) -> str:
        line = self.readline()
        assert line.startswith(prefix), line
        return line

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def finish(self) -> str:
        """Close stdin, wait for a clean exit and return the rest of stdout."""
        self.proc.stdin.close()  # type: ignore[union-attr]
        out = self._rest()
        assert self.proc.wait(HANG) == 0, self.proc.stderr.read()  # type: ignore[union-attr]
        return out

    def _rest(self) -> str:
        # Through the same file object as readline: communicate() reads the raw pipe and would
        # miss the lines readline had already buffered (it lost acknowledged writes here).
        return self.proc.stdout.read()  # type: ignore[union-attr]

    def wait_exit(self) -> None:
        """Close stdin and wait for a clean exit (stdout is read by someone else)."""
        self.proc.stdin.close()  # type: ignore[union-attr]
        assert self.proc.wait(HANG) == 0, self.proc.stderr.read()  # type: ignore[union-attr]

    def kill(self) -> str:
        """SIGKILL the child; return every complete line it had written (they were acknowledged)."""
        self.proc.send_signal(signal.SIGKILL)
        out = self._rest()
        assert self.proc.wait(HANG) == -signal.SIGKILL, self.proc.stderr.read()  # type: ignore[union-attr]
        return out

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=HANG)


def without_repair_appends(data: bytes) -> bytes:
    """``data`` (a newest segment after a repair) without what the repair appended after the
    operations it kept: the note that says which damaged operations it removed (a chained log)
    and the operation retiring links the damage left naming nothing."""
    while data:
        start = _last_operation_start(data)
        row = orjson.loads(data[start:].splitlines()[-1])
        if not (row["entity"] == "note" or (row["end"]["actor"] == "repair" and row["end"]["kind"] == "repair")):
            break
        data = data[:start]
    return data


def _last_operation_start(data: bytes) -> int:
    """Where the last operation of ``data`` (whole operations) begins."""
    lines = data.splitlines(keepends=True)
    start = len(data) - len(lines[-1])
    for line in reversed(lines[:-1]):
        if b'"end":' in line:
            break
        start -= len(line)
    return start


def merge_logs(ours: Path, theirs: Path, base: dict[str, bytes]) -> None:
    """What ``git merge`` does to a tree's log: the segments both sides had at ``base`` (name ->
    bytes) merged by kwtree's driver into ``ours``, each side's new segments taken as they are."""
    for name, segment in base.items():
        merged = kwgit.merge_segments(segment, (ours / "log" / name).read_bytes(), (theirs / "log" / name).read_bytes())
        (ours / "log" / name).write_bytes(merged)
    for path in (theirs / "log").iterdir():
        if path.name not in base:
            shutil.copy(path, ours / "log" / path.name)


def bench_module(name: str) -> Any:
    """The benchmark script ``bench/<name>.py``, imported as a module (bench/ is not a package)."""
    bench = str(Path(__file__).resolve().parent.parent / "bench")
    sys.path.insert(0, bench)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(bench)
