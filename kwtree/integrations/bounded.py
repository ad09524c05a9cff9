"""Results a model can afford: a tool's JSON result cut to a size, saying what was cut.

A memory may hold a megabyte and a subtree thousands of keywords; a tool result that large
would fill a model's context or be refused by its client. ``fit`` keeps the first items of
every list and the start of every long text, as many as the budget allows, and puts a
``truncated`` note in the result naming each list and text it shortened and by how much, so
the model knows to ask for less (a smaller ``k``, a narrower scope, one ``show``).
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["DEFAULT_MAX_CHARS", "MIN_MAX_CHARS", "dumps", "fit"]

#: The default budget of one result, in characters of its JSON (about 5,000 tokens).
DEFAULT_MAX_CHARS = 20_000
#: No budget may be smaller: the note alone needs room.
MIN_MAX_CHARS = 1_000
#: A text longer than a budget's share is cut first, before any list loses an item.
_TEXT_SHARE = 8
#: Room kept for the note itself; at most this many cuts are named in it.
_NOTE_ROOM = 600
_NOTED = 6


def dumps(value: Any) -> str:
    """``value`` as compact JSON text (UTF-8 kept as it is)."""
    return orjson.dumps(value).decode()


def _cut(value: Any, items: int | None, chars: int, path: str, notes: list[str]) -> Any:
    if isinstance(value, str):
        if len(value) > chars:
            notes.append(f"{path or 'the text'}: {chars:,} of {len(value):,} characters shown")
            return value[:chars] + " …"
        return value
    if isinstance(value, list):
        kept = value if items is None else value[:items]
        if len(kept) < len(value):
            notes.append(f"{path or 'the list'}: {len(kept)} of {len(value)} shown")
        return [_cut(item, items, chars, f"{path}[{index}]", notes) for index, item in enumerate(kept)]
    if isinstance(value, dict):
        return {key: _cut(item, items, chars, f"{path}.{key}" if path else str(key), notes)
                for key, item in value.items()}
    return value


def _longest_list(value: Any) -> int:
    if isinstance(value, list):
        return max([len(value), *(_longest_list(item) for item in value)])
    if isinstance(value, dict):
        return max((_longest_list(item) for item in value.values()), default=0)
    return 0


def _note(notes: list[str]) -> str:
    named = "; ".join(notes[:_NOTED]) + (f"; and {len(notes) - _NOTED} more" if len(notes) > _NOTED else "")
    return f"{named}. Ask for less to see the rest (a smaller k or depth, a narrower scope, one id with show)."


def fit(result: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """``result`` whole when its JSON is at most ``max_chars`` characters; otherwise a copy
    with its long texts and lists cut (texts first, then every list to the same length, as
    long as fits) and a ``truncated`` note saying what was cut. Never longer than
    ``max_chars`` (``max_chars`` ≥ ``MIN_MAX_CHARS``)."""
    if len(dumps(result)) <= max_chars:
        return result
    budget = max_chars - _NOTE_ROOM

    def attempt(items: int | None, chars: int) -> tuple[dict[str, Any], list[str]] | None:
        notes: list[str] = []
        cut = _cut(result, items, chars, "", notes)
        return (cut, notes) if len(dumps(cut)) <= budget else None

    chars = max(budget // _TEXT_SHARE, 64)
    found = attempt(None, chars)
    if found is None:  # the most items of every list that fit, found by bisection
        low, high = 0, _longest_list(result)
        while low < high:
            middle = (low + high + 1) // 2
            if attempt(middle, chars) is None:
                high = middle - 1
            else:
                low = middle
        found = attempt(low, chars)
        while found is None and chars > 16:  # even empty lists are too long: shorter texts
            chars //= 2
            found = attempt(0, chars)
    if found is None:
        return {"truncated": f"the result is too large to show in {max_chars:,} characters; "
                             "ask for less (a smaller k or depth, a narrower scope, one id with show)."}
    cut, notes = found
    cut["truncated"] = _note(notes)
    return cut
