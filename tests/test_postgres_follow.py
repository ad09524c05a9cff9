"""A tree over a PostgreSQL log follows it by itself: a background thread applies what other
processes append as the database announces it (``LISTEN``/``NOTIFY``), listens again when
its connection is cut, and asks the log once a second when no announcement comes. All on the
session's real server (tests/postgres_server.py), with real writer processes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from postgres_server import server_url

from kwtree import KeywordTree
from kwtree.errors import NotFoundError

URL = server_url()
pytestmark = pytest.mark.skipif(URL is None, reason=__import__("postgres_server").why_not or "no PostgreSQL")
ROOT = Path(__file__).resolve().parents[1]
#: How long a check waits for the follower before it fails (convergence, not its speed, is
#: checked here: the lag is bench/postgres.py's).
PATIENCE = 30.0


@pytest.fixture
def log_url() -> str:
    assert URL is not None
    return f"{URL}&tree=f{uuid.uuid4().hex}" if "?" in URL else f"{URL}?tree=f{uuid.uuid4().hex}"


def eventually(check: Callable[[], bool]) -> bool:
    """True once ``check()`` is true, polled without touching the tree's log; False after PATIENCE."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def has_info(tree: KeywordTree, info_id: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            tree.get_info(info_id)
        except NotFoundError:
            return False
        return True

    return check


def followers() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("kwtree-follower")]


def test_a_tree_sees_another_machines_write_without_refresh(tmp_path: Path, log_url: str) -> None:
    writer = KeywordTree(tmp_path / "writer", durability="none", log=log_url, follow=False)
    reader = KeywordTree(tmp_path / "reader", read_only=True, log=log_url)
    still = KeywordTree(tmp_path / "still", read_only=True, log=log_url, follow=False)
    info = writer.create_info("The deploy key rotates on Fridays")
    assert eventually(has_info(reader, info.id))
    assert [hit.info.id for hit in reader.recall("deploy key rotates")] == [info.id]  # its own caches follow too
    with pytest.raises(NotFoundError):
        still.get_info(info.id)  # follow=False: only refresh() (or a write) moves it
    assert still.refresh() == 1 and still.get_info(info.id).content == info.content
    for tree in (writer, reader, still):
        tree.close()


def test_only_a_following_tree_runs_a_follower_and_close_ends_it(tmp_path: Path, log_url: str) -> None:
    before = followers()
    tree = KeywordTree(tmp_path / "t", durability="none", log=log_url)
    op = tree.create_info("a first memory")
    view = KeywordTree(tmp_path / "view", as_of=tree.last_op_id, log=log_url)  # a view never moves
    unfollowing = KeywordTree(tmp_path / "u", log=log_url, follow=False)
    local = KeywordTree(tmp_path / "local")  # its log in the directory: refresh() only
    assert len(followers()) == len(before) + 1
    for other in (view, unfollowing, local):
        other.close()
    tree.close()
    assert followers() == before
    assert op.content == "a first memory"


def _cut_listeners() -> int:
    import psycopg

    assert URL is not None
    with psycopg.connect(URL, autocommit=True) as conn:
        return len(conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()").fetchall())


def test_the_follower_listens_again_after_its_connection_is_cut(tmp_path: Path, log_url: str) -> None:
    writer = KeywordTree(tmp_path / "writer", durability="none", log=log_url, follow=False)
    reader = KeywordTree(tmp_path / "reader", read_only=True, log=log_url)
    first = writer.create_info("before the cut")
    assert eventually(has_info(reader, first.id))
    assert _cut_listeners() >= 1
    written = [writer.create_info(f"after the cut {n}").id for n in range(3)]  # maybe announced to nobody
    assert eventually(lambda: all(has_info(reader, info_id)() for info_id in written))
    later = writer.create_info("once it listens again")
    assert eventually(has_info(reader, later.id))
    writer.close()
    reader.close()


#: A writer process whose appends announce nothing on kwtree's channel (as behind a
#: connection pooler that drops LISTEN/NOTIFY): the reader must find them by asking.
SILENT_WRITER = """
import sys
import kwtree.stores.postgres as postgres
postgres.NOTIFY_CHANNEL = "nobody_listens_here"
from kwtree import KeywordTree
with KeywordTree(sys.argv[1], durability="none", log=sys.argv[2], follow=False) as tree:
    print(tree.create_info("written without an announcement").id)
"""


def test_a_write_never_announced_is_found_by_the_fallback_poll(tmp_path: Path, log_url: str) -> None:
    reader = KeywordTree(tmp_path / "reader", read_only=True, log=log_url)
    done = subprocess.run([sys.executable, "-c", SILENT_WRITER, str(tmp_path / "writer"), log_url],
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT),
                                                                             "PATH": "/usr/bin:/bin"}, check=True)
    info_id = done.stdout.strip()
    assert eventually(has_info(reader, info_id))
    reader.close()
