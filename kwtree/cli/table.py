"""The rows of the ``kwtree`` command table and the argument parsers they share.

A :class:`Command` adapts one library call; ``arg`` describes one of its arguments as
argparse takes it. The table itself is ``kwtree.cli.main.COMMANDS``; commands of one area
(agent memory, ...) may live in their own module as a tuple of rows that ``main`` adds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kwtree.errors import InvalidInputError

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree

__all__ = ["Arg", "Command", "Show", "arg", "parse_as_of", "parse_depth", "parse_metadata", "patch_of", "read_content"]


def parse_as_of(text: str) -> str | float:
    """An op id, epoch seconds, or an ISO-8601 time (without a zone: local time)."""
    from kwtree.engine.events import is_op_id

    if is_op_id(text):
        return text
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return seconds
    try:
        return datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an op id (32 hex digits), epoch seconds or an ISO-8601 time"
        ) from None


def parse_depth(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def parse_metadata(text: str | None, flag: str = "--metadata") -> dict[str, Any] | None:
    """Parse ``--metadata`` (or ``flag``, another JSON-object option); a bad value is a
    library-style error (exit 1), like bad input."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{flag} is not valid JSON ({exc}); pass an object like '{{\"k\": 1}}'") from None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{flag} must be a JSON object like '{{\"k\": 1}}', got {text!r}")
    return value


def read_content(text: str) -> str:
    return sys.stdin.read().rstrip("\n") if text == "-" else text


def patch_of(args: argparse.Namespace, fields: Sequence[str]) -> dict[str, Any]:
    """The patch of an update: the fields whose options were given."""
    patch = {field: getattr(args, field) for field in fields if getattr(args, field) is not None}
    if "metadata" in patch:
        patch["metadata"] = parse_metadata(patch["metadata"])
    return patch


Arg = tuple[tuple[str, ...], dict[str, Any]]
Show = Callable[[Any, "KeywordTree", argparse.Namespace], None]


def arg(*flags: str, **options: Any) -> Arg:
    return flags, options


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand. ``call`` makes the one library call and returns what to print;
    ``opens`` says how DIR is opened: "read" (read-only, never created), "write" (must
    already be a tree), "create" (created when new) or "none" (no DIR)."""

    name: str
    mirrors: str  # the library call it adapts
    summary: str
    _: dataclasses.KW_ONLY
    example: str  # the arguments after ``kwtree NAME`` in the help's example line
    opens: str
    call: Callable[[Any, argparse.Namespace], Any]
    args: tuple[Arg, ...] = ()
    show: Show | None = None  # the text printer, when show_text does not fit
    #: The dests of the arguments that take a keyword: each also takes a name, an alias or a
    #: path, resolved to an id (``KeywordTree.resolve``) before the call.
    refs: tuple[str, ...] = ()
    #: The dests that take a keyword as ``refs`` do, or a memory id or a link or relation key.
    entity_refs: tuple[str, ...] = ()
    #: Long work: it reports progress on stderr (``kwtree.cli.progress``) and takes ``--quiet``.
    long: bool = False
