"""kwtree.testing, the module users test their own code with: its checkers pass on trees that
keep the invariants and fail, naming the difference, on trees that do not; its strategies
give calls kwtree accepts; its state machine runs and can be extended; without hypothesis the
import says which extra to install.

Real trees in real directories; a second process for the missing-hypothesis case.
"""

from __future__ import annotations

import logging
import random
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers import dir_bytes
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from kwtree import ROOT_ID, KeywordTree
from kwtree.caches.embed import HashEmbedder
from kwtree.testing import (
    ACTIONS,
    CACHE_DAMAGES,
    KwtreeStateMachine,
    Step,
    apply_step,
    assert_caches_rebuildable,
    assert_merge_converges,
    assert_replay_equivalent,
    assert_tree_shape,
    cache_damages,
    cache_files,
    damage_cache_file,
    infos,
    known_ids,
    names,
    operation_sequences,
    public_reads,
    reads_digest,
)

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 30.0  # seconds a wait_indexed may take before the test fails


def fill(tree: KeywordTree, seed: int, count: int = 40) -> tuple[list[str], list[str]]:
    """``count`` random steps of every kind; returns the ids they made (the root first)."""
    rng = random.Random(seed)
    kids, iids = [ROOT_ID], []
    for _ in range(count):
        apply_step(tree, Step(rng.choice(ACTIONS), rng.randrange(64), rng.randrange(64), rng.randrange(64)), kids, iids)
    return kids, iids


# --- the extra ----------------------------------------------------------------------------------


def test_without_hypothesis_the_import_names_the_extra_to_install() -> None:
    code = ("import sys; sys.modules['hypothesis'] = None\n"  # as if it were not installed
            "try:\n    import kwtree.testing\nexcept ImportError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "kwtree.testing needs hypothesis" in done.stdout
    assert "pip install 'kwtree[testing]'" in done.stdout


def test_the_testing_extra_installs_hypothesis() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("hypothesis") for req in extras["testing"])


# --- assert_replay_equivalent ------------------------------------------------------------------


def test_replay_equivalent_holds_for_every_kind_of_write(tree: KeywordTree) -> None:
    kids, iids = fill(tree, 1)
    assert len(kids) > 3 and iids
    assert_replay_equivalent(tree)
    assert_tree_shape(tree)


def test_replay_equivalent_fails_naming_what_a_fresh_open_reads_differently(tree: KeywordTree) -> None:
    kept = tree.create_keyword("kept")
    with KeywordTree(tree.data_dir, durability="none") as other:  # a write this instance has not read
        other.update_keyword(kept.id, {"description": "changed elsewhere"}, kept.version)
    with pytest.raises(AssertionError,
                       match=rf"public reads after a fresh open differ at \['keywords'\]\['{kept.id}'\]"):
        assert_replay_equivalent(tree)
    tree.refresh()
    assert_replay_equivalent(tree)


def test_known_ids_and_the_digest_follow_the_history(tree: KeywordTree) -> None:
    a = tree.create_keyword("a")
    first = tree.last_op_id
    digest = reads_digest(tree)
    info = tree.create_info("memo", keyword_ids=[a.id])
    tree.delete_keyword(a.id, info_policy="delete")
    assert known_ids(tree) == ([ROOT_ID, a.id], [info.id])  # deleted ones too
    assert reads_digest(tree) != digest
    with KeywordTree(tree.data_dir, as_of=first) as then:
        assert reads_digest(then) == digest
        assert public_reads(then, [a.id])["keywords"][a.id]["keyword"].name == "a"


# --- assert_caches_rebuildable -----------------------------------------------------------------


def test_caches_rebuildable_holds_for_keywords_and_their_search(tree: KeywordTree) -> None:
    parent = tree.create_keyword("Animals")
    for name in ("Cats", "Dogs", "北京"):
        tree.create_keyword(name, parent.id, aliases=[name.lower() + "s"], description=f"all about {name}")
    assert_caches_rebuildable(tree)


class HeldEmbedder(HashEmbedder):
    """The hash embedder, with its calls from other threads (the tree's background worker)
    held until ``release`` is set: a worker caught holding a lease on its outbox items."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if threading.current_thread() is not threading.main_thread():
            self.release.wait(LIMIT)
        return super().embed(texts)


def test_caches_rebuildable_waits_for_the_trees_own_worker_first(tree_dir: Path) -> None:
    # CI failed on this race (stop 34): the copies were taken while the tree's worker held the
    # lease on its items, so each copy waited out a lease of a worker that never serves it.
    held = HeldEmbedder()
    with KeywordTree(tree_dir, durability="none", embedder=held) as tree:
        tree.create_keyword("Cats", aliases=["cat"])
        deadline = time.monotonic() + LIMIT
        while tree.outbox_status()["leased"] == 0:
            assert time.monotonic() < deadline, "the worker never claimed its item"
            time.sleep(0.01)
        releaser = threading.Timer(0.5, held.release.set)
        releaser.start()
        try:
            assert_caches_rebuildable(tree, ["cats"], timeout=5.0, embedder=HashEmbedder())
        finally:
            releaser.cancel()
            held.release.set()


def test_caches_rebuildable_holds_for_infos_embedded_with_each_write(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", embed_async=False, worker=False) as tree:
        fill(tree, 2)
        assert tree.tree_metrics()["infos"] > 0
        assert_caches_rebuildable(tree, embed_async=False, worker=False)


def test_caches_rebuildable_holds_for_infos_embedded_by_the_worker(tree: KeywordTree) -> None:
    cats = tree.create_keyword("Cats")
    tree.create_info("cats purr on warm mats", keyword_ids=[cats.id])
    tree.create_info("python packaging tips")
    assert tree.wait_indexed(LIMIT)
    assert_caches_rebuildable(tree, timeout=LIMIT)


def test_caches_rebuildable_holds_after_the_cache_vanished_under_the_open_tree(tree_dir: Path) -> None:
    """The case tests/test_cache_invariant.py's property found (it compares only full text
    until then): an info written, ``cache/`` deleted under the open tree, a keyword written."""
    options = {"embed_async": False, "worker": False}
    with KeywordTree(tree_dir, durability="none", **options) as tree:
        tree.create_info("cats purr on warm mats")
        shutil.rmtree(tree_dir / "cache")
        tree.create_keyword("Python")
        assert_caches_rebuildable(tree, ["cats"], timeout=LIMIT, **options)


class CoinEmbedder:
    """Vectors that depend on the instance, not only on the text: a rebuild cannot give them back."""

    model, dim = "coin", 8

    def __init__(self) -> None:
        self.rng = random.Random()

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.array([[self.rng.random() + 0.01 for _ in range(self.dim)] for _ in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)  # unit rows, as the protocol asks


def test_caches_rebuildable_fails_for_an_embedder_a_rebuild_cannot_repeat(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", embed_async=False, worker=False, embedder=CoinEmbedder()) as tree:
        for text in ("cats purr on warm mats", "python packaging tips", "coffee beans"):
            tree.create_info(text)
        with pytest.raises(AssertionError, match=r"recall\('[^']*', mode='(vector|hybrid)'\) without caches differ"):
            assert_caches_rebuildable(tree, ["cats", "python"], embed_async=False, worker=False,
                                      embedder=CoinEmbedder())


def test_caches_rebuildable_leaves_the_directory_alone(tree_dir: Path) -> None:
    options = {"embed_async": False, "worker": False}
    with KeywordTree(tree_dir, durability="none", **options) as tree:
        tree.create_info("cats purr", keyword_ids=[tree.create_keyword("Cats").id])
    before = dir_bytes(tree_dir)
    with KeywordTree(tree_dir, read_only=True) as reader:  # a reader writes nothing itself
        assert_caches_rebuildable(reader, ["cats"], **options)
        assert dir_bytes(tree_dir) == before


# --- damaged caches (issue 25, B15: a cache is never silently wrong) --------------------------

DAMAGE_QUERIES = ["cats", "python packaging", "北京", "tea"]
INLINE = {"embed_async": False, "worker": False}


@pytest.fixture(scope="module")
def cached_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed tree with every kind of cache file: a full-text index (one segment), a vector
    store, an outbox."""
    directory = tmp_path_factory.mktemp("damage") / "tree"
    with KeywordTree(directory, durability="none") as tree:
        cats = tree.create_keyword("Cats", llm_auto_place=False)
        tree.batch_create_infos([{"content": text, "keyword_ids": [cats.id] if "cats" in text else []} for text in (
            "cats purr on warm mats", "python packaging tips", "我在北京大学读书", "green tea at dawn",
            "python cats and rust cats", "coffee beans and jazz records")])
        assert tree.wait_indexed(LIMIT)
        tree.recall("cats")
    return directory


def test_cache_files_are_every_file_of_the_caches_but_locks(cached_tree: Path) -> None:
    files = cache_files(cached_tree)
    assert "outbox.jsonl" in files and "cache/fulltext/meta.json" in files
    assert {name.rsplit("/", 1)[-1] for name in files if "/vectors/" in name} == {
        "meta.json", "vectors.f32", "keys.jsonl", "position.json", "versions.u64"}  # (no graph: 6 vectors)
    assert any(name.endswith(".store") for name in files)
    on_disk = {str(p.relative_to(cached_tree)) for p in (cached_tree / "cache").rglob("*") if p.is_file()}
    assert on_disk - set(files) == {name for name in on_disk if name.endswith("lock")}


def test_damage_cache_file_deletes_empties_truncates_or_garbles(tmp_path: Path) -> None:
    data = bytes(range(64))
    for how in CACHE_DAMAGES:
        (tmp_path / how).write_bytes(data)
        damage_cache_file(tmp_path, how, how)
    assert not (tmp_path / "delete").exists()
    assert (tmp_path / "empty").read_bytes() == b""
    assert (tmp_path / "truncate").read_bytes() == data[:32]
    garbled = (tmp_path / "garble").read_bytes()
    assert len(garbled) == 64 and garbled[:24] == data[:24] and garbled[40:] == data[40:]
    assert all(a != b for a, b in zip(garbled[24:40], data[24:40], strict=True))
    with pytest.raises(ValueError, match="how must be one of"):
        damage_cache_file(tmp_path, "garble", "burn")


@pytest.mark.slow
def test_caches_rebuildable_holds_after_any_damage_to_any_cache_file(cached_tree: Path) -> None:
    """Every cache file, deleted, emptied, truncated or garbled, alone: recall and search
    answer as with the intact caches."""
    plans = [[(name, how)] for name in cache_files(cached_tree) for how in CACHE_DAMAGES]
    logging.disable(logging.CRITICAL)  # the damage is reported as warnings: expected here
    try:
        with KeywordTree(cached_tree, read_only=True) as reader:
            assert_caches_rebuildable(reader, DAMAGE_QUERIES, damages=plans, timeout=LIMIT, **INLINE)
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_caches_rebuildable_holds_after_damage_to_two_cache_files(cached_tree: Path, data: st.DataObject) -> None:
    plans = [data.draw(cache_damages(cache_files(cached_tree), max_files=2).filter(lambda plan: len(plan) == 2))
             for _ in range(3)]
    logging.disable(logging.CRITICAL)
    try:
        with KeywordTree(cached_tree, read_only=True) as reader:
            assert_caches_rebuildable(reader, DAMAGE_QUERIES, damages=plans, timeout=LIMIT, **INLINE)
    finally:
        logging.disable(logging.NOTSET)


# --- assert_merge_converges --------------------------------------------------------------------


def forks(base: Path, seeds: tuple[int, int]) -> list[Path]:
    with KeywordTree(base / "base", durability="none") as tree:
        fill(tree, 3, 15)
    made = [shutil.copytree(base / "base", base / name, ignore=shutil.ignore_patterns("lock")) for name in "AB"]
    for fork, seed in zip(made, seeds, strict=True):
        with KeywordTree(fork, durability="none") as tree:
            kids, iids = known_ids(tree)
            rng = random.Random(seed)
            for _ in range(25):
                apply_step(tree, Step(rng.choice(ACTIONS), rng.randrange(64), rng.randrange(64), rng.randrange(64)),
                           kids, iids)
    return made


def test_merge_converges_for_two_forks_written_apart(tmp_path: Path) -> None:
    a, b = forks(tmp_path, (4, 5))
    assert_merge_converges(a, b, shuffles=4, rng=random.Random(6))
    with KeywordTree(a, read_only=True) as open_fork:  # an open tree is read from its directory
        assert_merge_converges(open_fork, b, shuffles=1, duplicates=False)


def test_merge_converges_refuses_logs_that_are_not_forks_of_one_log(tmp_path: Path) -> None:
    a, b = forks(tmp_path, (7, 8))
    segment = min((b / "log").glob("*.jsonl"))
    lines = segment.read_bytes().splitlines(keepends=True)
    row = orjson.loads(lines[1])  # a shared operation, changed in B only
    row["name"] = "rewritten"
    lines[1] = orjson.dumps(row) + b"\n"
    segment.write_bytes(b"".join(lines))
    with pytest.raises(AssertionError, match="has other rows in the two forks"):
        assert_merge_converges(a, b)


# --- strategies and the state machine ----------------------------------------------------------


@settings(max_examples=10)
@given(name=names(), spec=infos(), steps=operation_sequences(max_size=8))
def test_strategies_give_calls_kwtree_accepts(tmp_path_factory: pytest.TempPathFactory, name, spec, steps) -> None:
    with KeywordTree(tmp_path_factory.mktemp("strategies") / "tree", durability="none") as tree:
        keyword = tree.create_keyword(name, llm_auto_place=False)
        info = tree.create_info(**spec, keyword_ids=[keyword.id])
        assert tree.get_info(info.id).content == spec["content"]
        kids, iids = [ROOT_ID, keyword.id], [info.id]
        for step in steps:
            apply_step(tree, step, kids, iids)
        assert_tree_shape(tree)


@pytest.mark.slow
class TestKwtreeStateMachine(KwtreeStateMachine.TestCase):
    settings = settings(stateful_step_count=15)


class RememberingMachine(KwtreeStateMachine):
    """What docs/testing.md shows: a subclass adds a rule that calls the user's own code."""

    @rule(topic=names(), spec=infos())
    def remember(self, topic: str, spec: dict) -> None:
        found = self.tree.find_keywords(topic)
        keyword = found[0] if found else self.tree.create_keyword(topic, llm_auto_place=False)
        self.info_ids.append(self.tree.create_info(spec["content"], keyword_ids=[keyword.id]).id)


@pytest.mark.slow
class TestRememberingMachine(RememberingMachine.TestCase):
    settings = settings(stateful_step_count=15)
