"""Issue 25, B15: a vector cache is never silently wrong.

The saved hnswlib graph (``hnsw.bin``, described by ``hnsw.json``) is derived from the rows
of ``vectors.f32`` and ``keys.jsonl``: graph label n is row n. When those two files were lost
(deleted, emptied or garbled) and embedded again in another order, the old graph was reused
(hnsw.json only named its row count and its last key, and the rows' last key came out the
same), so vector recall walked a graph whose labels point at other texts: 0 of 5 queries kept
their top 10, for good, with ``verify()`` silent and ``repair()`` leaving it so.

The tree here has ``DEFAULT_EXACT_BELOW`` (2,000) rows, the fewest that are searched through a
graph (smaller stores are searched row by row and never read hnsw.bin): 1,998 infos written in
two halves, each followed by a keyword, embedded with each write. Its rows are therefore in
write order (infos, keyword A, infos, keyword B), and a rebuild embeds in state order (every
info, then the keywords): another order with the same last key, as the issue's 10 batches
of 200 got from the worker thread (there by the timing of the worker, here by construction,
so that the test is deterministic).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import copy_tree_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from kwtree import KeywordTree, repair_directory, verify_directory
from kwtree.stores.vectors import DEFAULT_EXACT_BELOW, PERSIST_LAG_ROWS
from kwtree.testing import cache_damages, cache_files, damage_cache_file

LIMIT = 120.0  # seconds a wait_indexed may take before the test fails
WORDS = ["invoice", "retry", "billing", "cache", "tree", "memory", "agent", "vector", "graph", "queue",
         "worker", "disk", "apple", "pear", "plum", "river", "mountain", "city", "coffee", "tea", "jazz"]
QUERIES = ["invoice retry billing", "apple pear plum", "river mountain city", "coffee tea jazz", "agent memory tree"]
INFOS = DEFAULT_EXACT_BELOW - 2  # with the two keywords: the fewest rows searched through a graph


def text(i: int) -> str:
    return " ".join(WORDS[(i * k + k) % len(WORDS)] for k in (1, 3, 7)) + f" note {i}"


def vector_recall(tree: KeywordTree) -> list[list[tuple[str, float]]]:
    return [[(h.info.id, round(h.vector or 0.0, 6)) for h in tree.recall(q, k=10, mode="vector")] for q in QUERIES]


def hybrid_recall(tree: KeywordTree) -> list[set[str]]:
    """The infos hybrid recall finds (their scores use the ranks of vector candidates far
    below the top 10, which a graph built from rows in another order finds approximately
    otherwise: 31st instead of 33rd; kwtree.testing compares hybrid recall the same way)."""
    return [{h.info.id for h in tree.recall(q, k=10)} for q in QUERIES]


def store_of(directory: Path) -> Path:
    [store] = (directory / "cache" / "vectors").iterdir()
    return store


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """The tree (closed, its graph saved) and its vector recall (its hybrid recall: see
    ``hybrid_before``)."""
    directory = tmp_path_factory.mktemp("b15") / "tree"
    with KeywordTree(directory, durability="none", worker=False, embed_async=False) as tree:
        half = INFOS // 2
        tree.batch_create_infos([{"content": text(i)} for i in range(half)])
        tree.create_keyword("Alpha", llm_auto_place=False)
        tree.batch_create_infos([{"content": text(i)} for i in range(half, INFOS)])
        tree.create_keyword("Beta", llm_auto_place=False)
    with KeywordTree(directory, read_only=True) as reader:
        before = vector_recall(reader)
        stats = reader._caches.vectors.store.stats()  # (private: nothing public tells how it searched)
        assert stats.loaded_rows == DEFAULT_EXACT_BELOW  # searched through the saved graph
    return directory, before


def garble(path: Path) -> None:
    path.write_bytes(bytes(b ^ 0xA5 for b in path.read_bytes()))


DAMAGES = {
    "deleted": Path.unlink,
    "emptied": lambda path: path.write_bytes(b""),
    "garbled": garble,
}


@pytest.mark.parametrize("how", sorted(DAMAGES))
@pytest.mark.parametrize("name", ["vectors.f32", "keys.jsonl"])
def test_the_issue_repro_rows_embedded_again_in_another_order_never_reuse_the_old_graph(
        embedded: tuple[Path, list], tmp_path: Path, name: str, how: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    source, before = embedded
    directory = copy_tree_dir(source, tmp_path / "tree")
    DAMAGES[how](store_of(directory) / name)
    with KeywordTree(directory, durability="none") as tree:
        assert tree.wait_indexed(LIMIT)
        assert vector_recall(tree) == before
        assert tree.verify().ok
    with KeywordTree(directory, read_only=True) as reader:  # what the writer left on disk
        assert vector_recall(reader) == before
    assert verify_directory(directory).findings == ()


def swap_rows(store: Path, first: int, second: int) -> None:
    """Exchange two rows of the store, each key line with its vector: every row stays whole
    and sound, only their order changes (what embedding them again in another order does)."""
    keys, vectors = store / "keys.jsonl", store / "vectors.f32"
    lines = keys.read_bytes().split(b"\n")
    lines[first], lines[second] = lines[second], lines[first]
    keys.write_bytes(b"\n".join(lines))
    data = bytearray(vectors.read_bytes())
    row = len(data) // (len(lines) - 1)
    a, b = bytes(data[first * row:(first + 1) * row]), bytes(data[second * row:(second + 1) * row])
    data[first * row:(first + 1) * row], data[second * row:(second + 1) * row] = b, a
    vectors.write_bytes(bytes(data))


def reordered(embedded: tuple[Path, list], tmp_path: Path) -> tuple[Path, list]:
    """A copy whose rows are in another order than the saved graph's labels (the last row
    kept), and the recall expected of it. The rows swapped are each query's best hits."""
    source, before = embedded
    directory = copy_tree_dir(source, tmp_path / "tree")
    store = store_of(directory)
    rows = {entity: n for n, entity in enumerate(line[2:34].decode()
                                                  for line in (store / "keys.jsonl").read_bytes().splitlines())}
    for n, hits in enumerate(before):
        swap_rows(store, rows[hits[0][0]], n)
    return directory, before


def test_verify_reports_a_graph_built_from_other_rows_and_repair_directory_fixes_it(
        embedded: tuple[Path, list], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    directory, before = reordered(embedded, tmp_path)
    report = verify_directory(directory)
    [finding] = report.findings
    assert (finding.severity, finding.code) == ("error", "vector-cache-mismatch")
    assert finding.file == str(store_of(directory).relative_to(directory) / "hnsw.json")
    assert "kwtree repair" in finding.message and not report.ok
    repaired = repair_directory(directory)
    assert repaired.ok and ("removed-cache", finding.file) in {(f.code, f.file) for f in repaired.findings}
    assert verify_directory(directory).findings == ()
    with KeywordTree(directory, read_only=True) as reader:
        assert vector_recall(reader) == before


@pytest.mark.parametrize("read_only", [False, True])
def test_an_open_never_searches_a_graph_built_from_other_rows(
        embedded: tuple[Path, list], tmp_path: Path, read_only: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kwtree.cache")
    directory, before = reordered(embedded, tmp_path)
    with KeywordTree(directory, read_only=read_only, durability="none") as tree:
        assert tree.wait_indexed(LIMIT)
        assert vector_recall(tree) == before
    assert "was built from other rows" in caplog.text
    assert verify_directory(directory).ok is (not read_only)  # a writer saved the graph it rebuilt


def test_tree_repair_mends_a_graph_that_no_longer_matches_under_an_open_tree(
        embedded: tuple[Path, list], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    source, before = embedded
    directory = copy_tree_dir(source, tmp_path / "tree")
    with KeywordTree(directory, durability="none") as tree:
        assert vector_recall(tree) == before
        other, _ = reordered(embedded, tmp_path / "elsewhere")
        for name in ("keys.jsonl", "vectors.f32"):  # replaced under the open tree
            shutil.copyfile(store_of(other) / name, store_of(directory) / name)
        assert not tree.verify().ok
        assert tree.repair().ok
        assert tree.wait_indexed(LIMIT)
        assert vector_recall(tree) == before
    assert verify_directory(directory).findings == ()


@pytest.fixture(scope="module")
def hybrid_before(embedded: tuple[Path, list]) -> list:
    with KeywordTree(embedded[0], read_only=True) as reader:
        return hybrid_recall(reader)


@pytest.mark.slow
@settings(max_examples=max(3, settings().max_examples // 5))  # each example embeds 2,000 texts again
@given(data=st.data())
def test_any_damage_to_one_or_two_files_of_a_graph_searched_store_leaves_recall_as_it_was(
        embedded: tuple[Path, list], hybrid_before: list, data: st.DataObject) -> None:
    """The damage property of kwtree.testing on the store the tree searches through a graph:
    any of its files and the outbox deleted, emptied, truncated or garbled, alone or in
    pairs; after a writer's wait_indexed(), vector recall is what it was (ids, order and
    similarities) and hybrid recall finds the same infos."""
    source, before = embedded
    files = [name for name in cache_files(source) if "/vectors/" in name or name == "outbox.jsonl"]
    plan = data.draw(cache_damages(files), label="damage")
    work = Path(tempfile.mkdtemp(prefix="kwtree-b15-"))
    logging.disable(logging.CRITICAL)  # the damage is reported as warnings: expected here
    try:
        directory = copy_tree_dir(source, work / "tree")
        for name, how in plan:
            damage_cache_file(directory, name, how)
        with KeywordTree(directory, durability="none") as tree:
            assert tree.wait_indexed(LIMIT)
            assert vector_recall(tree) == before
            assert hybrid_recall(tree) == hybrid_before
    finally:
        logging.disable(logging.NOTSET)
        shutil.rmtree(work, ignore_errors=True)


FORGETTER = """
import sys
from kwtree import KeywordTree
with KeywordTree(sys.argv[1], durability="none", worker=False) as tree:
    print(len(tree.forget(sys.argv[2]).infos), flush=True)
"""


def test_a_graph_held_in_memory_is_never_saved_with_vectors_another_process_forgot(
        embedded: tuple[Path, list], tmp_path: Path, children) -> None:
    """A writer that built or loaded the graph before another process's forget held the
    erased vectors in memory, and saved them in hnsw.bin on close (the forget had removed the
    saved graph): the forgotten memory's embedding was back on disk, and verify called the graph
    a mismatch. The save sees the erasure and the graph is built again from the rows."""
    import hnswlib
    import numpy as np

    directory = tmp_path / "tree"
    copy_tree_dir(embedded[0], directory)
    with KeywordTree(directory, durability="none", worker=False) as writer:
        assert writer.recall(text(0), k=1, mode="vector")  # the graph is in memory now
        assert writer._caches.vectors.store._index is not None  # (private: what the test is about)
        target = writer.recall(text(0), k=1, mode="vector")[0].info.id
        keys = (store_of(directory) / "keys.jsonl").read_bytes().splitlines()
        [row] = [n for n, line in enumerate(keys) if target.encode() in line]
        dim = writer._caches.vectors.store.dim
        secret = np.frombuffer((store_of(directory) / "vectors.f32").read_bytes()[row * 4 * dim:(row + 1) * 4 * dim],
                               dtype=np.float32)
        assert np.any(secret)
        assert children(FORGETTER, directory, target).finish().strip() == "1"
        writer.refresh()
        # Enough new rows that the writer saves its graph (PERSIST_LAG_ROWS) when it closes.
        writer.batch_create_infos([{"content": f"later {i} " + text(i)} for i in range(PERSIST_LAG_ROWS)])
        assert writer.wait_indexed(LIMIT)
    graph = hnswlib.Index(space="cosine", dim=dim)
    graph.load_index(str(store_of(directory) / "hnsw.bin"))
    saved = np.asarray(graph.get_items([row]))[0]
    assert not np.any(saved) or abs(float(np.dot(saved, secret))) < 0.5  # a blank, never the erased vector
    report = verify_directory(directory)
    assert report.ok, report.to_text()
