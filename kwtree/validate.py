"""Argument checks shared by every public method. Each returns the cleaned value or raises
InvalidInputError with a message that names the argument and says what is allowed."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import orjson

from kwtree.errors import InvalidInputError
from kwtree.models import EMPTY_METADATA, RelationType
from kwtree.normalize import normalize_name

__all__ = [
    "check_patch",
    "clean_aliases",
    "clean_choice",
    "clean_id",
    "clean_int",
    "clean_label",
    "clean_metadata",
    "clean_name",
    "clean_name_key",
    "clean_relation_type",
    "clean_text",
    "clean_weight",
]

_MAX_INT = 2**63 - 1


def _type_name(value: object) -> str:
    return type(value).__name__


def clean_id(value: object, field: str) -> str:
    if type(value) is not str or not value:
        raise InvalidInputError(f"{field} must be a non-empty id string, got {value!r}")
    return value


def clean_name_key(value: object, field: str = "name") -> tuple[str, str]:
    """A keyword name or alias and its normalised lookup key (which must not be empty)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be a string, got {_type_name(value)}")
    name = value.strip()
    if not name:
        raise InvalidInputError(f"{field} must not be empty or only whitespace")
    # isprintable() is a fast C check that is True for nearly every real name; only when it
    # is False do we look for the control characters (newline, tab ...) that are refused.
    if not name.isprintable() and any(unicodedata.category(ch) == "Cc" for ch in name):
        raise InvalidInputError(f"{field} {name!r} contains a control character such as a newline or tab")
    key = normalize_name(name)
    if not key:
        raise InvalidInputError(
            f"{field} {name!r} has no letters, digits or symbols left after normalisation "
            f"(punctuation and spaces are ignored for lookup)"
        )
    return name, key


def clean_name(value: object, field: str = "name") -> str:
    """A keyword name or alias: a string with something left after normalisation."""
    return clean_name_key(value, field)[0]


def clean_aliases(value: object, name_key: str) -> tuple[str, ...]:
    """Aliases as a tuple, without duplicates or repeats of the name (whose normalised key
    is ``name_key``), compared by normalised form."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise InvalidInputError(f"aliases must be a list of strings, got {_type_name(value)}")
    seen = {name_key}
    aliases = []
    for item in value:
        alias, key = clean_name_key(item, "alias")
        if key not in seen:
            seen.add(key)
            aliases.append(alias)
    return tuple(aliases)


def clean_text(value: object, field: str, *, allow_empty: bool) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be a string, got {_type_name(value)}")
    if not allow_empty and not value.strip():
        raise InvalidInputError(f"{field} must not be empty or only whitespace")
    return str(value)


def clean_label(value: object, field: str) -> str:
    """A short non-empty label such as a relation type, an actor or ``created_by``."""
    text = clean_text(value, field, allow_empty=False).strip()
    if not text.isprintable() and any(unicodedata.category(ch) == "Cc" for ch in text):
        raise InvalidInputError(f"{field} {text!r} contains a control character")
    return text


def _check_json(value: Any, where: str) -> None:
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return
    if kind is int:
        if not -_MAX_INT - 1 <= value <= _MAX_INT:
            raise InvalidInputError(f"{where}: integer {value} does not fit in 64 bits")
        return
    if kind is float:
        if not math.isfinite(value):
            raise InvalidInputError(f"{where}: {value} is not a finite number (JSON has no NaN or infinity)")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidInputError(f"{where}: keys must be strings, got {key!r}")
            _check_json(item, f"{where}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]")
        return
    raise InvalidInputError(f"{where}: {_type_name(value)} is not JSON (use str, int, float, bool, None, list, dict)")


def clean_metadata(value: object) -> Mapping[str, Any]:
    """A JSON object, stored as its canonical JSON form (tuples become lists)."""
    if value is None:
        return EMPTY_METADATA
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"metadata must be a dict, got {_type_name(value)}")
    if not value:
        return EMPTY_METADATA
    _check_json(value, "metadata")
    return MappingProxyType(orjson.loads(orjson.dumps(dict(value))))


def check_patch(patch: object, allowed: tuple[str, ...], hint: str) -> Mapping[str, Any]:
    """A non-empty dict whose keys are among ``allowed`` (``hint`` says where the rest go)."""
    if not isinstance(patch, Mapping):
        raise InvalidInputError(f"patch must be a dict, got {_type_name(patch)}")
    if not patch:
        raise InvalidInputError(f"patch is empty; give at least one of {', '.join(allowed)}")
    unknown = sorted(str(key) for key in patch if key not in allowed)
    if unknown:
        raise InvalidInputError(f"patch has unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed)} ({hint})")
    return patch


def clean_relation_type(value: object) -> RelationType:
    if isinstance(value, RelationType):
        return value
    try:
        return RelationType(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in RelationType)
        raise InvalidInputError(f"relation must be a RelationType or one of {allowed}, got {value!r}") from None


def clean_weight(value: object) -> float:
    if type(value) is bool or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInputError(f"weight must be a finite number, got {value!r}")
    return float(value)


def clean_int(value: object, field: str, minimum: int, maximum: int | None = None) -> int:
    if type(value) is not int or value < minimum or (maximum is not None and value > maximum):
        limit = f" and at most {maximum}" if maximum is not None else ""
        raise InvalidInputError(f"{field} must be an integer of at least {minimum}{limit}, got {value!r}")
    return value


def clean_choice(value: object, field: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidInputError(f"{field} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value  # type: ignore[return-value]


def clean_flag(value: object, field: str) -> bool:
    if type(value) is not bool:
        raise InvalidInputError(f"{field} must be True or False, got {value!r}")
    return value  # type: ignore[return-value]


def clean_seconds(value: object, field: str) -> float:
    """A duration in seconds: an int or float >= 0 (not a bool)."""
    if type(value) not in (int, float) or not value >= 0:  # type: ignore[operator]
        raise InvalidInputError(f"{field} must be a number of seconds >= 0, got {value!r}")
    return float(value)  # type: ignore[arg-type]
