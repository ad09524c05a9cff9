"""KeywordTree's lifecycle hooks for agent runtimes: ``bootstrap``, ``assemble``,
``after_turn``, ``end_session``, and the reads they stand on (``memories``,
``memory_scope``).

A base class of KeywordTree, kept here so each module stays readable in one sitting. The hooks
are called around the model call, never inside it::

    prompt = tree.assemble(user_text, scope)           # before: what the model should know
    answer = model(prompt, messages)                   # the model call: no kwtree inside
    messages += [user_turn, answer_turn]
    tree.after_turn(messages, session_id, scope)       # after: commit the new turns
    ...
    tree.end_session(messages, session_id, scope)      # when the conversation ends

The prompt blocks are built from ``kwtree.memory.shelf`` (what a scope holds) and ``recall``;
their size is measured with ``kwtree.retrieval.context.estimate_tokens`` on the whole block,
so a block never exceeds ``max_tokens`` by that estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

from kwtree.errors import InvalidInputError
from kwtree.facade.memory import MemoryMethods
from kwtree.facade.retrieval import RetrievalMethods
from kwtree.memory.candidates import Message
from kwtree.memory.commit import SUMMARY_KIND, CommitResult
from kwtree.memory.shelf import branch_infos, latest_summary, scope_memories, scope_of
from kwtree.models import Info, Keyword
from kwtree.normalize import normalize_name
from kwtree.retrieval import relevance
from kwtree.retrieval.context import estimate_tokens
from kwtree.retrieval.scopes import clean_scope, clean_scopes
from kwtree.retrieval.scopes import scope_keyword as find_scope_keyword
from kwtree.retrieval.timeline import happened_day
from kwtree.validate import clean_id, clean_int

__all__ = ["HEADINGS", "HookMethods"]

#: The headings of the prompt blocks, in the order ``assemble`` fills them.
HEADINGS = {"profile": "## Profile", "preferences": "## Preferences", "recalled": "## Relevant memories",
            "summary": "## Last session"}
#: ``assemble`` asks recall for this many hits (the budget, not k, bounds what is shown).
_RECALL_K = 50


class _Block:
    """Lines added under headings while the whole text stays within the budget."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.lines: list[str] = []
        self.shown: set[str] = set()  # the normalised texts already in the block

    def add(self, heading: str, lines: Sequence[str], dedup_keys: Sequence[str] | None = None) -> None:
        """Add each of ``lines`` that fits (a later, shorter one may fit where an earlier did
        not), under ``heading`` when at least one does; a line whose key (normalised) is shown
        already, alone or inside a longer text, is skipped."""
        keys = dedup_keys if dedup_keys is not None else lines
        opened = False
        for line, key in zip(lines, keys, strict=True):
            norm = normalize_name(key)
            if not norm or any(norm in shown for shown in self.shown):  # shown already, maybe inside a longer text
                continue
            added = [line] if opened else [heading, line]
            if estimate_tokens("\n".join([*self.lines, *added])) <= self.max_tokens:
                self.lines.extend(added)
                self.shown.add(norm)
                opened = True

    def text(self) -> str:
        return "\n".join(self.lines)


def _scopes(scope: object) -> tuple[str, ...]:
    scopes = clean_scopes(scope)
    if scopes is None:
        raise InvalidInputError("scope must name whose memories to read, e.g. 'user:alice' (or a list of scopes)")
    return scopes


def _memory_line(info: Info) -> str:
    day = happened_day(info)
    return f"- [{day}] {info.content}" if day else f"- {info.content}"


def _summary_lines(summary: Info) -> list[str]:
    meta = summary.metadata
    lines = [f"Session {meta.get('session_id', '')}".rstrip()]
    for label, key in (("Open questions", "open_questions"), ("Decisions", "decisions"), ("Topics", "topics")):
        items = meta.get(key)
        if isinstance(items, list) and items:
            lines.append(f"{label}: {'; '.join(str(item) for item in items)}")
    return lines


class HookMethods(MemoryMethods, RetrievalMethods):
    """Lifecycle hooks for agent runtimes (see KeywordTree and docs/agent-memory.md)."""

    def memories(self, scope: str | Sequence[str]) -> list[Info]:
        """The memories of ``scope`` (a scope path or a list of them; nested scopes included),
        oldest first: the infos ``commit_session`` extracted and those stored verbatim, not the
        archived turns and session summaries under each scope's ``sessions`` branch. A scope
        that does not exist yet holds none. InvalidInputError naming ``scope`` when malformed."""
        self._check_open()
        scopes = _scopes(scope)
        return self._read(lambda state: scope_memories(state, scopes))

    def memory_scope(self, info_id: str) -> str | None:
        """The scope path the memory ``info_id`` belongs to, or None when it is not a live
        memory of any scope (an archived turn or summary, an info outside every scope, a
        deleted or unknown id)."""
        self._check_open()
        clean_id(info_id, "info_id")
        return self._read(lambda state: scope_of(state, info_id))

    def scope_keyword(self, scope: str) -> Keyword | None:
        """The live keyword that holds ``scope`` (a scope path such as "user:alice"), or None
        while the scope does not exist. InvalidInputError naming ``scope`` when malformed."""
        self._check_open()
        path = clean_scope(scope)
        return self._read(lambda state: find_scope_keyword(state, path))

    def bootstrap(self, scope: str | Sequence[str], max_tokens: int = 800) -> str:
        """The cold-start block for a new conversation: the scope's profile, its preferences,
        then what the latest session left open (its open questions, decisions and topics), as
        prompt-ready text under ``## `` headings, within ``max_tokens`` (estimated as
        ``estimate_tokens`` documents). Empty when the scope holds nothing. Reads only."""
        self._check_open()
        scopes = _scopes(scope)
        block = _Block(clean_int(max_tokens, "max_tokens", 1, 1_000_000))
        self._add_profile(block, scopes)
        self._add_summary(block, scopes)
        return block.text()

    def assemble(self, query: str, scope: str | Sequence[str], max_tokens: int = 1500, *,
                 min_score: float = relevance.MIN_SCORE) -> str:
        """The context block for one model call: the scope's profile → its preferences → the
        memories ``recall(query, scope=scope, min_score=min_score)`` finds (archived turns
        included, session summaries not), most relevant first → the latest session's summary;
        each text shown once (a recalled memory already shown as profile or preference is
        skipped), within ``max_tokens`` by ``estimate_tokens``: a line that does not fit is
        left out and a shorter later one may still fit. Empty when the scope holds nothing.
        Reads only; InvalidInputError naming the argument for bad input."""
        self._check_open()
        scopes = _scopes(scope)
        block = _Block(clean_int(max_tokens, "max_tokens", 1, 1_000_000))
        hits = self.recall(query, k=_RECALL_K, scope=list(scopes), min_score=min_score)
        self._add_profile(block, scopes)
        recalled = [hit.info for hit in hits if hit.info.metadata.get("kind") != SUMMARY_KIND]
        block.add(HEADINGS["recalled"], [_memory_line(info) for info in recalled],
                  [info.content for info in recalled])
        self._add_summary(block, scopes)
        return block.text()

    def after_turn(self, messages: Sequence[Message], session_id: str, scope: str) -> CommitResult:
        """Commit the conversation so far after a turn: ``commit_session(messages,
        session_id=session_id, scope=scope)``, which extracts and writes only the messages not
        committed before (resend the whole conversation; the earlier messages are context).
        Offline it returns once the operation is durable, without waiting for embeddings: the
        outbox worker embeds the new infos afterwards (``wait_indexed()`` waits for them)."""
        return self.commit_session(messages, session_id=session_id, scope=scope)

    def end_session(self, messages: Sequence[Message], session_id: str, scope: str) -> CommitResult:
        """The last commit of a conversation: the same incremental ``commit_session`` as
        ``after_turn``, for the messages since the last one. It waits for nothing else (not for
        the embeddings: call ``wait_indexed()`` before closing a tree whose vectors must be
        ready) and closes nothing: committing the same ``session_id`` later continues it."""
        return self.commit_session(messages, session_id=session_id, scope=scope)

    # --- the blocks ---------------------------------------------------------------------------

    def _add_profile(self, block: _Block, scopes: tuple[str, ...]) -> None:
        for branch in ("profile", "preferences"):
            infos = self._read(lambda state, branch=branch: branch_infos(state, scopes, branch))  # type: ignore[misc]
            block.add(HEADINGS[branch], [_memory_line(info) for info in infos], [info.content for info in infos])

    def _add_summary(self, block: _Block, scopes: tuple[str, ...]) -> None:
        summary = self._read(lambda state: latest_summary(state, scopes))
        if summary is not None:
            block.add(HEADINGS["summary"], _summary_lines(summary))
