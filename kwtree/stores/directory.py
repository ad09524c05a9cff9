"""A tree's data directory: creating one, and what an OSError met opening one means.

A new or empty directory becomes a tree in this order: the lock file and an empty ``log/``,
then the manifest, written last and atomically, so a directory with a manifest is a tree and
one without is not yet. Several processes may create one directory at once: the writer lock
makes one of them do it, and the others find its manifest.
"""

from __future__ import annotations

import errno
from pathlib import Path

from kwtree.errors import FormatError, InvalidInputError, StorageError
from kwtree.stores.eventlog import LOG_DIR
from kwtree.stores.files import fsync_directory, make_dir
from kwtree.stores.lock import LOCK_NAME, WriterLock
from kwtree.stores.manifest import MANIFEST_NAME, Manifest

__all__ = ["CACHE_DIR", "CACHE_LOCK", "KWTREE_ENTRIES", "OUTBOX_NAME", "create_directory", "open_error"]

#: The caches' directory and the outbox file, inside a data directory (both rebuildable).
CACHE_DIR = "cache"
OUTBOX_NAME = "outbox.jsonl"
#: The lock inside ``cache/`` that whoever writes the shared full-text index's files holds
#: (``kwtree.caches.fulltext_projection``): a cache's own lock, never the log's writer lock.
CACHE_LOCK = "lock"
#: What a data directory holds of kwtree's own besides ``log*`` (the log, and compaction's
#: ``log.*`` leftovers). Everything else in it is the user's (``.git``, notes) and moves into
#: the restored directory when a restore replaces a tree, and so does the lock file: other
#: processes that keep the tree open hold a descriptor of it, and must go on excluding the
#: writers of the restored tree (they replay its log at their next look, see EventLog.rewritten).
KWTREE_ENTRIES = frozenset({MANIFEST_NAME, CACHE_DIR, "quarantine", OUTBOX_NAME, "outbox.lock"})

#: errno values of a data_dir that cannot be a directory (the caller's path is wrong: e.g. a
#: part of it is a file, which mkdir reports as ENOTDIR or EEXIST); any other OSError while
#: opening is the disk's (StorageError).
_BAD_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.EEXIST, errno.ELOOP, errno.EINVAL,
                              errno.EISDIR})


def create_directory(directory: Path, segment_bytes: int | None, file_mode: int, lock_timeout: float, *,
                     durable: bool) -> None:
    """Make ``directory`` (new, or empty but for what a racing creator made) a tree's: its
    ``log/`` and its manifest, with ``file_mode``; nothing if another process already did.
    Raises FormatError if it holds files that are not kwtree's, LockTimeoutError, OSError."""
    if (directory / MANIFEST_NAME).exists():
        return  # another process created it meanwhile
    # Foreign files first, the manifest second: a creator writes the manifest before any
    # other file, so files seen before a manifest that exists now were a racing creator's.
    if _holds_foreign_files(directory) and not (directory / MANIFEST_NAME).exists():
        raise FormatError(
            f"{directory} is not empty and has no {MANIFEST_NAME}: kwtree creates its data only "
            f"in a new or empty directory; pass another data_dir"
        )
    directory.parent.mkdir(parents=True, exist_ok=True)  # the user's path: the umask's modes
    make_dir(directory, file_mode, exist_ok=True)  # an existing (empty) one keeps its mode
    # Several processes may create one directory at once: the lock makes one of them do it.
    with WriterLock(directory / LOCK_NAME, lock_timeout, file_mode=file_mode) as creation_lock:
        if not (directory / MANIFEST_NAME).exists():
            if _holds_foreign_files(directory):
                raise FormatError(f"{directory} gained files that are not kwtree's while it was being created")
            make_dir(directory / LOG_DIR, file_mode, exist_ok=True)
            Manifest.new(segment_bytes, file_mode).save(directory)
            if durable:
                fsync_directory(directory.resolve().parent)
    creation_lock.close()


def open_error(directory: Path, exc: OSError) -> InvalidInputError | StorageError:
    """The KwtreeError for an OSError met while opening or creating ``directory``."""
    reason = exc.strerror or str(exc)
    where = exc.filename if exc.filename is not None else directory
    if exc.errno in _BAD_PATH_ERRNOS:
        return InvalidInputError(
            f"data_dir {directory} cannot be a kwtree directory: {reason} ({where}); pass another path")
    return StorageError(f"cannot open or create the tree in {directory}: {reason} ({where}); "
                        f"check the permissions and free space there")


def _holds_foreign_files(directory: Path) -> bool:
    """True if ``directory`` exists and holds anything but what creating a tree makes before
    its manifest (the lock file, an empty log directory, the manifest's temporary file)."""
    if not directory.is_dir():
        return False
    for entry in directory.iterdir():
        if entry.name == LOCK_NAME or entry.name.startswith(f".{MANIFEST_NAME}."):
            continue
        if entry.name == LOG_DIR and entry.is_dir() and not any(entry.iterdir()):
            continue
        return True
    return False
