"""Repairing a damaged data directory (what ``kwtree.ops.verify`` finds).

``repair_directory`` takes the writer lock and then, keeping every byte: copies each damaged
byte range to ``quarantine/<segment>.<byte offset>.bad`` (a torn tail to ``.torn``) with a
``.json`` note saying where it sat and why it was cut (files and directory synced), and only
then replaces the log: the repaired segments are written to ``log.compacting/`` (the others
hard-linked there), synced, and swapped in with one atomic step by kwtree.stores.logswap, as
compaction does — so a crash leaves the old log or the new one, and processes that have the
tree open notice the new log and replay it. Whole operations move: the rows of an operation
that lost a row go with it. If no operation creates the root first, it writes a new root
operation in a segment of its own, ordered before every other. Links and relations that name
an entity the log never wrote are retired by one appended operation (kwtree.engine.references), so
the intact rows around them stay where they are. Every cache that follows the
log by a watermark (the full-text index) is deleted, to be rebuilt from the log (DESIGN §5);
content-addressed vector stores are kept: a vector of an (entity, text hash) is right whatever
the log says, so only what does not match its own rows is mended (kwtree.ops.verify_vectors:
rows whose vector fails its check are erased, a graph built from other rows is deleted).
Afterwards it verifies again; the report lists what it did, then what remains.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

import orjson

from kwtree.engine import checkpoint
from kwtree.engine.events import (
    CRC_KEY,
    GENESIS,
    NOTE_RECHAIN,
    PREV_KEY,
    OpClock,
    encode_note,
    encode_operation,
    is_digest,
    with_checksum,
    with_prev,
)
from kwtree.engine.references import REPAIR_KIND, to_retire
from kwtree.errors import FormatError, StorageError, storage_error
from kwtree.models import Change, Link, Operation
from kwtree.ops.verify import (
    Finding,
    Report,
    _clean_directory,
    _Examination,
    _examine,
    _Findings,
)
from kwtree.ops.verify_segments import Segment, root_keyword
from kwtree.ops.verify_vectors import mend_vectors
from kwtree.stores import logswap
from kwtree.stores.directory import CACHE_DIR, CACHE_LOCK
from kwtree.stores.eventlog import (
    LOG_DIR,
    QUARANTINE_DIR,
    SEGMENT_SUFFIX,
    EventLog,
    encode_seal,
    seals_start,
)
from kwtree.stores.files import (
    PRIVATE_FILE_MODE,
    fsync_directory,
    make_dir,
    remove_cache_dir,
    write_new_file,
)
from kwtree.stores.lock import WriterLock, run_locked
from kwtree.stores.manifest import (
    MANIFEST_NAME,
    OLDEST_FORMAT,
    Manifest,
)
from kwtree.stores.postgres import recorded
from kwtree.validate import clean_seconds
from kwtree.writes.infos import retire_link, retire_relation

__all__ = ["repair_directory", "repair_under_lock", "repaired_report"]

def repair_directory(path: str | os.PathLike[str], *, lock_timeout: float = 10.0) -> Report:
    """Repair the data directory at ``path`` under its writer lock (waiting ``lock_timeout``
    seconds at most, else LockTimeoutError): damaged lines, with the rest of their
    operations, and torn tails go to ``quarantine/`` (nothing is deleted), a missing root
    operation is written, links and relations naming an entity the log never wrote are
    retired by one appended ``repair`` operation, and the caches that follow the log by a watermark (the full-text
    index) and unreadable ones are deleted, to be rebuilt from the log. Returns a report of what was done (info
    findings) followed by what a verify then finds; ``ok`` is True when no error remains.
    Raises FormatError for a directory of a newer format (it changes nothing then), and
    StorageError when the disk fails — DiskFullError when it is full: the log is then as it
    was, nothing the repair began is left behind, and the same call works once space is freed.

    A changed log replaces ``log/`` in one atomic step (as compaction does), so processes
    that have the tree open replay the repaired log at their next refresh or write."""
    directory = _clean_directory(path)
    timeout = clean_seconds(lock_timeout, "lock_timeout")
    try:  # (with the log in PostgreSQL, the directory's lock is the one its caches are written under)
        return run_locked(directory, timeout, lambda locked: repaired_report(locked, _with_cache_lock(locked, timeout)))
    except OSError as exc:
        raise storage_error(f"could not repair {directory}", exc, directory) from exc


def _with_cache_lock(directory: Path, timeout: float) -> list[Finding]:
    """``repair_under_lock`` holding the full-text index's lock too: the repair deletes the
    index's files, which a reading process may be bringing up to date (an open tree's repair
    holds that lock through its caches)."""
    if not (directory / CACHE_DIR).is_dir():
        return repair_under_lock(directory)  # no cache, no one writing one
    lock = WriterLock(directory / CACHE_DIR / CACHE_LOCK, timeout, what="the full-text index's lock")
    try:
        with lock:
            return repair_under_lock(directory)
    finally:
        lock.close()


def repaired_report(directory: Path, done: Iterable[Finding]) -> Report:
    """A repair's report: what it did (``done``), then what a verify now finds."""
    return _examine(directory).report(done)


def repair_under_lock(directory: Path) -> list[Finding]:
    """``repair_directory``'s repair, for a caller that holds the directory's writer lock
    already (``KeywordTree.repair``): returns what it did, for ``repaired_report``, which
    the caller may extend with what it did next. A failing disk raises StorageError (DiskFullError when it is
    full) and leaves the log as it was: the copies this repair made in ``quarantine/`` and
    the new log it was building are removed (their bytes are still in the log), so the same
    call works once space is freed. Only the ``repair`` operation appended after the new log
    is in place can fail with the repaired log kept; running repair again appends it."""
    try:
        return _repair(directory) if recorded(directory) is None else _repair_caches(directory)
    except OSError as exc:
        raise storage_error(f"could not repair {directory}", exc, directory) from exc


def _repair(directory: Path) -> list[Finding]:
    done = _Findings()
    if logswap.recover(directory):
        done.add("info", "log-swap", None, None, "finished a log replacement that a crash had interrupted")
    exam = _examine(directory)
    if exam.manifest_problem == "newer":
        raise FormatError(next(f.message for f in exam.findings.items if f.code == "manifest"))
    if exam.manifest_problem is not None:
        # The log tells its format: format 2 operations carry checksums, format 3 ones links too.
        end = exam.operations[0].rows[-1]["end"] if exam.operations else {CRC_KEY: 0, PREV_KEY: GENESIS}
        _replace_manifest(directory, 3 if PREV_KEY in end else 2 if CRC_KEY in end else OLDEST_FORMAT, done)
    # The digests of the operations the damage cost, as the operations after them name them: the
    # log says it lost them (a note), so its hash chain stays whole across the cut.
    removed = sorted({prev for prev in exam.lost if is_digest(prev)})
    kept = _quarantine_entries(directory)
    try:
        bodies = {segment.name: _quarantine_spans(directory, segment, done)
                  for segment in exam.segments if segment.spans}
        _reseal(directory, exam, bodies, done)
        root = _root_operation(exam, done) if exam.needs_root else None
        swap = bool(bodies) or root is not None
        if swap:
            _build_log(directory, bodies, root)
    except BaseException:
        # All or nothing: the log still holds every byte this repair copied aside.
        _drop_quarantined_since(directory, kept)
        raise
    if swap:
        logswap.swap_in(directory)
        exam = _examine(directory)  # what the swapped-in log holds: references it left dangling too
    if removed:
        note = encode_note(_next_op(exam)[0], time.time(), NOTE_RECHAIN, REPAIR_KIND,
                           {"rechain": {"reason": "repair", "removed": removed}})
        _append(directory, exam, note)
        done.add("info", "chain-gap", None, None,
                 f"recorded in a note at the end of the log that {len(removed)} damaged operation(s) were removed, "
                 "so the hash chain stays whole across the cut")
        exam = _examine(directory)
    _retire_dangling(directory, exam, done)
    _remove_caches(directory, exam, done)
    mend_vectors(directory, done)
    return done.items


def _next_op(exam: _Examination) -> tuple[str, float]:
    """A new (op id, timestamp) after every operation of the log."""
    clock = OpClock()
    for raw in exam.operations:
        clock.observe(raw.op_id, float(raw.rows[-1]["end"]["ts"]))
    return clock.next()


def _append(directory: Path, exam: _Examination, encoded: bytes) -> None:
    """Append one operation (``encoded``, without link and checksum) at the end of the log
    ``exam`` read, linked to its head in a chained log, as the log's format writes it."""
    manifest = Manifest.load(directory)
    if manifest.chained:
        encoded = with_prev(encoded, exam.chain.head if exam.chain is not None else GENESIS)
    events = EventLog(directory, manifest.segment_bytes, writable=True, preallocate=False,
                      checksums=manifest.checksums, chained=manifest.chained)
    try:
        events.seek_end()
        events.append(encoded, orjson.loads(encoded[:encoded.index(b"\n")])["op"], sync=True)
    finally:
        events.close()


def _repair_caches(directory: Path) -> list[Finding]:
    """Repair for a directory whose log is in PostgreSQL (a database tears no operation, and
    its log is not this directory's to rewrite): the caches are rebuilt; what verify finds
    in the log itself is reported."""
    done = _Findings()
    exam = _examine(directory)
    if exam.manifest_problem == "newer":
        raise FormatError(next(f.message for f in exam.findings.items if f.code == "manifest"))
    _remove_caches(directory, exam, done)
    mend_vectors(directory, done)
    return done.items


def _remove_caches(directory: Path, exam: _Examination, done: _Findings) -> None:
    """Delete every cache that follows the log by a watermark, not only those whose
    watermark is visibly wrong (an index that trusted a watermark ahead of the log commits a
    valid-looking one afterwards while it still lacks what it skipped), and every unreadable one."""
    for cache in exam.caches:
        if cache.has_watermark or cache.problem is not None:
            remove_cache_dir(cache.directory)
            done.add("info", "removed-cache", str(cache.directory.relative_to(directory)), None,
                     "deleted the cache; the tree rebuilds it from the log when it opens")
    if checkpoint.discard(directory):
        done.add("info", "removed-cache", f"{CACHE_DIR}/{checkpoint.CHECKPOINT_NAME}", None,
                 "deleted the state checkpoint; the next writable close writes one of the mended log")


def _quarantine_spans(directory: Path, segment: Segment, done: _Findings) -> bytes:
    """Copy each damaged span of ``segment`` to its own file in quarantine/ with a note
    (synced before the log changes, so no byte is ever only in memory); returns the bytes
    the segment keeps. Zero padding after the data is dropped: it is not data."""
    raw = (directory / segment.rel).read_bytes()
    if len(raw) != segment.size:  # cannot happen under the writer lock
        raise StorageError(f"{directory / segment.rel} changed while it was being repaired; run repair again")
    quarantine = directory / QUARANTINE_DIR
    make_dir(quarantine, PRIVATE_FILE_MODE, exist_ok=True)
    spans = sorted(segment.spans, key=lambda span: span.start)
    for span in spans:
        suffix = "torn" if span.kind == "tail" and segment.newest else "bad"
        stem, count = f"{segment.name}.{span.start}", 0
        name = f"{stem}.{suffix}"
        while (quarantine / name).exists() or (quarantine / f"{name}.json").exists():
            count += 1
            name = f"{stem}.{count}.{suffix}"
        note = {
            "segment": segment.rel,
            "offset": span.start,
            "bytes": span.end - span.start,
            "first_line": span.line,
            "last_line": span.last_line,
            "reason": span.reason,
            "repaired_at": time.time(),
            "put_back": (f"these bytes were cut from byte {span.start} (line {span.line}) of {segment.rel} "
                         "by `kwtree repair`; to restore them, insert them there again"),
        }
        write_new_file(quarantine / name, raw[span.start:span.end])
        write_new_file(quarantine / f"{name}.json", orjson.dumps(note, option=orjson.OPT_INDENT_2))
        lines = f"line {span.line}" if span.line == span.last_line else f"lines {span.line}-{span.last_line}"
        done.add("info", "quarantined", segment.rel, span.line,
                 f"moved {span.end - span.start} bytes ({lines}) to {QUARANTINE_DIR}/{name}")
    fsync_directory(quarantine)
    kept: list[bytes] = []
    position = 0
    for span in spans:
        kept.append(raw[position:span.start])
        position = span.end
    if position < segment.data_end:
        kept.append(raw[position:segment.data_end])
    return b"".join(kept)


def _reseal(directory: Path, exam: _Examination, bodies: dict[str, bytes], done: _Findings) -> None:
    """Give each segment whose bytes changed (here or before) the seal lines of what it holds
    now, and accept the loss of a successor a seal names but the log lacks (noted in
    quarantine/): the seal then names the segment that does follow, if any."""
    names = [segment.name for segment in exam.segments]
    for index, segment in enumerate(exam.segments):
        successors = list(dict.fromkeys(seal["next"] for seal in segment.seals))
        missing = [name for name in successors if name not in names]
        stale = any(seal["bytes"] != segment.seals_at or seal["crc"] != segment.crc for seal in segment.seals)
        unsealed = exam.format >= 2 and not segment.seals and index + 1 < len(names)
        if segment.name not in bodies and not missing and not stale and not unsealed:
            continue
        body = bodies.get(segment.name)
        if body is None and (stale or unsealed):
            done.add("info", "resealed", segment.rel, segment.seals_line or None,
                     "sealed the segment with what it holds now")
        if body is None:
            body = (directory / segment.rel).read_bytes()[:segment.data_end]
        kept = [name for name in successors if name in names]
        if (missing or unsealed) and not kept and index + 1 < len(names):
            kept = [names[index + 1]]
        for name in missing:
            note = {"segment": f"{LOG_DIR}/{name}{SEGMENT_SUFFIX}", "named_by": segment.rel, "accepted_at": time.time(),
                    "reason": "the segment was missing; `kwtree repair` accepted the loss of its operations"}
            (directory / QUARANTINE_DIR).mkdir(exist_ok=True)
            write_new_file(directory / QUARANTINE_DIR / f"{name}.missing.{time.time_ns()}.json",
                           orjson.dumps(note, option=orjson.OPT_INDENT_2))
            done.add("info", "accepted-loss", segment.rel, segment.seals_line,
                     f"accepted the loss of the missing segment {LOG_DIR}/{name}{SEGMENT_SUFFIX} (noted in "
                     f"{QUARANTINE_DIR}/); the seal now names {kept[0] if kept else 'no successor'}")
        operations = body[:seals_start(body)]
        bodies[segment.name] = operations + b"".join(encode_seal(operations, name) for name in kept)
    if (directory / QUARANTINE_DIR).is_dir():
        fsync_directory(directory / QUARANTINE_DIR)


def _root_operation(exam: _Examination, done: _Findings) -> tuple[str, bytes]:
    """A new first operation creating the root: (its op id, which also names its segment, and
    its rows). Its id sorts before every operation and segment, so it replays first."""
    lowest = min([int(raw.op_id, 16) for raw in exam.operations] + [int(s.name, 16) for s in exam.segments])
    if lowest == 0:
        raise StorageError("cannot write a root operation before operation 0; restore the root's row by hand")
    op_id = f"{lowest - 1:032x}"
    timestamp = float(exam.operations[0].rows[-1]["end"]["ts"])
    op = Operation(op_id, "init", "repair", timestamp, (Change(root_keyword(op_id, timestamp), None),),
                   {"repair": "the log had no operation creating the root before its other operations"})
    done.add("info", "wrote-root", f"{LOG_DIR}/{op_id}{SEGMENT_SUFFIX}", 1,
             f"wrote operation {op_id} creating the root, ordered before every other operation")
    data = encode_operation(op)
    if exam.format >= 3:
        data = with_prev(data, GENESIS)  # the chain starts here now
    if exam.format >= 2 and exam.segments:  # a format-2 segment of its own: checksummed and sealed
        data = with_checksum(data)
        data += encode_seal(data, exam.segments[0].name)
    return op_id, data


def _build_log(directory: Path, bodies: dict[str, bytes], root: tuple[str, bytes] | None) -> None:
    """Build the repaired log in ``log.compacting/`` — repaired segments written anew, every
    other entry of ``log/`` hard-linked (copied where links fail), so nothing else changes —
    for ``logswap.swap_in`` to put in place atomically. If that fails (a full disk), the
    partial ``log.compacting/`` is removed and the error raised."""
    target = logswap.new_log_dir(directory)
    source = directory / LOG_DIR
    try:
        for entry in sorted(os.listdir(source)):
            stem = entry[: -len(SEGMENT_SUFFIX)] if entry.endswith(SEGMENT_SUFFIX) else None
            if stem is not None and stem in bodies:
                logswap.write_segment(target, stem, bodies[stem])
            elif (source / entry).is_dir():
                shutil.copytree(source / entry, target / entry)
            else:
                try:
                    os.link(source / entry, target / entry)
                except OSError:
                    shutil.copy2(source / entry, target / entry)
        if root is not None:
            logswap.write_segment(target, *root)
        logswap.seal(target)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _quarantine_entries(directory: Path) -> set[str] | None:
    """The names in ``quarantine/`` (None when there is no such directory)."""
    folder = directory / QUARANTINE_DIR
    return set(os.listdir(folder)) if folder.is_dir() else None


def _drop_quarantined_since(directory: Path, kept: set[str] | None) -> None:
    """Remove what was added to ``quarantine/`` since it held ``kept`` (the folder too, if it
    was not there): copies of bytes the log still holds, for a repair that did not finish."""
    folder = directory / QUARANTINE_DIR
    if kept is None:
        shutil.rmtree(folder, ignore_errors=True)
        return
    with contextlib.suppress(OSError):
        for name in set(os.listdir(folder)) - kept:
            (folder / name).unlink()
        fsync_directory(folder)


def _retire_dangling(directory: Path, exam: _Examination, done: _Findings) -> None:
    """Append one operation that retires every link and relation naming an entity the log
    never wrote (kwtree.engine.references): the rows stay in the log, and nothing else changes."""
    if exam.state is None or not exam.operations:
        return
    references = to_retire(exam.state, exam.operations)
    if not references:
        return
    op_id, timestamp = _next_op(exam)
    keys = [ref.key for ref in references]
    retired = tuple(retire_link(ref.entity, op_id) if type(ref.entity) is Link else retire_relation(ref.entity, op_id)
                    for ref in references)  # a tombstone for each, the rows stay in the log
    op = Operation(op_id, REPAIR_KIND, REPAIR_KIND, timestamp, retired,
                   {"repair": "retired links and relations naming an entity the log never wrote", "retired": keys})
    _append(directory, exam, encode_operation(op))
    for ref in references:
        done.add("info", "retired", None, None,
                 f"{ref.kind} {ref.key} names {ref.missing}, which the log never wrote: retired it by operation "
                 f"{op_id} (its rows stay in the log; once what it names is back, undo({op_id}) revives it)")


def _replace_manifest(directory: Path, version: int, done: _Findings) -> None:
    path = directory / MANIFEST_NAME
    if path.exists():
        quarantine = directory / QUARANTINE_DIR
        make_dir(quarantine, PRIVATE_FILE_MODE, exist_ok=True)
        target = quarantine / f"{MANIFEST_NAME}.{time.time_ns()}.bad"
        os.replace(path, target)
        fsync_directory(quarantine)
        done.add("info", "quarantined", MANIFEST_NAME, None,
                 f"moved the unreadable manifest to {QUARANTINE_DIR}/{target.name}")
    dataclasses.replace(Manifest.new(), format=version).save(directory)
    done.add("info", "wrote-manifest", MANIFEST_NAME, None,
             f"wrote a new manifest (format {version}, as the log is written; default segment size)")
