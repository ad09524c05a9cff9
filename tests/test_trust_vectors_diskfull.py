"""Issue 13, items 3 and 7 (the disk-full parts): a full disk is a DiskFullError that says so,
changes nothing, and the tree works again once space returns.

* The embedding worker thread survives a full disk (it used to die, so the tree never embedded
  again until reopened and ``wait_indexed()`` without a timeout waited for ever): it backs off,
  ``outbox_status()["worker_error"]`` says why, ``wait_indexed`` raises the DiskFullError, and
  once space is freed it resumes by itself.
* ``wait_indexed`` (raw OSError before), ``recall`` (tantivy's ValueError before) and a log
  append ("short write: 635 of 918 bytes" before) raise DiskFullError naming the path; the
  log, the state, the outbox and the vector files are as they were; after freeing space the
  same calls work.

A real full disk: a small tmpfs mounted for the test (we run as root), filled with a file
until the kernel says ENOSPC, then freed by deleting that file.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import fill_disk, log_bytes, says_disk_full, snapshot

from kwtree import DiskFullError, KeywordTree
from kwtree.caches.embed import HashEmbedder
from kwtree.caches.outbox import Outbox
from kwtree.cli.worker import serve_outbox
from kwtree.stores.vectors import VectorStore

LIMIT = 60.0  # seconds a wait_indexed may take before the test fails


def texts(n: int) -> list[str]:
    return [f"memory {i}: apples, pears and plums number {i}" for i in range(n)]


def vector_ids(tree: KeywordTree, query: str = "apples pears plums") -> set[str]:
    return {h.info.id for h in tree.recall(query, k=200, mode="vector")}


def queued(directory: Path, n: int) -> list[str]:
    """A tree with ``n`` infos whose embeddings wait in the outbox (nothing embedded yet)."""
    with KeywordTree(directory, durability="none", worker=False) as tree:
        ids = [tree.create_info(text).id for text in texts(n)]
        assert tree.outbox_status()["pending"] == n
    return ids


def test_the_worker_thread_survives_a_full_disk_and_resumes_when_space_returns(disk: Path) -> None:
    directory = disk / "tree"
    ids = queued(directory, 100)
    filler = fill_disk(disk)
    with KeywordTree(directory, durability="none") as tree:
        with pytest.raises(DiskFullError) as raised:
            tree.wait_indexed(LIMIT)
        says_disk_full(raised, directory)
        assert raised.value.path is not None and raised.value.path.startswith(str(directory))
        status = tree.outbox_status()
        assert status["worker_error"]["type"] == "DiskFullError" and "is full" in status["worker_error"]["error"]
        assert (status["failed"], status["dead"], status["done"]) == (0, 0, 0)  # no item is blamed
        filler.unlink()
        assert tree.wait_indexed(LIMIT)
        status = tree.outbox_status()
        assert status["worker_error"] is None
        assert (status["pending"], status["leased"], status["failed"], status["dead"], status["done"]) == \
            (0, 0, 0, 0, 100)
        assert vector_ids(tree) == set(ids)
        new = tree.create_info("kiwis ripen on the sill")  # the worker embeds new writes too
        assert tree.wait_indexed(LIMIT)
        assert tree.recall("kiwis ripen", k=1, mode="vector")[0].info == new


def test_without_a_worker_thread_wait_indexed_raises_disk_full_and_works_after(disk: Path) -> None:
    directory = disk / "tree"
    ids = queued(directory, 100)
    filler = fill_disk(disk)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        for _ in range(2):  # and again: nothing was left half done
            with pytest.raises(DiskFullError) as raised:
                tree.wait_indexed(LIMIT)
            says_disk_full(raised, directory)
            assert tree.outbox_status()["worker_error"]["type"] == "DiskFullError"
        filler.unlink()
        assert tree.wait_indexed(LIMIT)
        assert vector_ids(tree) == set(ids)
        status = tree.outbox_status()
        assert (status["failed"], status["dead"], status["done"], status["worker_error"]) == (0, 0, 100, None)


def test_recall_on_a_full_disk_raises_disk_full_and_works_after(disk: Path) -> None:
    directory = disk / "tree"
    with KeywordTree(directory, durability="none", worker=False, embed_async=False) as tree:
        tree.recall("apples", mode="bm25")  # the full-text index exists and is current
        ids = [tree.create_info(text).id for text in texts(300)]
        filler = fill_disk(disk)
        for mode in ("bm25", "hybrid"):
            with pytest.raises(DiskFullError) as raised:
                tree.recall("apples", mode=mode)
            says_disk_full(raised, directory / "cache")
        filler.unlink()
        # min_score=0: every write must be searchable again; which of them the relevance
        # floor would keep for this query is not what this test is about.
        hits = tree.recall("number 7", k=len(ids), mode="bm25", min_score=0)
        assert {h.info.id for h in hits} == set(ids)
    with KeywordTree(directory, durability="none", worker=False, embed_async=False) as tree:
        assert {h.info.id for h in tree.recall("number 7", k=len(ids), mode="bm25", min_score=0)} == set(ids)


def test_a_write_on_a_full_disk_says_so_and_changes_nothing(disk: Path) -> None:
    directory = disk / "tree"
    tree = KeywordTree(directory, durability="none", worker=False)
    try:
        keyword = tree.create_keyword("Fruit", llm_auto_place=False)
        infos = [tree.create_info(text, keyword_ids=[keyword.id]).id for text in texts(5)]
        before, log_before = snapshot(tree, [keyword.id], infos), log_bytes(directory)
        filler = fill_disk(disk)
        with pytest.raises(DiskFullError) as raised:
            tree.create_info("a long memory " * 2_000, keyword_ids=[keyword.id])
        says_disk_full(raised, directory / "log")
        assert raised.value.path is not None and raised.value.path.startswith(str(directory / "log"))
        assert log_bytes(directory) == log_before
        assert snapshot(tree, [keyword.id], infos) == before
        filler.unlink()
        info = tree.create_info("a long memory " * 2_000, keyword_ids=[keyword.id])
        assert tree.wait_indexed(LIMIT)
    finally:
        tree.close()
    with KeywordTree(directory, durability="none", worker=False) as reopened:
        assert reopened.get_info(info.id) == info
        assert [i.id for i in reopened.get_infos_of_keyword(keyword.id)] == [*infos, info.id]


def test_the_outbox_and_the_vector_store_refuse_a_full_disk_whole(disk: Path) -> None:
    box = Outbox(disk / "outbox.jsonl")
    box.enqueue([("info", f"i{n}", "h", "m") for n in range(10)])
    store = VectorStore(disk / "vectors", "m", 64)
    rng = np.random.default_rng(1)

    def unit(n: int) -> np.ndarray:
        v = rng.normal(size=(n, 64)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    store.add([(f"e{n}", "h") for n in range(10)], unit(10))
    files = {p: p.read_bytes() for p in (disk / "outbox.jsonl", disk / "vectors" / "vectors.f32",
                                         disk / "vectors" / "keys.jsonl")}
    filler = fill_disk(disk)
    with pytest.raises(DiskFullError) as raised:
        box.enqueue([("info", f"j{n}", "h" * 40, "m") for n in range(200)])
    says_disk_full(raised, disk / "outbox.jsonl")
    with pytest.raises(DiskFullError) as raised:
        store.add([(f"f{n}", "h") for n in range(200)], unit(200))
    says_disk_full(raised, disk / "vectors")
    assert {p: p.read_bytes() for p in files} == files  # whole rows or nothing
    assert box.status()["pending"] == 10 and len(store) == 10
    filler.unlink()
    assert box.enqueue([("info", f"j{n}", "h" * 40, "m") for n in range(200)]) == 200
    store.add([(f"f{n}", "h") for n in range(200)], unit(200))
    assert len(store) == 210
    box.close()
    store.close()
    assert len(VectorStore(disk / "vectors", "m", 64)) == 210


class _Seen(logging.Handler):
    """Sets ``event`` when a record whose message contains ``text`` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text, self.event = text, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def test_the_worker_process_waits_out_a_full_disk(disk: Path) -> None:
    """``kwtree worker`` (serve_outbox) used to exit with the outbox's StorageError."""
    directory = disk / "tree"
    ids = queued(directory, 100)
    filler = fill_disk(disk)
    seen = _Seen("trying again in")
    logger = logging.getLogger("kwtree.caches.outbox")
    logger.addHandler(seen)
    processed: list[int] = []
    worker = threading.Thread(target=lambda: processed.append(serve_outbox(directory, HashEmbedder(), once=True)))
    try:
        worker.start()
        assert seen.event.wait(LIMIT)  # it met the full disk, and waits to try again
        assert worker.is_alive()
        filler.unlink()
        worker.join(LIMIT)
        assert not worker.is_alive() and processed == [100]
    finally:
        logger.removeHandler(seen)
    with KeywordTree(directory, read_only=True) as reader:
        assert vector_ids(reader) == set(ids)


def test_an_atomic_replace_refused_by_a_full_disk_leaves_the_old_file_and_no_temporary(disk: Path) -> None:
    # Before: the temporary file a full disk cut short stayed beside the file for good (and a
    # short os.write went unnoticed). Every manifest, cache meta and watermark goes this way.
    from kwtree.stores.files import write_atomically

    target = disk / "meta.json"
    write_atomically(target, b"old")
    filler = fill_disk(disk)
    with pytest.raises(OSError) as exc:
        write_atomically(target, b"x" * (1 << 20))
    assert exc.value.errno == 28  # ENOSPC
    assert sorted(os.listdir(disk)) == ["filler", "meta.json"]
    assert target.read_bytes() == b"old"
    filler.unlink()
    write_atomically(target, b"new")
    assert target.read_bytes() == b"new" and sorted(os.listdir(disk)) == ["meta.json"]
