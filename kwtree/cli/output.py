"""How the ``kwtree`` command prints results: JSON documents (``--json``) and tab-separated
text with the id first, so ``| cut -f1`` gives ids."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwtree.models import (
    Info,
    Keyword,
    Link,
    Operation,
    Relation,
    SearchResult,
    SearchStatus,
)

if TYPE_CHECKING:  # the printers take an open tree; importing the facade is the caller's cost
    from kwtree.facade.tree import KeywordTree

__all__ = [
    "agent_warning", "line", "show_detail", "show_hits", "show_plan", "show_search", "show_text", "show_tree",
    "subtree", "to_json",
]


# --- printing: JSON documents and tab-separated text -------------------------------------------


def to_json(value: Any) -> Any:
    """``value`` as plain JSON data: entities become dicts of all their fields, enums their
    value, operations a summary (their changes are in ``kwtree history``)."""
    if isinstance(value, Operation):
        return {
            "op_id": value.op_id,
            "kind": value.kind,
            "actor": value.actor,
            "timestamp": value.timestamp,
            "entity_ids": list(value.entity_ids),
            "audit": to_json(value.audit),
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


def agent_warning(result: Any) -> str | None:
    """The warning line for a keyword or info the agent placed or linked by a fallback (the
    LLM failed), or linked to nothing, and for a commit that did steps offline because the
    LLM failed them; None when there is nothing to warn about."""
    commit = sys.modules.get("kwtree.memory.commit")  # a command that loaded no commit path made no commit
    if commit is not None and isinstance(result, commit.CommitResult):
        if not result.fallbacks:
            return None
        steps = ", ".join(fallback.step for fallback in result.fallbacks)
        return f"warning: the LLM failed ({result.fallbacks[0].error}); done offline instead: {steps}"
    outcome = getattr(result, "agent", None) if isinstance(result, (Keyword, Info)) else None
    if outcome is None or not (outcome.fell_back or not outcome.keyword_ids):
        return None
    return f"warning: {outcome.summary}"


def _time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")


#: Control characters other than newline and tab (C0, DEL, C1): stored as given, shown escaped,
#: so a memory holding terminal output cannot move the cursor, clear the screen or ring the bell.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with each control character other than newline and tab written as ``\\xNN``."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


def _one_line(text: str) -> str:
    return printable(" ".join(text.split()))


def line(value: Any) -> str:
    """One tab-separated line for an entity or operation, its id first."""
    if isinstance(value, Keyword):
        return f"{value.id}\t{value.name}" + (f"\t(aka {', '.join(value.aliases)})" if value.aliases else "")
    if isinstance(value, Info):
        return f"{value.id}\t{_one_line(value.content)}" + (f"\t[{value.source}]" if value.source else "")
    if isinstance(value, Link):
        return f"{value.info_id}\t{value.keyword_id}\t{value.relation.value}\tby {value.created_by}"
    if isinstance(value, Relation):
        text = f"{value.from_id}\t-[{value.type} {value.weight:g}]->\t{value.to_id}"
        return text + (f"\t{value.reason}" if value.reason else "")
    if isinstance(value, Operation):
        count = len(value.changes)
        return f"{value.op_id}\t{_time(value.timestamp)}\t{value.kind}\tby {value.actor}\t{count} change(s)"
    return str(value)


def show_text(value: Any) -> None:
    """The default text printer: a line per item of a list, ``key: value`` for a dict."""
    if value is None:
        return
    if isinstance(value, list):
        for item in value:
            print(line(item))
    elif isinstance(value, Mapping):
        width = max((len(str(key)) for key in value), default=0)
        for key, item in value.items():
            text = f"{item:.2f}" if isinstance(item, float) else printable(item) if isinstance(item, str) else item
            print(f"{str(key) + ':':<{width + 1}} {text}")
    else:
        print(line(value))


def show_detail(entity: Any) -> None:
    """Every field of one entity, one per line, times in UTC."""
    fields = to_json(entity)
    for key in ("created_at", "updated_at"):
        if key in fields:
            fields[key] = _time(fields[key])
    if "aliases" in fields:
        fields["aliases"] = ", ".join(fields["aliases"])
    if "metadata" in fields:
        fields["metadata"] = json.dumps(fields["metadata"], ensure_ascii=False)
    show_text(fields)


def show_tree(tree: KeywordTree, args: argparse.Namespace) -> None:
    from rich.console import Console

    from kwtree.cli.quickstart import render_tree

    Console().print(render_tree(tree, args.root, args.depth))


def subtree(tree: KeywordTree, root_id: str, depth: int | None) -> dict[str, Any]:
    """The keyword and its descendants (``depth`` levels of them) as nested JSON data."""
    node: dict[str, Any] = to_json(tree.get_keyword(root_id))  # a keyword becomes a dict
    if depth is None or depth > 0:
        below = None if depth is None else depth - 1
        node["children"] = [subtree(tree, child.id, below) for child in tree.get_children(root_id)]
    return node


# --- argument types and adapters ---------------------------------------------------------------


def show_hits(hits: list[Any]) -> None:
    for hit in hits:
        where = "; ".join(" › ".join(k.name for k in linked.path[1:]) for linked in hit.keywords)
        print(f"{hit.info.id}\t{hit.score:.3f}\t{_one_line(hit.info.content)}" + (f"\t[{where}]" if where else ""))


def show_search(result: SearchResult) -> None:
    agent = f" ({result.rounds} agent round{'s' if result.rounds != 1 else ''})" if result.rounds else ""
    if result.status is SearchStatus.MATCHED:
        assert result.node is not None
        print(f"{result.node.id}\tmatched\t{' › '.join(k.name for k in result.path[1:])}{agent}")
        for info in result.infos:
            print(f"  {line(info)}")
    elif result.status is SearchStatus.AMBIGUOUS:
        print(f"ambiguous: {len(result.candidates)} candidates{agent}")
        for keyword in result.candidates:
            print(f"  {line(keyword)}")
    else:
        hint = (f"; suggested: {result.suggested_name!r} under {result.suggested_parent_id}"
                if result.suggested_parent_id else "")
        print(f"not found ({result.reason}){hint}{agent}")


def show_plan(plan: dict[str, Any], tree: KeywordTree) -> None:
    def name(kid: str) -> str:
        return tree.get_keyword(kid).name

    print(f"plan by {plan['planner']} for {plan['scope_id']}: {len(plan['steps'])} step(s)")
    for step in plan["steps"]:
        if step["op"] == "merge":
            what = f"merge {name(step['src_id'])!r} into {name(step['dst_id'])!r}"
        elif step["op"] == "move":
            what = f"move {name(step['keyword_id'])!r} under {name(step['new_parent_id'])!r}"
        else:
            what = f"group {len(step['member_ids'])} children of {name(step['parent_id'])!r} under new {step['name']!r}"
        print(f"  {what}\t{step['reason']}")
