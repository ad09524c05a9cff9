"""KeywordTree's retrieval methods: ``recall``, ``context`` and the embedding outbox.

They are a base class of KeywordTree, kept here so each module stays readable in one sitting;
they use only what :class:`kwtree.facade.core.TreeCore` holds: the engine's state reader and
the caches (``kwtree/caches/tree_caches.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError
from kwtree.facade.core import TreeCore
from kwtree.memory.shelf import overview, stated_names
from kwtree.models import Hit, RelationType
from kwtree.normalize import normalize_name
from kwtree.retrieval import broad, dated, relevance, sources
from kwtree.retrieval import recall as fusion
from kwtree.retrieval.context import render_context
from kwtree.retrieval.resolve import resolve, resolve_entity
from kwtree.retrieval.scopes import clean_scopes, scope_members, scope_subtree
from kwtree.retrieval.timeline import Window, clean_window
from kwtree.validate import (
    clean_choice,
    clean_flag,
    clean_int,
    clean_provenances,
    clean_relation_type,
    clean_seconds,
    clean_text,
    finite_number,
    shown,
)
from kwtree.writes import require_keyword

__all__ = ["RecallMethods"]

#: Each retriever returns this many candidates per result asked for (at least 50).
OVERFETCH = 5


def clean_fraction(value: object, field: str) -> float:
    """``value`` as a number in [0, 1]; InvalidInputError naming ``field`` otherwise."""
    number = finite_number(value)
    if number is None or not 0 <= number <= 1:
        raise InvalidInputError(f"{field} must be a number from 0 (no floor) to 1, got {shown(value)}")
    return number


@dataclass(frozen=True, slots=True)
class _Asked:
    """A recall's arguments, checked."""

    text: str
    k: int
    mode: str
    kind: RelationType | None
    scopes: tuple[str, ...] | None
    floor: float
    window: Window | None
    said_by: frozenset[str] | None
    include_superseded: bool


@dataclass(frozen=True, slots=True)
class _Retrieved:
    """What the retrievers found for a recall: full-text and vector hits of infos, full-text
    hits of keywords, and the query's terms weighed by how rare they are."""

    text_hits: list[tuple[str, float]]
    vector_hits: list[tuple[str, float]]
    keyword_hits: list[tuple[str, float]]
    weighed: relevance.QueryTerms


class RecallMethods(TreeCore):
    """Recall, context and the embedding outbox (see KeywordTree)."""

    _weights: fusion.RecallWeights
    _scope_members: tuple[tuple[tuple[str, ...], int, str | None], tuple[frozenset[str], frozenset[str]]] | None = None

    def recall(
        self,
        query: str,
        k: int = 10,
        *,
        under: str | None = None,
        relation: RelationType | str | None = None,
        mode: str = "hybrid",
        scope: str | Sequence[str] | None = None,
        min_score: float = relevance.MIN_SCORE,
        since: float | datetime | date | str | None = None,
        until: float | datetime | date | str | None = None,
        provenance: str | Sequence[str] | None = None,
        include_superseded: bool = False,
    ) -> list[Hit]:
        """The ``k`` infos most relevant to ``query``, best first; none when nothing is.

        ``mode`` "bm25" ranks by full text, "vector" by embedding similarity, "hybrid" (the
        default) fuses both; in every mode infos linked to keywords the query names or
        matches are lifted (see ``kwtree/retrieval/recall.py``). ``under`` keeps infos linked to that
        keyword's subtree, ``relation`` those linked by that relation type. ``scope`` (a scope
        path such as "user:alice", or a list of them; None: every memory) keeps infos with a
        live link into the scopes' subtrees, and a hit lists only its keywords inside them; a
        scope that does not exist yet holds nothing. ``min_score`` is the relevance floor
        (``Hit.relevance``: the share of the query's rare terms and names the info, its
        keywords and its thread neighbours cover): nothing is returned unless some candidate
        reaches it, and then only hits reaching half of it; 0 turns it off (docs/retrieval.md).
        ``since`` and ``until`` (epoch seconds, a datetime or an ISO 8601 date or time; a date
        alone is its whole day; no zone: UTC) keep infos that happened then: their
        ``happened_at`` metadata, else their ``created_at``; without them, a query naming a date
        with its year ("on 1 May, 2022", "in July 2022") lifts the infos that happened then
        (``kwtree.retrieval.dated``). A hit whose evidence is already returned above it (a
        turn a better memory came from, a memory whose ``sources`` are all there) is left
        out (``kwtree.retrieval.sources``). ``provenance`` (one of ``kwtree.PROVENANCES`` or a
        list of them; None: all) keeps the infos whose text was said by one of them
        (``Info.provenance``). A superseded fact (a value the user has since changed: metadata
        ``superseded_by``) ranks below current ones, as the assistant's words and small talk
        do (``kwtree.retrieval.recall.ASSISTANT_STANDING``); ``include_superseded=True`` ranks
        it as if current, to ask for history on purpose. Equal scores come in the same order
        in every build of the same memory. Text is searchable as soon as the
        write returns; vectors once the outbox is drained (``wait_indexed``), and until then
        recall uses what is embedded.
        InvalidInputError naming the argument for bad input.
        """
        self._check_open()
        asked = _Asked(
            clean_text(query, "query", allow_empty=False), clean_int(k, "k", 1, 1000),
            clean_choice(mode, "mode", fusion.MODES), None if relation is None else clean_relation_type(relation),
            clean_scopes(scope), clean_fraction(min_score, "min_score"), clean_window(since, until),
            clean_provenances(provenance), clean_flag(include_superseded, "include_superseded"))
        self._limits.check_text("query", asked.text, "query_bytes")
        if under is not None:
            under = self._read(lambda state: require_keyword(state, under, "under").id)
        infos: frozenset[str] | None = None  # a scoped read searches its scopes' memories only
        keywords: frozenset[str] | None = None
        words = asked.text  # what the full-text parts and the floor read of the query
        owner: frozenset[str] = frozenset()
        if asked.scopes is not None:
            scopes = asked.scopes
            infos, keywords = self._read(lambda state: self._members(state, scopes))
            if not keywords:
                return []  # no scope exists yet: nothing to search
            owner = self._read(lambda state: broad.owner_names(scopes, stated_names(state, scopes)))
            about = broad.asks_about(asked.text)
            if about is not None and (about == broad.SELF or normalize_name(about) in owner) and under is None \
                    and asked.kind is None and asked.window is None:  # "what do you know about me?": the person, whole
                return self._read(lambda state: fusion.listed(state, [
                    info for info in overview(state, scopes, asked.include_superseded)
                    if asked.said_by is None or info.provenance in asked.said_by], asked.k,
                    scope_subtree(state, scopes)))
            words = broad.without_names(asked.text, owner)  # in Priya's scope, "Priya" is every memory's subject
        found = self._retrieve(asked, words, infos, keywords)
        whom = relevance.terms_of(asked.text) | {term for name in owner for term in relevance.terms_of(name)}
        judging = fusion.Judging(found.weighed, asked.floor, relevance.vector_scale(self._caches.model, asked.mode),
                                 asked.include_superseded, whom, dated.asked_time(asked.text))
        named = dated.named_window(asked.text) if asked.window is None else None

        def rank(state: State) -> list[Hit]:
            inside = None if asked.scopes is None else scope_subtree(state, asked.scopes)
            scores = fusion.keyword_scores(state, words, found.keyword_hits)

            def ranked(width: int) -> list[Hit]:
                def fuse(within: Window | None) -> list[Hit]:
                    return fusion.fuse(state, found.text_hits, found.vector_hits, scores, width, self._weights,
                                       fusion.Filters(under, asked.kind, inside, within, asked.said_by), judging)

                hits = fuse(asked.window)
                return hits if named is None else dated.lift(hits, fuse(named), width)

            hits = ranked(asked.k)
            kept = sources.collapse(hits, asked.k)
            if len(kept) < len(hits):  # a memory and its source turn shared the top k: rank wider to fill it
                kept = sources.collapse(ranked(asked.k * sources.OVERFETCH), asked.k)
            return kept

        return self._read(rank)

    def _retrieve(self, asked: _Asked, words: str, infos: frozenset[str] | None,
                  keywords: frozenset[str] | None) -> _Retrieved:
        """What the retrievers find for ``asked`` (``words``: the query as the full-text parts
        read it), among ``infos`` and ``keywords`` when the read is scoped."""
        fetch = max(50, OVERFETCH * asked.k)
        fulltext = self._caches.fulltext
        text_hits = fulltext.text_hits(words, "info", fetch, infos) if asked.mode != "vector" else []
        if text_hits and self._weights.feedback:
            expanded = self._read(lambda state: fusion.feedback_terms(state, words, text_hits))
            if expanded:
                again = fulltext.text_hits(f"{words} {' '.join(expanded)}", "info", fetch, infos)
                text_hits = fusion.merge_rankings(text_hits, again, self._weights.feedback)
        vector_hits = self._caches.vector_hits(asked.text, "info", fetch, infos) if asked.mode != "bm25" else []
        return _Retrieved(text_hits, vector_hits, fulltext.text_hits(words, "keyword", 10, keywords),
                          relevance.query_terms(words, lambda terms: fulltext.document_frequencies(terms, "info",
                                                                                                   infos)))

    def resolve(self, ref: str, *, scope: str | Sequence[str] | None = None, field: str = "keyword_id",
                memories: bool = False) -> str:
        """The id of the one live keyword ``ref`` names: an id, a name or an alias (normalised),
        or a path of names joined by "/" or "›" ("Work/Tools/Python"; it may start below the
        root), inside ``scope`` when given (``kwtree.retrieval.resolve``). With ``memories``,
        an info id or a link or relation key is also taken, as it is (for ``forget`` and
        ``history``, which take any of them). InvalidInputError listing the candidates with
        their paths when several fit, NotFoundError suggesting the closest names when none
        does; ``field`` names the argument in both."""
        if type(field) is not str or not field or not field.isprintable() or len(field) > 200:
            raise InvalidInputError(f"field must name the argument, e.g. 'keyword_id', got {shown(field)}")
        text = clean_text(ref, field, allow_empty=False)
        clean_flag(memories, "memories")
        scopes = clean_scopes(scope)
        find = resolve_entity if memories else resolve
        return self._read(lambda state: find(state, text, scope_subtree(state, scopes) if scopes else None, field))

    def _members(self, state: State, scopes: tuple[str, ...]) -> tuple[frozenset[str], frozenset[str]]:
        """``scope_members`` of ``scopes``, kept until the next operation: the same sets for
        every read between two writes (the caches key their work on them)."""
        key = (scopes, state.op_count, state.last_op_id)
        kept = self._scope_members
        if kept is None or kept[0] != key:
            kept = self._scope_members = (key, scope_members(state, scopes))
        return kept[1]

    def context(
        self,
        query: str,
        max_tokens: int = 1500,
        *,
        scope: str | Sequence[str] | None = None,
        min_score: float = relevance.MIN_SCORE,
        since: float | datetime | date | str | None = None,
        until: float | datetime | date | str | None = None,
        provenance: str | Sequence[str] | None = None,
    ) -> str:
        """Prompt-ready text for ``query``: the recalled infos fenced as recalled data, under
        ``## keyword path`` headings, most relevant first, each once, one line each with who
        said it (its provenance) and when (``kwtree.retrieval.fence``: stored text can forge
        no heading, turn or fence), within ``max_tokens`` (estimated as
        ``kwtree.retrieval.context.estimate_tokens`` documents). ``scope``, ``min_score``,
        ``since``, ``until`` and ``provenance`` as for ``recall``. Empty when nothing is
        relevant (no info reaches the floor)."""
        clean_int(max_tokens, "max_tokens", 1, 1_000_000)
        return render_context(self.recall(query, k=50, scope=scope, min_score=min_score, since=since, until=until,
                                          provenance=provenance), max_tokens)

    def wait_indexed(self, timeout: float | None = None) -> bool:
        """Block until every queued embedding is done; True if that happened within
        ``timeout`` seconds (None: wait as long as it takes). A tree that may not write
        (``read_only``, ``as_of``) embeds nothing itself: it waits for other processes
        (a writer's worker thread, ``kwtree worker``) to empty the outbox. A tree that writes
        returns with the vector graph saved, so that read-only opens load it. When the
        embedding worker cannot write (a full disk) it is woken to retry at once, and if that
        fails too its error is raised: DiskFullError (or another StorageError),
        LockTimeoutError; it keeps retrying by itself, so a later call succeeds once space is
        freed."""
        self._check_open()
        return self._caches.worker.wait_indexed(None if timeout is None else clean_seconds(timeout, "timeout"))

    def outbox_status(self) -> dict[str, Any]:
        """The embedding outbox: counts of pending, leased, failed (waiting to retry), done
        and dead items, the dead items with their last error, and ``worker_error``: None, or
        ``{"error", "type", "since"}`` while the embedding worker retries after a storage
        error (a full disk). Never raises for a full disk: it reports it."""
        self._check_open()
        return self._caches.worker.outbox_status()

    def retry_dead(self) -> int:
        """Queue every dead embedding item again; returns how many. ReadOnlyError on a tree
        that may not write."""
        self._check_writable()
        return self._caches.worker.retry_dead()
