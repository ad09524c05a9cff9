"""How ``verify`` reads the segments of a log that other processes may be writing while it
reads (B17): it reports only what a quiet log would show.

Writers append, start segments and seal them, and a compaction or repair may replace the whole
log, while verify reads. The log directory is held open, so one generation is read throughout
(``Replaced`` when it was replaced: the caller reads again, in the end under the writer lock).
A segment that has a successor is final (a writer starts the next one only once the last byte
of this one is durable) and is read as it is; the newest is read last, and counts as the newest
only if no successor appeared meanwhile (else it is read again, as final), so a seal or a
successor is never missed; and a segment that ends in the middle of a write (an operation, a
seal line) is read again until the write is done (``_settled``).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from kwtree.engine.events import is_op_id
from kwtree.engine.replay import RawOperation
from kwtree.ops.verify_segments import Findings, Segment, SegmentReader, Validator
from kwtree.stores.eventlog import LOG_DIR, SEGMENT_SUFFIX, seals_start
from kwtree.stores.segments import whole_operations_end

__all__ = ["LOCKED_READ_TIMEOUT", "REREADS", "Replaced", "read_log"]

#: How many times verify reads a log again that another process replaced while it read it,
#: before it reads it holding the writer lock (waiting up to LOCKED_READ_TIMEOUT seconds).
REREADS = 4
LOCKED_READ_TIMEOUT = 30.0
#: How many times a segment that ends in the middle of a write is read again, and the wait
#: before each: a write in progress ends within microseconds; a crash's leftovers never change.
SETTLE_READS = 5
SETTLE_WAIT = 0.005
#: How long a segment whose successor is the newest may wait for its seal line (seconds).
SEAL_PATIENCE = 1.0


class Replaced(Exception):
    """The log was replaced (compaction, repair, restore, upgrade) while verify read it."""


def _segment_names(findings: Findings, log_fd: int, *, report: bool) -> list[str]:
    """The segment names of the log directory open as ``log_fd``, oldest first; with
    ``report``, a ``stray-file`` warning for every other entry."""
    names = []
    for entry in sorted(os.listdir(log_fd)):
        stem = entry[: -len(SEGMENT_SUFFIX)] if entry.endswith(SEGMENT_SUFFIX) else None
        try:
            regular = stat.S_ISREG(os.stat(entry, dir_fd=log_fd).st_mode)
        except FileNotFoundError:
            continue  # (removed since the listing: a replaced log, which the caller notices)
        if stem is not None and is_op_id(stem) and regular:
            names.append(stem)
        elif report:
            findings.add("warning", "stray-file", f"{LOG_DIR}/{entry}", None,
                         "not a log segment (segments are <32 lowercase hex digits>.jsonl files); kwtree ignores it")
    return names


def _read_bytes(log_fd: int, name: str) -> bytes:
    try:
        fd = os.open(f"{name}{SEGMENT_SUFFIX}", os.O_RDONLY, dir_fd=log_fd)
    except FileNotFoundError:
        raise Replaced(name) from None
    with os.fdopen(fd, "rb") as file:
        return file.read()


def _settled(log_fd: int, name: str, *, sealing: bool, sealed: bool) -> bytes:
    """The bytes of segment ``name`` once a writer has finished with what they end in.

    The newest segment (neither flag) may end in an operation being written: it is read again
    after ``SETTLE_WAIT`` while it does and the bytes change (what stays the same is a crash's
    torn tail). A segment with a successor (``sealed``, format 2 and later) gets its seal line
    just after its successor's first operation is written: one without it is read again once,
    and, while its successor is the newest segment (``sealing``: the writer may be between the
    two), every ``SETTLE_WAIT`` for up to ``SEAL_PATIENCE`` seconds — what a crash left there
    costs a verify that second once."""
    raw = _read_bytes(log_fd, name)
    tries = int(SEAL_PATIENCE / SETTLE_WAIT) if sealing else 1 if sealed else SETTLE_READS
    for _ in range(tries):
        data = raw.rstrip(b"\0")
        cut = seals_start(data)
        if (cut < len(data) and data.endswith(b"\n")) if sealed else whole_operations_end(data[:cut]) == cut:
            return raw
        time.sleep(SETTLE_WAIT)
        again = _read_bytes(log_fd, name)
        if again == raw and not sealed:
            return raw
        raw = again
    return raw


def read_log(directory: Path, log_format: int, validator: Validator,
             findings: Findings) -> tuple[list[Segment], list[RawOperation], int]:
    """Read every segment of the log of ``directory`` (in format ``log_format``), each checked
    by a ``SegmentReader`` reporting to ``findings``; returns the segments, the valid complete
    operations in file order, and the bytes of data read; Replaced when the log was replaced
    while it was read (see the module docstring)."""
    log_dir = directory / LOG_DIR
    segments: list[Segment] = []
    found: list[RawOperation] = []
    try:
        log_fd = os.open(log_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except FileNotFoundError:
        return segments, found, 0
    try:
        names = _segment_names(findings, log_fd, report=True)
        index = 0
        while index < len(names):
            newest = index == len(names) - 1
            sealed = not newest and log_format >= 2
            raw = _settled(log_fd, names[index], sealing=sealed and index == len(names) - 2, sealed=sealed)
            if newest:
                later = [name for name in _segment_names(findings, log_fd, report=False) if name > names[-1]]
                if later:
                    names.extend(later)  # it was sealed while it was read: read it again, as final
                    continue
            segment = Segment(names[index], f"{LOG_DIR}/{names[index]}{SEGMENT_SUFFIX}", newest=newest)
            reader = SegmentReader(segment, raw, validator, findings, checksums=log_format >= 2)
            reader.read()
            segments.append(segment)
            found.extend(reader.operations)
            index += 1
        if os.fstat(log_fd).st_ino != os.stat(log_dir).st_ino:
            raise Replaced(str(log_dir))
    except FileNotFoundError as exc:  # log/ itself went: replaced
        raise Replaced(str(exc)) from None
    finally:
        os.close(log_fd)
    return segments, found, sum(segment.data_end for segment in segments)
