"""Replacing a directory's whole event log at once (compaction): the new log is written
beside the old one and swapped in with one atomic step, so a crash at any moment leaves
either the old log or the new one under ``log/``, never a mix.

Protocol (every step under the writer lock):

1. ``new_log_dir`` empties ``log.compacting/``; the caller writes the new segments there with
   ``write_segment`` and calls ``seal`` (files and directory fsynced). These three raise
   StorageError (DiskFullError when the disk is full) for an OSError: the caller removes
   ``log.compacting/``, and the old log was never touched.
2. ``swap_in`` exchanges ``log.compacting/`` and ``log/`` in one ``renameat2(RENAME_EXCHANGE)``
   where the OS has it (Linux). Elsewhere it renames ``log.compacting/`` to ``log.compacted/``
   (the commit point), ``log/`` to ``log.old/`` and ``log.compacted/`` to ``log/``.
3. The old log, now ``log.compacting/`` or ``log.old/``, is removed.

``recover`` (run by a writer before it reads the log) finishes what a crash interrupted: a
``log.compacted/`` is committed and goes into place; ``log.compacting/`` and ``log.old/``
are leftovers and go. Readers hold a descriptor of the ``log/`` directory they read, so a
swap never mixes generations under them; they notice it and replay the new log.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import sys
from pathlib import Path

from kwtree.errors import StorageError, storage_error
from kwtree.stores.eventlog import LOG_DIR, SEGMENT_SUFFIX
from kwtree.stores.files import (
    PRIVATE_FILE_MODE,
    fsync_directory,
    make_dir,
    mode_in,
    write_new_file,
)

__all__ = [
    "COMPACTED_DIR", "COMPACTING_DIR", "OLD_LOG_DIR", "interrupted", "new_log_dir", "recover", "seal", "swap_in",
    "write_segment",
]

log = logging.getLogger("kwtree.log")

COMPACTING_DIR = "log.compacting"
COMPACTED_DIR = "log.compacted"
OLD_LOG_DIR = "log.old"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _remove(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)


def _refused(target: Path, exc: OSError) -> StorageError:
    """The error for a write of the new log into ``target`` that the system refused."""
    return storage_error(f"could not write the new log of {target.parent} (in {target.name}/; the log in use is "
                         "unchanged)", exc, target)


def new_log_dir(directory: Path) -> Path:
    """An empty ``log.compacting/`` to write a new log into (a leftover one is removed),
    with the mode of the current ``log/``."""
    target = directory / COMPACTING_DIR
    _remove(target)
    current = directory / LOG_DIR
    try:
        make_dir(target, mode_in(current) if current.is_dir() else PRIVATE_FILE_MODE)
    except OSError as exc:
        raise _refused(target, exc) from exc
    return target


def write_segment(target: Path, first_op_id: str, data: bytes) -> None:
    """Write one whole segment of the new log and fsync it."""
    try:
        write_new_file(target / (first_op_id + SEGMENT_SUFFIX), data, mode_in(target))
    except OSError as exc:
        raise _refused(target, exc) from exc


def seal(target: Path) -> None:
    """Make the new log's directory entries durable."""
    try:
        fsync_directory(target)
    except OSError as exc:
        raise _refused(target, exc) from exc


def _exchange(first: Path, second: Path) -> bool:
    """Atomically exchange two directories; False when the OS or file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(first))


def swap_in(directory: Path, *, exchange: bool = True) -> None:
    """Make ``log.compacting/`` the directory's log in one atomic step and remove the old log.

    ``exchange=False`` forces the portable three-rename path (for tests).
    """
    new, current = directory / COMPACTING_DIR, directory / LOG_DIR
    if exchange and _exchange(new, current):
        fsync_directory(directory)
        _remove(new)  # it holds the old log now
        return
    committed = directory / COMPACTED_DIR
    os.rename(new, committed)
    fsync_directory(directory)  # the commit point: recover() finishes from here
    _finish(directory)


def _finish(directory: Path) -> None:
    committed, current, old = directory / COMPACTED_DIR, directory / LOG_DIR, directory / OLD_LOG_DIR
    if current.exists():
        _remove(old)
        os.rename(current, old)
    os.rename(committed, current)
    fsync_directory(directory)
    _remove(old)


def recover(directory: Path) -> bool:
    """Finish or discard a log swap a crash interrupted; True if there was one."""
    committed = directory / COMPACTED_DIR
    found = False
    if committed.exists():
        log.warning("finishing an interrupted compaction of %s: the new log is complete", directory)
        _finish(directory)
        found = True
    for leftover in (COMPACTING_DIR, OLD_LOG_DIR):
        if (directory / leftover).exists():
            log.warning("removing %s left by an interrupted compaction", directory / leftover)
            _remove(directory / leftover)
            found = True
    return found


def interrupted(directory: Path) -> bool:
    """True if a log swap left something for ``recover`` to do."""
    return any((directory / name).exists() for name in (COMPACTED_DIR, COMPACTING_DIR, OLD_LOG_DIR))
