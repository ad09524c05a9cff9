"""Time in reads: recall(since=, until=) on when a memory happened, context printing it."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from kwtree import KeywordTree
from kwtree.errors import InvalidInputError
from kwtree.memory_schema import HAPPENED_AT
from kwtree.models import ROOT_ID

MAY_1 = datetime(2023, 5, 1, 9, 0, tzinfo=UTC).timestamp()
MAY_8 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()
JUNE_20 = datetime(2023, 6, 20, 18, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def diary(tree_dir: Path):
    tree = KeywordTree(tree_dir, durability="none", worker=False, embed_async=False)
    hikes = tree.create_keyword("Hiking", ROOT_ID)
    made = {}
    for name, when in (("may1", MAY_1), ("may8", MAY_8), ("june20", JUNE_20)):
        made[name] = tree.create_info(f"Went hiking on the ridge trail ({name})", keyword_ids=[hikes.id],
                                      metadata={HAPPENED_AT: when})
    made["undated"] = tree.create_info("Went hiking on the ridge trail (undated)", keyword_ids=[hikes.id])
    made["bad"] = tree.create_info("Went hiking on the ridge trail (bad date)", keyword_ids=[hikes.id],
                                   metadata={HAPPENED_AT: "last Friday"})
    yield tree, made
    tree.close()


def found(tree: KeywordTree, **window: object) -> set[str]:
    return {hit.info.content.rsplit("(", 1)[1].rstrip(")") for hit in tree.recall("hiking ridge trail", **window)}


def test_the_key_is_one_name_for_the_pipeline_and_retrieval() -> None:
    # both spell it through kwtree.memory_schema; the stored spelling never changes
    assert HAPPENED_AT == "happened_at"


def test_since_and_until_filter_on_when_it_happened(diary) -> None:
    tree, made = diary
    assert found(tree) == {"may1", "may8", "june20", "undated", "bad date"}
    assert found(tree, since=MAY_8, until=MAY_8) == {"may8"}  # both bounds included
    assert found(tree, until=MAY_8 - 1) == {"may1"}
    assert found(tree, since="2023-05-02", until="2023-06-01") == {"may8"}
    assert found(tree, since=date(2023, 6, 1), until=datetime(2023, 6, 30, tzinfo=UTC)) == {"june20"}
    assert found(tree, until="2023-05-08") == {"may1", "may8"}  # a date alone is its whole day
    assert found(tree, since="2023-05-08T14:00:00+00:00", until="2023-12-31") == {"june20"}
    assert found(tree, since="2023-05-08T13:56:00") == {"june20", "may8", "undated", "bad date"}  # no zone: UTC


def test_an_info_without_a_usable_happened_at_falls_back_to_created_at(diary) -> None:
    tree, made = diary
    recorded = made["undated"].created_at
    assert made["bad"].created_at >= recorded
    assert {"undated", "bad date"} <= found(tree, since=recorded)
    assert "undated" not in found(tree, until=recorded - 1)
    assert "undated" not in found(tree, since=MAY_1, until=JUNE_20)


@pytest.mark.parametrize(("field", "bad"), [
    ("since", "yesterday"), ("since", "2023-13-01"), ("until", True), ("until", math.nan),
    ("since", [2023]), ("until", "2023-05-08T25:00"), ("since", -math.inf),
])
def test_a_bad_time_is_refused_naming_its_field(diary, field: str, bad: object) -> None:
    tree, _ = diary
    before = tree.history()
    with pytest.raises(InvalidInputError, match=field):
        tree.recall("hiking", **{field: bad})
    with pytest.raises(InvalidInputError, match=field):
        tree.context("hiking", **{field: bad})
    assert tree.history() == before


def test_since_after_until_is_refused(diary) -> None:
    tree, _ = diary
    with pytest.raises(InvalidInputError, match=r"since .* is after until"):
        tree.recall("hiking", since="2023-06-01", until="2023-05-01")


def test_context_prints_the_date_a_memory_happened(diary) -> None:
    tree, made = diary
    text = tree.context("hiking ridge trail")
    lines = text.splitlines()
    assert '- [api, 2023-05-08] "Went hiking on the ridge trail (may8)"' in lines
    assert '- [api, 2023-06-20] "Went hiking on the ridge trail (june20)"' in lines
    for name, tail in (("undated", "undated"), ("bad", "bad date")):  # no happened_at: the day it was stored
        stored = datetime.fromtimestamp(made[name].created_at, UTC).date().isoformat()
        assert f'- [api, {stored}] "Went hiking on the ridge trail ({tail})"' in lines
    later = tree.context("hiking ridge trail", since="2023-06-01")  # june20, and the two recorded today
    assert later.count("- [") == 3 and "(june20)" in later and "(may8)" not in later and "(may1)" not in later
