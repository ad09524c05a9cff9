"""The event-row format: operation ids, and the encoding of operations as JSONL rows.

One row is one version of one entity, written by orjson with keys in a fixed order::

    {"op": <op id>, "entity": "keyword"|"info"|"link"|"relation", <required fields>,
     <optional fields>, "before": <previous version's fields>?,
     "end": {"kind", "actor", "ts", "rows", "audit"?}?}

Fields that hold their default (empty aliases, description, source, reason or metadata,
an info's provenance "unknown", ``deleted: false``, no parent, no ``before``, ``updated_at``
equal to ``created_at``) are
omitted; a reader fills them back in, so every row still carries the entity's full state.
``before`` repeats the previous version's fields, including its ``op`` and ``v``, so ``undo``
needs no history scan. The last row of each operation carries ``end``; an operation without
it is torn. From format 2 on, ``end`` ends with ``crc``: the CRC-32 of the operation's bytes
before ``,"crc":`` (``with_checksum``), so a changed byte that still reads as JSON is found
by ``verify``. docs/log-format.md has the full description.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple, TypeAlias

import orjson

from kwtree.models import (
    EMPTY_METADATA,
    NOTE,
    PROVENANCES,
    UNKNOWN_PROVENANCE,
    Change,
    Entity,
    Info,
    Keyword,
    Link,
    Note,
    Operation,
    Relation,
    RelationType,
)

__all__ = [
    "COMPACT_KIND",
    "CRC_KEY",
    "DECODERS",
    "ENTITY_DECODERS",
    "GENESIS",
    "NOTE_ENTITY",
    "NOTE_MERGE",
    "NOTE_RECHAIN",
    "PREV_KEY",
    "Bound",
    "OpClock",
    "Stamp",
    "checksum_problem",
    "decode_note",
    "decode_operation",
    "encode_compacted",
    "encode_note",
    "encode_operation",
    "encode_row",
    "is_digest",
    "is_op_id",
    "last_operation",
    "op_digest",
    "rechain",
    "with_checksum",
    "with_prev",
    "without_checksum",
    "without_prev",
]

OP_ID_LENGTH = 32
_HEX = frozenset("0123456789abcdef")
_RELATIONS = {member.value: member for member in RelationType}


def is_op_id(value: object) -> bool:
    """True if ``value`` has the form of an operation id (32 lowercase hex digits)."""
    return isinstance(value, str) and len(value) == OP_ID_LENGTH and _HEX.issuperset(value)


@dataclass(frozen=True, slots=True)
class Bound:
    """A point in history: the operations up to ``op_id``, or those stamped at or before
    ``timestamp`` (replay and the follower stop there; an ``as_of`` view and its snapshot
    show what lies before it)."""

    op_id: str | None = None
    timestamp: float | None = None


class Stamp(NamedTuple):
    """Identity of the operation being decided: every entity it writes carries these."""

    op_id: str
    timestamp: float
    actor: str


class OpClock:
    """Issues time-ordered, unique operation ids and non-decreasing timestamps.

    An id is 48 bits of Unix milliseconds then 80 random bits, as 32 hex digits, so ids
    sort by time. ``observe`` feeds the clock every id and timestamp read from the log, so
    that a new id is always greater than every id already in the directory even when this
    process's clock runs behind another writer's.
    """

    __slots__ = ("_last_id", "_last_ts")

    def __init__(self) -> None:
        self._last_id = 0
        self._last_ts = 0.0

    def observe(self, op_id: str, timestamp: float) -> None:
        value = int(op_id, 16)
        if value > self._last_id:
            self._last_id = value
        if timestamp > self._last_ts:
            self._last_ts = timestamp

    def next(self) -> tuple[str, float]:
        """Return a new (op id, timestamp) pair."""
        now = time.time()
        value = (int(now * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
        if value <= self._last_id:
            # Same millisecond or a clock behind the log: stay ordered, keep some randomness
            # so that two clones of one directory do not pick the same successor id.
            value = self._last_id + 1 + int.from_bytes(os.urandom(4), "big")
        self._last_id = value
        timestamp = max(now, self._last_ts)
        self._last_ts = timestamp
        return f"{value:032x}", timestamp


# --- encoding -----------------------------------------------------------------------------


# Each encoder writes the fields every version has (one dict literal, in the fixed order),
# then the optional ones, also in a fixed order.


def _keyword_fields(k: Keyword, op: str, kind: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"op": op, "entity": kind, "id": k.id, "v": k.version, "name": k.name,
                           "parent_id": k.parent_id, "created_at": k.created_at}
    if kind is None:
        del row["entity"]
    if k.parent_id is None:
        del row["parent_id"]
    if k.updated_at != k.created_at:
        row["updated_at"] = k.updated_at
    if k.aliases:
        row["aliases"] = list(k.aliases)
    if k.description:
        row["description"] = k.description
    if k.metadata:
        row["metadata"] = dict(k.metadata)
    if k.deleted:
        row["deleted"] = True
    return row


def _info_fields(i: Info, op: str, kind: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"op": op, "entity": kind, "id": i.id, "v": i.version, "content": i.content,
                           "created_at": i.created_at}
    if kind is None:
        del row["entity"]
    if i.updated_at != i.created_at:
        row["updated_at"] = i.updated_at
    if i.source:
        row["source"] = i.source
    if i.provenance != UNKNOWN_PROVENANCE:
        row["provenance"] = i.provenance
    if i.metadata:
        row["metadata"] = dict(i.metadata)
    if i.deleted:
        row["deleted"] = True
    return row


def _link_fields(link: Link, op: str, kind: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"op": op, "entity": kind, "v": link.version, "info_id": link.info_id,
                           "keyword_id": link.keyword_id, "relation": link.relation.value,
                           "created_by": link.created_by, "created_at": link.created_at}
    if kind is None:
        del row["entity"]
    if link.deleted:
        row["deleted"] = True
    return row


def _relation_fields(r: Relation, op: str, kind: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"op": op, "entity": kind, "v": r.version, "from_id": r.from_id, "to_id": r.to_id,
                           "type": r.type, "weight": r.weight, "created_at": r.created_at}
    if kind is None:
        del row["entity"]
    if r.reason:
        row["reason"] = r.reason
    if r.deleted:
        row["deleted"] = True
    return row


# The first parameter is Any because each encoder takes only the class it is filed under; the
# lookup by ``type(entity)`` is what pairs them, which a Callable type cannot say.
_Encoder: TypeAlias = Callable[[Any, str, str | None], dict[str, Any]]

_ENCODERS: dict[type[Entity], tuple[str, _Encoder]] = {
    Keyword: ("keyword", _keyword_fields),
    Info: ("info", _info_fields),
    Link: ("link", _link_fields),
    Relation: ("relation", _relation_fields),
}


def encode_row(entity: Entity, op_id: str, *, kind: bool = True) -> dict[str, Any]:
    """The fields of ``entity``'s row written by operation ``op_id``, in the fixed order
    (without ``entity``: the fields of a before-image); no ``before``, ``wrote`` or ``end``.
    For a caller that rewrites rows of an existing log (forget)."""
    name, fields = _ENCODERS[type(entity)]
    return fields(entity, op_id, name if kind else None)


_ROW_PREFIX = b'{"op":"'
_ROW_SEPARATOR = b',{"op":"'
_LINE_SEPARATOR = b'\n{"op":"'


def encode_operation(op: Operation) -> bytes:
    """Encode ``op`` as its JSONL rows (each ending in a newline), the end marker last."""
    rows = []
    last = len(op.changes) - 1
    for index, change in enumerate(op.changes):
        kind, fields = _ENCODERS[type(change.after)]
        row = fields(change.after, op.op_id, kind)
        if change.before is not None:
            row["before"] = fields(change.before, change.before.op_id, None)
        if index == last:
            end: dict[str, Any] = {
                "kind": op.kind,
                "actor": op.actor,
                "ts": op.timestamp,
                "rows": len(op.changes),
            }
            if op.audit:
                end["audit"] = dict(op.audit)
            row["end"] = end
        rows.append(row)
    if len(rows) > 1:
        # One orjson call for the whole operation is several times faster than one per row
        # (each small result costs a fresh allocation). Every row starts with {"op":", so in
        # the array the rows are joined by ',{"op":"'; that text can only occur elsewhere
        # inside user metadata, and then the count differs and we encode row by row.
        body = orjson.dumps(rows)
        if body.count(_ROW_SEPARATOR) == last:
            return body[1:-1].replace(_ROW_SEPARATOR, _LINE_SEPARATOR) + b"\n"
    return b"".join(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in rows)


COMPACT_KIND = "compact"
#: The last key of an end marker (format 2): the CRC-32 of the operation's bytes before it.
CRC_KEY = "crc"
_CRC_FIELD = b',"crc":'
_ROW_CLOSE = b"}}\n"  # the end marker's brace, the row's, the newline


def with_checksum(encoded: bytes) -> bytes:
    """The rows of one encoded operation with ``crc`` added as the last key of its end
    marker (the end marker is the last key of the last row, so its bytes end in ``}}``).
    About a microsecond for a small operation: zlib's CRC-32 runs at memory speed."""
    body = encoded[:-3]
    return b"%b%b%d%b" % (body, _CRC_FIELD, zlib.crc32(body), _ROW_CLOSE)


def without_checksum(encoded: bytes) -> bytes:
    """``encoded`` without the ``crc`` ``with_checksum`` added to its end marker (as it is
    when it has none): an operation as ``encode_operation`` gave it, for a store that adds its
    own checksum or keeps none."""
    at = encoded.rfind(_CRC_FIELD)
    if at < 0 or not encoded.endswith(_ROW_CLOSE) or not encoded[at + len(_CRC_FIELD):-len(_ROW_CLOSE)].isdigit():
        return encoded
    return encoded[:at] + _ROW_CLOSE


def checksum_problem(encoded: bytes, end: Mapping[str, Any]) -> str | None:
    """What is wrong with the checksum of one operation (its bytes as stored, its parsed end
    marker), or None when it matches; an operation without one (format 1) has no problem."""
    if CRC_KEY not in end:
        return None
    at = encoded.rfind(_CRC_FIELD)
    found = end[CRC_KEY]
    if at < 0 or type(found) is not int:
        return "its end marker's 'crc' is not a number at the end of the marker"
    actual = zlib.crc32(encoded[:at])
    if actual != found:
        return (f"its bytes do not match the checksum in its end marker (crc {found}, bytes give {actual}): "
                "a byte of it was changed")
    return None


def encode_compacted(op_id: str, timestamp: float, entities: list[Entity], audit: Mapping[str, Any] | None) -> bytes:
    """One operation of a compacted log: the current version of each entity, each row naming
    the operation that originally wrote it in ``wrote``; no before-images (undo refuses it)."""
    rows = []
    for entity in entities:
        kind, fields = _ENCODERS[type(entity)]
        row = fields(entity, op_id, kind)
        if entity.op_id != op_id:
            row["wrote"] = entity.op_id
        rows.append(row)
    end: dict[str, Any] = {"kind": COMPACT_KIND, "actor": "kwtree", "ts": timestamp, "rows": len(rows)}
    if audit:
        end["audit"] = dict(audit)
    rows[-1]["end"] = end
    return b"".join(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in rows)


# --- the hash chain (format 3) -------------------------------------------------------------
# Every operation's end marker names the SHA-256 digest of the operation it was appended after,
# ``"prev": "<64 hex digits>"`` (the key before ``crc``); the first operation of a log names
# GENESIS. An operation's digest is SHA-256 of its bytes as ``encode_operation`` gave them with
# ``prev`` added (its checksum left out: the JSONL store adds one, a database keeps none, and it
# says nothing a digest does not). So each operation commits to the whole log before it: an
# edited, removed, reordered or inserted operation breaks a link that ``verify`` finds even
# when every checksum was computed afresh, and the digest of the newest operation (the head)
# names the whole log. Opening does not check links (a hash of every operation would cost
# about a fifth of an open); every writer knows the head, because it names it in what it writes.

PREV_KEY = "prev"
#: What the first operation of a log names as its predecessor.
GENESIS = "0" * 64
_PREV_FIELD = b',"prev":"'
_PREV_CLOSE = b'"}}\n'
_DIGEST_LENGTH = 64


def is_digest(value: object) -> bool:
    """True if ``value`` has the form of an operation digest (64 lowercase hex digits)."""
    return isinstance(value, str) and len(value) == _DIGEST_LENGTH and _HEX.issuperset(value)


def with_prev(encoded: bytes, prev: str) -> bytes:
    """The rows of one encoded operation (without a checksum) with ``prev`` added as the last
    key of its end marker."""
    return b"%b%b%b%b" % (encoded[:-3], _PREV_FIELD, prev.encode("ascii"), _PREV_CLOSE)


def without_prev(encoded: bytes) -> bytes:
    """``encoded`` (without a checksum) without the ``prev`` ``with_prev`` added (as it is
    when it has none): for a rewriter that chains operations anew."""
    at = len(encoded) - len(_PREV_FIELD) - _DIGEST_LENGTH - len(_PREV_CLOSE)
    if at < 0 or not encoded.endswith(_PREV_CLOSE) or not encoded.startswith(_PREV_FIELD, at):
        return encoded
    return encoded[:at] + _ROW_CLOSE


def op_digest(encoded: bytes) -> str:
    """The digest of one operation given as its rows (a checksum, if any, is left out)."""
    return hashlib.sha256(without_checksum(encoded)).hexdigest()


def rechain(operations: Iterable[tuple[str, bytes]], prev: str = GENESIS) -> Iterator[tuple[str, bytes]]:
    """``operations`` ((op id, rows)) in the same order, each without a checksum and naming
    its predecessor's digest in ``prev`` (the first names ``prev``): a rewriter of a log
    (compaction, forget's erasure, repair, upgrade) hands these to the store, which adds the
    checksums."""
    for op_id, encoded in operations:
        encoded = with_prev(without_prev(without_checksum(encoded)), prev)
        prev = hashlib.sha256(encoded).hexdigest()
        yield op_id, encoded


def last_operation(data: bytes) -> bytes:
    """The rows of the last operation in ``data`` (whole operations, as a log store hands them
    over): the lines from the end back to the row after the previous end row, which share the
    last row's op id. b"" for no data."""
    if not data:
        return b""
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    prefix = data[start:start + len(_ROW_PREFIX) + OP_ID_LENGTH + 1]  # {"op":"<its id>"
    while start:
        previous = data.rfind(b"\n", 0, start - 1) + 1
        if not data.startswith(prefix, previous):
            break
        # The same id: a row of this operation, or the end row of a copy of it right before.
        if "end" in orjson.loads(data[previous:start - 1]):
            break
        start = previous
    return data[start:]


# --- notes (format 3) -----------------------------------------------------------------------


NOTE_ENTITY = "note"
#: The kinds of notes: a log rewritten and chained anew (compaction, forget's erasure, repair,
#: upgrade), and two git branches merged (the merge driver).
NOTE_RECHAIN = "rechain"
NOTE_MERGE = "merge"


def encode_note(op_id: str, timestamp: float, kind: str, actor: str, audit: Mapping[str, Any]) -> bytes:
    """A note: an operation of one ``note`` row that changes no entity and records ``audit``
    about the log itself (``kwtree.models.Note``), without ``prev`` and checksum."""
    end = {"kind": kind, "actor": actor, "ts": timestamp, "rows": 1, "audit": dict(audit)}
    return orjson.dumps({"op": op_id, "entity": NOTE_ENTITY, "end": end}, option=orjson.OPT_APPEND_NEWLINE)


# --- decoding -----------------------------------------------------------------------------
# Decoders build the entity from a parsed row (or a before-image). They check the types a
# later step relies on and raise ValueError/KeyError/TypeError on anything else; replay turns
# those into CorruptLogError with the file and line.


def _text(value: object, field: str) -> str:
    if type(value) is not str:
        raise ValueError(f"field {field!r} must be a string, got {type(value).__name__}")
    return value


def _metadata(value: object) -> Mapping[str, Any]:
    if not value:
        return EMPTY_METADATA
    if type(value) is not dict:
        raise ValueError("field 'metadata' must be an object")
    return MappingProxyType(value)


def _version(value: object) -> int:
    if type(value) is not int or value < 1:
        raise ValueError("field 'v' must be a positive integer")
    return value


def _timestamp(value: object, field: str) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise ValueError(f"field {field!r} must be a number")


def _wrote(value: object) -> str:
    if type(value) is not str or len(value) != OP_ID_LENGTH:
        raise ValueError("field 'wrote' must be an operation id")
    return value


def decode_keyword(r: dict[str, Any], op_id: str) -> Keyword:
    # The hottest function of replay: one dict lookup per field, inline type checks.
    kid = r["id"]
    name = r["name"]
    version = r["v"]
    created_at = r["created_at"]
    if type(kid) is not str or type(name) is not str or type(version) is not int:
        raise ValueError("fields 'id' and 'name' must be strings and 'v' an integer")
    if type(created_at) is not float:
        created_at = _timestamp(created_at, "created_at")
    updated_at = r.get("updated_at", created_at)
    if type(updated_at) is not float:
        updated_at = _timestamp(updated_at, "updated_at")
    aliases = r.get("aliases")
    if aliases:
        if type(aliases) is not list or not all(type(a) is str for a in aliases):
            raise ValueError("field 'aliases' must be a list of strings")
        aliases = tuple(aliases)
    else:
        aliases = ()
    parent_id = r.get("parent_id")
    if parent_id is not None and type(parent_id) is not str:
        raise ValueError("field 'parent_id' must be a string")
    description = r.get("description", "")
    if type(description) is not str:
        raise ValueError("field 'description' must be a string")
    metadata = r.get("metadata")
    return Keyword(
        kid,
        name,
        aliases,
        parent_id,
        description,
        _metadata(metadata) if metadata else EMPTY_METADATA,
        version,
        created_at,
        updated_at,
        r.get("deleted", False) is True,
        op_id if "wrote" not in r else _wrote(r["wrote"]),
    )


#: Each provenance, to itself: a decoded info holds the one string, not a copy of its own.
_PROVENANCES = {provenance: provenance for provenance in PROVENANCES}


def _provenance(value: object) -> str:
    if value is None:
        return UNKNOWN_PROVENANCE
    if type(value) is not str or value not in _PROVENANCES:
        raise ValueError(f"field 'provenance' must be one of {', '.join(PROVENANCES)}")
    return _PROVENANCES[value]


def decode_info(r: dict[str, Any], op_id: str) -> Info:
    created_at = _timestamp(r["created_at"], "created_at")
    updated_at = _timestamp(r.get("updated_at", created_at), "updated_at")
    return Info(
        _text(r["id"], "id"),
        _text(r["content"], "content"),
        _text(r.get("source", ""), "source"),
        _metadata(r.get("metadata")),
        _version(r["v"]),
        created_at,
        created_at if updated_at == created_at else updated_at,
        r.get("deleted", False) is True,
        op_id if "wrote" not in r else _wrote(r["wrote"]),
        _provenance(r.get("provenance")),
    )


def decode_link(r: dict[str, Any], op_id: str) -> Link:
    return Link(
        _text(r["info_id"], "info_id"),
        _text(r["keyword_id"], "keyword_id"),
        _RELATIONS[r["relation"]],
        sys.intern(_text(r["created_by"], "created_by")),  # a few labels, held by every link
        _timestamp(r["created_at"], "created_at"),
        r.get("deleted", False) is True,
        _version(r["v"]),
        op_id if "wrote" not in r else _wrote(r["wrote"]),
    )


def decode_relation(r: dict[str, Any], op_id: str) -> Relation:
    weight = r["weight"]
    if type(weight) is int:
        weight = float(weight)
    elif type(weight) is not float:
        raise ValueError("field 'weight' must be a number")
    return Relation(
        _text(r["from_id"], "from_id"),
        _text(r["to_id"], "to_id"),
        _text(r["type"], "type"),
        weight,
        _text(r.get("reason", ""), "reason"),
        _timestamp(r["created_at"], "created_at"),
        r.get("deleted", False) is True,
        _version(r["v"]),
        op_id if "wrote" not in r else _wrote(r["wrote"]),
    )


def decode_note(r: dict[str, Any], op_id: str) -> Note:
    return NOTE


#: The decoders of the rows that hold an entity (every kind but a note).
ENTITY_DECODERS: dict[str, Callable[[dict[str, Any], str], Entity]] = {
    "keyword": decode_keyword,
    "info": decode_info,
    "link": decode_link,
    "relation": decode_relation,
}
#: The decoder of every kind of row, by its ``entity``.
DECODERS: dict[str, Callable[[dict[str, Any], str], Entity | Note]] = {**ENTITY_DECODERS, NOTE_ENTITY: decode_note}


def decode_operation(rows: list[dict[str, Any]]) -> Operation:
    """Build the full Operation (with before-images and audit) from its complete rows."""
    end = rows[-1]["end"]
    changes = []
    for row in rows:
        if row["entity"] == NOTE_ENTITY:
            continue  # a note changes no entity: its audit is what it says
        decoder = ENTITY_DECODERS[row["entity"]]
        before = row.get("before")
        changes.append(
            Change(
                after=decoder(row, row["op"]),
                before=None if before is None else decoder(before, before["op"]),
            )
        )
    audit = end.get("audit")
    return Operation(
        op_id=rows[0]["op"],
        kind=end["kind"],
        actor=end["actor"],
        timestamp=float(end["ts"]),
        changes=tuple(changes),
        audit=MappingProxyType(audit) if audit else None,
    )
