"""The relevance floor: recall returns nothing, and context empty text, when nothing stored is
about the query, however well the unrelated memories rank against each other."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kwtree import KeywordTree
from kwtree.errors import InvalidInputError
from kwtree.models import ROOT_ID
from kwtree.retrieval.relevance import MIN_SCORE

STUDIO = "Mara founded Pixel Forge, a small game studio in Lyon that makes cosy puzzle games for consoles."


@pytest.fixture
def studio(tree_dir: Path):
    tree = KeywordTree(tree_dir, durability="none", worker=False, embed_async=False)
    work = tree.create_keyword("Work", ROOT_ID)
    tree.create_info(STUDIO, keyword_ids=[work.id])
    tree.create_info("The studio ships its next puzzle game in the spring", keyword_ids=[work.id])
    yield tree
    tree.close()


def test_the_capital_of_france_finds_nothing_in_a_memory_about_a_game_studio(studio: KeywordTree) -> None:
    # The case: without a floor the rank-based score calls the studio very relevant.
    unfloored = studio.recall("What is the capital of France?", min_score=0)
    assert unfloored and unfloored[0].score > 0.5
    assert unfloored[0].relevance == 0.0
    assert studio.recall("What is the capital of France?") == []
    assert studio.context("What is the capital of France?") == ""
    for mode in ("bm25", "vector", "hybrid"):
        assert studio.recall("What is the capital of France?", mode=mode) == []


def test_a_question_about_the_memory_passes_the_floor(studio: KeywordTree) -> None:
    [first, *_] = studio.recall("Which game studio did Mara found?")
    assert first.info.content == STUDIO and first.relevance == 1.0
    assert "Pixel Forge" in studio.context("Which game studio did Mara found?")


def test_a_name_the_memory_never_saw_outweighs_the_words_it_shares(studio: KeywordTree) -> None:
    # "studio" is in the memory; "Jonas" is not, and a question is about whom it names.
    assert studio.recall("What does Jonas think about the studio?") == []
    assert studio.recall("What does Jonas think about the studio?", min_score=0)
    assert studio.recall("What does Mara think about the studio?")
    # Lower-case, the same word is a plain term: it weighs less, and the shared words carry it.
    [jonas] = {hit.relevance for hit in studio.recall("What does Jonas think about the studio?", min_score=0)
               if hit.info.content == STUDIO}
    [plain] = {hit.relevance for hit in studio.recall("what does jonas think about the studio?", min_score=0)
               if hit.info.content == STUDIO}
    assert jonas < plain


def test_min_score_zero_is_no_floor(studio: KeywordTree) -> None:
    assert studio.recall("capital France weather", min_score=0)
    assert all(0.0 <= hit.relevance <= 1.0 for hit in studio.recall("puzzle games Lyon", min_score=0))


def test_the_floor_decides_whether_there_is_an_answer_half_of_it_what_comes_with_it(tree: KeywordTree) -> None:
    mem = tree
    full = mem.create_info("Mara founded Pixel Forge in Lyon")
    part = mem.create_info("The studio was founded in a hurry")
    mem.create_info("Sourdough bread needs a lively starter")
    query = "When did Mara found Pixel Forge in Lyon?"
    scored = {hit.info.id: hit.relevance for hit in mem.recall(query, min_score=0, mode="bm25")}
    assert scored[full.id] == 1.0 and 0 < scored[part.id] < 1.0
    other = scored[part.id]
    assert {hit.info.id for hit in mem.recall(query, min_score=2 * other, mode="bm25")} == {full.id, part.id}
    assert [hit.info.id for hit in mem.recall(query, min_score=min(1.0, 2 * other + 0.01), mode="bm25")] == [full.id]
    # Without the info that answers, what covers part of the query is no answer on its own.
    mem.delete_info(full.id)
    [alone] = [hit.relevance for hit in mem.recall(query, min_score=0, mode="bm25") if hit.info.id == part.id]
    other = alone  # the weights changed with the corpus
    assert [hit.info.id for hit in mem.recall(query, min_score=other, mode="bm25")] == [part.id]
    assert mem.recall(query, min_score=other + 0.01, mode="bm25") == []


def test_a_long_query_about_several_topics_still_recalls_each(studio: KeywordTree) -> None:
    studio.create_info("Sourdough bread needs a lively starter and a long proof")
    query = f"{STUDIO} Sourdough bread needs a lively starter and a long proof"
    assert len(studio.recall(query)) == 3  # each info covers a few of the query's rare terms


def test_a_query_of_stop_words_only_cannot_be_judged(studio: KeywordTree) -> None:
    hits = studio.recall("what is it", min_score=0.9)
    assert all(hit.relevance == 1.0 for hit in hits)


def test_the_default_floor_is_the_documented_one(studio: KeywordTree) -> None:
    assert 0 < MIN_SCORE < 1
    assert str(MIN_SCORE) in (Path(__file__).resolve().parents[1] / "docs" / "retrieval.md").read_text()


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf, "0.4", True, None])
def test_a_bad_floor_is_refused_naming_min_score(studio: KeywordTree, bad: object) -> None:
    before = studio.history()
    with pytest.raises(InvalidInputError, match="min_score"):
        studio.recall("game studio", min_score=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="min_score"):
        studio.context("game studio", min_score=bad)  # type: ignore[arg-type]
    assert studio.history() == before
