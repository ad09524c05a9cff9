"""The cost of a long text is bounded (issue 13, item 9): the embedder is given at most
``EMBED_MAX_CHARS`` of it, and no word is long enough to make indexing slow."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kwtree import KeywordTree, Limits
from kwtree.caches.embed import EMBED_MAX_CHARS, HashEmbedder
from kwtree.normalize import terms

DEFAULT = Limits()


class RecordingEmbedder:
    """The default embedder, keeping the length of every text it is given."""

    def __init__(self) -> None:
        self._inner = HashEmbedder(64)
        self.model, self.dim = self._inner.model, self._inner.dim
        self.lengths: list[int] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.lengths.extend(len(text) for text in texts)
        return self._inner.embed(texts)


def test_the_embedder_is_given_at_most_embed_max_chars_of_a_text_at_the_content_limit(tmp_path):
    # Before: the whole text went to the embedder (50 MB took 45 s and 5 GB of memory).
    embedder = RecordingEmbedder()
    words = " ".join(f"word{i}" for i in range(DEFAULT.content_bytes // 8))
    content = (words + " " + "x" * DEFAULT.content_bytes)[: DEFAULT.content_bytes - len(" zebraquartz")]
    content += " zebraquartz"  # a word only at the very end
    assert len(content.encode()) == DEFAULT.content_bytes
    with KeywordTree(tmp_path / "t", durability="none", worker=False, embedder=embedder) as tree:
        info = tree.create_info(content)
        tree.create_keyword("k" * DEFAULT.name_bytes, description="d" * DEFAULT.description_bytes,
                            llm_auto_place=False)
        assert tree.wait_indexed(timeout=60)
        tree.recall("q" * DEFAULT.query_bytes, mode="vector")
        assert embedder.lengths and max(embedder.lengths) <= EMBED_MAX_CHARS
        assert EMBED_MAX_CHARS in embedder.lengths  # the long texts were cut, not dropped
        # The full text stays searchable by BM25, past what was embedded.
        assert [hit.info.id for hit in tree.recall("zebraquartz", mode="bm25")] == [info.id]
        assert [hit.info.id for hit in tree.recall(content[:200], mode="vector")][:1] == [info.id]


def test_a_text_of_one_long_word_is_indexed_without_stemming_it(tmp_path):
    # Before: the Snowball stemmer took time quadratic in a word's length: a 1 MB word of "y"
    # held the full-text index for minutes. Words longer than any English word are kept whole.
    assert terms("y" * 100) == ["y" * 100]
    assert terms("paintings") == ["paint"]
    with KeywordTree(tmp_path / "t", durability="none", worker=False) as tree:
        tree.create_info("y" * DEFAULT.content_bytes)
        note = tree.create_info("a short note")
        # The search brings the full-text index up to date, the long word included.
        assert [hit.info.id for hit in tree.recall("short note", mode="bm25")] == [note.id]
