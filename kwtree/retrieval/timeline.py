"""When a memory happened: the time window of ``recall(since=, until=)`` and the date
``context`` prints.

An info happened at its metadata's ``happened_at`` (``kwtree.memory_schema.HAPPENED_AT``: epoch
seconds, UTC, written by the memory pipeline from the message's time, the session's date or
a date in the text) when that is a finite number; else at its ``created_at`` (when it was
recorded), so that infos written by hand still fall in a window.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from kwtree.errors import InvalidInputError
from kwtree.memory_schema import HAPPENED_AT
from kwtree.models import Info
from kwtree.validate import finite_number, shown

__all__ = ["Window", "clean_window", "happened_at", "happened_day", "in_window"]

#: (since, until) in epoch seconds, both inclusive; None leaves that side open.
Window = tuple[float | None, float | None]


def _stated(info: Info) -> float | None:
    return finite_number(info.metadata.get(HAPPENED_AT))


def happened_at(info: Info) -> float:
    """When ``info`` happened: its ``happened_at`` metadata, else when it was recorded."""
    stated = _stated(info)
    return info.created_at if stated is None else stated


def happened_day(info: Info) -> str | None:
    """The UTC date (``YYYY-MM-DD``) of ``info``'s ``happened_at``; None when it has none."""
    stated = _stated(info)
    if stated is None:
        return None
    try:
        return datetime.fromtimestamp(stated, UTC).date().isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def _moment(value: object, field: str, end_of_day: bool) -> float:
    """Epoch seconds of ``value``: a number of epoch seconds, a datetime, a date, or an ISO
    8601 date or datetime string (without a zone: UTC). A bare date is the start of that day
    for ``since`` and its end for ``until`` (``end_of_day``), so that a day given as both
    bounds is the whole day."""
    day: date | None = None
    moment: datetime | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = finite_number(value)
        if seconds is not None:
            return seconds
    elif isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        day = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                day = date.fromisoformat(text)
            else:
                moment = datetime.fromisoformat(text)
        except ValueError:
            pass
    if day is not None:
        moment = datetime(day.year, day.month, day.day)
        if end_of_day:
            moment += timedelta(days=1, microseconds=-1)
    if moment is None:
        raise InvalidInputError(
            f"{field} must be epoch seconds, a datetime or an ISO 8601 date or time such as '2024-05-08' or "
            f"'2024-05-08T14:30:00+00:00', got {shown(value)}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.timestamp()
    except (OverflowError, OSError, ValueError):
        raise InvalidInputError(f"{field} {shown(value)} is out of range") from None


def clean_window(since: object, until: object, fields: tuple[str, str] = ("since", "until")) -> Window | None:
    """The window ``since``..``until`` (either may be None), checked; None when both are.
    InvalidInputError naming the field (``fields``: the caller's names of the two) that is
    malformed, or both when since is after until."""
    start = None if since is None else _moment(since, fields[0], end_of_day=False)
    end = None if until is None else _moment(until, fields[1], end_of_day=True)
    if start is not None and end is not None and start > end:
        raise InvalidInputError(f"{fields[0]} ({shown(since)}) is after {fields[1]} ({shown(until)}); swap them")
    return None if start is None and end is None else (start, end)


def in_window(info: Info, window: Window) -> bool:
    """True if ``info`` happened within ``window`` (bounds included)."""
    moment = happened_at(info)
    since, until = window
    return (since is None or moment >= since) and (until is None or moment <= until)
