"""DESIGN §4 invariant 4, "indexes are caches": deleting every cache file and reopening gives
identical results for every read and every search; and §5: a missing, stale or corrupt cache
is rebuilt, never a reason for an open (or a search) to fail.

* A hypothesis property drives random histories (keywords named from a small vocabulary with
  CJK words, infos created, updated, deleted, linked and unlinked, keywords renamed, moved and
  deleted, recall probes) on a tree with ``embed_async=False, worker=False``, and loses
  ``cache/`` (or part of it) and ``outbox.jsonl`` at random points: between a close and a
  reopen, or under the open tree. At the end a fresh tree on a copy without any cache is
  compared with a fresh tree on a copy with the caches the history left: every public read,
  ``search``, and what recall can be compared today (the infos each query matches in full
  text, live and current hits, no vector of an old text). The full comparison the invariant
  asks for (same ids, order and scores in every mode, same ``context``) is a second property,
  a strict xfail: it fails for the bugs shown one by one by the example tests below.
* Example tests: a corrupt full-text index (bytes overwritten, files truncated or deleted),
  torn vector files, garbage in the outbox, caches deleted under an open tree.
* Trees that may not write the shared full-text index (``read_only``, ``as_of``): with the
  cache deleted, left behind by a writer SIGKILLed in a child process, ahead of an ``as_of``
  view, or corrupt, they find what a writer without caches finds, follow other processes'
  writes after ``refresh()``, leave the data directory byte for byte as it was, and keep
  their private index in memory, writing no file; a third property plays random histories for them.

Directories are real (``tempfile``); trees use durability="none".
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import child_line, copy_tree_dir, dir_bytes, snapshot
from hypothesis import Phase, example, given, note, settings
from hypothesis import strategies as st

from kwtree import (
    ROOT_ID,
    CycleError,
    InvalidInputError,
    KeywordTree,
    KwtreeError,
    NotFoundError,
    ReadOnlyError,
    RelationType,
)
from kwtree.caches.embed import HashEmbedder, embed_queries
from kwtree.cli.worker import serve_outbox
from kwtree.models import Hit
from kwtree.stores.vectors import DEFAULT_EXACT_BELOW
from kwtree.testing import assert_caches_rebuildable, cache_damages, cache_files

LIMIT = 30.0  # seconds a wait_indexed may take before the test fails
MODES = ("bm25", "vector", "hybrid")
NAMES = ["Python", "Rust", "Cats", "Coffee", "北京", "東京", "大学", "tips"]
TEXTS = [
    "cats purr on warm mats",
    "Python packaging tips",
    "我在北京大学读书",
    "東京タワーに行った",
    "coffee beans and jazz records",
    "the Rust borrow checker",
    "cats and coffee",
    "python cats, rust cats",
]
QUERIES = ["cats", "python tips", "北京", "東京タワー", "coffee jazz", "Rust", "大学", "nothing matches this"]
#: What a history may lose: paths under the data directory.
DROPS = {
    "cache": ("cache",),
    "fulltext": ("cache/fulltext",),
    "vectors": ("cache/vectors",),
    "outbox": ("outbox.jsonl",),
    "everything": ("cache", "outbox.jsonl"),
}


def open_tree(directory: Path, **kwargs: Any) -> KeywordTree:
    """A tree whose vectors are written with each write, so they do not depend on timing."""
    return KeywordTree(directory, durability="none", embed_async=False, worker=False, **kwargs)


def drop(directory: Path, what: str) -> None:
    for name in DROPS[what]:
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def bare_copy(source: Path, target: Path) -> Path:
    """A copy of the log and manifest only: no cache, no outbox."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("lock", "cache", "outbox.*"))
    return target


def cosine(query: str, text: str) -> float:
    embedder = HashEmbedder()
    return float(embed_queries(embedder, [query])[0] @ embedder.embed([text])[0])


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kwtree-cache-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --- random histories ------------------------------------------------------------------------

PICK = st.integers(0, 1_000)  # an index into the live entities, modulo their number
STEP = st.one_of(
    st.tuples(st.just("keyword"), st.sampled_from(NAMES), PICK),
    st.tuples(st.just("info"), st.sampled_from(TEXTS), PICK),
    st.tuples(st.just("info"), st.sampled_from(TEXTS), PICK),
    st.tuples(st.just("update"), PICK, st.sampled_from(TEXTS)),
    st.tuples(st.just("delete_info"), PICK),
    st.tuples(st.just("link"), PICK, PICK, st.sampled_from(list(RelationType))),
    st.tuples(st.just("unlink"), PICK, PICK),
    st.tuples(st.just("rename"), PICK, st.sampled_from(NAMES)),
    st.tuples(st.just("move"), PICK, PICK),
    st.tuples(st.just("delete_keyword"), PICK, st.sampled_from(["reattach", "delete", "keep"])),
    st.tuples(st.just("probe"), st.sampled_from(QUERIES), st.sampled_from(MODES)),
    st.tuples(st.just("reopen"), st.sampled_from([None, *DROPS])),  # close, lose that, reopen
    st.tuples(st.just("lose_open"), st.sampled_from(list(DROPS))),  # lose it under the open tree
)
HISTORY = st.lists(STEP, min_size=1, max_size=30)


#: Errors of a write the tree refuses (a duplicate name, a cycle): it changes nothing, and
#: invariant 1's property covers that. Anything else (a StorageError) fails the test.
REFUSALS = (InvalidInputError, NotFoundError, CycleError)


class History:
    """Plays steps on one directory; a refused write is skipped."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.tree = open_tree(directory)
        self.keyword_ids: list[str] = []  # every keyword ever created, live or not
        self.info_ids: list[str] = []
        # True once caches vanished under the open tree: recall is not probed until the next
        # reopen (it raises then; test_recall_after_caches_vanish_under_an_open_tree shows it).
        self.damaged = False

    def _live(self, ids: list[str], get: Any) -> list[str]:
        live = []
        for entity_id in ids:
            try:
                get(entity_id)
            except KwtreeError:
                continue
            live.append(entity_id)
        return live

    def _keyword(self, pick: int, root: bool = False) -> str | None:
        live = self._live(self.keyword_ids, self.tree.get_keyword)
        choices = [ROOT_ID, *live] if root else live
        return choices[pick % len(choices)] if choices else None

    def _info(self, pick: int) -> str | None:
        live = self._live(self.info_ids, self.tree.get_info)
        return live[pick % len(live)] if live else None

    def play(self, step: tuple) -> None:
        tree, kind = self.tree, step[0]
        try:
            if kind == "keyword":
                self.keyword_ids.append(tree.create_keyword(step[1], self._keyword(step[2], root=True)).id)
            elif kind == "info":
                target = self._keyword(step[2], root=True)
                links = [] if target in (None, ROOT_ID) else [target]
                self.info_ids.append(tree.create_info(step[1], keyword_ids=links).id)
            elif kind == "update" and (info := self._info(step[1])):
                tree.update_info(info, {"content": step[2]})
            elif kind == "delete_info" and (info := self._info(step[1])):
                tree.delete_info(info)
            elif kind in ("link", "unlink") and (info := self._info(step[1])) and \
                    (keyword := self._keyword(step[2])):
                if kind == "link":
                    tree.link_info(info, keyword, step[3])
                else:
                    tree.unlink_info(info, keyword)
            elif kind == "rename" and (keyword := self._keyword(step[1])):
                tree.update_keyword(keyword, {"name": step[2]}, tree.get_keyword(keyword).version)
            elif kind == "move" and (keyword := self._keyword(step[1])):
                tree.move_keyword(keyword, self._keyword(step[2], root=True))
            elif kind == "delete_keyword" and (keyword := self._keyword(step[1])):
                tree.delete_keyword(keyword, cascade=True, info_policy=step[2])
        except REFUSALS:
            pass
        if kind == "probe" and not self.damaged:
            check_hits(tree, step[1], tree.recall(step[1], k=20, mode=step[2]))
        elif kind == "reopen":
            tree.close()
            if step[1] is not None:
                drop(self.dir, step[1])
            self.tree, self.damaged = open_tree(self.dir), False
        elif kind == "lose_open":
            drop(self.dir, step[1])
            self.damaged = True

    def finish(self, base: Path) -> tuple[KeywordTree, KeywordTree]:
        """Close the history's tree; return fresh trees on a copy that kept the caches and
        on a copy that has none."""
        self.tree.close()
        kept = open_tree(copy_tree_dir(self.dir, base / "kept"))
        rebuilt = open_tree(bare_copy(self.dir, base / "rebuilt"))
        return kept, rebuilt


def check_hits(tree: KeywordTree, query: str, hits: list[Hit]) -> None:
    """Hits are live infos as they are now, each once, best first, and a vector score is
    the similarity of the query to the current text (never to an old one)."""
    assert len({hit.info.id for hit in hits}) == len(hits)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    for hit in hits:
        assert hit.info == tree.get_info(hit.info.id)
        assert [(k.keyword.id, k.relation) for k in hit.keywords] == \
            [(k.id, relation) for k, relation in tree.get_keywords_of_info(hit.info.id)]
        if hit.vector is not None:
            assert hit.vector == pytest.approx(cosine(query, hit.info.content), abs=1e-4)


def text_matches(tree: KeywordTree, query: str, under: str | None = None) -> set[str]:
    """The infos whose text matches the query (a set: independent of ranking)."""
    return {hit.info.id for hit in tree.recall(query, k=1000, under=under, mode="bm25") if hit.bm25 is not None}


def play(steps: list[tuple], base: Path, check: Callable[[KeywordTree], None] | None = None,
         ) -> tuple[History, KeywordTree, KeywordTree]:
    """Play ``steps``; call ``check`` on the history's tree before it closes; return fresh
    trees on a copy with the caches and on a copy without."""
    history = History(base / "tree")
    for step in steps:
        note(repr(step))
        history.play(step)
    if check is not None:
        check(history.tree)
    kept, rebuilt = history.finish(base)
    return history, kept, rebuilt


def caches_rebuildable(tree: KeywordTree, damages: list[list[tuple[str, str]]] | None = None) -> None:
    """kwtree.testing's checker for invariant 4 (bm25, vector and hybrid recall, search), with
    the options of ``open_tree``; ``damages``: plans of damage to the cache files."""
    assert_caches_rebuildable(tree, QUERIES, timeout=LIMIT, damages=damages or [], embed_async=False, worker=False)


@given(steps=HISTORY, data=st.data())
def test_reads_search_and_text_matches_are_the_same_after_losing_or_damaging_caches(
        steps: list[tuple], data: st.DataObject) -> None:
    """kwtree.testing.assert_caches_rebuildable (reads, search, the infos full text
    matches), without the caches and with one or two of the cache files the history left
    deleted, emptied, truncated or garbled (issue 25, B15); then what only this suite checks:
    hits are current, and the full-text matches under every keyword."""
    base = Path(tempfile.mkdtemp(prefix="kwtree-cache-"))
    kept = rebuilt = None

    def check(tree: KeywordTree) -> None:
        files = cache_files(tree.data_dir)
        plan = data.draw(cache_damages(files), label="damage") if files else []
        logging.disable(logging.CRITICAL)  # the damage is reported as warnings: expected here
        try:
            caches_rebuildable(tree, [plan] if plan else [])
        finally:
            logging.disable(logging.NOTSET)

    try:
        history, kept, rebuilt = play(steps, base, check)
        scopes = [ROOT_ID, *history._live(history.keyword_ids, kept.get_keyword)]
        for query in QUERIES:
            for tree in (kept, rebuilt):
                for mode in MODES:
                    check_hits(tree, query, tree.recall(query, k=20, mode=mode))
        for scope in scopes:
            assert text_matches(rebuilt, "cats 北京", scope) == text_matches(kept, "cats 北京", scope)
    finally:
        for tree in (kept, rebuilt):
            if tree is not None:
                tree.close()
        shutil.rmtree(base, ignore_errors=True)


def recall_view(tree: KeywordTree, query: str, mode: str) -> tuple[list, list[float]]:
    """(the exact parts, the float parts) of a recall, for comparison with pytest.approx."""
    hits = tree.recall(query, k=20, mode=mode)
    exact = [(h.info.id, h.text_rank, h.vector_rank, [k.keyword.id for k in h.keywords]) for h in hits]
    floats = [x for h in hits for x in (h.score, h.info_score, h.keyword_score,
                                         -9.0 if h.bm25 is None else h.bm25, -9.0 if h.vector is None else h.vector)]
    return exact, floats


@pytest.mark.xfail(strict=True, reason=(
    "BUG: invariant 4 does not hold for recall and context. BM25 statistics and ties no longer "
    "depend on the index's layout (kwtree.caches.lexical, issue 26); what remains: a vector-mode "
    "probe after every cache is lost can return nothing where the kept caches return hits"))
@settings(phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: the causes are pinned below
@given(steps=HISTORY)
# A history that shows the bug every time: random ones do not always (a run found none in 25), and a
# strict xfail that passes by chance fails CI.
@example(steps=[("info", "python cats, rust cats", 158), ("lose_open", "everything"), ("delete_info", 246),
                ("unlink", 1, 393), ("lose_open", "cache"), ("delete_keyword", 697, "reattach"),
                ("probe", "python tips", "vector"), ("info", "Python packaging tips", 128)])
def test_recall_and_context_are_the_same_after_losing_every_cache(steps: list[tuple]) -> None:
    base = Path(tempfile.mkdtemp(prefix="kwtree-cache-"))
    kept = rebuilt = None
    try:
        _, kept, rebuilt = play(steps, base)
        for query in QUERIES:
            for mode in MODES:
                exact, floats = recall_view(kept, query, mode)
                assert recall_view(rebuilt, query, mode) == (exact, pytest.approx(floats, abs=1e-5))
            assert rebuilt.context(query) == kept.context(query)
    finally:
        for tree in (kept, rebuilt):
            if tree is not None:
                tree.close()
        shutil.rmtree(base, ignore_errors=True)


# --- what a rebuild gets right, and the bugs one by one -----------------------------------------

def embedded_ids(tree: KeywordTree) -> set[str]:
    """The infos vector recall finds by their own text (recall drops texts that point away
    from the query, so one query does not list every embedded info)."""
    return {hit.info.id for text in DISTINCT for hit in tree.recall(text, k=3, mode="vector")}


DISTINCT = [  # no two score alike for any query below: rankings without ties
    "cats purr on warm mats in the afternoon sun",
    "Python packaging tips",
    "我在北京大学读书",
    "東京タワーに行った",
    "coffee beans",
    "the Rust borrow checker rejects dangling references in cats code",
]


def test_a_rebuild_of_a_history_without_rewrites_or_ties_gives_identical_bm25(base: Path) -> None:
    with open_tree(base / "tree") as tree:
        cats = tree.create_keyword("Cats", ROOT_ID)
        for text in DISTINCT:
            tree.create_info(text, keyword_ids=[cats.id] if "cats" in text else [])
            tree.recall("cats", mode="bm25")  # one commit per write: the index grows incrementally
    with open_tree(copy_tree_dir(base / "tree", base / "kept")) as kept, \
            open_tree(bare_copy(base / "tree", base / "rebuilt")) as rebuilt:
        for query in QUERIES:
            exact, floats = recall_view(kept, query, "bm25")
            assert recall_view(rebuilt, query, "bm25") == (exact, pytest.approx(floats, abs=1e-6))


def test_bm25_scores_after_updates_equal_those_of_a_rebuild(base: Path) -> None:
    with open_tree(base / "tree") as tree:
        made = [tree.create_info(f"apple cherry {fruit}").id for fruit in ("grape", "lemon", "mango", "kiwi", "plum")]
        tree.create_info("banana only here")
        tree.recall("apple", mode="bm25")
        for info in made[:3]:
            tree.update_info(info, {"content": "banana split"})
            tree.recall("apple", mode="bm25")
    with open_tree(copy_tree_dir(base / "tree", base / "kept")) as kept, \
            open_tree(bare_copy(base / "tree", base / "rebuilt")) as rebuilt:
        scores = [{h.info.id: h.bm25 for h in t.recall("apple banana", k=20, mode="bm25")} for t in (kept, rebuilt)]
        assert scores[0].keys() == scores[1].keys()
        assert scores[1] == pytest.approx(scores[0], abs=1e-6)


def test_equal_texts_rank_in_the_same_order_after_a_rebuild(base: Path) -> None:
    with open_tree(base / "tree") as tree:
        for _ in range(8):
            tree.create_info("Cats purr when content")
            tree.recall("cats", mode="bm25")
    with open_tree(copy_tree_dir(base / "tree", base / "kept")) as kept, \
            open_tree(bare_copy(base / "tree", base / "rebuilt")) as rebuilt:
        assert [h.info.id for h in rebuilt.recall("cats", mode="bm25")] == \
            [h.info.id for h in kept.recall("cats", mode="bm25")]


@pytest.mark.parametrize("embed_async", [False, True])
def test_a_fresh_open_without_worker_rebuilds_lost_vectors(base: Path, embed_async: bool) -> None:
    with open_tree(base / "tree") as tree:
        infos = [tree.create_info(text) for text in DISTINCT]
    shutil.rmtree(base / "tree" / "cache")
    with KeywordTree(base / "tree", durability="none", worker=False, embed_async=embed_async) as tree:
        assert tree.wait_indexed(LIMIT)
        assert embedded_ids(tree) == {info.id for info in infos}


def test_the_standalone_worker_embeds_texts_whose_outbox_rows_were_lost(base: Path) -> None:
    with KeywordTree(base / "tree", durability="none", worker=False) as tree:
        infos = [tree.create_info(text) for text in DISTINCT]
        (base / "tree" / "outbox.jsonl").unlink(missing_ok=True)  # (writes queue it lazily)
        serve_outbox(base / "tree", HashEmbedder(), once=True)
        assert embedded_ids(tree) == {info.id for info in infos}


def test_wait_indexed_after_an_open_waits_for_the_repair_scan(base: Path) -> None:
    with open_tree(base / "tree") as tree:
        infos = [tree.create_info(text) for text in DISTINCT]
    shutil.rmtree(base / "tree" / "cache")
    other_writer = os.open(base / "tree" / "lock", os.O_RDWR)
    try:
        fcntl.flock(other_writer, fcntl.LOCK_EX)  # as another process in the middle of a write
        with KeywordTree(base / "tree", durability="none") as tree:
            done = tree.wait_indexed(1.0)
            # A writable tree's recall takes the writer lock; a reader sees what is on disk.
            with KeywordTree(base / "tree", read_only=True) as reader:
                found = embedded_ids(reader)
            fcntl.flock(other_writer, fcntl.LOCK_UN)  # before close, which takes the lock
            assert not done or found == {info.id for info in infos}
    finally:
        os.close(other_writer)


def test_with_the_worker_thread_lost_vectors_come_back(base: Path) -> None:
    """The repair scan does run in the worker thread: closing the tree lets it finish, and
    the next tree drains what it queued."""
    with open_tree(base / "tree") as tree:
        infos = [tree.create_info(text) for text in DISTINCT]
    shutil.rmtree(base / "tree" / "cache")
    with KeywordTree(base / "tree", durability="none"):
        pass
    with KeywordTree(base / "tree", durability="none", worker=False) as tree:
        assert tree.wait_indexed(LIMIT)
        assert embedded_ids(tree) == {info.id for info in infos}
        check_hits(tree, "cats", tree.recall("cats", k=20, mode="vector"))


# --- caches lost under an open tree ---------------------------------------------------------------


@pytest.mark.parametrize("what", list(DROPS))
def test_reads_right_after_caches_vanish_do_not_fail(base: Path, what: str) -> None:
    with open_tree(base / "tree") as tree:
        info = tree.create_info("cats purr on warm mats")
        assert tree.recall("cats", mode="hybrid")[0].info == info
        drop(base / "tree", what)
        for mode in MODES:
            check_hits(tree, "cats", tree.recall("cats", mode=mode))
        tree.context("cats")
        assert tree.search("Cats").status is not None


@pytest.mark.parametrize("what", list(DROPS))
def test_writes_and_close_survive_caches_vanishing_and_a_reopen_rebuilds(base: Path, what: str) -> None:
    with open_tree(base / "tree") as tree:
        first = tree.create_info("cats purr on warm mats")
        tree.recall("cats", mode="bm25")
        drop(base / "tree", what)
        second = tree.create_info("cats nap in boxes")
        tree.update_info(first.id, {"content": "cats purr on warm rugs"})
    with open_tree(base / "tree") as tree:
        assert {h.info.id for h in tree.recall("cats", mode="bm25")} == {first.id, second.id}
        assert [h.info.id for h in tree.recall("rugs", mode="bm25")] == [first.id]
        assert tree.recall("mats", mode="bm25") == []
        check_hits(tree, "cats", tree.recall("cats", mode="vector"))


@pytest.mark.parametrize(("what", "mode"), [
    *[(what, mode) for what in ("cache", "fulltext") for mode in MODES],
])
def test_recall_after_caches_vanish_under_an_open_tree(base: Path, what: str, mode: str) -> None:
    with open_tree(base / "tree") as tree:
        first = tree.create_info("cats purr on warm mats")
        tree.recall("cats", mode="bm25")
        drop(base / "tree", what)
        second = tree.create_info("cats nap in boxes")
        hits = tree.recall("cats", mode=mode)
        assert {h.info.id for h in hits} == {first.id, second.id}


# --- corrupt and torn caches ----------------------------------------------------------------------


def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 8]) + data[middle + 8:]


DAMAGE = {
    "garbage": lambda data: b"\xa5" * len(data),
    "truncated": lambda data: data[: len(data) // 2],
    "empty": lambda data: b"",
    "flipped": _flip,
    "appended": lambda data: data + b"\x00garbage\xff" * 4,
}
FULLTEXT_FILES = [".store", ".term", ".idx", ".pos", ".fieldnorm", ".fast", "index/meta.json",
                  "index/.managed.json", "meta.json"]
_KNOWN_CORRUPTIONS = {
    (".store", "flipped"): "ValueError: the stored key of a hit cannot be decompressed",
    (".pos", "deleted"): "ValueError: tantivy cannot open the positions of the text field",
    (".term", "flipped"): "tantivy-fst panics: pyo3 PanicException, a BaseException, not even an Exception",
}


def _fulltext_file(directory: Path, name: str) -> Path:
    fulltext = directory / "cache" / "fulltext"
    if name.startswith("."):
        [path] = (fulltext / "index").glob(f"*{name}")
        return path
    return fulltext / name


def _corruption_cases() -> Iterator[Any]:
    for name in FULLTEXT_FILES:
        for damage in [*DAMAGE, "deleted"]:
            # (The damage listed in _KNOWN_CORRUPTIONS passes the open and fails the first
            # search; the tree then rebuilds the index.)
            yield pytest.param(name, damage, id=f"{name}-{damage}")


@pytest.fixture(scope="module")
def clean_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed tree whose full-text index was written in one commit."""
    directory = tmp_path_factory.mktemp("clean") / "tree"
    with open_tree(directory) as tree:
        cats = tree.create_keyword("Cats", ROOT_ID)
        for text in DISTINCT:
            tree.create_info(text, keyword_ids=[cats.id] if "cats" in text else [])
    return directory


def _rebuilt_view_and_damaged_copy(clean_tree: Path, base: Path, name: str, damage: str) -> tuple:
    """The full view of a copy whose full-text index is rebuilt from the log (the same
    vectors), and another copy with ``damage`` done to its full-text file ``name``."""
    reference = copy_tree_dir(clean_tree, base / "reference")
    drop(reference, "fulltext")
    with open_tree(reference) as tree:
        views, contexts = full_view(tree)
        expected = [(exact, pytest.approx(floats, abs=1e-6)) for exact, floats in views], contexts
    directory = copy_tree_dir(clean_tree, base / "tree")
    path = _fulltext_file(directory, name)
    if damage == "deleted":
        path.unlink()
    else:
        path.write_bytes(DAMAGE[damage](path.read_bytes()))
    return expected, directory


@pytest.mark.parametrize(("name", "damage"), list(_corruption_cases()))
def test_a_corrupt_fulltext_index_is_rebuilt(clean_tree: Path, base: Path, name: str, damage: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    expected, directory = _rebuilt_view_and_damaged_copy(clean_tree, base, name, damage)
    with open_tree(directory) as tree:
        assert full_view(tree) == expected
        new = tree.create_info("cats chase laser dots")  # and the index takes writes again
        assert new.id in {h.info.id for h in tree.recall("laser", mode="bm25")}
    with open_tree(directory) as tree:  # what the repaired index committed is sound
        assert [h.info.id for h in tree.recall("laser dots", mode="bm25")] == [new.id]


def full_view(tree: KeywordTree) -> tuple[list, list]:
    """Every query's recall in bm25 and hybrid mode (exact parts, float parts), and context."""
    return [recall_view(tree, query, mode) for query in QUERIES for mode in ("bm25", "hybrid")], \
        [tree.context(query) for query in QUERIES]


def _vector_store(directory: Path) -> Path:
    [store] = (directory / "cache" / "vectors").iterdir()
    return store


@pytest.mark.parametrize("tear", ["vectors mid-row", "keys mid-line", "both", "vectors emptied",
                                  "keys garbage", "meta garbage"])
def test_torn_or_corrupt_vector_files_never_fail_an_open(clean_tree: Path, base: Path, tear: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    directory = copy_tree_dir(clean_tree, base / "tree")
    store = _vector_store(directory)
    vectors, keys = store / "vectors.f32", store / "keys.jsonl"
    row = 4 * HashEmbedder().dim
    if tear in ("vectors mid-row", "both"):
        vectors.write_bytes(vectors.read_bytes()[: 3 * row + row // 2])
    if tear in ("keys mid-line", "both"):
        data = keys.read_bytes()
        keys.write_bytes(data[: data.index(b"\n", len(data) // 2) - 5])
    if tear == "vectors emptied":
        vectors.write_bytes(b"")
    if tear == "keys garbage":
        keys.write_bytes(b"\xff\x00not json\n" * 3)
    if tear == "meta garbage":
        (store / "meta.json").write_bytes(b"{nope")
    with open_tree(directory) as tree:
        for query in QUERIES:
            for mode in MODES:
                check_hits(tree, query, tree.recall(query, k=20, mode=mode))
        assert {h.info.id for h in tree.recall("cats", mode="bm25")} == \
            {h.info.id for h in tree.recall("cats", mode="bm25") if h.bm25 is not None}
        new = tree.create_info("cats chase laser dots")  # appends after the torn tail is cut
        assert tree.recall(new.content, k=1, mode="vector")[0].info == new
    with open_tree(directory) as tree:
        hits = tree.recall(new.content, k=1, mode="vector")
        assert hits[0].info == new and hits[0].vector == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("junk", [b"\x00\xffnot json at all\n", b'{"r": "enqueue", "item": 3}\n',
                                  b'{"r": "teleport", "item": "x"}\n', b'{"r": "claim", "item"'])
def test_garbage_in_the_outbox_never_fails_an_open_and_its_work_still_gets_done(
        base: Path, junk: bytes, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.caches.outbox")
    directory = base / "tree"
    with KeywordTree(directory, durability="none", worker=False) as tree:
        first = tree.create_info("cats purr on warm mats")
    with open(directory / "outbox.jsonl", "ab") as outbox:
        outbox.write(junk)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        assert tree.outbox_status()["pending"] == 1
        second = tree.create_info("coffee beans")  # its row lands after the junk, readable
        assert tree.outbox_status()["pending"] == 2
        assert tree.wait_indexed(LIMIT)
        status = tree.outbox_status()
        assert (status["pending"], status["failed"], status["dead"], status["done"]) == (0, 0, 0, 2)
        for info in (first, second):
            assert tree.recall(info.content, k=1, mode="vector")[0].info == info


def test_an_outbox_that_lost_its_done_rows_waits_for_no_lease(base: Path) -> None:
    """Issue 25, B15's damage property found it: an outbox cut after its claim rows (or a worker
    killed between storing vectors and recording them done) left items leased to a worker that
    is gone, and wait_indexed waited for their leases (a minute) although every vector was
    there. The repair scan records them done."""
    directory = base / "tree"
    with KeywordTree(directory, durability="none", worker=False) as tree:
        infos = tree.batch_create_infos([{"content": text} for text in DISTINCT])
        assert tree.wait_indexed(LIMIT)
    outbox = directory / "outbox.jsonl"
    data = outbox.read_bytes()
    outbox.write_bytes(data[: data.index(b'"r":"done"')].rsplit(b"\n", 1)[0] + b"\n")  # up to the first done row
    with KeywordTree(directory, durability="none", worker=False) as tree:
        status = tree.outbox_status()  # (claimable: the tree that held the leases is closed)
        assert status["done"] == 0 and status["pending"] + status["leased"] == len(DISTINCT)
        assert tree.wait_indexed(0)  # the repair scan, then nothing left: no lease to wait for
        assert tree.outbox_status()["leased"] == 0
        assert {tree.recall(info.content, k=1, mode="vector")[0].info.id for info in infos} == {i.id for i in infos}


def test_an_outbox_that_lost_its_done_rows_waits_for_no_idle_worker_of_this_process(base: Path) -> None:
    """The same when the tree that leased the items is still open in this process (a copy of a
    live tree's directory, or one whose outbox lost its done rows under it) and the vectors are
    gone with the vector store: its worker holds no claim it has not recorded, so its leases are
    lost records, not work under way. wait_indexed waited them out (a minute). Found by the
    damage property in issue 28 (caches lost under an open tree, then its outbox cut in half)."""
    directory = base / "tree"
    with KeywordTree(directory, durability="none", worker=False) as holder:
        changed = holder.create_info("cats purr on warm mats")
        deleted = holder.create_info("coffee beans")
        assert holder.wait_indexed(LIMIT)  # claimed (leased to holder) and embedded
        holder.update_info(changed.id, {"content": "dogs bark at the mail"})
        holder.delete_info(deleted.id)
        assert holder.wait_indexed(LIMIT)
        outbox = directory / "outbox.jsonl"
        rows = outbox.read_bytes().splitlines(keepends=True)
        outbox.write_bytes(b"".join(row for row in rows if b'"r":"done"' not in row))  # every done row lost
        shutil.rmtree(directory / "cache" / "vectors")
        with KeywordTree(directory, durability="none", worker=False) as tree:
            status = tree.outbox_status()
            assert status["done"] == 0 and status["pending"] + status["leased"] == 3
            assert tree.wait_indexed(LIMIT)
            assert tree.outbox_status()["leased"] == 0
            assert [hit.info.id for hit in tree.recall("dogs bark", k=1, mode="vector")] == [changed.id]


def test_a_tree_s_worker_embeds_texts_its_state_has_not_read_yet(base: Path) -> None:
    """An outbox item for a text this tree's state does not hold yet (another process wrote it
    after this tree last read the log) is work to do, not an obsolete item. (A first version of
    the fix above also let the repair scan record such items done: the kwtree-worker position
    test caught it, at random, when a worker thread's first repair raced a hook.)"""
    directory = base / "tree"
    with KeywordTree(directory, durability="none", worker=False) as tree:
        tree.create_info("cats purr on warm mats")
        assert tree.wait_indexed(LIMIT)
        with KeywordTree(directory, durability="none", worker=False) as other:
            later = other.create_info("dogs bark at the mail")  # queued by its close
        assert tree.wait_indexed(LIMIT)  # the repair scan, on a state without ``later``
        with pytest.raises(NotFoundError):  # (the embedding did not move the state: refresh() does)
            tree.get_info(later.id)
        tree.refresh()
        assert tree.wait_indexed(LIMIT)
        assert [hit.info.id for hit in tree.recall("dogs bark", k=1, mode="vector")] == [later.id]


def test_a_fulltext_index_ahead_of_the_log_is_rebuilt(tmp_path: Path) -> None:
    """A cache from a later state of the log (here: the log was cut back to an older copy)
    must not answer for writes the log does not hold."""
    current, older = tmp_path / "current", tmp_path / "older"
    with KeywordTree(current, durability="none", worker=False) as tree:
        info = tree.create_info("alpha early")
    shutil.copytree(current, older)
    with KeywordTree(current, durability="none", worker=False) as tree:
        tree.update_info(info.id, {"content": "bravo later"})
        assert [hit.info.id for hit in tree.recall("bravo", mode="bm25")] == [info.id]
    shutil.rmtree(older / "cache", ignore_errors=True)
    shutil.copytree(current / "cache", older / "cache")
    with KeywordTree(older, durability="none", worker=False) as tree:
        assert tree.recall("bravo", mode="bm25") == []
        assert [hit.info.id for hit in tree.recall("alpha", mode="bm25")] == [info.id]


# --- trees that may not write the shared full-text index (read_only, as_of) -----------------------
#
# Such a tree searches cache/fulltext/ only while its watermark is the tree's last op id;
# otherwise it searches a private index in memory, fed from its own state (never a file: see
# tests/test_trust_forget_readers.py).

HANG = 60  # seconds before a stuck child process is reported as a failure (never reached normally)

WRITER = """
import json, sys
from kwtree import KeywordTree

tree = KeywordTree(sys.argv[1], worker=False)  # durable: each write is on disk when it returns
made = {}
for verb, target, *text in json.loads(sys.argv[2]):
    if verb == "create":
        made[target] = tree.create_info(text[0]).id
    elif verb == "update":
        tree.update_info(target, {"content": text[0]})
    else:
        tree.delete_info(target)
print(json.dumps({"ids": made, "last": tree.last_op_id}), flush=True)  # no search: the cache lags
sys.stdin.readline()  # SIGKILLed here, or told to close (which commits the full-text index)
tree.close()
"""


class Writer:
    """A writer in a child process: it makes ``actions`` (``["create", label, text]``,
    ``["update", id, text]``, ``["delete", id]``), reports the new infos' ids by label and its
    last op id, and waits to be SIGKILLed (leaving the full-text cache behind its writes) or
    closed."""

    def __init__(self, directory: Path, actions: list[list[str]]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(directory),
                                      json.dumps(actions)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        reply = json.loads(child_line(self.proc, HANG))
        self.ids: dict[str, str] = reply["ids"]
        self.last: str = reply["last"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(HANG) == -signal.SIGKILL

    def close(self) -> None:
        _, err = self.proc.communicate("\n", timeout=HANG)
        assert self.proc.returncode == 0, err


@pytest.fixture
def writers() -> Iterator[Any]:
    started: list[Writer] = []

    def start(directory: Path, actions: list[list[str]]) -> Writer:
        started.append(Writer(directory, actions))
        return started[-1]

    yield start
    for writer in started:
        if writer.proc.poll() is None:
            writer.proc.kill()
            writer.proc.communicate(timeout=HANG)


@pytest.fixture
def private_tmp(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tempfile's directory for this test: where a read-only tree must leave nothing (its
    private index is in memory)."""
    path = base / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def bm25_ids(tree: KeywordTree, query: str) -> list[str]:
    return [hit.info.id for hit in tree.recall(query, k=20, mode="bm25")]


def fulltext_watermark(directory: Path) -> str | None:
    return json.loads((directory / "cache" / "fulltext" / "meta.json").read_bytes())["watermark"]


def leave_stale_cache(directory: Path) -> tuple[str, ...]:
    """Write infos, put back the full-text cache committed before the last three writes (what
    a writer killed before its next search leaves) and return the ids of the infos."""
    with open_tree(directory) as tree:
        mats = tree.create_info("cats purr on warm mats")
        jazz = tree.create_info("coffee beans and jazz records")
        tree.create_info("python cats, rust cats")
        tree.recall("cats", mode="bm25")  # commits the cache
        shutil.copytree(directory / "cache" / "fulltext", directory.parent / "old-fulltext")
        laser = tree.create_info("cats chase laser dots")
        tree.update_info(mats.id, {"content": "dogs doze on rugs"})
        tree.delete_info(jazz.id)
    shutil.rmtree(directory / "cache" / "fulltext")
    shutil.copytree(directory.parent / "old-fulltext", directory / "cache" / "fulltext")
    return mats.id, jazz.id, laser.id


@pytest.mark.parametrize("view", ["read_only", "as_of"])
def test_a_read_only_tree_without_caches_finds_what_a_writer_finds(base: Path, view: str) -> None:
    with open_tree(base / "tree") as tree:
        cats = tree.create_keyword("Cats", ROOT_ID)
        made = [tree.create_info(text, keyword_ids=[cats.id] if "cats" in text else []) for text in TEXTS]
        tree.update_info(made[0].id, {"content": "cats purr on warm rugs"})
        tree.delete_info(made[4].id)
        last = tree.last_op_id
    drop(base / "tree", "cache")
    options: dict[str, Any] = {"read_only": True} if view == "read_only" else {"as_of": last}
    with open_tree(bare_copy(base / "tree", base / "writer")) as writer, \
            KeywordTree(base / "tree", **options) as reader:
        assert bm25_ids(reader, "cats")  # (it found nothing at all: no index to search)
        for query in QUERIES:
            exact, floats = recall_view(writer, query, "bm25")
            assert recall_view(reader, query, "bm25") == (exact, pytest.approx(floats, abs=1e-6))
            assert reader.search(query) == writer.search(query)
    assert not (base / "tree" / "cache").exists()


def test_a_read_only_tree_searches_what_a_killed_writer_left_out_of_the_cache(
        base: Path, writers: Any, caplog: pytest.LogCaptureFixture) -> None:
    directory = base / "tree"
    with open_tree(directory) as tree:
        mats = tree.create_info("cats purr on warm mats")
        jazz = tree.create_info("coffee beans and jazz records")
        tree.create_info("the Rust borrow checker")
    committed = fulltext_watermark(directory)
    writer = writers(directory, [["create", "laser", "cats chase laser dots"],
                                 ["update", mats.id, "dogs doze on rugs"], ["delete", jazz.id]])
    writer.kill()
    assert committed is not None and fulltext_watermark(directory) == committed < writer.last  # stale
    caplog.set_level(logging.DEBUG, logger="kwtree.cache")
    with KeywordTree(directory, read_only=True) as reader, \
            open_tree(bare_copy(directory, base / "writer")) as reference:
        assert reader.last_op_id == writer.last
        assert bm25_ids(reader, "laser") == [writer.ids["laser"]]
        assert bm25_ids(reader, "rugs") == [mats.id]
        assert bm25_ids(reader, "mats") == bm25_ids(reader, "jazz") == []
        for query in QUERIES:
            assert text_matches(reader, query) == text_matches(reference, query)
    assert "searching a private index in memory" in caplog.text
    assert fulltext_watermark(directory) == committed


def test_a_read_only_tree_follows_other_processes_writes_after_refresh(
        base: Path, writers: Any, private_tmp: Path) -> None:
    directory = base / "tree"
    with open_tree(directory) as tree:
        mats = tree.create_info("cats purr on warm mats")
        jazz = tree.create_info("coffee beans and jazz records")
    with KeywordTree(directory, read_only=True) as reader:
        assert bm25_ids(reader, "cats") == [mats.id]
        closed = writers(directory, [["create", "hats", "cats in hats"]])
        closed.close()  # commits the shared index at its last write
        assert bm25_ids(reader, "hats") == []  # until refresh(), the tree is where it was
        assert reader.refresh() == 1
        assert bm25_ids(reader, "hats") == [closed.ids["hats"]]
        assert list(private_tmp.iterdir()) == []  # the shared index matched the state each time
        killed = writers(directory, [["create", "laser", "cats chase laser dots"], ["delete", jazz.id]])
        killed.kill()  # leaves the shared index behind
        assert bm25_ids(reader, "laser") == [] and bm25_ids(reader, "jazz") == [jazz.id]
        assert reader.refresh() == 2
        assert bm25_ids(reader, "laser") == [killed.ids["laser"]]
        assert bm25_ids(reader, "jazz") == []
        assert list(private_tmp.iterdir()) == []  # a private index, in memory
        more = writers(directory, [["update", mats.id, "dogs doze on rugs"], ["create", "box", "cats nap in a box"]])
        more.close()
        assert reader.refresh() == 2  # the private index takes these two operations next
        assert set(bm25_ids(reader, "cats")) == {closed.ids["hats"], killed.ids["laser"], more.ids["box"]}
        assert bm25_ids(reader, "mats") == []
        assert bm25_ids(reader, "rugs") == [mats.id]
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("cache", ["current", "stale", "none"])
def test_an_as_of_view_searches_its_own_past(base: Path, cache: str) -> None:
    directory = base / "tree"
    with open_tree(directory) as tree:
        early = tree.create_info("alpha early")
        stale = tree.last_op_id
        tree.recall("alpha", mode="bm25")  # the cache commits at the view's operation
        shutil.copytree(directory / "cache" / "fulltext", base / "old-fulltext")
        other = tree.create_info("cats purr")
        then = tree.last_op_id
        tree.update_info(early.id, {"content": "bravo later"})
        tree.create_info("alpha again, later")
        assert bm25_ids(tree, "bravo") == [early.id]
    if cache != "current":
        shutil.rmtree(directory / "cache" / "fulltext")
    if cache == "stale":  # behind the view: copied, then the view's tail is applied
        shutil.copytree(base / "old-fulltext", directory / "cache" / "fulltext")
        assert fulltext_watermark(directory) == stale
    with KeywordTree(directory, as_of=then) as view:
        assert bm25_ids(view, "alpha") == [early.id]
        assert bm25_ids(view, "cats") == [other.id]
        assert bm25_ids(view, "bravo") == bm25_ids(view, "later") == []


@pytest.mark.parametrize("cache", ["current", "stale", "none"])
@pytest.mark.parametrize("view", ["read_only", "as_of"])
def test_read_only_searches_leave_the_data_directory_untouched(base: Path, private_tmp: Path,
                                                                cache: str, view: str) -> None:
    directory = base / "tree"
    mats, jazz, laser = leave_stale_cache(directory)
    if cache == "current":
        with open_tree(directory) as tree:
            tree.recall("cats", mode="bm25")  # the writer commits the cache at the last op
    elif cache == "none":
        drop(directory, "everything")
    before = dir_bytes(directory)
    options: dict[str, Any] = {"read_only": True}
    if view == "as_of":
        with KeywordTree(directory, read_only=True) as tree:
            options = {"as_of": tree.last_op_id}
    with KeywordTree(directory, **options) as reader:
        for query in QUERIES:
            for mode in MODES:
                check_hits(reader, query, reader.recall(query, k=20, mode=mode))
            reader.context(query)
            reader.search(query)
        assert bm25_ids(reader, "laser") == [laser] and bm25_ids(reader, "rugs") == [mats]
        assert bm25_ids(reader, "mats") == bm25_ids(reader, "jazz") == []
        assert list(private_tmp.iterdir()) == []  # a private index (cache not current) is in memory
    assert dir_bytes(directory) == before


@pytest.mark.parametrize(("name", "damage"), [
    *[pytest.param(name, damage, id=f"{name}-{damage}") for name, damage in _KNOWN_CORRUPTIONS],
    pytest.param("meta.json", "garbage", id="meta.json-garbage"),
    pytest.param("index/meta.json", "deleted", id="index-meta.json-deleted"),
])
def test_a_read_only_tree_searches_around_a_corrupt_fulltext_index(
        clean_tree: Path, base: Path, private_tmp: Path, name: str, damage: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    expected, directory = _rebuilt_view_and_damaged_copy(clean_tree, base, name, damage)
    before = dir_bytes(directory)
    with KeywordTree(directory, read_only=True) as reader:
        assert full_view(reader) == expected  # (a search that failed found nothing)
    assert dir_bytes(directory) == before  # the damaged cache is left for a writer to rebuild
    assert list(private_tmp.iterdir()) == []


@settings(max_examples=15)
@given(steps=HISTORY, mark=st.integers(0, 30), cache=st.sampled_from(["left", "older", "none"]),
       view=st.sampled_from(["read_only", "as_of"]))
def test_a_read_only_tree_finds_what_a_rebuilt_writer_finds_whatever_cache_it_meets(
        steps: list[tuple], mark: int, cache: str, view: str) -> None:
    """The caches a history left, an older full-text cache (one committed at step ``mark``,
    as a writer killed later leaves it), or none: a read-only tree (or an ``as_of`` view of
    the present) reads and matches like a fresh writer without caches."""
    base = Path(tempfile.mkdtemp(prefix="kwtree-cache-"))
    rebuilt = reader = None
    try:
        history = History(base / "tree")
        older = base / "older"
        for index, step in enumerate(steps):
            note(repr(step))
            history.play(step)
            if index == mark and (history.dir / "cache" / "fulltext" / "meta.json").exists():
                shutil.copytree(history.dir / "cache" / "fulltext", older)
        history.tree.close()
        rebuilt = open_tree(bare_copy(history.dir, base / "rebuilt"))
        if cache == "none":
            drop(history.dir, "everything")
        elif cache == "older" and older.exists():
            shutil.rmtree(history.dir / "cache" / "fulltext", ignore_errors=True)
            shutil.copytree(older, history.dir / "cache" / "fulltext")
        before = dir_bytes(history.dir)
        options: dict[str, Any] = {"read_only": True} if view == "read_only" else {"as_of": rebuilt.last_op_id}
        reader = KeywordTree(history.dir, **options)
        assert snapshot(reader, history.keyword_ids, history.info_ids) == \
            snapshot(rebuilt, history.keyword_ids, history.info_ids)
        scopes = [ROOT_ID, *history._live(history.keyword_ids, rebuilt.get_keyword)]
        for query in QUERIES:
            assert reader.search(query) == rebuilt.search(query)
            assert text_matches(reader, query) == text_matches(rebuilt, query)
            check_hits(reader, query, reader.recall(query, k=20, mode="hybrid"))
        for scope in scopes:
            assert text_matches(reader, "cats 北京", scope) == text_matches(rebuilt, "cats 北京", scope)
        reader.close()
        assert dir_bytes(history.dir) == before
    finally:
        for tree in (rebuilt, reader):
            if tree is not None:
                tree.close()
        shutil.rmtree(base, ignore_errors=True)


# --- trees that may not write the vector cache (read_only, as_of) ---------------------------------
#
# They open the vector store and the outbox read-only: they search what writers embedded (a
# graph they have to build stays in memory), search a missing or damaged store as empty, and
# neither embed nor queue anything; the data directory is left byte for byte as it was, lock
# files included.

#: Infos enough for the vector store to search a graph rather than every row.
GRAPH_INFOS = DEFAULT_EXACT_BELOW + 100
WORDS = ["cats", "purr", "mats", "python", "packaging", "tips", "coffee", "beans", "jazz", "records",
         "rust", "borrow", "checker", "laser", "dots", "rugs", "北京", "大学", "東京", "タワー"]


def no_lock_files(directory: Path) -> None:
    """Remove the lock files the writers left (the tree's, the vector store's, the outbox's),
    so that a reader that makes one shows. (Not tantivy's own ``.tantivy-meta.lock``: tantivy
    makes it whenever it opens an index, for reading too.)"""
    for path in [*directory.rglob("lock"), *directory.glob("*.lock")]:
        path.unlink()


def view_options(view: str, last: str | None) -> dict[str, Any]:
    return {"read_only": True} if view == "read_only" else {"as_of": last}


@pytest.fixture(scope="module")
def vector_trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Closed trees whose texts are all embedded and whose vector store has no saved graph
    (as a writer killed before it saved it leaves them): "small" is searched row by row,
    "graph" through an hnswlib graph."""
    trees = {}
    for size, count in (("small", len(TEXTS)), ("graph", GRAPH_INFOS)):
        directory = tmp_path_factory.mktemp(size) / "tree"
        rng = random.Random(size)
        with open_tree(directory) as tree:
            cats = tree.create_keyword("Cats", ROOT_ID)
            for i in range(count):
                text = TEXTS[i] if size == "small" else f"{' '.join(rng.sample(WORDS, 4))} {i}"
                tree.create_info(text, keyword_ids=[cats.id] if "cats" in text else [])
        for saved in (directory / "cache" / "vectors").rglob("hnsw.*"):
            saved.unlink()  # the writer saved its graph on close
        trees[size] = directory
    return trees


def vector_views(tree: KeywordTree) -> dict[tuple[str, str], tuple[list, list[float]]]:
    return {(query, mode): recall_view(tree, query, mode) for query in QUERIES for mode in ("vector", "hybrid")}


def assert_same_views(tree: KeywordTree, expected: dict[tuple[str, str], tuple[list, list[float]]]) -> None:
    for (query, mode), (exact, floats) in expected.items():
        assert recall_view(tree, query, mode) == (exact, pytest.approx(floats, abs=1e-6)), (query, mode)


@pytest.mark.parametrize("size", ["small", "graph"])
@pytest.mark.parametrize("view", ["read_only", "as_of"])
def test_read_only_vector_recall_finds_what_a_writer_finds_and_writes_nothing(
        vector_trees: dict[str, Path], base: Path, size: str, view: str) -> None:
    directory = shutil.copytree(vector_trees[size], base / "tree")
    no_lock_files(directory)
    with open_tree(copy_tree_dir(directory, base / "writer")) as writer:
        expected = vector_views(writer)
        last = writer.last_op_id
    assert any(vector_rank is not None for exact, _ in expected.values() for _, _, vector_rank, _ in exact)
    before = dir_bytes(directory)
    with KeywordTree(directory, **view_options(view, last)) as reader:
        assert_same_views(reader, expected)
        stats = reader._caches.vectors.store.stats()  # (private: nothing public tells how it searched)
        assert stats.rows > 0 and stats.persisted_rows == 0
        assert stats.indexed_rows == (stats.rows if size == "graph" else 0)  # the graph, in memory only
        assert reader.wait_indexed(LIMIT)  # nothing queued, and nothing it would queue or embed
    assert dir_bytes(directory) == before


@pytest.mark.parametrize("damage", ["no vector cache", "meta.json garbage", "meta.json deleted"])
@pytest.mark.parametrize("view", ["read_only", "as_of"])
def test_a_read_only_tree_searches_a_missing_or_damaged_vector_cache_as_empty_and_leaves_it(
        vector_trees: dict[str, Path], base: Path, damage: str, view: str,
        caplog: pytest.LogCaptureFixture) -> None:
    directory = shutil.copytree(vector_trees["small"], base / "tree")
    no_lock_files(directory)
    if damage == "no vector cache":
        drop(directory, "vectors")
    elif damage == "meta.json garbage":
        (_vector_store(directory) / "meta.json").write_bytes(b"{nope")
    else:
        (_vector_store(directory) / "meta.json").unlink()
    reference = copy_tree_dir(directory, base / "writer")
    drop(reference, "vectors")  # a writer with no vectors (worker=False: it embeds none at open)
    with open_tree(reference) as writer:
        expected = vector_views(writer)
        last = writer.last_op_id
    before = dir_bytes(directory)
    caplog.set_level(logging.WARNING, logger="kwtree.cache")
    with KeywordTree(directory, **view_options(view, last)) as reader:
        assert_same_views(reader, expected)  # hybrid: the full text (and keywords) alone
        for query in QUERIES:
            assert all(hit.vector is None for hit in reader.recall(query, k=20, mode="vector"))
        assert reader.wait_indexed(LIMIT)
    assert dir_bytes(directory) == before
    if damage != "no vector cache":
        assert "searching the store as empty" in caplog.text


@pytest.mark.parametrize("view", ["read_only", "as_of"])
def test_a_read_only_tree_queues_and_embeds_nothing_but_sees_what_a_worker_embeds(base: Path, view: str) -> None:
    directory = base / "tree"
    with KeywordTree(directory, durability="none", worker=False) as tree:  # close() queues the work
        infos = [tree.create_info(text) for text in DISTINCT]
        last = tree.last_op_id
    no_lock_files(directory)
    before = dir_bytes(directory)
    with KeywordTree(directory, **view_options(view, last)) as reader:
        assert reader.outbox_status()["pending"] == len(DISTINCT)
        assert not reader.wait_indexed(0)  # it drains nothing itself
        with pytest.raises(ReadOnlyError):
            reader.retry_dead()
        assert embedded_ids(reader) == set()
        assert dir_bytes(directory) == before  # no repair scan, no embedding, no lock file
        serve_outbox(directory, HashEmbedder(), once=True)  # as `kwtree worker` in another process
        assert reader.wait_indexed(LIMIT)
        assert embedded_ids(reader) == {info.id for info in infos}
        for info in infos:
            check_hits(reader, info.content, reader.recall(info.content, k=20, mode="hybrid"))
