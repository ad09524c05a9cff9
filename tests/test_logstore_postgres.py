"""The PostgreSQL log store (kwtree.stores.postgres) against the log-store contract, on a real
server (tests/postgres_server.py), and what only it has: URLs, read-only stores, a writer
whose lock went with its connection."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pytest
from logstore_contract import LogStoreContract, StoreFactory, append_all, make_operation, read_through
from postgres_server import ENV, server_url

from kwtree.engine.events import OpClock
from kwtree.errors import InvalidInputError, StorageError
from kwtree.stores.logstore import Behind, LogStore
from kwtree.stores.postgres import DEFAULT_TREE, PostgresStore, split_url

URL = server_url()
pytestmark = pytest.mark.skipif(URL is None, reason=__import__("postgres_server").why_not or "no PostgreSQL")


def _tree_of(location: Path) -> str:
    """The log's name for a test location: unique per test, as a directory would be."""
    return "t" + hashlib.sha256(str(location).encode()).hexdigest()[:24]


def open_postgres_store(location: Path, lock_timeout: float) -> LogStore:
    return PostgresStore(os.environ[ENV], _tree_of(location), lock_timeout=lock_timeout)


FACTORIES = [StoreFactory("postgres", "test_logstore_postgres:open_postgres_store")]


class TestPostgresStoreContract(LogStoreContract):
    @pytest.fixture(params=FACTORIES, ids=lambda factory: factory.name)
    def factory(self, request: pytest.FixtureRequest) -> StoreFactory:
        return request.param


@pytest.mark.parametrize(("url", "conninfo", "tree", "schema"), [
    ("postgresql://u@h/db", "postgresql://u@h/db", DEFAULT_TREE, "public"),
    ("postgresql://u@h/db?tree=alice&sslmode=require", "postgresql://u@h/db?sslmode=require", "alice", "public"),
    ("postgres:///db?host=/tmp&schema=memory&tree=a%20b", "postgres:///db?host=%2Ftmp", "a b", "memory"),
])
def test_a_url_names_the_server_the_tree_and_the_schema(url: str, conninfo: str, tree: str, schema: str) -> None:
    assert split_url(url) == (conninfo, tree, schema)


@pytest.mark.parametrize("url", ["mysql://h/db", "/var/data", "postgresql://h/db?schema=a-b", "postgresql://h/db?tree="])
def test_a_bad_url_is_refused_naming_log(url: str) -> None:
    with pytest.raises(InvalidInputError, match="log"):
        split_url(url)


def test_a_read_only_store_reads_and_refuses_to_write(tmp_path: Path) -> None:
    clock = OpClock()
    writer = open_postgres_store(tmp_path, 5.0)
    operations = [make_operation(clock) for _ in range(3)]
    append_all(writer, operations)
    reader = PostgresStore(os.environ[ENV], _tree_of(tmp_path), writable=False)
    batches, end = read_through(reader.tail(None))
    assert sum(batch.data.count(b"\n") for batch in batches) == 3 and not any(b.checksums for b in batches)
    with reader.locked(), pytest.raises(StorageError, match="read-only"):
        reader.append(make_operation(clock)[1], "x", after=end)
    writer.close()
    reader.close()


def test_a_writer_whose_connection_died_cannot_append_over_another(tmp_path: Path) -> None:
    """The lock goes with the connection (as with a killed process); the position check is the
    database's, so the first writer's stale decision is refused, not committed."""
    clock = OpClock()
    first, second = open_postgres_store(tmp_path, 5.0), open_postgres_store(tmp_path, 5.0)
    append_all(first, [make_operation(clock)])
    with first.locked():
        _, position = read_through(first.tail(None))
        first._lock_conn.close()  # type: ignore[attr-defined]  # the server frees the lock with it
        append_all(second, [make_operation(clock)])
        op_id, data = make_operation(clock)
        with pytest.raises(StorageError, match="tail it and decide again"):
            first.append(data, op_id, after=position)
    assert [b.data.count(b"\n") for b in second.read(None)] == [2]
    first.close()
    second.close()


def test_first_opens_at_once_create_the_tables_once(tmp_path: Path) -> None:
    """Processes opening a new database (here a new schema) at the same instant: CREATE TABLE
    IF NOT EXISTS is not safe against a concurrent one (a duplicate pg_type row), so the
    first opens take turns."""
    import threading

    schema = f"s{uuid.uuid4().hex[:12]}"
    barrier, failures = threading.Barrier(6), []

    def open_one(n: int) -> None:
        barrier.wait()
        try:
            PostgresStore(os.environ[ENV], f"tree{n}", schema=schema).close()
        except StorageError as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_replace_never_deletes_an_append_committed_beside_it(tmp_path: Path) -> None:
    """A writer whose lock went with its connection may still be committing an append when
    another replaces the log: the replace must then see it and give up, not delete it with
    the old generation."""
    import threading

    import psycopg

    clock = OpClock()
    store = open_postgres_store(tmp_path, 5.0)
    append_all(store, [make_operation(clock)])
    with store.locked():
        batches, end = read_through(store.tail(None))
        op_id, data = make_operation(clock)
        late = psycopg.connect(os.environ[ENV])  # the lost-lock writer, mid-transaction
        late.execute("SELECT generation FROM kwtree_trees WHERE tree = %s FOR SHARE", (store.tree,))  # type: ignore[attr-defined]
        late.execute("INSERT INTO kwtree_log (tree, generation, seq, op_id, kind, ts, data) VALUES "
                     "(%s, %s, 2, %s, 'create_info', 0, %s)", (store.tree, end.generation, op_id, data))  # type: ignore[attr-defined, union-attr]
        outcome: list[BaseException | None] = []

        def replace() -> None:
            try:
                store.replace([], after=end)
                outcome.append(None)
            except StorageError as exc:
                outcome.append(exc)

        replacing = threading.Thread(target=replace)
        replacing.start()
        replacing.join(0.5)  # it waits for the late writer's row lock
        late.commit()
        replacing.join()
        late.close()
    assert isinstance(outcome[0], StorageError)  # it saw the append and gave up
    assert [b.data.count(b"\n") for b in store.read(None)] == [2]
    store.close()


def test_an_unlocked_append_behind_the_end_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """append_unlocked needs no lock: the primary key refuses a place another writer took."""
    clock = OpClock()
    mine, other = open_postgres_store(tmp_path, 5.0), open_postgres_store(tmp_path, 5.0)
    assert isinstance(mine, PostgresStore) and isinstance(other, PostgresStore)
    first = make_operation(clock)
    start = mine.append_unlocked(first[1], first[0], after=None)  # the first append of a log, too
    taken = make_operation(clock)
    other.append_unlocked(taken[1], taken[0], after=start)
    op_id, data = make_operation(clock)
    with pytest.raises(Behind, match="tail it and decide again"):
        mine.append_unlocked(data, op_id, after=start)
    _, end = read_through(mine.tail(start))
    assert mine.append_unlocked(data, op_id, after=end).key == (3,)
    assert [b.data.count(b"\n") for b in mine.read(None)] == [3]
    mine.close()
    other.close()


def test_an_unlocked_append_waits_for_a_holder_of_the_lock_and_never_lands_behind_its_replace(
        tmp_path: Path) -> None:
    """A compaction or a forget holds locked() while it decides and replaces the log: an
    unlocked append waits for it (up to lock_timeout), then finds the log replaced (Behind),
    never written into the generation the replace deleted."""
    import threading

    clock = OpClock()
    holder, writer = open_postgres_store(tmp_path, 5.0), open_postgres_store(tmp_path, 5.0)
    assert isinstance(writer, PostgresStore)
    (end,) = append_all(holder, [make_operation(clock)])
    op_id, data = make_operation(clock)
    outcome: list[BaseException | object] = []

    def append() -> None:
        try:
            outcome.append(writer.append_unlocked(data, op_id, after=end))
        except StorageError as exc:
            outcome.append(exc)

    with holder.locked():
        appending = threading.Thread(target=append)
        appending.start()
        appending.join(0.5)
        assert appending.is_alive() and outcome == []  # it waits for the lock's holder
        holder.replace([], after=end)
    appending.join()
    assert isinstance(outcome[0], Behind)
    assert [b.data for b in holder.read(None)] in ([], [b""])  # the replaced log holds nothing of it
    holder.close()
    writer.close()


def test_an_unlocked_append_gives_up_after_the_lock_timeout(tmp_path: Path) -> None:
    from kwtree.errors import LockTimeoutError

    clock = OpClock()
    holder, writer = open_postgres_store(tmp_path, 5.0), open_postgres_store(tmp_path, 0.2)
    assert isinstance(writer, PostgresStore)
    (end,) = append_all(holder, [make_operation(clock)])
    op_id, data = make_operation(clock)
    with holder.locked(), pytest.raises(LockTimeoutError, match="not appended"):
        writer.append_unlocked(data, op_id, after=end)
    assert [b.data.count(b"\n") for b in holder.read(None)] == [1]
    holder.close()
    writer.close()
