"""Small durable-file primitives shared by the stores, and the permissions of what they create.

Privacy: every file kwtree creates gets the tree's *file mode* (``0o600`` unless the tree's
manifest records a looser one) and every directory the matching *directory mode* (``0o700``),
set exactly (``fchmod`` after creation), whatever the process's umask. The umask is never
changed: it is process-wide, and changing it from a library would race with the caller's
other threads. Files other libraries write (tantivy, hnswlib) live in directories kwtree
made with the directory mode, so other users cannot reach them whatever their own mode is.
Inside its own directories kwtree gives a new file the mode of the directory that holds it
(its permission bits without the execute bits, see :func:`mode_in`), so a store needs to know
the tree's mode only to make the directories at its top.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "LOW_SPACE_BYTES", "PRIVATE_FILE_MODE", "dir_mode", "fsync_directory", "low_on_space", "make_dir", "mode_in",
    "open_file", "read_after", "read_data", "read_until_nul", "remove_cache_dir", "write_all", "write_atomically",
    "write_new_file",
]

#: Free bytes below which a write that failed without an errno (tantivy and hnswlib report
#: only "an io::Error" or "cannot write") is taken for one that met a full disk: a tantivy
#: commit or an hnswlib save writes up to tens of MB at once.
LOW_SPACE_BYTES = 64 << 20

#: The mode of every file kwtree creates unless the tree records a looser one: the owner's only.
PRIVATE_FILE_MODE = 0o600


def dir_mode(file_mode: int) -> int:
    """The directory mode that goes with ``file_mode``: search permission wherever it grants read."""
    return file_mode | ((file_mode & 0o444) >> 2)


def mode_in(directory: Path | int) -> int:
    """The file mode for a new file in ``directory`` (a path or an open descriptor), one of
    kwtree's own directories: the directory's permission bits without the execute bits.
    A directory that is not kwtree's (its mode has no owner write bit) gives the private mode."""
    found = os.stat(directory).st_mode & 0o777
    mode = found & 0o666
    return mode if mode & PRIVATE_FILE_MODE == PRIVATE_FILE_MODE else PRIVATE_FILE_MODE


def _exact(fd: int, mode: int) -> None:
    """Give the open file ``fd`` exactly ``mode`` (os.open and mkdir let the umask cut bits)."""
    if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
        os.fchmod(fd, mode)


def open_file(path: Path | str, flags: int, mode: int, *, dir_fd: int | None = None) -> int:
    """``os.open`` with ``O_CREAT`` in ``flags``; a file it creates gets exactly ``mode``.

    A file that already existed keeps its mode unless it is ours and looser than ``mode``
    allows (a tree created before files were private): then it is tightened to ``mode``.
    """
    fd = os.open(path, flags | os.O_CREAT, mode, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if (stat.S_IMODE(info.st_mode) != mode and (info.st_size == 0 or info.st_mode & ~mode & 0o077)
                and info.st_uid == os.geteuid()):
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_dir(path: Path, file_mode: int, *, parents: bool = False, exist_ok: bool = False) -> None:
    """``mkdir`` giving ``path`` (and, with ``parents``, each missing parent) exactly the
    directory mode of ``file_mode``; an existing directory keeps its mode."""
    if parents and not path.parent.exists():
        make_dir(path.parent, file_mode, parents=True, exist_ok=True)
    mode = dir_mode(file_mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not exist_ok or not path.is_dir():
            raise
        return
    if stat.S_IMODE(os.stat(path).st_mode) != mode:
        os.chmod(path, mode)


def fsync_directory(directory: Path) -> None:
    """Make the creation, rename or removal of entries in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_cache_dir(directory: Path) -> None:
    """Delete a cache's folder so that a process killed at any moment leaves the cache
    whole or without its ``meta.json``. A cache is known by that file (verify and the
    opening tree take a folder without it for no cache, and rebuild it), so it goes first,
    durably, and the rest after. Errors are ignored: what stays is rebuilt or removed next."""
    with contextlib.suppress(OSError):
        (directory / "meta.json").unlink()
        fsync_directory(directory)
    shutil.rmtree(directory, ignore_errors=True)


#: Numbers the temporary files of this process's ``write_atomically`` calls apart.
_tmp_numbers = itertools.count()
#: The buffer of a streamed ``write_atomically`` body: large, as an export writes many small pieces.
_STREAM_BUFFER = 1 << 20


def write_atomically(
    path: Path, body: bytes | Callable[[BinaryIO], object], mode: int = PRIVATE_FILE_MODE, *,
    sync_directory: bool = False,
) -> None:
    """Replace ``path`` with ``body`` (a file of mode ``mode``, set exactly): readers see the
    old file or the new one, never a mix. This is kwtree's one way to replace a file.

    ``body`` is the bytes, or a function that writes them to a buffered binary file (for
    output streamed as it is made, as an export is). The new file is written beside ``path``
    under a temporary name (``.<name>.<pid>.<n>.tmp``: one per call, so two threads never
    share one; git ignores it) and fsynced before the rename, so the name never points at
    unsynced bytes. The rename itself is durable when the call returns only with
    ``sync_directory`` (the directory is fsynced after it); otherwise it is the caller's to
    make durable, or not (a cache's metadata need not be). If anything fails before the
    rename (a full disk), the old file stays as it was, the temporary file is removed and
    the OSError propagates; an OSError from the directory's fsync comes after the rename.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_tmp_numbers)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)  # (a crashed process of this pid may have left it)
    try:
        try:
            _exact(fd, mode)
            if isinstance(body, bytes):
                write_all(fd, body)
            else:
                with os.fdopen(os.dup(fd), "wb", buffering=_STREAM_BUFFER) as out:
                    body(out)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_directory:
        fsync_directory(path.parent)


def write_all(fd: int, data: bytes | memoryview) -> int:
    """Write all of ``data`` at ``fd``'s position (``os.write`` may write less); returns its length."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return len(data)


def write_new_file(path: Path, data: bytes, mode: int = PRIVATE_FILE_MODE) -> None:
    """Create ``path`` (it must not exist, it gets mode ``mode``) holding ``data``, synced to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        _exact(fd, mode)
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_until_nul(fd: int, offset: int) -> bytes:
    """The bytes of ``fd`` from ``offset`` up to the first NUL byte or the end of the file.

    Log rows never contain NUL (JSON escapes it), so a NUL marks preallocated space.
    """
    return read_data(fd, offset)[0]


def read_data(fd: int, offset: int) -> tuple[bytes, bytes]:
    """``read_until_nul``, and the rest of the last block it read, from the NUL on (b"" when
    the file ended first): what follows the data, for a caller that checks it is padding."""
    parts = []
    size = 1 << 12  # small first: usually nothing new follows, or one operation does
    rest = b""
    while True:
        buf = os.pread(fd, size, offset)
        if not buf:
            break
        nul = buf.find(b"\0")
        if nul >= 0:
            parts.append(buf[:nul])
            rest = buf[nul:]
            break
        parts.append(buf)
        offset += len(buf)
        size = min(size * 4, 1 << 26)
    return (parts[0] if len(parts) == 1 else b"".join(parts)), rest


def read_after(fd: int, offset: int) -> bytes:
    """The bytes of ``fd`` from ``offset`` up to its last non-NUL byte (b"" if only NUL
    bytes follow): data that zero padding or damage hides from ``read_until_nul``."""
    parts = []
    while True:
        buf = os.pread(fd, 1 << 20, offset)
        if not buf:
            break
        parts.append(buf)
        offset += len(buf)
    return b"".join(parts).rstrip(b"\0")


def low_on_space(path: Path) -> bool:
    """Whether the file system holding ``path`` (or its nearest existing parent) has less
    than ``LOW_SPACE_BYTES`` free for this user (False if that cannot be told)."""
    for candidate in (path, *path.parents):
        try:
            st = os.statvfs(candidate)
        except FileNotFoundError:
            continue
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < LOW_SPACE_BYTES
    return False
