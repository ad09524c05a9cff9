"""Every exception kwtree raises on purpose derives from :class:`KwtreeError`.

A failed call leaves both the event log and the in-memory state exactly as they were
before it, whichever of these it raises::

    KwtreeError
    ├── InvalidInputError (also a ValueError)   an argument is malformed or not allowed
    │   ├── DuplicateKeywordError               a live sibling already has that name
    │   ├── HasChildrenError                    delete without cascade on a keyword with children
    │   └── LimitExceededError                  a value is larger than the tree's ``Limits`` allow
    ├── NotFoundError (also a LookupError)      an id names nothing live
    ├── VersionConflictError                    optimistic ``version`` check failed
    ├── UndoConflictError                       a later operation changed what undo would restore
    ├── CycleError                              a move or merge would put a keyword under itself
    ├── ReadOnlyError                           a write on an ``as_of`` or ``read_only`` view
    ├── ClosedError                             the tree was closed
    ├── LockTimeoutError                        another process held the writer lock too long
    ├── StorageError                            the disk refused a write; nothing was committed
    │   └── DiskFullError                       ... because the disk (or the quota) is full
    ├── FormatError                             the directory was written by another format
    ├── CorruptLogError                         a log line that is not a torn tail is unreadable
    ├── DamagedDirectoryError                   verify or repair left errors (``.report``)
    ├── GitError                                git is missing or a git command failed
    ├── MergeConflictError                      two log versions cannot be merged losslessly
    ├── AgentError                              the agent failed and the tree refuses fallbacks
    └── LLMError                                an LLM client call failed (the agent falls back)
        ├── LLMResponseError                    the answer was not JSON of the requested shape
        ├── LLMTimeoutError                     no answer within the client's timeout
        └── LLMUnavailableError                 the API refused (after retries) or was unreachable
"""

from __future__ import annotations

import errno
import os
from typing import Any

__all__ = [
    "AgentError",
    "ClosedError",
    "CorruptLogError",
    "CycleError",
    "DamagedDirectoryError",
    "DiskFullError",
    "DuplicateKeywordError",
    "FormatError",
    "GitError",
    "HasChildrenError",
    "InvalidInputError",
    "KwtreeError",
    "LLMError",
    "LLMResponseError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "LimitExceededError",
    "LockTimeoutError",
    "MergeConflictError",
    "NotFoundError",
    "ReadOnlyError",
    "StorageError",
    "UndoConflictError",
    "VersionConflictError",
    "disk_full_error",
    "storage_error",
]


class KwtreeError(Exception):
    """Base of every error kwtree raises deliberately."""


class InvalidInputError(KwtreeError, ValueError):
    """Raised when an argument has the wrong type, is empty, or is not allowed here."""


class DuplicateKeywordError(InvalidInputError):
    """Raised when a live sibling under the same parent already has the (normalised) name.

    ``existing_id`` is the id of that sibling, so a caller can reuse it.
    """

    def __init__(self, message: str, existing_id: str) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class HasChildrenError(InvalidInputError):
    """Raised by ``delete_keyword`` without ``cascade=True`` on a keyword that has children."""


class LimitExceededError(InvalidInputError):
    """Raised when a value is larger than the tree's ``kwtree.Limits`` allow (nothing is written).

    ``field`` names the argument or entity field, ``size`` is its size and ``limit`` the limit,
    in bytes of UTF-8 (in aliases for the number of aliases of a keyword).
    """

    def __init__(self, message: str, field: str, size: int, limit: int) -> None:
        super().__init__(message)
        self.field = field
        self.size = size
        self.limit = limit


class NotFoundError(KwtreeError, LookupError):
    """Raised when an id names no live keyword, info, link, relation or operation."""


class VersionConflictError(KwtreeError):
    """Raised when the caller's ``version`` is not the entity's current version.

    ``expected`` is the version the caller passed, ``actual`` the one stored.
    """

    def __init__(self, entity_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"version conflict on {entity_id}: you passed version {expected}, "
            f"but the current version is {actual}; re-read it and retry"
        )
        self.entity_id = entity_id
        self.expected = expected
        self.actual = actual


class UndoConflictError(KwtreeError):
    """Raised by ``undo`` when a later operation changed an entity the undone one touched.

    ``conflicts`` maps each such entity key to the op id that last wrote it.
    """

    def __init__(self, op_id: str, conflicts: dict[str, str]) -> None:
        listed = ", ".join(f"{key} (by {later})" for key, later in conflicts.items())
        super().__init__(
            f"cannot undo {op_id}: later operations changed {listed}; "
            f"undo those first or pass force=True"
        )
        self.op_id = op_id
        self.conflicts = conflicts


class CycleError(KwtreeError):
    """Raised when a move or merge would make a keyword its own ancestor."""


class ReadOnlyError(KwtreeError):
    """Raised by a write on a tree opened with ``as_of=`` or ``read_only=True``."""


class ClosedError(KwtreeError):
    """Raised by any use of a tree after ``close()``."""


class LockTimeoutError(KwtreeError):
    """Raised when the writer lock of the directory was not free within ``lock_timeout``."""


class StorageError(KwtreeError):
    """Raised when writing or syncing a file failed (the log: the operation was not committed;
    a cache or the outbox: the write was undone, and is retried or rebuilt later)."""


class DiskFullError(StorageError):
    """Raised when a write failed because the file system holding ``path`` is full (ENOSPC) or
    the user's quota is spent (EDQUOT). Nothing was written; the same call works again once
    space is freed."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


#: errno values that mean "no space left": the disk is full or the quota is spent.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


#: What else a DiskFullError suggests, unless the caller knows better.
_MOVE_THE_TREE = "move the data directory to a larger disk"


def storage_error(what: str, exc: BaseException, path: str | os.PathLike[str] | None = None, *,
                  instead: str = _MOVE_THE_TREE) -> StorageError:
    """The error to raise (``from exc``) when ``what`` (e.g. "could not append to <file>")
    failed with ``exc``: a DiskFullError naming ``path`` and what to do when ``exc`` is an
    OSError with a no-space errno (free space, or ``instead``), else a StorageError carrying
    ``exc``'s text."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return disk_full_error(what, path, exc.strerror or str(exc), instead=instead)
    return StorageError(f"{what}: {exc}")


def disk_full_error(what: str, path: str | os.PathLike[str] | None, detail: str, *,
                    instead: str = _MOVE_THE_TREE) -> DiskFullError:
    """A DiskFullError for ``what`` that failed on the full disk holding ``path``."""
    where = f"the disk holding {path}" if path is not None else "the disk"
    return DiskFullError(f"{what}: {where} is full ({detail}); nothing was written: free space on it "
                         f"(or {instead}) and retry", None if path is None else str(path))


class FormatError(KwtreeError):
    """Raised when the directory's manifest names a format this version cannot open."""


class CorruptLogError(KwtreeError):
    """Raised when the log is damaged where a torn tail cannot explain it: a complete line
    that cannot be read, a NUL byte or zeroed block with operations after it, a sealed
    segment that ends mid-operation, a seal naming a missing segment. ``path`` and ``line``
    say where; ``kwtree verify`` lists all of it and ``kwtree repair`` mends it."""

    def __init__(self, path: str, line: int, detail: str) -> None:
        super().__init__(f"{path}:{line}: {detail}")
        self.path = path
        self.line = line
        self.detail = detail


class LLMError(KwtreeError):
    """Raised by an LLM client when a call produced no usable decision. The descend loop
    catches it (and any other client exception) and falls back to ``agent_failure``."""


class LLMResponseError(LLMError):
    """Raised when the model's answer is not a JSON object of the requested shape."""


class LLMTimeoutError(LLMError):
    """Raised when the model did not answer within the client's timeout."""


class LLMUnavailableError(LLMError):
    """Raised when the API refused the request (after retries) or could not be reached.

    ``status_code`` is the last HTTP status seen, or None when no answer came back.
    """

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class AgentError(KwtreeError):
    """Raised, on a tree opened with ``on_agent_failure="raise"``, when the agent could not
    decide a placement, the links of an info, a search or a reorganisation plan (the LLM
    failed, answered something unusable, or gave no decision within the rounds) instead of
    falling back. Nothing is written. ``reason`` is the fallback it refused
    (``agent_failure``, ``agent_timeout`` or ``invalid_jump``) and ``detail`` what went
    wrong (e.g. ``"LLMUnavailableError: ..."``).
    """

    def __init__(self, message: str, reason: str, detail: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.detail = detail


class DamagedDirectoryError(KwtreeError):
    """Raised by ``Report.check`` (so by ``kwtree verify`` and ``kwtree repair``, which exit
    with 1) when a verify or repair report holds errors; ``report`` is the report."""

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report


class GitError(KwtreeError):
    """Raised when git is missing or a git command ``kwtree.ops.git.setup`` runs fails; the
    message carries git's own."""


class MergeConflictError(KwtreeError):
    """Raised by the log merge when the two sides cannot be merged without losing or
    inventing data; the merge driver then exits 1 and git reports a conflict."""
