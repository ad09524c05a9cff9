"""The agent-memory commands of ``kwtree``: ``commit`` (``KeywordTree.commit_session``),
``assemble`` and ``bootstrap`` (the lifecycle hooks of the same names), and ``memories``
(``KeywordTree.list_memories``).

Rows of the command table (``kwtree.cli.table.Command``) that ``kwtree.cli.main.COMMANDS``
takes in; each opens the tree, makes its one call and prints the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwtree.cli.table import Command, arg
from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.memory_schema import CATEGORY, ROUTING_KEY, SUPERSEDED_BY

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree
    from kwtree.memory.commit import CommitResult
    from kwtree.memory.listing import MemoryPage

__all__ = ["COMMANDS", "read_session"]


def read_session(source: str) -> tuple[str | None, Any]:
    """The session id (None when the file names none) and the messages of a session file
    (``-``: stdin): a JSON list of messages, or an object with ``session_id`` and ``messages``."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(f"no session file {source}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"cannot read the session file {source}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"the session file {source} is not JSON ({exc}); it holds a list of "
                                f"{{\"role\", \"content\"}} messages or {{\"session_id\", \"messages\"}}") from None
    if isinstance(data, dict):
        if "messages" not in data:
            raise InvalidInputError(f"the session file {source} is an object without 'messages'")
        session_id = data.get("session_id")
        return (None if session_id is None else session_id), data["messages"]
    return None, data


def _commit(tree: KeywordTree, args: argparse.Namespace) -> CommitResult:
    from kwtree.memory.commit import CommitOptions

    named, messages = read_session(args.session)
    session_id = args.session_id if args.session_id is not None else named
    if session_id is None:
        raise InvalidInputError("the session has no id: pass --session-id, or give the file a 'session_id'")
    return tree.memory.commit_session(messages, session_id=session_id, scope=args.scope,
                               options=CommitOptions(keep_turns=not args.no_turns, dry_run=args.dry_run))


def _show_commit(result: CommitResult, tree: KeywordTree, args: argparse.Namespace) -> None:
    head = "dry run: nothing written" if result.dry_run else (result.op_id or "nothing new: nothing written")
    print(f"{head}\tsession {result.session_id} in {result.scope}\tmessages {result.first_new}..{result.seen}")
    print(f"extracted {result.extracted}: created {result.created}, appended {result.appended}, merged "
          f"{result.merged}, superseded {result.superseded}, skipped {result.skipped}")
    for decision in result.decisions:
        print(f"{decision.info_id or '-'}\t{decision.action}\t{decision.category}/{decision.key}\t{decision.reason}")


def _memories(tree: KeywordTree, args: argparse.Namespace) -> MemoryPage:
    from kwtree.cli.table import parse_metadata

    return tree.memory.list_memories(
        args.scope, category=args.category, under=args.under, since=args.since, until=args.until,
        recorded_since=args.recorded_since, recorded_until=args.recorded_until,
        where=parse_metadata(args.where, "--where"), text=args.text, include_superseded=not args.current,
        newest_first=args.newest, offset=args.page * args.size, limit=args.size)


def _show_memories(page: MemoryPage, tree: KeywordTree, args: argparse.Namespace) -> None:
    from kwtree.cli.output import printable
    from kwtree.retrieval.timeline import happened_day

    if args.count:
        print(page.total)
        return
    for listed in page.memories:
        info = listed.info
        what = "/".join(str(info.metadata[key]) for key in (CATEGORY, ROUTING_KEY) if key in info.metadata)
        mark = "superseded\t" if info.metadata.get(SUPERSEDED_BY) else ""
        text = printable(" ".join(info.content.split()))
        print(f"{info.id}\t{happened_day(info) or '-'}\t{listed.scope}\t{what or '-'}\t{mark}{text}")
    if page.remaining:  # on stderr, so that `| cut -f1` still gives ids
        print(f"memories {page.offset + 1}-{page.offset + len(page.memories)} of {page.total}; "
              f"{page.remaining} more: --page {args.page + 1}", file=sys.stderr)


_SCOPE = arg("--scope", action="append", required=True, metavar="SCOPE",
              help="whose memories, e.g. user:alice (repeatable: any of them)")

COMMANDS: tuple[Command, ...] = (
    Command(
        "commit", "KeywordTree.commit_session",
        "archive a conversation (SESSION: a JSON file, or - for stdin) and turn it into memories, as one operation",
        example=("./memory - --scope user:alice --session-id intro <<< "
                 "'[{\"role\": \"user\", \"content\": \"Hi, my name is Alice. I love green tea.\"}]'"),
        opens="create", call=_commit, show=_show_commit,
        args=(arg("session", metavar="SESSION",
                  help="a JSON list of {\"role\", \"content\"} messages, or {\"session_id\", \"messages\"}"),
              arg("--scope", metavar="SCOPE", help="whose memories, e.g. user:alice (default: user:default)"),
              arg("--session-id", metavar="ID", help="the session's id (default: the file's session_id)"),
              arg("--dry-run", action="store_true", help="print the plan, write nothing"),
              arg("--no-turns", action="store_true", help="do not keep the messages as turn infos")),
    ),
    Command(
        "assemble", "KeywordTree.assemble",
        "the context block for one model call: profile, preferences, memories recalled for QUERY, last session",
        example="./memory \"what tea does Alice like?\" --scope user:alice --max-tokens 300", opens="read",
        call=lambda t, a: t.memory.assemble(a.query, a.scope, a.max_tokens),
        args=(arg("query", metavar="QUERY"), _SCOPE,
              arg("--max-tokens", type=int, default=1500, metavar="N", help="the budget (default: 1500)")),
        show=lambda r, t, a: print(r),
    ),
    Command(
        "bootstrap", "KeywordTree.bootstrap",
        "the cold-start block of a new conversation: profile, preferences, what the last session left open",
        example="./memory --scope user:alice --max-tokens 300", opens="read",
        call=lambda t, a: t.memory.bootstrap(a.scope, a.max_tokens),
        args=(_SCOPE, arg("--max-tokens", type=int, default=800, metavar="N", help="the budget (default: 800)")),
        show=lambda r, t, a: print(r),
    ),
    Command(
        "memories", "KeywordTree.list_memories",
        "list, filter and count the memories of a scope (or of every scope), a page at a time",
        example="./memory --scope user:alice --category preferences --since 2020-01-01", opens="read",
        call=_memories, show=_show_memories,
        args=(arg("--scope", action="append", metavar="SCOPE",
                  help="whose memories, e.g. user:alice (repeatable; default: every scope)"),
              arg("--category", metavar="NAME", help="only this category: profile, preferences, events ..."),
              arg("--under", metavar="KEYWORD", help="only memories linked under this keyword (id, name or path)"),
              arg("--since", metavar="TIME", help="happened at or after TIME (epoch seconds or ISO 8601)"),
              arg("--until", metavar="TIME", help="happened at or before TIME"),
              arg("--recorded-since", metavar="TIME", help="recorded at or after TIME"),
              arg("--recorded-until", metavar="TIME", help="recorded at or before TIME"),
              arg("--where", metavar="JSON", help="metadata filters, mem0's: '{\"key\": \"diet\"}'"),
              arg("--text", metavar="TEXT", help="only memories whose content holds TEXT (any case)"),
              arg("--current", action="store_true", help="leave out superseded values"),
              arg("--newest", action="store_true", help="newest first (default: oldest first)"),
              arg("--count", action="store_true", help="print only how many match"),
              arg("--page", type=int, default=0, metavar="N", help="page number, from 0"),
              arg("--size", type=int, default=50, metavar="N", help="memories per page (default: 50)")),
        refs=("under",),
    ),
)
