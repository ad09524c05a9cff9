"""Results a model can afford: a tool's JSON result cut to a size, saying what was cut.

A memory may hold a megabyte and a subtree thousands of keywords; a tool result that large
would fill a model's context or be refused by its client. ``fit`` keeps the first items of
every list and the start of every long text, as many as the budget allows, and puts a
``truncated`` note in the result naming each list and text it shortened and by how much, so
the model knows to ask for less (a smaller ``k``, a narrower scope, one ``show``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_MAX_CHARS", "MIN_MAX_CHARS", "clip", "dumps", "fit"]

#: The default budget of one result, in characters of its JSON (about 5,000 tokens).
DEFAULT_MAX_CHARS = 20_000
#: No budget may be smaller: the note alone needs room.
MIN_MAX_CHARS = 1_000
#: A text longer than a budget's share is cut first, before any list loses an item.
_TEXT_SHARE = 8
#: Room kept for the note itself (the cuts it names are as many as fit).
_NOTE_ROOM = 600


def dumps(value: Any) -> str:
    """``value`` as compact JSON text whose every string is quoted as stored text is shown to
    a model (``kwtree.retrieval.fence.to_json``: no tag, header, turn or invisible character
    can be written by what a memory holds)."""
    from kwtree.retrieval.fence import to_json  # (here: ``kwtree --help`` reads DEFAULT_MAX_CHARS only)

    return to_json(value)


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
    if isinstance(value, dict):  # below the top, a dict is cut like a list: its first keys, each key short
        pairs = list(value.items())
        if path and items is not None and len(pairs) > items:
            notes.append(f"{path}: {items} of {len(pairs)} keys shown")
            pairs = pairs[:items]
        cut: dict[str, Any] = {}
        for key, item in pairs:
            name = key if len(key) <= chars or not path else key[:chars] + " …"
            cut.setdefault(name, _cut(item, items, chars, f"{path}.{name}" if path else name, notes))
        return cut
    return value


def _longest(value: Any, kind: type) -> int:
    """The length of the longest list (``kind`` list) or text (``kind`` str) inside ``value``."""
    here = len(value) if isinstance(value, (list, str)) and isinstance(value, kind) else 0
    if isinstance(value, list):
        return max([here, *(_longest(item, kind) for item in value)])
    if isinstance(value, dict):
        keys = len(value) if kind is list else max(map(len, value), default=0)  # a dict's keys count as items
        return max([here, keys, *(_longest(item, kind) for item in value.values())])
    return here


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest x in low..high with ``fits(x)`` (which holds up to some x and not above it);
    None when not even ``low`` fits."""
    if not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _note(notes: list[str]) -> str:
    """What was cut, naming as many of the cuts as the note's room allows."""
    advice = " Ask for less to see the rest (a smaller k or depth, a narrower scope, one id with show)."
    named = [note if len(note) <= 120 else note[:117] + "…" for note in notes]
    for count in range(len(named), -1, -1):
        more = f"; and {len(named) - count} more cut(s)" if count < len(named) else ""
        text = "; ".join(named[:count]) + more + "." + advice
        if len(dumps(text)) <= _NOTE_ROOM - 20:
            return text
    return advice.strip()


def clip(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters (ending in "…" when cut)."""
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def fit(result: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """``result`` whole when its JSON is at most ``max_chars`` characters; otherwise a copy
    cut to fit, with a ``truncated`` note saying what was cut: first only long texts, each
    keeping as much as fits; when that would leave less than an eighth of the budget to each,
    every list is cut to the same length too (as long as fits) and the texts keep what room is
    left. Never longer than ``max_chars`` (``max_chars`` ≥ ``MIN_MAX_CHARS``)."""
    if len(dumps(result)) <= max_chars:
        return result
    fitted = _fit(result, max_chars, _NOTE_ROOM)
    room = len(dumps(fitted.get("truncated", ""))) + 20
    if room < _NOTE_ROOM:  # the note came out shorter than the room kept for it: use the rest too
        wider = _fit(result, max_chars, room)
        if "truncated" in wider and len(dumps(wider)) <= max_chars:
            return wider
    return fitted


def _fit(result: dict[str, Any], max_chars: int, note_room: int) -> dict[str, Any]:
    budget = max_chars - note_room

    def attempt(items: int | None, chars: int) -> tuple[dict[str, Any], list[str]] | None:
        notes: list[str] = []
        cut = _cut(result, items, chars, "", notes)
        return (cut, notes) if len(dumps(cut)) <= budget else None

    longest_text = max(_longest(result, str), 16)
    share = max(budget // _TEXT_SHARE, 64)
    items: int | None = None
    chars = _largest(lambda c: attempt(None, c) is not None, 16, longest_text)
    if chars is None or chars < min(share, longest_text):
        found_items = _largest(lambda n: attempt(n, share) is not None, 0, _longest(result, list))
        if found_items is not None:
            items = found_items
            chars = _largest(lambda c: attempt(items, c) is not None, share, longest_text)
        else:  # even empty lists are too long at that share: shorter texts
            items = 0
            chars = _largest(lambda c: attempt(0, c) is not None, 16, share)
    found = None if chars is None else attempt(items, chars)
    if found is None:
        return {"truncated": f"the result is too large to show in {max_chars:,} characters; "
                             "ask for less (a smaller k or depth, a narrower scope, one id with show)."}
    cut, notes = found
    cut["truncated"] = _note(notes)
    return cut
