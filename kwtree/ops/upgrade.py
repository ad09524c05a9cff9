"""Moving a data directory to the current log format: ``kwtree upgrade DIR``. An older format
is never upgraded silently (DESIGN §3): kwtree reads and writes a format-1 directory as it is
until this runs.

To format 3 (docs/log-format.md): every operation names the digest of the one before it in
``prev`` and carries its checksum, the last keys of its end marker, every segment but the
newest ends with a seal line naming its successor, and a ``rechain`` note after the last
operation says that the chain began with this upgrade. The rows are otherwise kept byte for
byte, so op ids, the state, ``history`` and the caches stay valid. Under the writer lock, the
directory must first verify without errors and without a torn tail (``kwtree repair`` fixes
both); the new log is written beside the old one and swapped in with one atomic step
(kwtree.stores.logswap, as compaction does), and only then does the manifest name format 3.
A crash before that leaves a log that reads in its old format, and the upgrade can simply
run again. Processes that hold the tree open replay the new log
and take the new format at their next write or refresh.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from pathlib import Path

import orjson

from kwtree.engine.events import (
    GENESIS,
    NOTE_RECHAIN,
    OpClock,
    encode_note,
    op_digest,
    rechain,
    with_checksum,
    with_prev,
)
from kwtree.engine.replay import parse_operations
from kwtree.errors import DamagedDirectoryError, StorageError, storage_error
from kwtree.ops.verify import Report, segments_directory, verify_directory
from kwtree.progress import ProgressCallback, Ticker, check_progress
from kwtree.stores import logswap
from kwtree.stores.eventlog import (
    LOG_DIR,
    SEGMENT_SUFFIX,
    encode_seal,
    seals_start,
    segment_names,
)
from kwtree.stores.lock import run_locked
from kwtree.stores.manifest import FORMAT_VERSION, Manifest
from kwtree.validate import clean_seconds

__all__ = ["Upgrade", "upgrade_directory"]


@dataclasses.dataclass(frozen=True, slots=True)
class Upgrade:
    """What ``upgrade_directory`` did: the format before and after, and how many segments and
    operations it rewrote (0 when the directory was current already), then what a verify of
    the upgraded directory finds."""

    directory: str
    format_before: int
    format_after: int
    segments: int
    operations: int
    report: Report

    def __str__(self) -> str:
        if self.format_before == self.format_after:
            return f"{self.directory} uses format {self.format_after} already: nothing to do"
        return (f"upgraded {self.directory} from format {self.format_before} to {self.format_after}: "
                f"{self.operations:,} operation(s) chained and checksummed in {self.segments} segment(s)")


def upgrade_directory(path: str | os.PathLike[str], *, lock_timeout: float = 10.0,
                      progress: ProgressCallback | None = None) -> Upgrade:
    """Upgrade the data directory at ``path`` to the current log format (see the module
    docstring) under its writer lock, waiting ``lock_timeout`` seconds at most. Idempotent.
    Raises NotFoundError / InvalidInputError for a path that is not a kwtree directory,
    FormatError for a newer or unreadable manifest, DamagedDirectoryError when verify finds
    an error or a torn tail (run ``kwtree repair`` first; nothing is changed), LockTimeoutError,
    StorageError when the disk fails — DiskFullError when it is full: the new log is removed,
    the old one stays in place, and the same call works once space is freed. ``progress`` is
    told how many segments are rewritten (``kwtree.progress``)."""
    directory = segments_directory(path, "upgrade")
    timeout = clean_seconds(lock_timeout, "lock_timeout")
    check_progress(progress)
    try:
        return run_locked(directory, timeout, functools.partial(_upgrade, progress=progress))
    except OSError as exc:
        raise storage_error(f"could not upgrade {directory}", exc, directory) from exc


def _upgrade(directory: Path, progress: ProgressCallback | None) -> Upgrade:
    manifest = Manifest.load(directory)
    if manifest.format == FORMAT_VERSION:
        return Upgrade(str(directory), manifest.format, manifest.format, 0, 0, verify_directory(directory))
    logswap.recover(directory)
    report = verify_directory(directory)
    report.check(f"run `kwtree repair {directory}` first, then upgrade")
    torn = [f for f in report.findings if f.code == "torn-tail"]
    if torn:
        raise DamagedDirectoryError(
            f"{directory} ends with a torn operation ({torn[0].location}); run `kwtree repair {directory}` "
            f"(or open the tree for writing once) to move it to quarantine/, then upgrade", report)
    names = segment_names(directory / LOG_DIR)
    target = logswap.new_log_dir(directory)
    clock = OpClock()
    try:
        found = [_operations(_data(directory, name), f"{LOG_DIR}/{name}{SEGMENT_SUFFIX}") for name in names]
        # Chained in op-id order, the order replay applies them in (a merged log's files may hold
        # another), each copy of an operation as the first; the files keep their order.
        first: dict[str, bytes] = {}
        for op_id, text in (item for texts in found for item in texts):
            first.setdefault(op_id, text)
            clock.observe(op_id, 0.0)
        chained = dict(rechain(sorted(first.items())))
        operations = sum(map(len, found))
        bodies = [[chained[op_id] for op_id, _ in texts] for texts in found]
        # The log says what happened to it: a note after its newest operation.
        op_id, timestamp = clock.next()
        note = encode_note(op_id, timestamp, NOTE_RECHAIN, "kwtree",
                           {"rechain": {"reason": "upgrade", "from_format": manifest.format}})
        if bodies:
            bodies[-1].append(with_prev(note, op_digest(chained[max(chained)]) if chained else GENESIS))
        with Ticker(progress, "rewriting the log", len(names), "segments") as tick:
            for index, name in enumerate(names):
                body = b"".join(with_checksum(text) for text in bodies[index])
                if index + 1 < len(names):
                    body += encode_seal(body, names[index + 1])
                logswap.write_segment(target, name, body)
                tick.add()
        logswap.seal(target)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    logswap.swap_in(directory)
    dataclasses.replace(manifest, format=FORMAT_VERSION).save(directory)
    return Upgrade(str(directory), manifest.format, FORMAT_VERSION, len(names), operations,
                   verify_directory(directory))


def _data(directory: Path, name: str) -> bytes:
    """The operations segment ``name`` holds (padding and seal lines left out)."""
    raw = (directory / LOG_DIR / f"{name}{SEGMENT_SUFFIX}").read_bytes().rstrip(b"\0")
    return raw[:seals_start(raw)]


def _operations(data: bytes, rel: str) -> list[tuple[str, bytes]]:
    """(op id, rows as they are) of each operation of ``data``, which holds whole operations."""
    found, consumed, _ = parse_operations(data, rel, 1)
    if consumed != len(data):  # verify passed, so this is not expected
        raise StorageError(f"{rel} ends with an incomplete operation; run `kwtree repair`, then upgrade")
    lines = data.split(b"\n")
    texts = []
    for raw in found:
        text = b"\n".join(lines[raw.first_line - 1 : raw.first_line - 1 + len(raw.rows)]) + b"\n"
        last_row = orjson.loads(text[text.rfind(b"\n", 0, len(text) - 1) + 1:])
        if not text.endswith(b"}}\n") or list(last_row)[-1] != "end":
            raise StorageError(f"{rel}:{raw.first_line + len(raw.rows) - 1}: the end marker of operation "
                               f"{raw.op_id} is not the last key of its row, so it cannot take a checksum and a link")
        texts.append((raw.op_id, text))
    return texts
