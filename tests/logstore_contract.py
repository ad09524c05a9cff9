"""The log-store contract (``kwtree.stores.logstore.LogStore``), written once.

Every implementation runs these tests unchanged: its test module subclasses
``LogStoreContract`` and provides a ``factory`` fixture giving one or more ``StoreFactory``
(``tests/test_logstore_segments.py`` does it for the JSONL segment store). A factory opens
the store of a *location* (a path: a data directory, or for a database store a name derived
from it); opening one location twice gives two stores on one log. Child processes open
stores through the factory's ``opener`` (``"module:function"``, importable from tests/).
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from kwtree.engine.events import OpClock, encode_operation
from kwtree.errors import LockTimeoutError, StorageError
from kwtree.models import EMPTY_METADATA, Change, Info, Operation
from kwtree.stores.logstore import Batch, LogStore, Position

__all__ = ["LogStoreContract", "StoreFactory", "make_operation"]

TESTS_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class StoreFactory:
    """How to open one kind of store: ``opener`` names ``function(location: Path,
    lock_timeout: float) -> LogStore`` as ``"module:function"`` (a module in tests/)."""

    name: str
    opener: str

    def open(self, location: Path, lock_timeout: float = 5.0) -> LogStore:
        module, _, function = self.opener.partition(":")
        store = getattr(importlib.import_module(module), function)(location, lock_timeout)
        assert isinstance(store, LogStore)
        return store


def make_operation(clock: OpClock, rows: int = 1, size: int = 20) -> tuple[str, bytes]:
    """(op id, encoded rows) of a new operation creating ``rows`` infos of ``size`` characters."""
    op_id, ts = clock.next()
    changes = tuple(
        Change(Info(uuid.uuid4().hex, f"{index} " + "x" * size, "", EMPTY_METADATA, 1, ts, ts, False, op_id), None)
        for index in range(rows)
    )
    return op_id, encode_operation(Operation(op_id, "create_info", "test", ts, changes))


def _rows(data: bytes) -> list[dict[str, Any]]:
    """The rows of ``data``, without the checksum a store may have added to end markers."""
    rows = [orjson.loads(line) for line in data.split(b"\n")[:-1]]
    for row in rows:
        if "end" in row:
            row["end"].pop("crc", None)
    return rows


def operations_in(batches: Iterable[Batch]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(op id, rows) of each operation in ``batches``; fails unless every batch holds whole
    operations only (each one's rows consecutive, its end row last, nothing after it)."""
    found: list[tuple[str, list[dict[str, Any]]]] = []
    for batch in batches:
        pending: list[dict[str, Any]] = []
        for row in _rows(batch.data):
            assert not pending or row["op"] == pending[0]["op"], "rows of two operations interleave"
            pending.append(row)
            if "end" in row:
                assert row["end"]["rows"] == len(pending)
                found.append((row["op"], pending))
                pending = []
        assert not pending, f"a batch ends inside operation {pending[0]['op']}"
    return found


def read_through(batches: Iterator[Batch], start: Position | None = None) -> tuple[list[Batch], Position | None]:
    """Every batch and the position after the last one (``start`` if there is none)."""
    got = list(batches)
    return got, got[-1].end if got else start


def append_all(store: LogStore, operations: list[tuple[str, bytes]]) -> list[Position]:
    """Tail ``store`` to its end and append ``operations`` under its lock; the position after each."""
    with store.locked():
        _, position = read_through(store.tail(None))
        positions = []
        for op_id, data in operations:
            position = store.append(data, op_id, after=position)
            positions.append(position)
    return positions


def expected(operations: list[tuple[str, bytes]]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(op_id, _rows(data)) for op_id, data in operations]


_CHILD_HEAD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from logstore_contract import StoreFactory
store = StoreFactory("child", sys.argv[2]).open(Path(sys.argv[3]), float(sys.argv[4]))
"""

#: Holds the lock until its stdin closes.
_HOLD_LOCK = _CHILD_HEAD + """
with store.locked():
    print("locked", flush=True)
    sys.stdin.read()
store.close()
"""

#: Appends large operations until killed, printing each op id once its append returned.
_APPEND_FOREVER = _CHILD_HEAD + """
from kwtree.engine.events import OpClock
from logstore_contract import make_operation
clock = OpClock()
with store.locked():
    position = None
    for batch in store.tail(None):
        position = batch.end
    while True:
        op_id, data = make_operation(clock, rows=40, size=2000)
        position = store.append(data, op_id, after=position)
        print(op_id, flush=True)
"""

#: Appends one operation per line of stdin, printing its id once it is durable.
_APPEND_ON_REQUEST = _CHILD_HEAD + """
from kwtree.engine.events import OpClock
from logstore_contract import make_operation
clock = OpClock()
for line in sys.stdin:
    with store.locked():
        position = None
        for batch in store.tail(None):
            position = batch.end
        op_id, data = make_operation(clock, rows=int(line))
        store.append(data, op_id, after=position)
    print(op_id, flush=True)
store.close()
"""


class LogStoreContract:
    """The tests every ``LogStore`` passes; a subclass provides the ``factory`` fixture."""

    @pytest.fixture
    def clock(self) -> OpClock:
        return OpClock()

    @pytest.fixture
    def opened(self, factory: StoreFactory) -> Iterator[list[LogStore]]:
        stores: list[LogStore] = []
        yield stores
        for store in stores:
            store.close()

    def open(self, factory: StoreFactory, opened: list[LogStore], location: Path,
             lock_timeout: float = 5.0) -> LogStore:
        store = factory.open(location, lock_timeout)
        opened.append(store)
        return store

    def child(self, children: Any, factory: StoreFactory, code: str, location: Path, lock_timeout: float = 5.0) -> Any:
        return children(code, TESTS_DIR, factory.opener, location, lock_timeout)

    # --- reading what was appended ---------------------------------------------------------

    def test_an_empty_log_reads_nothing_and_takes_a_first_append(self, factory, opened, tmp_path, clock):
        store = self.open(factory, opened, tmp_path / "t")
        assert list(store.tail(None)) == []
        assert list(store.read(None)) == []
        first = make_operation(clock)
        with store.locked():
            got, position = read_through(store.tail(None))
            assert got == [] and position is None
            end = store.append(first[1], first[0], after=position)
        assert operations_in(store.read(None)) == expected([first])
        assert list(store.read(end)) == []

    def test_appended_operations_read_back_whole_and_in_order(self, factory, opened, tmp_path, clock):
        store = self.open(factory, opened, tmp_path / "t")
        operations = [make_operation(clock, rows=1 + index % 3, size=300) for index in range(40)]
        positions = append_all(store, operations)
        batches = list(store.read(None))
        assert operations_in(batches) == expected(operations)
        assert batches[-1].end == positions[-1]
        assert all(batch.restart is False for batch in batches)
        assert operations_in(store.tail(None)) == expected(operations)

    def test_operations_survive_close_and_reopen(self, factory, opened, tmp_path, clock):
        store = self.open(factory, opened, tmp_path / "t")
        operations = [make_operation(clock, rows=2) for _ in range(5)]
        append_all(store, operations)
        store.close()
        store.close()  # harmless
        again = self.open(factory, opened, tmp_path / "t")
        assert operations_in(again.read(None)) == expected(operations)
        more = [make_operation(clock)]
        append_all(again, more)
        assert operations_in(again.read(None)) == expected(operations + more)

    def test_reading_from_a_position_returned_earlier(self, factory, opened, tmp_path, clock):
        store = self.open(factory, opened, tmp_path / "t")
        operations = [make_operation(clock, rows=3, size=500) for _ in range(12)]
        positions = append_all(store, operations)
        for index, position in enumerate(positions):
            assert operations_in(store.read(position)) == expected(operations[index + 1:])
            assert operations_in(store.tail(position)) == expected(operations[index + 1:])
        # a batch's end is a position too, and reading from it again gives the same
        first_batch = next(iter(store.read(None)))
        rest = operations_in(store.read(first_batch.end))
        assert operations_in([first_batch]) + rest == expected(operations)
        assert operations_in(store.read(positions[3])) == expected(operations[4:])  # going back works

    def test_a_second_store_tails_exactly_the_new_operations_once(self, factory, opened, tmp_path, clock):
        writer = self.open(factory, opened, tmp_path / "t")
        reader = self.open(factory, opened, tmp_path / "t")
        old = [make_operation(clock) for _ in range(3)]
        append_all(writer, old)
        got, position = read_through(reader.tail(None))
        assert operations_in(got) == expected(old)
        for count in (1, 4, 0, 2):
            new = [make_operation(clock, rows=2) for _ in range(count)]
            if new:
                append_all(writer, new)
            got, position = read_through(reader.tail(position), position)
            assert operations_in(got) == expected(new)
            assert not any(batch.restart for batch in got)
        assert list(reader.tail(position)) == []

    def test_a_real_second_process_appends_and_a_store_tails_it(self, factory, opened, tmp_path, clock, children):
        location = tmp_path / "t"
        reader = self.open(factory, opened, location)
        child = self.child(children, factory, _APPEND_ON_REQUEST, location)
        position = None
        appended = []
        for rows in (1, 3, 2):
            child.send(str(rows))
            appended.append(child.readline())
            got, position = read_through(reader.tail(position), position)
            assert [op_id for op_id, _ in operations_in(got)] == appended[-1:]
        child.wait_exit()
        assert [op_id for op_id, _ in operations_in(reader.read(None))] == appended

    # --- appending ---------------------------------------------------------------------------

    def test_an_append_outside_the_lock_is_refused(self, factory, opened, tmp_path, clock):
        store = self.open(factory, opened, tmp_path / "t")
        first = make_operation(clock)
        positions = append_all(store, [first])
        op_id, data = make_operation(clock)
        with pytest.raises(StorageError):
            store.append(data, op_id, after=positions[-1])
        assert operations_in(store.read(None)) == expected([first])

    def test_an_append_behind_the_end_of_the_log_is_refused(self, factory, opened, tmp_path, clock):
        writer = self.open(factory, opened, tmp_path / "t")
        other = self.open(factory, opened, tmp_path / "t")
        first, second, late = make_operation(clock), make_operation(clock), make_operation(clock)
        position = append_all(writer, [first])[-1]
        append_all(other, [second])
        with writer.locked():
            with pytest.raises(StorageError):  # it did not read the log under this lock
                writer.append(late[1], late[0], after=position)
            got, end = read_through(writer.tail(position), position)
            assert operations_in(got) == expected([second])
            with pytest.raises(StorageError):  # not the end of the log it read
                writer.append(late[1], late[0], after=position)
            writer.append(late[1], late[0], after=end)
        assert operations_in(other.read(None)) == expected([first, second, late])

    # --- the lock ----------------------------------------------------------------------------

    def test_the_lock_excludes_a_second_store(self, factory, opened, tmp_path):
        first = self.open(factory, opened, tmp_path / "t")
        second = self.open(factory, opened, tmp_path / "t", lock_timeout=0.05)
        with first.locked(), pytest.raises(LockTimeoutError), second.locked():
            pass
        with second.locked():
            pass

    def test_the_lock_excludes_a_second_process(self, factory, opened, tmp_path, children):
        location = tmp_path / "t"
        store = self.open(factory, opened, location, lock_timeout=0.1)
        child = self.child(children, factory, _HOLD_LOCK, location)
        child.expect("locked")
        with pytest.raises(LockTimeoutError), store.locked():
            pass
        child.wait_exit()
        with store.locked():
            pass

    @pytest.mark.slow
    def test_a_writer_killed_mid_append_loses_no_acknowledged_operation(self, factory, opened, tmp_path, clock,
                                                                       children):
        location = tmp_path / "t"
        self.open(factory, opened, location).close()  # created before the child races to
        child = self.child(children, factory, _APPEND_FOREVER, location)
        acknowledged = [child.readline() for _ in range(15)]
        acknowledged += child.kill().split()
        store = self.open(factory, opened, location)
        found = [op_id for op_id, _ in operations_in(store.read(None))]  # whole operations only
        assert found[:len(acknowledged)] == acknowledged
        assert len(found) <= len(acknowledged) + 1  # at most the one being appended, whole
        last = make_operation(clock)
        append_all(store, [last])  # the store cleans up what the killed append left
        reopened = self.open(factory, opened, location)
        assert [op_id for op_id, _ in operations_in(reopened.read(None))] == found + [last[0]]

    # --- replacing the log -------------------------------------------------------------------

    def test_replace_gives_followers_a_restart_from_the_new_log(self, factory, opened, tmp_path, clock):
        writer = self.open(factory, opened, tmp_path / "t")
        follower = self.open(factory, opened, tmp_path / "t")
        old = [make_operation(clock, rows=2, size=400) for _ in range(10)]
        append_all(writer, old)
        _, position = read_through(follower.tail(None))
        new = [make_operation(clock, rows=3, size=400) for _ in range(4)]
        with writer.locked():
            _, mine = read_through(writer.tail(None))
            end = writer.replace(new, after=mine)
            late = make_operation(clock)
            after_late = writer.append(late[1], late[0], after=end)  # the replacement's end is the end
        got = list(follower.tail(position))
        assert got[0].restart and not any(batch.restart for batch in got[1:])
        assert operations_in(got) == expected(new + [late])
        assert list(writer.tail(after_late)) == []
        with pytest.raises(StorageError):
            list(follower.read(position))  # a position in the replaced log
        reopened = self.open(factory, opened, tmp_path / "t")
        assert operations_in(reopened.read(None)) == expected(new + [late])

    def test_a_position_in_a_replaced_log_restarts_even_after_reading_the_new_one(self, factory, opened, tmp_path,
                                                                              clock):
        writer = self.open(factory, opened, tmp_path / "t")
        follower = self.open(factory, opened, tmp_path / "t")
        append_all(writer, [make_operation(clock) for _ in range(3)])
        _, old_position = read_through(follower.tail(None))
        new = [make_operation(clock, rows=2)]
        with writer.locked():
            _, mine = read_through(writer.tail(None))
            writer.replace(new, after=mine)
        assert operations_in(follower.read(None)) == expected(new)
        got = list(follower.tail(old_position))
        assert got[0].restart and operations_in(got) == expected(new)

    def test_replace_with_nothing_gives_one_empty_restart_batch(self, factory, opened, tmp_path, clock):
        writer = self.open(factory, opened, tmp_path / "t")
        follower = self.open(factory, opened, tmp_path / "t")
        append_all(writer, [make_operation(clock) for _ in range(3)])
        _, position = read_through(follower.tail(None))
        with writer.locked():
            _, mine = read_through(writer.tail(None))
            writer.replace([], after=mine)
        got = list(follower.tail(position))
        assert len(got) == 1 and got[0].restart and got[0].data == b""
        assert list(follower.tail(got[0].end)) == []
        assert list(writer.read(None)) == []
        later = [make_operation(clock)]
        append_all(follower, later)
        assert operations_in(writer.read(None)) == expected(later)

    def test_a_failing_check_keeps_the_old_log(self, factory, opened, tmp_path, clock):
        writer = self.open(factory, opened, tmp_path / "t")
        follower = self.open(factory, opened, tmp_path / "t")
        old = [make_operation(clock) for _ in range(3)]
        append_all(writer, old)
        _, position = read_through(follower.tail(None))
        new = [make_operation(clock, rows=2) for _ in range(2)]
        seen: list[tuple[str, list[dict[str, Any]]]] = []

        def check(batches: Iterator[Batch]) -> None:
            seen.extend(operations_in(batches))
            raise ValueError("the new log is wrong")

        with writer.locked():
            _, mine = read_through(writer.tail(None))
            with pytest.raises(ValueError):
                writer.replace(new, after=mine, check=check)
        assert seen == expected(new)  # the check read the new log before it became the log
        assert list(follower.tail(position)) == []
        assert operations_in(writer.read(None)) == expected(old)
        more = [make_operation(clock)]
        append_all(writer, more)
        assert operations_in(follower.tail(position)) == expected(more)

    def test_replace_outside_the_lock_or_behind_the_end_is_refused(self, factory, opened, tmp_path, clock):
        store = self.open(factory, opened, tmp_path / "t")
        other = self.open(factory, opened, tmp_path / "t")
        old = [make_operation(clock)]
        position = append_all(store, old)[-1]
        with pytest.raises(StorageError):
            store.replace([make_operation(clock)], after=position)
        later = [make_operation(clock)]
        append_all(other, later)
        with store.locked(), pytest.raises(StorageError):  # it would drop the operation appended since
            store.replace([make_operation(clock)], after=position)
        assert operations_in(store.read(None)) == expected(old + later)
