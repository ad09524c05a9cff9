"""Checking a data directory (``verify``); ``kwtree.ops.repair`` mends what it finds.

Both work on a directory, not on an open tree, because a log with a damaged line in the
middle cannot be opened. ``verify_directory`` reads the manifest, every log segment and the
caches' metadata and returns a :class:`Report` of :class:`Finding` objects; it never writes
and never takes the writer lock (diskcache's ``Cache.check`` is the model). Severities:

- **error** — damage, or something that stops the directory from opening or gives wrong
  answers: an unreadable line, an operation missing rows in the middle of the log or at the
  end of a sealed segment, an invalid op id, a NUL byte or zeroed block that hides the
  operations after it, an operation before the root, an unreadable manifest, a cache whose
  watermark names an operation the log lacks, a link or relation naming an entity the log
  never wrote (kwtree.engine.references); and a forget whose erasure of the log did not finish:
  rows of the entities it erased still hold their text (``forget-unfinished``).
  ``repair`` fixes each of these (a manifest of a newer format excepted; an unfinished forget
  only ``KeywordTree.repair`` and the tree's other writers, which purge the caches too).
- **warning** — what merged histories and crashes legitimately leave (DESIGN §3): a torn
  tail of the newest segment, copies of one operation, two rows with one stored version, moves
  replay skipped because they would close a cycle, keywords re-homed under the root, links
  and relations to deleted entities (inert), sibling keywords with one name.
- **info** — facts worth knowing: operations out of id order, padding, quarantined files.

Operation validity is decided by the same code replay uses (``replay_sorted``, one operation
at a time, for the rows and the end marker; the same ``DECODERS`` for the before-images that
history and undo read), so verify calls an operation damaged exactly when opening or
``history`` would fail on it. Only the grouping of lines is done apart (kwtree.ops.verify_segments, which
also reads seal lines), because replay stops at the first bad line and verify has to go on past it.
With format 2, the seal lines are checked here too: every named successor exists and every sealed
segment still holds the bytes it was sealed with.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kwtree.engine.events import NOTE_ENTITY, is_digest, is_op_id
from kwtree.engine.references import reference_findings
from kwtree.engine.replay import RawOperation, replay_sorted
from kwtree.engine.state import State
from kwtree.errors import (
    CorruptLogError,
    DamagedDirectoryError,
    FormatError,
    InvalidInputError,
    KwtreeError,
    NotFoundError,
    StorageError,
)
from kwtree.models import ROOT_ID
from kwtree.ops.erasure import find_unfinished
from kwtree.ops.verify_chain import Chain, check_chain
from kwtree.ops.verify_checkpoint import check_checkpoint
from kwtree.ops.verify_fulltext import check_fulltext
from kwtree.ops.verify_log import LOCKED_READ_TIMEOUT, REREADS, Replaced, read_log
from kwtree.ops.verify_segments import (
    Segment,
    SegmentReader,
    Validator,
    scratch_state,
    short,
)
from kwtree.ops.verify_vectors import check_vectors
from kwtree.stores import logswap
from kwtree.stores.directory import CACHE_DIR
from kwtree.stores.eventlog import LOG_DIR, QUARANTINE_DIR, SEGMENT_SUFFIX
from kwtree.stores.lock import held, run_locked
from kwtree.stores.manifest import FORMAT_VERSION, MANIFEST_NAME, Manifest
from kwtree.stores.postgres import opener, recorded
from kwtree.validate import clean_path, shown

__all__ = [
    "SEVERITIES",
    "Finding",
    "Report",
    "segments_directory",
    "verify_directory",
]

SEVERITIES = ("error", "warning", "info")
#: At most this many findings of one code are listed; one more says how many were left out.
MAX_PER_CODE = 100


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem or fact: ``severity`` ("error", "warning" or "info"), a short ``code``
    (see docs/operations.md), the ``file`` relative to the directory (None for the
    directory itself), the 1-based ``line`` when it is about a line, and the ``message``."""

    severity: str
    code: str
    file: str | None
    line: int | None
    message: str

    @property
    def location(self) -> str:
        """``file:line``, ``file``, or ``-``."""
        if self.file is None:
            return "-"
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.severity}\t{self.location}\t{self.message}"


@dataclass(frozen=True, slots=True)
class Report:
    """What ``verify`` found (or ``repair`` did, then found) in ``directory``: the findings,
    errors first in file order, and the size of the log it read — ``segments`` (files),
    ``operations`` (distinct complete ones), ``rows`` (of those operations, copies counted)
    and ``bytes`` (data bytes, padding excluded). ``ok`` is True when no finding is an error."""

    directory: str
    findings: tuple[Finding, ...]
    segments: int = 0
    operations: int = 0
    rows: int = 0
    bytes: int = 0
    head: str | None = None
    head_op: str | None = None
    chain_notes: tuple[str, ...] = ()
    ok: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", not any(f.severity == "error" for f in self.findings))

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def to_text(self) -> str:
        """One ``severity<TAB>file:line<TAB>message`` line per finding, then a ``summary`` line."""
        errors, warnings = len(self.errors), len(self.warnings)
        head = f", head {self.head} (operation {self.head_op})" if self.head is not None else ""
        summary = (f"summary\t{self.directory}\t{self.segments} segment(s), {self.operations} operation(s), "
                   f"{self.rows} row(s), {self.bytes} bytes{head}: {errors} error(s), {warnings} warning(s)")
        return "\n".join([*map(str, self.findings), summary])

    def check(self, hint: str = "") -> None:
        """Raise DamagedDirectoryError (with ``hint`` appended to its message) if any finding
        is an error."""
        if not self.ok:
            first = self.errors[0]
            raise DamagedDirectoryError(
                f"{self.directory} has {len(self.errors)} error(s), the first at {first.location}"
                f"{'; ' + hint if hint else ''}",
                self,
            )

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON data."""
        return {
            "directory": self.directory,
            "ok": self.ok,
            "segments": self.segments,
            "operations": self.operations,
            "rows": self.rows,
            "bytes": self.bytes,
            "head": self.head,
            "head_op": self.head_op,
            "chain_notes": list(self.chain_notes),
            "findings": [
                {"severity": f.severity, "code": f.code, "file": f.file, "line": f.line, "message": f.message}
                for f in self.findings
            ],
        }


class _Findings:
    """Collects findings, listing at most MAX_PER_CODE of each code."""

    def __init__(self) -> None:
        self.items: list[Finding] = []
        self._counts: dict[str, int] = {}

    def add(self, severity: str, code: str, file: str | None, line: int | None, message: str) -> None:
        count = self._counts.get(code, 0) + 1
        self._counts[code] = count
        if count <= MAX_PER_CODE:
            self.items.append(Finding(severity, code, file, line, message))

    def result(self) -> list[Finding]:
        items = list(self.items)
        for code, count in self._counts.items():
            if count > MAX_PER_CODE:
                severity = next(f.severity for f in self.items if f.code == code)
                left = f"{count - MAX_PER_CODE} more {code!r} findings not listed"
                items.append(Finding(severity, code, None, None, left))
        rank = {severity: index for index, severity in enumerate(SEVERITIES)}
        return sorted(items, key=lambda f: rank[f.severity])  # stable: file order within a severity


# --- the whole directory --------------------------------------------------------------------


@dataclass(slots=True)
class _Cache:
    directory: Path  # the cache's own directory (holding meta.json)
    rel: str
    watermark: str | None = None
    has_watermark: bool = False
    problem: str | None = None


@dataclass(slots=True)
class _Examination:
    """Everything verify learned, and what repair needs to act on it."""

    directory: Path
    findings: _Findings
    segments: list[Segment] = field(default_factory=list)
    operations: list[RawOperation] = field(default_factory=list)  # distinct, in op-id order
    rows: int = 0
    bytes: int = 0
    manifest_problem: str | None = None  # "newer", "unreadable" or "missing"
    needs_root: bool = False
    format: int = 0  # the manifest's (0 when unreadable)
    in_order: bool = True  # operations in the files in op-id order, no copies
    caches: list[_Cache] = field(default_factory=list)
    state: State | None = None  # the state replay gives (None if it could not be built)
    chain: Chain | None = None  # the log's head (None when no operation carries a link)
    lost: tuple[str, ...] = ()  # the digests of operations damage cost (Chain.lost): what repair records

    def report(self, before: Iterable[Finding] = ()) -> Report:
        chain = self.chain
        return Report(str(self.directory), (*before, *self.findings.result()), len(self.segments),
                      len(self.operations), self.rows, self.bytes, chain.head if chain else None,
                      chain.head_op if chain else None, chain.notes if chain else ())


def _clean_directory(path: object) -> Path:
    directory = clean_path(path, "path")
    if not directory.exists():
        raise NotFoundError(f"{directory} does not exist; pass the data directory of a tree")
    if not directory.is_dir():
        raise InvalidInputError(f"{directory} is a file, not a directory; pass the data directory of a tree")
    if not (directory / MANIFEST_NAME).exists() and not (directory / LOG_DIR).is_dir():
        raise NotFoundError(f"{directory} is not a kwtree directory (it has neither {MANIFEST_NAME} nor {LOG_DIR}/)")
    return directory


def segments_directory(path: object, what: str) -> Path:
    """``path`` cleaned as verify takes it, for a call that rewrites JSONL segment files
    (``what``): StorageError for a directory whose log is in PostgreSQL."""
    directory = _clean_directory(path)
    elsewhere = recorded(directory)
    if elsewhere is not None:
        raise StorageError(f"{what} rewrites the JSONL segments of a tree's directory; {directory} holds only caches: "
                           f"its log is in PostgreSQL ({elsewhere}) (docs/scaling.md)")
    return directory


def _check_manifest(exam: _Examination) -> None:
    directory = exam.directory
    exam.format = _manifest_format(directory)
    if exam.format and exam.format < FORMAT_VERSION:
        exam.findings.add("info", "old-format", MANIFEST_NAME, None,
                          f"the directory uses format {exam.format}: its operations carry no checksums and its "
                          f"segments no seals, so changed bytes and missing segments go unnoticed; "
                          f"`kwtree upgrade {directory}` moves it to format {FORMAT_VERSION}")
    if not (directory / MANIFEST_NAME).exists():
        exam.manifest_problem = "missing"
        exam.findings.add("error", "manifest", MANIFEST_NAME, None,
                          f"{MANIFEST_NAME} is missing: opening fails; `kwtree repair` writes a new one")
        return
    try:
        Manifest.load(directory)
    except FormatError as exc:
        newer = _manifest_format(directory) > FORMAT_VERSION
        exam.manifest_problem = "newer" if newer else "unreadable"
        hint = "" if newer else f"; `kwtree repair` moves it to {QUARANTINE_DIR}/ and writes a new one"
        exam.findings.add("error", "manifest", MANIFEST_NAME, None, f"{exc}{hint}")


def _manifest_format(directory: Path) -> int:
    """The format number the manifest names (0 if it names none)."""
    try:
        found = orjson.loads((directory / MANIFEST_NAME).read_bytes()).get("format")
    except (OSError, ValueError, AttributeError):
        return 0
    return found if type(found) is int else 0


def _read_caches(exam: _Examination) -> None:
    """Read every cache's meta.json (before the log: a watermark read first can only name an
    operation that is already in the log when the log is read)."""
    root = exam.directory / CACHE_DIR
    if not root.is_dir():
        return
    taken: list[Path] = []
    for meta_path in sorted(root.glob("**/meta.json"), key=lambda p: (len(p.parts), p)):
        if any(parent in taken for parent in meta_path.parents):
            continue  # a file of a cache found already (tantivy keeps a meta.json of its own)
        taken.append(meta_path.parent)
        cache = _Cache(meta_path.parent, str(meta_path.relative_to(exam.directory)))
        try:
            meta = orjson.loads(meta_path.read_bytes())
            if type(meta) is not dict:
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            cache.problem = f"unreadable ({exc})"
            exam.findings.add("warning", "cache-meta", cache.rel, None,
                              f"cache metadata is {cache.problem}: the cache is rebuilt when the tree opens; "
                              "`kwtree repair` deletes it now")
            exam.caches.append(cache)
            continue
        if "watermark" in meta:
            cache.has_watermark = True
            cache.watermark = meta["watermark"]
        exam.caches.append(cache)


def _read_store(exam: _Examination, validator: Validator, url: str) -> list[RawOperation]:
    """Read the log kept in PostgreSQL (``url``, which the directory recorded) through a
    read-only store; each batch of operations is checked as a segment's are (a database
    tears nothing: there are no seals, torn tails or checksums). StorageError when the
    database cannot be reached."""
    store = opener(url)(exam.directory, writable=False, durable=True, lock_timeout=10.0)
    found: list[RawOperation] = []
    try:
        for batch in store.read(None):
            source = Segment(batch.source, batch.source, newest=True)
            reader = SegmentReader(source, batch.data, validator, exam.findings, checksums=batch.checksums)
            reader.read()
            exam.bytes += len(batch.data)
            found.extend(reader.operations)
    finally:
        store.close()
    return found


def _check_chain(exam: _Examination) -> None:
    """The seal lines (format 2): each sealed segment's successor exists — else a segment
    is missing, the newest one too — and its bytes are those it was sealed with."""
    findings = exam.findings
    names = {segment.name for segment in exam.segments}
    for segment in exam.segments:
        line = segment.seals_line
        for seal in segment.seals:
            successor = seal["next"]
            if successor not in names:
                findings.add("error", "missing-segment", segment.rel, line,
                             f"the segment's seal names its successor {LOG_DIR}/{successor}{SEGMENT_SUFFIX}, "
                             "which is missing: the operations it held are lost (a deleted file, a partial copy or "
                             "restore); put it back from a backup or snapshot, or let `kwtree repair` accept the loss")
            if seal["bytes"] == segment.seals_at and seal["crc"] == segment.crc:
                continue
            if segment.seals_at > seal["bytes"]:
                findings.add("warning", "sealed-grew", segment.rel, line,
                             f"the segment holds {segment.seals_at} bytes of operations, {seal['bytes']} when it was "
                             "sealed: a merge of two branches added operations to it (replay reads them all)")
            else:
                findings.add("error", "sealed-changed", segment.rel, line,
                             f"the segment holds {segment.seals_at} bytes of operations with CRC-32 {segment.crc}; "
                             f"it was sealed with {seal['bytes']} bytes and CRC-32 {seal['crc']}: bytes were lost or "
                             "changed since (operations may be missing); `kwtree repair` seals what is left")
        successors = sorted({seal["next"] for seal in segment.seals})
        if len(successors) > 1:
            findings.add("warning", "segment-fork", segment.rel, line,
                         f"two branches each started a new segment after this one ({', '.join(successors)}) and were "
                         "merged: replay reads both")
        if exam.format >= 2 and not segment.seals and not segment.newest:
            findings.add("warning", "unsealed", segment.rel, None,
                         "a segment that is not the newest has no seal line: a writer stopped between starting the "
                         "next segment and sealing this one, or a branch's newest segment came in by a merge")


def _after_damage(exam: _Examination, found: list[RawOperation], validator: Validator) -> set[str]:
    """The operations right after damage (``Validator.after_damage``), with the first of each
    segment that follows a missing one (its predecessor was lost with it) or one without its
    seal, every operation of a segment that changed since it was sealed and the first of the
    next (the operations it lost are unknown: any of them may have been one's predecessor),
    and the first of a log that lost its start. Only a break is excused by it: an operation
    whose predecessor is not in the log at all."""
    after = set(validator.after_damage)
    names = [segment.name for segment in exam.segments]
    lost = {seal["next"] for segment in exam.segments for seal in segment.seals if seal["next"] not in names}
    changed = [segment for segment in exam.segments if any(
        (seal["bytes"], seal["crc"]) != (segment.seals_at, segment.crc) and segment.seals_at <= seal["bytes"]
        for seal in segment.seals)]
    damaged: set[str] = {segment.rel for segment in changed}
    # A segment with a successor but no seal may have lost its end (cut short, emptied).
    unsealed = [segment.name for segment in exam.segments
                if exam.format >= 2 and not segment.seals and not segment.newest]
    for name in [*lost, *(segment.name for segment in changed), *unsealed]:
        following = [segment for segment in exam.segments if segment.name > name]
        if following:
            first = next((raw for raw in found if raw.path == following[0].rel), None)
            if first is not None:
                after.add(first.op_id)
    after.update(raw.op_id for raw in found if raw.path in damaged)
    if exam.needs_root and exam.operations:  # the log lost its start: the first left follows what went with it
        after.add(exam.operations[0].op_id)
    return after


def _check_operations(exam: _Examination, found: list[RawOperation]) -> None:
    """Copies, order and the root; sets ``exam.operations`` (distinct, in op-id order)."""
    findings = exam.findings
    first_copy: dict[str, RawOperation] = {}
    distinct: list[RawOperation] = []
    in_order = True
    previous = ""
    for raw in found:
        exam.rows += len(raw.rows)
        if raw.op_id <= previous:
            in_order = False
        previous = raw.op_id
        original = first_copy.get(raw.op_id)
        if original is None:
            first_copy[raw.op_id] = raw
            distinct.append(raw)
            continue
        same = "an identical copy" if original.rows == raw.rows else "a DIFFERENT copy (replay uses the first)"
        findings.add("warning", "duplicate-operation", raw.path, raw.first_line,
                     f"operation {raw.op_id} is {same} of the one at {original.path}:{original.first_line} "
                     "(merged histories); replay applies it once")
    exam.in_order = in_order
    if not in_order:
        findings.add("info", "out-of-order", None, None,
                     "operations are not in op-id order (a merged log): opening replays them sorted, which is "
                     "slower than the in-order path")
    distinct.sort(key=lambda raw: raw.op_id)
    exam.operations = distinct
    if not distinct:
        return
    first = distinct[0]
    roots = [row["entity"] == "keyword" and row.get("id") == ROOT_ID for row in first.rows]
    # Opening replays an in-order log as it reads it, which needs the root as the first row;
    # an out-of-order log is replayed sorted, which needs the first operation to hold only it.
    if not roots[0] or (not in_order and not all(roots)):
        exam.needs_root = True
        findings.add("error", "row-before-root", first.path, first.first_line,
                     f"operation {first.op_id}, the first in op-id order, writes something other than the root "
                     "keyword (row before the root keyword exists): opening fails; `kwtree repair` writes a new "
                     "root operation before it")


def _entity_key(row: dict[str, Any]) -> tuple[str, ...]:
    entity = row["entity"]
    if entity == "link":
        return ("link", row["info_id"], row["keyword_id"])
    if entity == "relation":
        return ("relation", row["from_id"], row["to_id"], row["type"])
    return (entity, row["id"])


def _check_versions(exam: _Examination) -> dict[str, tuple[str | None, bool]]:
    """Stored versions per entity; returns each keyword's last stored (parent id, deleted)."""
    findings = exam.findings
    last: dict[tuple[str, ...], int] = {}
    parents: dict[str, tuple[str | None, bool]] = {}
    for raw in exam.operations:
        compact = raw.rows[-1]["end"].get("kind") == "compact"
        for offset, row in enumerate(raw.rows):
            if row["entity"] == NOTE_ENTITY:
                continue  # a note has no entity and no version
            key = _entity_key(row)
            version = row["v"]
            previous = last.get(key)
            last[key] = version
            if row["entity"] == "keyword":
                parents[row["id"]] = (row.get("parent_id"), row.get("deleted") is True)
            name = "/".join(key[1:])
            if previous is None:
                if version != 1 and not compact:
                    message = f"{key[0]} {name}: its first row has stored version {version}, not 1"
                else:
                    continue
            elif version == previous + 1:
                continue
            elif version == previous:
                message = (f"{key[0]} {name}: two rows with stored version {version} (merged histories); "
                           "replay counts the writes it applies")
            else:
                message = (f"{key[0]} {name}: stored version {version} follows {previous}; replay counts the "
                           "writes it applies")
            findings.add("warning", "version", raw.path, raw.first_line + offset, message)
    return parents


def _replay(exam: _Examination, validator: Validator) -> State | None:
    """The state replay gives, with a root in place first: so the first operation may hold
    more than the root (as a compacted log's does), and a log that needs a root is checked as
    it will be once repair has written one."""
    if exam.in_order:
        return validator.state  # it applied the operations in op-id order already
    state = scratch_state()
    try:
        replay_sorted(state, exam.operations)
    except CorruptLogError as exc:  # not expected: every operation was validated alone
        exam.findings.add("error", "replay", exc.path, exc.line, exc.detail)
        return None
    return state


def _check_tree(exam: _Examination, state: State, stored: dict[str, tuple[str | None, bool]]) -> None:
    findings = exam.findings
    keywords = state.keywords
    root = keywords.get(ROOT_ID)
    if root is None or root.deleted or root.parent_id is not None:
        findings.add("error", "tree", None, None, "the replayed tree has no live root")
        return
    for kid, keyword in keywords.items():
        if keyword.deleted or kid == ROOT_ID:
            continue
        seen = {kid}
        node = keyword
        while node.parent_id is not None:
            parent = keywords.get(node.parent_id)
            if parent is None or parent.deleted or parent.id in seen:
                findings.add("error", "tree", None, None,
                             f"keyword {kid} does not reach the root in the replayed tree (a replay bug)")
                break
            seen.add(parent.id)
            node = parent
        parent_id, _ = stored.get(kid, (None, False))
        if parent_id == keyword.parent_id:
            continue
        where = keywords.get(parent_id) if parent_id is not None else None
        if parent_id is None:
            why = "its row has no parent_id; it lives under the root"
        elif where is None:
            why = f"its stored parent {parent_id} was never written; it lives under the root"
        elif where.deleted:
            why = f"its stored parent {parent_id} is deleted; it was re-homed under the root"
        elif state.is_descendant(parent_id, kid):
            why = (f"the move under {parent_id} would form a cycle (concurrent moves in merged histories); "
                   f"replay skipped it and kept it under {keyword.parent_id}")
        else:
            why = f"it was re-homed under the root when its parent {parent_id} was deleted"
        findings.add("warning", "parent", None, None, f"keyword {kid} ({keyword.name!r}): {why}")
    _check_stored_cycles(exam, stored)
    _check_names(exam, state)
    _check_references(exam, state)


def _check_stored_cycles(exam: _Examination, stored: dict[str, tuple[str | None, bool]]) -> None:
    """Cycles in the parent ids of the keywords' last stored rows (what concurrent moves leave)."""
    done: set[str] = set()
    for start in stored:
        path: list[str] = []
        on_path: set[str] = set()
        node: str | None = start
        while node is not None and node not in done and node not in on_path:
            parent, deleted = stored.get(node, (None, True))
            if deleted:
                break
            path.append(node)
            on_path.add(node)
            node = parent
        if node is not None and node in on_path:
            cycle = path[path.index(node):] + [node]
            exam.findings.add("warning", "parent-cycle", None, None,
                              f"the stored parent ids form a cycle {' -> '.join(cycle)} (concurrent moves in merged "
                              "histories); replay skipped the move that would close it")
        done.update(path)


def _check_names(exam: _Examination, state: State) -> None:
    for key, found in state.names.items():
        if type(found) is str:
            continue
        by_parent: dict[str | None, list[str]] = {}
        for kid in found:
            by_parent.setdefault(state.keywords[kid].parent_id, []).append(kid)
        for parent, kids in by_parent.items():
            if len(kids) > 1:
                exam.findings.add("warning", "duplicate-name", None, None,
                                  f"live keywords {', '.join(kids)} under {parent} share the name {key!r} "
                                  "(merged histories); merge_keywords can fold them")


def _check_references(exam: _Examination, state: State) -> None:
    for severity, code, path, line, message in reference_findings(state, exam.operations):
        exam.findings.add(severity, code, path, line, message)


def _check_erasures(exam: _Examination, state: State) -> None:
    """Each forget operation whose erased entities still have rows holding their text (the
    rewrite of the log was stopped by a full disk or a crash; ``kwtree.ops.erasure``)."""
    pending = find_unfinished(exam.operations, state).pending
    for raw in exam.operations:
        rows = pending.get(raw.op_id)
        if rows is None:
            continue
        exam.findings.add(
            "error", "forget-unfinished", raw.path, raw.first_line + len(raw.rows) - 1,
            f"forget operation {raw.op_id} is committed, but {rows} row(s) of the entities it erased still hold "
            "their text: a full disk or a crash stopped the rewrite of the log that erases it. Finish it: call forget "
            f"again (any target), open the tree for writing, call KeywordTree.repair(), or run `kwtree repair "
            f"{exam.directory}`")


def _check_caches(exam: _Examination) -> None:
    known = {raw.op_id for raw in exam.operations}
    for cache in exam.caches:
        if not cache.has_watermark or cache.watermark is None:
            continue
        watermark = cache.watermark
        if not is_op_id(watermark):
            cache.problem = f"its watermark {short(watermark)} is not an op id"
        elif watermark not in known:
            cache.problem = (f"its watermark {watermark} names an operation that is not in the log (the log was "
                             "replaced, cut or repaired under it)")
        else:
            continue
        exam.findings.add("error", "cache-watermark", cache.rel, None,
                          f"{cache.problem}: the cache is ahead of the log and gives wrong answers; "
                          "`kwtree repair` deletes it so that it is rebuilt from the log")


def _note_quarantine(exam: _Examination) -> None:
    quarantine = exam.directory / QUARANTINE_DIR
    if quarantine.is_dir():
        files = [p for p in quarantine.iterdir() if p.is_file() and p.suffix != ".json"]
        if files:
            total = sum(p.stat().st_size for p in files)
            exam.findings.add("info", "quarantine", QUARANTINE_DIR, None,
                              f"{len(files)} file(s), {total} bytes, were moved aside by a writer or a repair "
                              "(see docs/operations.md to put them back by hand)")


def _check_swap(exam: _Examination) -> None:
    for name in (logswap.COMPACTED_DIR, logswap.COMPACTING_DIR, logswap.OLD_LOG_DIR):
        if (exam.directory / name).exists() and not held(exam.directory):  # (held: a replacement in progress)
            complete = " (the new log is complete)" if name == logswap.COMPACTED_DIR else ""
            exam.findings.add("warning", "log-swap", f"{name}/", None,
                              "left by an interrupted log replacement (compaction or repair); the next writer or "
                              f"`kwtree repair` finishes it{complete}")


def _examine(directory: Path, head: str | None = None) -> _Examination:
    """Examine the directory (``_examine_once``), again when another process replaced the log
    while it was read, up to ``REREADS`` times; then once more holding the writer lock, which
    no replacement takes from under it (or, where the lock cannot be had, with a warning)."""
    for _ in range(REREADS):
        try:
            return _examine_once(directory, head)
        except Replaced:
            continue
    try:
        return run_locked(directory, LOCKED_READ_TIMEOUT, lambda _: _examine_once(directory, head))
    except (KwtreeError, OSError):
        exam = _examine_once(directory, head)  # (a replacement now: Replaced, which is a bug to report)
        exam.findings.add("warning", "log-replaced", LOG_DIR, None,
                          f"the log was replaced {REREADS} times while verify read it (a compaction or repair running "
                          "over and over) and the writer lock could not be had: run verify again")
        return exam


def _examine_once(directory: Path, head: str | None) -> _Examination:
    exam = _Examination(directory, _Findings())
    elsewhere = recorded(directory)  # a log in PostgreSQL: the directory holds caches only
    _check_manifest(exam)
    if elsewhere is None:
        _check_swap(exam)
    if exam.manifest_problem == "newer":
        return exam  # another format: its log is not ours to judge
    _read_caches(exam)
    validator = Validator()
    if elsewhere is None:
        segments, found, size = read_log(directory, exam.format, validator, exam.findings)
        exam.segments.extend(segments)
        exam.bytes += size
        _check_chain(exam)
    else:
        exam.findings.add("info", "log-elsewhere", None, None,
                          f"the log is in PostgreSQL ({elsewhere}) and was read through the database; this directory "
                          "holds caches only, which `kwtree repair` rebuilds; damage in the log's rows is mended in "
                          "the database (from its backups), not by repair")
        found = _read_store(exam, validator, elsewhere)
    _check_operations(exam, found)
    merged = not exam.in_order or any(f.code in ("segment-fork", "sealed-grew") for f in exam.findings.items)
    chain = check_chain(found, exam.findings, required=exam.format >= 3 and elsewhere is None,
                        after_damage=_after_damage(exam, found, validator), merged=merged, recorded=head)
    exam.chain = chain if chain.linked or head is not None else None
    exam.lost = chain.lost
    stored = _check_versions(exam)
    state = exam.state = _replay(exam, validator)
    if state is not None:
        _check_tree(exam, state, stored)
        _check_erasures(exam, state)
    _check_caches(exam)
    if state is not None and not any(f.severity == "error" for f in exam.findings.items):
        check_fulltext(exam.directory, state, exam.findings)  # against a log read without damage
        if elsewhere is None:
            check_checkpoint(exam.directory, state, exam.findings)
    check_vectors(exam.directory, exam.findings)  # against their own rows: the log is not needed
    _note_quarantine(exam)
    return exam


def clean_head(head: object) -> str | None:
    """``head`` as ``verify_directory`` takes it (InvalidInputError unless None or a digest)."""
    if head is None:
        return None
    text = head.strip().lower() if isinstance(head, str) else head
    if not is_digest(text):
        raise InvalidInputError(f"head must be the digest of an operation as `kwtree verify --chain` prints it "
                                f"(64 hex digits), got {shown(head)}")
    assert isinstance(text, str)
    return text


def verify_directory(path: str | os.PathLike[str], *, head: str | None = None) -> Report:
    """Check the data directory at ``path`` — manifest, every log segment, the hash chain
    (format 3), the tree replay gives, cache watermarks — and return a :class:`Report`.
    Never writes, never locks, and works on directories that cannot be opened. A directory
    whose log is in PostgreSQL has that log's operations read through the database and
    checked the same way (StorageError when it cannot be reached); it has no segments.

    ``head``, a digest ``Report.head`` gave earlier (kept elsewhere), is looked for: the
    report has a ``chain-head`` error unless an operation of the log has it and reaches the
    log's start through its predecessors, i.e. nothing up to it was changed, removed or
    reordered since. Raises NotFoundError if ``path`` is not a kwtree directory (no manifest
    and no log), InvalidInputError if it is a file or ``head`` is not a digest."""
    recorded = clean_head(head)
    return _examine(_clean_directory(path), recorded).report()
