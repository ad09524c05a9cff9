"""The commands that look after a tree's directory as a whole: ``compact``, ``reindex``,
``snapshot`` and ``restore``, ``verify`` and ``repair``, ``upgrade`` and ``migrate``.

Rows of the command table (``kwtree.cli.table.Command``) that ``kwtree.cli.main.COMMANDS``
takes in. Verify, repair, upgrade and migrate work on the directory, not on an open tree (a
damaged log cannot be opened), so they open nothing beforehand.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import kwtree
from kwtree.cli.table import Command, arg

if TYPE_CHECKING:
    from kwtree.ops.verify import Report

__all__ = ["COMMANDS"]

LOCK_TIMEOUT = arg("--lock-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="how long to wait for the writer lock (default: 10)")


def _restore(_: None, args: argparse.Namespace) -> None:
    done = kwtree.restore(args.snapshot, args.dir, progress=args.progress)
    if args.json:
        print(json.dumps(done, indent=2))
        return
    replaced = "; replaced the tree that was there" if done["replaced"] else ""
    print(f"restored {done['data_dir']} from {done['snapshot']}: {done['operations']:,} operations up to "
          f"{done['last_op_id']} ({done['keywords']:,} keywords, {done['infos']:,} infos){replaced}")


def _show_report(report: Report, args: argparse.Namespace, advice: str) -> None:
    print(json.dumps(report.to_json(), ensure_ascii=False, indent=2) if args.json else report.to_text())
    report.check(advice)


def _verify(_: None, args: argparse.Namespace) -> None:
    advice = f"`kwtree repair {args.dir}` moves damaged lines to quarantine/"
    report = kwtree.verify_directory(args.dir, head=args.head)
    if args.chain and not args.json:
        # What a user records elsewhere (a ticket, a notebook, another machine) and checks later.
        print(f"head\t{report.head or '-'}\t{report.head_op or '-'}\t{report.operations} operation(s)")
        for note in report.chain_notes:
            print(f"note\t{note}")
        for finding in report.findings:
            if (finding.code.startswith("chain-") and finding.code != "chain-note") or finding.severity == "error":
                print(finding)
        report.check(advice)
        return
    _show_report(report, args, advice)


def _repair(_: None, args: argparse.Namespace) -> None:
    report = kwtree.repair_directory(args.dir, lock_timeout=args.lock_timeout)
    if any(finding.code == "forget-unfinished" for finding in report.errors):
        # Finishing a forget's erasure purges the caches too: the tree's work (its open finishes
        # it already); KeywordTree.repair then reports on the directory as it is now.
        with kwtree.KeywordTree(args.dir, worker=False, lock_timeout=args.lock_timeout) as tree:
            report = tree.repair()
    _show_report(report, args, "repair could not fix them (see docs/operations.md#verify-and-repair)")


def _upgrade(_: None, args: argparse.Namespace) -> None:
    from kwtree.ops.upgrade import upgrade_directory

    done = upgrade_directory(args.dir, lock_timeout=args.lock_timeout, progress=args.progress)
    if args.json:
        print(json.dumps({"directory": done.directory, "format_before": done.format_before,
                          "format_after": done.format_after, "segments": done.segments,
                          "operations": done.operations, "report": done.report.to_json()}, indent=2))
    else:
        print(done)
    done.report.check("the upgraded log does not verify (see docs/operations.md#verify-and-repair)")


def _migrate(_: None, args: argparse.Namespace) -> None:
    from kwtree.ops.migrate import migrate

    done = migrate(args.dir, args.to, lock_timeout=args.lock_timeout, progress=args.progress)
    if args.json:
        print(json.dumps({"source": done.source, "target": done.target, "operations": done.operations,
                          "bytes": done.bytes, "last_op_id": done.last_op_id, "seconds": round(done.seconds, 3)},
                         indent=2))
        return
    print(f"copied {done.operations} operations ({done.bytes:,} bytes, the last {done.last_op_id}) from "
          f"{done.source} to {done.target} in {done.seconds:.2f} s; {done.source} is unchanged")
    if done.target.startswith(("postgresql://", "postgres://")):
        print("open it with KeywordTree(<a new directory>, log=...) or `kwtree <command> <that directory>` once "
              "a tree opened it there (docs/scaling.md)")


COMMANDS: tuple[Command, ...] = (
    Command(
        "compact", "KeywordTree.compact",
        "rewrite the log keeping each live entity once, at its current version (--keep-history: every operation once)",
        example="./memory", opens="write", call=lambda t, a: t.compact(keep_history=a.keep_history), long=True,
        args=(arg("--keep-history", action="store_true",
                  help="keep every operation (history, as_of and undo stay); drop only torn and duplicate rows"),),
        show=lambda r, t, a: print(
            f"compacted {a.dir}: {r.rows_before:,} -> {r.rows_after:,} rows, {r.bytes_before:,} -> {r.bytes_after:,} "
            f"bytes, {r.operations_before:,} -> {r.operations_after:,} operations in {r.seconds:.2f} s"),
    ),
    Command(
        "reindex", "KeywordTree.reindex",
        "rebuild the full-text index from the log now (--vectors: also embed every text again); the log is unchanged",
        example="./memory", opens="write", call=lambda t, a: t.reindex(vectors=a.vectors), long=True,
        args=(arg("--vectors", action="store_true",
                  help="also delete this tree's embeddings and embed every text again (waits until done)"),),
        show=lambda r, t, a: print(f"reindexed {a.dir}: {r['indexed']:,} text(s) indexed, {r['embedded']:,} embedded "
                                   f"in {r['seconds']:.2f} s"),
    ),
    Command(
        "snapshot", "KeywordTree.snapshot",
        "write the tree (or, with --as-of, a past state) to ONE archive file and print its path",
        example="./memory --out memory.kwsnap", opens="read", call=lambda t, a: t.snapshot(a.out),
        args=(arg("--out", type=Path, metavar="FILE",
                  help="where to write it; it must not exist (default: DIRNAME-<last op id>.kwsnap beside DIR)"),),
    ),
    Command(
        "restore", "kwtree.restore",
        "restore SNAPSHOT into DIR: a new or empty directory, or an existing tree, which it replaces "
        "(the archive is checked in full before DIR is touched)",
        example="memory.kwsnap ./memory-restored", opens="none",
        call=_restore, long=True,
        args=(arg("snapshot", type=Path, metavar="SNAPSHOT", help="a file `kwtree snapshot` wrote"),
              arg("dir", type=Path, metavar="DIR",
                  help="a new or empty directory, or an existing tree to replace (close what has it open first)"),
              arg("--json", action="store_true", help="print one JSON document instead of text")),
    ),
    # Both work on the directory, not on an open tree: a damaged log cannot be opened.
    Command(
        "verify", "kwtree.verify_directory (KeywordTree.verify)",
        "check DIR's log, manifest and caches without changing anything; exit 1 if there is an error",
        example="./memory", opens="none",
        call=_verify,
        args=(arg("dir", type=Path, metavar="DIR", help="the tree's directory (read only; it need not open)"),
              arg("--json", action="store_true", help="print the report as one JSON document"),
              arg("--chain", action="store_true",
                  help="print the head digest of the hash chain (record it elsewhere) and only chain findings "
                       "and errors"),
              arg("--head", metavar="DIGEST", default=None,
                  help="a head digest recorded earlier: exit 1 unless the log still holds that operation and "
                       "everything before it unchanged")),
    ),
    Command(
        "repair", "kwtree.repair_directory (KeywordTree.repair)",
        "move DIR's damaged operations and torn tail to quarantine/ (nothing is deleted), retire links naming "
        "nothing, finish the erasure of an interrupted forget, and have the caches rebuilt",
        example="./memory", opens="none",
        call=_repair,
        args=(arg("dir", type=Path, metavar="DIR", help="the tree's directory"),
              arg("--json", action="store_true", help="print the report as one JSON document"),
              LOCK_TIMEOUT),
    ),
    Command(
        "upgrade", "kwtree.ops.upgrade.upgrade_directory",
        "move DIR to the current log format (checksums, sealed segments); never done without this command",
        example="./memory", opens="none",
        call=_upgrade, long=True,
        args=(arg("dir", type=Path, metavar="DIR", help="the tree's directory (it must verify without errors)"),
              arg("--json", action="store_true", help="print what was done as one JSON document"),
              LOCK_TIMEOUT),
    ),
    Command(
        "migrate", "kwtree.ops.migrate.migrate",
        "copy DIR's log, operation ids kept, into an empty PostgreSQL log (a postgresql:// URL) or a new directory; "
        "DIR is unchanged",
        example="./memory --to ./memory-moved", opens="none",
        call=_migrate, long=True,
        args=(arg("dir", type=Path, metavar="DIR", help="the tree's directory (its own log, or a PostgreSQL one)"),
              arg("--to", required=True, metavar="TARGET",
                  help="a postgresql:// URL (?tree=NAME names the log) or a new or empty directory"),
              arg("--json", action="store_true", help="print what was done as one JSON document"),
              LOCK_TIMEOUT),
    ),
)
