"""The event log on disk: segment files under ``<dir>/log/``, read from a position and
appended to durably.

Segments are named ``<first op id>.jsonl`` and only the newest one is written to. A segment
is sealed (trimmed and never written again) once its data reaches ``segment_bytes``; every
writer of a directory uses the manifest's value, so a reader knows that a segment shorter
than that is still the newest one and lists the directory only when it is not.

Durable appends write into space that was zero-filled ahead of time and then ``fdatasync``:
overwriting allocated blocks does not change the file's size, so the sync does not have to
commit metadata (about 20–30 µs less per write here). Data therefore ends at the first NUL
byte (JSON rows never contain one). The padding is trimmed when a segment is sealed and when
a writer closes, so it never reaches git, snapshots or exports; a crash can leave padding,
which readers treat as the end of the log and the next writer reuses.

A NUL byte can also be damage (a zeroed disk block, a flipped byte) hiding whole operations
after it, so only padding may follow the first NUL: ``hidden_bytes`` returns what else does.
Before every write that check is cheap — the bytes that came with the last read (4 KiB),
and the file size, which a preallocating writer keeps at most ``PREALLOCATE_BYTES`` past the
data — and it reads the whole rest of the segment at open, in sealed segments and after a
partial operation. The follower decides whether hidden bytes are a torn tail or damage.

In format 2 (``checksums``) every appended operation gets a checksum in its end marker,
and sealing ends a segment with a **seal line**, ``{"seal":{"next":<next segment>,"bytes":
<data bytes before it>,"crc":<their CRC-32>}}``, written once the first operation of the
next segment is durable (a crash in between leaves a full segment without a seal, which
``verify`` reports as a warning). A seal is not an operation: readers leave seal lines out
of the data they return, and ``verify`` checks that the named successor exists (else a
segment is missing, the newest one included) and that the sealed bytes are unchanged.

Appends, sealing, trimming and quarantining happen only under the writer lock, which the
caller holds; reads never lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import orjson

from kwtree.engine.events import is_op_id, with_checksum
from kwtree.errors import FormatError, storage_error
from kwtree.stores.files import (
    PRIVATE_FILE_MODE,
    fsync_directory,
    make_dir,
    mode_in,
    open_file,
    read_after,
    read_data,
    read_until_nul,
)
from kwtree.stores.manifest import Manifest

__all__ = ["LOG_DIR", "QUARANTINE_DIR", "SEAL_PREFIX", "EventLog", "Pending", "encode_seal", "seals_start"]

log = logging.getLogger("kwtree.log")

LOG_DIR = "log"
QUARANTINE_DIR = "quarantine"
SEGMENT_SUFFIX = ".jsonl"
PREALLOCATE_BYTES = 1 << 20
_ZEROS = bytes(PREALLOCATE_BYTES)


SEAL_PREFIX = b'{"seal":'


def seals_start(data: bytes) -> int:
    """Where the seal lines at the end of ``data`` begin (``len(data)`` when there are none).
    A partial last line that starts like a seal counts: it is a seal being written."""
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        if not data.startswith(SEAL_PREFIX, start):
            break
        end = start
    return end


def encode_seal(data: bytes, next_segment: str) -> bytes:
    """The seal line of a segment holding ``data`` (seal lines excluded) whose successor is
    ``next_segment``."""
    body = orjson.dumps({"seal": {"next": next_segment, "bytes": len(data), "crc": zlib.crc32(data)}})
    return body + b"\n"


def segment_names(log_dir: Path | int) -> list[str]:
    """The segment names (first op ids) in ``log_dir`` (a path or an open descriptor), oldest first."""
    try:
        entries = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    names = [e[: -len(SEGMENT_SUFFIX)] for e in entries if e.endswith(SEGMENT_SUFFIX)]
    return sorted(n for n in names if is_op_id(n))


@dataclass(frozen=True, slots=True)
class Pending:
    """Unconsumed bytes of one segment, starting at a whole line."""

    path: str
    first_line: int
    data: bytes


class EventLog:
    """Reads and appends the segments of one data directory.

    The read position (segment, byte offset, line number) always sits just after the last
    whole operation the caller consumed. ``writable`` trees open segments read-write.
    """

    def __init__(
        self, directory: Path, segment_bytes: int, *, writable: bool, preallocate: bool, checksums: bool,
        chained: bool = False,
    ) -> None:
        self.log_dir = directory / LOG_DIR
        self.quarantine_dir = directory / QUARANTINE_DIR
        self.segment_bytes = segment_bytes
        # Format 2 (the manifest's ``checksums``): checksums in end markers, seal lines. No
        # default: every writer must write the directory's own format.
        self.checksums = checksums
        self.chained = chained  # format 3: the engine names each operation's predecessor in it
        self.writable = writable
        self.preallocate = preallocate and writable
        # Segments are opened relative to this descriptor of the log directory, so a reader
        # keeps reading one generation of the log even while compaction swaps in the next;
        # holding it also keeps the directory's inode number from being reused, which is
        # how ``rewritten`` tells a new generation from the one it holds.
        self._dir_fd = -1
        self._dir_ino = -1
        self._attach()
        self._segments = segment_names(self._dir_fd)
        self._index = 0
        self._offset = 0
        self._line = 1
        self._data_end = 0  # end of the bytes last read from the current segment
        self._rest = b""  # what the last read found after them, from the NUL on
        self._seal_bytes = 0  # seal lines right after them
        self._seals = b""  # (their bytes)
        self._hidden = 0  # non-padding bytes found after that NUL (a torn tail: see hidden_bytes)
        self._fd = -1
        self._fd_name = ""  # the segment ``_fd`` has open (by name: a new listing may move its index)
        self._fd_ino = 0  # the inode of that segment's file
        self._path_str: str | None = None
        self._path_name = ""
        # Size of the newest segment as last seen. Only a hint: a stale value costs a sync
        # that also commits the file size, never correctness (data always goes at the end
        # of what was caught up to, and nothing live lies beyond it).
        self._allocated = 0

    def _attach(self) -> None:
        if self.writable:
            make_dir(self.log_dir, PRIVATE_FILE_MODE, exist_ok=True)  # the tree makes it first, with its mode
        try:
            fd = os.open(self.log_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except FileNotFoundError:
            raise FormatError(f"{self.log_dir.parent} has no {LOG_DIR}/ directory: "
                              "it is not a whole kwtree directory") from None
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
        self._dir_fd, self._dir_ino = fd, os.fstat(fd).st_ino

    def rewritten(self) -> bool:
        """True when the log is no longer the one this log was reading, and the caller must
        ``reattach`` and replay from the start: ``log/`` was replaced (compaction, a restore),
        or the segment it holds open was (a git merge, pull or checkout, rsync or a sync tool
        renamed another file over it: reading or appending on would use a file no one else
        sees)."""
        try:
            if os.stat(self.log_dir).st_ino != self._dir_ino:
                return True
            if self._fd < 0:
                return False
            return os.stat(self._fd_name + SEGMENT_SUFFIX, dir_fd=self._dir_fd).st_ino != self._fd_ino
        except FileNotFoundError:
            return True

    def reattach(self) -> None:
        """Read the current ``log/`` directory from its start (after ``rewritten``), in the
        format the manifest names now (``kwtree upgrade`` replaces the log too)."""
        self._close_fd()
        self._attach()
        with contextlib.suppress(FormatError):  # the directory is being replaced: the next look decides
            manifest = Manifest.load(self.log_dir.parent)
            self.checksums, self.chained = manifest.checksums, manifest.chained
        self._allocated = 0
        self.rewind()

    @property
    def generation(self) -> int:
        """Which ``log/`` directory this log reads (its inode number; held open, so it is
        not reused while this log reads it): a replaced log has another."""
        return self._dir_ino

    def seek(self, segment: str | None, offset: int, line: int) -> None:
        """Put the read position at a ``position`` this log gave earlier (in this generation:
        just after a whole operation). Raises FileNotFoundError if its segment is gone."""
        self._segments = segment_names(self._dir_fd)
        if segment is None:
            self.rewind()
            return
        if segment not in self._segments:
            raise FileNotFoundError(f"log segment {segment}{SEGMENT_SUFFIX} is not in {self.log_dir}")
        self._index = self._segments.index(segment)
        self._offset = self._data_end = offset
        self._line = line
        self._rest, self._hidden, self._seal_bytes = b"", 0, 0

    def seek_end(self) -> None:
        """Put the read position at the end of the newest segment, for a caller that has
        applied the whole log (it has just written it)."""
        self._segments = segment_names(self._dir_fd)
        self._index = len(self._segments) - 1
        data = read_until_nul(self._descriptor(), 0) if self._segments else b""
        self._offset = self._data_end = seals_start(data)
        self._rest, self._hidden, self._seal_bytes = b"", 0, 0
        self._line = data.count(b"\n") + 1

    # --- position and reading --------------------------------------------------------------

    @property
    def segments(self) -> list[str]:
        return list(self._segments)

    def _path(self, index: int) -> Path:
        return self.log_dir / (self._segments[index] + SEGMENT_SUFFIX)

    def _path_text(self) -> str:
        """The current segment's path as text (cached: it is asked for on every write)."""
        if self._path_name != self._segments[self._index] or self._path_str is None:
            self._path_str = str(self._path(self._index))
            self._path_name = self._segments[self._index]
        return self._path_str

    def _descriptor(self) -> int:
        if self._fd_name != self._segments[self._index]:
            self._close_fd()
            flags = os.O_RDWR if self.writable else os.O_RDONLY
            self._fd = os.open(self._segments[self._index] + SEGMENT_SUFFIX, flags, dir_fd=self._dir_fd)
            self._fd_name, self._fd_ino = self._segments[self._index], os.fstat(self._fd).st_ino
        return self._fd

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._fd_name = -1, ""

    def read_pending(self) -> Pending | None:
        """The bytes of the current segment after the read position (None if no segment)."""
        if not self._segments:
            self._segments = segment_names(self._dir_fd)  # another process may have started the log
            if not self._segments:
                return None
        data, self._rest = read_data(self._descriptor(), self._offset)
        cut = seals_start(data) if data else 0
        self._seal_bytes = len(data) - cut
        if self._seal_bytes:
            data, self._seals = data[:cut], data[cut:]
        self._data_end = self._offset + len(data)
        self._hidden = 0
        return Pending(self._path_text(), self._line, data)

    def clean_end(self) -> bool:
        """True in the common case before a write: the last read was consumed whole and only
        zero padding (by the cheap test of ``hidden_bytes``) or nothing follows it."""
        if self._data_end != self._offset or self._seal_bytes:
            return False
        rest = self._rest
        if not rest:
            return True
        return (self._index == len(self._segments) - 1 and _ZEROS.startswith(rest)
                and self._allocated - PREALLOCATE_BYTES <= self._data_end)

    def hidden_bytes(self, *, thorough: bool) -> bytes:
        """The bytes after the NUL that ended the last read, up to the segment's last non-NUL
        byte: b"" when only zero padding follows the data (or nothing does). Counted in
        ``unconsumed_bytes`` until the next read (a writer quarantines them with the rest
        of a torn tail).

        Not ``thorough``: only what the last read brought and the file size are looked at.
        ``clean_end`` is that check before every write, with the size this writer last gave
        or saw the file instead of an ``fstat`` (which cost 7 µs a write here). A reader
        racing a writer may glimpse a later block of a write before an earlier one; the data
        is read again to tell that from damage.
        """
        rest = self._rest
        if not rest:
            return b""
        fd = self._descriptor()
        size = max(self._allocated, os.fstat(fd).st_size)
        if not thorough and _ZEROS.startswith(rest) and size - PREALLOCATE_BYTES <= self._data_end:
            return b""
        hidden = read_after(fd, self._data_end + self._seal_bytes)
        if hidden and self._offset + len(read_until_nul(fd, self._offset)) != self._data_end + self._seal_bytes:
            return b""  # a write in progress moved the end of the data: read it next time
        self._hidden = len(hidden)
        return hidden

    def advance(self, nbytes: int, nlines: int) -> None:
        """Move the read position past ``nbytes`` (``nlines`` lines) of consumed operations."""
        self._offset += nbytes
        self._line += nlines

    def rewind(self) -> None:
        """Move the read position back to the start of the oldest segment."""
        self._segments = segment_names(self._dir_fd)
        self._index, self._offset, self._line, self._data_end = 0, 0, 1, 0
        self._rest, self._hidden, self._seal_bytes = b"", 0, 0

    def missing_successors(self) -> list[str]:
        """The segments that the seal lines found by the last read name as successors but
        the log directory lacks (operations lost with them)."""
        if not self._seal_bytes:
            return []
        named = []
        for line in self._seals.split(b"\n")[:-1]:
            try:
                named.append(orjson.loads(line)["seal"]["next"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue  # an unreadable seal: verify reports it
        if any(name not in self._segments for name in named):
            self._segments = segment_names(self._dir_fd)  # it may have been created since the listing
        return [name for name in named if name not in self._segments]

    @property
    def on_last_segment(self) -> bool:
        return self._index >= len(self._segments) - 1

    def read_segment(self, index: int) -> tuple[str, bytes]:
        """(path, data) of a whole segment, padding and seal lines excluded."""
        path = self._path(index)
        fd = os.open(self._segments[index] + SEGMENT_SUFFIX, os.O_RDONLY, dir_fd=self._dir_fd)
        try:
            data = read_until_nul(fd, 0)
        finally:
            os.close(fd)
        return str(path), data[:seals_start(data)]

    @property
    def unconsumed_bytes(self) -> int:
        """Bytes after the position in the current segment at the last read, with those
        ``hidden_bytes`` found (a torn or in-progress operation when non-zero)."""
        return self._data_end - self._offset + self._hidden

    def next_segment(self) -> bool:
        """Move to the next segment if there is one; the current one must be fully consumed.

        Returns False when the current segment is the newest.
        """
        if self._index == len(self._segments) - 1 and self._offset >= self.segment_bytes:
            self._segments = segment_names(self._dir_fd)  # it may have been sealed meanwhile
        if self._index >= len(self._segments) - 1:
            return False
        self._index += 1
        self._offset, self._line, self._data_end = 0, 1, 0
        self._rest, self._hidden, self._seal_bytes = b"", 0, 0
        return True

    @property
    def position(self) -> tuple[str | None, int, int]:
        """(current segment name, byte offset and line number of the read position)."""
        return (self._segments[self._index] if self._segments else None, self._offset, self._line)

    def size_bytes(self) -> int:
        """Bytes of log data (padding excluded; the newest segment up to its read data)."""
        total = 0
        for index in range(len(self._segments) - 1):
            total += self._size(index)
        if self._segments:
            total += self._data_end if self._index == len(self._segments) - 1 else self._size(-1)
        return total

    def _size(self, index: int) -> int:
        return os.stat(self._segments[index] + SEGMENT_SUFFIX, dir_fd=self._dir_fd).st_size

    # --- writing (caller holds the writer lock and has consumed every whole operation) -----

    def append(self, data: bytes, first_op_id: str, *, sync: bool) -> None:
        """Append the rows of one operation at the read position and advance past them.

        Raises StorageError (DiskFullError when the disk is full), with nothing committed, if
        the write or the sync fails.
        """
        if self.unconsumed_bytes:
            self.quarantine_tail()
        if self.checksums:
            data = with_checksum(data)
        sealing = -1
        if not self._segments or self._offset >= self.segment_bytes:
            sealing = self._index if self._segments else -1
            try:
                self._start_segment(first_op_id, sync=sync)
            except OSError as exc:
                raise storage_error(f"could not start a new log segment in {self.log_dir}", exc, self.log_dir) from exc
        fd = self._descriptor()
        pos = self._offset
        end = pos + len(data)
        try:
            if self.preallocate and end > self._allocated:
                self._allocated = os.fstat(fd).st_size  # another writer may have padded it
            if self.preallocate and end > self._allocated:
                # Write the data and fresh zero padding in one call; the sync below makes
                # both (and the new size) durable, and later small writes land in the padding.
                written = os.pwritev(fd, [data, _ZEROS], pos)
                self._allocated = end + len(_ZEROS)
            else:
                written = os.pwrite(fd, data, pos)
            while written < len(data):
                # A regular file takes less only when the disk is full: writing the rest
                # raises the OSError that says so (ENOSPC), for the message below.
                written += os.pwrite(fd, memoryview(data)[written:], pos + written)
            if sync:
                os.fdatasync(fd)
        except OSError as exc:
            self._discard_from(pos)
            raise storage_error(f"could not append to {self._path(self._index)}", exc, self._path(self._index)) from exc
        self._offset = self._data_end = pos + len(data)
        self._line += data.count(b"\n")
        if sealing >= 0 and self.checksums:
            self._seal(sealing, first_op_id, sync=sync)

    def _seal(self, index: int, next_segment: str, *, sync: bool) -> None:
        """End segment ``index`` with its seal line, after the first operation of its successor
        is durable. That operation is acknowledged already, so a failure is only logged: the
        segment stays unsealed (a warning in verify)."""
        name = self._segments[index] + SEGMENT_SUFFIX
        try:
            fd = os.open(name, os.O_RDWR, dir_fd=self._dir_fd)
            try:
                data = read_until_nul(fd, 0)
                data = data[:seals_start(data)]
                seal = encode_seal(data, next_segment)
                if os.pwrite(fd, seal, len(data)) != len(seal):
                    raise OSError("short write")
                os.ftruncate(fd, len(data) + len(seal))
                if sync:
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("could not seal %s (its successor %s is written): %s", self.log_dir / name, next_segment, exc)

    def _discard_from(self, pos: int) -> None:
        """Best effort after a failed append: drop what it may have written."""
        self._allocated = pos
        try:
            os.ftruncate(self._fd, pos)
            os.fsync(self._fd)
        except OSError:
            log.exception("could not truncate %s back to %d after a failed write", self._path(self._index), pos)

    def _start_segment(self, name: str, *, sync: bool) -> None:
        if self._segments:
            self._trim(self._descriptor(), self._offset)
        fd = open_file(name + SEGMENT_SUFFIX, os.O_RDWR | os.O_EXCL, mode_in(self._dir_fd), dir_fd=self._dir_fd)
        os.close(fd)
        if sync:
            os.fsync(self._dir_fd)
        self._segments.append(name)
        self._index = len(self._segments) - 1
        self._offset, self._line, self._data_end = 0, 1, 0
        self._rest, self._hidden, self._seal_bytes = b"", 0, 0
        self._allocated = 0

    def quarantine_tail(self) -> None:
        """Move the bytes after the read position of the newest segment (a torn operation
        left by a writer that died) to ``quarantine/`` and cut them from the segment."""
        fd = self._descriptor()
        size = os.fstat(fd).st_size
        tail = os.pread(fd, size - self._offset, self._offset).rstrip(b"\0")
        if tail:
            make_dir(self.quarantine_dir, mode_in(self._dir_fd), exist_ok=True)
            target = self.quarantine_dir / f"{self._segments[self._index]}.{self._offset}.torn"
            with open(open_file(target, os.O_WRONLY | os.O_TRUNC, mode_in(self._dir_fd)), "wb") as out:
                out.write(tail)
                out.flush()
                os.fsync(out.fileno())
            fsync_directory(self.quarantine_dir)
            log.warning(
                "moved a torn operation (%d bytes at %s:%d) to %s",
                len(tail), self._path(self._index), self._line, target,
            )
        os.ftruncate(fd, self._offset)
        os.fsync(fd)
        self._data_end = self._offset
        self._rest, self._hidden, self._seal_bytes = b"", 0, 0
        self._allocated = self._offset

    def _trim(self, fd: int, data_end: int) -> None:
        """Cut zero padding after ``data_end`` (and nothing else)."""
        size = os.fstat(fd).st_size
        if size > data_end and not os.pread(fd, size - data_end, data_end).strip(b"\0"):
            os.ftruncate(fd, data_end)
            os.fsync(fd)
            self._allocated = min(self._allocated, data_end)

    def trim_padding(self) -> None:
        """Remove the preallocated padding of the newest segment (call under the writer lock)."""
        if not self._segments or not self.writable:
            return
        index = len(self._segments) - 1
        if self._index != index:
            return
        fd = self._descriptor()
        end = self._offset + len(read_until_nul(fd, self._offset))
        self._trim(fd, end)

    def close(self) -> None:
        self._close_fd()
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1
