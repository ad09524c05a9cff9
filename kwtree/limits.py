"""Size limits on what a tree stores and searches: :class:`Limits`, a ``KeywordTree`` option.

A 50 MB memory or keyword name used to be accepted, then cost every later open, search and
embedding; now every write is checked against these limits before it reaches the log, and a
value over one raises :class:`~kwtree.errors.LimitExceededError` naming the field, its size and
the limit. Sizes are bytes of UTF-8 (what the log stores), except ``aliases_per_keyword``.

Only what a write *changes* is checked: a value already in the log (written under larger
limits, or before limits existed) never stops a move, a merge or a relink of its entity.
Replay, compaction and snapshots never check limits, so a log is always readable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from kwtree.errors import InvalidInputError, LimitExceededError
from kwtree.models import Change, Info, Keyword, Link, Relation
from kwtree.validate import shown

__all__ = ["DEFAULT_LIMITS", "Limits"]


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """The largest value a tree accepts for each field (all must be integers >= 1).

    ``name_bytes`` a keyword's name, ``alias_bytes`` each alias, ``aliases_per_keyword`` how
    many aliases one keyword has, ``description_bytes`` a keyword's description,
    ``content_bytes`` an info's text, ``source_bytes`` its source, ``metadata_bytes`` the JSON
    of a keyword's or info's metadata, ``label_bytes`` a relation type, a link's
    ``created_by`` and the tree's ``actor``, ``reason_bytes`` a relation's reason, and
    ``query_bytes`` the query of ``search``, ``recall`` and ``context`` and the name given to
    ``find_keywords``.
    """

    name_bytes: int = 1024
    alias_bytes: int = 1024
    aliases_per_keyword: int = 256
    description_bytes: int = 64 * 1024
    content_bytes: int = 1024 * 1024
    source_bytes: int = 16 * 1024
    metadata_bytes: int = 64 * 1024
    label_bytes: int = 256
    reason_bytes: int = 16 * 1024
    query_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if type(value) is not int or value < 1:
                raise InvalidInputError(f"Limits.{field.name} must be an integer >= 1, got {shown(value)}")

    def check_text(self, field: str, text: str, limit: str) -> None:
        """Raise LimitExceededError if ``text`` (a checked str) is longer than the limit named
        ``limit`` in UTF-8; ``field`` is the argument's name for the message."""
        size = _text_size(text, getattr(self, limit))
        if size is not None:
            raise _exceeded(field, size, getattr(self, limit), limit, "")

    def cut_text(self, text: str, limit: str) -> str:
        """``text`` when it fits the limit named ``limit`` in UTF-8; else as much of its start
        as fits together with a note that says so, ``"\n[cut by kwtree: M characters, the
        first N kept]"`` (whole characters, never half of one). For a caller that must store
        something rather than refuse: a hook that would otherwise fail on every later turn. A
        limit too small to hold the note gives a text still over it, which the write refuses."""
        bound = getattr(self, limit)
        if _text_size(text, bound) is None:
            return text
        # The note is sized for the whole length: the count kept has at most as many digits.
        room = max(bound - len(_cut_note(len(text), len(text)).encode("utf-8")), 0)
        kept = text.encode("utf-8")[:room].decode("utf-8", errors="ignore")
        return kept + _cut_note(len(text), len(kept))

    def check_changes(self, changes: Iterable[Change]) -> None:
        """Raise LimitExceededError for the first field a change sets to a value over its
        limit (a field the change leaves as it was is not checked)."""
        for change in changes:
            entity, before = change.after, change.before
            for field, limit, measure in _CHECKED[type(entity)]:
                value = getattr(entity, field)
                if not value or (before is not None and value == getattr(before, field)):
                    continue  # (an empty value is within every limit: each is at least 1)
                size = measure(value, getattr(self, limit))
                if size is not None:
                    raise _exceeded(field, size, getattr(self, limit), limit, f" of {_describe(change)}")


DEFAULT_LIMITS = Limits()


def _cut_note(total: int, kept: int) -> str:
    return f"\n[cut by kwtree: {total:,} characters, the first {kept} kept]"


# Each measure returns the value's size when it is over ``bound``, else None.


def _text_size(text: str, bound: int) -> int | None:
    # Every character is 1 to 4 bytes of UTF-8: encode only when the length cannot decide.
    if len(text) * 4 <= bound:
        return None
    size = len(text.encode("utf-8"))  # (the bytes, also when the characters alone are over: the message says bytes)
    return size if size > bound else None


def _largest_alias(aliases: Sequence[str], bound: int) -> int | None:
    sizes = [_text_size(alias, bound) for alias in aliases]
    over = [size for size in sizes if size is not None]
    return max(over) if over else None


def _count(items: Sequence[str], bound: int) -> int | None:
    return len(items) if len(items) > bound else None


def _json_size(metadata: Mapping[str, Any], bound: int) -> int | None:
    if not metadata:
        return None
    size = len(orjson.dumps(dict(metadata)))
    return size if size > bound else None


Measure = Callable[[Any, int], "int | None"]

#: entity type -> (field, the Limits attribute that bounds it, how it is measured)
_CHECKED: dict[type, tuple[tuple[str, str, Measure], ...]] = {
    Keyword: (
        ("name", "name_bytes", _text_size),
        ("aliases", "aliases_per_keyword", _count),
        ("aliases", "alias_bytes", _largest_alias),
        ("description", "description_bytes", _text_size),
        ("metadata", "metadata_bytes", _json_size),
    ),
    Info: (
        ("content", "content_bytes", _text_size),
        ("source", "source_bytes", _text_size),
        ("metadata", "metadata_bytes", _json_size),
    ),
    Link: (("created_by", "label_bytes", _text_size),),
    Relation: (
        ("type", "label_bytes", _text_size),
        ("reason", "reason_bytes", _text_size),
    ),
}


def _exceeded(field: str, size: int, bound: int, limit: str, where: str) -> LimitExceededError:
    unit = "aliases" if limit == "aliases_per_keyword" else "bytes"
    advice = _ADVICE.get(limit, "shorten it")
    return LimitExceededError(
        f"{field}{where}: {size:,} {unit} is over the limit of {bound:,} {unit} (Limits.{limit}); {advice}, "
        f"or open the tree with KeywordTree(..., limits=Limits({limit}=...))",
        field, size, bound,
    )


_ADVICE = {
    "content_bytes": "split the text into several infos, or keep the document elsewhere and store a summary",
    "aliases_per_keyword": "remove some aliases",
    "metadata_bytes": "keep large data elsewhere and store a reference",
}


def _describe(change: Change) -> str:
    entity = change.after
    if isinstance(entity, Link):
        return f"the link of info {entity.info_id} to keyword {entity.keyword_id}"
    if isinstance(entity, Relation):
        return f"the relation {entity.from_id} -> {entity.to_id}"
    new = "new " if change.before is None else ""
    return f"{new}{type(entity).__name__.lower()} {entity.id}"
