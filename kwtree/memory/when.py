"""When a fact happened: a message's time, and the time a sentence says, read against the
conversation's date (never against the wall clock).

Time zone rule: everything is UTC. A ``ts`` that carries an offset (``2023-05-08T13:56+02:00``)
gives that exact instant; one without (``2023-05-08T13:56``, ``2023-05-08``, LoCoMo's
``1:56 pm on 8 May, 2023``) is read as UTC. Relative expressions count calendar days of the
anchor's UTC date.

What :func:`resolve_when` returns (epoch seconds, always 00:00 UTC of a day; ``D`` is the
anchor's UTC date):

==============================================  =============================================
expression                                      resolves to
==============================================  =============================================
``8 May 2023``, ``May 8th, 2023``, ``2023-05-08``  that day
``8 May``, ``May 8`` (no year)                  that day in D's year
``in May 2022``, ``May 2022``                   the 1st of that month
``in May`` (no year)                            the 1st of the latest May on or before D's month
``in 2019``, ``since 2019``, ``during 2019``    1 January of that year
``today``, ``tonight``, ``this morning`` ...    D
``yesterday``, ``last night``                   D - 1 day
``the day before yesterday``                    D - 2 days
``tomorrow``                                    D + 1 day
``N days / weeks ago``                          D - N days / D - 7·N days
``N months / years ago``                        the same day N calendar months / years before D
                                                (the 31st becomes the month's last day)
``last week`` / ``this week`` / ``next week``   D - 7 days / D / D + 7 days
``last / this / next month``                    the 1st of the previous / D's / the next month
``last / this / next year``                     1 January of the previous / D's / the next year
``last Friday``                                 the latest Friday 1 to 7 days before D
``on Friday``, ``Friday``, ``Fri``            the latest Friday 0 to 6 days before D
``this / next Friday``                          the first Friday 0 to 6 / 7 to 13 days after D
``this weekend``, ``over the weekend``          the Saturday nearest D: Mon-Wed -> the weekend
                                                just past, Thu-Sun -> the weekend of D's week
``last weekend`` / ``next weekend``             that Saturday - 7 days / + 7 days
==============================================  =============================================

``N`` is digits or a number word (``one`` to ``twelve``, ``a``/``an`` = 1, ``a couple of`` = 2,
``a few`` = 3). When a text holds several expressions the first one (leftmost) wins. Relative
expressions need an anchor: with ``anchor=None`` only absolute dates resolve. Not understood
(so ``None``): times of day ("at 3 pm"), hours and minutes ago, ranges ("from May to July"),
seasons, holidays, "recently", "the other day", ordinal weeks ("the first week of May").
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

from kwtree.errors import InvalidInputError
from kwtree.validate import finite_number, shown

__all__ = ["DAY", "message_time", "parse_time", "resolve_when"]

#: Seconds in a day.
DAY = 86_400.0

_MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): number for number, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}  # Monday = 0
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3,
}
#: Larger counts ("400 years ago") are not taken as a time of the fact.
_MAX_AGO = 100

_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
# Abbreviations count when capitalised; "Sat" and "Sun" not at all ("I sat", "the Sun").
_WEEKDAY_ABBREVIATIONS = {"Mon": 0, "Tue": 1, "Tues": 1, "Wed": 2, "Thu": 3, "Thur": 3, "Thurs": 3, "Fri": 4}
_WEEKDAY = (r"(?P<weekday>" + "|".join(_WEEKDAYS) + r"|(?-i:"
            + "|".join(sorted(_WEEKDAY_ABBREVIATIONS, key=len, reverse=True)) + r"))")
# Bare month names ("in May", "May 2022") must be capitalised: "this may be" is no date.
_MONTH_NAME = r"(?-i:(?P<month>" + "|".join(name for name in calendar.month_name if name) + r"))"
_DAYNUM = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_COUNT = r"(?P<count>\d{1,3}|a couple of|a few|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"

# The LoCoMo session date: "1:56 pm on 8 May, 2023".
_LOCOMO = re.compile(
    r"^\s*(?P<hour>\d{1,2}):(?P<minute>\d\d)\s*(?P<half>am|pm)\s+on\s+" + _DAYNUM + r"\s+" + _MONTH + r",?\s+" + _YEAR
    + r"\s*$", re.IGNORECASE)


def parse_time(value: object, field: str = "ts") -> float | None:
    """``value`` as epoch seconds: a number (epoch seconds), an ISO 8601 date or datetime
    (no offset means UTC), or ``"1:56 pm on 8 May, 2023"``; None for None.

    Raises InvalidInputError naming ``field`` for anything else (a bool, NaN, a string none of
    these formats reads)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidInputError(
            f"{field} must be epoch seconds or an ISO 8601 date string, got {type(value).__name__}")
    if not isinstance(value, str):
        seconds = finite_number(value)
        if seconds is None:
            raise InvalidInputError(f"{field} must be a finite number of epoch seconds, got {shown(value)}")
        return seconds
    text = value.strip()
    found = _LOCOMO.match(text)
    if found:
        hour = int(found["hour"]) % 12 + (12 if found["half"].lower() == "pm" else 0)
        day = _day(int(found["year"]), _MONTHS[found["month"].lower()], int(found["day"]))
        if day is not None and int(found["minute"]) < 60 and int(found["hour"]) <= 12:
            return _epoch(day) + hour * 3600 + int(found["minute"]) * 60
    else:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return parsed.timestamp()
    raise InvalidInputError(
        f"{field} {value!r:.60} is not a time: give epoch seconds, an ISO 8601 date or datetime "
        "('2023-05-08', '2023-05-08T13:56:00+02:00'), or '1:56 pm on 8 May, 2023'")


def message_time(message: Mapping[str, Any], field: str = "ts") -> float | None:
    """The message's ``"ts"`` as epoch seconds (see :func:`parse_time`), None when it has none.

    ``field`` names the value in the error a bad ``ts`` raises, so callers pass where the
    message sits (``"messages[3].ts"``). Raises InvalidInputError."""
    return parse_time(message.get("ts"), field)


def resolve_when(text: str, anchor: float | None) -> float | None:
    """The day ``text`` says its fact happened, as epoch seconds (00:00 UTC of that day),
    resolved against ``anchor`` (the conversation's date, epoch seconds); None when the
    text states no time (or only a relative one and there is no anchor). The module
    docstring's table gives what each expression resolves to. Never reads the clock.

    Raises InvalidInputError when ``text`` is not a string or ``anchor`` not a finite number."""
    if not isinstance(text, str):
        raise InvalidInputError(f"text must be a string, got {type(text).__name__}")
    if anchor is not None and finite_number(anchor) is None:
        raise InvalidInputError(f"anchor must be epoch seconds (a finite number) or None, got {shown(anchor)}")
    if _TRIGGER.search(text) is None:
        return None  # most sentences state no time: one scan instead of one per rule
    today = None if anchor is None else datetime.fromtimestamp(anchor, UTC).date()
    best: tuple[int, int, date] | None = None
    for pattern, rule in _RULES:
        for found in pattern.finditer(text):
            if best is not None and found.start() > best[0]:
                break
            day = rule(found, today)
            if day is not None:
                key = (found.start(), -(found.end() - found.start()), day)
                if best is None or key[:2] < best[:2]:
                    best = key
                break
    return None if best is None else _epoch(best[2])


# --- the rules: (pattern, resolver). A resolver gets the match and D (None without anchor). ----

Rule = Callable[[re.Match[str], date | None], date | None]


def _epoch(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def _day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _month_shift(day: date, months: int) -> date:
    """``day`` moved by ``months`` calendar months, the day clamped to the month's length."""
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _absolute_dmy(found: re.Match[str], today: date | None) -> date | None:
    if found["year"] is not None:
        year = int(found["year"])
    elif today is not None:
        year = today.year
    else:
        return None
    return _day(year, _MONTHS[found["month"].lower()], int(found["day"]))


def _iso(found: re.Match[str], today: date | None) -> date | None:
    return _day(int(found["year"]), int(found["mon"]), int(found["day"]))


def _month_year(found: re.Match[str], today: date | None) -> date | None:
    return date(int(found["year"]), _MONTHS[found["month"].lower()], 1)


def _in_month(found: re.Match[str], today: date | None) -> date | None:
    if today is None:
        return None
    month = _MONTHS[found["month"].lower()]
    return date(today.year if month <= today.month else today.year - 1, month, 1)


def _in_year(found: re.Match[str], today: date | None) -> date | None:
    return date(int(found["year"]), 1, 1)


_DAY_WORDS = {"today": 0, "tonight": 0, "this morning": 0, "this afternoon": 0, "this evening": 0,
              "earlier today": 0, "yesterday": -1, "last night": -1, "the day before yesterday": -2,
              "tomorrow": 1}


def _day_word(found: re.Match[str], today: date | None) -> date | None:
    return None if today is None else today + timedelta(days=_DAY_WORDS[found["word"].lower()])


def _ago(found: re.Match[str], today: date | None) -> date | None:
    if today is None:
        return None
    word = found["count"].lower()
    count = _NUMBERS[word] if word in _NUMBERS else int(word)
    if not 0 < count <= _MAX_AGO:
        return None
    unit = found["unit"].lower()
    if unit == "day":
        return today - timedelta(days=count)
    if unit == "week":
        return today - timedelta(days=7 * count)
    return _month_shift(today, -count if unit == "month" else -12 * count)


def _relative_period(found: re.Match[str], today: date | None) -> date | None:
    if today is None:
        return None
    step = {"last": -1, "past": -1, "this": 0, "next": 1}[found["which"].lower()]
    unit = found["unit"].lower()
    if unit == "week":
        return today + timedelta(days=7 * step)
    if unit == "month":
        return _month_shift(today.replace(day=1), step)
    return date(today.year + step, 1, 1)


def _weekday(found: re.Match[str], today: date | None) -> date | None:
    if today is None:
        return None
    which = (found["which"] or "").lower()
    name = found["weekday"]
    wanted = _WEEKDAY_ABBREVIATIONS[name] if name in _WEEKDAY_ABBREVIATIONS else _WEEKDAYS[name.lower()]
    back = (today.weekday() - wanted) % 7  # 0..6 days since the latest such weekday
    if which == "last":
        return today - timedelta(days=back or 7)
    if which in ("this", "next"):
        ahead = (wanted - today.weekday()) % 7
        return today + timedelta(days=ahead + (7 if which == "next" else 0))
    return today - timedelta(days=back)


def _weekend(found: re.Match[str], today: date | None) -> date | None:
    if today is None:
        return None
    # Saturday of D's Monday-to-Sunday week; Monday to Wednesday mean the weekend just past.
    saturday = today + timedelta(days=5 - today.weekday())
    if today.weekday() <= 2:
        saturday -= timedelta(days=7)
    step = {"last": -7, "next": 7}.get((found["which"] or "").lower(), 0)
    return saturday + timedelta(days=step)


def _rule(pattern: str, resolver: Rule) -> tuple[re.Pattern[str], Rule]:
    return re.compile(r"(?<![\w-])" + pattern + r"(?![\w-])", re.IGNORECASE), resolver


#: A word every rule needs one of (or a digit); a text without any states no time.
_TRIGGER = re.compile(
    r"\d|yesterday|today|tonight|tomorrow|ago\b|last|next|this|weekend|week|month|year|"
    + "|".join(sorted({*_MONTHS, *_WEEKDAYS, *map(str.lower, _WEEKDAY_ABBREVIATIONS)}, key=len, reverse=True)),
    re.IGNORECASE)

_RULES: tuple[tuple[re.Pattern[str], Rule], ...] = (
    _rule(r"(?P<year>(?:19|20)\d\d)-(?P<mon>[01]\d)-(?P<day>[0-3]\d)", _iso),
    _rule(_DAYNUM + r"(?:\s+of)?\s+" + _MONTH + r"(?:,?\s+" + _YEAR + r")?", _absolute_dmy),
    _rule(_MONTH + r"\s+" + _DAYNUM + r"(?:,?\s+" + _YEAR + r")?", _absolute_dmy),
    _rule(_MONTH_NAME + r",?\s+" + _YEAR, _month_year),
    _rule(r"(?:in|since|during|last|this|early|late|mid|until)(?:\s+|-)" + _MONTH_NAME + r"(?!,?\s+\d)", _in_month),
    _rule(r"(?:in|since|during|back in|of)\s+" + _YEAR, _in_year),
    _rule(r"(?P<word>the day before yesterday|yesterday|last night|today|tonight|earlier today|this morning"
          r"|this afternoon|this evening|tomorrow)", _day_word),
    _rule(_COUNT + r"\s+(?P<unit>day|week|month|year)s?\s+ago", _ago),
    _rule(r"(?P<which>last|past|this|next)\s+(?P<unit>week|month|year)", _relative_period),
    _rule(r"(?:(?P<which>last|this|next|on)\s+)?(?:the\s+)?" + _WEEKDAY, _weekday),
    _rule(r"(?:(?P<which>last|this|next)|over\s+the|on\s+the|the)\s+weekend", _weekend),
)
