"""Snapshots: one archive file holding a consistent cut of a tree's log, and restoring one.

The archive's format (a plain tar: a header member, the manifest, the log segments) is
described, and an archive is read and checked, in :mod:`kwtree.stores.archive`. Caches
(``cache/``, ``outbox.jsonl``), the lock file and ``quarantine/`` are not archived: a
restored tree rebuilds its caches from the log, as after deleting them.

Writing. The caller fixes the cut under its locks and opens the segment files
(:func:`capture`). Bytes before the cut never change afterwards (the log is append-only;
trimming and quarantining cut only after the last whole operation), and an open descriptor
keeps reading the same file even if it is renamed away, so the copy itself runs without the
locks: writers wait only while the cut is taken. Each member is hashed while it streams into
the archive; the first member is written with placeholder digests of the final length and
overwritten in place at the end. The archive is built in a temporary file, synced, and
linked to its name, which never overwrites an existing file.

Restoring (orchestrated by :mod:`kwtree.ops.restore`). :func:`stage` streams the archive into a
new hidden directory beside the target (:func:`kwtree.stores.archive.extract` checks every
member, size and digest); the target is not touched before all of that passed. :func:`swap_in`
then puts the staged directory in place by renames, keeping the old one aside until the caller
has opened the new one; :func:`swap_back` undoes that.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kwtree.errors import (
    FormatError,
    InvalidInputError,
    StorageError,
    storage_error,
)
from kwtree.progress import ProgressCallback
from kwtree.stores import leftovers
from kwtree.stores.archive import (
    CHUNK,
    COUNT_KEYS,
    SNAPSHOT_FORMAT,
    SNAPSHOT_KIND,
    SNAPSHOT_MANIFEST,
    archive_path,
    extract,
)
from kwtree.stores.directory import KWTREE_ENTRIES
from kwtree.stores.eventlog import LOG_DIR, SEGMENT_SUFFIX
from kwtree.stores.files import (
    PRIVATE_FILE_MODE,
    dir_mode,
    fsync_directory,
    open_file,
    read_until_nul,
    write_all,
)
from kwtree.stores.leftovers import ASIDE_TAG, STAGING_TAG
from kwtree.stores.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
)
from kwtree.validate import check_parent, clean_path

__all__ = [
    "SNAPSHOT_SUFFIX",
    "Capture",
    "capture",
    "clean_target",
    "discard",
    "stage",
    "summary",
    "swap_back",
    "swap_in",
    "target_replaces",
]

log = logging.getLogger("kwtree.snapshot")

SNAPSHOT_SUFFIX = ".kwsnap"
#: What a DiskFullError of a snapshot suggests besides freeing space.
_ELSEWHERE = "pass a path on another disk"
_PLACEHOLDER = "0" * 64


# --- taking a snapshot --------------------------------------------------------------------------


def clean_target(directory: Path, path: object) -> Path | None:
    """The archive path asked for (None: the default, decided once the watermark is known).

    Raises InvalidInputError if it is not a path, already exists, or lies inside the tree's
    directory (a restore replaces that directory, and a backup must not live in what it backs
    up) or a part of its path is a file, and NotFoundError if its directory does not exist.
    """
    if path is None:
        return None
    target = Path(os.path.abspath(clean_path(path, "path")))
    home, where = directory.resolve(), target.parent.resolve()
    if home == where or home in where.parents:
        raise InvalidInputError(
            f"{target} is inside the tree's directory {directory}: write snapshots outside it "
            f"(a restore replaces that directory); the default is beside it"
        )
    if os.path.lexists(target):
        raise InvalidInputError(f"{target} already exists: a snapshot never overwrites a file; "
                                "delete it or pass another path")
    check_parent(target, f"cannot write the snapshot {target}")
    return target


def _default_target(directory: Path, last_op_id: str | None) -> Path:
    home = directory.resolve()
    target = home.parent / f"{home.name}-{last_op_id or 'empty'}{SNAPSHOT_SUFFIX}"
    if os.path.lexists(target):
        raise InvalidInputError(
            f"{target} already exists (a snapshot of the same last operation): use it, delete it, or pass a path"
        )
    return target


#: For a view of the past: a segment's bytes and its member name -> the lines of the
#: operations the view shows (``kwtree.engine.replay.operations_in_view`` with the view's bound).
InView = Callable[[bytes, str], bytes]


@dataclass(frozen=True, slots=True)
class _Segment:
    name: str  # the member name, log/<op id>.jsonl
    fd: int
    length: int  # bytes of whole operations to archive


class Capture:
    """A cut of a tree's files, held open: the manifest's bytes and, per segment, a descriptor
    and how many bytes belong to the cut. Close it (it is a context manager)."""

    def __init__(self, directory: Path, manifest: bytes, segments: list[_Segment], in_view: InView | None) -> None:
        self.directory = directory
        self.manifest = manifest
        self.segments = segments
        self.in_view = in_view

    def close(self) -> None:
        for segment in self.segments:
            os.close(segment.fd)
        self.segments = []

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, target: Path | None, facts: Mapping[str, Any], file_mode: int = PRIVATE_FILE_MODE) -> Path:
        """Write the archive of the cut, whose state ``facts_of`` described, to ``target`` (or
        the default path), a file of mode ``file_mode`` (the tree's); returns where it went.
        Durable when it returns (the file and its directory entry are synced). Partial
        archives that interrupted snapshots left in the target's directory are removed first."""
        target = target or _default_target(self.directory, facts["last_op_id"])
        leftovers.remove_abandoned_archives(target.parent)
        sources: list[tuple[str, bytes | _Segment]] = [(MANIFEST_NAME, self.manifest)]
        for segment in self.segments:
            if self.in_view is None:
                sources.append((segment.name, segment))
            else:  # a view of the past: only the operations it reflects
                kept = self.in_view(_read_exactly(segment), segment.name)
                if kept:
                    sources.append((segment.name, kept))
        header = {
            "kind": SNAPSHOT_KIND,
            "format": SNAPSHOT_FORMAT,
            "tree_format": orjson.loads(self.manifest).get("format", FORMAT_VERSION),
            "created_at": time.time(),
            "source": str(self.directory.resolve()),
            **facts,
            "members": [
                {"name": name, "size": len(src) if isinstance(src, bytes) else src.length, "sha256": _PLACEHOLDER}
                for name, src in sources
            ],
        }
        placeholder = _encode(header)
        tmp = leftovers.archive_tmp_name(target)
        try:
            out = open_file(tmp, os.O_WRONLY | os.O_EXCL, file_mode)
        except OSError as exc:
            raise storage_error(f"cannot create the snapshot {target}", exc, target, instead=_ELSEWHERE) from exc
        try:
            # Locked until it is closed, after its name is given and the temporary one gone:
            # a cleaner removes only partial archives nobody holds (see leftovers).
            leftovers.lock_open_file(out)
            mtime = int(header["created_at"])
            offset = write_all(out, _tar_header(SNAPSHOT_MANIFEST, len(placeholder), mtime))
            data_offset = offset
            offset += write_all(out, placeholder + _padding(len(placeholder)))
            for entry, (name, src) in zip(header["members"], sources, strict=True):
                offset += write_all(out, _tar_header(name, entry["size"], mtime))
                entry["sha256"] = _stream(src, out) if isinstance(src, _Segment) else _write_hashed(out, src)
                offset += entry["size"] + write_all(out, _padding(entry["size"]))
            end = offset + 2 * tarfile.BLOCKSIZE
            write_all(out, bytes(2 * tarfile.BLOCKSIZE + (-end) % tarfile.RECORDSIZE))
            final = _encode(header)
            assert len(final) == len(placeholder)  # digests are fixed-width: nothing moves
            os.pwrite(out, final, data_offset)
            os.fsync(out)
            _publish(tmp, target)
        except OSError as exc:  # (the partial archive goes below)
            raise storage_error(f"could not write the snapshot {target}", exc, target, instead=_ELSEWHERE) from exc
        finally:
            _unlink(tmp)
            os.close(out)
        fsync_directory(target.parent)
        return target


def capture(directory: Path, segments: Sequence[str], position: tuple[str | None, int, int],
            in_view: InView | None, rewritten: Callable[[], bool]) -> Capture:
    """Fix the cut: the manifest's bytes, and open descriptors on every segment up to the one
    at ``position`` (an ``EventLog.position`` just after the last whole operation the tree
    applied), which is cut there. Call it under the locks that keep that position valid.

    ``in_view`` (for a view of the past) keeps only the operations the view shows; None
    archives the segments as they are. ``rewritten`` is the reading EventLog's check that
    ``log/`` is still the directory it read; it is asked after ``log/`` is opened here, so a
    compaction that swapped the log before that is noticed (StorageError) and one after it
    does not matter.
    """
    try:
        manifest = (directory / MANIFEST_NAME).read_bytes()
    except OSError as exc:
        raise StorageError(f"cannot read {directory / MANIFEST_NAME}: {exc}") from exc
    current, offset, _ = position
    if current is None:
        return Capture(directory, manifest, [], in_view)
    try:
        log_fd = os.open(directory / LOG_DIR, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise StorageError(f"cannot open the log directory of {directory}: {exc}") from exc
    opened: list[_Segment] = []
    try:
        if rewritten():
            raise StorageError(
                f"the log of {directory} was replaced (compacted or restored) since this tree read it: "
                f"refresh() it, or reopen an as_of view, and take the snapshot again"
            )
        for name in segments[: list(segments).index(current) + 1]:
            try:
                fd = os.open(f"{name}{SEGMENT_SUFFIX}", os.O_RDONLY, dir_fd=log_fd)
            except FileNotFoundError:
                raise StorageError(
                    f"log segment {name}{SEGMENT_SUFFIX} of {directory} vanished (a compaction by another "
                    f"process?): refresh() the tree and take the snapshot again"
                ) from None
            member = f"{LOG_DIR}/{name}{SEGMENT_SUFFIX}"
            opened.append(_Segment(member, fd, offset if name == current else _data_length(fd)))
    except BaseException:
        for segment in opened:
            os.close(segment.fd)
        raise
    finally:
        os.close(log_fd)
    return Capture(directory, manifest, opened, in_view)


def _publish(tmp: Path, target: Path) -> None:
    """Give the finished archive its name, never replacing a file that appeared meanwhile."""
    try:
        os.link(tmp, target)
        return
    except FileExistsError:
        raise InvalidInputError(f"{target} appeared while the snapshot was written; pass another path") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise StorageError(f"could not name the snapshot {target}: {exc}") from exc
    # A file system without hard links: a rename, after a last look (a small race remains).
    if os.path.lexists(target):
        raise InvalidInputError(f"{target} appeared while the snapshot was written; pass another path")
    try:
        os.rename(tmp, target)
    except OSError as exc:
        raise StorageError(f"could not name the snapshot {target}: {exc}") from exc


def _data_length(fd: int) -> int:
    """Bytes of a whole (sealed) segment before any zero padding."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) != b"\0":
        return size
    return len(read_until_nul(fd, 0))


def _read_exactly(segment: _Segment) -> bytes:
    data = os.pread(segment.fd, segment.length, 0)
    if len(data) != segment.length:
        raise StorageError(f"log segment {segment.name} shrank while a snapshot was taken; retry the snapshot")
    return data


def _encode(header: Mapping[str, Any]) -> bytes:
    return orjson.dumps(header, option=orjson.OPT_INDENT_2) + b"\n"


def _tar_header(name: str, size: int, mtime: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.type = size, mtime, PRIVATE_FILE_MODE, tarfile.REGTYPE
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")


def _padding(size: int) -> bytes:
    return bytes(-size % tarfile.BLOCKSIZE)


def _write_hashed(out: int, data: bytes) -> str:
    write_all(out, data)
    return hashlib.sha256(data).hexdigest()


def _stream(segment: _Segment, out: int) -> str:
    """Copy a segment's cut into ``out``, hashing it on the way; returns the hex digest."""
    digest = hashlib.sha256()
    done = 0
    while done < segment.length:
        chunk = os.pread(segment.fd, min(CHUNK, segment.length - done), done)
        if not chunk:
            raise StorageError(f"log segment {segment.name} shrank while a snapshot was taken; retry the snapshot")
        digest.update(chunk)
        write_all(out, chunk)
        done += len(chunk)
    return digest.hexdigest()


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# --- restoring: staging and checking the archive's log -------------------------------------------


def stage(snapshot: object, data_dir: Path, progress: ProgressCallback | None = None) -> tuple[Path, dict[str, Any]]:
    """Check ``snapshot`` completely while extracting it into a new hidden directory beside
    ``data_dir``; returns that directory and the archive's header. Raises NotFoundError (no
    such file), FormatError (not a snapshot, a newer format, an unsafe, unlisted, missing or
    altered member, truncated) with nothing left behind."""
    archive = archive_path(snapshot)
    leftovers.remove_leftovers(data_dir)
    staging = _new_sibling(data_dir, STAGING_TAG)
    try:
        return staging, extract(archive, staging, progress)
    except OSError as exc:
        discard(staging)
        raise StorageError(f"could not restore {archive} beside {data_dir}: {exc}") from exc
    except BaseException:
        discard(staging)
        raise


# --- putting a restored directory in place ------------------------------------------------------


def target_replaces(data_dir: Path) -> bool:
    """Whether restoring into ``data_dir`` replaces a tree (True) or fills a new or empty
    directory (False). Raises InvalidInputError for a file and FormatError for a non-empty
    directory that is not a tree, and InvalidInputError when it holds the working directory."""
    if os.path.lexists(data_dir) and not data_dir.is_dir():
        raise InvalidInputError(f"data_dir {data_dir} is a file, not a directory")
    if not data_dir.exists():
        return False
    cwd = Path.cwd().resolve()
    home = data_dir.resolve()
    if cwd == home or home in cwd.parents:
        raise InvalidInputError(f"cannot restore into {data_dir}: it holds the working directory; "
                                "change to another directory first")
    entries = os.listdir(data_dir)
    if not entries:
        return False
    if MANIFEST_NAME in entries:
        return True
    raise FormatError(
        f"{data_dir} is not empty and is not a kwtree directory: restore into a new or empty "
        f"directory, or into an existing tree to replace it"
    )


def _new_sibling(data_dir: Path, tag: str) -> Path:
    home = Path(os.path.abspath(data_dir))
    while True:
        candidate = home.with_name(f".{home.name}{tag}{os.urandom(4).hex()}")
        try:
            candidate.mkdir(dir_mode(PRIVATE_FILE_MODE))
            leftovers.hold(candidate)  # before anything is written into it (see leftovers)
        except FileExistsError:
            continue
        except OSError as exc:
            raise StorageError(f"cannot create {candidate} to restore into: {exc}") from exc
        return candidate


def _carried_over(name: str) -> bool:
    """Whether a restore moves this entry of a replaced directory into the restored one."""
    if name in KWTREE_ENTRIES or name == LOG_DIR or name.startswith(f"{LOG_DIR}."):
        return False
    return not name.startswith(f".{MANIFEST_NAME}.")  # a manifest being written


def _move_user_entries(source: Path, target: Path) -> None:
    """Move the lock file and what is not kwtree's (``.git``, notes) from ``source`` into ``target``."""
    for name in sorted(os.listdir(source)):
        if _carried_over(name) and not os.path.lexists(target / name):
            os.rename(source / name, target / name)


def swap_in(staging: Path, data_dir: Path) -> Path:
    """Put ``staging`` in the place of the tree at ``data_dir`` (whose writer lock the caller
    holds) and return where the old directory went. Files in it that are not kwtree's move
    into the new one. On failure everything is as it was."""
    home = Path(os.path.abspath(data_dir))
    aside = home.with_name(f".{home.name}{ASIDE_TAG}{os.urandom(4).hex()}")
    try:
        os.rename(home, aside)
    except OSError as exc:
        raise StorageError(f"cannot move {home} aside to restore: {exc}") from exc
    leftovers.hold(aside)  # a cleaner removes it only once this process is done with it
    try:
        _move_user_entries(aside, staging)
        os.rename(staging, home)
    except OSError as exc:
        _move_user_entries(staging, aside)
        os.rename(aside, home)
        leftovers.let_go(aside)
        raise StorageError(f"cannot put the restored directory in place of {home}: {exc}") from exc
    leftovers.let_go(staging)
    fsync_directory(home.parent)
    return aside


def swap_back(aside: Path, data_dir: Path) -> None:
    """Undo :func:`swap_in`: the old directory returns, the restored one is deleted."""
    home = Path(os.path.abspath(data_dir))
    failed = home.with_name(f".{home.name}{STAGING_TAG}failed-{os.urandom(4).hex()}")
    os.rename(home, failed)
    leftovers.hold(failed)
    _move_user_entries(failed, aside)
    os.rename(aside, home)
    leftovers.let_go(aside)
    fsync_directory(home.parent)
    discard(failed)


def discard(directory: Path) -> None:
    """Delete a staging or set-aside directory (a warning if that fails: it is hidden junk)."""
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not delete %s after a restore: %s; delete it by hand", directory, exc)
    finally:
        leftovers.let_go(directory)


def summary(header: Mapping[str, Any], data_dir: Path, snapshot: str | os.PathLike[str], *,
            replaced: bool) -> dict[str, Any]:
    """What a restore reports: where, from what, the watermark, counts and bytes."""
    return {
        "data_dir": str(data_dir),
        "snapshot": os.fspath(snapshot),
        "last_op_id": header["last_op_id"],
        **{key: header["counts"][key] for key in COUNT_KEYS},
        "bytes": sum(entry["size"] for entry in header["members"]),
        "replaced": replaced,
    }
