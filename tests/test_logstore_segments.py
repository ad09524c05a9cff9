"""The JSONL segment store (kwtree.stores.segments) against the log-store contract, and what
only it has: torn tails withheld and moved to quarantine/, damage refused, checksums added."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from logstore_contract import (
    LogStoreContract,
    StoreFactory,
    append_all,
    make_operation,
    operations_in,
    read_through,
)

from kwtree.engine.events import OpClock
from kwtree.errors import CorruptLogError, StorageError
from kwtree.stores.logstore import LogStore
from kwtree.stores.segments import SegmentStore, whole_operations_end


def open_segment_store(location: Path, lock_timeout: float) -> LogStore:
    return SegmentStore.create(location, lock_timeout=lock_timeout)


def open_small_segment_store(location: Path, lock_timeout: float) -> LogStore:
    """Segments of 4 KiB, so that reads, positions and replacements cross segments."""
    return SegmentStore.create(location, segment_bytes=4096, lock_timeout=lock_timeout)


FACTORIES = [
    StoreFactory("segments", "test_logstore_segments:open_segment_store"),
    StoreFactory("small-segments", "test_logstore_segments:open_small_segment_store"),
]


@pytest.fixture(params=FACTORIES, ids=lambda factory: factory.name)
def factory(request: pytest.FixtureRequest) -> StoreFactory:
    return request.param


class TestSegmentStore(LogStoreContract):
    pass


# --- what only the JSONL store has ------------------------------------------------------------


def _newest_segment(directory: Path) -> Path:
    return sorted((directory / "log").glob("*.jsonl"))[-1]


def test_a_torn_tail_is_withheld_then_moved_to_quarantine(tmp_path):
    clock = OpClock()
    store = SegmentStore.create(tmp_path / "t", durable=False)
    whole = [make_operation(clock) for _ in range(2)]
    append_all(store, whole)
    torn_id, torn = make_operation(clock, rows=3)
    with _newest_segment(tmp_path / "t").open("ab") as segment:
        segment.write(torn[: torn.rindex(b"\n", 0, len(torn) - 1) + 5])  # two rows and a bit of the end row
    reader = SegmentStore(tmp_path / "t", writable=False)
    assert [op for op, _ in operations_in(reader.tail(None))] == [op for op, _ in whole]
    last = make_operation(clock)
    append_all(store, [last])
    assert [op for op, _ in operations_in(reader.read(None))] == [whole[0][0], whole[1][0], last[0]]
    assert [p.name.split(".")[0] for p in (tmp_path / "t" / "quarantine").iterdir()] == [
        _newest_segment(tmp_path / "t").stem]
    store.close()
    reader.close()


def test_a_whole_operation_hidden_behind_a_nul_byte_is_damage(tmp_path):
    clock = OpClock()
    store = SegmentStore.create(tmp_path / "t", durable=False)
    append_all(store, [make_operation(clock) for _ in range(3)])
    store.close()
    segment = _newest_segment(tmp_path / "t")
    data = bytearray(segment.read_bytes())
    data[data.index(b"\n") + 1] = 0  # the second operation's first byte
    segment.write_bytes(bytes(data))
    reader = SegmentStore(tmp_path / "t", writable=False)
    with pytest.raises(CorruptLogError) as caught:
        list(reader.tail(None))
    assert caught.value.path == str(segment) and caught.value.line == 2
    reader.close()


def test_appended_operations_carry_a_checksum(tmp_path):
    clock = OpClock()
    store = SegmentStore.create(tmp_path / "t")
    append_all(store, [make_operation(clock, rows=2)])
    batches = list(store.read(None))
    assert all(batch.checksums for batch in batches)
    end_row = orjson.loads(batches[0].data.split(b"\n")[1])
    assert type(end_row["end"]["crc"]) is int
    store.close()


_WHOLE = b'{"op":"' + b"a" * 32 + b'","end":{}}\n'
_OPEN = b'{"op":"' + b"b" * 32 + b'"}\n'


@pytest.mark.parametrize(
    ("data", "whole"),
    [
        (b"", 0),
        (_WHOLE, len(_WHOLE)),
        (_WHOLE + _OPEN + _OPEN, len(_WHOLE)),  # an operation without its end row yet
        (_WHOLE + _OPEN[:-5], len(_WHOLE)),  # a partial line
        (_OPEN, 0),
        (_OPEN + _WHOLE, len(_OPEN + _WHOLE)),  # the replay reports the row without an end row
        (_WHOLE + b"not json\n", len(_WHOLE) + 9),  # left for the replay to report
    ],
)
def test_whole_operations_end(data, whole):
    assert whole_operations_end(data) == whole


def test_an_empty_newest_segment_left_by_a_crash_is_written_to_next(tmp_path):
    """A writer killed between creating a segment and writing its first operation leaves it
    empty: readers pass over it and the next append fills it."""
    clock = OpClock()
    store = SegmentStore.create(tmp_path / "t", segment_bytes=4096, durable=False)
    first = [make_operation(clock, size=5000)]
    append_all(store, first)
    empty_name, _ = make_operation(clock)
    (tmp_path / "t" / "log" / f"{empty_name}.jsonl").write_bytes(b"")
    later = [make_operation(clock)]
    append_all(store, later)
    assert [op for op, _ in operations_in(store.read(None))] == [first[0][0], later[0][0]]
    assert _newest_segment(tmp_path / "t").stem == empty_name
    store.close()


def test_a_log_replaced_while_it_is_read_restarts_from_the_new_one(tmp_path):
    """A compaction removes the old segments under a reader paused between two of them: its
    next batch restarts from the new log instead of failing."""
    clock = OpClock()
    writer = SegmentStore.create(tmp_path / "t", segment_bytes=4096, durable=False)
    old = [make_operation(clock, size=5000) for _ in range(4)]
    append_all(writer, old)
    reader = SegmentStore(tmp_path / "t", writable=False)
    batches = reader.tail(None)
    first = next(batches)
    assert [op for op, _ in operations_in([first])] == [old[0][0]]
    new = [make_operation(clock, size=5000) for _ in range(3)]
    with writer.locked():
        _, end = read_through(writer.tail(None))
        writer.replace(new, after=end)
    rest = list(batches)
    assert rest[0].restart
    assert [op for op, _ in operations_in(rest)] == [op for op, _ in new]
    writer.close()
    reader.close()


def test_replace_moves_a_torn_tail_to_quarantine(tmp_path):
    clock = OpClock()
    store = SegmentStore.create(tmp_path / "t", durable=False)
    append_all(store, [make_operation(clock)])
    _, torn = make_operation(clock, rows=2)
    with _newest_segment(tmp_path / "t").open("ab") as segment:
        segment.write(torn[:-20])
    new = [make_operation(clock)]
    with store.locked():
        _, end = read_through(store.tail(None))
        store.replace(new, after=end)
    assert [op for op, _ in operations_in(store.read(None))] == [new[0][0]]
    (kept,) = (tmp_path / "t" / "quarantine").iterdir()
    assert kept.read_bytes() == torn[:-20]
    store.close()


def test_replace_first_finishes_a_replacement_a_crash_interrupted(tmp_path):
    """A writer that died after committing a new log (``log.compacted/``, the portable swap)
    but before putting it in place: the next replacement finishes that one first and, since
    the log it read is gone, refuses until the log is read again."""
    clock = OpClock()
    directory = tmp_path / "t"
    store = SegmentStore.create(directory, durable=False)
    old = [make_operation(clock) for _ in range(2)]
    append_all(store, old)
    shutil.copytree(directory / "log", directory / "log.compacted")  # the dead writer's new log
    new = [make_operation(clock)]
    with store.locked():
        _, end = read_through(store.tail(None))
        with pytest.raises(StorageError):
            store.replace(new, after=end)
        assert not (directory / "log.compacted").exists()
        got = list(store.tail(end))
        assert got[0].restart and [op for op, _ in operations_in(got)] == [op for op, _ in old]
        store.replace(new, after=got[-1].end)
    assert [op for op, _ in operations_in(store.read(None))] == [new[0][0]]
    store.close()
