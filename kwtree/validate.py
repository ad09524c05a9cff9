"""Argument checks shared by every public method. Each returns the cleaned value or raises
InvalidInputError with a message that names the argument and says what is allowed."""

from __future__ import annotations

import contextlib
import math
import os
import reprlib
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.models import EMPTY_METADATA, PROVENANCES, RelationType
from kwtree.normalize import normalize_name

__all__ = [
    "MAX_METADATA_DEPTH",
    "check_patch",
    "check_unicode",
    "clean_aliases",
    "clean_choice",
    "clean_id",
    "clean_int",
    "clean_json",
    "clean_label",
    "clean_metadata",
    "clean_name",
    "clean_name_key",
    "clean_path",
    "clean_provenance",
    "clean_provenances",
    "clean_relation_type",
    "clean_text",
    "clean_weight",
    "finite_number",
    "shown",
]

_MAX_INT = 2**63 - 1
#: Metadata may nest dicts and lists this deep (orjson refuses about 255 levels, and a deep
#: value would cost a recursion per level everywhere it is read); deeper is refused.
MAX_METADATA_DEPTH = 64
#: The longest file name (one part of a path) Linux, macOS and Windows file systems take.
_NAME_MAX = 255
#: A metadata key longer than this is cut (with "…") where an error message names its path.
_PATH_KEY_CHARS = 40


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 80, 80


def shown(value: object) -> str:
    """``repr(value)`` cut to a readable length and depth, for error messages: a caller's
    value may be 50 MB long or nested thousands of levels deep."""
    try:
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001 -- a hostile __repr__ must not hide the real error
        return f"<{type(value).__name__}>"


def _type_name(value: object) -> str:
    return type(value).__name__


def check_unicode(text: str, field: str) -> None:
    """Refuse a lone surrogate (U+D800..U+DFFF), which has no UTF-8 form and so cannot be
    stored; such strings come from decoding bytes with ``errors="surrogateescape"``."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{field}: lone surrogate U+{ord(text[exc.start]):04X} at index {exc.start}; text must be valid "
            f"Unicode: decode bytes with errors='replace', or remove the character"
        ) from None


def clean_id(value: object, field: str) -> str:
    if type(value) is not str or not value:
        raise InvalidInputError(f"{field} must be a non-empty id string, got {shown(value)}")
    check_unicode(value, field)  # (an id is looked up in UTF-8 bytes, e.g. by history())
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
    if not name.isprintable():
        if any(unicodedata.category(ch) == "Cc" for ch in name):
            raise InvalidInputError(f"{field} {shown(name)} contains a control character such as a newline or tab")
        check_unicode(name, field)
    key = normalize_name(name)
    if not key:
        raise InvalidInputError(
            f"{field} {shown(name)} has no letters, digits or symbols left after normalisation "
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
    if not allow_empty and (not value or value.isspace()):  # (as ``not value.strip()``, without a copy)
        raise InvalidInputError(f"{field} must not be empty or only whitespace")
    check_unicode(value, field)
    return str(value)


def clean_label(value: object, field: str) -> str:
    """A short non-empty label such as a relation type, an actor or ``created_by``."""
    text = clean_text(value, field, allow_empty=False).strip()
    if not text.isprintable() and any(unicodedata.category(ch) == "Cc" for ch in text):
        raise InvalidInputError(f"{field} {shown(text)} contains a control character")
    return text


def _key_path(where: str, key: str) -> str:
    part = key if len(key) <= _PATH_KEY_CHARS else key[:_PATH_KEY_CHARS] + "…"
    return f"{where}.{part}" if part.isidentifier() else f"{where}[{part!r}]"


def _plain_json(value: Any, where: str, depth: int) -> Any:
    """``value`` as plain JSON (dicts, lists, str, int, float, bool, None): a copy in which any
    Mapping is a dict and any tuple a list, or InvalidInputError naming the path of the first
    value that is not JSON. Recursion stops at ``MAX_METADATA_DEPTH`` levels."""
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is str:
        check_unicode(value, where)
        return value
    if kind is int:
        if not -_MAX_INT - 1 <= value <= _MAX_INT:
            raise InvalidInputError(f"{where}: integer {shown(value)} does not fit in 64 bits")
        return value
    if kind is float:
        if not math.isfinite(value):
            raise InvalidInputError(f"{where}: {value} is not a finite number (JSON has no NaN or infinity)")
        return value
    if isinstance(value, (Mapping, list, tuple)) and depth >= MAX_METADATA_DEPTH:
        raise InvalidInputError(f"{where}: nested deeper than {MAX_METADATA_DEPTH} levels; flatten it")
    if isinstance(value, Mapping):
        plain = {}
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidInputError(f"{where}: keys must be strings, got {_type_name(key)} {shown(key)}")
            check_unicode(key, f"{where} key")
            inner = _key_path(where, key)
            plain[key] = _plain_json(item, inner, depth + 1)
        return plain
    if isinstance(value, (list, tuple)):
        return [_plain_json(item, f"{where}[{index}]", depth + 1) for index, item in enumerate(value)]
    raise InvalidInputError(f"{where}: {_type_name(value)} is not JSON (use str, int, float, bool, None, list, dict)")


def clean_json(value: object, field: str) -> Any:
    """Any JSON value (as ``clean_metadata`` checks it), as a plain copy."""
    return _plain_json(value, field, 0)


def clean_metadata(value: object) -> Mapping[str, Any]:
    """A JSON object, stored as its canonical JSON form (tuples become lists), nested at most
    ``MAX_METADATA_DEPTH`` levels."""
    if value is None:
        return EMPTY_METADATA
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"metadata must be a dict, got {_type_name(value)}")
    if not value:
        return EMPTY_METADATA
    return MappingProxyType(_plain_json(value, "metadata", 0))


def check_patch(patch: object, allowed: tuple[str, ...], hint: str) -> Mapping[str, Any]:
    """A non-empty dict whose keys are among ``allowed`` (``hint`` says where the rest go)."""
    if not isinstance(patch, Mapping):
        raise InvalidInputError(f"patch must be a dict, got {_type_name(patch)}")
    if not patch:
        raise InvalidInputError(f"patch is empty; give at least one of {', '.join(allowed)}")
    unknown = sorted(str(key) for key in patch if key not in allowed)
    if unknown:
        raise InvalidInputError(
            f"patch has unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed)} ({hint})")
    return patch


def clean_relation_type(value: object) -> RelationType:
    if isinstance(value, RelationType):
        return value
    if type(value) is str:  # (the Enum's own error would repr any other value, at any depth)
        with contextlib.suppress(ValueError):
            return RelationType(value)
    allowed = ", ".join(repr(m.value) for m in RelationType)
    raise InvalidInputError(f"relation must be a RelationType or one of {allowed}, got {shown(value)}")


def finite_number(value: object) -> float | None:
    """``value`` as a float when it is an int or a float (not a bool) that is finite as a
    float, else None. An int beyond the float range (``10**400``) is not one: ``float()`` and
    ``math.isfinite`` raise OverflowError on it, which no caller should see."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def clean_weight(value: object) -> float:
    number = finite_number(value)
    if number is None:
        raise InvalidInputError(f"weight must be a finite number, got {shown(value)}")
    return number


def clean_int(value: object, field: str, minimum: int, maximum: int = _MAX_INT) -> int:
    """An int (not a bool) in [``minimum``, ``maximum``]; the default maximum, 2**63 - 1, keeps
    every count and index one that slices, ``range`` and C code take (a larger int raises
    OverflowError there)."""
    if type(value) is not int or value < minimum or value > maximum:
        raise InvalidInputError(f"{field} must be an integer from {minimum} to {maximum}, got {shown(value)}")
    return value


def clean_choice(value: object, field: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidInputError(f"{field} must be one of {', '.join(map(repr, choices))}, got {shown(value)}")
    return value


def clean_flag(value: object, field: str) -> bool:
    if type(value) is not bool:
        raise InvalidInputError(f"{field} must be True or False, got {shown(value)}")
    return value


def clean_path(value: object, field: str) -> Path:
    """A file-system path: a non-empty str or os.PathLike that the OS can take as a name (no
    NUL byte, no lone surrogate but those of ``surrogateescape``, no part over 255 bytes)."""
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if type(path) is not str or not path:
        raise InvalidInputError(f"{field} must be a file path (a non-empty str or os.PathLike), got {shown(value)}")
    if "\0" in path:
        raise InvalidInputError(f"{field} {shown(path)} contains a NUL byte, which no file name may hold")
    try:
        encoded = os.fsencode(path)
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{field} {shown(path)} cannot be a file name: it holds a lone surrogate "
                                f"U+{ord(path[exc.start]):04X} at index {exc.start}") from None
    if any(len(part) > _NAME_MAX for part in encoded.split(b"/")):
        raise InvalidInputError(f"{field} {shown(path)} has a part longer than {_NAME_MAX} bytes, "
                                f"which file systems refuse; use a shorter name")
    return Path(path)


def check_parent(target: Path, what: str) -> None:
    """Raise unless the directory that is to hold ``target`` exists: InvalidInputError when a
    part of its path is a file (``notes.txt/snap.tar``), NotFoundError when it is missing;
    ``what`` leads the message ("cannot write the snapshot out/x.tar")."""
    parent = target.parent
    if parent.is_dir():
        return
    blocking = next((part for part in (parent, *parent.parents) if os.path.lexists(part)), None)
    if blocking is not None and not blocking.is_dir():
        raise InvalidInputError(f"{what}: {blocking} is a file, not a directory; pass a path inside a directory")
    raise NotFoundError(f"{what}: the directory {parent} does not exist; create it first")


def clean_seconds(value: object, field: str) -> float:
    """A duration in seconds: an int or float >= 0 (not a bool; infinity waits for ever, but an
    int too large for a float is refused rather than raising OverflowError)."""
    number = None
    if type(value) is int or type(value) is float:
        with contextlib.suppress(OverflowError):
            number = float(value)
    if number is None or not number >= 0:
        raise InvalidInputError(f"{field} must be a number of seconds >= 0, got {shown(value)}")
    return number


def clean_provenance(value: object, field: str = "provenance") -> str:
    """One of ``kwtree.models.PROVENANCES`` (who said a memory's text)."""
    if type(value) is not str or value not in PROVENANCES:
        raise InvalidInputError(f"{field} must be one of {', '.join(map(repr, PROVENANCES))} (who said the text), "
                                f"got {shown(value)}")
    return value


def clean_provenances(value: object, field: str = "provenance") -> frozenset[str] | None:
    """A read's provenance filter: None (no filter), one provenance, or a non-empty list of
    them (each checked by ``clean_provenance``, naming ``field[i]``)."""
    if value is None:
        return None
    if isinstance(value, str):
        return frozenset((clean_provenance(value, field),))
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidInputError(f"{field} must be a provenance ({', '.join(map(repr, PROVENANCES))}) or a non-empty "
                                f"list of them, got {shown(value)}")
    return frozenset(clean_provenance(item, f"{field}[{index}]") for index, item in enumerate(value))
