"""Reading an outline file for ``kwtree load`` (the format: ``kwtree.writes.outline``; the
quickstart's ``data/quickstart.json`` is one)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from kwtree.errors import InvalidInputError
from kwtree.facade.tree import KeywordTree
from kwtree.writes.outline import LoadedOutline, check_outline

__all__ = ["LoadedOutline", "load_outline", "read_outline"]


def read_outline(path: str | Path) -> dict[str, Any]:
    """Parse and check the shape of an outline file (InvalidInputError says what is wrong)."""
    outline = _parsed(path)
    with _named(path):
        check_outline(outline)
    return outline  # type: ignore[no-any-return]


def load_outline(tree: KeywordTree, path: str | Path) -> LoadedOutline:
    """Add the outline file at ``path`` to the tree in one operation (``KeywordTree.load_outline``,
    which checks it: a file wrong anywhere writes nothing); returns the new ids by ref."""
    outline = _parsed(path)
    with _named(path):
        return tree.load_outline(outline)


def _parsed(path: str | Path) -> Any:
    try:
        return orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise InvalidInputError(f"cannot read outline {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"outline {path} is not valid JSON: {exc}") from None


@contextlib.contextmanager
def _named(path: str | Path) -> Iterator[None]:
    """An InvalidInputError of the block says which file it is about."""
    try:
        yield
    except InvalidInputError as exc:
        exc.args = (f"outline {path}: {exc.args[0]}", *exc.args[1:])
        raise
