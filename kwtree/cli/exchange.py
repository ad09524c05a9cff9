"""The commands that carry a tree's content in and out of its directory: ``export`` and
``import`` (a JSON file, or a readable outline), and ``git`` / ``merge-driver`` (versioning the
directory with git, ``kwtree.git``).

Rows of the command table (``kwtree.cli.table.Command``) that ``kwtree.cli.main.COMMANDS``
takes in.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import kwtree
from kwtree.cli.table import Command, arg
from kwtree.models import DURABILITY_MODES

__all__ = ["COMMANDS"]


def _import(_: None, args: argparse.Namespace) -> None:
    with kwtree.KeywordTree.import_json(args.file, args.dir, durability=args.durability, worker=False,
                                        progress=args.progress) as tree:
        counts, op_id = tree.tree_metrics(), tree.last_op_id
    print(f"imported {counts['keywords']} keywords, {counts['infos']} infos, {counts['links']} links and "
          f"{counts['relations']} relations into {args.dir} (operation {op_id})")


COMMANDS: tuple[Command, ...] = (
    Command(
        "export", "KeywordTree.export",
        "write the live tree to FILE: json keeps everything (kwtree import reads it), markdown is a readable outline",
        example="./memory memory.json", opens="read", call=lambda t, a: t.export(a.file, a.format), long=True,
        args=(arg("file", type=Path, metavar="FILE", help="the file to write (replaced whole once it is complete)"),
              arg("--format", choices=("json", "markdown"), default="json", help="default: json")),
        show=lambda r, t, a: print(f"exported {r['keywords']} keywords, {r['infos']} infos, {r['links']} links and "
                                   f"{r['relations']} relations to {r['path']}"),
    ),
    # The import makes its own tree (DIR must be new or empty), so it opens nothing beforehand.
    Command(
        "import", "KeywordTree.import_json",
        "create a tree in DIR (new or empty) from a JSON export FILE, as one operation",
        example="memory.json ./memory-copy", opens="none",
        call=_import, long=True,
        args=(arg("file", type=Path, metavar="FILE", help="a file written by kwtree export (json)"),
              arg("dir", type=Path, metavar="DIR", help="a new or empty directory for the tree"),
              arg("--durability", choices=DURABILITY_MODES, default="full",
                  help="full (default): synced to disk before the command returns; none: skip the sync")),
    ),
    Command(
        "git", "kwtree.git.setup",
        "init: make DIR ready for git (.gitignore, .gitattributes, the kwtree merge driver; "
        "git init when DIR is in no repository)",
        example="init ./memory", opens="none",
        call=lambda _, a: print(kwtree.git.setup(a.dir)),
        args=(arg("action", choices=("init",), help="init: set DIR up (idempotent; run it in every clone)"),
              arg("dir", type=Path, metavar="DIR", help="the tree's directory")),
    ),
    Command(
        "merge-driver", "kwtree.git.merge_files",
        "merge two versions of a log segment into OURS (git runs this for log/*.jsonl; exit 1 = conflict)",
        example='/dev/null "$(ls ./memory/log/*.jsonl | head -n 1)" /dev/null', opens="none",
        call=lambda _, a: print(kwtree.git.merge_files(a.base, a.ours, a.theirs, path=a.path)),
        args=(arg("base", metavar="BASE", help="the common ancestor's version (git's %%O)"),
              arg("ours", metavar="OURS", help="our version, replaced by the merge (git's %%A)"),
              arg("theirs", metavar="THEIRS", help="their version (git's %%B)"),
              arg("--path", metavar="PATH", help="the segment's path in the repository, for messages (git's %%P)")),
    ),
)
