"""The ``kwtree`` command: one subcommand per KeywordTree method, each a thin adapter that
opens the tree, makes one call and prints the result, as text or (``--json``) as JSON.

Commands are the rows of ``COMMANDS``. The options they share are argparse parent parsers
defined once in ``_bundles`` (how to open the tree for reading or writing, how to print)
rather than copied into each command. Every ``KwtreeError`` becomes ``error: <message>`` on
stderr and exit code 1; usage errors exit with 2, argparse's convention.

Text output puts the id first and separates fields with tabs, so ``| cut -f1`` gives ids.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kwtree
from kwtree.cli import abstracts, agents, exchange, forget, maintenance, memory, rendezvous
from kwtree.cli.env import llm_client, on_agent_failure
from kwtree.cli.output import (
    agent_warning,
    line,
    show_detail,
    show_hits,
    show_plan,
    show_search,
    show_text,
    show_tree,
    subtree,
    to_json,
)
from kwtree.cli.table import (
    Command,
    arg,
    parse_as_of,
    parse_depth,
    parse_metadata,
    patch_of,
    read_content,
)
from kwtree.errors import (
    ClosedError,
    HasChildrenError,
    InvalidInputError,
    KwtreeError,
    LimitExceededError,
    LockTimeoutError,
    NotFoundError,
    ReadOnlyError,
    StorageError,
    UndoConflictError,
    VersionConflictError,
)
from kwtree.models import (
    DIRECTIONS,
    DURABILITY_MODES,
    INFO_POLICIES,
    PROVENANCES,
    ROOT_ID,
    Operation,
    Relation,
    RelationType,
)

# The parser needs none of the library beyond the models: `kwtree --help` and `--version`
# stay fast. Each command imports what it calls (the facade, verify, git, ...) when it runs.
if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree

__all__ = ["COMMANDS", "EXAMPLE_SETUP", "build_parser", "main"]

#: Shell lines that give the help examples their ids; the examples run in table order after them.
EXAMPLE_SETUP = """\
kwtree quickstart --dir ./memory
PY=$(kwtree find ./memory Python | cut -f1)
GO=$(kwtree find ./memory golang | cut -f1)
TOOLS=$(kwtree find ./memory Tools | cut -f1)
ASYNCIO=$(kwtree find ./memory asyncio | cut -f1)
COFFEE=$(kwtree find ./memory Coffee | cut -f1)
BILLING=$(kwtree find ./memory billing | cut -f1)
INFO=$(kwtree infos ./memory "$GO" | cut -f1)"""

# Library messages name Python arguments; these say the same in command-line terms.
_HINTS: tuple[tuple[type[KwtreeError], str], ...] = (
    (UndoConflictError, "pass --force to undo it anyway"),
    (HasChildrenError, "pass --cascade to delete the whole subtree"),
    (VersionConflictError, "`kwtree get DIR ID` shows the current version"),
    (LimitExceededError, ("the kwtree command uses the default limits (docs/api.md, Limits); "
                          "store larger values from Python with KeywordTree(DIR, limits=Limits(...))")),
)


def _quickstart(_: None, args: argparse.Namespace) -> None:
    from kwtree.cli.quickstart import run_quickstart

    run_quickstart(args.dir)


def _load(tree: KeywordTree, args: argparse.Namespace) -> Any:
    from kwtree.cli.outline import load_outline

    loaded = load_outline(tree, args.file)
    if not args.no_wait:  # embedded before the command returns, its progress shown (stderr)
        tree.wait_indexed()
    return loaded


def _worker(_: None, args: argparse.Namespace) -> None:
    from kwtree.caches.embed import embedder_from_spec
    from kwtree.cli.worker import serve_outbox

    embedder = None if args.embedder is None else embedder_from_spec(args.embedder)
    done = serve_outbox(args.dir, embedder, once=args.once, lease_seconds=args.lease, progress=args.progress)
    print(f"embedded {done} item(s)")


def _seconds(text: str) -> float:
    """A ``--idle`` value: seconds, 0 or more."""
    value = float(text)
    if not value >= 0:  # (nan too)
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def _serve(_: None, args: argparse.Namespace) -> None:
    from kwtree.cli import server

    where = rendezvous.endpoint(args.dir)
    if where is None:
        raise StorageError("this system offers no private place for the server's socket "
                           "(unix sockets, and a directory only this user can enter)")
    if args.stop:
        print(f"stopped the server of {args.dir}" if server.stop(where) else f"no server serves {args.dir}")
        return
    if args.status:
        found = server.status(where)
        if found is None:
            print(f"no server serves {args.dir}")
        elif args.json:
            print(json.dumps(found, indent=2))
        else:
            since = datetime.fromtimestamp(found["since"], UTC).isoformat(timespec="seconds")
            ends = f"stops after {found['idle']:g} s idle" if found["idle"] else "never stops when idle"
            print(f"serving {found['directory']}: pid {found['pid']}, since {since}, {found['answered']} answered, "
                  f"{found['declined']} declined, {'embedding' if found['embeds'] else 'read only'}, {ends}")
        return
    if not server.is_tree(where.directory):
        raise NotFoundError(f"{args.dir} is not a kwtree directory")

    def open_tree() -> tuple[KeywordTree, bool]:
        # Writable where it may be, for its embedding worker: commands and hooks exit before
        # the texts they wrote are embedded, and the server, which outlives them, embeds them.
        # It writes the log only for an offline Stop hook, as the hooks' actor (kwtree.cli.agents).
        # A short lock_timeout: a cache lock another process holds makes a command decline
        # (it then runs by itself, never waiting for that lock) rather than wait 10 s.
        try:
            return kwtree.KeywordTree(where.directory, lock_timeout=_SERVER_LOCK_TIMEOUT,
                                      actor=agents.HOOK_ACTOR), True
        except (StorageError, ReadOnlyError, LockTimeoutError):
            return kwtree.KeywordTree(where.directory, read_only=True), False

    if not server.serve(where, open_tree, answer_request, idle=args.idle, say=server.log):
        print(f"a server already serves {args.dir}", file=sys.stderr)


def _outbox(tree: KeywordTree, args: argparse.Namespace) -> dict[str, Any]:
    if args.retry_dead:
        tree.retry_dead()
    return tree.outbox_status()


def _reorganize(tree: KeywordTree, args: argparse.Namespace) -> dict[str, Any]:
    plan = tree.reorganize(args.scope)
    if args.out is not None:
        args.out.write_text(json.dumps(plan, ensure_ascii=False, indent=1) + "\n")
    return plan


def _plan(file: str) -> Any:
    text = sys.stdin.read() if file == "-" else Path(file).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{file} is not a JSON plan: {exc}") from None


def _init(tree: KeywordTree, args: argparse.Namespace) -> dict[str, Any]:
    from kwtree.stores.postgres import redacted
    operations = tree.tree_metrics()["operations"]
    return {"data_dir": str(tree.data_dir), "operations": operations, "last_op_id": tree.last_op_id,
            "log": redacted(args.log) if args.log else None}


def _keywords_of(tree: KeywordTree, args: argparse.Namespace) -> list[dict[str, Any]]:
    return [{"keyword": k, "relation": r} for k, r in tree.get_keywords_of_info(args.info_id)]


def _show_keywords_of(result: list[dict[str, Any]], tree: KeywordTree, args: argparse.Namespace) -> None:
    for item in result:
        print(f"{item['keyword'].id}\t{item['relation'].value}\t{item['keyword'].name}")


def _show_infos(result: list[Any], tree: KeywordTree, args: argparse.Namespace) -> None:
    show_text(result)
    if len(result) == args.size and tree.get_infos_of_keyword(args.id, args.relation, args.page + 1, args.size):
        print(f"{len(result)} infos shown; more: --page {args.page + 1}", file=sys.stderr)  # ids stay on stdout


def _show_relations(result: list[Relation], tree: KeywordTree, args: argparse.Namespace) -> None:
    for rel in result:
        print(f"{line(rel)}\t({tree.get_keyword(rel.from_id).name} → {tree.get_keyword(rel.to_id).name})")


def _show_undo(result: Operation | None, tree: KeywordTree, args: argparse.Namespace) -> None:
    if result is None:
        print(f"nothing to undo: what {args.op_id} wrote is already as it was before it")
    else:
        print(line(result))


def _update_patch(args: argparse.Namespace) -> dict[str, Any]:
    patch = patch_of(args, KEYWORD_PATCH)
    if args.clear_aliases:
        if "aliases" in patch:
            raise InvalidInputError("pass --alias or --clear-aliases, not both")
        patch["aliases"] = []
    return patch


# The options of update and update-info have the dests of the patch fields they set.
KEYWORD_PATCH = ("name", "aliases", "description", "metadata")
INFO_PATCH = ("content", "source", "metadata")
ID = arg("id", metavar="ID", help="a keyword: its id, name, alias or path ('root' is the root)")
INFO_ID = arg("info_id", metavar="INFO_ID", help="an info id")
KEYWORD_ID = arg("keyword_id", metavar="KEYWORD_ID", help="a keyword: its id, name, alias or path")
RELATIONS = [member.value for member in RelationType]
RELATION = arg("--relation", choices=RELATIONS, help="only links of this relation type")
SCOPE = arg("--scope", action="append", metavar="SCOPE",
            help="only memories inside this scope, e.g. user:alice (repeatable: any of them)")
MIN_SCORE = arg("--min-score", type=float, metavar="X",
                help="relevance floor, 0 (none) to 1 (default: recall's calibrated floor, docs/retrieval.md)")


PROVENANCE = arg("--provenance", action="append", choices=list(PROVENANCES), metavar="WHO",
                 help=f"only memories said by WHO: one of {', '.join(PROVENANCES)} (repeatable: any of them)")


def _reads(a: argparse.Namespace) -> dict[str, Any]:
    """The scope, floor, time window and provenance of a recall or context command."""
    given = {} if a.min_score is None else {"min_score": a.min_score}
    return {"scope": a.scope, "since": a.since, "until": a.until, "provenance": a.provenance, **given}


def _moment(text: str) -> float | str:
    """Epoch seconds, or an ISO 8601 date or time the library reads."""
    try:
        return float(text)
    except ValueError:
        return text


TIME_WINDOW = (arg("--since", type=_moment, metavar="WHEN", help="only memories that happened then or later "
                   "(epoch seconds or ISO 8601, e.g. 2024-05-01)"),
               arg("--until", type=_moment, metavar="WHEN", help="only memories that happened then or earlier "
                   "(a date alone: its whole day)"))
ALIASES = arg("--alias", dest="aliases", action="append", metavar="ALIAS", help="an alias (repeatable)")
DESCRIPTION = arg("--description", metavar="TEXT", help="what the keyword is about")
FROM = arg("from_id", metavar="FROM", help="the keyword the relation starts at")
TO = arg("to_id", metavar="TO", help="the keyword it points to")
METADATA = arg("--metadata", metavar="JSON", help='a JSON object, e.g. \'{"lang": "en"}\'')

COMMANDS: tuple[Command, ...] = (
    # --- setup -----------------------------------------------------------------------------
    Command(
        "quickstart", "kwtree.cli.quickstart.run_quickstart", "build the sample tree and tour it (offline)",
        example="--dir ./tour", opens="none", call=_quickstart,
        args=(arg("--dir", type=Path, help="a new or empty directory (default: a new temporary one)"),),
    ),
    Command(
        "init", "KeywordTree(DIR)", "create a tree in a new or empty directory (a tree already there is kept)",
        example="./memory", opens="create", call=_init,
        show=lambda r, t, a: print(f"{a.dir}: a kwtree directory with {r['operations']} operation(s)"
                                   + (f", its log in PostgreSQL ({r['log']})" if r["log"] else "")),
        args=(arg("--log", metavar="URL", help="keep the log in PostgreSQL at this postgresql:// URL; DIR "
                                               "holds this machine's caches (docs/scaling.md)"),),
    ),
    Command(
        "load", "kwtree.cli.outline.load_outline", "add the keywords, infos and relations of an outline file",
        example="./notes data/quickstart.json", opens="create", call=_load,
        args=(arg("file", type=Path, metavar="FILE", help="a JSON outline (see kwtree/writes/outline.py)"),
              arg("--no-wait", action="store_true", help="return once written, leaving the embedding of the "
                                                         "texts to the next process that embeds (kwtree serve, "
                                                         "kwtree worker, a writer)")),
        long=True,
        show=lambda r, t, a: print(
            f"loaded {len(r.keyword_ids)} keywords, {r.infos} infos and {r.relations} relations into {a.dir}"
            + (f" (operation {r.op_id}: kwtree undo {a.dir} {r.op_id} takes it back)" if r.op_id else "")),
    ),
    # --- reads -----------------------------------------------------------------------------
    Command(
        "tree", "kwtree.cli.quickstart.render_tree", "show the keywords as a tree, with aliases and info counts",
        example="./memory --depth 2", opens="read", call=lambda t, a: subtree(t, a.root, a.depth),
        args=(arg("--root", default=ROOT_ID, metavar="ID", help="start at this keyword (default: the root)"),
              arg("--depth", type=parse_depth, metavar="N", help="show N levels below the start (default: all)")),
        show=lambda r, t, a: show_tree(t, a),
        refs=("root",),
    ),
    Command(
        "get", "KeywordTree.get_keyword", "show one keyword with all its fields",
        example='./memory "$PY"', opens="read", call=lambda t, a: t.get_keyword(a.id),
        args=(ID,), show=lambda r, t, a: show_detail(r),
        refs=("id",),
    ),
    Command(
        "children", "KeywordTree.get_children", "list a keyword's children, in the order they arrived",
        example="./memory root", opens="read", call=lambda t, a: t.get_children(a.id), args=(ID,),
        refs=("id",),
    ),
    Command(
        "path", "KeywordTree.get_path", "the keywords from the root down to this one",
        example='./memory "$ASYNCIO"', opens="read", call=lambda t, a: t.get_path(a.id),
        args=(ID,), show=lambda r, t, a: print(" › ".join(k.name for k in r)),
        refs=("id",),
    ),
    Command(
        "find", "KeywordTree.find_keywords",
        "keywords whose name or alias equals NAME (case, width, punctuation and spacing ignored)",
        example="./memory PY", opens="read", call=lambda t, a: t.find_keywords(a.name),
        args=(arg("name", metavar="NAME"),),
    ),
    Command(
        "info", "KeywordTree.get_info", "show one info (a memory) with all its fields",
        example='./memory "$INFO"', opens="read", call=lambda t, a: t.get_info(a.info_id),
        args=(INFO_ID,), show=lambda r, t, a: show_detail(r),
    ),
    Command(
        "infos", "KeywordTree.get_infos_of_keyword", "list the infos linked to a keyword, a page at a time",
        example='./memory "$PY" --relation primary --size 10', opens="read",
        call=lambda t, a: t.get_infos_of_keyword(a.id, a.relation, a.page, a.size),
        args=(ID, RELATION,
              arg("--page", type=int, default=0, metavar="N", help="page number, from 0"),
              arg("--size", type=int, default=50, metavar="N", help="infos per page (default: 50)")),
        show=_show_infos, refs=("id",),
    ),
    Command(
        "keywords-of", "KeywordTree.get_keywords_of_info",
        "list the keywords an info is linked to, with the relation",
        example='./memory "$INFO"', opens="read", call=_keywords_of, args=(INFO_ID,), show=_show_keywords_of,
    ),
    Command(
        "relations", "KeywordTree.get_relations", "list a keyword's relations: outgoing, incoming or both",
        example='./memory "$BILLING" --direction both', opens="read",
        call=lambda t, a: t.get_relations(a.id, a.type, a.direction),
        args=(ID, arg("--type", help="only relations of this type"),
              arg("--direction", choices=DIRECTIONS, default="out", help="default: out")),
        show=_show_relations,
        refs=("id",),
    ),
    Command(
        "recall", "KeywordTree.recall",
        "the infos most relevant to QUERY (full text and vectors fused, lifted by the keywords it names)",
        example="./memory \"how are invoices retried\" --k 5 --scope user:alice --since 2024-05-01", opens="read",
        call=lambda t, a: t.recall(a.query, a.k, under=a.under, relation=a.relation, mode=a.mode,
                                   include_superseded=a.include_superseded, **_reads(a)),
        args=(arg("query", metavar="QUERY"),
              arg("--k", type=int, default=10, metavar="N", help="how many (default: 10)"),
              arg("--under", metavar="ID", help="only infos linked to this keyword's subtree"), RELATION,
              arg("--mode", choices=["hybrid", "bm25", "vector"], default="hybrid", help="default: hybrid"),
              arg("--include-superseded", action="store_true",
                  help="rank facts the user has since changed as if current (history on purpose)"),
              SCOPE, MIN_SCORE, PROVENANCE, *TIME_WINDOW),
        show=lambda r, t, a: show_hits(r),
        refs=("under",),
    ),
    Command(
        "context", "KeywordTree.context",
        "prompt-ready text for QUERY: recalled infos under their keyword paths, within --max-tokens",
        example="./memory \"billing retries\" --max-tokens 300 --scope user:alice", opens="read",
        call=lambda t, a: t.context(a.query, a.max_tokens, **_reads(a)),
        args=(arg("query", metavar="QUERY"),
              arg("--max-tokens", type=int, default=1500, metavar="N", help="the budget (default: 1500)"),
              SCOPE, MIN_SCORE, PROVENANCE, *TIME_WINDOW),
        show=lambda r, t, a: print(r),
    ),
    Command(
        "search", "KeywordTree.search",
        "find the keyword QUERY names: exact name or alias first, then the agent walks the tree",
        example="./memory \"python packaging tool\"", opens="read",
        call=lambda t, a: t.search(a.query, llm_expand_query=not a.exact, scope=a.scope),
        args=(arg("query", metavar="QUERY"),
              arg("--exact", action="store_true", help="exact lookup only: no agent, no LLM call"), SCOPE),
        show=lambda r, t, a: show_search(r),
    ),
    # --- agent memory (kwtree/cli/memory.py) -----------------------------------------------
    *memory.COMMANDS,
    *abstracts.COMMANDS,
    # --- keyword writes --------------------------------------------------------------------
    Command(
        "add", "KeywordTree.create_keyword",
        "create a keyword under --parent (without one, the agent places it; --no-auto-place: the root)",
        example='./memory Rust --alias rs --description "a systems programming language"', opens="write",
        call=lambda t, a: t.create_keyword(
            a.name, a.parent, a.aliases, a.description or "", parse_metadata(a.metadata),
            llm_auto_place=not a.no_auto_place),
        args=(arg("name", metavar="NAME"), arg("--parent", metavar="ID", help="the parent keyword"),
              ALIASES, DESCRIPTION, METADATA,
              arg("--no-auto-place", action="store_true", help="without --parent, put it under the root")),
        show=lambda r, t, a: print(f"{line(r)}\tunder {' › '.join(k.name for k in t.get_path(r.parent_id))}"),
        refs=("parent",),
    ),
    Command(
        "update", "KeywordTree.update_keyword",
        "change a keyword's name, aliases, description or metadata; --version is its current version",
        example='./memory "$PY" --version 1 --description "scripting and data jobs"', opens="write",
        call=lambda t, a: t.update_keyword(a.id, _update_patch(a), a.version),
        args=(ID, arg("--version", type=int, required=True, metavar="V", help="the version you read (kwtree get)"),
              arg("--name", help="the new name"),
              arg("--alias", dest="aliases", action="append", metavar="ALIAS",
                  help="the new aliases (repeatable; replaces all of them)"),
              arg("--clear-aliases", action="store_true", help="remove every alias"),
              DESCRIPTION, METADATA),
        refs=("id",),
    ),
    Command(
        "add-alias", "KeywordTree.add_alias", "add an alias to a keyword",
        example='./memory "$PY" python3', opens="write", call=lambda t, a: t.add_alias(a.id, a.alias),
        args=(ID, arg("alias", metavar="ALIAS")),
        refs=("id",),
    ),
    Command(
        "remove-alias", "KeywordTree.remove_alias", "remove an alias (compared after normalisation)",
        example='./memory "$PY" py', opens="write", call=lambda t, a: t.remove_alias(a.id, a.alias),
        args=(ID, arg("alias", metavar="ALIAS")),
        refs=("id",),
    ),
    Command(
        "move", "KeywordTree.move_keyword", "move a keyword, with its subtree, under NEW_PARENT",
        example='./memory "$GO" root', opens="write", call=lambda t, a: t.move_keyword(a.id, a.new_parent),
        args=(ID, arg("new_parent", metavar="NEW_PARENT")),
        refs=("id", "new_parent"),
    ),
    Command(
        "merge", "KeywordTree.merge_keywords",
        "fold SRC into DST (DST gains its name as alias, its children, links and relations) and delete SRC",
        example='./memory "$ASYNCIO" "$PY"', opens="write", call=lambda t, a: t.merge_keywords(a.src, a.dst),
        args=(arg("src", metavar="SRC"), arg("dst", metavar="DST")),
        refs=("src", "dst"),
    ),
    Command(
        "delete", "KeywordTree.delete_keyword",
        "delete a keyword (with --cascade its subtree); --info-policy decides about infos left unlinked",
        example='./memory "$COFFEE" --info-policy delete', opens="write",
        call=lambda t, a: t.delete_keyword(a.id, a.cascade, a.info_policy),
        args=(ID, arg("--cascade", action="store_true", help="also delete the keyword's whole subtree"),
              arg("--info-policy", choices=INFO_POLICIES, default="reattach",
                  help="link such infos to the parent (reattach, the default), delete them, or keep them")),
        refs=("id",),
    ),
    # --- info, link and relation writes ----------------------------------------------------
    Command(
        "add-info", "KeywordTree.create_info", "store a memory (CONTENT, or - for stdin) linked to each --keyword",
        example='./memory "Uses uv to manage Python environments." --keyword "$PY" --source chat', opens="write",
        call=lambda t, a: t.create_info(read_content(a.content), a.source, a.keyword, parse_metadata(a.metadata),
                                        a.auto_link),
        args=(arg("content", metavar="CONTENT"), arg("--source", default="", help="where it came from"),
              arg("--keyword", action="append", metavar="ID", help="link it to this keyword (repeatable)"),
              METADATA,
              arg("--auto-link", action="store_true",
                  help="also link it to the keywords the agent finds for its text (created by agent)")),
        refs=("keyword",),
    ),
    Command(
        "update-info", "KeywordTree.update_info", "change an info's content, source or metadata",
        example='./memory "$INFO" --content "Go for the billing API, Python for data jobs and tooling."',
        opens="write", call=lambda t, a: t.update_info(a.info_id, patch_of(a, INFO_PATCH), a.version),
        args=(INFO_ID, arg("--content", help="the new text"), arg("--source", help="the new source"), METADATA,
              arg("--version", type=int, metavar="V", help="fail unless this is the info's current version")),
    ),
    Command(
        "link", "KeywordTree.link_info", "link an info to a keyword (linking again changes the relation)",
        example='./memory "$INFO" "$TOOLS" --relation related', opens="write",
        call=lambda t, a: t.link_info(a.info_id, a.keyword_id, a.relation, a.created_by),
        args=(INFO_ID, KEYWORD_ID,
              arg("--relation", choices=RELATIONS, default="primary", help="default: primary"),
              arg("--created-by", default="user", metavar="LABEL", help="who made the link (default: user)")),
        refs=("keyword_id",),
    ),
    Command(
        "unlink", "KeywordTree.unlink_info", "remove the link between an info and a keyword",
        example='./memory "$INFO" "$TOOLS"', opens="write", call=lambda t, a: t.unlink_info(a.info_id, a.keyword_id),
        args=(INFO_ID, KEYWORD_ID),
        refs=("keyword_id",),
    ),
    Command(
        "relate", "KeywordTree.relate", "add (or re-weight) the directed relation FROM -[type]-> TO",
        example='./memory "$PY" "$GO" --type see_also --weight 0.5 --reason "both used for billing"', opens="write",
        call=lambda t, a: t.relate(a.from_id, a.to_id, a.type, a.weight, a.reason),
        args=(FROM, TO, arg("--type", default="related_to", help="default: related_to"),
              arg("--weight", type=float, default=1.0, help="default: 1.0"), arg("--reason", default="")),
        refs=("from_id", "to_id"),
    ),
    Command(
        "unrelate", "KeywordTree.unrelate", "remove the relation of --type (default: of every type) from FROM to TO",
        example='./memory "$PY" "$GO" --type see_also', opens="write",
        call=lambda t, a: t.unrelate(a.from_id, a.to_id, a.type), args=(FROM, TO, arg("--type")),
        refs=("from_id", "to_id"),
    ),
    Command(
        "delete-info", "KeywordTree.delete_info", "delete an info and its links",
        example='./memory "$INFO"', opens="write", call=lambda t, a: t.delete_info(a.info_id), args=(INFO_ID,),
    ),
    # --- operations ------------------------------------------------------------------------
    Command(
        "history", "KeywordTree.history",
        "list operations, oldest first: all, or those that wrote --entity (or inside --scope)",
        example='./memory --entity "$PY" --limit 5', opens="read",
        call=lambda t, a: t.history(a.entity, a.limit, scope=a.scope),
        args=(arg("--entity", metavar="ID", help="a keyword (id, name or path), an info id, or a link or relation key"),
              arg("--limit", type=int, metavar="N", help="only the newest N"), SCOPE),
        entity_refs=("entity",),
    ),
    Command(
        "undo", "KeywordTree.undo", "restore what an operation wrote to its state before, as a new operation",
        example='./memory "$(kwtree history ./memory --limit 1 | cut -f1)"', opens="write",
        call=lambda t, a: t.undo(a.op_id, a.force),
        args=(arg("op_id", metavar="OP_ID"),
              arg("--force", action="store_true", help="undo even if later operations changed the same entities")),
        show=_show_undo,
    ),
    Command(
        "reorganize", "KeywordTree.reorganize",
        "propose merges, moves and new groups (writes nothing; --out saves the plan for apply-plan)",
        example="./memory --out plan.json", opens="read", call=_reorganize,
        args=(arg("--scope", metavar="ID", help="only the subtree under this keyword"),
              arg("--out", type=Path, metavar="FILE", help="also write the plan as JSON to FILE")),
        show=lambda r, t, a: show_plan(r, t),
        refs=("scope",),
    ),
    Command(
        "apply-plan", "KeywordTree.apply_reorganize_plan",
        "apply a reorganisation plan (a JSON file, or - for stdin) as one operation that undo reverses",
        example="./memory plan.json", opens="write", call=lambda t, a: t.apply_reorganize_plan(_plan(a.file)),
        args=(arg("file", metavar="FILE", help="the plan, as `kwtree reorganize --out` wrote it"),),
        show=lambda r, t, a: print("the plan has no steps: nothing written" if r is None else line(r)),
    ),
    Command(
        "worker", "kwtree.cli.worker.serve_outbox",
        "embed what the outbox holds, in this process (with --once: until it is empty, then exit)",
        example="./memory --once", opens="none", call=_worker,
        long=True,
        args=(arg("dir", type=Path, metavar="DIR", help="the tree's directory"),
              arg("--once", action="store_true", help="exit when the outbox is empty"),
              arg("--embedder", default=None, metavar="SPEC",
                  help="embed with this (a spec, see kwtree.caches.embed.embedder_from_spec; "
                       "default: the embedder the tree records)"),
              arg("--lease", type=float, default=60.0, metavar="SECONDS",
                  help="how long a claimed item stays this worker's (default: 60)")),
    ),
    Command(
        "outbox", "KeywordTree.outbox_status",
        "the embedding outbox: pending, leased, failed, done and dead items (--retry-dead queues dead ones again)",
        example="./memory", opens="write", call=_outbox,
        args=(arg("--retry-dead", action="store_true", help="queue every dead item again"),),
    ),
    Command(
        "metrics", "KeywordTree.tree_metrics", "counts and shape of the live tree, and the size of its log",
        example="./memory", opens="read", call=lambda t, a: t.tree_metrics(),
    ),
    # --- maintenance (kwtree/cli/maintenance.py) --------------------------------------------
    *maintenance.COMMANDS,
    *exchange.COMMANDS,
    *forget.COMMANDS,
    # --- attaching to agents (kwtree/cli/agents.py) -------------------------------------------
    *agents.COMMANDS,
    Command(
        "serve", "kwtree.cli.server.serve",
        "hold the tree open for the reading commands and hooks until IDLE seconds pass without one "
        "(commands start it by themselves; KWTREE_SERVE=off: never)",
        example="./memory --stop", opens="none", call=_serve,
        args=(arg("dir", type=Path, metavar="DIR", help="the tree's directory"),
              arg("--idle", type=_seconds, default=rendezvous.DEFAULT_IDLE, metavar="SECONDS",
                  help=f"stop after this long without a request (default: {rendezvous.DEFAULT_IDLE:g}; 0: never)"),
              arg("--stop", action="store_true", help="ask the running server to stop, and exit"),
              arg("--status", action="store_true", help="say whether a server runs, since when and how much it did"),
              arg("--json", action="store_true", help="with --status: print one JSON document")),
    ),
)


# --- parser and runner -------------------------------------------------------------------------


def _bundles() -> dict[str, tuple[argparse.ArgumentParser, ...]]:
    """The shared option bundles, as argparse parent parsers (defined once, applied by table)."""
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    reading = argparse.ArgumentParser(add_help=False)
    reading.add_argument("dir", type=Path, metavar="DIR", help="the tree's directory (read only)")
    reading.add_argument("--as-of", type=parse_as_of, metavar="OP_OR_TIME",
                         help="read the tree as it was after operation OP_ID, or at a time "
                              "(epoch seconds or ISO-8601)")
    writing = argparse.ArgumentParser(add_help=False)
    writing.add_argument("dir", type=Path, metavar="DIR", help="the tree's directory")
    writing.add_argument("--durability", choices=DURABILITY_MODES, default="full",
                         help="full (default): synced to disk before the command returns; none: skip the syncs")
    writing.add_argument("--actor", default="user", metavar="NAME",
                         help="who writes, kept in the history (default: user)")
    return {"read": (reading, output), "write": (writing, output), "create": (writing, output), "none": ()}


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="kwtree", formatter_class=raw,
        description="kwtree: a keyword tree with linked memories, kept as an event log in one directory.\n"
                    "Each command mirrors one KeywordTree method; `kwtree COMMAND --help` shows an example.",
        epilog="The examples in each command's help run, in the order listed, after this setup:\n\n"
               + "\n".join("  " + setup for setup in EXAMPLE_SETUP.splitlines())
               + "\n\nexit codes: 0 success, 1 kwtree error (message on stderr), 2 usage error"
               + "\n\nenvironment:\n"
                 "  KWTREE_LLM=anthropic|openai|offline\n"
                 "                                   the agent's LLM (default: the offline navigator);\n"
                 "                                   openai: any Chat Completions server, with\n"
                 "                                   KWTREE_OPENAI_MODEL, KWTREE_OPENAI_BASE_URL, OPENAI_API_KEY\n"
                 "  KWTREE_LLM_TIMEOUT=SECONDS       per attempt of an LLM call (default: 30)\n"
                 "  KWTREE_LLM_MAX_RETRIES=N         retries of a failing LLM call (default: 4)\n"
                 "  KWTREE_ON_AGENT_FAILURE=fallback|raise\n"
                 "                                   when the agent fails: write by the fallback with a\n"
                 "                                   warning on stderr (default), or exit 1 writing nothing\n"
                 "  KWTREE_SERVE=auto|use|off        reading commands ask the directory's server (kwtree serve),\n"
                 "                                   and start one when none runs (auto, the default)",
    )
    parser.add_argument("--version", action="version", version=f"kwtree {kwtree.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, title="commands")
    bundles = _bundles()
    for command in COMMANDS:
        sub = commands.add_parser(
            command.name, parents=bundles[command.opens], help=command.summary, formatter_class=raw,
            description=f"{command.summary[0].upper()}{command.summary[1:]}.\nMirrors {command.mirrors}.",
            epilog=f"example: kwtree {command.name} {command.example}\n"
                   f"(ids such as $PY come from the setup shown by `kwtree --help`)",
        )
        for flags, options in command.args:
            sub.add_argument(*flags, **options)
        if command.long:
            sub.add_argument("--quiet", action="store_true",
                             help="show no progress (it goes to stderr, on a terminal as bars; also off with --json)")
        sub.set_defaults(row=command)
    return parser


def _open(command: Command, args: argparse.Namespace) -> AbstractContextManager[KeywordTree]:
    from kwtree.stores.manifest import MANIFEST_NAME

    if getattr(args, "held", None) is not None:  # a server's tree (answer_request): it stays open
        return contextlib.nullcontext(args.held)
    agent = {"llm_client": llm_client(), "on_agent_failure": on_agent_failure()}
    if command.opens == "read":
        return kwtree.KeywordTree(args.dir, read_only=True, as_of=args.as_of, progress=args.progress, **agent)
    if command.opens == "write" and not (args.dir / MANIFEST_NAME).is_file():
        # A mistyped DIR must not silently become a new, empty tree.
        raise NotFoundError(f"{args.dir} is not a kwtree directory; create it with `kwtree init {args.dir}`")
    log = {"log": args.log} if getattr(args, "log", None) else {}  # init --log URL
    return kwtree.KeywordTree(args.dir, durability=args.durability, actor=args.actor, progress=args.progress,
                              **log, **agent)


def run(command: Command, args: argparse.Namespace) -> None:
    """Open the tree, make the command's call and print its result (a long command's
    progress on stderr meanwhile)."""
    from kwtree.cli.progress import display

    args.progress = display(args) if command.long else None
    try:
        _run(command, args)
    finally:
        if args.progress is not None:
            args.progress.close()


def _run(command: Command, args: argparse.Namespace) -> None:
    if command.opens == "none":
        command.call(None, args)
        return
    with _open(command, args) as tree:
        for dest in (*command.refs, *command.entity_refs):  # a name, an alias or a path where an id is taken
            given, memories = getattr(args, dest), dest in command.entity_refs
            if isinstance(given, list):
                setattr(args, dest, [tree.resolve(ref, field=dest, memories=memories) for ref in given])
            elif given is not None:
                setattr(args, dest, tree.resolve(given, field=dest, memories=memories))
        result = command.call(tree, args)
        if args.json:
            print(json.dumps(to_json(result), ensure_ascii=False, indent=2))
        elif command.show is not None:
            command.show(result, tree, args)
        else:
            show_text(result)
        warning = agent_warning(result)
        if warning is not None:  # the write is done (exit 0); say how the agent fell short
            print(warning, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 1 kwtree error, 2 usage error)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help and --version (0), usage errors (2)
        return exc.code if isinstance(exc.code, int) else 0
    return _reported(args)


def _reported(args: argparse.Namespace, own: tuple[type[KwtreeError], ...] = ()) -> int:
    """Run the parsed command; its exit code, with a kwtree error's message (and hint) on stderr
    (errors of the ``own`` kinds are raised instead)."""
    try:
        run(args.row, args)
    except own:
        raise
    except KwtreeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        for kind, hint in _HINTS:
            if isinstance(exc, kind):
                print(f"hint: {hint}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


# --- the server's side (kwtree serve, kwtree/cli/server.py) -----------------------------------


def _served(args: argparse.Namespace) -> bool:
    """Whether a server answers this parsed command as the command itself would."""
    command: Command = args.row
    if command.name == "hook":
        return bool(args.event in rendezvous.SERVED_HOOKS)
    return command.name in rendezvous.SERVED and command.opens == "read" and args.as_of is None


@functools.cache
def _server_parser() -> argparse.ArgumentParser:
    return build_parser()


#: Errors of a server's own situation, not of the command: a lock another process holds (the
#: server's tree writes caches; a command alone reads them read-only), its tree closed or
#: unwritable. The command then runs by itself.
_SERVER_OWN = (LockTimeoutError, StorageError, ReadOnlyError, ClosedError)
#: How long a server's tree waits for a lock another process holds (seconds).
_SERVER_LOCK_TIMEOUT = 1.0


def answer_request(tree: KeywordTree, request: dict[str, Any]) -> dict[str, Any]:
    """Run ``kwtree ARGV`` as in ``cwd`` with ``stdin``, reading ``tree`` (a server's, open on
    the directory ARGV names), printing what the command prints (the server captures it:
    ``kwtree.cli.server``): ``{"rc"}``, or ``{"declined": why}`` for a request the server
    does not answer as the command alone would."""
    argv, cwd, stdin = request.get("argv"), request.get("cwd"), request.get("stdin")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv) and isinstance(cwd, str)
            and isinstance(stdin, str | None)):
        return {"declined": "not a request"}
    try:
        args = _server_parser().parse_args(argv)
    except SystemExit:  # help and usage errors are laid out for the command's own terminal
        return {"declined": "help or a usage error"}
    args.dir = Path(cwd) / args.dir
    if not _served(args) or os.path.realpath(args.dir) != os.path.realpath(tree.data_dir):
        return {"declined": "not a command this server answers"}
    args.held = tree
    saved, sys.stdin = sys.stdin, io.StringIO(stdin or "")
    try:
        return {"rc": _reported(args, own=_SERVER_OWN)}
    except _SERVER_OWN as exc:
        return {"declined": f"the server's own {type(exc).__name__}"}
    except rendezvous.Unserved as exc:  # (raised before the command did anything)
        return {"declined": str(exc)}
    finally:
        sys.stdin = saved


if __name__ == "__main__":
    sys.exit(main())
