"""Scopes: whose memories a read may see.

A scope names a subtree of the tree: ``"user:alice"``, ``"agent:coder"``, ``"run:42"``, or a
path of them joined by ``/`` (``"user:alice/run:42"``, a run of alice's). Each segment is
``kind:name``: the kind a lowercase word (letters, digits, ``_``, ``-``; at most 32
characters) and the name any text without ``/``, control characters or surrounding
whitespace. The scope ``"user:alice"`` lives in the keyword named ``user:alice`` under the
root whose metadata ``{"scope": "user:alice"}`` marks it; ``"user:alice/run:42"`` in the
keyword ``run:42`` under it marked ``{"scope": "user:alice/run:42"}``. The marker, not the
name, makes a keyword a scope: a keyword a user names ``user:alice`` is just a keyword.

A read with ``scope=`` sees the live subtrees of the scopes it names (and of the scopes nested
in them) and nothing else; a scope that does not exist yet holds nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError
from kwtree.models import ROOT_ID, Keyword
from kwtree.normalize import normalize_name
from kwtree.validate import shown

__all__ = ["SCOPE_KEY", "clean_scope", "clean_scopes", "scope_keyword", "scope_subtree", "segments"]

#: The metadata key that marks a keyword as a scope; its value is the scope's whole path.
SCOPE_KEY = "scope"
#: At most this many segments in one scope path, and this many scopes in one read.
MAX_DEPTH = 8
MAX_SCOPES = 64
_SEGMENT = re.compile(r"[a-z][a-z0-9_-]{0,31}:[^/\x00-\x1f\x7f]{1,200}")


def clean_scope(scope: object, field: str = "scope") -> str:
    """``scope`` checked (see the module's docstring), as written; InvalidInputError naming
    ``field`` and what is wrong otherwise."""
    if not isinstance(scope, str):
        raise InvalidInputError(f"{field} must be a string such as 'user:alice', got {shown(scope)}")
    parts = scope.split("/")
    if len(parts) > MAX_DEPTH:
        raise InvalidInputError(f"{field} {shown(scope)} nests {len(parts)} scopes; at most {MAX_DEPTH}")
    for part in parts:
        if not _SEGMENT.fullmatch(part) or part != part.strip() or not part.split(":", 1)[1].strip():
            raise InvalidInputError(
                f"{field} {shown(scope)}: each part must be kind:name, the kind a lowercase word "
                f"(a-z, 0-9, _ or -) and the name non-empty text without '/' or control characters "
                f"(e.g. 'user:alice' or 'user:alice/run:42'); {shown(part)} is not"
            )
    return scope


def clean_scopes(scope: object, field: str = "scope") -> tuple[str, ...] | None:
    """None for no scope (every memory), else the scopes of ``scope`` (one string or a list
    or tuple of them), checked and without repeats."""
    if scope is None:
        return None
    if isinstance(scope, str):
        return (clean_scope(scope, field),)
    if not isinstance(scope, (list, tuple)):
        raise InvalidInputError(f"{field} must be a scope string or a list of them, got {shown(scope)}")
    if not scope:
        raise InvalidInputError(f"{field} must name at least one scope (None reads every scope)")
    if len(scope) > MAX_SCOPES:
        raise InvalidInputError(f"{field} names {len(scope)} scopes; at most {MAX_SCOPES}")
    return tuple(dict.fromkeys(clean_scope(one, f"{field}[{i}]") for i, one in enumerate(scope)))


def segments(scope: str) -> list[str]:
    """The scope paths from the outermost down to ``scope``: ``"user:a/run:1"`` gives
    ``["user:a", "user:a/run:1"]``."""
    parts = scope.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def scope_keyword(state: State, scope: str) -> Keyword | None:
    """The live keyword that holds ``scope`` (a checked path), or None while it does not exist."""
    parent = ROOT_ID
    found: Keyword | None = None
    for path in segments(scope):
        name = path.rsplit("/", 1)[-1]
        found = None
        for kid in state.lookup_names(normalize_name(name)):
            keyword = state.keywords[kid]
            if keyword.parent_id == parent and keyword.metadata.get(SCOPE_KEY) == path:
                found = keyword
                break
        if found is None:
            return None
        parent = found.id
    return found


def scope_subtree(state: State, scopes: Iterable[str]) -> set[str]:
    """Ids of the live keywords inside any of ``scopes`` (checked paths); empty when none exists."""
    inside: set[str] = set()
    for scope in scopes:
        keyword = scope_keyword(state, scope)
        if keyword is not None and keyword.id not in inside:
            inside.update(state.subtree(keyword.id))
    return inside
