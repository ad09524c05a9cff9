"""A query that names a date: the window it names, and recall's lift of the memories that
happened in it.

"What did Ann watch on 1 May, 2022?" asks about what happened that day; the turn that answers
it rarely repeats the date (it says "tonight", or the session's date says it), but the memory
pipeline recorded when each memory happened (``happened_at``). ``named_window`` reads a
calendar date with its year from the query ("1 May, 2022", "May 1st 2022", "2022-05-01":
that day, widened by a day on each side for time zones) or a month with its year ("July
2022", "in Jan 2023": that month; a lower-case "may 2022" is the verb); a month or day
without a year names nothing (it could be any year). ``lift`` adds ``DATE_BONUS`` to the
score of each hit that happened in the window (from a second ``fuse`` pass restricted to it,
so an info the first pass ranked below ``k`` can come up) and ranks the union again. Infos
without ``happened_at`` fall back to their ``created_at`` (``kwtree.retrieval.timeline``), so
a tree written by hand today is lifted only for a query naming today's date.

A query may also ask about a time without naming a date: ``asked_time`` reads whether it asks
about the present ("where does she work now?", "is he still vegan?", "these days") or the
past ("where did she live before?", "what did he use to drive?"), by general English markers
of time (``PRESENT``, ``PAST``); recall then puts the newer (or older) of equally matching
memories first (``kwtree.retrieval.recall.RECENCY``).

Imports the ground floor and ``kwtree.retrieval.timeline`` only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from kwtree.models import Hit
from kwtree.retrieval.timeline import Window

__all__ = ["DATE_BONUS", "PAST", "PRESENT", "asked_time", "lift", "named_window"]

#: What happening in the window the query names adds to a hit's score (scores are in [0, 1]).
DATE_BONUS = 0.2

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MONTH = r"(?P<month>" + "|".join(f"{name[:3]}(?:{name[3:]})?" if len(name) > 3 else name for name in _MONTHS) + r")\.?"
_YEAR = r"(?P<year>(?:19|20)\d\d)\b"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_PATTERNS = (
    ("day", re.compile(r"\b" + _DAY + r"\s+(?:of\s+)?" + _MONTH + r",?\s+" + _YEAR, re.IGNORECASE)),
    ("day", re.compile(r"\b" + _MONTH + r"\s+" + _DAY + r",?\s+" + _YEAR, re.IGNORECASE)),
    ("day", re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>\d\d)-(?P<day>\d\d)\b")),
    ("month", re.compile(r"\b" + _MONTH + r",?\s+" + _YEAR, re.IGNORECASE)),
)


#: What a question says to ask about the present, and about the past (before PRESENT: "what did
#: she do before, and what now?" asks about both, and the past is the narrower ask).
PRESENT = re.compile(r"\b(?:now|nowadays|these days|currently|at the moment|at present|right now|still|anymore|"
                     r"any more|yet|lately|today)\b", re.IGNORECASE)
PAST = re.compile(r"\b(?:before|used to|previously|formerly|originally|earlier|former|back then|at first|back in|"
                  r"prior to)\b", re.IGNORECASE)


def asked_time(query: str) -> str | None:
    """"past" when ``query`` asks about an earlier time, else "present" when it asks about
    now, else None (``PAST``, ``PRESENT``)."""
    if PAST.search(query):
        return "past"
    return "present" if PRESENT.search(query) else None


def _month_number(text: str) -> int:
    if text.isdigit():
        return int(text)
    return next(i for i, name in enumerate(_MONTHS, 1) if name.startswith(text.lower()[:3]))


def named_window(query: str) -> Window | None:
    """The time window the first calendar date or month-with-year in ``query`` names (epoch
    seconds, UTC, both ends inclusive), or None when it names none (or an impossible date)."""
    for unit, pattern in _PATTERNS:
        found = pattern.search(query)
        if found is None or (unit == "month" and found["month"] == "may"):  # "I may 2022": the verb
            continue
        try:
            year, month = int(found["year"]), _month_number(found["month"])
            if unit == "day":
                start = datetime(year, month, int(found["day"]), tzinfo=UTC) - timedelta(days=1)
                end = start + timedelta(days=3)
            else:
                start = datetime(year, month, 1, tzinfo=UTC)
                end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
        except ValueError:
            continue  # "31 February 2022"
        return start.timestamp(), end.timestamp() - 1e-3
    return None


def lift(hits: Sequence[Hit], dated: Sequence[Hit], k: int) -> list[Hit]:
    """The best ``k`` of ``hits`` and ``dated`` (hits that happened in the query's window),
    each ``dated`` hit's score raised by ``DATE_BONUS``, best first."""
    best: dict[str, Hit] = {hit.info.id: hit for hit in hits}
    for hit in dated:
        raised = dataclasses.replace(hit, score=hit.score + DATE_BONUS, keywords=list(hit.keywords))
        if raised.score > best.get(hit.info.id, hit).score or hit.info.id not in best:
            best[hit.info.id] = raised
    order = {iid: position for position, iid in enumerate([*(h.info.id for h in hits), *(h.info.id for h in dated)])}
    return sorted(best.values(), key=lambda hit: (-hit.score, order[hit.info.id]))[:k]
