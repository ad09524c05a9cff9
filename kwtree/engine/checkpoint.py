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
other code). Keywords, infos, links and the indexes over them (names, children, links by
keyword and by info) are loaded as ``LazyRows`` (``kwtree.engine.lazy_rows``): their keys'
rows sorted by key, and each value made from the columns when it is first read, so an open
makes no object per entity. Relations (few) are made at once by their constructors, the
strings they share stay shared, and equal times become one float.
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
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from kwtree.engine.events import GENESIS, last_operation, op_digest
from kwtree.engine.lazy_rows import LazyRows, Rows, sorted_rows
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
_FORMAT = 3  # (2: no head in the header, it is read from the log; 3: entities and indexes made as read)
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


def _grouped(index: Mapping[str, str | Sequence[str]]) -> tuple[list[str], list[str], array.array[int], list[int]]:
    """An index of str -> str or sequence of str as columns: its keys, every value's strings
    in one list, where each key's strings end in it, and the keys' rows sorted by key."""
    keys, flat, ends = list(index), [], array.array("q")
    for value in index.values():
        if type(value) is str:
            flat.append(value)
        else:
            flat.extend(value)
        ends.append(len(flat))
    return keys, flat, ends, sorted_rows(keys)


def _link_rows(state: State) -> tuple[list[str], array.array[int], array.array[int], list[int]]:
    """The index of each keyword's links as columns: its keywords, the rows (in the link
    columns) of every keyword's links in one array, where each keyword's end in it, and the
    keywords' rows sorted by id."""
    row_of = {key: row for row, key in enumerate(state.links)}
    keys, flat, ends = list(state.infos_by_keyword), array.array("q"), array.array("q")
    for kid, links in state.infos_by_keyword.items():
        flat.extend([row_of[iid, kid] for iid in links])
        ends.append(len(flat))
    return keys, flat, ends, sorted_rows(keys)


def _snapshot(state: State) -> dict[str, Any]:
    """``state`` as plain containers: entities by column, with their rows sorted by key; the
    name, children, link indexes as columns; the relation indexes as the keys they list, in
    their order."""
    keyword_columns, info_columns = _columns(Keyword, state.keywords.values()), _columns(Info, state.infos.values())
    link_columns = _columns(Link, state.links.values())
    return {
        "entities": [keyword_columns, info_columns, link_columns, _columns(Relation, state.relations.values())],
        "sorted": [array.array("q", sorted_rows(keyword_columns[0])), array.array("q", sorted_rows(info_columns[0])),
                   array.array("q", sorted_rows(_Pairs(link_columns[0], link_columns[1])))],
        "names": _grouped(state.names),
        "children": _grouped(state.children),
        "keywords_by_info": _grouped(state.keywords_by_info),
        "solo_links": state.solo_links,
        "infos_by_keyword": _link_rows(state),
        "rel_out": {kid: list(rels) for kid, rels in state.rel_out.items()},
        "rel_in": {kid: list(rels) for kid, rels in state.rel_in.items()},
        "forgotten": state.forgotten,
        "abstracted": state.abstracted,
        "counters": (state.op_count, state.last_op_id, state.last_timestamp, state.shared_time),
    }


_RELATIONS = {relation.value: relation for relation in RelationType}


class _Pairs(Sequence[tuple[str, str]]):
    """The keys of the links, (info id, keyword id), over their two columns."""

    def __init__(self, first: Sequence[str], second: Sequence[str]) -> None:
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first)

    def __getitem__(self, row: Any) -> Any:
        return self.first[row], self.second[row]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return zip(self.first, self.second, strict=True)


class _Mapped(Sequence[Any]):
    """A stored column as read through ``convert``: a link's relation value as its
    RelationType, a time as the one float object of its value (the rows of one operation
    share their time, as after a replay)."""

    def __init__(self, values: Sequence[Any], convert: Callable[[Any], Any]) -> None:
        self.values, self.convert = values, convert

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, row: Any) -> Any:
        return self.convert(self.values[row])

    def __iter__(self) -> Iterator[Any]:
        return map(self.convert, self.values)


class _Maker(NamedTuple):
    """What makes the entity of one row of an entity class's columns, and of many."""

    one: Callable[[int], Any]
    many: Callable[[list[int]], Iterable[Any]]


def _maker(cls: type, columns: Sequence[Sequence[Any]]) -> _Maker:
    def one(row: int) -> Any:
        return cls(*[column[row] for column in columns])

    def many(rows: list[int]) -> Iterable[Any]:
        if len(rows) == len(columns[0]):  # (all of them, in their order)
            return map(cls, *columns)
        return map(cls, *[[column[row] for row in rows] for column in columns])

    return _Maker(one, many)


def _spans(columns: Sequence[Any], value: Callable[[Any, int, int], Any]) -> LazyRows[str, Any]:
    """An index ``_grouped`` or ``_link_rows`` stored, each key's value made by ``value(flat,
    start, end)`` from its span of the flat column."""
    keys, flat, ends, by_key = columns

    def make(row: int) -> Any:
        return value(flat, ends[row - 1] if row else 0, ends[row])

    return LazyRows(Rows(keys, by_key), make)


def _name(flat: list[str], start: int, end: int) -> str | list[str]:
    """A name index's value: one id, or the ids sharing the name."""
    found: str | list[str] = flat[start] if end - start == 1 else flat[start:end]
    return found


def _children(flat: list[str], start: int, end: int) -> list[str]:
    return flat[start:end]


def _read_as_stored(cls: type, columns: Sequence[Any], times: dict[float, float]) -> list[Any]:
    """``cls``'s columns as its constructor takes them (``_Mapped``): each time the one float
    in ``times`` of its value, a link's relation its RelationType."""
    def shared(time: float) -> float:
        return times.setdefault(time, time)

    return [_Mapped(column, shared) if name in _TIMES else _Mapped(column, _RELATIONS.__getitem__)
            if cls is Link and name == "relation" else column for name, column in zip(_fields(cls), columns,
                                                                                      strict=True)]


def _check_shape(snapshot: dict[str, Any]) -> None:
    """ValueError unless the snapshot's columns agree in length (what a value made on first
    read relies on; the checksum says only that the bytes are the ones written)."""
    entities, by_key = snapshot["entities"], snapshot["sorted"]
    for cls, columns in zip(_ENTITIES, entities, strict=True):
        if len(columns) != len(_fields(cls)) or len({len(column) for column in columns}) > 1:
            raise ValueError(f"its {cls.__name__} columns disagree")
    for columns, rows in zip(entities, by_key, strict=False):
        if len(rows) != len(columns[0]):
            raise ValueError("its sorted rows do not match its entities")
    for name in ("names", "children", "keywords_by_info", "infos_by_keyword"):
        keys, flat, ends, rows = snapshot[name]
        if not len(keys) == len(ends) == len(rows) or (len(ends) and ends[-1] != len(flat)):
            raise ValueError(f"its {name} columns disagree")


def _state_of(snapshot: dict[str, Any]) -> State:
    """The State ``_snapshot`` describes: relations made by their constructors; the other
    entities and the indexes (but the relations') made as they are read. ValueError when its
    columns disagree."""
    _check_shape(snapshot)
    (keyword_columns, info_columns, link_columns, rel_columns) = snapshot["entities"]
    keywords_by_id, infos_by_id, links_by_key = snapshot["sorted"]
    times: dict[float, float] = {}
    rel_columns = list(rel_columns)
    for at, name in enumerate(_fields(Relation)):
        if name in _TIMES:
            rel_columns[at] = list(map(times.setdefault, rel_columns[at], rel_columns[at]))
    rels = list(map(Relation, *rel_columns))
    keyword_columns, info_columns, link_columns = (_read_as_stored(cls, columns, times) for cls, columns in (
        (Keyword, keyword_columns), (Info, info_columns), (Link, link_columns)))
    state = State()
    state.keywords = LazyRows(Rows(keyword_columns[0], keywords_by_id), *_maker(Keyword, keyword_columns))
    state.infos = LazyRows(Rows(info_columns[0], infos_by_id), *_maker(Info, info_columns))
    link = _maker(Link, link_columns)
    state.links = LazyRows(Rows(_Pairs(link_columns[0], link_columns[1]), links_by_key), *link)
    state.relations = dict(zip(zip(*rel_columns[:3], strict=True), rels, strict=True))
    state.names = _spans(snapshot["names"], _name)
    state.children = _spans(snapshot["children"], _children)
    state.solo_links = solo = snapshot["solo_links"]
    info_ids, keyword_ids, links = link_columns[0], link_columns[1], state.links

    def keywords_of(flat: list[str], start: int, end: int) -> tuple[str, ...]:
        """An info's keywords; the one tuple ``solo_links`` holds when it is one."""
        if end - start == 1:
            return solo.get(flat[start]) or (flat[start],)
        return tuple(flat[start:end])

    def links_of(flat: array.array[int], start: int, end: int) -> dict[str, Link]:
        """A keyword's links by info, as their rows give them: the objects the links map holds
        while they are those (a fork shares this function, and its base's map may hold later
        versions, which it must not see), else made from the rows."""
        def at(row: int) -> Link:
            return links.original((info_ids[row], keyword_ids[row]), lambda: link.one(row))

        return {info_ids[row]: at(row) for row in flat[start:end]}

    state.keywords_by_info = _spans(snapshot["keywords_by_info"], keywords_of)
    state.infos_by_keyword = _spans(snapshot["infos_by_keyword"], links_of)
    by_relation = state.relations
    state.rel_out = {kid: {(to, kind): by_relation[kid, to, kind] for to, kind in keys}
                     for kid, keys in snapshot["rel_out"].items()}
    state.rel_in = {kid: {(frm, kind): by_relation[frm, kid, kind] for frm, kind in keys}
                    for kid, keys in snapshot["rel_in"].items()}
    state.forgotten, state.abstracted = snapshot["forgotten"], snapshot["abstracted"]
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
    covered = names[: names.index(segment) + 1]
    segments, last = [], b""
    for at, name in enumerate(covered):
        path = _segment_path(directory, name)
        # The segment whose last operation is the head is read whole (its checksum and its
        # head from the same bytes): the position's, or the one before a position at 0.
        if name == segment or (offset == 0 and at == len(covered) - 2):
            data = path.read_bytes()
            if name == segment:
                data = data[:offset]
            segments.append((name, len(data), zlib.crc32(data)))
            if data:
                last = data  # (every sealed segment holds operations; only the newest may hold none yet)
        else:
            with open(path, "rb", buffering=0) as file:
                segments.append((name, *_checksum(file)))
    padding = last.find(b"\0")
    operations = last if padding < 0 else last[:padding]
    operations = operations[: seals_start(operations)]
    return _Covered(segments, op_digest(last_operation(operations)) if operations else GENESIS)


def _checksum(file: io.RawIOBase | io.BufferedIOBase) -> tuple[int, int]:
    """The bytes from ``file``'s position to its end, and their CRC-32, read piece by piece
    into one buffer (never held whole, never copied into new objects)."""
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    crc = size = 0
    while count := file.readinto(view):
        crc, size = zlib.crc32(view[:count], crc), size + count
    return size, crc


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


def _loaded(directory: Path, store: SegmentStore, file: io.BufferedReader) -> Loaded:
    if file.read(len(_MAGIC)) != _MAGIC:
        raise ValueError("it does not start as a checkpoint does")
    header = orjson.loads(file.readline())
    if header.get("format") != _FORMAT or header.get("layout") != _LAYOUT:
        raise _Stale("written by another version of kwtree")
    start = file.tell()
    size, crc = _checksum(file)
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
