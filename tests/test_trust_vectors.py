"""Issue 13, items 2 and 10.

Item 2: deleted or damaged vector caches are rebuilt (DESIGN §4 invariant 4 for
vectors). After ``rm -rf cache/``, a truncated ``vectors.f32``, a damaged ``keys.jsonl`` or
``meta.json``, a reopened tree's ``wait_indexed()`` embeds again what was lost, so vector and
hybrid recall answer exactly as before the damage; ``KeywordTree.repair()`` does the same for
damage done under an open tree. The outbox already holds those texts as done: done only
counts while the vector store holds the vector.

Item 10: a writer saves the hnswlib graph when its embedding backlog is done (``wait_indexed``
returns with it saved) and on close, so a read-only open (every CLI read) loads it rather than
building it; the tests observe how the reader's graph came to be (rows loaded from hnsw.bin
versus built) and the rows hnsw.json says the saved graph covers, never a timing.

Real files, real byte damage, the default (deterministic, offline) embedder and the default
worker thread; trees use durability="none".
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import orjson
import pytest
from helpers import dir_bytes

from kwtree import KeywordTree
from kwtree.embed import HashEmbedder
from kwtree.stores.vectors import DEFAULT_EXACT_BELOW, PERSIST_LAG_ROWS, VectorStoreStats

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


# --- item 10: the vector graph is saved by writers, never rebuilt by each reader ---------------

GRAPH_INFOS = DEFAULT_EXACT_BELOW + 100  # enough rows to be searched through an hnswlib graph


def saved_graph_rows(directory: Path) -> int:
    """The rows the saved graph covers, per its hnsw.json (0 if none is saved)."""
    meta = vector_store(directory) / "hnsw.json"
    return orjson.loads(meta.read_bytes())["rows"] if meta.exists() else 0


def bulk_texts(count: int, offset: int = 0) -> list[dict]:
    return [{"content": f"bulk memory {i}: {TEXTS[i % len(TEXTS)]}"} for i in range(offset, offset + count)]


def reader_stats(directory: Path) -> VectorStoreStats:
    """How a read-only tree (what every CLI read opens) came to its graph, after a vector recall."""
    with KeywordTree(directory, read_only=True) as reader:
        assert reader.recall("cats on warm mats", mode="vector")
        return reader._indexes._vector_store.stats()  # (private: nothing public tells how it searched)


def test_a_bulk_load_saves_the_graph_so_a_read_only_open_loads_it(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    with KeywordTree(directory, durability="none") as tree:
        tree.batch_create_infos(bulk_texts(GRAPH_INFOS))
        assert tree.wait_indexed(LIMIT)
        # Saved when the backlog is done, before (and whether or not) the writer closes.
        assert saved_graph_rows(directory) == GRAPH_INFOS
    before = dir_bytes(directory / "cache" / "vectors")
    stats = reader_stats(directory)
    assert (stats.rows, stats.loaded_rows, stats.indexed_rows) == (GRAPH_INFOS, GRAPH_INFOS, GRAPH_INFOS)
    assert dir_bytes(directory / "cache" / "vectors") == before


def test_a_writer_that_embeds_inline_saves_the_graph_on_close(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    with KeywordTree(directory, durability="none", worker=False, embed_async=False) as tree:
        tree.batch_create_infos(bulk_texts(GRAPH_INFOS))
        assert saved_graph_rows(directory) == 0  # nothing searched a graph yet
    assert saved_graph_rows(directory) == GRAPH_INFOS
    stats = reader_stats(directory)
    assert (stats.loaded_rows, stats.indexed_rows) == (GRAPH_INFOS, GRAPH_INFOS)


def test_a_few_new_rows_are_added_to_the_saved_graph_and_many_are_saved(tmp_path: Path) -> None:
    """Below PERSIST_LAG_ROWS unsaved rows a reader adds them to the graph it loads (cheap);
    from there on the writer saves the graph again when the backlog is done."""
    directory = tmp_path / "tree"
    with KeywordTree(directory, durability="none") as tree:
        tree.batch_create_infos(bulk_texts(GRAPH_INFOS))
        assert tree.wait_indexed(LIMIT)
    with KeywordTree(directory, durability="none", worker=False) as tree:  # a CLI write: no graph loaded
        tree.batch_create_infos(bulk_texts(10, offset=GRAPH_INFOS))
        assert tree.wait_indexed(LIMIT)
        assert saved_graph_rows(directory) == GRAPH_INFOS  # 10 rows behind: not worth a save
    stats = reader_stats(directory)
    assert (stats.loaded_rows, stats.indexed_rows) == (GRAPH_INFOS, GRAPH_INFOS + 10)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        tree.batch_create_infos(bulk_texts(PERSIST_LAG_ROWS, offset=GRAPH_INFOS + 10))
        assert tree.wait_indexed(LIMIT)
        assert saved_graph_rows(directory) == GRAPH_INFOS + 10 + PERSIST_LAG_ROWS
