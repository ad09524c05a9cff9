"""The event log in PostgreSQL: the log store (``kwtree.stores.logstore``) that many machines
share, so that every process keeps its own state and caches and the database does the
durable, ordered, concurrent appends.

**Tables** (created on first use; ``schema`` names their schema, default ``public``):

- ``kwtree_trees(tree, generation)``: one row per tree (a log's name in the database: many
  trees can share one), naming its current generation;
- ``kwtree_log(tree, generation, seq, op_id, kind, ts, data)``: **one row per operation**,
  ``seq`` 1, 2, 3 ... in append order within a generation, ``data`` the operation's encoded
  rows (``encode_operation``'s JSONL, byte for byte), ``op_id``, ``kind`` and ``ts`` beside
  them for SQL readers. One row per operation, not per entity version: the operation is the
  unit the engine appends, reads and replays whole, and its atomicity then needs no
  reassembly or end marker (a transaction gives it); rows per entity would be put back
  together on every read. The rows are kept as written (not as JSONB, which reorders keys and
  costs a parse on every append and read): the JSONL store holds the same bytes.

**The order is the database's.** A position is ``(generation, (seq,))``. ``append`` inserts
``seq = after + 1`` in one transaction that also checks the generation: the primary key
``(tree, generation, seq)`` refuses an append behind the end of the log (another writer's
operation holds that place), so a decision taken on a stale state can never be committed,
even by a writer that lost its lock with its connection. Every replica reads the same order.
So a writer needs no lock (``append_unlocked``, ``kwtree.stores.logstore.UnlockedAppends``):
it decides on the state it followed and the database refuses the append if another took
that place first (``Behind``). The cross-writer lock, for what decides over several steps
(compaction, forget), is a session advisory lock held exclusively (released by the server
when its connection ends, a SIGKILL included); every unlocked append takes it shared in its
own statement, so it waits for such a holder and lands after it.

``replace`` writes a new generation, lets ``check`` read it, makes it current and deletes
the old one in ONE transaction. Each append also sends ``NOTIFY kwtree_log`` with the new
end of the log and the tree's name (in its transaction: heard once it committed);
``changes`` listens for them on a connection of its own, for a background follower
(``kwtree.engine.follower.BackgroundFollower``), and says when to ask the log anyway.

Readers tail with one indexed query (rows after their ``seq``); a database cannot tear an
operation, so a batch never carries checksums (``Batch.checksums`` False).

psycopg 3 is an optional dependency (``pip install 'kwtree[postgres]'``); this module imports
it when a store is opened.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlencode

import orjson

from kwtree.errors import InvalidInputError, LockTimeoutError, StorageError
from kwtree.stores.files import write_atomically
from kwtree.stores.logstore import Batch, Behind, Position

if TYPE_CHECKING:
    import psycopg

__all__ = ["DEFAULT_TREE", "LOG_RECORD", "NOTIFY_CHANNEL", "PostgresStore", "is_postgres_url", "opener", "record",
           "recorded", "redacted", "split_url"]

log = logging.getLogger("kwtree.stores.postgres")
T = TypeVar("T")

#: The tree a URL names when it has no ``tree`` parameter.
DEFAULT_TREE = "kwtree"
#: The channel each append notifies (payload: the tree's name).
NOTIFY_CHANNEL = "kwtree_log"
#: A tail batch holds at most this many operations.
BATCH_OPERATIONS = 2000
#: The advisory lock (transaction-scoped) that first opens take while they create the tables.
_SETUP_KEY = int.from_bytes(uuid.uuid5(uuid.NAMESPACE_URL, "kwtree:setup").bytes[:8], "big", signed=True)
#: How often an append whose outcome is unknown asks again whether it was committed, seconds.
_RECONNECT = 0.1
#: How often a listener waiting for announcements looks at its stop event, seconds.
_LISTEN_TICK = 0.05
#: The file in which a cache directory records where its log lives (``record``).
LOG_RECORD = "log.json"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def is_postgres_url(text: str) -> bool:
    """True if ``text`` is a PostgreSQL connection URL (``postgresql://`` or ``postgres://``)."""
    return text.startswith(("postgresql://", "postgres://"))


def split_url(url: str) -> tuple[str, str, str]:
    """``(conninfo, tree, schema)`` of a kwtree PostgreSQL URL: the URL without kwtree's own
    query parameters ``tree`` (default ``DEFAULT_TREE``) and ``schema`` (default ``public``).
    InvalidInputError naming ``log`` when it is no PostgreSQL URL or a name is unusable."""
    if not isinstance(url, str) or not is_postgres_url(url):
        raise InvalidInputError(f"log must be a postgresql:// URL, got {url!r}")
    base, _, text = url.partition("?")
    query = parse_qsl(text, keep_blank_values=True)
    ours = {key: value for key, value in query if key in ("tree", "schema")}
    tree, schema = ours.get("tree", DEFAULT_TREE), ours.get("schema", "public")
    if not tree.strip() or len(tree) > 200:
        raise InvalidInputError(f"log's tree parameter must be a name of 1 to 200 characters, got {tree!r}")
    if not _NAME.match(schema):
        raise InvalidInputError(f"log's schema parameter must be an SQL identifier, got {schema!r}")
    rest = urlencode([(key, value) for key, value in query if key not in ("tree", "schema")])
    return (f"{base}?{rest}" if rest else base), tree, schema


def redacted(url: str) -> str:
    """``url`` without its password (in the user part or a ``password`` parameter): what a
    directory may record and a message may show (libpq finds the password in ``PGPASSWORD``
    or ``~/.pgpass``)."""
    base, _, text = url.partition("?")
    scheme, _, rest = base.partition("://")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        user, _, host = authority.rpartition("@")
        authority = f"{user.split(':', 1)[0]}@{host}"
    query = [(key, value) for key, value in parse_qsl(text, keep_blank_values=True) if key != "password"]
    rest = urlencode(query)
    return f"{scheme}://{authority}{slash}{path}" + (f"?{rest}" if rest else "")


def recorded(directory: Path) -> str | None:
    """The log URL (without password) a cache directory recorded (``record``), or None for a
    directory that keeps its own log. StorageError when the record is unreadable."""
    path = directory / LOG_RECORD
    try:
        found = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise StorageError(f"{path} (where this directory's log lives) cannot be read: {exc}") from exc
    url = found.get("url") if isinstance(found, dict) else None
    if not isinstance(url, str) or not is_postgres_url(url):
        raise StorageError(f"{path} does not name a postgresql:// log: {found!r}")
    return url


def record(directory: Path, url: str, file_mode: int) -> None:
    """Record in ``directory`` that its log is ``url`` (without its password), so a later
    open of the directory alone, and every ``kwtree`` command on it, reaches the same log."""
    body = orjson.dumps({"store": "postgresql", "url": redacted(url)}, option=orjson.OPT_INDENT_2) + b"\n"
    path = directory / LOG_RECORD
    if not path.exists() or path.read_bytes() != body:
        write_atomically(path, body, file_mode, sync_directory=True)


def opener(url: str) -> Callable[..., PostgresStore]:
    """A log-store factory (``kwtree.engine.engine.LogStoreFactory``) for the log ``url``
    names (``split_url``): the data directory it is given holds only caches."""
    conninfo, tree, schema = split_url(url)

    def open_store(directory: Path, *, writable: bool, durable: bool, lock_timeout: float) -> PostgresStore:
        return PostgresStore(conninfo, tree, schema=schema, writable=writable, durable=durable,
                             lock_timeout=lock_timeout)

    return open_store


def _driver() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
        raise StorageError("a PostgreSQL log needs psycopg 3: pip install 'kwtree[postgres]'") from exc
    return psycopg


class PostgresStore:
    """The log of one tree in PostgreSQL (see the module's docstring).

    ``conninfo`` is a libpq connection string or URL; ``tree`` names the log among those the
    database holds. ``writable`` False refuses ``append`` and ``replace``; ``durable`` False
    appends with ``synchronous_commit`` off (a crash of the database server may lose the last
    appends, never tear one). Raises StorageError when the database cannot be reached.

    Every operation appended names its predecessor's digest (``chained``): a log written by
    an earlier kwtree holds operations without one before the first that has it."""

    chained = True

    def __init__(self, conninfo: str, tree: str, *, schema: str = "public", writable: bool = True,
                 durable: bool = True, lock_timeout: float = 10.0) -> None:
        self._psycopg = _driver()
        self._conninfo = conninfo
        self.tree = tree
        self._schema = schema
        self._writable = writable
        self._durable = durable
        self._lock_timeout = lock_timeout
        self._conn: psycopg.Connection[Any] | None = None
        self._backend = 0  # the server process of ``_conn``, which appends: its NOTIFYs are our own
        self._lock_conn: psycopg.Connection[Any] | None = None
        self._held = False
        self._guard = threading.Lock()  # one call at a time on the connection
        self._options = ""
        self._key = int.from_bytes(uuid.uuid5(uuid.NAMESPACE_URL, f"kwtree:{schema}:{tree}").bytes[:8], "big",
                                   signed=True)
        with self._errors("open"):
            given = self._psycopg.conninfo.conninfo_to_dict(conninfo).get("options") or ""  # the URL's own, kept
            self._options = f"{given} -c lock_timeout={max(1, int(lock_timeout * 1000))}".strip()
            self._setup(self._connection())

    # --- connections ----------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        """A new autocommitting connection whose every lock wait (the advisory lock, a row a
        replace holds) ends after ``lock_timeout`` (LockNotAvailable)."""
        conn: psycopg.Connection[Any] = self._psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10,
                                                              options=self._options)
        return conn

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = self._conn = self._connect()
            self._backend = conn.info.backend_pid
        return self._conn

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """psycopg's errors as StorageError (the connection dropped is reopened next time)."""
        try:
            yield
        except self._psycopg.Error as exc:
            raise StorageError(f"the PostgreSQL log {self.tree!r} could not {what}: {exc}".strip()) from exc

    def _table(self, name: str) -> str:
        return f'"{self._schema}".{name}'

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        """The tables, made on first use (a role that may only read and write them needs no
        right to create them once they are there). First opens at once take turns: CREATE
        ... IF NOT EXISTS is not safe against a concurrent one."""
        if self._tables_exist(conn):
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SETUP_KEY,))
            if self._tables_exist(conn):
                return
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self._table('kwtree_trees')} ("
                         "tree text PRIMARY KEY, generation text NOT NULL)")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self._table('kwtree_log')} ("
                         "tree text NOT NULL, generation text NOT NULL, seq bigint NOT NULL, op_id text NOT NULL, "
                         "kind text NOT NULL, ts double precision NOT NULL, data bytea NOT NULL, "
                         "PRIMARY KEY (tree, generation, seq), UNIQUE (tree, generation, op_id))")

    def _tables_exist(self, conn: psycopg.Connection[Any]) -> bool:
        found = conn.execute("SELECT to_regclass(%s)", (self._table("kwtree_log"),)).fetchone()
        return found is not None and found[0] is not None

    # --- reading --------------------------------------------------------------------------

    def _generation_locked(self, conn: psycopg.Connection[Any]) -> str | None:
        """The current generation, its row locked until the caller's transaction ends."""
        row = conn.execute(f"SELECT generation FROM {self._table('kwtree_trees')} WHERE tree = %s FOR UPDATE",
                           (self.tree,)).fetchone()
        return None if row is None else str(row[0])

    def _rows_after(self, conn: psycopg.Connection[Any], generation: str, seq: int) -> list[tuple[int, bytes]]:
        return [(int(s), bytes(d)) for s, d in conn.execute(
            f"SELECT seq, data FROM {self._table('kwtree_log')} WHERE tree = %s AND generation = %s AND seq > %s "
            "ORDER BY seq LIMIT %s", (self.tree, generation, seq, BATCH_OPERATIONS)).fetchall()]

    def _batch(self, generation: str, rows: list[tuple[int, bytes]], restart: bool) -> Batch:
        last = rows[-1][0] if rows else 0
        first = rows[0][0] if rows else 1
        return Batch(b"".join(encoded for _, encoded in rows),
                     f"postgresql {self.tree!r} generation {generation} from operation {first}",
                     first, False, Position(generation, (last,)), restart)

    def _scan(self, after: Position | None, *, follow: bool) -> Iterator[Batch]:
        seq = 0 if after is None else int(after.key[0])  # type: ignore[call-overload]
        reading = None if after is None else after.generation
        while True:
            with self._guard, self._errors("be read"):
                found = self._again(functools.partial(self._next_rows, reading=reading, seq=seq))
            if found is None:
                return  # nothing was ever appended
            current, rows, restart = found
            if restart and not follow:
                raise StorageError(f"the PostgreSQL log {self.tree!r} was replaced while it was read; "
                                   "read it again from the start")
            reading = current
            if rows or restart:
                yield self._batch(current, rows, restart)
            if len(rows) < BATCH_OPERATIONS:
                return
            seq = rows[-1][0]

    def _next_rows(self, conn: psycopg.Connection[Any], reading: str | None,
                   seq: int) -> tuple[str, list[tuple[int, bytes]], bool] | None:
        """In one statement (one snapshot, one round trip): the current generation, its rows
        after ``seq`` (from its start when it is not ``reading``), and whether it is not; None
        for a tree never written."""
        found = conn.execute(
            f"SELECT t.generation, l.seq, l.data FROM {self._table('kwtree_trees')} t LEFT JOIN LATERAL ("
            f"SELECT seq, data FROM {self._table('kwtree_log')} WHERE tree = t.tree AND generation = t.generation "
            "AND seq > (CASE WHEN t.generation = %s THEN %s ELSE 0 END) ORDER BY seq LIMIT %s) l ON true "
            "WHERE t.tree = %s", (reading or "", seq, BATCH_OPERATIONS, self.tree)).fetchall()
        if not found:
            return None
        current = str(found[0][0])
        restart = reading is not None and current != reading
        return current, [(int(s), bytes(d)) for _, s, d in found if s is not None], restart

    def _again(self, call: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``call`` on the connection, and once more on a new one if the first failed (the
        server restarted, the network dropped): for calls that change nothing."""
        try:
            return call(self._connection())
        except self._psycopg.OperationalError:
            if self._conn is not None:
                self._conn.close()
            return call(self._connection())

    def tail(self, after: Position | None) -> Iterator[Batch]:
        """The whole operations after ``after``, a restart batch first when the log was
        replaced since (see ``LogStore.tail``)."""
        return self._scan(after, follow=True)

    def read(self, after: Position | None) -> Iterator[Batch]:
        """The current log after ``after`` (see ``LogStore.read``)."""
        return self._scan(after, follow=False)

    # --- writing --------------------------------------------------------------------------

    def _check_writable(self, what: str, *, locked: bool = True) -> None:
        if not self._writable:
            raise StorageError(f"the PostgreSQL log {self.tree!r} was opened read-only: it cannot {what}")
        if locked and not self._held:
            raise StorageError(f"the PostgreSQL log {self.tree!r} cannot {what} outside locked()")

    def append(self, encoded: bytes, op_id: str, *, after: Position | None, sync: bool = True) -> Position:
        """Insert the operation at ``after``'s next place, in one transaction (see
        ``LogStore.append``); Behind (a StorageError), with nothing written, when ``after``
        is not the end of the current log.

        When the connection fails during the call, the commit may have happened without its
        answer arriving: the store then reconnects and looks for ``op_id`` (unique in the
        log). Found, the append succeeded and its position is returned; not found, nothing was
        written (StorageError). An operation is never applied twice."""
        self._check_writable("append")
        return self._append(encoded, op_id, after, sync, shared=False)

    def append_unlocked(self, encoded: bytes, op_id: str, *, after: Position | None, sync: bool = True) -> Position:
        """``append`` without ``locked()`` (``kwtree.stores.logstore.UnlockedAppends``): the
        same transaction also takes the advisory lock *shared*, so it waits while a holder of
        ``locked()`` (which takes it exclusively) decides and writes, up to ``lock_timeout``
        (LockTimeoutError), and appends behind nobody: the primary key refuses a place that
        another append took (Behind). One statement, one round trip."""
        self._check_writable("append", locked=False)
        return self._append(encoded, op_id, after, sync, shared=True)

    def _append(self, encoded: bytes, op_id: str, after: Position | None, sync: bool, *, shared: bool) -> Position:
        kind, ts = _kind_and_time(encoded)
        row = (kind, ts, encoded)
        with self._guard:
            try:
                return self._insert_operation(op_id, row, after, sync, shared)
            except self._psycopg.errors.LockNotAvailable:
                raise LockTimeoutError(f"the PostgreSQL log {self.tree!r} stayed locked by another writer for "
                                       f"{self._lock_timeout:g} s; operation {op_id} was not appended") from None
            except self._psycopg.OperationalError as exc:
                found = self._committed(op_id)
                if found is not None:
                    log.warning("the connection to the PostgreSQL log %r failed while operation %s was committed "
                                "(%s); it was committed", self.tree, op_id, exc)
                    return found
                raise StorageError(f"the PostgreSQL log {self.tree!r} could not append operation {op_id} (the "
                                   f"connection failed; the operation is not in the log): {exc}") from exc
            except self._psycopg.Error as exc:
                raise StorageError(f"the PostgreSQL log {self.tree!r} could not append operation {op_id}: {exc}") \
                    from exc

    def _insert_operation(self, op_id: str, row: tuple[str, float, bytes], after: Position | None,
                          sync: bool, shared: bool) -> Position:
        """One transaction: with ``shared``, the advisory lock taken shared first; the
        generation checked (and locked against a replace), the row inserted at ``after``'s
        next place, the append notified. One statement, but for the first append of a log."""
        conn = self._connection()
        if after is not None:
            # The usual append, one statement (one round trip, its own transaction): the row is
            # inserted only while ``after``'s generation is current (locked against a replace).
            # The shared advisory lock is a filter of the scan below the row lock, so it is
            # waited for before the row is locked (a replace, under the exclusive lock, locks
            # that row for update), and a generation replaced meanwhile fails the re-check.
            # Without durability the same statement turns synchronous_commit off for its own
            # transaction (``set_config`` local: read at the commit, which follows).
            waits = f" AND pg_advisory_xact_lock_shared({self._key})::text = ''" if shared else ""
            if not (sync and self._durable):
                waits += " AND set_config('synchronous_commit', 'off', true) = 'off'"
            inserted = conn.execute(
                f"WITH t AS (SELECT generation FROM {self._table('kwtree_trees')} WHERE tree = %s AND generation = %s"
                f"{waits} FOR SHARE), ins AS ({self._insert_from('t')} ON CONFLICT DO NOTHING RETURNING seq) "
                "SELECT seq, pg_notify(%s, %s || seq || %s) FROM ins",
                (self.tree, after.generation, self.tree, int(after.key[0]) + 1, op_id, *row,  # type: ignore[call-overload]
                 NOTIFY_CHANNEL, f"{after.generation} ", f" {self.tree}")).fetchone()
            if inserted is None:
                raise Behind(f"the PostgreSQL log {self.tree!r} holds more than the position {after}, was "
                             f"replaced, or holds operation {op_id} already: tail it and decide again")
            return Position(after.generation, (int(inserted[0]),))
        # The first append of a log (``after`` None): the tree's row made if it has none, then
        # locked against a replace, over a few statements (once per log).
        with conn.transaction():
            if not (sync and self._durable):
                conn.execute("SET LOCAL synchronous_commit TO OFF")
            if shared:
                conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (self._key,))
            current = self._generation_for_update(conn)
            inserted = conn.execute(self._insert() + " ON CONFLICT DO NOTHING RETURNING seq",
                                    (self.tree, current, 1, op_id, *row)).fetchone()
            if inserted is None:
                raise Behind(f"the PostgreSQL log {self.tree!r} is not empty (or holds operation {op_id} already): "
                             "tail it and decide again")
            self._announce(conn, current, 1)
        return Position(current, (1,))

    def _committed(self, op_id: str) -> Position | None:
        """Where ``op_id`` is in the current log, asked on a new connection (None: it is not
        there). The database is asked again every ``_RECONNECT`` seconds while it does not
        answer (a restart, a failover), for up to ``lock_timeout``; then StorageError saying
        the outcome is unknown."""
        deadline = time.monotonic() + self._lock_timeout
        while True:
            if self._conn is not None:
                self._conn.close()
            try:
                conn = self._connection()
                found = conn.execute(
                    f"SELECT l.generation, l.seq FROM {self._table('kwtree_log')} l JOIN "
                    f"{self._table('kwtree_trees')} t ON t.tree = l.tree AND t.generation = l.generation "
                    "WHERE l.tree = %s AND l.op_id = %s", (self.tree, op_id)).fetchone()
                return None if found is None else Position(str(found[0]), (int(found[1]),))
            except self._psycopg.OperationalError as exc:
                if time.monotonic() >= deadline:
                    raise StorageError(
                        f"whether operation {op_id} was committed to the PostgreSQL log {self.tree!r} is unknown: "
                        f"the database did not answer for {self._lock_timeout:g} s ({exc}); once it does, refresh() "
                        "shows it if it was") from exc
                time.sleep(_RECONNECT)

    def _generation_for_update(self, conn: psycopg.Connection[Any]) -> str:
        """The current generation (a first one made for a tree that has none), its row locked
        against a concurrent ``replace`` until the transaction ends."""
        conn.execute(f"INSERT INTO {self._table('kwtree_trees')} (tree, generation) VALUES (%s, %s) "
                     "ON CONFLICT DO NOTHING", (self.tree, uuid.uuid4().hex))
        row = conn.execute(f"SELECT generation FROM {self._table('kwtree_trees')} WHERE tree = %s FOR SHARE",
                           (self.tree,)).fetchone()
        if row is None:
            raise Behind(f"the PostgreSQL log {self.tree!r} has no generation: append after None")
        return str(row[0])

    def replace(self, operations: Iterable[tuple[str, bytes]], *, after: Position | None,
                check: Callable[[Iterator[Batch]], None] | None = None) -> Position:
        """Write ``operations`` as a new generation and make it current, in one transaction
        (see ``LogStore.replace``)."""
        self._check_writable("be replaced")
        generation = uuid.uuid4().hex
        with self._guard, self._errors("be replaced"):
            conn = self._connection()
            with conn.transaction():
                # The tree's row locked first: an append committing beside this (from a writer
                # that lost its lock) is either counted in ``end`` below, or finds the row
                # changed and writes nothing; it is never deleted with the old generation.
                current = self._generation_locked(conn)
                end = self._end(conn, current)
                if (after is None and end is not None) or (after is not None and (
                        after.generation != current or end != int(after.key[0]))):  # type: ignore[call-overload]
                    raise StorageError(f"the PostgreSQL log {self.tree!r} changed since position {after}: "
                                       "it was not replaced")
                rows = [(self.tree, generation, seq, op_id, *_kind_and_time(encoded), encoded)
                        for seq, (op_id, encoded) in enumerate(operations, 1)]
                with conn.cursor() as cursor:
                    cursor.executemany(self._insert(), rows)
                seq = len(rows)
                if check is not None:
                    check(self._read_generation(conn, generation))
                conn.execute(f"INSERT INTO {self._table('kwtree_trees')} (tree, generation) VALUES (%s, %s) "
                             "ON CONFLICT (tree) DO UPDATE SET generation = EXCLUDED.generation",
                             (self.tree, generation))
                if current is not None:
                    conn.execute(f"DELETE FROM {self._table('kwtree_log')} WHERE tree = %s AND generation = %s",
                                 (self.tree, current))
                self._announce(conn, generation, seq)
            return Position(generation, (seq,))

    def _announce(self, conn: psycopg.Connection[Any], generation: str, seq: int) -> None:
        """NOTIFY, in the caller's transaction, that the log now ends at (generation, seq)."""
        conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, f"{generation} {seq} {self.tree}"))

    def _insert_from(self, source: str) -> str:
        """An INSERT of one log row whose generation comes from ``source``'s (a CTE's) row."""
        return (f"INSERT INTO {self._table('kwtree_log')} (tree, generation, seq, op_id, kind, ts, data) "
                f"SELECT %s, {source}.generation, %s, %s, %s, %s, %s FROM {source}")

    def _insert(self) -> str:
        return (f"INSERT INTO {self._table('kwtree_log')} (tree, generation, seq, op_id, kind, ts, data) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)")

    def _end(self, conn: psycopg.Connection[Any], generation: str | None) -> int | None:
        """The last seq of ``generation`` (None: an empty log)."""
        if generation is None:
            return None
        row = conn.execute(f"SELECT max(seq) FROM {self._table('kwtree_log')} WHERE tree = %s AND generation = %s",
                           (self.tree, generation)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _read_generation(self, conn: psycopg.Connection[Any], generation: str) -> Iterator[Batch]:
        """``generation``'s operations read inside the caller's transaction (for ``check``)."""
        seq = 0
        while True:
            rows = self._rows_after(conn, generation, seq)
            if rows or not seq:
                yield self._batch(generation, rows, False)
            if len(rows) < BATCH_OPERATIONS:
                return
            seq = rows[-1][0]

    def size(self) -> tuple[int, int]:
        """The bytes of the current log's operations, and 0 segments (a table has none)."""
        with self._guard, self._errors("be measured"):
            conn = self._connection()
            row = conn.execute(
                f"SELECT coalesce(sum(octet_length(l.data)), 0) FROM {self._table('kwtree_log')} l "
                f"JOIN {self._table('kwtree_trees')} t ON t.tree = l.tree AND t.generation = l.generation "
                "WHERE l.tree = %s", (self.tree,)).fetchone()
        return (int(row[0]) if row else 0), 0

    # --- announcements --------------------------------------------------------------------

    def changes(self, stop: threading.Event, poll: float) -> Iterator[Position | None]:
        """Yield when the log may have changed (``kwtree.stores.logstore.Announcing``): the
        end of the log a ``NOTIFY`` of this tree announced (the last of those heard at once;
        not those of this store's own connection: its appends are in its state already), None
        after ``poll`` quiet seconds and after each (re)connection of the ``LISTEN``
        connection, which is this generator's own."""
        conn: psycopg.Connection[Any] | None = None
        wait = _RECONNECT
        quiet_since = time.monotonic()
        try:
            while not stop.is_set():
                try:
                    if conn is None:
                        conn = self._connect()
                        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                        wait = _RECONNECT
                        quiet_since = time.monotonic()
                        yield None  # what was appended while nobody listened
                        continue
                    heard = [note.payload for note in conn.notifies(timeout=_LISTEN_TICK, stop_after=1)
                             if note.pid != self._backend]  # not this store's own appends
                except self._psycopg.Error as exc:
                    log.debug("the PostgreSQL log %r lost its listener (%s); listening again", self.tree, exc)
                    if conn is not None:
                        conn.close()
                        conn = None
                    stop.wait(wait)
                    wait = min(2 * wait, poll)
                    continue
                ours = [position for mine, position in map(self._announced, heard) if mine]
                if ours:
                    quiet_since = time.monotonic()
                    yield None if None in ours else ours[-1]
                elif time.monotonic() - quiet_since >= poll:
                    quiet_since = time.monotonic()
                    yield None
        finally:
            if conn is not None:
                conn.close()

    def _announced(self, payload: str) -> tuple[bool, Position | None]:
        """Whether an announcement (``"<generation> <seq> <tree>"``) is this tree's, and the
        end of the log it names (None when it names none: ask the log)."""
        generation, _, rest = payload.partition(" ")
        seq, _, tree = rest.partition(" ")
        if tree == self.tree and seq.isdigit():
            return True, Position(generation, (int(seq),))
        return payload == self.tree, None

    # --- the lock -------------------------------------------------------------------------

    def locked(self) -> AbstractContextManager[None]:
        """The cross-writer lock: a session advisory lock on a connection of its own, waited
        for up to ``lock_timeout`` (then LockTimeoutError); not re-entrant."""
        return self._locked()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if self._held:
            raise StorageError(f"the PostgreSQL log {self.tree!r} is already locked by this store")
        with self._errors("be locked"):
            self._lock()
        self._held = True
        try:
            yield
        finally:
            self._held = False
            conn = self._lock_conn
            if conn is not None:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))
                except self._psycopg.Error:  # the connection is gone, and the server freed the lock with it
                    conn.close()

    def _lock(self) -> None:
        """Wait for the advisory lock on the lock's connection (a new one if it was lost, and
        the lock with it), up to ``lock_timeout`` (the server's own ``lock_timeout``)."""
        for attempt in (1, 2):
            conn = self._lock_conn
            if conn is None or conn.closed or conn.broken:
                conn = self._lock_conn = self._connect()
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (self._key,))
                return
            except self._psycopg.errors.LockNotAvailable:
                raise LockTimeoutError(f"the PostgreSQL log {self.tree!r} stayed locked by another writer for "
                                       f"{self._lock_timeout:g} s") from None
            except self._psycopg.OperationalError:
                conn.close()
                if attempt == 2:
                    raise

    def close(self) -> None:
        """Close the connections (the lock with its own). Calling it twice is harmless."""
        for conn in (self._conn, self._lock_conn):
            if conn is not None:
                conn.close()
        self._conn = self._lock_conn = None


def _kind_and_time(encoded: bytes) -> tuple[str, float]:
    """The kind and timestamp in an operation's end row (its last line)."""
    last = encoded.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        end = orjson.loads(last)["end"]
        return str(end["kind"]), float(end["ts"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError("an operation to append must end with its end row") from exc
