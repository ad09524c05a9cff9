"""The cache of query vectors (``kwtree.caches.query_vectors``): a question asked again is not
embedded again.

Through the public API, real directories and the real vector store with a HashEmbedder subclass
that counts the queries it is given (``embed_query``, which ``embed_queries`` prefers): a
repeated query, another query, both recall modes that embed, a switch of embedder, a forget.
Then the cache itself, driven with real embedders: the key (spec, or the object), the clipped
text, the LRU bound, read-only vectors, and threads. No mocks, no sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from kwtree import KeywordTree
from kwtree.caches.embed import EMBED_MAX_CHARS, HashEmbedder, embed_queries
from kwtree.caches.query_vectors import QUERY_CACHE_SIZE, QueryVectors

CATS = "Cats purr when they are content and sleep most of the afternoon"
BREAD = "Sourdough bread needs a lively starter and a long proof"


class CountingEmbedder(HashEmbedder):
    """The hash embedder, recording every query text it embeds (documents go to ``embed``)."""

    def __init__(self, dim: int = 512) -> None:
        super().__init__(dim)
        self.queries: list[str] = []
        self._counting = threading.Lock()

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        with self._counting:
            self.queries.extend(texts)
        return self.embed(texts)


class CustomEmbedder(CountingEmbedder):
    """A counting embedder no spec builds (it renames its model): keyed by the object."""

    def __init__(self, salt: str) -> None:
        super().__init__()
        self.model = "custom-test"  # the same model name for every salt: only the object tells them apart
        self._salt = salt

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed_query([f"{self._salt} {text}" for text in texts])


def open_tree(tree_dir: Path, embedder: HashEmbedder) -> KeywordTree:
    """A tree that embeds each text as it is written, holding the two texts."""
    tree = KeywordTree(tree_dir, durability="none", worker=False, embed_async=False, embedder=embedder)
    if not tree.recall("cats", mode="bm25", min_score=0):
        tree.create_info(CATS)
        tree.create_info(BREAD)
    return tree


# --- through recall ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_a_repeated_query_is_embedded_once(tree_dir: Path, mode: str) -> None:
    embedder = CountingEmbedder()
    with open_tree(tree_dir, embedder) as tree:
        first = tree.recall("a purring cat", mode=mode, min_score=0)
        again = tree.recall("a purring cat", mode=mode, min_score=0)
    assert embedder.queries == ["a purring cat"]
    assert [(hit.info.id, hit.score) for hit in again] == [(hit.info.id, hit.score) for hit in first]
    assert first[0].info.content == CATS


def test_each_new_query_is_embedded_and_a_repeat_of_either_is_not(tree_dir: Path) -> None:
    embedder = CountingEmbedder()
    with open_tree(tree_dir, embedder) as tree:
        for query in ("a purring cat", "baking bread", "a purring cat", "baking bread", "a purring cat "):
            tree.recall(query, mode="vector", min_score=0)
    # (A trailing space is another text: the key is the exact query the embedder would be given.)
    assert embedder.queries == ["a purring cat", "baking bread", "a purring cat "]


def test_bm25_recall_embeds_no_query(tree_dir: Path) -> None:
    embedder = CountingEmbedder()
    with open_tree(tree_dir, embedder) as tree:
        tree.recall("a purring cat", mode="bm25", min_score=0)
    assert embedder.queries == []


@pytest.mark.parametrize("dim", [512, 256], ids=["same-model", "another-model"])
def test_a_tree_opened_with_another_embedder_embeds_its_queries_with_that_one(tree_dir: Path, dim: int) -> None:
    before, after = CountingEmbedder(), CountingEmbedder(dim)
    with open_tree(tree_dir, before) as tree:
        tree.recall("a purring cat", mode="vector", min_score=0)
    with open_tree(tree_dir, after) as tree:
        tree.wait_indexed(30.0)  # another model: its vectors are made anew
        hits = tree.recall("a purring cat", mode="vector", min_score=0)
        assert tree.embedder is after
    assert before.queries == ["a purring cat"]
    assert after.queries == ["a purring cat"]
    assert hits[0].info.content == CATS


def test_forget_empties_the_cache(tree_dir: Path) -> None:
    embedder = CountingEmbedder()
    with open_tree(tree_dir, embedder) as tree:
        bread = tree.recall("baking bread", mode="vector", min_score=0)[0].info
        assert bread.content == BREAD
        tree.forget(bread.id)
        hits = tree.recall("baking bread", mode="vector", min_score=0)
    # The query may have quoted the forgotten text: its vector is not kept past the forget.
    assert embedder.queries == ["baking bread", "baking bread"]
    assert BREAD not in [hit.info.content for hit in hits]


# --- the cache itself -------------------------------------------------------------------------


def test_the_vector_is_the_one_embed_queries_gives() -> None:
    cache, embedder = QueryVectors(), HashEmbedder()
    for query in ("a purring cat", "", "我喜欢狗"):
        assert cache.vector(embedder, query).tobytes() == embed_queries(embedder, [query])[0].tobytes()
        assert cache.vector(embedder, query).tobytes() == embed_queries(embedder, [query])[0].tobytes()
    assert len(cache) == 3


def test_embedders_no_spec_builds_are_told_apart_by_the_object() -> None:
    cache, one, other = QueryVectors(), CustomEmbedder("zebra"), CustomEmbedder("walrus")
    assert one.model == other.model
    first = cache.vector(one, "a purring cat")
    second = cache.vector(other, "a purring cat")
    assert first.tobytes() != second.tobytes()
    assert cache.vector(one, "a purring cat").tobytes() == first.tobytes()
    assert (one.queries, other.queries) == (["zebra a purring cat"], ["walrus a purring cat"])


def test_built_in_embedders_are_told_apart_by_their_spec_and_model() -> None:
    cache, wide, narrow = QueryVectors(), CountingEmbedder(), CountingEmbedder(256)
    assert cache.vector(wide, "a purring cat").shape == (512,)
    assert cache.vector(narrow, "a purring cat").shape == (256,)
    # Another object of the same spec makes the same vectors (the model names them): it is served.
    twin = CountingEmbedder()
    assert cache.vector(twin, "a purring cat").tobytes() == cache.vector(wide, "a purring cat").tobytes()
    assert (wide.queries, narrow.queries, twin.queries) == (["a purring cat"], ["a purring cat"], [])


def test_queries_equal_up_to_the_clip_share_one_vector() -> None:
    cache, embedder = QueryVectors(), CountingEmbedder()
    long = "cat " * (EMBED_MAX_CHARS // 4)
    cache.vector(embedder, long + "one")
    cache.vector(embedder, long + "two")
    assert embedder.queries == [long[:EMBED_MAX_CHARS]]


def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    assert QUERY_CACHE_SIZE == 1024
    cache, embedder = QueryVectors(size=3), CountingEmbedder()
    for query in ("a", "b", "c", "a", "d"):  # "a" was used again: "b" is the least recent
        cache.vector(embedder, query)
    assert len(cache) == 3
    cache.vector(embedder, "a")
    cache.vector(embedder, "b")
    assert embedder.queries == ["a", "b", "c", "d", "b"]
    with pytest.raises(ValueError, match="size"):
        QueryVectors(size=0)


def test_a_caller_cannot_change_a_cached_vector() -> None:
    cache, embedder = QueryVectors(), HashEmbedder()
    vector = cache.vector(embedder, "a purring cat")
    expected = vector.tobytes()
    with pytest.raises(ValueError, match="read-only"):
        vector[0] = 42.0
    with pytest.raises(ValueError, match="WRITEABLE"):
        vector.flags.writeable = True
    with pytest.raises(ValueError, match="read-only"):
        vector /= 2
    assert cache.vector(embedder, "a purring cat").tobytes() == expected


def test_clear_drops_every_vector() -> None:
    cache, embedder = QueryVectors(), CountingEmbedder()
    cache.vector(embedder, "a purring cat")
    cache.clear()
    assert len(cache) == 0
    cache.vector(embedder, "a purring cat")
    assert embedder.queries == ["a purring cat", "a purring cat"]


def test_threads_sharing_a_small_cache_each_get_their_query_s_vector() -> None:
    cache, embedder = QueryVectors(size=8), CountingEmbedder(64)
    queries = [f"question number {n}" for n in range(40)]
    expected = {query: embed_queries(HashEmbedder(64), [query])[0].tobytes() for query in queries}
    wrong: list[str] = []
    errors: list[BaseException] = []

    def ask(offset: int) -> None:
        try:
            for n in range(300):
                query = queries[(offset * 7 + n) % len(queries)]
                if cache.vector(embedder, query).tobytes() != expected[query]:
                    wrong.append(query)
        except BaseException as exc:  # noqa: BLE001 -- reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(offset,)) for offset in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (errors, wrong) == ([], [])
    assert len(cache) <= 8
