"""Small durable-file primitives shared by the stores."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_directory", "read_after", "read_data", "read_until_nul", "write_all", "write_atomically", "write_new_file"]


def fsync_directory(directory: Path) -> None:
    """Make the creation, rename or removal of entries in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, body: bytes) -> None:
    """Replace ``path`` with ``body``: readers see the old file or the new one, never a mix.

    The caller fsyncs the directory when the rename itself must be durable.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_all(fd: int, data: bytes | memoryview) -> int:
    """Write all of ``data`` at ``fd``'s position (``os.write`` may write less); returns its length."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return len(data)


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist) holding ``data``, synced to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
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
