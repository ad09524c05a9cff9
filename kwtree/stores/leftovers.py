"""What an interrupted snapshot or restore leaves beside a tree, and removing it safely.

A snapshot is written to ``.<archive name>.<pid>.<random>.tmp`` beside the archive and
linked to its name when complete; a restore extracts into ``.<tree>.restoring-<random>/``
beside the tree and sets the replaced tree aside as ``.<tree>.replaced-<random>/``. A process
killed meanwhile leaves them (a partial archive can be as large as the log).

Whoever writes one of them holds an exclusive ``flock`` on it (the file, or the directory)
for as long as it uses it, and the kernel drops that lock when the process dies, even by
SIGKILL. A cleaner that takes the lock without waiting therefore knows that no live process
is writing the entry, and removes it; one it cannot lock is in use and is left alone. (Not
the process id in the name: ids are reused, and another host or container may share the
directory.) A partial archive is removed only if it begins like a kwtree snapshot, a staging
directory only if it is not empty (a restore locks it before it writes anything into it), and
a set-aside tree only once the tree it was replaced by is in place: a restore killed between
its two renames leaves the old tree only there, and that is left for the user (a warning
says where).

The next writable open of the tree, the next restore into it and the next snapshot written
to the same directory clean up (:func:`remove_leftovers`, :func:`remove_abandoned_archives`).
Where ``fcntl`` is missing nothing is removed.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - platforms without fcntl keep their leftovers
    fcntl = None  # type: ignore[assignment]  # the module or None; each use checks for None

__all__ = [
    "ARCHIVE_MAGIC", "ASIDE_TAG", "STAGING_TAG", "archive_tmp_name", "hold", "let_go", "lock_open_file",
    "remove_abandoned_archives", "remove_leftovers",
]

log = logging.getLogger("kwtree.snapshot")

STAGING_TAG = ".restoring-"
ASIDE_TAG = ".replaced-"
#: What the first blocks of every kwtree archive hold: the name of its first member.
ARCHIVE_MAGIC = b"kwtree-snapshot.json\0"
_MAGIC_WINDOW = 3 * 512  # a pax header block, its data block, then the member's own header
_ARCHIVE_TMP = re.compile(r"\.(.+)\.\d+\.[0-9a-f]{8}\.tmp")
_MANIFEST = "manifest.json"

# The descriptors holding this process's locks on staging and set-aside directories, by path.
_held: dict[str, int] = {}
_held_mutex = threading.Lock()


def archive_tmp_name(target: Path) -> Path:
    """A new temporary name beside ``target`` for an archive being written."""
    return target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def lock_open_file(fd: int) -> None:
    """Lock the open file ``fd`` (a new temporary archive) for as long as it stays open."""
    if fcntl is not None:
        # Blocking: a cleaner may hold it for a moment, to find it empty and leave it.
        fcntl.flock(fd, fcntl.LOCK_EX)


def hold(directory: Path) -> None:
    """Lock ``directory`` (a new staging or set-aside directory) until :func:`let_go`."""
    if fcntl is None:
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    fcntl.flock(fd, fcntl.LOCK_EX)  # as for lock_open_file: a cleaner holds it only to look
    with _held_mutex:
        old = _held.pop(str(directory), None)
        _held[str(directory)] = fd
    if old is not None:
        os.close(old)


def let_go(directory: Path) -> None:
    """Release the lock :func:`hold` took on ``directory`` (harmless if there is none)."""
    with _held_mutex:
        fd = _held.pop(str(directory), None)
    if fd is not None:
        os.close(fd)


def _unused(path: Path) -> int | None:
    """A descriptor holding the lock on ``path`` if no process holds it (close it), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _remove_unused(path: Path, left_by: str, keep: Callable[[int], bool], remove: Callable[[Path], None]) -> bool:
    """Remove ``path`` with ``remove`` unless a process holds its lock or ``keep`` (given a
    descriptor holding that lock) says to leave it; True if it was removed."""
    fd = _unused(path)
    if fd is None:
        return False
    try:
        if keep(fd):
            return False
        remove(path)
    except OSError as exc:
        log.warning("could not remove %s left by %s: %s", path, left_by, exc)
        return False
    finally:
        os.close(fd)
    log.warning("removed %s left by %s", path, left_by)
    return True


def _remove_archive_tmp(path: Path) -> bool:
    # Not one of ours (or killed before its first byte: empty, harmless): left alone.
    return _remove_unused(path, "an interrupted snapshot",
                          lambda fd: ARCHIVE_MAGIC not in os.pread(fd, _MAGIC_WINDOW, 0), os.unlink)


def remove_abandoned_archives(parent: Path, prefix: str = ".") -> list[Path]:
    """Remove the partial archives interrupted snapshots left in ``parent`` (only names
    starting with ``prefix``); returns what was removed."""
    if fcntl is None:
        return []
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    removed = []
    for name in names:
        if name.startswith(prefix) and _ARCHIVE_TMP.fullmatch(name) and _remove_archive_tmp(parent / name):
            removed.append(parent / name)
    return removed


def _remove_directory(path: Path, *, keep_if_empty: bool) -> bool:
    return _remove_unused(path, "an interrupted restore",
                          lambda fd: keep_if_empty and not os.listdir(path), shutil.rmtree)


def remove_leftovers(data_dir: Path) -> list[Path]:
    """Remove what interrupted snapshots and restores of the tree at ``data_dir`` left beside
    it: partial default archives, staging directories, and set-aside trees once the tree is in
    place. Returns what was removed; anything still in use is left alone."""
    if fcntl is None:
        return []
    home = Path(os.path.abspath(data_dir))
    staging = re.compile(rf"\.{re.escape(home.name)}{re.escape(STAGING_TAG)}(failed-)?[0-9a-f]{{8}}")
    aside = re.compile(rf"\.{re.escape(home.name)}{re.escape(ASIDE_TAG)}[0-9a-f]{{8}}")
    try:
        names = os.listdir(home.parent)
    except OSError:
        return []
    removed = remove_abandoned_archives(home.parent, f".{home.name}-")
    for name in names:
        path = home.parent / name
        if staging.fullmatch(name):
            if _remove_directory(path, keep_if_empty=True):
                removed.append(path)
        elif aside.fullmatch(name):
            if (home / _MANIFEST).exists():
                if _remove_directory(path, keep_if_empty=False):
                    removed.append(path)
            elif _unused_now(path):
                log.warning("%s holds the tree a restore was replacing when it was interrupted, and %s "
                            "is missing: rename it back to %s", path, home, home)
    return removed


def _unused_now(path: Path) -> bool:
    fd = _unused(path)
    if fd is None:
        return False
    os.close(fd)
    return True
