"""A checkpoint of the replayed state, so that a large tree opens without replaying its log.

``cache/state.ckpt`` holds the State a writable tree held when it closed, and where in the log
that state stands. An open of the current tree (no ``as_of``) with the JSONL log loads it
and replays only the operations after it; it is a cache like the others: never needed,
rebuilt from the log, and trusted only when the log proves it current:

- the file is whole (its length and its CRC-32 match its header), of this format and of
  the entity layout of this kwtree (the fields of every entity class and of State);
- the log is the one it was made from: the same ``log/`` directory (generation), the same
  segments up to the one its position is in, every earlier segment byte for byte (size and
  CRC-32 of the whole file) and the position's segment up to the position. A git merge, a
  repair, a restore or damage that changes a byte it covers makes it stale; operations
  appended after the position are replayed onto it as a refresh would (merged ones out of
  op-id order make that a full sorted replay, as always).

Otherwise it is ignored, said in the log (``kwtree.engine.replay``, info when stale, warning
when damaged), deleted by a writable open (a stale one may hold a text a forget that reached
the directory through git erased), and the open replays the whole log. The digest of the last
operation before its position (a chained log's head, which the next write names) is read from
the log, never from the file. A checkpoint is written when a writable
tree closes if the log reached ``MIN_LOG_BYTES`` and grew by ``REFRESH_FRACTION`` since the
checkpoint it opened from (or it had none), under the writer lock taken without waiting and
only while the log is still the one the state was read from (the same ``log/`` directory, and
before the position the bytes whose last operation has the head the state reflects: files
rewritten in place under an open tree, by a git checkout, are not described) and has a hash
chain (format 3; older logs get none): a log a compaction or a forget
replaced (``Engine.replace_log`` deletes the checkpoint first) is never described again by a
process that read the old one, so an erased text does not come back through this file.

The state is stored with pickle as plain containers, entities by column (the loader is
restricted to two metadata constructors: the documented way to load pickles that must not run
other code); entities are rebuilt by their constructors, the strings they share stay shared,
and equal times become one float.
"""

from __future__ import annotations

import array
import contextlib
import copyreg
import dataclasses
import io
import logging
import operator
import pickle
import zlib
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, NamedTuple

import orjson

from kwtree.engine.events import GENESIS, last_operation, op_digest
from kwtree.engine.state import State
from kwtree.heap import collector_paused
from kwtree.models import EMPTY_METADATA, Info, Keyword, Link, Relation, RelationType
from kwtree.stores.directory import CACHE_DIR
from kwtree.stores.eventlog import LOG_DIR, SEGMENT_SUFFIX, seals_start
from kwtree.stores.files import make_dir, write_atomically
from kwtree.stores.logstore import Position
from kwtree.stores.segments import SegmentStore

__all__ = ["CHECKPOINT_NAME", "MIN_LOG_BYTES", "REFRESH_FRACTION", "Loaded", "Unusable", "discard", "examine", "is_due",
           "load", "save"]

log = logging.getLogger("kwtree.engine.replay")

CHECKPOINT_NAME = "state.ckpt"
#: A log smaller than this opens by replay alone (about 30,000 rows: they replay in a tenth of a second).
MIN_LOG_BYTES = 4 << 20
#: A closing tree writes a new checkpoint once the log grew by this fraction of what the
#: checkpoint it opened from covers.
REFRESH_FRACTION = 0.25
_MAGIC = b"kwtree state checkpoint\n"
_CHUNK = 1 << 20
_FORMAT = 2  # (2: no head in the header; it is read from the log)
_ENTITIES = (Keyword, Info, Link, Relation)


def _fields(cls: type) -> tuple[str, ...]:
    """The stored fields of an entity class, in constructor order (``agent`` is never stored)."""
    return tuple(field.name for field in dataclasses.fields(cls) if field.name != "agent")


#: What a checkpoint's entities and State look like: a kwtree whose classes differ does not load it.
_LAYOUT = zlib.crc32(repr([(cls.__name__, _fields(cls)) for cls in _ENTITIES] + [State.__slots__]).encode())


class Loaded(NamedTuple):
    """A checkpoint found current: its state, its position in the log, the digest of the
    last operation before that position (read from the log, never from the file) and the log
    bytes it covers."""

    state: State
    position: Position
    head: str
    covered: int


# --- writing ----------------------------------------------------------------------------------


def _metadata(value: dict[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(value)


def _empty_metadata() -> Mapping[str, Any]:
    return EMPTY_METADATA


def _reducers() -> dict[Any, Callable[[Any], tuple[Any, ...]]]:
    table: dict[Any, Callable[[Any], tuple[Any, ...]]] = dict(copyreg.dispatch_table)  # type: ignore[arg-type]
    table[MappingProxyType] = lambda proxy: (_metadata, (dict(proxy),)) if proxy else (_empty_metadata, ())
    return table


#: The fields that hold a time: equal ones become one float object when a state is loaded.
_TIMES = ("created_at", "updated_at")


def _columns(cls: type, entities: Collection[Any]) -> list[Any]:
    """The entities' fields, one tuple per field (a Link's relation as its value). Stored by
    column, not as one tuple per entity: pickle keeps every tuple it loads until the load
    ends, which would leave the memory of a whole state's worth of them behind."""
    columns: list[Any] = [tuple(map(operator.attrgetter(name), entities)) for name in _fields(cls)]
    for at, name in enumerate(_fields(cls)):
        if name in _TIMES:  # (as doubles: pickle would make a float object of each, to be thrown away)
            columns[at] = array.array("d", columns[at])
    if cls is Link:
        at = _fields(Link).index("relation")
        columns[at] = tuple(relation.value for relation in columns[at])
    return columns


def _snapshot(state: State) -> dict[str, Any]:
    """``state`` as plain containers: entities by column; the indexes that hold entities as
    the keys they list, in their order."""
    return {
        "entities": [_columns(cls, entities.values()) for cls, entities in (
            (Keyword, state.keywords), (Info, state.infos), (Link, state.links), (Relation, state.relations))],
        "names": state.names,
        "children": state.children,
        "keywords_by_info": state.keywords_by_info,
        "solo_links": state.solo_links,  # (the tuples keywords_by_info shares: pickle keeps them shared)
        "infos_by_keyword": {kid: list(infos) for kid, infos in state.infos_by_keyword.items()},
        "rel_out": {kid: list(rels) for kid, rels in state.rel_out.items()},
        "rel_in": {kid: list(rels) for kid, rels in state.rel_in.items()},
        "counters": (state.op_count, state.last_op_id, state.last_timestamp, state.shared_time),
    }


_RELATIONS = {relation.value: relation for relation in RelationType}


def _state_of(snapshot: dict[str, Any]) -> State:
    """The State ``_snapshot`` describes (entities made by their constructors)."""
    times: dict[float, float] = {}
    made = []
    for cls, columns in zip(_ENTITIES, snapshot["entities"], strict=True):
        columns = list(columns)
        for at, name in enumerate(_fields(cls)):
            if name in _TIMES:
                columns[at] = list(map(times.setdefault, columns[at], columns[at]))
            elif cls is Link and name == "relation":
                columns[at] = list(map(_RELATIONS.__getitem__, columns[at]))
        made.append((columns, list(map(cls, *columns))))
    (keyword_columns, keywords), (info_columns, infos), (link_columns, links), (rel_columns, rels) = made
    state = State()
    state.keywords = dict(zip(keyword_columns[0], keywords, strict=True))
    state.infos = dict(zip(info_columns[0], infos, strict=True))
    state.links = dict(zip(zip(link_columns[0], link_columns[1], strict=True), links, strict=True))
    state.relations = dict(zip(zip(*rel_columns[:3], strict=True), rels, strict=True))
    state.names, state.children = snapshot["names"], snapshot["children"]
    state.keywords_by_info, state.solo_links = snapshot["keywords_by_info"], snapshot["solo_links"]
    by_link, by_relation = state.links, state.relations
    state.infos_by_keyword = {kid: {iid: by_link[iid, kid] for iid in iids}
                              for kid, iids in snapshot["infos_by_keyword"].items()}
    state.rel_out = {kid: {(to, kind): by_relation[kid, to, kind] for to, kind in keys}
                     for kid, keys in snapshot["rel_out"].items()}
    state.rel_in = {kid: {(frm, kind): by_relation[frm, kid, kind] for frm, kind in keys}
                    for kid, keys in snapshot["rel_in"].items()}
    state.op_count, state.last_op_id, state.last_timestamp, shared_time = snapshot["counters"]
    state.shared_time = times.get(shared_time, shared_time)
    return state


def _segment_path(directory: Path, name: str) -> Path:
    return directory / LOG_DIR / f"{name}{SEGMENT_SUFFIX}"


class _Covered(NamedTuple):
    """What the log holds before a position: (name, bytes, CRC-32) of each segment up to the
    position's (whole files before it, its own up to the position), and the digest of the
    last operation there (GENESIS for none): a chained log's head, which commits to every
    operation before it."""

    segments: list[tuple[str, int, int]]
    head: str


def _covered(directory: Path, store: SegmentStore, position: Position) -> _Covered:
    """The log before ``position`` as it is on disk now. FileNotFoundError if a segment is gone."""
    segment, offset = _key(position)
    names = store.segment_names()
    if segment not in names:
        raise FileNotFoundError(f"no segment {segment} in the log")
    segments, last = [], b""
    for name in names[: names.index(segment) + 1]:
        data = _segment_path(directory, name).read_bytes()
        if name == segment:
            data = data[:offset]
        segments.append((name, len(data), zlib.crc32(data)))
        if data:
            last = data  # (every sealed segment holds operations; only the newest may hold none yet)
    padding = last.find(b"\0")
    operations = last if padding < 0 else last[:padding]
    operations = operations[: seals_start(operations)]
    return _Covered(segments, op_digest(last_operation(operations)) if operations else GENESIS)


def _key(position: Position) -> tuple[str, int]:
    """The segment and byte offset of a JSONL store's position."""
    segment, offset, _ = position.key
    return str(segment), int(offset)  # type: ignore[call-overload]


def log_bytes(directory: Path, store: SegmentStore, position: Position | None) -> int:
    """The bytes of the log before ``position`` (whole earlier segments, by their size)."""
    if position is None or position.key[0] is None:
        return 0
    segment, offset = _key(position)
    names = store.segment_names()
    if segment not in names:
        return 0
    return sum(_segment_path(directory, name).stat().st_size for name in names[: names.index(segment)]) + offset


def is_due(log_size: int, covered: int) -> bool:
    """Whether a closing tree whose log holds ``log_size`` bytes writes a checkpoint, when the
    one it opened from covers ``covered`` bytes (0: none)."""
    return log_size >= MIN_LOG_BYTES and log_size >= covered * (1 + REFRESH_FRACTION)


def save(directory: Path, store: SegmentStore, state: State, position: Position, head: str,
         file_mode: int) -> int | None:
    """Write the checkpoint of ``state``, which stands at ``position`` of ``store``'s current
    log and reflects the operations up to the one whose digest is ``head`` (the caller holds
    the writer lock and knows the log was not replaced); returns the bytes of the log it
    covers. None, nothing written, for a log without a hash chain (format 1 and 2), or when
    the log's bytes before the position are no longer those the state was read from (a file
    rewritten in place under an open tree: a git checkout): their last operation's digest, which
    commits to every operation before it, is not ``head``. OSError when it cannot be written."""
    if not store.chained:
        return None
    segments, found = _covered(directory, store, position)
    if found != head:
        log.info("not writing the state checkpoint of %s: the log before the state's position changed "
                 "since it was read", directory)
        return None
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.dispatch_table = _reducers()
    pickler.dump(_snapshot(state))
    payload = buffer.getbuffer()
    header = {"format": _FORMAT, "layout": _LAYOUT, "generation": position.generation,
              "position": list(position.key), "segments": segments,
              "payload_bytes": len(payload), "payload_crc": zlib.crc32(payload)}
    cache = directory / CACHE_DIR
    make_dir(cache, file_mode, exist_ok=True)

    def write(out: Any) -> None:
        out.write(_MAGIC)
        out.write(orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE))
        out.write(payload)

    write_atomically(cache / CHECKPOINT_NAME, write, file_mode)
    return sum(size for _, size, _ in segments)


def discard(directory: Path) -> bool:
    """Delete the checkpoint (and any a killed writer left half written): the log it describes
    is about to be replaced or mended. Whether there was one."""
    cache = directory / CACHE_DIR
    with contextlib.suppress(OSError):
        for leftover in cache.glob(f".{CHECKPOINT_NAME}.*.tmp"):
            leftover.unlink(missing_ok=True)
    try:
        (cache / CHECKPOINT_NAME).unlink()
    except FileNotFoundError:
        return False
    return True


# --- reading ----------------------------------------------------------------------------------


_ALLOWED = {
    (__name__, "_metadata"): _metadata,
    (__name__, "_empty_metadata"): _empty_metadata,
    ("array", "array"): array.array,
    ("array", "_array_reconstructor"): getattr(array, "_array_reconstructor"),  # noqa: B009 (typeshed lacks it)
}


class _Unpickler(pickle.Unpickler):
    """Loads only what ``save`` writes: plain containers, arrays of doubles and this module's
    two metadata constructors; any other global is refused (an UnpicklingError), so a forged file cannot
    run code."""

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"a state checkpoint holds no {module}.{name}")
        return found


class _Stale(Exception):
    """The checkpoint is whole but describes another log (or another kwtree)."""


def load(directory: Path, store: SegmentStore, *, writable: bool) -> Loaded | None:
    """The directory's checkpoint when it is whole and current for ``store``'s log (module
    docstring); None, said in the log, when it is absent, stale or damaged. A ``writable``
    tree deletes one it cannot use: a stale one may hold texts a forget that reached this
    directory through git erased from the log."""
    found = examine(directory, store)
    if isinstance(found, Unusable):
        path = directory / CACHE_DIR / CHECKPOINT_NAME
        if found.damaged:
            log.warning("the state checkpoint %s is damaged (%s); ignoring it and replaying the log", path, found.why)
        else:
            log.info("the state checkpoint %s is not current (%s); replaying the log", path, found.why)
        if writable:
            with contextlib.suppress(OSError):
                discard(directory)
        return None
    return found


class Unusable(NamedTuple):
    """Why a checkpoint cannot be used: ``damaged`` (its own bytes), or else stale."""

    why: str
    damaged: bool


def examine(directory: Path, store: SegmentStore) -> Loaded | Unusable | None:
    """The directory's checkpoint loaded when it is whole and current for ``store``'s log;
    else why not; None when there is none."""
    path = directory / CACHE_DIR / CHECKPOINT_NAME
    try:
        file = open(path, "rb")  # noqa: SIM115 -- closed below, whatever happens
    except FileNotFoundError:
        return None
    except OSError as exc:
        return Unusable(f"it cannot be read: {exc}", True)
    try:
        with file:
            return _loaded(directory, store, file)
    except _Stale as exc:
        return Unusable(str(exc), False)
    except FileNotFoundError as exc:
        return Unusable(f"the log changed as it was checked: {exc}", False)
    except Exception as exc:  # noqa: BLE001 -- damage of any kind: the log decides
        return Unusable(f"{type(exc).__name__}: {exc}", True)


def _loaded(directory: Path, store: SegmentStore, file: BinaryIO) -> Loaded:
    if file.read(len(_MAGIC)) != _MAGIC:
        raise ValueError("it does not start as a checkpoint does")
    header = orjson.loads(file.readline())
    if header.get("format") != _FORMAT or header.get("layout") != _LAYOUT:
        raise _Stale("written by another version of kwtree")
    start, crc, size = file.tell(), 0, 0
    while chunk := file.read(_CHUNK):  # (checked in pieces: the payload is never held twice)
        crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    if size != header["payload_bytes"] or crc != header["payload_crc"]:
        raise ValueError("its bytes do not match its checksum")
    segment, offset, line = header["position"]
    position = Position(header["generation"], (segment, offset, line))
    if store.generation() != position.generation:
        raise _Stale("the log was replaced since it was written")
    if not store.chained:
        raise _Stale("the log has no hash chain (format 1 or 2)")
    recorded = [tuple(entry) for entry in header["segments"]]
    covered = _covered(directory, store, position)
    if recorded != covered.segments:
        raise _Stale("the log's bytes before its position differ from those it was written from")
    file.seek(start)
    with collector_paused():  # (millions of objects, no cycles among them)
        state = _state_of(_Unpickler(file).load())
    return Loaded(state, position, covered.head, sum(size for _, size, _ in recorded))
