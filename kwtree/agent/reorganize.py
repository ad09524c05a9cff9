"""Reorganisation plans: merge duplicates, move misplaced keywords, group crowded parents.

A plan is a dict ``{"scope_id", "planner", "based_on", "steps", "dropped"}``; each step is
``{"op": "merge", "src_id", "dst_id", "reason"}``, ``{"op": "move", "keyword_id",
"new_parent_id", "reason"}`` or ``{"op": "group", "parent_id", "name", "member_ids",
"reason"}``. Planning never writes; ``KeywordTree.apply_reorganize_plan`` applies a plan as
one operation.

The offline planner proposes:

- **merges** of keywords that answer to the same name (or to names with the same English
  stems) when they are siblings or their descriptions agree;
- **moves** of keywords (below the top level) whose text points clearly at another parent
  (its parent score at least ``MOVE_MIN_SCORE`` and ``MOVE_MARGIN`` times the current
  parent's) to a keyword that already has children;
- **groups** under parents with more than ``MAX_CHILDREN`` children: a new keyword named after
  a word at least ``MIN_GROUP`` children share as the head of their name ("Afghan hound",
  "basset hound" → "hound"), or moves under a child already named so.

An LLM planner sees the scope as an outline addressed by idx (never ids) and answers steps in
``PLAN_SCHEMA``; steps naming idx that were not shown are dropped (listed in ``dropped``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson

from kwtree.agent.clients import LLMClient
from kwtree.agent.lexicon import KeywordLexicon
from kwtree.engine.state import State, name_keys
from kwtree.models import ROOT_ID, Keyword
from kwtree.normalize import normalize_name, terms

__all__ = ["MAX_CHILDREN", "PLAN_SCHEMA", "draft_plan", "llm_plan", "offline_plan", "outline"]

MAX_CHILDREN = 12
MIN_GROUP = 3
MOVE_MIN_SCORE = 0.55
MOVE_MARGIN = 2.0
#: The offline planner checks at most this many keywords for a better parent.
MAX_MOVE_CHECKS = 500
#: The LLM planner sees at most this many keywords of the scope.
MAX_OUTLINE = 200

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["merge", "move", "group"]},
                    "idx": {"type": "integer",
                            "description": "merge: the keyword folded away; move: the keyword moved"},
                    "target_idx": {"type": "integer",
                                   "description": "merge: kept keyword; move: new parent; group: parent"},
                    "name": {"type": "string", "description": "group: the new keyword's name"},
                    "member_idxs": {"type": "array", "items": {"type": "integer"}},
                    "reason": {"type": "string"},
                },
                "required": ["op", "reason"],
            },
        }
    },
    "required": ["steps"],
}

PLAN_PROMPT = """You tidy a tree of keywords. The JSON document lists the keywords of one
subtree as an outline: idx, name, path and number of children. Propose steps, naming keywords
only by idx: "merge" (idx is a duplicate of target_idx and is folded into it), "move" (idx
belongs under target_idx) and "group" (create a keyword called name under target_idx and move
member_idxs, children of target_idx, into it) for parents with more than max_children
children. Propose only steps you are confident about, each with a short reason."""


def _live_scope(state: State, scope_id: str) -> list[str]:
    return [kid for kid in state.subtree(scope_id) if state.live_keyword(kid) is not None]


def _weight(state: State, kid: str) -> tuple[int, float]:
    """Which of two duplicates to keep: more children and links, then the older one."""
    links = len(state.infos_by_keyword.get(kid, {}))
    return (len(state.children.get(kid, ())) + links, -state.keywords[kid].created_at)


def _stem_key(name: str) -> tuple[str, ...]:
    return tuple(terms(name))


def _merges(state: State, scope: list[str]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    taken: set[str] = set()
    in_scope = set(scope)
    for kid in scope:
        keyword = state.keywords[kid]
        if kid == ROOT_ID or kid in taken:
            continue
        twins = {other for key in name_keys(keyword) for other in state.lookup_names(key)}
        siblings = state.children.get(keyword.parent_id or "", ())
        stem = _stem_key(keyword.name)
        twins.update(s for s in siblings if stem and _stem_key(state.keywords[s].name) == stem)
        for other in sorted(twins - {kid} - taken):
            peer = state.keywords[other]
            if other not in in_scope or state.is_descendant(other, kid) or state.is_descendant(kid, other):
                continue
            same_parent = peer.parent_id == keyword.parent_id
            if not same_parent and not _descriptions_agree(keyword, peer):
                continue
            keep, fold = (kid, other) if _weight(state, kid) >= _weight(state, other) else (other, kid)
            why = "siblings with the same name" if same_parent else "same name and matching descriptions"
            steps.append({
                "op": "merge", "src_id": fold, "dst_id": keep,
                "reason": f"{state.keywords[fold].name!r} duplicates {state.keywords[keep].name!r}: {why}",
            })
            taken.update((fold, keep))
            break
    return steps


def _descriptions_agree(a: Keyword, b: Keyword) -> bool:
    ta, tb = set(terms(a.description)), set(terms(b.description))
    if not ta and not tb:
        return True
    return bool(ta and tb) and len(ta & tb) / len(ta | tb) >= 0.5


def _moves(state: State, lexicon: KeywordLexicon, scope: list[str], skip: set[str]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    in_scope = set(scope)
    for kid in scope[:MAX_MOVE_CHECKS]:
        keyword = state.keywords[kid]
        if kid == ROOT_ID or kid in skip or keyword.parent_id in (None, ROOT_ID):
            continue  # the top level is the user's own choice of categories
        relevance = lexicon.score(state, keyword.name, keyword.description, exclude=kid)
        current = relevance.parent.get(keyword.parent_id, 0.0)
        ranked = sorted(relevance.parent.items(), key=lambda item: (-item[1], item[0]))
        for pid, score in ranked[:5]:
            if score < MOVE_MIN_SCORE or score < MOVE_MARGIN * current:
                break
            if pid == keyword.parent_id or pid in skip or pid not in in_scope or state.is_descendant(pid, kid):
                continue
            if not state.children.get(pid):
                continue  # a leaf is rarely a category; suggesting it misfires on names ("Mei's teammate")
            key = normalize_name(keyword.name)
            if any(normalize_name(state.keywords[c].name) == key for c in state.children.get(pid, ())):
                continue
            steps.append({
                "op": "move", "keyword_id": kid, "new_parent_id": pid,
                "reason": (f"{keyword.name!r} reads as a kind of {state.keywords[pid].name!r} "
                           f"(parent score {score:.2f} vs {current:.2f} "
                           f"under {state.keywords[keyword.parent_id].name!r})"),
            })
            skip.add(kid)
            break
    return steps


def _groups(state: State, scope: list[str], skip: set[str]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for parent_id in scope:
        children = [c for c in state.children.get(parent_id, ()) if c not in skip]
        if len(children) <= MAX_CHILDREN:
            continue
        parent_terms = set(terms(state.keywords[parent_id].name))
        heads: dict[str, list[str]] = {}
        surface: dict[str, Counter[str]] = {}
        for child in children:
            words = state.keywords[child].name.split()
            name_terms = terms(state.keywords[child].name)
            if len(name_terms) < 2 or name_terms[-1] in parent_terms:
                continue
            heads.setdefault(name_terms[-1], []).append(child)
            surface.setdefault(name_terms[-1], Counter())[words[-1].lower()] += 1
        ranked = sorted(heads.items(), key=lambda item: (-len(item[1]), item[0]))
        for term, members in ranked[:2]:
            if not MIN_GROUP <= len(members) <= 0.8 * len(children):
                continue
            name = surface[term].most_common(1)[0][0]
            existing = [c for c in children if _stem_key(state.keywords[c].name) == (term,)]
            reason = (f"{len(members)} of the {len(children)} children of {state.keywords[parent_id].name!r} "
                      f"are kinds of {name!r}")
            if existing:
                for member in members:
                    steps.append({"op": "move", "keyword_id": member, "new_parent_id": existing[0], "reason": reason})
            else:
                steps.append({"op": "group", "parent_id": parent_id, "name": name, "member_ids": members,
                              "reason": reason})
            skip.update(members)
    return steps


def offline_plan(state: State, lexicon: KeywordLexicon, scope_id: str) -> list[dict[str, Any]]:
    """The offline planner's steps for the subtree under ``scope_id`` (call under the
    state's lock, after ``lexicon.sync(state)``)."""
    scope = _live_scope(state, scope_id)
    merges = _merges(state, scope)
    touched = {step[field] for step in merges for field in ("src_id", "dst_id")}
    moves = _moves(state, lexicon, scope, set(touched))
    moved = {step["keyword_id"] for step in moves}
    groups = _groups(state, scope, touched | moved)
    return merges + moves + groups


def outline(state: State, scope_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The scope as the LLM sees it, breadth first: (id, {idx, name, path, children})."""
    rows: list[tuple[str, dict[str, Any]]] = []
    queue = [scope_id]
    while queue and len(rows) < MAX_OUTLINE:
        kid = queue.pop(0)
        keyword = state.keywords[kid]
        path: list[str] = []
        node: str | None = kid
        while node is not None and node != ROOT_ID:
            path.append(state.keywords[node].name)
            node = state.keywords[node].parent_id
        children = state.children.get(kid, [])
        rows.append((kid, {"idx": len(rows), "name": keyword.name, "path": " > ".join(reversed(path)),
                           "children": len(children)}))
        queue.extend(children)
    return rows


def llm_plan(client: LLMClient, rows: list[tuple[str, dict[str, Any]]],
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The steps an LLM drafts for an outline, the steps dropped (with why), and the
    request document. Raises whatever the client raises."""
    document = {"intent": "reorganize", "max_children": MAX_CHILDREN, "outline": [row for _, row in rows]}
    messages = [{"role": "system", "content": PLAN_PROMPT},
                {"role": "user", "content": orjson.dumps(document).decode()}]
    answer = client.chat(messages, PLAN_SCHEMA)
    ids = [kid for kid, _ in rows]
    steps, dropped = [], []
    raw_steps = answer.get("steps") if isinstance(answer, dict) else None
    for raw in raw_steps if isinstance(raw_steps, list) else []:
        step = _from_idx(raw, ids)
        if isinstance(step, str):
            dropped.append({"step": raw, "why": step})
        else:
            steps.append(step)
    return steps, dropped, document


def _from_idx(raw: Any, ids: list[str]) -> dict[str, Any] | str:
    """A step with ids for idx, or why it cannot be used."""
    if not isinstance(raw, dict):
        return "not an object"

    def pick(field: str) -> str | None:
        idx = raw.get(field)
        return ids[idx] if type(idx) is int and 0 <= idx < len(ids) else None

    op, reason = raw.get("op"), raw.get("reason") if isinstance(raw.get("reason"), str) else ""
    source, target = pick("idx"), pick("target_idx")
    if op == "merge" and source and target:
        return {"op": "merge", "src_id": source, "dst_id": target, "reason": reason}
    if op == "move" and source and target:
        return {"op": "move", "keyword_id": source, "new_parent_id": target, "reason": reason}
    if op == "group" and target and isinstance(raw.get("name"), str) and isinstance(raw.get("member_idxs"), list):
        members = [ids[i] for i in raw["member_idxs"] if type(i) is int and 0 <= i < len(ids)]
        if members and len(members) == len(raw["member_idxs"]):
            return {"op": "group", "parent_id": target, "name": raw["name"], "member_ids": members, "reason": reason}
    return "unknown op, or an idx that was not in the outline"


def draft_plan(
    client: LLMClient | None,
    read_outline: Callable[[], list[tuple[str, dict[str, Any]]]],
    offline: Callable[[], list[dict[str, Any]]],
    plan: dict[str, Any],
) -> dict[str, Any]:
    """``plan`` completed with ``planner``, ``steps`` and ``dropped``: drafted by the LLM
    client when there is one (its request kept in ``request``), else (or if the client
    fails, with ``llm_error`` saying why) by the offline planner."""
    plan["dropped"] = []
    if client is not None:
        try:
            steps, dropped, document = llm_plan(client, read_outline())
        except Exception as exc:  # noqa: BLE001 -- a failed draft falls back to the offline planner
            plan["llm_error"] = f"{type(exc).__name__}: {exc}"
        else:
            name = str(getattr(client, "name", type(client).__name__))
            plan.update(planner=name, steps=steps, dropped=dropped, request=document)
            return plan
    plan["planner"] = "offline"
    plan["steps"] = offline()
    return plan
