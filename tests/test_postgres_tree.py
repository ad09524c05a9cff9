"""KeywordTree over a PostgreSQL log (``log="postgresql://..."``): several processes with
separate cache directories share one log on a real server (tests/postgres_server.py)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import settings
from postgres_server import server_url

from kwtree import KeywordTree, VersionConflictError
from kwtree.errors import InvalidInputError
from kwtree.stores.postgres import redacted

URL = server_url()
pytestmark = pytest.mark.skipif(URL is None, reason=__import__("postgres_server").why_not or "no PostgreSQL")


@pytest.fixture
def log_url() -> str:
    """A new log (its own tree name) on the session's server."""
    assert URL is not None
    return f"{URL}&tree=t{uuid.uuid4().hex}" if "?" in URL else f"{URL}?tree=t{uuid.uuid4().hex}"


def test_two_machines_share_one_log_and_keep_their_own_caches(tmp_path: Path, log_url: str) -> None:
    a = KeywordTree(tmp_path / "a", durability="none", log=log_url)
    b = KeywordTree(tmp_path / "b", durability="none", log=log_url)
    cats = a.create_keyword("Cats", llm_auto_place=False)
    info = a.create_info("Tom the cat sleeps on the piano", keyword_ids=[cats.id])
    b.refresh()
    assert b.get_info(info.id).content == info.content and b.get_keyword(cats.id).name == "Cats"
    dogs = b.create_keyword("Dogs", llm_auto_place=False)
    a.refresh()
    assert a.get_keyword(dogs.id).name == "Dogs"
    assert [hit.info.id for hit in b.recall("piano cat")] == [info.id]  # b's own full-text index found it
    local = [path for path in (tmp_path / "a").rglob("*") if path.is_file() and b'"op":' in path.read_bytes()]
    assert local == []  # no operation is kept in the directory: the log lives in the database
    a.close()
    b.close()
    c = KeywordTree(tmp_path / "c", read_only=True, log=log_url)  # a new machine replays the log
    assert {k.name for k in c.find_keywords("Cats")} == {"Cats"} and c.get_info(info.id).content == info.content
    c.close()


def test_a_stale_version_on_another_machine_raises_version_conflict(tmp_path: Path, log_url: str) -> None:
    a = KeywordTree(tmp_path / "a", durability="none", log=log_url)
    b = KeywordTree(tmp_path / "b", durability="none", log=log_url)
    info = a.create_info("draft one")
    b.refresh()
    a.update_info(info.id, {"content": "draft two"}, version=1)
    with pytest.raises(VersionConflictError):
        b.update_info(info.id, {"content": "draft three"}, version=1)  # b decided on version 1: refused
    assert b.get_info(info.id).content == "draft two" and len(b.history(info.id)) == 2
    a.refresh()
    assert a.get_info(info.id).version == 2
    a.close()
    b.close()


def test_undo_and_history_read_the_shared_log(tmp_path: Path, log_url: str) -> None:
    a = KeywordTree(tmp_path / "a", durability="none", log=log_url)
    info = a.create_info("remember the milk")
    op = a.update_info(info.id, {"content": "remember the oat milk"})
    b = KeywordTree(tmp_path / "b", durability="none", log=log_url)
    b.undo(b.history(info.id)[-1].op_id)
    a.refresh()
    assert a.get_info(info.id).content == "remember the milk" and op.version == 2
    a.close()
    b.close()


@pytest.mark.parametrize("log", ["mysql://h/db", 3, "postgresql://h/db?schema=a-b"])
def test_a_bad_log_is_refused_naming_it(tmp_path: Path, log: object) -> None:
    with pytest.raises(InvalidInputError, match="log"):
        KeywordTree(tmp_path / "t", log=log)  # type: ignore[arg-type]
    assert not (tmp_path / "t").exists()


def test_the_directory_remembers_its_log_without_the_password(tmp_path: Path, log_url: str) -> None:
    with KeywordTree(tmp_path / "a", durability="none", log=log_url) as a:
        info = a.create_info("kept in the database")
    with KeywordTree(tmp_path / "a", read_only=True) as again:  # no log=: the directory's record
        assert again.get_info(info.id).content == "kept in the database"
    assert redacted("postgresql://ann:s3cret@db.example/mem?password=x&tree=t") == \
        "postgresql://ann@db.example/mem?tree=t"
    other = log_url.replace("tree=t", "tree=u")
    with pytest.raises(InvalidInputError, match="another log"):
        KeywordTree(tmp_path / "a", log=other)
    with KeywordTree(tmp_path / "local", durability="none") as local:
        local.create_info("kept in the directory")
    with pytest.raises(InvalidInputError, match="keeps its own log"):
        KeywordTree(tmp_path / "local", log=log_url)


# --- DESIGN §4's invariants over a PostgreSQL log: the property machine of test_properties ------

from test_properties import KwtreeMachine  # noqa: E402 - after the skip mark: the machine is heavy


class PostgresMachine(KwtreeMachine):
    """The invariant machine (reopen, atomicity, time travel, undo) with the log in PostgreSQL.
    Cutting the log at a byte is the JSONL store's (a database does not tear an operation)."""

    def log_option(self) -> dict[str, Any]:
        assert URL is not None
        return {"log": f"{URL}{'&' if '?' in URL else '?'}tree=m{uuid.uuid4().hex}"}

    def truncated_log(self, pick: int, delta: int, where: str) -> None:  # not a rule here
        raise AssertionError("the log of a database cannot be cut at a byte")

    def check_log_cuts(self) -> None:
        pass


TestPostgresMachine = pytest.mark.slow(PostgresMachine.TestCase)
TestPostgresMachine.settings = settings(stateful_step_count=60, max_examples=8)


def test_verify_reads_the_log_through_the_database_and_repair_rebuilds_the_caches(tmp_path: Path,
                                                                                   log_url: str) -> None:
    """verify checks a PostgreSQL log's operations (rows, versions, the tree, references) and
    the directory's caches against it; repair deletes a cache that disagrees. upgrade, which
    rewrites segment files, refuses. Compaction and forget replace the log through the
    store: the forgotten text is gone from the database's current log."""
    import psycopg

    from kwtree import repair_directory, verify_directory
    from kwtree.errors import StorageError
    from kwtree.ops.upgrade import upgrade_directory
    from kwtree.stores.postgres import split_url

    tree = KeywordTree(tmp_path / "a", durability="none", log=log_url)
    info = tree.create_info("the door code is 4711")
    tree.create_info("the plants need water on Fridays")
    assert tree.recall("plants water") and tree.wait_indexed(30)
    report = verify_directory(tmp_path / "a")
    assert report.ok and report.operations == 3 and report.segments == 0, report
    assert tree.verify().ok and tree.repair().ok
    assert tree.recall("plants water")  # the full-text index repair deleted is rebuilt
    with pytest.raises(StorageError, match="PostgreSQL"):
        upgrade_directory(tmp_path / "a")
    tree.close()

    meta = tmp_path / "a" / "cache" / "fulltext" / "meta.json"  # a watermark naming no operation of the log
    meta.write_bytes(orjson.dumps({**orjson.loads(meta.read_bytes()), "watermark": "f" * 32}))
    assert [f.code for f in verify_directory(tmp_path / "a").errors] == ["cache-watermark"]
    repaired = repair_directory(tmp_path / "a")
    assert repaired.ok and "removed-cache" in [f.code for f in repaired.findings]
    assert not meta.exists()

    tree = KeywordTree(tmp_path / "a", durability="none", log=log_url)
    tree.forget(info.id)
    assert tree.compact().operations_after >= 1
    tree.close()
    conninfo, name, _ = split_url(log_url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute("SELECT data FROM kwtree_log WHERE tree = %s", (name,)).fetchall()
        assert rows and not any(b"4711" in bytes(data) for (data,) in rows)
        assert any(b"plants" in bytes(data) for (data,) in rows)
        conn.execute("UPDATE kwtree_log SET data = %s WHERE tree = %s",  # rows changed behind kwtree's back
                     (b'{"not": "a row"}\n', name))
    damaged = verify_directory(tmp_path / "a")
    assert not damaged.ok and any("postgresql" in (f.file or "") for f in damaged.errors), damaged
    assert "log-elsewhere" in [f.code for f in damaged.findings]  # says where to mend it


def test_a_postgresql_log_is_chained_and_a_row_changed_in_the_database_breaks_the_chain(tmp_path: Path,
                                                                                          log_url: str) -> None:
    """Every operation two machines append names its predecessor (the database decides the
    order, the engine links to what it followed), compaction chains the log anew and says
    so, migrate keeps the head, and a row rewritten in the database is found by verify."""
    import psycopg

    from kwtree import verify_directory
    from kwtree.ops.migrate import migrate
    from kwtree.stores.postgres import split_url

    a = KeywordTree(tmp_path / "a", durability="none", log=log_url)
    b = KeywordTree(tmp_path / "b", durability="none", log=log_url)
    for i in range(4):
        a.create_info(f"from a {i}")
        b.create_info(f"from b {i}")  # b follows what a appended first: the database refuses a stale place
    report = verify_directory(tmp_path / "a")
    assert report.ok and report.head is not None and [f.code for f in report.findings] == ["log-elsewhere"]
    assert verify_directory(tmp_path / "b", head=report.head).ok
    a.compact()
    b.create_info("after the compaction")
    compacted = verify_directory(tmp_path / "b")
    assert compacted.ok and '"reason":"compact"' in compacted.chain_notes[0]
    a.close()
    b.close()
    migrate(tmp_path / "b", tmp_path / "copy")  # byte for byte: the head recorded of it holds in the copy
    assert verify_directory(tmp_path / "copy", head=compacted.head).ok
    conninfo, name, _ = split_url(log_url)
    with psycopg.connect(conninfo, autocommit=True) as conn:  # a row edited behind kwtree's back
        edited = conn.execute("UPDATE kwtree_log SET data = convert_to(replace(convert_from(data, 'UTF8'), "
                              "'from b 2', 'from b 9'), 'UTF8') WHERE tree = %s AND position('from b 2' in "
                              "convert_from(data, 'UTF8')) > 0", (name,)).rowcount
    assert edited == 1
    assert [f.code for f in verify_directory(tmp_path / "a").errors] == ["chain-break"]


def test_migrate_moves_a_directory_to_postgresql_and_back_with_its_history(tmp_path: Path, log_url: str) -> None:
    from kwtree.cli.main import main
    from kwtree.errors import StorageError
    from kwtree.ops.migrate import migrate

    with KeywordTree(tmp_path / "local", durability="none") as local:
        cats = local.create_keyword("Cats", llm_auto_place=False)
        info = local.create_info("Tom sleeps on the piano", keyword_ids=[cats.id])
        local.update_info(info.id, {"content": "Tom sleeps on the warm piano"})
        expected = [(op.op_id, op.kind) for op in local.history()]
    done = migrate(tmp_path / "local", log_url)
    assert done.operations == len(expected) and done.last_op_id == expected[-1][0]
    with KeywordTree(tmp_path / "cache", durability="none", log=log_url) as shared:
        assert [(op.op_id, op.kind) for op in shared.history()] == expected  # ids and order kept
        shared.undo(expected[-1][0])  # before-images came along: undo works on the copy
        assert shared.get_info(info.id).content == "Tom sleeps on the piano"
        after_undo = [op.op_id for op in shared.history()]
    with pytest.raises(StorageError, match="holds operations already"):
        migrate(tmp_path / "local", log_url)
    assert main(["migrate", str(tmp_path / "cache"), "--to", str(tmp_path / "back")]) == 0  # and back, by the CLI
    with KeywordTree(tmp_path / "back", read_only=True) as back:
        assert [op.op_id for op in back.history()] == after_undo
        assert back.get_info(info.id).content == "Tom sleeps on the piano" and back.verify().ok
    with KeywordTree(tmp_path / "local", read_only=True) as source:  # the source is unchanged
        assert [(op.op_id, op.kind) for op in source.history()] == expected
    with pytest.raises(InvalidInputError, match="to must be"):
        migrate(tmp_path / "local", tmp_path / "back")  # not empty


def test_a_snapshot_of_a_postgresql_log_is_refused_saying_what_to_do_instead(tmp_path: Path, log_url: str) -> None:
    """A snapshot archives JSONL segments: a PostgreSQL log has none. It refuses, naming the
    database's backups and `kwtree migrate`, and writes no archive."""
    from kwtree.errors import StorageError

    with KeywordTree(tmp_path / "a", durability="none", log=log_url) as tree:
        tree.create_info("kept in the database")
        with pytest.raises(StorageError, match="kwtree migrate"):
            tree.snapshot(tmp_path / "a.kwsnap")
    assert not (tmp_path / "a.kwsnap").exists() and not list(tmp_path.glob(".a.kwsnap*"))


def _engine(directory: Path, url: str, durable: bool = False) -> Any:
    """An engine on the log (its root written by a tree first), to call commit with a decider."""
    from kwtree.engine.engine import Engine
    from kwtree.stores.postgres import opener

    KeywordTree(directory.with_name(directory.name + "-setup"), durability="none", log=url, follow=False).close()
    return Engine(directory, writable=True, durable=durable, log_store=opener(url), caches_only=True)


def _info(content: str) -> Any:
    from kwtree.models import EMPTY_METADATA, Change, Info

    def decide(state: Any, stamp: Any) -> list[Change]:
        info = Info(uuid.uuid4().hex, content, "", EMPTY_METADATA, 1, stamp.timestamp, stamp.timestamp, False,
                    stamp.op_id)
        return [Change(info, None)]

    return decide


def test_a_write_that_loses_the_race_decides_again_on_the_state_that_won(tmp_path: Path, log_url: str) -> None:
    """Writes to a PostgreSQL log take no lock: each decides on the state it followed, and the
    database refuses the one that lost the race; it catches up and decides again, so what it
    writes was decided on the log's latest state."""
    mine, other = _engine(tmp_path / "mine", log_url), _engine(tmp_path / "other", log_url)
    seen: list[int] = []

    def decide(state: Any, stamp: Any) -> Any:
        seen.append(state.op_count)
        if len(seen) == 1:  # another machine appends between this decision and its append
            other.commit("create_info", _info("the other machine's write"))
        return _info(f"decided after {state.op_count} operations")(state, stamp)

    op = mine.commit("create_info", decide)
    assert seen == [1, 2]  # the root; then the root and the other write
    assert op is not None and op.changes[0].after.content == "decided after 2 operations"
    other.catch_up()
    assert other.state.op_count == mine.state.op_count == 3
    mine.close()
    other.close()


def test_a_writer_that_keeps_losing_takes_the_lock(tmp_path: Path, log_url: str) -> None:
    """After UNLOCKED_TRIES refusals the write takes the cross-writer lock, under which no
    other append can land: it is not starved."""
    from kwtree.engine.engine import UNLOCKED_TRIES

    mine, other = _engine(tmp_path / "mine", log_url), _engine(tmp_path / "other", log_url)
    calls = [0]

    def decide(state: Any, stamp: Any) -> Any:
        calls[0] += 1
        if calls[0] <= UNLOCKED_TRIES:  # the other writer wins every unlocked race
            other.commit("create_info", _info(f"winner {calls[0]}"))
        return _info("the patient write")(state, stamp)

    op = mine.commit("create_info", decide)
    assert calls[0] == UNLOCKED_TRIES + 1 and op is not None
    assert mine.state.op_count == 1 + UNLOCKED_TRIES + 1 and mine.state.last_op_id == op.op_id
    mine.close()
    other.close()


def test_a_decision_that_raises_on_a_state_behind_the_log_is_taken_again_on_the_latest(tmp_path: Path,
                                                                                      log_url: str) -> None:
    """A write decides on the state it holds and lets the database refuse it if the log moved
    on; a decision that writes nothing (an error here) is refused by nobody, so it is given
    only once taken on the log's latest state: the writer reads the log and decides again."""
    from kwtree.errors import NotFoundError

    mine, other = _engine(tmp_path / "mine", log_url), _engine(tmp_path / "other", log_url)
    mine.catch_up()
    made = other.commit("create_info", _info("written elsewhere"))
    assert made is not None
    written = made.changes[0].after.id
    seen: list[int] = []

    def decide(state: Any, stamp: Any) -> Any:
        seen.append(state.op_count)
        if written not in state.infos:
            raise NotFoundError(f"info {written} not found")
        return _info("after the write elsewhere")(state, stamp)

    assert mine.commit("create_info", decide) is not None
    assert seen[-1] == 2 and mine.state.op_count == 3
    assert other.commit("create_info", _info("written elsewhere again")) is not None
    seen.clear()

    def refuse(state: Any, stamp: Any) -> Any:
        seen.append(state.op_count)
        raise NotFoundError("nothing to write")

    with pytest.raises(NotFoundError):  # on the latest state too: the error stands
        mine.commit("create_info", refuse)
    assert seen[-1] == 4 == mine.state.op_count  # given once decided on the log's latest state
    mine.close()
    other.close()


def test_a_decision_that_changes_nothing_on_a_state_behind_the_log_is_taken_again(tmp_path: Path,
                                                                                 log_url: str) -> None:
    """Writing nothing (a decider returning no change) is an outcome too: given only once
    decided on the log's latest state."""
    mine, other = _engine(tmp_path / "mine", log_url), _engine(tmp_path / "other", log_url)
    mine.catch_up()
    assert other.commit("create_info", _info("written elsewhere")) is not None

    def decide(state: Any, stamp: Any) -> Any:
        return [] if state.op_count < 2 else _info("needed once the other write is seen")(state, stamp)

    op = mine.commit("create_info", decide)
    assert op is not None and mine.state.op_count == 3
    assert mine.commit("create_info", lambda state, stamp: []) is None
    mine.close()
    other.close()


@pytest.mark.parametrize("durable", [True, False])
def test_a_write_on_the_logs_latest_state_is_one_round_trip(tmp_path: Path, log_url: str, durable: bool) -> None:
    """The write path's cost on a real server, counted in the messages libpq sends (its
    protocol trace): a write whose state is the log's latest sends one statement and waits
    for one answer (decide, then insert at the end of the log; no read first), durable or not;
    one that lost a race costs more, and is still one total order."""
    import psycopg

    mine = _engine(tmp_path / "mine", log_url, durable=durable)
    mine.catch_up()
    assert mine.commit("create_info", _info("warms the connection")) is not None
    trace = tmp_path / "libpq.trace"
    with trace.open("w") as out:
        pgconn = mine._store._connection().pgconn
        pgconn.trace(out.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        for n in range(3):
            assert mine.commit("create_info", _info(f"write {n}")) is not None
        pgconn.untrace()
    sent = [line.split("\t") for line in trace.read_text().splitlines()]
    syncs = [fields for fields in sent if fields[0] == "F" and fields[2] == "Sync"]
    queries = [fields for fields in sent if fields[0] == "F" and fields[2] in ("Query", "Execute")]
    assert len(syncs) == 3 and len(queries) == 3, trace.read_text()
    other = _engine(tmp_path / "other", log_url)
    other.catch_up()
    assert other.state.op_count == mine.state.op_count == 5 and other.state.last_op_id == mine.state.last_op_id
    mine.close()
    other.close()


def test_a_search_keeps_its_own_caches_while_another_machine_holds_the_trees_lock(tmp_path: Path,
                                                                                  log_url: str) -> None:
    """A cache directory is this process's own: bringing its full-text index up to date
    takes a lock of the directory, not the tree's lock that every machine shares, so a
    compaction or a forget elsewhere never holds up a search here."""
    from kwtree.stores.postgres import PostgresStore, split_url

    writer = KeywordTree(tmp_path / "writer", durability="none", log=log_url, follow=False)
    reader = KeywordTree(tmp_path / "reader", durability="none", log=log_url, lock_timeout=1.0)
    info = writer.create_info("the boiler is serviced every October")
    conninfo, name, schema = split_url(log_url)
    elsewhere = PostgresStore(conninfo, name, schema=schema)
    with elsewhere.locked():  # another machine compacting
        reader.refresh()
        assert [hit.info.id for hit in reader.recall("boiler serviced October")] == [info.id]
    elsewhere.close()
    writer.close()
    reader.close()


def test_kwtree_init_log_url_makes_a_directory_whose_log_is_in_postgresql(tmp_path: Path, log_url: str) -> None:
    def kwtree_cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kwtree", *argv], capture_output=True, text=True, check=False)

    made = kwtree_cli("init", str(tmp_path / "a"), "--log", log_url)
    assert made.returncode == 0, made.stderr
    assert "its log in PostgreSQL" in made.stdout
    added = kwtree_cli("add", str(tmp_path / "a"), "Python")
    assert added.returncode == 0, added.stderr
    assert (tmp_path / "a" / "log.json").is_file()  # the directory records where its log is ...
    assert not list((tmp_path / "a" / "log").glob("*.jsonl"))  # ... and holds no segment of it
    with KeywordTree(tmp_path / "b", log=log_url) as other:  # another machine's caches
        assert [k.name for k in other.find_keywords("Python")] == ["Python"]
    refused = kwtree_cli("init", str(tmp_path / "c"), "--log", "mysql://nowhere")
    assert refused.returncode == 1 and "postgresql://" in refused.stderr
