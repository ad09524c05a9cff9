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

Directories are real (``tempfile``); trees use durability="none".
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import copy_tree_dir, snapshot
from hypothesis import Phase, given, note, settings
from hypothesis import strategies as st

from kwtree import (
    ROOT_ID,
    CycleError,
    InvalidInputError,
    KeywordTree,
    KwtreeError,
    NotFoundError,
    RelationType,
)
from kwtree.embed import HashEmbedder, embed_queries
from kwtree.indexes import serve_outbox
from kwtree.models import Hit

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


def play(steps: list[tuple], base: Path) -> tuple[History, KeywordTree, KeywordTree]:
    history = History(base / "tree")
    for step in steps:
        note(repr(step))
        history.play(step)
    kept, rebuilt = history.finish(base)
    return history, kept, rebuilt


@given(steps=HISTORY)
def test_reads_search_and_text_matches_are_the_same_after_losing_every_cache(steps: list[tuple]) -> None:
    base = Path(tempfile.mkdtemp(prefix="kwtree-cache-"))
    kept = rebuilt = None
    try:
        history, kept, rebuilt = play(steps, base)
        assert snapshot(rebuilt, history.keyword_ids, history.info_ids) == \
            snapshot(kept, history.keyword_ids, history.info_ids)
        scopes = [ROOT_ID, *history._live(history.keyword_ids, kept.get_keyword)]
        for query in QUERIES:
            assert rebuilt.search(query) == kept.search(query)
            assert text_matches(rebuilt, query) == text_matches(kept, query)
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
    "BUG: invariant 4 does not hold for recall and context; each cause has its own strict xfail "
    "below: BM25 statistics count deleted documents, ties are broken by the index's internal "
    "order, and a fresh open with worker=False never re-embeds lost vectors"))
@settings(phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: the causes are pinned below
@given(steps=HISTORY)
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


@pytest.mark.xfail(strict=True, reason=(
    "BUG: BM25 statistics count deleted documents: an update or delete leaves the old document "
    "in tantivy's document frequencies until a merge (kwtree/stores/fulltext.py upsert/delete "
    "use delete_documents_by_term), so after rewrites the incrementally kept index and a rebuild "
    "give different bm25 scores and even opposite rankings (invariant 4)"))
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


@pytest.mark.parametrize(("name", "damage"), list(_corruption_cases()))
def test_a_corrupt_fulltext_index_is_rebuilt(clean_tree: Path, base: Path, name: str, damage: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="kwtree.cache")
    reference = copy_tree_dir(clean_tree, base / "reference")
    drop(reference, "fulltext")  # the same vectors; the full-text index rebuilt from the log
    with open_tree(reference) as tree:
        views, contexts = full_view(tree)
        expected = [(exact, pytest.approx(floats, abs=1e-6)) for exact, floats in views], contexts
    directory = copy_tree_dir(clean_tree, base / "tree")
    path = _fulltext_file(directory, name)
    if damage == "deleted":
        path.unlink()
    else:
        path.write_bytes(DAMAGE[damage](path.read_bytes()))
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
    caplog.set_level(logging.CRITICAL, logger="kwtree.outbox")
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
