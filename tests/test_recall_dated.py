"""A query that names a date lifts the memories that happened then (kwtree.retrieval.dated)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from kwtree import CommitOptions, KeywordTree
from kwtree.retrieval.dated import DATE_BONUS, lift, named_window


def day(year: int, month: int, number: int) -> float:
    return datetime(year, month, number, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("query", ["What did Ann watch on 1 May, 2022?", "on May 1st 2022", "the 1st of May 2022",
                                   "on 2022-05-01?", "on 1 may 2022"])
def test_a_calendar_date_names_that_day_widened_by_a_day_each_side(query: str) -> None:
    assert named_window(query) == (day(2022, 4, 30), day(2022, 5, 3) - 1e-3)


@pytest.mark.parametrize(("query", "start", "end"), [
    ("Where did Ann travel in July 2022?", day(2022, 7, 1), day(2022, 8, 1)),
    ("in the beginning of Dec. 2022", day(2022, 12, 1), day(2023, 1, 1)),
    ("what happened in Feb, 2024", day(2024, 2, 1), day(2024, 3, 1)),
])
def test_a_month_with_its_year_names_that_month(query: str, start: float, end: float) -> None:
    assert named_window(query) == (start, end - 1e-3)


@pytest.mark.parametrize("query", ["Which spot did Ann visit in May?", "I may 2022 be wrong", "room 2022",
                                   "When did Ann go camping?", "on 2022-13-45"])
def test_a_query_without_a_full_date_names_no_window(query: str) -> None:
    assert named_window(query) is None


def _commit(tree: KeywordTree, text: str, session: str, when: float) -> None:
    tree.commit_session([{"role": "Ann", "content": text}], session_id=session, scope="user:ann",
                        options=CommitOptions(session_time=when))


def test_recall_ranks_what_happened_in_the_named_month_first(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "t", durability="none") as tree:
        _commit(tree, "We went hiking in the hills with the dog, a long hiking day.", "s1", day(2022, 3, 5))
        _commit(tree, "We went hiking again.", "s2", day(2022, 7, 9))
        tree.wait_indexed()
        plain = tree.recall("Where did Ann go hiking?", k=5, scope="user:ann", min_score=0)
        assert "long hiking day" in plain[0].info.content
        dated = tree.recall("Where did Ann go hiking in July 2022?", k=5, scope="user:ann", min_score=0)
        assert dated[0].info.content == "We went hiking again."
        assert [hit.score for hit in dated] == sorted((hit.score for hit in dated), reverse=True)
        # a window the caller gives is the only one: the query's date then lifts nothing
        narrowed = tree.recall("Where did Ann go hiking in July 2022?", k=5, scope="user:ann", min_score=0,
                               since="2022-03-01", until="2022-03-31")
        assert narrowed and all("again" not in hit.info.content for hit in narrowed)


def test_a_date_nothing_happened_on_changes_nothing(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "t", durability="none") as tree:
        for text in ("Ann adopted a puppy named Rex.", "Ann bought a red kite.", "Ann painted the puppy."):
            tree.create_info(text)
        tree.wait_indexed()
        plain = tree.recall("What did Ann do with the puppy?", k=5, min_score=0)
        dated = tree.recall("What did Ann do with the puppy on 3 March 2019?", k=5, min_score=0)
        assert [hit.info.id for hit in dated] == [hit.info.id for hit in plain]


def test_lift_raises_the_dated_hits_and_keeps_the_best_k(tmp_path: Path) -> None:
    # No embedding worker: with some texts embedded and some not, the scores would spread
    # by more than the bonus depending on how far the worker got.
    with KeywordTree(tmp_path / "t", durability="none", worker=False) as tree:
        for text in ("alpha one", "alpha two", "alpha three"):
            tree.create_info(text)
        hits = tree.recall("alpha", k=3, min_score=0)
        assert len(hits) == 3
        last = hits[-1]
        merged = lift(hits[:2], [last], 2)
        assert merged[0].info.id == last.info.id and merged[0].score == pytest.approx(last.score + DATE_BONUS)
        assert [hit.info.id for hit in merged] == [last.info.id, hits[0].info.id]
        assert hits[-1].score == last.score  # the caller's hit is not changed
