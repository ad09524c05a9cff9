"""How ``verify`` reads one log segment: its lines grouped into complete operations (each
decided valid with replay's own code), damaged spans (a line that is not a row, a NUL byte
or zeroed block, an operation missing rows, a changed checksum), a torn tail, and the seal
lines that end a sealed segment (format 2). ``kwtree.ops.verify`` judges the whole directory
from what this finds; ``kwtree.ops.repair`` cuts the spans.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from kwtree.engine.events import DECODERS
from kwtree.engine.replay import Damage, RawOperation, replay_sorted, scan_operations
from kwtree.engine.state import State
from kwtree.errors import CorruptLogError
from kwtree.models import EMPTY_METADATA, ROOT_ID, Keyword
from kwtree.stores.eventlog import QUARANTINE_DIR, seals_start

__all__ = ["Findings", "Segment", "SegmentReader", "Span", "Validator", "root_keyword", "scratch_state", "short"]


class Findings(Protocol):
    """Where findings go (``kwtree.ops.verify`` collects them)."""

    def add(self, severity: str, code: str, file: str | None, line: int | None, message: str) -> None: ...


@dataclass(slots=True)
class Span:
    """A byte range of a segment that repair moves to quarantine."""

    start: int
    end: int
    line: int  # of its first byte
    last_line: int
    kind: str  # "bad" (damaged lines and their operations), "tail" (incomplete end)
    reason: str = ""


@dataclass(slots=True)
class Segment:
    name: str
    rel: str  # "log/<name>.jsonl"
    newest: bool
    size: int = 0
    data_end: int = 0
    spans: list[Span] = field(default_factory=list)
    seals: list[dict[str, Any]] = field(default_factory=list)  # what its seal lines say
    seals_at: int = 0  # where they begin (the end of its operations)
    seals_line: int = 0  # the line of the first
    crc: int = 0  # of the bytes before them


class Validator:
    """Decides whether a complete group of rows is a valid operation, with replay's code, and
    applies each valid one, in file order, to ``state``: for a log in op-id order (the usual
    case) that is the state opening gives, so the log is not replayed twice."""

    def __init__(self) -> None:
        self.state = scratch_state()
        #: The ids of the operations that come right after damage in the log (a damaged span,
        #: the end of a sealed segment): the ``prev`` each names may be an operation the damage
        #: cost (the hash chain, kwtree.ops.verify_chain).
        self.after_damage: set[str] = set()
        self.damage_pending = False

    def problem(self, raw: RawOperation) -> tuple[int, str] | None:
        """(line, message) of what makes ``raw`` unusable, or None (and it was applied)."""
        found = history_problem(raw)  # first: replay_sorted applies what it accepts
        if found is not None:
            return found
        try:
            replay_sorted(self.state, [raw])  # the rows and the end marker, as opening reads them
        except CorruptLogError as exc:
            return exc.line, exc.detail
        return None


def history_problem(raw: RawOperation) -> tuple[int, str] | None:
    """What in ``raw`` history() and undo() could not read though replay can: a before-image
    (decoded by the same DECODERS) or an audit that is not an object."""
    for offset, row in enumerate(raw.rows):
        before, decode = row.get("before"), DECODERS.get(row.get("entity"))  # type: ignore[arg-type]
        if before is None or decode is None:
            continue  # (an unknown entity is replay's to report)
        try:
            decode(before, before["op"])
        except (KeyError, TypeError, ValueError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            return raw.first_line + offset, (f"unreadable before-image ({detail}); history() and undo() "
                                             "would fail on its operation")
    end = raw.rows[-1]["end"]
    audit = end.get("audit") if type(end) is dict else None
    if audit and type(audit) is not dict:
        return raw.first_line + len(raw.rows) - 1, "the end marker's audit is not an object"
    return None


def root_keyword(op_id: str, timestamp: float) -> Keyword:
    return Keyword(ROOT_ID, "root", (), None, "", EMPTY_METADATA, 1, timestamp, timestamp, False, op_id)


def scratch_state() -> State:
    state = State()
    state.put_keyword(root_keyword("0" * 32, 0.0))
    return state


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class SegmentReader:
    """Sorts the lines of one segment, as the log's grouper reads them past damage
    (``kwtree.engine.replay.scan_operations``), into complete valid operations and damaged
    spans, and reports each piece of damage once, at its cause."""

    def __init__(
        self, segment: Segment, raw: bytes, validator: Validator, findings: Findings, *, checksums: bool,
    ) -> None:
        self.checksums = checksums  # format 2: every operation has one
        self.segment = segment
        self.raw = raw
        self.validator = validator
        self.findings = findings
        self.operations: list[RawOperation] = []
        self._bad: list[tuple[int, int, int, int]] = []  # (start, end, first line, last line) of damaged bytes
        self._causes: list[tuple[int, str, str]] = []  # (line, code, message) of primary causes
        self._kept_end = -1  # where the last operation kept ends (-1: none yet in this segment)

    def _lost_rows(self, first: int, rows: Sequence[dict[str, Any]]) -> bool:
        """True if the rows starting at byte ``first`` follow damage and end with an end row
        announcing more rows than they are: the rest of an operation whose first rows were
        lost, which has no cause of its own."""
        end = rows[-1].get("end")
        announced = end.get("rows") if type(end) is dict else None
        follows_damage = bool(self._bad) and self._bad[-1][1] == first
        return follows_damage and type(announced) is int and announced > len(rows)

    def read(self) -> None:
        raw, segment = self.raw, self.segment
        segment.size = len(raw)
        segment.data_end = len(raw.rstrip(b"\0"))  # zero padding after the data is not data
        content_end = self._read_seals(segment.data_end)
        lines = raw[:content_end].split(b"\n")
        lines.pop()  # the bytes after the last newline: a torn line, or nothing
        starts = [0, *itertools.accumulate(len(line) + 1 for line in lines)]
        rests: dict[int, int] = {}  # line index -> where the row making up the end of that damaged line begins
        consumed = 0  # bytes before it are reported (an operation, or damage)
        last_end = (0, 1)  # (byte, line) just after the last end row
        for item in scan_operations(lines, segment.rel, 1, checksums=self.checksums):
            if isinstance(item, Damage):
                at = rests.get(item.start, starts[item.start])
                if item.kind == "line":
                    stop = at + item.cut if item.cut >= 0 else starts[item.stop]
                    if item.cut >= 0:
                        rests[item.start] = stop
                    self._bad.append((at, stop, item.line, item.line))
                    self._causes.append((item.line, item.code, item.why))
                    consumed = stop
                    continue
                # An operation cut short by the damaged line reported next has no cause of its
                # own, nor has the rest of one that lost its first rows.
                own = item.code != "" and not (item.code == "incomplete-operation" and self._bad
                                              and self._bad[-1][1] == at)
                if item.code == "checksum":
                    own = not self._lost_rows(at, item.rows)
                    last_end = (starts[item.stop], item.stop + 1)
                if own:
                    self._causes.append((item.line, item.code, item.why))
                self._bad.append((at, starts[item.stop], item.start + 1, item.stop))
                consumed = starts[item.stop]
                continue
            op_id, first, stop, rows, _ = item
            at = rests.get(first, starts[first])
            consumed, last_end = starts[stop], (starts[stop], stop + 1)
            if self._lost_rows(at, rows):
                self._bad.append((at, starts[stop], first + 1, stop))
                continue
            operation = RawOperation(op_id, rows, segment.rel, first + 1, raw[at:starts[stop]])
            problem = self.validator.problem(operation)
            if problem is None:
                self.operations.append(operation)
                self._follows_damage(operation, at, starts[stop])
                continue
            self._causes.append((problem[0], "invalid-operation", problem[1]))
            self._bad.append((at, starts[stop], first + 1, stop))
        if self._torn_after(*last_end, content_end):
            return
        self._report_bad()
        self._report_tail(min(consumed, starts[-1]), starts[-1], content_end)
        if any(span.end > self._kept_end for span in segment.spans):
            self.validator.damage_pending = True  # damage ends the segment: the next one's first follows it
        if segment.data_end < len(raw) and not segment.newest:
            self.findings.add("info", "padding", segment.rel, None,
                              f"sealed segment ends with {len(raw) - segment.data_end} bytes of zero padding "
                              "(harmless)")

    def _follows_damage(self, operation: RawOperation, start: int, end: int) -> None:
        """Note ``operation`` (bytes ``start`` to ``end`` of the segment) as coming right after
        damage, when damage lies between it and the operation kept before it (in this segment,
        or at the end of an earlier one: ``Validator.damage_pending``)."""
        validator = self.validator
        if self._bad and self._bad[-1][1] > self._kept_end and self._bad[-1][0] < start:
            validator.damage_pending = True
        self._kept_end = end
        if validator.damage_pending:
            validator.after_damage.add(operation.op_id)
            validator.damage_pending = False

    def _read_seals(self, data_end: int) -> int:
        """Read the seal lines that end the segment; returns where they begin."""
        raw, segment = self.raw, self.segment
        start = seals_start(raw[:data_end])
        for text in raw[start:data_end].split(b"\n"):
            if not text:
                continue
            try:
                seal = orjson.loads(text)["seal"]
                if type(seal["next"]) is not str or type(seal["bytes"]) is not int or type(seal["crc"]) is not int:
                    raise TypeError("next must be a string, bytes and crc integers")
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                line = raw.count(b"\n", 0, start) + 1
                reason = f"unreadable seal line ({exc}): the segment counts as unsealed"
                self.findings.add("warning", "seal", segment.rel, line, reason)
                continue
            segment.seals.append(seal)
        segment.seals_at = start
        segment.seals_line = raw.count(b"\n", 0, start) + 1
        segment.crc = zlib.crc32(raw[:start])
        return start

    def _torn_after(self, start: int, first: int, content_end: int) -> bool:
        """Report what follows the last end row of the newest segment as one torn tail when a
        NUL byte lies in it and only rows precede that NUL there (what a torn write with a gap
        leaves; replay ignores it the same way). False, having done nothing, otherwise."""
        raw, segment = self.raw, self.segment
        nul = raw.find(b"\0", start, content_end)
        if not segment.newest or nul < 0:
            return False
        nul_line = raw.rfind(b"\n", 0, nul) + 1
        if any(start <= bad < nul_line for bad, _, _, _ in self._bad):
            return False
        self._bad = [entry for entry in self._bad if entry[0] < start]
        self._causes = [cause for cause in self._causes if cause[0] < first]
        self._report_bad()
        reason = (f"an incomplete operation with a NUL gap ({content_end - start} bytes from byte {start}) ends the "
                  "newest segment, with nothing after it that completes an operation: the torn write of a crashed "
                  f"writer; readers ignore it, and `kwtree repair` or the next write moves it to {QUARANTINE_DIR}/")
        self.findings.add("warning", "torn-tail", segment.rel, first, reason)
        last = raw.count(b"\n", 0, content_end) + (0 if raw[content_end - 1:content_end] == b"\n" else 1)
        segment.spans.append(Span(start, content_end, first, last, "tail", reason))
        return True

    def _report_bad(self) -> None:
        spans: list[Span] = []
        for start, end, line, last_line in self._bad:
            if spans and spans[-1].end == start:
                spans[-1].end, spans[-1].last_line = end, last_line
            else:
                spans.append(Span(start, end, line, last_line, "bad"))
        causes = sorted(self._causes)
        for span in spans:
            inside = [c for c in causes if span.line <= c[0] <= span.last_line] or [
                (span.line, "unreadable-row", "damaged lines")
            ]
            lines = f"line {span.line}" if span.line == span.last_line else f"lines {span.line}-{span.last_line}"
            span.reason = inside[0][2]
            for index, (line, code, message) in enumerate(inside):
                if index == 0:
                    message += (f" ({lines}, {span.end - span.start} bytes, cannot be used: operations are kept "
                                f"whole; `kwtree repair` moves them to {QUARANTINE_DIR}/)")
                self.findings.add("error", code, self.segment.rel, line, message)
        self.segment.spans.extend(spans)

    def _report_tail(self, start: int, pos: int, data_end: int) -> None:
        """Report what follows the last reported byte, ``start``, as a torn or sealed tail:
        rows without their end row, and the torn line at ``pos`` (after the last newline)."""
        if start >= data_end:
            return
        first = self.raw.count(b"\n", 0, start) + 1
        line = self.raw.count(b"\n", 0, pos) + 1  # of the torn line
        size = data_end - start
        segment = self.segment
        if segment.newest:
            reason = (f"an incomplete operation ({size} bytes from byte {start}) ends the newest segment: the torn "
                      "write of a crashed writer (or a write in progress); readers ignore it, and `kwtree repair` "
                      f"or the next write moves it to {QUARANTINE_DIR}/")
            self.findings.add("warning", "torn-tail", segment.rel, first, reason)
        else:
            reason = (f"sealed segment ends with an incomplete operation ({size} bytes from byte {start}); "
                      "opening fails on it")
            self.findings.add("error", "sealed-tail", segment.rel, first, reason)
        last = line if pos < data_end else line - 1
        segment.spans.append(Span(start, data_end, first, last, "tail", reason))
