"""How ``verify`` reads one log segment: its lines grouped into complete operations (each
decided valid with replay's own code), damaged spans (a line that is not a row, a NUL byte
or zeroed block, an operation missing rows, a changed checksum), a torn tail, and the seal
lines that end a sealed segment (format 2). ``kwtree.ops.verify`` judges the whole directory
from what this finds; ``kwtree.ops.repair`` cuts the spans.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from kwtree.engine.events import CRC_KEY, DECODERS, checksum_problem, is_op_id
from kwtree.engine.replay import RawOperation, replay_sorted
from kwtree.engine.state import State
from kwtree.errors import CorruptLogError
from kwtree.models import EMPTY_METADATA, ROOT_ID, Keyword
from kwtree.stores.eventlog import QUARANTINE_DIR, seals_start
from kwtree.stores.segments import row_after_damage

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


def read_row(text: bytes) -> tuple[dict[str, Any] | None, str, str]:
    """(the parsed row, "", ""), or (None, finding code, why the line is unusable)."""
    try:
        row = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return None, "unreadable-row", f"unreadable row: {exc}"
    if type(row) is not dict:
        return None, "unreadable-row", f"not a row: a JSON {type(row).__name__}, not an object"
    op = row.get("op")
    if not is_op_id(op):
        return None, "invalid-op-id", f"invalid operation id {short(op)} (32 lowercase hex digits expected)"
    return row, "", ""


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class SegmentReader:
    """Groups the lines of one segment into complete, valid operations and damaged spans."""

    def __init__(
        self, segment: Segment, raw: bytes, validator: Validator, findings: Findings, *, checksums: bool,
    ) -> None:
        self.checksums = checksums  # format 2: every operation has one
        self.segment = segment
        self.raw = raw
        self.validator = validator
        self.findings = findings
        self.operations: list[RawOperation] = []
        self._bad: list[tuple[int, int, int]] = []  # (start, end, line) of damaged lines
        self._causes: list[tuple[int, str, str]] = []  # (line, code, message) of primary causes
        self._group: list[tuple[int, int, int, dict[str, Any]]] = []  # (start, end, line, row)

    def _lost_rows(self) -> bool:
        """True if the line just before the current group was damaged (so the group may be
        the rest of an operation whose first rows were lost: no cause of its own)."""
        return bool(self._bad) and self._bad[-1][1] == self._group[0][0]

    def _drop_group(self, code: str | None, message: str) -> None:
        if code is not None and not self._lost_rows():
            self._causes.append((self._group[0][2], code, message))
        self._bad.extend((start, end, line) for start, end, line, _ in self._group)
        self._group = []

    def _complete(self) -> None:
        group = self._group
        rows = [row for _, _, _, row in group]
        end = rows[-1]["end"]
        announced = end.get("rows") if type(end) is dict else None
        if self._lost_rows() and type(announced) is int and announced > len(rows):
            self._drop_group(None, "")  # the rest of an operation that lost rows
            return
        raw = RawOperation(rows[0]["op"], rows, self.segment.rel, group[0][2])
        code, problem = "checksum", self._checksum_problem(end)
        if problem is None:
            code, problem = "invalid-operation", self.validator.problem(raw)
        if problem is None:
            self.operations.append(raw)
            self._group = []
            return
        line, message = problem
        self._causes.append((line, code, message))
        self._bad.extend((start, stop, number) for start, stop, number, _ in group)
        self._group = []

    def _checksum_problem(self, end: object) -> tuple[int, str] | None:
        """(line, message) when the current group's bytes do not match its checksum."""
        if type(end) is not dict:
            return None  # (replay's check reports the end marker)
        group = self._group
        last = group[-1][2]
        if self.checksums and CRC_KEY not in end:
            return last, ("its end marker has no checksum, which every operation of a format-2 log has: the key was "
                          "damaged, or the operation comes from a log that was not upgraded")
        found = checksum_problem(self.raw[group[0][0]:group[-1][1]], end)
        return None if found is None else (last, found)

    def read(self) -> None:
        raw, segment = self.raw, self.segment
        segment.size = len(raw)
        segment.data_end = len(raw.rstrip(b"\0"))  # zero padding after the data is not data
        content_end = self._read_seals(segment.data_end)
        pos, line = 0, 1
        last_end = (0, 1)  # (byte, line) just after the last readable end row
        while pos < content_end:
            newline = raw.find(b"\n", pos, content_end)
            if newline < 0:
                break
            text = raw[pos:newline]
            row, code, why = read_row(text)
            nul = text.find(b"\0")  # (a NUL inside a JSON string is escaped: never part of a row)
            if nul >= 0:
                row, code = None, "hidden-bytes"
                why = (f"a NUL byte at byte {pos + nul} inside the line (a zeroed block or a damaged byte): "
                       "readers stop at it, so the operations after it are hidden")
            if row is None:
                # A row after a zeroed block or a damaged newline that ended right at its start
                # is intact: its bytes stay, only the damaged ones before it go.
                at, row = row_after_damage(text)
                self._bad_line(pos, pos + at if row is not None else newline + 1, line, code, why)
                if row is not None:
                    self._row(pos + at, newline + 1, line, row)
            else:
                self._row(pos, newline + 1, line, row)
            if row is not None and "end" in row:
                last_end = (newline + 1, line + 1)
            pos, line = newline + 1, line + 1
        if self._torn_after(*last_end, content_end):
            return
        self._report_bad()
        self._report_tail(pos, line, content_end)
        if segment.data_end < len(raw) and not segment.newest:
            self.findings.add("info", "padding", segment.rel, None,
                              f"sealed segment ends with {len(raw) - segment.data_end} bytes of zero padding "
                              "(harmless)")

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

    def _bad_line(self, start: int, end: int, line: int, code: str, why: str) -> None:
        if self._group:
            self._drop_group(None, "")  # the damaged line is the cause
        self._bad.append((start, end, line))
        self._causes.append((line, code, why))

    def _row(self, start: int, end: int, line: int, row: dict[str, Any]) -> None:
        if self._group and self._group[0][3]["op"] != row["op"]:
            current = self._group[0][3]["op"]
            self._drop_group("incomplete-operation",
                             f"operation {current} has no end row before operation {row['op']} starts")
        self._group.append((start, end, line, row))
        if "end" in row:
            self._complete()

    def _torn_after(self, start: int, first: int, content_end: int) -> bool:
        """Report what follows the last end row of the newest segment as one torn tail when a
        NUL byte lies in it and only rows precede that NUL there (what a torn write with a gap
        leaves; replay ignores it the same way). False, having done nothing, otherwise."""
        raw, segment = self.raw, self.segment
        nul = raw.find(b"\0", start, content_end)
        if not segment.newest or nul < 0:
            return False
        nul_line = raw.rfind(b"\n", 0, nul) + 1
        if any(start <= bad < nul_line for bad, _, _ in self._bad):
            return False
        self._bad = [entry for entry in self._bad if entry[0] < start]
        self._causes = [cause for cause in self._causes if cause[0] < first]
        self._group = []
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
        for start, end, line in self._bad:
            if spans and spans[-1].end == start:
                spans[-1].end, spans[-1].last_line = end, line
            else:
                spans.append(Span(start, end, line, line, "bad"))
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

    def _report_tail(self, pos: int, line: int, data_end: int) -> None:
        if not self._group and pos >= data_end:
            return
        start, first = (self._group[0][0], self._group[0][2]) if self._group else (pos, line)
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
