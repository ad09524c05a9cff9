"""The keyword-abstract command of ``kwtree``: ``abstracts`` (``KeywordTree.abstracts``).

A row of the command table (``kwtree.cli.table.Command``) that ``kwtree.cli.main.COMMANDS``
takes in: it opens the tree, makes its one call and prints the result.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from kwtree.cli.table import Command, arg

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree
    from kwtree.memory.abstracts import KeywordAbstract

__all__ = ["COMMANDS"]


def _show(result: list[KeywordAbstract], tree: KeywordTree, args: argparse.Namespace) -> None:
    built = [item for item in result if item.built]
    if built:
        print(f"{built[0].op_id}\tbuilt {len(built)} abstract(s)")
    elif not result:
        print("no keyword holds memories here: nothing to summarise")
    for item in result:
        state = "built" if item.built else ("stale" if item.stale else "fresh")
        print(f"{item.keyword_id}\t{item.name}\t{state}\t{item.by}\t{item.infos} memories")
        print(f"  {item.abstract}")
        if item.note:
            print(f"  note: {item.note}")


COMMANDS: tuple[Command, ...] = (
    Command(
        "abstracts", "KeywordTree.abstracts",
        "build the missing or stale keyword abstracts (one operation) and list them; recall uses them as signposts",
        example="./memory --scope user:alice", opens="write",
        call=lambda t, a: t.memory.abstracts(a.keyword_id, scope=a.scope, rebuild=a.rebuild),
        args=(arg("keyword_id", metavar="ID", nargs="?", default=None,
                  help="only this keyword's subtree (default: the whole tree)"),
              arg("--scope", action="append", metavar="SCOPE",
                  help="only keywords inside this scope, e.g. user:alice (repeatable: any of them)"),
              arg("--rebuild", action="store_true", help="rebuild every abstract, fresh ones too")),
        refs=("keyword_id",),
        show=_show,
    ),
)
