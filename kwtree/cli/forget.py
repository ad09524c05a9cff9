"""The ``kwtree forget`` command: erase an info, a keyword with its subtree, or a scope, and
print what was erased, what was kept and what kwtree cannot reach (``KeywordTree.forget``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kwtree.cli.table import Command, arg
from kwtree.errors import InvalidInputError

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree
    from kwtree.ops.erasure import ForgetReport

__all__ = ["COMMANDS", "show_report"]


def _forget(tree: KeywordTree, args: argparse.Namespace) -> Any:
    if (args.id is None) == (args.scope is None):
        raise InvalidInputError("kwtree forget takes exactly one target: an ID, or --scope SCOPE (e.g. user:alice)")
    from kwtree.cli import rendezvous, server  # (not at import: `kwtree --help` loads no server)

    report = tree.forget(args.id, scope=args.scope)
    where = rendezvous.endpoint(args.dir)
    if where is not None:  # the directory's server (kwtree serve) drops the erased texts now
        server.refresh(where)
    return report


def show_report(report: ForgetReport, tree: KeywordTree, args: argparse.Namespace) -> None:
    """The report as text: what was erased, kept, rewritten and purged, then what is out of reach."""
    if report.op_id is None:
        print(f"{report.target} was forgotten already (operation {report.already_forgotten_by}); "
              f"finished erasing it from {args.dir}")
    else:
        print(f"forgot {report.target} in {args.dir} (operation {report.op_id}): {len(report.infos)} info(s) and "
              f"{len(report.keywords)} keyword(s) erased, {report.links} link(s) and {report.relations} "
              f"relation(s) deleted")
    for info_id in report.infos:
        print(f"  erased info\t{info_id}")
    for keyword_id in report.keywords:
        print(f"  erased keyword\t{keyword_id}")
    for kept in report.kept:
        print(f"  kept info\t{kept.info_id}\t{kept.why} ({', '.join(kept.keyword_ids)})")
    for keyword_id in report.aliases_dropped:
        print(f"  alias dropped\t{keyword_id}\tit named an erased keyword (a merge gave it)")
    for keyword_id in report.abstracts_dropped:
        print(f"  abstract dropped\t{keyword_id}\tit summarised what was erased (`kwtree abstracts` rebuilds it)")
    rewrite = (f"rewrote {report.rows_rewritten:,} row(s) and {report.audits_scrubbed:,} audit(s) of "
               f"{report.operations:,} operations ({report.bytes_before:,} -> {report.bytes_after:,} bytes)"
               if report.log_rewritten else "held no text to erase any more")
    print(f"log: {rewrite}; caches: full-text index removed (rebuilt by the next search), "
          f"{report.vectors_blanked} vector row(s) erased, {report.outbox_items_dropped} outbox item(s) dropped"
          + (f", {len(report.quarantine_removed)} quarantined file(s) removed" if report.quarantine_removed else ""))
    print("kwtree cannot erase these copies:")
    for far in report.unreachable:
        where = f" ({', '.join(far.paths)})" if far.paths else ""
        print(f"  {far.what}{where}: {far.how}")


COMMANDS: tuple[Command, ...] = (
    Command(
        "forget", "KeywordTree.forget",
        "erase an info, a keyword with its subtree, or a scope from the tree, its log and its caches",
        example='./memory-copy "$INFO"', opens="write", call=_forget, long=True,
        entity_refs=("id",),
        args=(arg("id", nargs="?", metavar="ID",
                  help="the info (its id) or keyword (its id, name or path) to forget, a keyword with its subtree"),
              arg("--scope", metavar="SCOPE", help="forget this scope's whole subtree instead, e.g. user:alice")),
        show=show_report,
    ),
)
