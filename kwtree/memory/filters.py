"""mem0's metadata filters (its "enhanced metadata filtering"), checked and matched against a
memory's fields, for ``kwtree.Memory.search`` and ``get_all``.

A filter is a dict. Each key is a field, except ``AND``, ``OR`` (a list of filters) and ``NOT``
(a filter or a list of filters, none of which may match). A field's condition is a plain value
(equal), ``"*"`` (the field is present and not null) or a dict of operators, all of which must
hold: ``eq``, ``ne``, ``gt``, ``gte``, ``lt``, ``lte`` (numbers), ``in``, ``nin`` (a list),
``contains``, ``icontains`` (text; case-sensitive, case-insensitive). Several keys must all
match. A memory that lacks the field matches only ``ne`` and ``nin``. Anything else raises
InvalidInputError naming where in the filter it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kwtree.errors import InvalidInputError
from kwtree.validate import MAX_METADATA_DEPTH, check_unicode, clean_json, shown

__all__ = ["LOGICAL", "OPERATORS", "check_filters", "matches"]

#: The operators a field's condition may use.
OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains")
#: The keys that combine filters.
LOGICAL = ("AND", "OR", "NOT")
_MISSING = object()


def _number(value: object) -> bool:
    return type(value) in (int, float)


def check_filters(filters: object, where: str = "filters", depth: int = 0) -> Mapping[str, Any]:
    """``filters`` checked (see the module's docstring); InvalidInputError naming the part.
    Values are JSON (as metadata is: no lone surrogate, no int beyond 64 bits, no NaN), and
    filters nest at most ``MAX_METADATA_DEPTH`` levels, so that matching them never recurses
    without bound."""
    if not isinstance(filters, Mapping):
        raise InvalidInputError(f"{where} must be a dict such as {{'category': 'preferences'}}, got {shown(filters)}")
    if depth > MAX_METADATA_DEPTH:
        raise InvalidInputError(f"{where}: filters nested deeper than {MAX_METADATA_DEPTH} levels; flatten them")
    for key, condition in filters.items():
        if not isinstance(key, str) or not key:
            raise InvalidInputError(f"{where} has a key that is not a field name: {shown(key)}")
        check_unicode(key, f"{where} key")
        at = f"{where}[{key!r}]"
        if key in ("AND", "OR") or (key == "NOT" and isinstance(condition, list)):
            if not isinstance(condition, list) or not condition:
                raise InvalidInputError(f"{at} must be a non-empty list of filters")
            for index, part in enumerate(condition):
                check_filters(part, f"{at}[{index}]", depth + 1)
        elif key == "NOT":
            check_filters(condition, at, depth + 1)
        elif isinstance(condition, Mapping):
            _check_operators(condition, at)
        else:
            clean_json(condition, at)
    return filters


def _check_operators(condition: Mapping[Any, Any], at: str) -> None:
    if not condition:
        raise InvalidInputError(f"{at} must name at least one operator of {', '.join(OPERATORS)}")
    for op, value in condition.items():
        if op not in OPERATORS:
            raise InvalidInputError(f"{at} uses the operator {shown(op)}; the operators are {', '.join(OPERATORS)} "
                                    f"(AND, OR, NOT combine filters)")
        if op in ("gt", "gte", "lt", "lte") and not _number(value):
            raise InvalidInputError(f"{at}[{op!r}] must be a number, got {shown(value)}")
        if op in ("in", "nin") and not isinstance(value, list):
            raise InvalidInputError(f"{at}[{op!r}] must be a list of values, got {shown(value)}")
        if op in ("contains", "icontains") and not isinstance(value, str):
            raise InvalidInputError(f"{at}[{op!r}] must be text, got {shown(value)}")
        clean_json(value, f"{at}[{op!r}]")


def _holds(op: str, have: object, want: Any) -> bool:
    if have is _MISSING:
        return op in ("ne", "nin")
    if op == "eq":
        return bool(have == want)
    if op == "ne":
        return bool(have != want)
    if op in ("in", "nin"):
        return (have in want) == (op == "in")
    if op in ("contains", "icontains"):
        if not isinstance(have, str):
            return False
        return want in have if op == "contains" else want.casefold() in have.casefold()
    if not _number(have):
        return False
    compare = {"gt": have > want, "gte": have >= want, "lt": have < want, "lte": have <= want}
    return bool(compare[op])


def matches(filters: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """True when ``fields`` (a memory's metadata and ids) match the checked ``filters``."""
    for key, condition in filters.items():
        if key == "AND":
            if not all(matches(part, fields) for part in condition):
                return False
        elif key == "OR":
            if not any(matches(part, fields) for part in condition):
                return False
        elif key == "NOT":
            parts = condition if isinstance(condition, list) else [condition]
            if any(matches(part, fields) for part in parts):
                return False
        else:
            have = fields.get(key, _MISSING)
            if condition == "*":
                if have is _MISSING or have is None:
                    return False
            elif isinstance(condition, Mapping):
                if not all(_holds(op, have, want) for op, want in condition.items()):
                    return False
            elif not _holds("eq", have, condition):
                return False
    return True
