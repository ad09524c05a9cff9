"""Issue 13, item 2: deleted or damaged vector caches are rebuilt (DESIGN §4 invariant 4 for
vectors). After ``rm -rf cache/``, a truncated ``vectors.f32``, a damaged ``keys.jsonl`` or
``meta.json``, a reopened tree's ``wait_indexed()`` embeds again what was lost, so vector and
hybrid recall answer exactly as before the damage; ``KeywordTree.repair()`` does the same for
damage done under an open tree. The outbox already holds those texts as done: done only
counts while the vector store holds the vector.

Real files, real byte damage, the default (deterministic, offline) embedder and the default
worker thread; trees use durability="none".
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from kwtree import KeywordTree
from kwtree.embed import HashEmbedder

LIMIT = 60.0  # seconds a wait_indexed may take before the test fails
QUERIES = ["cats", "python packaging", "coffee jazz", "rust borrow", "warm mats", "tea"]
TEXTS = [
    "cats purr on warm mats", "Python packaging tips", "coffee beans and jazz records",
    "the Rust borrow checker", "cats and coffee", "python cats, rust cats", "green tea at dawn",
    "a borrowed book about jazz", "warm soup on cold days", "packaging a rust crate",
]


def answers(tree: KeywordTree) -> list:
    """Every query's vector and hybrid recall: ids, order and scores."""
    return [[(h.info.id, round(h.score, 6), None if h.vector is None else round(h.vector, 6))
             for h in tree.recall(query, k=20, mode=mode)]
            for query in QUERIES for mode in ("vector", "hybrid")]


def vector_store(directory: Path) -> Path:
    [store] = (directory / "cache" / "vectors").iterdir()
    return store


def damage(directory: Path, how: str) -> None:
    if how == "cache deleted":
        shutil.rmtree(directory / "cache")
        return
    store = vector_store(directory)
    vectors, keys, meta = store / "vectors.f32", store / "keys.jsonl", store / "meta.json"
    row = 4 * HashEmbedder().dim
    if how == "vectors truncated":
        vectors.write_bytes(vectors.read_bytes()[: 4 * row + row // 3])
    elif how == "vectors deleted":
        vectors.unlink()
    elif how == "keys damaged":
        lines = keys.read_bytes().split(b"\n")
        lines[3] = b"\xff\x00" + lines[3][2:]  # a line in the middle: it and the rows after it are lost
        keys.write_bytes(b"\n".join(lines))
    elif how == "keys deleted":
        keys.unlink()
    elif how == "meta damaged":
        meta.write_bytes(b'{"format": 1, "mod')
    elif how == "meta deleted":
        meta.unlink()
    else:
        raise AssertionError(how)


DAMAGES = ["cache deleted", "vectors truncated", "vectors deleted", "keys damaged", "keys deleted",
           "meta damaged", "meta deleted"]


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, list]:
    """A tree of infos and keywords, embedded by the worker thread through the outbox, and
    its answers before any damage."""
    directory = tmp_path / "tree"
    with KeywordTree(directory, durability="none") as tree:
        for name in ("Cats", "Coffee", "Rust"):
            tree.create_keyword(name, llm_auto_place=False)
        for text in TEXTS:
            tree.create_info(text)
        assert tree.wait_indexed(LIMIT)
        assert tree.outbox_status()["done"] == len(TEXTS) + 3
        before = answers(tree)
    assert any(row for row in before[::2])  # vector recall finds something
    return directory, before


@pytest.mark.parametrize("how", DAMAGES)
def test_a_deleted_or_damaged_vector_cache_is_rebuilt_at_the_next_open(
        written: tuple[Path, list], how: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    directory, before = written
    damage(directory, how)
    with KeywordTree(directory, durability="none") as tree:
        assert tree.wait_indexed(LIMIT)
        assert answers(tree) == before
        status = tree.outbox_status()
        assert (status["pending"], status["leased"], status["failed"], status["dead"]) == (0, 0, 0, 0)
    with KeywordTree(directory, durability="none") as tree:  # and it stays so
        assert tree.wait_indexed(LIMIT)
        assert answers(tree) == before


@pytest.mark.parametrize("how", DAMAGES)
def test_a_tree_without_worker_thread_rebuilds_it_in_wait_indexed(
        written: tuple[Path, list], how: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    directory, before = written
    damage(directory, how)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert tree.wait_indexed(LIMIT)
        assert answers(tree) == before


@pytest.mark.parametrize("how", DAMAGES)
def test_repair_rebuilds_vectors_damaged_under_an_open_tree(
        written: tuple[Path, list], how: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    directory, before = written
    with KeywordTree(directory, durability="none") as tree:
        assert tree.wait_indexed(LIMIT)
        assert answers(tree) == before
        damage(directory, how)
        tree.repair()
        assert tree.wait_indexed(LIMIT)
        assert answers(tree) == before
    with KeywordTree(directory, durability="none", read_only=True) as reader:  # what it left on disk
        assert answers(reader) == before
