"""Restoring a snapshot archive: the one orchestration behind ``kwtree.restore`` and
``KeywordTree.restore`` (the byte work — extracting and checking an archive, putting a
directory in place by renames — is :mod:`kwtree.stores.snapshot`'s).

1. The archive is checked in full (every member, its size and SHA-256) while it is extracted
   into a new hidden directory beside the target; nothing is touched before that passed.
2. The restored log must replay to the archive's watermark and counts. A tree of this process
   that is replaced in place (the *occupant*) checks the state it reopens with; otherwise the
   staged log is replayed before anything is put in place.
3. A new or empty target gets the staged directory by one rename. A tree is replaced under
   its writer lock: the old directory is moved aside (its lock file and the entries that are
   not kwtree's, such as ``.git``, move into the restored one), the restored directory takes
   its place, the occupant reopens on it, and only then is the old directory deleted. If the
   occupant's check fails, the old directory is put back and the occupant reopens on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from kwtree.engine.events import Bound
from kwtree.engine.follower import replay_store
from kwtree.engine.state import State
from kwtree.errors import CorruptLogError, FormatError, StorageError
from kwtree.models import ROOT_ID
from kwtree.progress import ProgressCallback, check_progress
from kwtree.stores import leftovers
from kwtree.stores.archive import COUNT_KEYS, archive_path
from kwtree.stores.files import fsync_directory
from kwtree.stores.lock import LOCK_NAME, WriterLock
from kwtree.stores.segments import SegmentStore
from kwtree.stores.snapshot import (
    discard,
    stage,
    summary,
    swap_back,
    swap_in,
    target_replaces,
)
from kwtree.validate import clean_path, clean_seconds

__all__ = ["Occupant", "check_state", "facts_of", "restore", "restore_archive"]

log = logging.getLogger("kwtree.snapshot")
T = TypeVar("T")


class Occupant(NamedTuple):
    """An open tree of this process whose own directory a restore replaces."""

    #: Holds the tree's own writes off and its caches closed while the directory is swapped;
    #: on exit the tree, if it is open, opens its caches again.
    vacate: Callable[[], contextlib.AbstractContextManager[None]]
    #: Inside ``vacate()``: let go of the directory and open it again as it is now; the
    #: check (if any) is given the reopened state. If anything raises, the tree stays closed.
    reopen: Callable[[Callable[[State], None] | None], None]


def restore(snapshot: str | os.PathLike[str], data_dir: str | os.PathLike[str], *,
            lock_timeout: float = 10.0, progress: ProgressCallback | None = None) -> dict[str, Any]:
    """Restore a snapshot archive into ``data_dir``: a new or empty directory, or an existing
    tree, which is replaced. Returns a summary (``data_dir``, ``snapshot``, ``last_op_id``,
    the counts, ``bytes``, ``replaced``).

    Every member, size and SHA-256 is checked, and the restored log is replayed and compared
    with the archive's watermark and counts, before ``data_dir`` is touched; a failure raises
    and leaves it as it was. A tree in ``data_dir`` is replaced under its writer lock by
    renames (its own files that are not kwtree's, such as ``.git``, move into the restored
    directory, and so does the lock file) and deleted afterwards. KeywordTree instances that
    keep it open replay the restored log at their next refresh or write, but keep their caches
    of the old tree until they reopen: close them first. The restored tree has no caches yet:
    its first open rebuilds them. Durable on return. ``progress`` is told how the check of
    the archive goes (``kwtree.progress``).

    Raises InvalidInputError (bad arguments, ``data_dir`` is a file or holds the working
    directory), NotFoundError (no such snapshot), FormatError (not a snapshot or damaged,
    altered, unsafe or truncated; ``data_dir`` not empty and not a tree), LockTimeoutError,
    StorageError.
    """
    target = clean_path(data_dir, "data_dir")
    timeout = clean_seconds(lock_timeout, "lock_timeout")
    check_progress(progress)
    archive_path(snapshot)
    target_replaces(target)  # refuse a file or a foreign directory before creating parents
    created = _missing_parents(target)
    try:
        for parent in reversed(created):
            parent.mkdir(exist_ok=True)
        return restore_archive(snapshot, target, lock_timeout=timeout, progress=progress)
    except BaseException:
        for parent in created:
            try:
                parent.rmdir()
            except OSError:
                break
        raise


def restore_archive(snapshot: str | os.PathLike[str], target: Path, *, lock_timeout: float,
                    occupant: Occupant | None = None, progress: ProgressCallback | None = None) -> dict[str, Any]:
    """Restore ``snapshot`` into ``target`` as the module docstring says; ``occupant`` is the
    open tree of this process that ``target`` holds, when it restores itself. Returns the
    summary ``restore`` returns. Raises what ``restore`` raises."""
    replacing = target_replaces(target)
    staging, header = stage(snapshot, target, progress)

    def check(state: State) -> None:
        check_state(state, header, snapshot)

    try:
        if occupant is None:
            check(_replay(staging, snapshot))
        if not replacing:
            _fill(staging, target)
            return summary(header, target, snapshot, replaced=False)
    except BaseException:
        discard(staging)
        raise
    with occupant.vacate() if occupant is not None else contextlib.nullcontext():
        try:
            aside = _under_lock(target, lock_timeout, lambda: swap_in(staging, target))
        except BaseException:
            discard(staging)
            raise
        if occupant is not None:
            try:
                occupant.reopen(check)
            except BaseException:
                _put_back(aside, target, lock_timeout, occupant)
                raise
    discard(aside)
    return summary(header, target, snapshot, replaced=True)


def facts_of(state: State, bound: Bound | None) -> dict[str, Any]:
    """What an archive records about the state it holds (``KeywordTree.snapshot`` writes it,
    ``check_state`` compares a restored tree with it): its watermark, counts (as
    ``tree_metrics`` counts them) and view. The caller keeps the state still meanwhile."""
    live_keywords = {k.id for k in state.keywords.values() if not k.deleted}
    live_infos = {i.id for i in state.infos.values() if not i.deleted}
    counts = {
        "operations": state.op_count,
        "keywords": len(live_keywords - {ROOT_ID}),
        "infos": len(live_infos),
        "links": sum(1 for (info_id, kid), link in state.links.items()
                     if not link.deleted and info_id in live_infos and kid in live_keywords),
        "relations": sum(1 for (src, dst, _), rel in state.relations.items()
                         if not rel.deleted and src in live_keywords and dst in live_keywords),
    }
    view = None if bound is None else {"op_id": bound.op_id, "timestamp": bound.timestamp}
    return {"last_op_id": state.last_op_id, "counts": counts, "view": view}


def check_state(state: State, header: Mapping[str, Any], snapshot: object) -> None:
    """Raise FormatError unless ``state`` has the archive's watermark and counts."""
    found = facts_of(state, None)
    expected = {"last_op_id": header["last_op_id"], "counts": {key: header["counts"][key] for key in COUNT_KEYS}}
    actual = {"last_op_id": found["last_op_id"], "counts": found["counts"]}
    if actual != expected:
        raise FormatError(f"{snapshot}: the restored log replays to {actual}, but the snapshot recorded {expected}")


def _replay(directory: Path, snapshot: object) -> State:
    """The state of the log in ``directory`` (FormatError if it does not replay cleanly)."""
    store = SegmentStore(directory, writable=False, durable=False)
    try:
        state = replay_store(store, None, threading.Lock()).state
        torn = store.torn_bytes()
    except CorruptLogError as exc:
        raise FormatError(f"{snapshot}: its log does not replay ({exc.detail} at line {exc.line})") from None
    finally:
        store.close()
    if torn:
        raise FormatError(f"{snapshot}: its log ends with an incomplete operation")
    return state


def _fill(staging: Path, target: Path) -> None:
    """Put the staged directory at ``target`` (absent or empty) by one rename."""
    try:
        os.rename(staging, target)  # onto an empty directory too, atomically
        leftovers.let_go(staging)
    except OSError as exc:
        raise StorageError(
            f"could not put the restored directory at {target} (did it gain files meanwhile?): {exc}"
        ) from exc
    fsync_directory(Path(os.path.abspath(target)).parent)


def _under_lock(target: Path, timeout: float, action: Callable[[], T]) -> T:
    """``action()`` holding the writer lock of the tree at ``target`` (its lock file moves
    with it, so the same file is locked before and after the swap)."""
    lock = WriterLock(target / LOCK_NAME, timeout)
    try:
        with lock:
            return action()
    finally:
        lock.close()


def _put_back(aside: Path, target: Path, timeout: float, occupant: Occupant) -> None:
    """After the occupant failed on the restored directory: the old one returns, and the
    occupant reopens on it (if that fails too, it stays closed, and the failure is logged)."""
    try:
        _under_lock(target, timeout, lambda: swap_back(aside, target))
        occupant.reopen(None)
    except BaseException:
        log.exception("could not reopen %s after a failed restore; it stays closed", target)


def _missing_parents(target: Path) -> list[Path]:
    """The ancestors of ``target`` that do not exist yet, nearest first."""
    missing = []
    parent = Path(os.path.abspath(target)).parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    return missing
