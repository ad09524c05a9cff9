"""A PostgreSQL log through a server restart and a killed writer: every acknowledged write is
there once, and the trees reconnect by themselves (real processes, a real server restarted
with ``pg_ctl restart -m fast``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from postgres_server import restart, server_url

from kwtree import KeywordTree

URL = server_url()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(URL is None, reason=__import__("postgres_server").why_not or "no PostgreSQL")]

#: Writes "n" infos one by one, printing each content once its write returned; a failed write
#: (the server is restarting) prints "failed" and is tried again with new content.
WRITER = """
import sys, time
from pathlib import Path
from kwtree import KeywordTree
from kwtree.errors import KwtreeError
tree = KeywordTree(Path(sys.argv[1]), log=sys.argv[2], worker=False, lock_timeout=30)
n = 0
while True:
    text = f"{sys.argv[3]}-{n}"
    n += 1
    try:
        tree.create_info(text)
    except KwtreeError as exc:
        print("failed", type(exc).__name__, flush=True)
        time.sleep(0.05)
        continue
    print(text, flush=True)
"""


def _read_until(child: subprocess.Popen[str], acked: list[str], count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    assert child.stdout is not None
    while len(acked) < count:
        assert time.monotonic() < deadline, f"only {len(acked)} writes acknowledged in {timeout} s"
        line = child.stdout.readline().strip()
        if line and not line.startswith("failed"):
            acked.append(line)


def _server_start(url: str) -> object:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]  # type: ignore[index]


def test_a_server_restart_and_a_killed_writer_lose_no_acknowledged_write(tmp_path: Path) -> None:
    assert URL is not None
    log_url = f"{URL}{'&' if '?' in URL else '?'}tree=r{uuid.uuid4().hex}"
    KeywordTree(tmp_path / "setup", log=log_url).close()  # the root, once
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / f"w{n}"), log_url, f"w{n}"],
                                stdout=subprocess.PIPE, text=True, env=env) for n in range(2)]
    acked: list[list[str]] = [[], []]
    try:
        for writer, mine in zip(writers, acked, strict=True):
            _read_until(writer, mine, 15)
        started = _server_start(URL)
        restart()
        assert _server_start(URL) > started  # a new server process answers
        for writer, mine in zip(writers, acked, strict=True):
            _read_until(writer, mine, len(mine) + 15)  # both reconnected and wrote on
        writers[0].send_signal(signal.SIGKILL)  # mid-run, likely inside a write
        writers[0].wait(10)
        _read_until(writers[1], acked[1], len(acked[1]) + 10)
    finally:
        for writer in writers:
            writer.kill()
            writer.wait(10)
    with KeywordTree(tmp_path / "reader", read_only=True, log=log_url) as reader:
        contents = [op.changes[0].after.content for op in reader.history()  # type: ignore[union-attr]
                    if op.kind == "create_info"]
    assert len(contents) == len(set(contents)), "an operation was applied twice"
    missing = [text for mine in acked for text in mine if text not in set(contents)]
    assert missing == [], f"acknowledged writes lost: {missing[:5]}"
