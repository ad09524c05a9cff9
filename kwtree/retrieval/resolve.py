"""Which keyword a person means: an id, a name, an alias or a path, resolved to one keyword id.

``resolve(state, ref, visible)`` reads ``ref`` in this order and stops at the first that names
live keywords (only those in ``visible``, when given: a scoped read never resolves to a keyword
outside its scopes):

1. a keyword id, as it is (a deleted one too, outside a scoped read, so that the call it is
   given to says when it was deleted);
2. a name or an alias, compared after normalisation (case, width, punctuation and spacing
   ignored, as ``find_keywords`` compares them), so a name holding a ``/`` ("CI/CD") is found
   whole;
3. a path, its parts separated by ``/`` or ``›`` ("Work/Tools/Python", "Work › Tools ›
   Python"), each part a name or an alias: the keywords named by its last part whose parents,
   going up, are named by the parts before it. A path need not start at the root ("Tools/Python"
   will do); a leading "root" part is the root itself.

One keyword: its id. Several: InvalidInputError listing each with its path, so the caller can
pick one by path. None: NotFoundError naming the closest names the tree holds (``kwtree find``).

``resolve_entity`` is the same for an argument that also takes a memory or a link or relation
key (``kwtree.models.entity_key``: ids joined by ``/``): anything of the form of an id or of a
key is taken as it is (memories have no names), and the call it is given to says what is wrong
with it.
"""

from __future__ import annotations

import difflib
import re

from kwtree.engine.events import is_op_id
from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.models import ROOT_ID
from kwtree.normalize import normalize_name
from kwtree.validate import shown

__all__ = ["MAX_LISTED", "resolve", "resolve_entity"]

#: At most this many candidates or suggestions are named in an error.
MAX_LISTED = 8
_SEPARATOR = re.compile(r"\s*(?:/|›)\s*")


def _path_text(state: State, keyword_id: str) -> str:
    return " › ".join(state.keywords[kid].name for kid in state.ancestry(keyword_id) if kid != ROOT_ID)


def _named(state: State, part: str, visible: set[str] | None) -> list[str]:
    if part.strip().casefold() == ROOT_ID:  # a path may start at the root
        return [ROOT_ID]
    return [kid for kid in state.lookup_names(normalize_name(part)) if visible is None or kid in visible]


def _by_path(state: State, parts: list[str], visible: set[str] | None) -> list[str]:
    found = []
    for kid in _named(state, parts[-1], visible):
        node, fits = kid, True
        for part in reversed(parts[:-1]):
            parent = state.keywords[node].parent_id
            if parent is None or parent not in _named(state, part, None):
                fits = False
                break
            node = parent
        if fits:
            found.append(kid)
    return found


def resolve(state: State, ref: str, visible: set[str] | None = None, field: str = "keyword_id") -> str:
    """The id of the one live keyword ``ref`` names (see the module's docstring), among
    ``visible`` when given; ``field`` names the argument in the errors."""
    if (ref in state.keywords and visible is None) or (state.live_keyword(ref) is not None and visible
                                                       and ref in visible):
        return ref  # an id: a deleted one too, so that the call says when and by what it was deleted
    found = _named(state, ref, visible)
    parts = [part for part in _SEPARATOR.split(ref.strip()) if part]
    if not found and len(parts) > 1:
        found = _by_path(state, parts, visible)
    if len(found) == 1:
        return found[0]
    if found:
        listed = "; ".join(f"{_path_text(state, kid)} ({kid})" for kid in found[:MAX_LISTED])
        more = f" and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
        raise InvalidInputError(f"{field}: {shown(ref)} names {len(found)} keywords: {listed}{more}; "
                                f"give a path or an id")
    names = {normalize_name(keyword.name): keyword.name for kid, keyword in state.keywords.items()
             if not keyword.deleted and kid != ROOT_ID and (visible is None or kid in visible)}
    close = difflib.get_close_matches(normalize_name(parts[-1] if parts else ref), list(names), n=MAX_LISTED,
                                      cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(names[key]) for key in close)}?" if close else \
        "; `kwtree find` and `kwtree tree` show the names"
    raise NotFoundError(f"{field}: no keyword has the id, name, alias or path {shown(ref)}{hint}")


def resolve_entity(state: State, ref: str, visible: set[str] | None = None, field: str = "id") -> str:
    """``ref`` as it is when it has the form of an id or of a link or relation key, else the
    keyword ``resolve`` finds for it (see the module's docstring)."""
    ids = ref.split("/")
    if ref == ROOT_ID or (len(ids) <= 3 and all(is_op_id(part) or part == ROOT_ID for part in ids[:2])):
        return ref
    return resolve(state, ref, visible, field)
