"""Agent memory as one layer: :class:`AgentMemory`, composed into every tree as ``tree.memory``
(``KeywordTree``'s methods of the same names delegate to it). It commits conversations as
memories (``commit_session``, ``after_turn``, ``end_session``), reads them by scope
(``memories``, ``list_memories``, ``scopes``, ``memory_scope``, ``scope_keyword``), builds the
prompt blocks (``bootstrap``, ``assemble``) and the keywords' abstracts (``abstracts``). It
reaches the engine, the caches and the descend loop only through the port it declares,
:class:`kwtree.memory.port.MemoryPort`.

The hooks are called around the model call, never inside it::

    prompt = tree.memory.assemble(user_text, scope)     # before: what the model should know
    answer = model(prompt, messages)                    # the model call: no kwtree inside
    messages += [user_turn, answer_turn]
    tree.memory.after_turn(messages, session_id, scope) # after: commit the new turns
    ...
    tree.memory.end_session(messages, session_id, scope) # when the conversation ends

The prompt blocks are built from ``kwtree.memory.shelf`` (what a scope holds) and ``recall``,
and rendered as ``kwtree.retrieval.context.Block`` renders every block: fenced as recalled data,
one memory per line with who said it and when, stored text quoted so that it cannot forge a
heading, a turn or the fence (``kwtree.retrieval.fence``). Their size is measured with
``kwtree.retrieval.context.estimate_tokens`` on the whole block, so a block never exceeds
``max_tokens`` by that estimate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.memory.abstracts import KeywordAbstract, build_abstracts
from kwtree.memory.candidates import Message
from kwtree.memory.filters import check_filters
from kwtree.memory.listing import MemoryPage, MemoryQuery, list_memories
from kwtree.memory.port import MemoryPort
from kwtree.memory.shelf import all_scopes, branch_infos, latest_summary, scope_memories, scope_of
from kwtree.memory_schema import (
    KIND,
    SESSION_ID,
    SESSION_TIME,
    SUMMARY_DECISIONS,
    SUMMARY_KIND,
    SUMMARY_OPEN_QUESTIONS,
    SUMMARY_TOPICS,
)
from kwtree.models import Info, Keyword
from kwtree.normalize import normalize_name
from kwtree.retrieval import relevance
from kwtree.retrieval.context import Block
from kwtree.retrieval.fence import memory_line
from kwtree.retrieval.scopes import clean_scope, clean_scopes
from kwtree.retrieval.scopes import scope_keyword as find_scope_keyword
from kwtree.retrieval.timeline import clean_window
from kwtree.validate import clean_flag, clean_id, clean_int, clean_label, clean_provenances, clean_text

if TYPE_CHECKING:  # the commit path is imported by the first commit: a read never loads it
    from kwtree.memory.commit import CommitOptions, CommitResult

__all__ = ["HEADINGS", "AgentMemory"]

#: The headings of the prompt blocks, in the order ``assemble`` fills them.
HEADINGS = {"profile": "## Profile", "preferences": "## Preferences", "recalled": "## Relevant memories",
            "summary": "## Last session"}
#: ``assemble`` asks recall for this many hits (the budget, not k, bounds what is shown).
_RECALL_K = 50
#: The lines of the latest session's summary: kwtree's label of each, and its summary key.
_SUMMARY_LISTS = (("open questions", SUMMARY_OPEN_QUESTIONS), ("decisions", SUMMARY_DECISIONS),
                  ("topics", SUMMARY_TOPICS))


class _BlockOnce:
    """A ``Block`` that shows each text once: a line whose key (normalised) is shown already,
    alone or inside a longer text, is skipped."""

    def __init__(self, max_tokens: int) -> None:
        self.block = Block(max_tokens)
        self.shown: set[str] = set()  # the normalised texts already in the block

    def add(self, heading: str, lines: Sequence[str], keys: Sequence[str]) -> None:
        """Add each of ``lines`` that fits (a later, shorter one may fit where an earlier did
        not) under ``heading``, unless its key is shown already."""
        for line, key in zip(lines, keys, strict=True):
            norm = normalize_name(key)
            if not norm or any(norm in shown for shown in self.shown):  # shown already, maybe inside a longer text
                continue
            if self.block.add(heading, line):
                self.shown.add(norm)


#: A moment as the time filters take it: epoch seconds, a datetime, a date or ISO 8601 text.
When = float | datetime | date | str | None


def _scopes(scope: object) -> tuple[str, ...]:
    scopes = clean_scopes(scope)
    if scopes is None:
        raise InvalidInputError("scope must name whose memories to read, e.g. 'user:alice' (or a list of scopes)")
    return scopes


def _session_time(state: State, summary: Info) -> float | None:
    """When the summary's session took place: its keyword's ``session_time``, if recorded."""
    for kid in state.keywords_by_info.get(summary.id, ()):
        when = state.keywords[kid].metadata.get(SESSION_TIME)
        if isinstance(when, (int, float)) and not isinstance(when, bool) and math.isfinite(when):
            return float(when)
    return None


def _summary_lines(summary: Info, when: float | None) -> tuple[list[str], list[str]]:
    """The summary's lines (its session, then each non-empty list), dated ``when``, and their
    dedup keys."""
    meta = summary.metadata
    lines = [memory_line(summary, label="session", value=str(meta.get(SESSION_ID, "")), when=when)]
    keys = [f"session {meta.get(SESSION_ID, '')}"]
    for label, key in _SUMMARY_LISTS:
        items = meta.get(key)
        if isinstance(items, list) and items:
            lines.append(memory_line(summary, label=label, value=[str(item) for item in items], when=when))
            keys.append(f"{label} {' '.join(str(item) for item in items)}")
    return lines, keys


class AgentMemory:
    """A tree's agent memory (``tree.memory``; see docs/agent-memory.md), over ``port``."""

    def __init__(self, port: MemoryPort) -> None:
        self._port = port

    def commit_session(self, messages: Sequence[Message], *, session_id: str, scope: str | None = None,
                       options: CommitOptions | None = None) -> CommitResult:
        """Archive a session and turn it into memories, as ONE operation (kind
        ``"commit_session"``) that ``undo(op_id)`` reverses.

        The session becomes a keyword under the scope's ``sessions`` branch (the scope
        keyword and its branches are created on first use), with a summary info and (with
        ``options.keep_turns``) one info per message. The extractor's candidates are routed by
        their category's policy (``kwtree.memory.policies``), deduplicated against the scope's
        memories (create / skip / merge / supersede, each with its reason in
        ``CommitResult.decisions`` and the operation's audit) and new keywords placed by the
        agent inside the category's branch. Committing the same ``session_id`` again extracts
        only the messages after those already committed; the earlier ones must be resent
        unchanged (InvalidInputError otherwise, naming the first that differs). ``scope``
        defaults to ``DEFAULT_SCOPE`` ("user:default"). With ``options.dry_run`` nothing is
        written and the result is the plan. Durable on return (as every write); embeddings
        follow through the outbox.

        The LLM (the tree's ``llm_client``) is asked before the write lock is taken. When it
        fails a step (extraction, placement, dedup: refused, unreachable, overloaded after its
        retries, timed out, or answered something unusable), the default
        ``on_agent_failure="fallback"`` does that step as a tree without an LLM does (the
        offline rules, the offline navigator, the thresholds) and commits the session all the
        same, each such step a ``CommitFallback`` in ``CommitResult.fallbacks`` and in the
        operation's audit; after the first call that got no answer the LLM is not asked again
        in this commit.

        Raises InvalidInputError naming the field for bad messages, session_id, scope,
        options or extractor output; AgentError when the agent or the LLM failed on a tree
        opened with ``on_agent_failure="raise"`` (or a caller's extractor raised something
        other than an LLMError); ReadOnlyError on a tree that may not write (a dry run is
        allowed). A failed call writes nothing."""
        from kwtree.memory.session_commit import commit_session

        return commit_session(self._port, messages, session_id=session_id, scope=scope, options=options)

    def memories(self, scope: str | Sequence[str]) -> list[Info]:
        """The memories of ``scope`` (a scope path or a list of them; nested scopes included),
        oldest first: the infos ``commit_session`` extracted and those stored verbatim, not the
        archived turns and session summaries under each scope's ``sessions`` branch. A scope
        that does not exist yet holds none. InvalidInputError naming ``scope`` when malformed."""
        self._port.check_open()
        scopes = _scopes(scope)
        return self._port.read(lambda state: scope_memories(state, scopes))

    def list_memories(self, scope: str | Sequence[str] | None = None, *, category: str | None = None,
                      under: str | None = None, since: When = None, until: When = None,
                      recorded_since: When = None, recorded_until: When = None,
                      where: Mapping[str, Any] | None = None, text: str | None = None,
                      include_superseded: bool = True, newest_first: bool = False,
                      offset: int = 0, limit: int = 50) -> MemoryPage:
        """A page of the memories of ``scope`` (None: of every scope) that are of ``category``,
        linked under keyword id ``under``, happened ``since``..``until`` and were recorded
        ``recorded_since``..``recorded_until`` (epoch seconds, a datetime or ISO 8601), whose
        metadata matches ``where`` (mem0's filters: ``kwtree.memory.filters``) and whose content
        holds ``text`` (case-insensitive); superseded values too unless ``include_superseded``
        is False. Oldest recorded first (``newest_first``: the other way), ``offset`` matches
        skipped, at most ``limit`` (1-10000) kept; ``MemoryPage.total`` and ``remaining`` say
        how many matched in all and how many lie after the page. InvalidInputError naming the
        malformed argument, NotFoundError when ``under`` is no live keyword."""
        self._port.check_open()
        scopes = clean_scopes(scope)
        if category is not None:
            category = clean_label(category, "category")
        under_id = clean_id(under, "under") if under is not None else None
        query = MemoryQuery(
            scopes=scopes, category=category,
            happened=clean_window(since, until),
            recorded=clean_window(recorded_since, recorded_until, ("recorded_since", "recorded_until")),
            where=check_filters(where, "where") if where is not None else None,
            text=clean_text(text, "text", allow_empty=False) if text is not None else None,
            include_superseded=clean_flag(include_superseded, "include_superseded"),
            newest_first=clean_flag(newest_first, "newest_first"))
        start, size = clean_int(offset, "offset", 0), clean_int(limit, "limit", 1, 10_000)

        def read(state: State) -> MemoryPage:
            if under_id is None:
                return list_memories(state, query, start, size)
            if state.live_keyword(under_id) is None:
                raise NotFoundError(f"under: no live keyword has id {under_id!r}")
            return list_memories(state, dataclasses.replace(query, under=frozenset(state.subtree(under_id))),
                                 start, size)

        return self._port.read(read)

    def scopes(self) -> list[str]:
        """The path of every scope the tree holds ("user:alice", "user:alice/run:42" ...), each
        before the scopes nested in it."""
        self._port.check_open()
        return self._port.read(all_scopes)

    def memory_scope(self, info_id: str) -> str | None:
        """The scope path the memory ``info_id`` belongs to, or None when it is not a live
        memory of any scope (an archived turn or summary, an info outside every scope, a
        deleted or unknown id)."""
        self._port.check_open()
        clean_id(info_id, "info_id")
        return self._port.read(lambda state: scope_of(state, info_id))

    def scope_keyword(self, scope: str) -> Keyword | None:
        """The live keyword that holds ``scope`` (a scope path such as "user:alice"), or None
        while the scope does not exist. InvalidInputError naming ``scope`` when malformed."""
        self._port.check_open()
        path = clean_scope(scope)
        return self._port.read(lambda state: find_scope_keyword(state, path))

    def bootstrap(self, scope: str | Sequence[str], max_tokens: int = 800, *,
                  provenance: str | Sequence[str] | None = None) -> str:
        """The cold-start block for a new conversation: the scope's profile, its preferences,
        then what the latest session left open (its open questions, decisions and topics),
        fenced as recalled data under ``## `` headings (``kwtree.retrieval.fence``), within
        ``max_tokens`` (estimated as ``estimate_tokens`` documents). ``provenance`` (one of
        ``kwtree.PROVENANCES`` or a list; None: all) shows only what those said. Empty when
        the scope holds nothing. Reads only."""
        self._port.check_open()
        scopes = _scopes(scope)
        shelf = _BlockOnce(clean_int(max_tokens, "max_tokens", 1, 1_000_000))
        said_by = clean_provenances(provenance)
        self._add_profile(shelf, scopes, said_by)
        self._add_summary(shelf, scopes, said_by)
        return shelf.block.text()

    def assemble(self, query: str, scope: str | Sequence[str], max_tokens: int = 1500, *,
                 min_score: float = relevance.MIN_SCORE, provenance: str | Sequence[str] | None = None) -> str:
        """The context block for one model call: the scope's profile → its preferences → the
        memories ``recall(query, scope=scope, min_score=min_score)`` finds (archived turns
        included, session summaries not), most relevant first → the latest session's summary;
        fenced as recalled data, one memory per line with who said it and when
        (``kwtree.retrieval.fence``); each text shown once (a recalled memory already shown as
        profile or preference is skipped), within ``max_tokens`` by ``estimate_tokens``: a
        line that does not fit is left out and a shorter later one may still fit.
        ``provenance`` (one of ``kwtree.PROVENANCES`` or a list; None: all) shows only what
        those said, in every section. Empty when the scope holds nothing. Reads only;
        InvalidInputError naming the argument for bad input."""
        self._port.check_open()
        scopes = _scopes(scope)
        shelf = _BlockOnce(clean_int(max_tokens, "max_tokens", 1, 1_000_000))
        said_by = clean_provenances(provenance)
        hits = self._port.recall(query, _RECALL_K, list(scopes), min_score,
                                 None if said_by is None else sorted(said_by))
        self._add_profile(shelf, scopes, said_by)
        recalled = [hit.info for hit in hits if hit.info.metadata.get(KIND) != SUMMARY_KIND]
        shelf.add(HEADINGS["recalled"], [memory_line(info) for info in recalled], [info.content for info in recalled])
        self._add_summary(shelf, scopes, said_by)
        return shelf.block.text()

    def after_turn(self, messages: Sequence[Message], session_id: str, scope: str) -> CommitResult:
        """Commit the conversation so far after a turn: ``commit_session(messages,
        session_id=session_id, scope=scope)``, which extracts and writes only the messages not
        committed before (resend the whole conversation; the earlier messages are context).
        Offline it returns once the operation is durable, without waiting for embeddings: the
        outbox worker embeds the new infos afterwards (``wait_indexed()`` waits for them).

        A message over the tree's ``Limits.content_bytes`` is stored cut to it, with a note
        (``Limits.cut_text``), where ``commit_session`` would raise LimitExceededError: the
        conversation is resent every turn, so one pasted document would otherwise stop the
        whole session from ever being stored again. Cut the same way each time, it still
        matches what was committed."""
        return self.commit_session(self._cut_to_limits(messages), session_id=session_id, scope=scope)

    def end_session(self, messages: Sequence[Message], session_id: str, scope: str) -> CommitResult:
        """The last commit of a conversation: the same incremental ``commit_session`` as
        ``after_turn`` (an oversized message cut the same way), for the messages since the
        last one. It waits for nothing else (not for the embeddings: call ``wait_indexed()``
        before closing a tree whose vectors must be ready) and closes nothing: committing the
        same ``session_id`` later continues it."""
        return self.commit_session(self._cut_to_limits(messages), session_id=session_id, scope=scope)

    def _cut_to_limits(self, messages: Sequence[Message]) -> Sequence[Message]:
        """The messages, each string content over ``Limits.content_bytes`` cut to it with a
        note. Anything malformed is passed on as it is, for ``commit_session`` to refuse
        naming the field."""
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            return messages
        cut = self._port.limits.cut_text
        return [{**message, "content": cut(message["content"], "content_bytes")}
                if isinstance(message, Mapping) and isinstance(message.get("content"), str) else message
                for message in messages]

    def abstracts(self, keyword_id: str | None = None, *, scope: str | Sequence[str] | None = None,
                  rebuild: bool = False) -> list[KeywordAbstract]:
        """The abstracts of the keywords that hold memories (a live info linked to them) in
        ``keyword_id``'s subtree (the whole tree by default) inside ``scope`` (a scope path
        or a list of them), deepest first; those missing or stale (their subtree's memories
        changed since: a digest of which infos, in which version, it holds), or all with
        ``rebuild=True``, are built first and written as ONE operation of kind ``"abstract"``
        (each a new version of its keyword: in ``history()``, undone by ``undo(op_id)``).
        Nothing to build writes nothing. A tree that may not write (``read_only``, ``as_of``)
        builds nothing and lists what is stored, ``stale`` saying which are out of date.

        With an ``llm_client``, one structured call per keyword; when it fails or answers
        unusably the extractive summary is written instead, with a ``note`` saying why (a tree
        opened with ``on_agent_failure="raise"`` raises AgentError and writes nothing).
        Durable on return. InvalidInputError for a bad scope or flag; NotFoundError for an
        unknown keyword_id."""
        self._port.check_open()
        return build_abstracts(self._port, keyword_id, clean_scopes(scope), clean_flag(rebuild, "rebuild"))

    # --- the blocks ---------------------------------------------------------------------------

    def _add_profile(self, shelf: _BlockOnce, scopes: tuple[str, ...], said_by: frozenset[str] | None) -> None:
        for branch in ("profile", "preferences"):
            infos = self._port.read(lambda state, branch=branch: branch_infos(state, scopes, branch))  # type: ignore[misc]
            infos = [info for info in infos if said_by is None or info.provenance in said_by]
            shelf.add(HEADINGS[branch], [memory_line(info) for info in infos], [info.content for info in infos])

    def _add_summary(self, shelf: _BlockOnce, scopes: tuple[str, ...], said_by: frozenset[str] | None) -> None:
        def latest(state: State) -> tuple[Info, float | None] | None:
            summary = latest_summary(state, scopes)
            return None if summary is None else (summary, _session_time(state, summary))

        found = self._port.read(latest)
        if found is not None and (said_by is None or found[0].provenance in said_by):
            shelf.add(HEADINGS["summary"], *_summary_lines(*found))
