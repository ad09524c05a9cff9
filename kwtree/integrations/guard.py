"""Where a tool call may reach: the scope checks of :class:`~kwtree.integrations.toolbox.ToolBox`.

A scope is a subtree (``kwtree.retrieval.scopes``). A :class:`ScopeGuard` answers, through the
tree's public reads only, whether a keyword, a memory or an operation lies inside the scopes a
call is held to, and refuses the call otherwise with a ``NotFoundError`` that says no more
than "not in this scope" (a pinned model learns nothing of what lies outside).

- A **keyword** is inside when its path runs through a scope's keyword.
- A **memory** is visible inside when one of its keywords is; it is *wholly* inside when every
  keyword it is filed under is. Changing or erasing a memory needs it wholly inside: another
  scope must not lose or see changed what it also holds.
- An **operation** may be undone inside a scope when history shows it wholly inside (every
  change was inside the scope when it was written) and everything the undo would write is
  inside, as it is now and as the undo leaves it (``KeywordTree.undo(scope=...)`` judges that
  under the writer lock: an undo rewrites entities as they are today, wherever they have gone
  since, and also retires the links and relations of a keyword it deletes).

The checks read the tree as it is when the call starts; a write another process makes in that
same instant (moving a keyword out of the scope) is not excluded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.models import Keyword
from kwtree.retrieval.scopes import clean_scope, clean_scopes, scope_specs

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree

__all__ = ["ScopeGuard"]


class ScopeGuard:
    """The scope checks of one toolbox over ``tree``; ``pinned`` (a checked scope path, or
    None) holds every call to that scope and the scopes nested in it."""

    def __init__(self, tree: KeywordTree, pinned: str | None) -> None:
        self.tree = tree
        self.pinned = pinned

    # --- which scopes a call is held to ------------------------------------------------------

    def inside_pin(self, scope: str, field: str) -> str:
        """``scope`` when the pin allows it (it is the pin or nested in it); InvalidInputError."""
        if self.pinned is not None and scope != self.pinned and not scope.startswith(self.pinned + "/"):
            raise InvalidInputError(f"{field} {scope!r} is outside this server's scope {self.pinned!r}; "
                                    f"use {self.pinned!r} or a scope nested in it")
        return scope

    def read_scopes(self, scope: object) -> tuple[str, ...] | None:
        """The scopes a read is held to: the call's (inside the pin), the pin, or None (all)."""
        scopes = clean_scopes(scope)
        if scopes is None:
            return None if self.pinned is None else (self.pinned,)
        return tuple(self.inside_pin(one, "scope") for one in scopes)

    def write_scope(self, scope: object) -> str | None:
        """The scope a write is held to: the call's (inside the pin), the pin, or None."""
        if scope is None:
            return self.pinned
        return self.inside_pin(clean_scope(scope), "scope")

    # --- what lies inside --------------------------------------------------------------------

    def tops(self, scopes: Iterable[str]) -> set[str]:
        """The ids of the keywords holding ``scopes`` (those that exist)."""
        return {keyword.id for keyword in map(self.tree.scope_keyword, scopes) if keyword is not None}

    def keyword_inside(self, keyword_id: str, tops: set[str]) -> bool:
        """Whether the live keyword lies under one of ``tops`` (False for an unknown or deleted one)."""
        try:
            return any(keyword.id in tops for keyword in self.tree.get_path(keyword_id))
        except (NotFoundError, InvalidInputError):
            return False

    def info_inside(self, info_id: str, tops: set[str], *, wholly: bool = False) -> bool:
        """Whether the live memory is filed under a keyword inside ``tops`` (``wholly``: only
        under keywords inside them)."""
        try:
            filed = [keyword.id for keyword, _ in self.tree.get_keywords_of_info(info_id)]
        except (NotFoundError, InvalidInputError):
            return False
        inside = [self.keyword_inside(keyword_id, tops) for keyword_id in filed]
        return bool(inside) and (all(inside) if wholly else any(inside))

    def is_keyword(self, entity_id: str) -> bool:
        try:
            self.tree.get_keyword(entity_id)
        except (NotFoundError, InvalidInputError):
            return False
        return True

    def require(self, entity_id: str, scopes: Sequence[str] | None, field: str, kind: str = "keyword", *,
                wholly: bool = False, label: str | None = None) -> None:
        """NotFoundError unless the keyword (``kind`` "keyword") or memory ("memory") is inside
        ``scopes`` (None: anywhere), the memory ``wholly`` when asked; the message names
        ``label`` (default: the kind), so that one may say no more than "keyword or memory"."""
        if scopes is None:
            return
        tops = self.tops(scopes)
        inside = (self.keyword_inside(entity_id, tops) if kind == "keyword"
                  else self.info_inside(entity_id, tops, wholly=wholly))
        if not inside:
            raise NotFoundError(f"{field}: no {label or kind} {entity_id} in scope {' or '.join(map(repr, scopes))}")

    def require_undoable(self, op_id: str, scope: str) -> None:
        """NotFoundError unless history shows operation ``op_id`` wholly inside ``scope`` (every
        change was inside when it was written). Reads the whole history twice. What the undo
        itself would write is judged by ``KeywordTree.undo(scope=...)``, under the writer lock."""
        whole = next((op for op in self.tree.history() if op.op_id == op_id), None)
        seen = next((op for op in self.tree.history(scope=scope) if op.op_id == op_id), None)
        if whole is None or seen is None or len(seen.changes) != len(whole.changes):
            raise NotFoundError(f"op_id: no operation {op_id} wholly inside scope {scope!r}")

    # --- creating inside ---------------------------------------------------------------------

    def create_in_scope(self, scope: str, name: str, aliases: list[str] | None, description: str) -> Keyword:
        """Create ``name`` under the keyword of ``scope``, creating the scope's keywords that are
        missing (``scope_specs``), in one operation."""
        specs, inside = scope_specs(scope, self.tree.scope_keyword)
        specs.append({"name": name, "aliases": aliases or [], "description": description, **inside})
        return self.tree.batch_create_keywords(specs)[-1]

