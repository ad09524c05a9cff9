"""The memory tools at work: a :class:`ToolBox` runs the catalog's tools
(``kwtree.integrations.catalog``) on one open KeywordTree, for any door that hands tools to a
model (the MCP server, the Anthropic tool-use loop, a hook).

What a toolbox promises, whatever the door:

- **Scopes.** Every read and write takes a ``scope``. A toolbox pinned to a scope
  (``scope="user:alice"``) reads and writes only inside it: an omitted scope is the pin, a
  scope outside it is refused, and an id outside it is "not found" (a pinned model cannot
  learn what other scopes hold, nor file into them, relate to them, undo their operations or
  forget them). An unpinned toolbox reads everything unless a call names a scope, and then
  holds that call to it the same way. ``kwtree.integrations.guard`` says what "inside" means
  for a memory filed in two scopes and for an undo, and what the checks cannot exclude.
- **Read-only.** A ``read_only`` toolbox lists no writing tools and refuses them by name.
- **Errors.** ``call`` never raises a kwtree error: it returns a reply marked as an error whose
  text is the error's class and message (naming the argument), and nothing was written.
- **Bounded.** A reply is at most ``max_result_chars`` characters, with a ``truncated`` note when
  something was cut (``kwtree.integrations.bounded``); a ``context`` or ``assemble`` block
  loses whole memory lines, never its fence.
- **Data, not instructions.** Stored text reaches the model only as ``kwtree.retrieval.fence``
  quotes it: JSON replies are written with every string quoted so (a memory's text, a keyword's
  name and path, a source, an error message naming them), the outline quotes each name, and
  ``context`` and ``assemble`` give the library's fenced blocks. Every memory shown carries its
  ``provenance`` (who said it); what the agent writes through ``remember`` and ``create_info``
  is recorded as said by "assistant".
- **Fresh.** Each call first applies what other processes appended to the directory, so several
  servers on one directory see each other's writes.
- **Whole or nothing.** Each writing tool is one kwtree operation: a call interrupted by a
  client that went away, or a process killed, leaves it written entirely or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kwtree.errors import DuplicateKeywordError, InvalidInputError, KwtreeError, NotFoundError, ReadOnlyError
from kwtree.integrations import catalog
from kwtree.integrations.bounded import DEFAULT_MAX_CHARS, MIN_MAX_CHARS, clip, dumps, fit
from kwtree.integrations.guard import ScopeGuard
from kwtree.memory_schema import DEFAULT_SCOPE, HAPPENED_AT, SUPERSEDED_BY
from kwtree.models import ROOT_ID, Info, Keyword, Operation, SearchResult
from kwtree.retrieval.fence import FENCE_OPEN, quote, trim
from kwtree.retrieval.scopes import clean_scope
from kwtree.validate import clean_int, shown

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree

__all__ = ["ToolBox", "ToolReply"]

#: ``tree`` shows at most this many keywords; ``show`` this many children, memories and relations.
MAX_OUTLINE = 400
MAX_LISTED = 50
#: ``history`` shows at most this many changes of one operation.
MAX_CHANGES = 20
#: A memory count at this size or more is shown as "N+".
_COUNTED = 100
#: Room kept in a text reply for its ``[truncated: ...]`` note.
_TEXT_NOTE_ROOM = 200
#: Who said what the agent writes through the tools (``kwtree.PROVENANCES``).
_AGENT_PROVENANCE = "assistant"


@dataclass(frozen=True, slots=True)
class ToolReply:
    """What one tool call gives back: ``text`` for the model (JSON, or prompt-ready text for
    ``context``, ``assemble`` and ``tree``), ``is_error`` when the call was refused (then
    ``text`` is the error), and ``data`` the result as JSON data (None on an error)."""

    text: str
    is_error: bool = False
    data: dict[str, Any] | None = None


def _iso(seconds: float) -> str | float:
    """Epoch seconds as ISO 8601 (UTC); a time no calendar date holds (year 10000) as it is."""
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (ValueError, OverflowError, OSError):
        return seconds


def _path_text(path: Sequence[Keyword]) -> str:
    return " › ".join(keyword.name for keyword in path if keyword.id != ROOT_ID) or "(root)"


def _path_line(path: Sequence[Keyword]) -> str:
    """A path in a text reply: each name quoted (``fence.quote``), as a heading of a block."""
    return " › ".join(quote(keyword.name) for keyword in path if keyword.id != ROOT_ID) or "(root)"


def _said(message: str) -> str:
    """An error message as the model reads it: it may name stored text (a keyword's name), so
    it is quoted like stored text, without the quotes around it."""
    return quote(message)[1:-1]


def _when(value: str | None) -> str | float | None:
    """A ``since``/``until`` argument: epoch seconds given as text become a number."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return value


class ToolBox:
    """The catalog's tools over ``tree`` (which the toolbox does not own or close).

    ``scope`` pins every call to one scope path; ``read_only`` refuses the writing tools;
    ``max_result_chars`` bounds each reply (at least 1,000). InvalidInputError for a bad
    argument."""

    def __init__(self, tree: KeywordTree, *, scope: str | None = None, read_only: bool = False,
                 max_result_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.tree = tree
        self.pinned = None if scope is None else clean_scope(scope)
        self.guard = ScopeGuard(tree, self.pinned)
        if type(read_only) is not bool:
            raise InvalidInputError(f"read_only must be True or False, got {shown(read_only)}")
        self.read_only = read_only
        self.max_result_chars = clean_int(max_result_chars, "max_result_chars", MIN_MAX_CHARS)

    def definitions(self) -> list[dict[str, Any]]:
        """The tools this toolbox runs, as ``{"name", "description", "input_schema"}``."""
        return catalog.definitions(read_only=self.read_only, pinned=self.pinned)

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolReply:
        """Run tool ``name``; a kwtree error comes back as an error reply (nothing written)."""
        try:
            result = self.run(name, arguments)
        except DuplicateKeywordError as exc:
            text, pin = str(exc), self.pinned
            if pin is not None and not self.guard.keyword_inside(exc.existing_id, self.guard.tops([pin])):
                text = ("a keyword of that name is already where this one would go, outside this server's scope; "
                        "choose another name")  # (not its id: it is not this scope's to see)
            return ToolReply(clip(f"DuplicateKeywordError: {_said(text)}", self.max_result_chars), is_error=True)
        except KwtreeError as exc:
            return ToolReply(clip(f"{type(exc).__name__}: {_said(str(exc))}", self.max_result_chars), is_error=True)
        if set(result) == {"text"}:  # prompt-ready text (a block, an outline): bounded as text
            result = self._bounded_text(result["text"])
            note = f"\n\n[truncated: {result['truncated']}]" if "truncated" in result else ""
            return ToolReply(result["text"] + note, data=result)
        text = dumps(result)
        if len(text) > self.max_result_chars:
            result = fit(result, self.max_result_chars)
            text = dumps(result)
        return ToolReply(text, data=result)

    def _bounded_text(self, text: str) -> dict[str, Any]:
        """A text reply within the budget: a fenced block loses whole memory lines from its end
        (``fence.trim``: a cut inside a line would lose the fence), other text its end."""
        room = self.max_result_chars - _TEXT_NOTE_ROOM
        if len(text) <= room:
            return {"text": text}
        if text.startswith(FENCE_OPEN):
            kept, dropped = trim(text, room)
            return {"text": kept or "(not even one memory fits the result's budget)",
                    "truncated": f"{dropped} memories left out to fit {self.max_result_chars:,} characters; "
                                 "ask with a smaller max_tokens"}
        return {"text": clip(text, room), "truncated": f"{room:,} of {len(text):,} characters shown; start lower "
                                                        "(keyword_id) or lower the depth"}

    def run(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Run tool ``name`` and return its whole result as JSON data (not bounded); raises the
        KwtreeError that refused it."""
        spec = catalog.spec_of(name)
        if spec.writes and self.read_only:
            raise ReadOnlyError(f"{name} writes, and this memory is read-only (opened with --read-only); "
                                f"the tools here only read")
        checked = catalog.check_arguments(spec, arguments)
        self.tree.refresh()
        result: dict[str, Any] = getattr(self, f"_{name}")(**checked)
        return result

    # --- what a model sees of an entity ------------------------------------------------------

    def _keyword_brief(self, keyword: Keyword) -> dict[str, Any]:
        return {"id": keyword.id, "name": keyword.name, "path": _path_text(self.tree.get_path(keyword.id))}

    @staticmethod
    def _info_brief(info: Info) -> dict[str, Any]:
        brief: dict[str, Any] = {"id": info.id, "text": info.content, "provenance": info.provenance}
        happened = info.metadata.get(HAPPENED_AT)
        if isinstance(happened, (int, float)) and not isinstance(happened, bool):
            brief["happened_at"] = _iso(happened)
        brief["stored_at"] = _iso(info.created_at)
        if info.metadata.get(SUPERSEDED_BY):  # a value the user has since changed
            brief["superseded"] = True
        if info.source:
            brief["source"] = info.source
        return brief

    def _filed_under(self, info_id: str, tops: set[str] | None) -> list[dict[str, Any]]:
        return [{**self._keyword_brief(keyword), "relation": relation.value}
                for keyword, relation in self.tree.get_keywords_of_info(info_id)
                if tops is None or self.guard.keyword_inside(keyword.id, tops)]

    # --- reading tools -----------------------------------------------------------------------

    def _recall(self, query: str, k: int = 10, scope: object = None, since: str | None = None,
                until: str | None = None, min_score: float = 0.35,
                provenance: str | list[str] | None = None, include_superseded: bool = False) -> dict[str, Any]:
        hits = self.tree.recall(query, k, scope=self.guard.read_scopes(scope), min_score=min_score,
                                since=_when(since), until=_when(until), provenance=provenance,
                                include_superseded=include_superseded)
        found = []
        for hit in hits:
            memory = self._info_brief(hit.info)
            memory["relevance"] = round(hit.relevance, 3)
            memory["filed_under"] = [_path_text(linked.path) for linked in hit.keywords]
            found.append(memory)
        return {"memories": found}

    def _context(self, query: str, max_tokens: int = 1500, scope: object = None, since: str | None = None,
                 until: str | None = None, provenance: str | list[str] | None = None) -> dict[str, Any]:
        text = self.tree.context(query, max_tokens, scope=self.guard.read_scopes(scope), since=_when(since),
                                 until=_when(until), provenance=provenance)
        return {"text": text or "(no stored memory is relevant to this query)"}

    def _assemble(self, query: str, scope: str | None = None, max_tokens: int = 1500,
                  provenance: str | list[str] | None = None) -> dict[str, Any]:
        chosen = self.guard.write_scope(scope)
        if chosen is None:
            raise InvalidInputError("assemble: scope is required (whose memory, e.g. 'user:alice')")
        text = self.tree.memory.assemble(query, chosen, max_tokens, provenance=provenance)
        return {"text": text or f"(scope {quote(chosen)} holds no memory yet)"}

    def _search(self, query: str, scope: object = None) -> dict[str, Any]:
        result: SearchResult = self.tree.search(query, scope=self.guard.read_scopes(scope))
        found: dict[str, Any] = {"status": result.status.value}
        if result.node is not None:
            found["keyword"] = self._keyword_brief(result.node)
            found["memories"] = [self._info_brief(info) for info in result.infos]
        if result.candidates:
            found["candidates"] = [self._keyword_brief(keyword) for keyword in result.candidates]
        if result.suggested_parent_id is not None:
            found["suggested_parent"] = self._keyword_brief(self.tree.get_keyword(result.suggested_parent_id))
            found["suggested_name"] = result.suggested_name
        if result.reason:
            found["reason"] = result.reason
        return found

    def _show(self, id: str, scope: object = None) -> dict[str, Any]:
        scopes = self.guard.read_scopes(scope)
        id = self._resolve(id, scopes, "id", memories=True)
        tops = None if scopes is None else self.guard.tops(scopes)
        if not self.guard.is_keyword(id):
            self.guard.require(id, scopes, "id", "memory", label="keyword or memory")
            try:
                info = self.tree.get_info(id)
            except NotFoundError:
                raise NotFoundError(f"id: no keyword or memory {id}") from None
            return {"memory": {**self._info_brief(info), "metadata": dict(info.metadata), "version": info.version},
                    "filed_under": self._filed_under(id, tops)}
        self.guard.require(id, scopes, "id", label="keyword or memory")
        keyword = self.tree.get_keyword(id)
        relations = []
        for relation in self.tree.get_relations(id, direction="both"):
            other = relation.to_id if relation.from_id == id else relation.from_id
            if tops is None or self.guard.keyword_inside(other, tops):
                relations.append({"type": relation.type, "direction": "out" if relation.from_id == id else "in",
                                  "keyword": self._keyword_brief(self.tree.get_keyword(other)),
                                  "weight": relation.weight, "reason": relation.reason})
        children = self.tree.get_children(id)
        memories = self.tree.get_infos_of_keyword(id, size=MAX_LISTED + 1)
        return {
            "keyword": {**self._keyword_brief(keyword), "aliases": list(keyword.aliases),
                        "description": keyword.description, "metadata": dict(keyword.metadata),
                        "version": keyword.version},
            "children": [{"id": child.id, "name": child.name} for child in children[:MAX_LISTED]],
            "children_count": len(children),
            "memories": [self._info_brief(info) for info in memories[:MAX_LISTED]],
            "more_memories": len(memories) > MAX_LISTED,
            "relations": relations[:MAX_LISTED],
        }

    def _resolve(self, ref: object, scopes: Sequence[str] | None, field: str, *, memories: bool = False) -> str:
        """The keyword id ``ref`` names (an id, a name, an alias or a path), looked for only
        inside ``scopes`` when given: a name never reaches a keyword outside them. With
        ``memories``, a memory id (or a link or relation key) is taken as it is: the caller's
        guard checks that it is inside the scopes."""
        if not isinstance(ref, str):
            raise InvalidInputError(f"{field} must be a keyword id, name or path, got {type(ref).__name__}")
        return self.tree.resolve(ref, scope=list(scopes) if scopes else None, field=field, memories=memories)

    def _tree(self, keyword_id: str | None = None, depth: int = 3, scope: object = None) -> dict[str, Any]:
        scopes = self.guard.read_scopes(scope)
        if keyword_id is not None:
            keyword_id = self._resolve(keyword_id, scopes, "keyword_id")
            self.guard.require(keyword_id, scopes, "keyword_id")
            starts = [keyword_id]
        elif scopes is not None:
            starts = sorted(self.guard.tops(scopes))
            if not starts:
                return {"text": f"(scope {' or '.join(map(quote, scopes))} holds nothing yet)"}
        else:
            starts = [ROOT_ID]
        lines: list[str] = []
        cut = [False]

        def walk(keyword: Keyword, level: int) -> None:  # level 1: a child of the start
            if len(lines) >= MAX_OUTLINE:
                cut[0] = True
                return
            count = len(self.tree.get_infos_of_keyword(keyword.id, size=_COUNTED))
            held = f", {count}{'+' if count >= _COUNTED else ''} memor{'y' if count == 1 else 'ies'}" if count else ""
            lines.append(f"{'  ' * (level - 1)}- {quote(keyword.name)} [{keyword.id}{held}]")
            if level < depth:
                for child in self.tree.get_children(keyword.id):
                    walk(child, level + 1)

        for start in starts:
            lines.append(_path_line(self.tree.get_path(start)))
            shown = len(lines)
            for child in self.tree.get_children(start):
                walk(child, 1)
            if len(lines) == shown and not cut[0]:
                lines.append("  (no keywords below)")
        if cut[0]:
            lines.append(f"… the outline stops at {MAX_OUTLINE} keywords: start lower (keyword_id) or lower the depth")
        return {"text": "\n".join(lines)}

    def _history(self, entity_id: str | None = None, limit: int = 20, scope: object = None) -> dict[str, Any]:
        scopes = self.guard.read_scopes(scope)
        if entity_id is not None:
            entity_id = self._resolve(entity_id, scopes, "entity_id", memories=True)
        operations = self.tree.history(entity_id, limit, scope=scopes)
        return {"operations": [self._operation(op) for op in operations]}

    @staticmethod
    def _operation(op: Operation) -> dict[str, Any]:
        changes = []
        for change in op.changes[:MAX_CHANGES]:
            entity = change.after
            what = "deleted" if entity.deleted else ("created" if change.before is None else "changed")
            kind = type(entity).__name__.lower()
            if isinstance(entity, Keyword):
                changes.append({"keyword": entity.id, "name": entity.name, "what": what})
            elif isinstance(entity, Info):
                changes.append({"memory": entity.id, "text": entity.content[:120], "what": what})
            else:
                changes.append({kind: change.key, "what": what})  # a link or a relation
        summary: dict[str, Any] = {"op_id": op.op_id, "kind": op.kind, "actor": op.actor, "time": _iso(op.timestamp),
                                   "changes": changes}
        if len(op.changes) > MAX_CHANGES:
            summary["more_changes"] = len(op.changes) - MAX_CHANGES
        return summary

    # --- writing tools -----------------------------------------------------------------------

    def _remember(self, text: str, scope: str | None = None) -> dict[str, Any]:
        from kwtree.facade.mem0 import verbatim_options
        from kwtree.memory.messages import digest

        if not text.strip():
            raise InvalidInputError("remember: text must hold the memory's words, got only white space")
        chosen = self.guard.write_scope(scope) or DEFAULT_SCOPE
        messages = [{"role": "user", "content": text}]
        session = f"remember-{digest(messages)[:16]}"
        options = verbatim_options(provenance=_AGENT_PROVENANCE)
        result = self.tree.memory.commit_session(messages, session_id=session, scope=chosen, options=options)
        held: list[str] = []
        if result.op_id is None:  # remembered before: which memory holds it (none: forgotten or deleted since)
            held = [info.id for info in self.tree.memory.memories(chosen) if info.content == text.strip()]
            if not held:  # so remember it again, anew
                result = self.tree.memory.commit_session(messages, session_id=f"{session}-{self.tree.last_op_id}",
                                                  scope=chosen, options=options)
        ids = [decision.info_id for decision in result.decisions if decision.info_id is not None] or held
        return {"op_id": result.op_id, "scope": chosen, "memory_ids": ids, "already_stored": result.op_id is None}

    def _commit_session(self, messages: list[dict[str, Any]], session_id: str, scope: str | None = None,
                        dry_run: bool = False) -> dict[str, Any]:
        from kwtree.memory.commit import CommitOptions

        chosen = self.guard.write_scope(scope) or DEFAULT_SCOPE
        result = self.tree.memory.commit_session(messages, session_id=session_id, scope=chosen,
                                          options=CommitOptions(dry_run=dry_run))
        committed: dict[str, Any] = {
            "op_id": result.op_id, "scope": chosen, "dry_run": result.dry_run,
            "new_messages": result.seen - result.first_new,
            "counts": {"extracted": result.extracted, "created": result.created, "appended": result.appended,
                       "merged": result.merged, "superseded": result.superseded, "skipped": result.skipped},
            "decisions": [{"action": decision.action, "category": decision.category, "text": decision.content,
                           "memory_id": decision.info_id, "reason": decision.reason}
                          for decision in result.decisions],
        }
        if result.fallbacks:  # committed all the same; the model learns what the failing LLM did not do
            committed["fallbacks"] = [{"step": fallback.step, "error": fallback.error, "instead": fallback.instead}
                                      for fallback in result.fallbacks]
        return committed

    def _create_keyword(self, name: str, parent_id: str | None = None, aliases: list[str] | None = None,
                        description: str = "", scope: str | None = None) -> dict[str, Any]:
        chosen = self.guard.write_scope(scope)
        if chosen is not None and parent_id is None:
            top = self.tree.memory.scope_keyword(chosen)
            keyword = (self.guard.create_in_scope(chosen, name, aliases, description) if top is None
                       else self.tree.create_keyword(name, top.id, aliases, description))
        else:
            if parent_id is not None:
                parent_id = self._resolve(parent_id, (chosen,) if chosen else None, "parent_id")
            if chosen is not None and parent_id is not None:
                self.guard.require(parent_id, (chosen,), "parent_id")
            keyword = self.tree.create_keyword(name, parent_id, aliases, description)
        return {"op_id": keyword.op_id, "keyword": self._keyword_brief(keyword)}

    def _create_info(self, content: str, keyword_ids: list[str] | None = None, source: str = "",
                     auto_link: bool = False, scope: str | None = None) -> dict[str, Any]:
        chosen = self.guard.write_scope(scope)
        keyword_ids = None if keyword_ids is None else [
            self._resolve(ref, (chosen,) if chosen else None, f"keyword_ids[{index}]")
            for index, ref in enumerate(keyword_ids)]
        if chosen is not None:
            if auto_link:
                raise InvalidInputError("create_info: auto_link may file a memory outside the scope "
                                        f"{chosen!r}; give keyword_ids inside it (or use remember)")
            if not keyword_ids:
                raise InvalidInputError(f"create_info: keyword_ids is required in the scope {chosen!r} "
                                        "(or use remember, which files a fact in the scope by itself)")
            for index, keyword_id in enumerate(keyword_ids):
                self.guard.require(keyword_id, (chosen,), f"keyword_ids[{index}]")
        info = self.tree.create_info(content, source, keyword_ids, auto_link=auto_link, provenance=_AGENT_PROVENANCE)
        return {"op_id": info.op_id, "memory": self._info_brief(info), "filed_under": self._filed_under(info.id, None)}

    def _link_info(self, info_id: str, keyword_id: str, relation: str = "primary",
                   scope: str | None = None) -> dict[str, Any]:
        chosen = self.guard.write_scope(scope)
        keyword_id = self._resolve(keyword_id, (chosen,) if chosen else None, "keyword_id")
        if chosen is not None:
            self.guard.require(info_id, (chosen,), "info_id", "memory")
            self.guard.require(keyword_id, (chosen,), "keyword_id")
        link = self.tree.link_info(info_id, keyword_id, relation)
        return {"op_id": link.op_id, "memory_id": info_id, "keyword": self._keyword_brief(self.tree.get_keyword(
            keyword_id)), "relation": link.relation.value}

    def _relate(self, from_id: str, to_id: str, type: str = "related_to", weight: float = 1.0, reason: str = "",
                scope: str | None = None) -> dict[str, Any]:
        chosen = self.guard.write_scope(scope)
        from_id = self._resolve(from_id, (chosen,) if chosen else None, "from_id")
        to_id = self._resolve(to_id, (chosen,) if chosen else None, "to_id")
        if chosen is not None:
            self.guard.require(from_id, (chosen,), "from_id")
            self.guard.require(to_id, (chosen,), "to_id")
        relation = self.tree.relate(from_id, to_id, type, weight, reason)
        return {"op_id": relation.op_id, "from": self._keyword_brief(self.tree.get_keyword(from_id)),
                "to": self._keyword_brief(self.tree.get_keyword(to_id)), "type": relation.type,
                "weight": relation.weight}

    def _forget(self, id: str | None = None, scope: str | None = None) -> dict[str, Any]:
        if (id is None) == (scope is None):
            raise InvalidInputError("forget: give exactly one of id (a memory or keyword) and scope")
        if scope is not None:
            report = self.tree.forget(scope=self.guard.inside_pin(clean_scope(scope), "scope"))
        else:
            assert id is not None
            id = self._resolve(id, (self.pinned,) if self.pinned is not None else None, "id", memories=True)
            if self.pinned is not None:  # a memory also filed elsewhere is not this scope's alone to erase
                kind = "keyword" if self.guard.is_keyword(id) else "memory"
                self.guard.require(id, (self.pinned,), "id", kind, wholly=True, label="keyword or memory")
            report = self.tree.forget(id)
        return {"op_id": report.op_id, "target": report.target, "memories_erased": len(report.infos),
                "keywords_erased": len(report.keywords), "memories_kept": len(report.kept),
                "already_forgotten_by": report.already_forgotten_by,
                "copies_not_reached": [copy.what for copy in report.unreachable]}

    def _undo(self, op_id: str, force: bool = False, scope: str | None = None) -> dict[str, Any]:
        chosen = self.guard.write_scope(scope)
        if chosen is not None:
            self.guard.require_undoable(op_id, chosen)
        op = self.tree.undo(op_id, force, scope=chosen)
        return {"op_id": None if op is None else op.op_id, "undid": op_id,
                "note": "" if op is not None else "everything it wrote already was as before it: nothing written"}
