"""The snapshot archive format, and reading and checking an archive for a restore.

A snapshot is a plain, uncompressed POSIX tar (``tar -tvf`` lists it) whose members are,
in this order and nothing else::

    kwtree-snapshot.json    what the archive holds: its format, the tree's format, the op-id
                            watermark, counts, and the size and SHA-256 of every other member
    manifest.json           the tree's manifest, as it was
    log/<op id>.jsonl ...   the log segments, oldest first, cut after the last whole operation

:mod:`kwtree.stores.snapshot` writes one. :func:`extract` streams one into a staging
directory, refusing anything but exactly the listed members (absolute paths, ``..``, links,
devices, unknown, extra or missing members) and checking every size and digest before the
restore touches its target.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, cast

import orjson

from kwtree.engine.events import is_op_id
from kwtree.errors import FormatError, InvalidInputError, NotFoundError, StorageError
from kwtree.progress import ProgressCallback, Ticker
from kwtree.stores.eventlog import LOG_DIR, SEGMENT_SUFFIX
from kwtree.stores.files import (
    PRIVATE_FILE_MODE,
    dir_mode,
    fsync_directory,
    open_file,
    write_all,
)
from kwtree.stores.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    OLDEST_FORMAT,
    Manifest,
)
from kwtree.validate import clean_path

__all__ = [
    "CHUNK",
    "COUNT_KEYS",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_KIND",
    "SNAPSHOT_MANIFEST",
    "archive_path",
    "extract",
]

SNAPSHOT_FORMAT = 1
SNAPSHOT_KIND = "kwtree-snapshot"
SNAPSHOT_MANIFEST = "kwtree-snapshot.json"
#: The counts an archive records and a restore compares (keys of ``tree_metrics``).
COUNT_KEYS = ("operations", "keywords", "infos", "links", "relations")
#: Bytes a snapshot or a restore copies at a time.
CHUNK = 1 << 22
_HEADER_LIMIT = 64 << 20
#: Largest ``manifest.json`` member a restore accepts (a real one is ~150 bytes).
_MANIFEST_LIMIT = 1 << 16
_SEGMENT_MEMBER = re.compile(rf"{LOG_DIR}/([0-9a-f]{{32}}){re.escape(SEGMENT_SUFFIX)}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE)


def archive_path(snapshot: object) -> Path:
    """The path of an existing snapshot file (NotFoundError if there is none,
    InvalidInputError if it is not a path or not a file)."""
    path = clean_path(snapshot, "snapshot")
    if not path.exists():
        raise NotFoundError(f"no snapshot file {path}")
    if not path.is_file():
        raise InvalidInputError(f"{path} is not a file; pass the path of a snapshot (kwtree snapshot writes one)")
    return path


def _check_member(archive: Path, member: tarfile.TarInfo) -> None:
    """Refuse any member that could write outside the target or is not a plain file."""
    name = member.name
    refuse = f"{archive}: refusing member {name!r}:"
    if name.startswith("/") or os.path.isabs(name):
        raise FormatError(f"{refuse} absolute path (a kwtree snapshot holds only relative paths)")
    if ".." in name.replace("\\", "/").split("/"):
        raise FormatError(f"{refuse} '..' in its path would write outside the target directory")
    if member.issym():
        raise FormatError(f"{refuse} it is a symbolic link (to {member.linkname!r})")
    if member.islnk():
        raise FormatError(f"{refuse} it is a hard link (to {member.linkname!r})")
    if member.ischr() or member.isblk():
        raise FormatError(f"{refuse} it is a device file")
    if member.type not in _REGULAR or member.issparse():
        raise FormatError(f"{refuse} it is not a regular file (tar type {member.type!r})")
    if name != SNAPSHOT_MANIFEST and name != MANIFEST_NAME and not _SEGMENT_MEMBER.fullmatch(name):
        raise FormatError(f"{refuse} not a file a kwtree snapshot holds")


def _check_header(archive: Path, raw: bytes) -> dict[str, Any]:
    bad = f"{archive} is not a valid kwtree snapshot:"
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise FormatError(f"{bad} {SNAPSHOT_MANIFEST} is not JSON ({exc})") from None
    if type(header) is not dict or header.get("kind") != SNAPSHOT_KIND:
        raise FormatError(f"{bad} {SNAPSHOT_MANIFEST} does not describe a kwtree snapshot")
    found = header.get("format")
    if type(found) is not int or found < 1:
        raise FormatError(f"{bad} bad snapshot format {found!r}")
    if found > SNAPSHOT_FORMAT:
        raise FormatError(f"{archive} was written by a newer kwtree (snapshot format {found}); "
                          "upgrade kwtree to restore it")
    tree_format = header.get("tree_format")
    if type(tree_format) is not int or not OLDEST_FORMAT <= tree_format <= FORMAT_VERSION:
        raise FormatError(f"{archive} holds a tree of format {tree_format!r}; "
                          f"this kwtree reads formats {OLDEST_FORMAT} to {FORMAT_VERSION}")
    last = header.get("last_op_id")
    counts = header.get("counts")
    if not (last is None or is_op_id(last)) or type(counts) is not dict or any(
        type(counts.get(key)) is not int for key in COUNT_KEYS
    ):
        raise FormatError(f"{bad} missing or bad watermark or counts")
    members = header.get("members")
    if type(members) is not list or not members:
        raise FormatError(f"{bad} no member list")
    names = []
    for entry in members:
        if (type(entry) is not dict or type(entry.get("name")) is not str or type(entry.get("size")) is not int
                or entry["size"] < 0 or not isinstance(entry.get("sha256"), str)
                or not _DIGEST.fullmatch(entry["sha256"])):
            raise FormatError(f"{bad} bad member entry {entry!r}")
        names.append(entry["name"])
    segments = names[1:]
    if (names[0] != MANIFEST_NAME or not all(_SEGMENT_MEMBER.fullmatch(n) for n in segments)
            or segments != sorted(set(segments))):
        raise FormatError(f"{bad} its member list is not {MANIFEST_NAME} then distinct log segments in order")
    return header


def _copy_member(archive: Path, source: int, offset: int, size: int, target: Path, file_mode: int) -> str:
    """Copy ``size`` bytes at ``offset`` of the archive to a new file; returns their digest.

    Reads at most ``size`` bytes, a chunk at a time, and checks each chunk before writing it:
    a log segment never holds a NUL byte (JSON escapes it), so a member with one (bytes
    hidden after a NUL, or the zeros of a sparse archive that declares a huge member) is
    refused after at most one chunk was read and before any of it was written.
    """
    digest = hashlib.sha256()
    segment = target.name != MANIFEST_NAME
    out = open_file(target, os.O_WRONLY | os.O_EXCL, file_mode)
    try:
        done = 0
        while done < size:
            chunk = os.pread(source, min(CHUNK, size - done), offset + done)
            if not chunk:
                raise FormatError(f"{archive} is truncated: it ends inside member {target.name}; nothing was restored")
            nul = chunk.find(b"\0") if segment else -1
            if nul >= 0:
                raise FormatError(
                    f"{archive}: member {LOG_DIR}/{target.name} has a NUL byte at byte {done + nul}, which no "
                    f"kwtree log holds (the archive is damaged or was crafted); nothing was restored"
                )
            digest.update(chunk)
            write_all(out, chunk)
            done += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)
    return digest.hexdigest()


def _check_room(archive: Path, header: Mapping[str, Any], staging: Path) -> None:
    """Refuse, before anything is written, an archive whose members cannot be in it or
    would not fit on the disk that receives them."""
    members = header["members"]
    total = sum(entry["size"] for entry in members)
    if members[0]["size"] > _MANIFEST_LIMIT:
        raise FormatError(f"{archive}: its {MANIFEST_NAME} is implausibly large ({members[0]['size']} bytes; "
                          f"a kwtree manifest is under {_MANIFEST_LIMIT}); nothing was restored")
    if total > archive.stat().st_size:
        raise FormatError(f"{archive} lists {total} bytes of members but is only {archive.stat().st_size} "
                          f"bytes long: it is truncated or damaged; nothing was restored")
    disk = os.statvfs(staging)
    free = disk.f_bavail * disk.f_frsize
    if total > free:
        raise StorageError(
            f"the disk is full: restoring {archive} needs {total} bytes beside {staging.parent}, which has "
            f"{free} bytes free; free some space or restore elsewhere (nothing was written)"
        )


def extract(archive: Path, staging: Path, progress: ProgressCallback | None = None) -> dict[str, Any]:
    """Check the archive member by member into ``staging``; returns its header. ``progress``
    is told how many of the members' bytes are checked."""
    try:
        # Opened apart from the `with tar:` below so that only the open's TarError is translated.
        tar = tarfile.open(archive, mode="r:")  # noqa: SIM115
    except tarfile.TarError as exc:
        raise FormatError(f"{archive} is not a kwtree snapshot (not an uncompressed tar archive: {exc})") from None
    try:
        with tar:
            first = tar.next()
            if first is None or first.name != SNAPSHOT_MANIFEST:
                raise FormatError(f"{archive} is not a kwtree snapshot: its first member is not {SNAPSHOT_MANIFEST}")
            _check_member(archive, first)
            if first.size > _HEADER_LIMIT:
                raise FormatError(f"{archive}: {SNAPSHOT_MANIFEST} is implausibly large ({first.size} bytes)")
            # tarfile.open(path) reads through a real file; typeshed's protocol for it lacks fileno().
            source = cast(BinaryIO, tar.fileobj).fileno()
            raw = os.pread(source, first.size, first.offset_data)
            if len(raw) != first.size:
                raise FormatError(f"{archive} is truncated: it ends inside {SNAPSHOT_MANIFEST}")
            header = _check_header(archive, raw)
            _check_room(archive, header, staging)
            file_mode = PRIVATE_FILE_MODE  # until the archived manifest says which
            tick = Ticker(progress, "checking the snapshot", sum(entry["size"] for entry in header["members"]),
                          "bytes").start()
            for entry in header["members"]:
                member = tar.next()
                if member is None:
                    raise FormatError(f"{archive} is truncated or damaged: it ends before member {entry['name']}")
                _check_member(archive, member)
                if member.name != entry["name"] or member.size != entry["size"]:
                    raise FormatError(
                        f"{archive}: member {member.name!r} ({member.size} bytes) where its manifest lists "
                        f"{entry['name']!r} ({entry['size']} bytes)"
                    )
                digest = _copy_member(archive, source, member.offset_data, member.size, staging / member.name,
                                      file_mode)
                if digest != entry["sha256"]:
                    raise FormatError(
                        f"{archive}: member {member.name} does not match its SHA-256 checksum: the archive "
                        f"was damaged or altered; nothing was restored"
                    )
                tick.add(member.size)
                if member.name == MANIFEST_NAME:  # the first member: check it before any segment
                    file_mode = _staged_manifest(archive, staging).file_mode
                    os.chmod(staging, dir_mode(file_mode))
                    os.mkdir(staging / LOG_DIR, dir_mode(file_mode))
                    os.chmod(staging / LOG_DIR, dir_mode(file_mode))
            extra = tar.next()
            if extra is not None:
                _check_member(archive, extra)
                raise FormatError(f"{archive}: member {extra.name!r} is not in its manifest")
            tick.finish()
    except tarfile.TarError as exc:
        raise FormatError(f"{archive} is truncated or damaged ({exc}); nothing was restored") from None
    fsync_directory(staging / LOG_DIR)
    fsync_directory(staging)
    return header


def _staged_manifest(archive: Path, staging: Path) -> Manifest:
    """The archived manifest, checked (FormatError naming the archive if it is unusable)."""
    try:
        return Manifest.load(staging)
    except FormatError as exc:
        raise FormatError(f"{archive}: its {MANIFEST_NAME} is unusable ({exc}); nothing was restored") from None
