"""When a fact happened: message times and the time a sentence states, against the
conversation's date (kwtree.memory.when)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kwtree.errors import InvalidInputError
from kwtree.memory.when import DAY, message_time, parse_time, resolve_when

# 1:56 pm on Monday 8 May 2023 (UTC): the first LoCoMo session's date.
ANCHOR = datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def day_of(epoch: float | None) -> date:
    assert epoch is not None
    moment = datetime.fromtimestamp(epoch, UTC)
    assert (moment.hour, moment.minute, moment.second) == (0, 0, 0), "a resolved time is the start of a day"
    return moment.date()


anchors = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2090, 12, 31)).map(
    lambda moment: moment.replace(tzinfo=UTC).timestamp())


# --- message times ---------------------------------------------------------------------------

@pytest.mark.parametrize(("ts", "expected"), [
    (1683554160, 1683554160.0),
    (1683554160.5, 1683554160.5),
    ("2023-05-08", datetime(2023, 5, 8, tzinfo=UTC).timestamp()),
    ("2023-05-08T13:56:00", datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()),
    ("2023-05-08T13:56:00Z", datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()),
    ("2023-05-08T13:56:00+02:00", datetime(2023, 5, 8, 11, 56, tzinfo=UTC).timestamp()),
    ("1:56 pm on 8 May, 2023", ANCHOR),
    ("12:05 am on 1 January, 2024", datetime(2024, 1, 1, 0, 5, tzinfo=UTC).timestamp()),
    ("12:30 pm on 1 January, 2024", datetime(2024, 1, 1, 12, 30, tzinfo=UTC).timestamp()),
])
def test_message_time_reads_epoch_iso_and_locomo_dates(ts: object, expected: float) -> None:
    assert message_time({"role": "user", "content": "hi", "ts": ts}) == expected


def test_message_time_is_none_without_ts() -> None:
    assert message_time({"role": "user", "content": "hi"}) is None
    assert message_time({"role": "user", "content": "hi", "ts": None}) is None


@pytest.mark.parametrize("ts", ["yesterday", "2023-13-45", True, float("nan"), float("inf"), [2023], "",
                                "25:00 pm on 8 May, 2023", "1:56 pm on 31 February, 2023"])
def test_a_bad_ts_names_the_field(ts: object) -> None:
    with pytest.raises(InvalidInputError, match=r"messages\[3\]\.ts"):
        message_time({"role": "user", "content": "hi", "ts": ts}, "messages[3].ts")
    with pytest.raises(InvalidInputError, match="session_time"):
        parse_time(ts, "session_time")


# --- explicit dates ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("We married on 8 May 2023.", date(2023, 5, 8)),
    ("It was the 8th of May, 2023", date(2023, 5, 8)),
    ("On May 8, 2023 we moved", date(2023, 5, 8)),
    ("On May 8th 2023 we moved", date(2023, 5, 8)),
    ("the release was 2023-05-08", date(2023, 5, 8)),
    ("It opened on 3 March", date(2023, 3, 3)),  # no year: the anchor's year
    ("I moved there in May 2022.", date(2022, 5, 1)),
    ("Since March, 2021 I run.", date(2021, 3, 1)),
    ("I graduated in 2019", date(2019, 1, 1)),
    ("in the summer of 2019", date(2019, 1, 1)),
    ("I started in March", date(2023, 3, 1)),  # the latest March on or before the anchor
    ("We met in June", date(2022, 6, 1)),  # June is after May: last year's
    ("since mid-March", date(2023, 3, 1)),
])
def test_explicit_dates(text: str, expected: date) -> None:
    assert day_of(resolve_when(text, ANCHOR)) == expected


def test_explicit_dates_with_a_year_need_no_anchor() -> None:
    assert day_of(resolve_when("on 8 May 2023", None)) == date(2023, 5, 8)
    assert day_of(resolve_when("in 2019", None)) == date(2019, 1, 1)
    assert resolve_when("on 8 May", None) is None
    assert resolve_when("yesterday", None) is None
    assert resolve_when("last Friday", None) is None


# --- relative dates (anchor: Monday 8 May 2023) ---------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("I went to a support group yesterday", date(2023, 5, 7)),
    ("I did it today", date(2023, 5, 8)),
    ("I had a dream last night", date(2023, 5, 7)),
    ("the day before yesterday", date(2023, 5, 6)),
    ("I'll call tomorrow", date(2023, 5, 9)),
    ("I ran a race last week", date(2023, 5, 1)),
    ("last month I quit", date(2023, 4, 1)),
    ("last year I painted it", date(2022, 1, 1)),
    ("next month", date(2023, 6, 1)),
    ("next year", date(2024, 1, 1)),
    ("I went hiking last Friday", date(2023, 5, 5)),
    ("last Monday", date(2023, 5, 1)),  # the anchor is a Monday: a week before
    ("on Friday I baked", date(2023, 5, 5)),
    ("on Monday", date(2023, 5, 8)),  # the most recent Monday is the anchor's day
    ("see my moves next Fri?", date(2023, 5, 19)),
    ("this Friday", date(2023, 5, 12)),
    ("3 days ago", date(2023, 5, 5)),
    ("two weeks ago", date(2023, 4, 24)),
    ("a few days ago", date(2023, 5, 5)),
    ("a couple of months ago", date(2023, 3, 8)),
    ("a year ago", date(2022, 5, 8)),
    ("this weekend", date(2023, 5, 6)),  # said on a Monday: the weekend just past
    ("over the weekend", date(2023, 5, 6)),
    ("last weekend", date(2023, 4, 29)),
    ("next weekend", date(2023, 5, 13)),
])
def test_relative_dates_resolve_against_the_anchor(text: str, expected: date) -> None:
    assert day_of(resolve_when(text, ANCHOR)) == expected


@pytest.mark.parametrize("text", [
    "I love painting.", "This may be hard.", "I may go.", "We march on.", "Fridays are fun.",
    "I sat down in the Sun.", "It costs 2023 dollars.", "I ran 400 miles", "See you later",
    "recently I started", "", "400 years ago", "Call me at 3 pm",
])
def test_no_time_stated_gives_none(text: str) -> None:
    assert resolve_when(text, ANCHOR) is None


def test_the_leftmost_expression_wins() -> None:
    assert day_of(resolve_when("Yesterday I booked the trip for 8 May 2024", ANCHOR)) == date(2023, 5, 7)
    assert day_of(resolve_when("On 8 May 2024, as I said yesterday", ANCHOR)) == date(2024, 5, 8)


def test_month_arithmetic_clamps_the_day() -> None:
    march_31 = datetime(2023, 3, 31, 9, tzinfo=UTC).timestamp()
    assert day_of(resolve_when("a month ago", march_31)) == date(2023, 2, 28)
    assert day_of(resolve_when("a year ago", datetime(2024, 2, 29, tzinfo=UTC).timestamp())) == date(2023, 2, 28)


@pytest.mark.parametrize("anchor", ["2023-05-08", float("nan"), True, [1]])
def test_a_bad_anchor_or_text_is_refused(anchor: object) -> None:
    with pytest.raises(InvalidInputError, match="anchor"):
        resolve_when("yesterday", anchor)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="text"):
        resolve_when(b"yesterday", ANCHOR)  # type: ignore[arg-type]


# --- properties: every anchor, never the clock ------------------------------------------------------

NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
                9: "nine", 10: "ten", 11: "eleven", 12: "twelve"}


@settings(max_examples=200, deadline=None)
@given(anchor=anchors, count=st.integers(min_value=1, max_value=100), words=st.booleans())
def test_n_days_ago_is_the_anchors_day_minus_n(anchor: float, count: int, words: bool) -> None:
    spelled = NUMBER_WORDS[count] if words and count in NUMBER_WORDS else str(count)
    today = datetime.fromtimestamp(anchor, UTC).date()
    assert day_of(resolve_when(f"I saw her {spelled} days ago.", anchor)) == today - timedelta(days=count)
    assert day_of(resolve_when(f"{spelled} weeks ago", anchor)) == today - timedelta(days=7 * count)


@settings(max_examples=200, deadline=None)
@given(anchor=anchors, weekday=st.sampled_from(WEEKDAYS))
def test_last_weekday_is_that_weekday_within_the_7_days_before(anchor: float, weekday: str) -> None:
    today = datetime.fromtimestamp(anchor, UTC).date()
    last = day_of(resolve_when(f"I went hiking last {weekday}.", anchor))
    assert WEEKDAYS[last.weekday()] == weekday
    assert 1 <= (today - last).days <= 7
    on = day_of(resolve_when(f"on {weekday} I went hiking", anchor))
    assert WEEKDAYS[on.weekday()] == weekday
    assert 0 <= (today - on).days <= 6


@settings(max_examples=200, deadline=None)
@given(anchor=anchors)
def test_yesterday_and_weekends_follow_the_anchor(anchor: float) -> None:
    today = datetime.fromtimestamp(anchor, UTC).date()
    assert day_of(resolve_when("yesterday", anchor)) == today - timedelta(days=1)
    weekend = day_of(resolve_when("this weekend", anchor))
    assert weekend.weekday() == 5 and abs((weekend - today).days) <= 4
    assert day_of(resolve_when("last weekend", anchor)) == weekend - timedelta(days=7)
    last_month = day_of(resolve_when("last month", anchor))
    assert last_month.day == 1 and (last_month.year * 12 + last_month.month) == today.year * 12 + today.month - 1


@settings(max_examples=100, deadline=None)
@given(anchor=anchors, shift=st.integers(min_value=-40, max_value=40))
def test_no_result_depends_on_the_wall_clock(anchor: float, shift: int) -> None:
    """Moving the anchor by N days moves every day-based answer by exactly N days, whatever the
    anchor (1990 to 2090): the answers follow the anchor, so the clock plays no part."""
    texts = ("yesterday", "3 days ago", "two weeks ago", "last week", "today", "tomorrow")
    moved = anchor + shift * DAY
    for text in texts:
        first, second = resolve_when(text, anchor), resolve_when(text, moved)
        assert first is not None and second is not None
        assert second - first == shift * DAY
    # Far from now: a 1990s anchor resolves into the 1990s, not near today.
    old = datetime(1995, 6, 15, tzinfo=UTC).timestamp()
    assert day_of(resolve_when("last Friday", old)).year == 1995
