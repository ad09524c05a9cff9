"""The commands that attach kwtree to agents: ``mcp`` (a Model Context Protocol server over
stdio, ``kwtree.integrations.mcp``) and ``hook`` (Claude Code's hooks,
``kwtree.integrations.claude_code``).

Rows of the command table (``kwtree.cli.table.Command``) that ``kwtree.cli.main.COMMANDS``
takes in. Both open the tree themselves ("none"): the server holds it for as long as the
client stays, and a hook's output is the JSON Claude Code reads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from kwtree.cli.env import llm_client, on_agent_failure
from kwtree.cli.output import agent_warning
from kwtree.cli.rendezvous import Unserved
from kwtree.cli.table import Command, arg
from kwtree.integrations.bounded import DEFAULT_MAX_CHARS
from kwtree.memory_schema import DEFAULT_SCOPE

__all__ = ["COMMANDS", "HOOK_ACTOR"]


def _mcp(_: None, args: argparse.Namespace) -> None:
    from kwtree.integrations.mcp import serve

    serve(args.dir, scope=args.scope, read_only=args.read_only, actor=args.actor, durability=args.durability,
          llm_client=llm_client(), on_agent_failure=on_agent_failure(), max_result_chars=args.max_result_chars)


def _hook(_: None, args: argparse.Namespace) -> None:
    from kwtree.facade.tree import KeywordTree
    from kwtree.integrations import claude_code
    from kwtree.stores.manifest import MANIFEST_NAME
    from kwtree.validate import clean_int

    payload = claude_code.read_hook_input(sys.stdin.read())
    held = getattr(args, "held", None)  # a server's tree (kwtree.cli.main.answer_request): it stays open
    if args.event == "stop":
        client, failure = llm_client(), on_agent_failure()
        if held is not None:  # (a server's tree has no LLM and writes as HOOK_ACTOR; it runs in "/")
            transcript = payload.get("transcript_path")
            if client is not None or args.actor != HOOK_ACTOR or not (
                    isinstance(transcript, str) and os.path.isabs(transcript)):
                raise Unserved("a stop with an LLM, another actor or a relative transcript path")
        committing = contextlib.nullcontext(held) if held is not None else KeywordTree(
            args.dir, actor=args.actor, llm_client=client, on_agent_failure=failure)
        with committing as tree:
            warning = agent_warning(claude_code.stop(tree, payload, args.scope))
        if warning is not None:  # committed all the same (exit 0); say what the failing LLM did not do
            print(warning, file=sys.stderr)
        return
    starting = args.event == "session-start"
    budget = clean_int(args.max_tokens if args.max_tokens is not None else 800 if starting else 1500,
                       "max_tokens", 1, 1_000_000)
    if not starting:
        claude_code.prompt_of(payload)  # a bad input is an error whether or not anything is stored
    if not (Path(args.dir) / MANIFEST_NAME).is_file():
        return  # nothing stored yet: nothing to add to the context, and a read creates nothing
    answer = claude_code.session_start if starting else claude_code.submitted_prompt
    reading = contextlib.nullcontext(held) if held is not None else KeywordTree(args.dir, read_only=True)
    with reading as tree:  # beside a writer, or in a read-only directory
        output = answer(tree, payload, args.scope, budget)
    if output is not None:
        print(json.dumps(output, ensure_ascii=False))


_DIR = arg("dir", metavar="DIR", help="the tree's directory (created when new)")
#: Who the hooks write as unless told (the directory's server opens its tree as this actor).
HOOK_ACTOR = "agent"
_ACTOR = arg("--actor", default=HOOK_ACTOR, metavar="NAME",
             help=f"who writes, kept in the history (default: {HOOK_ACTOR})")

COMMANDS: tuple[Command, ...] = (
    Command(
        "mcp", "kwtree.integrations.mcp.serve",
        "serve the tree's memory tools to an agent over the Model Context Protocol (stdio) until the client leaves",
        example="./memory --scope user:alice --read-only < /dev/null", opens="none", call=_mcp,
        args=(_DIR,
              arg("--scope", metavar="SCOPE", help="pin the server to one scope, e.g. user:alice: every read and "
                                                   "write stays inside it"),
              arg("--read-only", action="store_true", help="offer only the reading tools and refuse writes"),
              _ACTOR,
              arg("--durability", choices=("full", "none"), default="full",
                  help="full (default): each write synced to disk before its call returns"),
              arg("--max-result-chars", type=int, default=DEFAULT_MAX_CHARS, metavar="N",
                  help=f"the most characters one tool result holds (default: {DEFAULT_MAX_CHARS:,}; "
                       "longer ones are cut with a 'truncated' note)")),
    ),
    Command(
        "hook", "kwtree.integrations.claude_code",
        "answer a Claude Code hook (its JSON on stdin): session-start and prompt print context, stop commits "
        "the transcript",
        example=("session-start ./memory --scope user:alice <<< "
                 "'{\"session_id\": \"s1\", \"hook_event_name\": \"SessionStart\", \"source\": \"startup\"}'"),
        opens="none", call=_hook,
        args=(arg("event", choices=("session-start", "prompt", "stop"), metavar="EVENT",
                  help="session-start (SessionStart), prompt (UserPromptSubmit) or stop (Stop)"),
              _DIR,
              arg("--scope", default=DEFAULT_SCOPE, metavar="SCOPE",
                  help=f"whose memory, e.g. user:alice or project:kwtree (default: {DEFAULT_SCOPE})"),
              _ACTOR,
              arg("--max-tokens", type=int, metavar="N",
                  help="the budget of the context printed (default: 800 at session-start, 1500 for a prompt)")),
    ),
)
