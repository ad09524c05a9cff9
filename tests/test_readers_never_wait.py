"""Readers never wait for a log writer (issue 28, DESIGN §3): while another process holds the
directory's writer lock (a compaction, a forget's rewrite, a restore, a repair), every read of a
writable and of a read-only tree answers. The trees are opened with a short ``lock_timeout``:
a read that took the writer lock would raise LockTimeoutError instead of answering, so the test
needs no clock.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import log_bytes

from kwtree import KeywordTree

SCOPE = "user:ana"
CONVERSATION = [
    {"role": "user", "content": "I live in Lyon and work as a nurse."},
    {"role": "user", "content": "I love green tea and hiking in the Alps."},
]


def _reads(tree: KeywordTree, keyword_id: str, info_id: str) -> dict[str, Callable[[], Any]]:
    return {
        "recall": lambda: tree.recall("green tea", scope=SCOPE, min_score=0),
        "recall bm25": lambda: tree.recall("hiking", mode="bm25", min_score=0),
        "context": lambda: tree.context("where does she live?", scope=SCOPE, min_score=0),
        "assemble": lambda: tree.assemble("what does she drink?", SCOPE),
        "bootstrap": lambda: tree.bootstrap(SCOPE),
        "search": lambda: tree.search("tea", llm_expand_query=False),
        "search walk": lambda: tree.search("beverages from leaves"),
        "memories": lambda: tree.memories(SCOPE),
        "get_keyword": lambda: tree.get_keyword(keyword_id),
        "get_children": lambda: tree.get_children(keyword_id),
        "get_path": lambda: tree.get_path(keyword_id),
        "get_info": lambda: tree.get_info(info_id),
        "get_infos_of_keyword": lambda: tree.get_infos_of_keyword(keyword_id),
        "get_keywords_of_info": lambda: tree.get_keywords_of_info(info_id),
        "find_keywords": lambda: tree.find_keywords("Tea"),
        "resolve": lambda: tree.resolve("Drinks/Tea"),
        "history": lambda: tree.history(info_id),
        "tree_metrics": lambda: tree.tree_metrics(),
    }


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    directory = tmp_path / "m"
    with KeywordTree(directory, durability="none") as tree:
        tree.commit_session(CONVERSATION, session_id="s1", scope=SCOPE)
        drinks = tree.create_keyword("Drinks", llm_auto_place=False)
        tea = tree.create_keyword("Tea", drinks.id)
        info = tree.create_info("Sencha is a green tea.", keyword_ids=[tea.id])
        ids = {"keyword": tea.id, "info": info.id}
    yield directory, ids


def _hold_writer_lock(directory: Path) -> subprocess.Popen[str]:
    """A process holding the directory's writer lock, as a compaction does, until stdin closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom pathlib import Path\nfrom kwtree.stores.lock import WriterLock\n"
         f"lock = WriterLock(Path({str(directory)!r}) / 'lock', 10)\nlock.acquire()\nprint('held', flush=True)\n"
         "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("read_only", [False, True])
def test_every_read_answers_while_another_process_holds_the_writer_lock(
        held: tuple[Path, dict[str, str]], read_only: bool) -> None:
    directory, ids = held
    with KeywordTree(directory, read_only=read_only, lock_timeout=0.2, worker=False) as tree:
        if not read_only:  # writes the reads below must see: the full-text index lags behind them
            tree.commit_session([*CONVERSATION, {"role": "user", "content": "Also I adopted a cat named Miso."}],
                                session_id="s1", scope=SCOPE)
        holder = _hold_writer_lock(directory)
        try:
            for name, read in _reads(tree, ids["keyword"], ids["info"]).items():
                read()  # LockTimeoutError here: the read waited for the writer lock
                assert name
            if not read_only:
                assert any("Miso" in hit.info.content for hit in tree.recall("cat", scope=SCOPE, min_score=0))
        finally:
            holder.communicate("", timeout=60)


def test_a_writable_tree_closes_while_another_process_holds_the_writer_lock(
        held: tuple[Path, dict[str, str]], caplog: pytest.LogCaptureFixture) -> None:
    """Its close brings the shared full-text index up to its writes under the index's own lock."""
    directory, _ = held
    tree = KeywordTree(directory, lock_timeout=0.2, worker=False)
    written = tree.create_info("Matcha is powdered green tea.")
    holder = _hold_writer_lock(directory)
    try:
        with caplog.at_level(logging.WARNING, logger="kwtree"):
            tree.close()
    finally:
        holder.communicate("", timeout=60)
    assert not [record for record in caplog.records if record.name == "kwtree.cache"], caplog.text
    meta = json.loads((directory / "cache" / "fulltext" / "meta.json").read_text())
    assert meta["watermark"] == written.op_id  # the shared index holds the write


def test_a_writable_tree_s_close_leaves_the_padding_to_the_writer_that_holds_the_lock(
        held: tuple[Path, dict[str, str]], caplog: pytest.LogCaptureFixture) -> None:
    """Its close does not wait for the writer lock to trim the log's preallocated padding: the
    process holding it writes the log and trims it when it closes (issue 28: the close waited
    out ``lock_timeout`` and warned). Once the lock is free, the next writer's close trims it."""
    directory, _ = held
    tree = KeywordTree(directory, lock_timeout=60, worker=False)  # (a close that waited would wait 60 s)
    tree.create_info("Matcha is powdered green tea.")  # durable: the newest segment carries padding
    holder = _hold_writer_lock(directory)
    try:
        with caplog.at_level(logging.DEBUG, logger="kwtree"):
            tree.close()
    finally:
        holder.communicate("", timeout=60)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING], caplog.text
    assert b"\0" in log_bytes(directory)  # left for the next writer
    KeywordTree(directory, worker=False).close()
    assert b"\0" not in log_bytes(directory)


def test_reads_answer_while_another_machine_holds_the_postgresql_log_s_lock(tmp_path: Path) -> None:
    """The same with the log in PostgreSQL: another machine's writer (here a process with a
    directory of its own) holds the log's lock, as its compaction would."""
    import uuid

    from postgres_server import server_url, why_not

    url = server_url()
    if url is None:
        pytest.skip(why_not or "no PostgreSQL")
    log = f"{url}{'&' if '?' in url else '?'}tree=t{uuid.uuid4().hex}"
    with KeywordTree(tmp_path / "a", log=log, durability="none") as tree:
        tree.commit_session(CONVERSATION, session_id="s1", scope=SCOPE)
        drinks = tree.create_keyword("Drinks", llm_auto_place=False)
        tea = tree.create_keyword("Tea", drinks.id)
        info = tree.create_info("Sencha is a green tea.", keyword_ids=[tea.id])
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom kwtree import KeywordTree\n"
         f"tree = KeywordTree({str(tmp_path / 'b')!r}, log={log!r}, worker=False)\n"
         "with tree._engine.locked():\n    print('held', flush=True)\n    sys.stdin.read()\ntree.close()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for read_only in (False, True):
            with KeywordTree(tmp_path / "a", read_only=read_only, lock_timeout=0.2, worker=False) as tree:
                for read in _reads(tree, tea.id, info.id).values():
                    read()
    finally:
        holder.communicate("", timeout=60)
