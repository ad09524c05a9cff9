"""What a compacted log holds: the rows that rebuild a State exactly, in an order replay
accepts, and the check that a rebuilt State is the same as the one compacted.

Without history, the log becomes the current version of every live entity, grouped into
``compact`` operations. Replay derives several orders from the order rows arrive in
(children under a parent, infos under a keyword, keywords of an info, relations at either
end), so the rows are emitted in an order that reproduces each of them: keywords parents
first and siblings in their order, links and relations in one order consistent with every
list they appear in (a topological order; the lists all follow the one order in which the
entities last became live, so one exists). With history, every whole operation is kept once,
in op-id order; only torn and duplicate rows go. The operations come without checksums:
the caller adds them (and seals) in the directory's format.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, TypeVar

import orjson

from kwtree.engine.events import CRC_KEY, encode_compacted
from kwtree.engine.replay import RawOperation, parse_operations
from kwtree.engine.state import State
from kwtree.errors import StorageError
from kwtree.models import Entity, Relation
from kwtree.progress import Ticker

__all__ = [
    "CHUNK_ROWS", "CompactionReport", "compacted_operations", "differences", "history_operations", "live_entities",
    "read_log", "same_state",
]

#: An element of the sequences _topological orders.
H = TypeVar("H", bound=Hashable)

#: Rows per ``compact`` operation: replay holds one operation's rows at a time.
CHUNK_ROWS = 4096


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What ``compact()`` did: the log's size in bytes, rows and operations before and after."""

    keep_history: bool
    bytes_before: int
    bytes_after: int
    rows_before: int
    rows_after: int
    operations_before: int
    operations_after: int
    seconds: float


def _topological(items: Sequence[H], sequences: Iterable[Sequence[H]]) -> list[H]:
    """``items`` reordered as little as needed so that each sequence keeps its relative
    order (elements not in ``items`` are ignored), otherwise in the original order.

    The sequences are lists the state keeps in arrival order, all built by one sequence of
    operations, so one order satisfies them all; Kahn's algorithm, taking the earliest free
    item, finds it. The common case needs no reordering and is detected first.
    """
    position = {item: index for index, item in enumerate(items)}
    chains = [[position[item] for item in sequence if item in position] for sequence in sequences]
    if all(a < b for chain in chains for a, b in pairwise(chain)):
        return list(items)
    after: dict[int, list[int]] = {}
    waiting = [0] * len(items)
    for chain in chains:
        for a, b in pairwise(chain):
            after.setdefault(a, []).append(b)
            waiting[b] += 1
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    ordered: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        ordered.append(index)
        for follower in after.get(index, ()):
            waiting[follower] -= 1
            if waiting[follower] == 0:
                heapq.heappush(ready, follower)
    if len(ordered) < len(items):  # orders that disagree (replay never builds them): keep the rest as they were
        placed = set(ordered)
        ordered.extend(index for index in range(len(items)) if index not in placed)
    return [items[index] for index in ordered]


def live_entities(state: State) -> list[Entity]:
    """The current version of every live entity, in an order whose replay rebuilds ``state``."""
    keywords = state.keywords
    live_keywords = [k for k in keywords if not keywords[k].deleted]
    sequences: list[list[str]] = list(state.children.values())
    sequences.extend([parent, ids[0]] for parent, ids in state.children.items() if ids)
    entities: list[Entity] = [keywords[kid] for kid in _topological(live_keywords, sequences)]

    infos = state.infos
    entities.extend(info for info in infos.values() if not info.deleted)

    def live_link(key: tuple[str, str]) -> bool:
        info, keyword = infos.get(key[0]), keywords.get(key[1])
        return info is not None and not info.deleted and keyword is not None and not keyword.deleted

    links = [key for key, link in state.links.items() if not link.deleted and live_link(key)]
    link_orders = [[(info_id, kid) for info_id in by_keyword] for kid, by_keyword in state.infos_by_keyword.items()]
    link_orders.extend([(info_id, kid) for kid in kids] for info_id, kids in state.keywords_by_info.items())
    entities.extend(state.links[key] for key in _topological(links, link_orders))

    def live_relation(rel: Relation) -> bool:
        source, target = keywords.get(rel.from_id), keywords.get(rel.to_id)
        return source is not None and not source.deleted and target is not None and not target.deleted

    relations = [key for key, rel in state.relations.items() if not rel.deleted and live_relation(rel)]
    relation_orders = [[(node, to, kind) for to, kind in rels] for node, rels in state.rel_out.items()]
    relation_orders.extend([(source, node, kind) for source, kind in rels] for node, rels in state.rel_in.items())
    entities.extend(state.relations[key] for key in _topological(relations, relation_orders))
    return entities


def _chunk_ids(last_op_id: str, count: int) -> list[str]:
    """``count`` increasing operation ids ending at ``last_op_id``."""
    last = int(last_op_id, 16)
    return [f"{last - count + 1 + index:032x}" for index in range(count)]


def compacted_operations(state: State, tick: Ticker | None = None) -> Iterator[tuple[str, bytes]]:
    """(op id, rows) of each ``compact`` operation of the log that rebuilds ``state``; the
    last one has the state's last op id, so the tree's ``last_op_id`` does not change.
    ``tick`` is given the number of entities to write and counts those handed out."""
    assert state.last_op_id is not None
    entities = live_entities(state)
    if tick is not None:
        tick.total = len(entities)
    chunks = [entities[start : start + CHUNK_ROWS] for start in range(0, len(entities), CHUNK_ROWS)]
    for op_id, chunk in zip(_chunk_ids(state.last_op_id, len(chunks)), chunks, strict=True):
        yield op_id, encode_compacted(op_id, state.last_timestamp, chunk, None)
        if tick is not None:
            tick.add(len(chunk))


def history_operations(operations: Iterable[RawOperation]) -> Iterator[tuple[str, bytes]]:
    """(op id, rows) of every whole operation once, in op-id order (rows as they were read)."""
    last = ""
    for raw in sorted(operations, key=lambda raw: raw.op_id):
        if raw.op_id == last:
            continue  # a copy of the operation before (a naive merge)
        last = raw.op_id
        rows = raw.rows
        if CRC_KEY in rows[-1]["end"]:  # the writer of the new log checksums it afresh
            end = {key: value for key, value in rows[-1]["end"].items() if key != CRC_KEY}
            rows = [*rows[:-1], {**rows[-1], "end": end}]
        yield raw.op_id, b"".join(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in rows)


def read_log(segments: Iterable[tuple[str, bytes]], *, parse: bool) -> tuple[list[RawOperation], int, int]:
    """The log's whole operations (parsed only when ``parse``; else an empty list), and its
    size in bytes and rows, from ``Engine.read_segments()``: what a rewrite of the whole log
    (compaction with history, forget) starts from."""
    operations: list[RawOperation] = []
    size = rows = 0
    for path, data in segments:
        size += len(data)
        rows += data.count(b"\n")
        if parse:
            operations.extend(parse_operations(data, path, 1)[0])
    return operations, size, rows


def same_state(state: State, what: str) -> Callable[[State], None]:
    """The check ``Engine.replace_log`` runs on the new log: StorageError (the old log stays,
    ``what`` says what was aborted) unless it replays to a state no public read can tell
    apart from ``state``."""

    def check(rebuilt: State) -> None:
        found = differences(state, rebuilt)
        if found:
            raise StorageError(f"{what} aborted, the log is unchanged: the new log would not replay to the same "
                               f"state ({'; '.join(found)}); please report this")

    return check


def _live_view(state: State) -> dict[str, Any]:
    """Everything a public read can see of ``state``, as comparable values."""
    keywords = {k: v for k, v in state.keywords.items() if not v.deleted}
    infos = {k: v for k, v in state.infos.items() if not v.deleted}
    links = {k: v for k, v in state.links.items() if not v.deleted and k[0] in infos and k[1] in keywords}
    relations = {k: v for k, v in state.relations.items()
                 if not v.deleted and v.from_id in keywords and v.to_id in keywords}
    return {
        "keywords": keywords,
        "infos": infos,
        "links": links,
        "relations": relations,
        "children": {k: list(v) for k, v in state.children.items() if v},
        "names": {k: sorted([v] if type(v) is str else v) for k, v in state.names.items() if v},
        "infos_by_keyword": {k: [i for i in v if i in infos]
                             for k, v in state.infos_by_keyword.items() if k in keywords},
        "keywords_by_info": {k: [i for i in v if i in keywords]
                             for k, v in state.keywords_by_info.items() if k in infos},
        "rel_out": {k: [r for r in v if (k, *r) in relations] for k, v in state.rel_out.items()},
        "rel_in": {k: [r for r in v if (r[0], k, r[1]) in relations] for k, v in state.rel_in.items()},
        "last_op_id": state.last_op_id,
        "last_timestamp": state.last_timestamp,
    }


def _drop_empty(view: dict[str, Any]) -> dict[str, Any]:
    return {key: ({k: v for k, v in value.items() if v} if type(value) is dict else value)
            for key, value in view.items()}


def differences(before: State, after: State) -> list[str]:
    """What a public read could tell apart between two states (empty when nothing)."""
    old, new = _drop_empty(_live_view(before)), _drop_empty(_live_view(after))
    found = []
    for key in old:
        if old[key] != new[key]:
            if type(old[key]) is dict:
                keys = [k for k in old[key].keys() | new[key].keys() if old[key].get(k) != new[key].get(k)]
                found.append(f"{key}: {len(keys)} differ, e.g. {keys[:3]!r}")
            else:
                found.append(f"{key}: {old[key]!r} != {new[key]!r}")
    return found

