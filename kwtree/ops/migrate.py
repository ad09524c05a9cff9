"""Moving a tree's log between a data directory and PostgreSQL, both ways: the operations are
copied in order with their ids and bytes (less the checksums a JSONL store adds, which the
target adds again when it keeps them), so history, ``as_of``, undo and every later merge see
the same log.

``migrate(source, to)``: ``source`` is a data directory (its own JSONL log, or the caches of a
PostgreSQL log it recorded); ``to`` is a ``postgresql://`` URL (whose tree must be empty) or
a new or empty directory. The source is read under its writer lock, so no write lands
between the read and the copy's end, and is left as it was: the copy is the caller's to
adopt (``KeywordTree(new_dir, log=url)``, or the new directory). The target is written in one
step: a database transaction, or a directory's atomic log swap; a crash leaves it empty.
The copy is then replayed and compared with the source's state before ``migrate`` returns.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kwtree.engine.engine import Engine
from kwtree.engine.events import rechain, without_checksum, without_prev
from kwtree.engine.follower import replay_store
from kwtree.engine.replay import group_operations, whole_lines
from kwtree.errors import InvalidInputError, StorageError
from kwtree.ops.compaction import differences
from kwtree.progress import ProgressCallback, Ticker, check_progress, counted
from kwtree.stores import postgres
from kwtree.stores.logstore import LogStore
from kwtree.stores.segments import SegmentStore
from kwtree.validate import clean_path, clean_seconds

__all__ = ["MigrateReport", "migrate"]


@dataclass(frozen=True, slots=True)
class MigrateReport:
    """What ``migrate`` copied: from ``source`` (a directory) to ``target`` (a URL without its
    password, or a directory), ``operations`` operations of ``bytes`` bytes, the last one
    ``last_op_id``, in ``seconds``."""

    source: str
    target: str
    operations: int
    bytes: int
    last_op_id: str | None
    seconds: float


def _open(directory: Path, *, writable: bool, lock_timeout: float) -> Engine:
    """The engine of a data directory, on the log it keeps or the one it recorded."""
    url = postgres.recorded(directory)
    if url is None:
        return Engine(directory, writable=writable, lock_timeout=lock_timeout)
    return Engine(directory, writable=writable, lock_timeout=lock_timeout, log_store=postgres.opener(url),
                  caches_only=True)


def _operations(engine: Engine) -> Iterator[tuple[str, bytes]]:
    """(op id, encoded rows without a checksum) of every operation of the engine's log, in
    order. Inside ``engine.locked()``."""
    for source, data in engine.read_segments():
        lines = whole_lines(data)
        for op_id, start, stop, _, _ in group_operations(lines, source, 1):
            yield op_id, without_checksum(b"\n".join(lines[start:stop]) + b"\n")


def _target(to: object, lock_timeout: float) -> tuple[LogStore, str]:
    """The store to write, and what to call it."""
    if isinstance(to, str) and postgres.is_postgres_url(to):
        conninfo, tree, schema = postgres.split_url(to)
        return postgres.PostgresStore(conninfo, tree, schema=schema, lock_timeout=lock_timeout), postgres.redacted(to)
    directory = clean_path(to, "to")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise InvalidInputError(f"to must be a postgresql:// URL or a new or empty directory; {directory} is not")
    return SegmentStore.create(directory, lock_timeout=lock_timeout), str(directory)


def migrate(source: str | os.PathLike[str], to: str | os.PathLike[str], *, lock_timeout: float = 10.0,
            progress: ProgressCallback | None = None) -> MigrateReport:
    """Copy the log of the data directory ``source`` to ``to`` (a ``postgresql://`` URL whose
    tree holds nothing yet, or a new or empty directory), operation ids and order kept, and
    check that the copy replays to the source's state. The source is not changed.
    ``progress`` is told how many operations are copied (``kwtree.progress``).

    Raises InvalidInputError (``source`` is no directory, ``to`` neither a URL nor a new or
    empty directory, or the log the source already uses), NotFoundError (``source`` is not a
    kwtree directory), StorageError (the target tree holds operations already, the copy
    could not be written, or it would not replay to the source's state), LockTimeoutError."""
    started = time.perf_counter()
    timeout = clean_seconds(lock_timeout, "lock_timeout")
    check_progress(progress)
    directory = clean_path(source, "source")
    if not directory.is_dir():
        raise InvalidInputError(f"source must be the data directory of a tree; {directory} is not a directory")
    known = postgres.recorded(directory)
    if isinstance(to, str) and known is not None and postgres.is_postgres_url(to) \
            and postgres.split_url(to)[1:] == postgres.split_url(known)[1:]:
        raise InvalidInputError(f"to names the log {postgres.redacted(to)}, which source already uses")
    store, name = _target(to, timeout)
    try:
        engine = _open(directory, writable=True, lock_timeout=timeout)
        try:
            with engine.writing() as state:  # the source's writer lock: no write lands meanwhile
                operations = list(_operations(engine))
                if store.chained and not all(without_prev(data) != data for _, data in operations):
                    # A log from before the hash chain (or partly so): the copy is chained whole. A
                    # chained log is copied byte for byte, so the head recorded of it still holds.
                    operations = list(rechain(operations))
                with store.locked():
                    end = None
                    for batch in store.tail(None):
                        end = batch.end
                        if batch.data:
                            raise StorageError(f"{name} holds operations already: migrate into an empty log")
                    with Ticker(progress, "copying the log", len(operations), "operations") as tick:
                        store.replace(counted(operations, tick), after=end)
                found = differences(state, replay_store(store, None, threading.Lock())[0])
        finally:
            engine.close()
    finally:
        store.close()
    if found:
        raise StorageError(f"the copy in {name} does not replay to the state of {directory} "
                           f"({'; '.join(found[:3])}); please report this")
    return MigrateReport(str(directory), name, len(operations), sum(len(data) for _, data in operations),
                         operations[-1][0] if operations else None, time.perf_counter() - started)
