"""KeywordTree's keyword abstracts: ``abstracts``.

A base class of KeywordTree, kept here so each module stays readable in one sitting. It finds
the keywords whose abstract is missing or stale, reads their memories (under the state lock),
summarises them outside it (``kwtree.memory.abstracts``: the LLM when the tree has one, the
extractive summariser otherwise) and writes every abstract as ONE operation of kind
``"abstract"`` with the decider ``kwtree.writes.abstracts.write_abstracts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kwtree.engine.state import State
from kwtree.errors import AgentError
from kwtree.facade.agent import AgentMethods
from kwtree.memory.abstracts import Sources, extractive, llm_summary, read_sources
from kwtree.memory_schema import ABSTRACT_BY, ABSTRACT_DIGEST, ABSTRACT_INFOS, ABSTRACT_OVERVIEW, ABSTRACT_TEXT
from kwtree.models import ROOT_ID
from kwtree.retrieval.scopes import clean_scopes, scope_subtree
from kwtree.validate import clean_flag
from kwtree.writes import require_keyword
from kwtree.writes.abstracts import (
    ABSTRACT_KIND,
    Built,
    holds_memories,
    stored_abstract,
    subtree_digest,
    write_abstracts,
)

__all__ = ["AbstractMethods", "KeywordAbstract"]


@dataclass(frozen=True, slots=True)
class KeywordAbstract:
    """A keyword's abstract (L0) and overview (L1) as stored after the call. ``stale``: its
    subtree's memories changed since it was built (``of`` is the digest it summarises);
    ``built``: this call wrote it (in operation ``op_id``); ``by``: ``"extractive"`` or
    ``"llm"``; ``infos``: how many memories it read; ``note``: why the LLM's was not used
    (None when it was, or none was asked)."""

    keyword_id: str
    name: str
    abstract: str
    overview: str
    of: str
    by: str
    infos: int
    stale: bool
    built: bool
    op_id: str | None
    note: str | None = None


def _targets(state: State, keyword_id: str | None, scopes: tuple[str, ...] | None) -> list[str]:
    """The keywords that hold memories in ``keyword_id``'s subtree (the whole tree by
    default), inside ``scopes``, deepest first (a parent after its children)."""
    start = ROOT_ID if keyword_id is None else keyword_id
    inside = None if scopes is None else scope_subtree(state, scopes)
    found = [kid for kid in state.subtree(start) if (inside is None or kid in inside) and holds_memories(state, kid)]
    return found[::-1]


def _plan(state: State, targets: list[str], rebuild: bool) -> list[tuple[str, str, Sources | None]]:
    """Each target with its subtree's digest and, when it must be built, its sources."""
    plan = []
    for kid in targets:
        digest = subtree_digest(state, kid)
        stored = stored_abstract(state.keywords[kid])
        needed = rebuild or stored is None or stored.get(ABSTRACT_DIGEST) != digest
        plan.append((kid, digest, read_sources(state, kid) if needed else None))
    return plan


def _listed(state: State, kid: str, digest: str, built: bool, op_id: str | None, note: str | None) -> KeywordAbstract:
    keyword = state.keywords[kid]
    stored = stored_abstract(keyword) or {}
    infos = stored.get(ABSTRACT_INFOS, 0)
    return KeywordAbstract(kid, keyword.name, str(stored.get(ABSTRACT_TEXT, "")),
                           str(stored.get(ABSTRACT_OVERVIEW, "")), str(stored.get(ABSTRACT_DIGEST, "")),
                           str(stored.get(ABSTRACT_BY, "")), infos if type(infos) is int else 0,
                           stored.get(ABSTRACT_DIGEST) != digest, built, op_id, note)


class AbstractMethods(AgentMethods):
    """Keyword abstracts (see KeywordTree)."""

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
        self._check_open()
        scopes = clean_scopes(scope)
        again = clean_flag(rebuild, "rebuild")
        if keyword_id is not None:
            keyword_id = self._read(lambda state: require_keyword(state, keyword_id).id)
        plan = self._read(lambda state: _plan(state, _targets(state, keyword_id, scopes), again))
        notes: dict[str, str] = {}
        built: list[Built] = []
        calls: list[dict[str, Any]] = []
        if self._engine.writable:
            for kid, digest, sources in plan:
                if sources is not None:
                    built.append(self._summarise(kid, digest, sources, notes, calls))
        op = None
        if built:
            audit = {"abstracts": {"keywords": len(built), "llm": self._llm_client is not None, "calls": calls}}
            op = self._commit(ABSTRACT_KIND, lambda state, stamp: write_abstracts(state, stamp, built), audit)
        written = {item.keyword_id for item in built} if op is not None else set()
        op_id = op.op_id if op is not None else None
        return self._read(lambda state: [
            _listed(state, kid, digest, kid in written, op_id if kid in written else None, notes.get(kid))
            for kid, digest, _ in plan if state.live_keyword(kid) is not None])

    def _summarise(self, kid: str, digest: str, sources: Sources, notes: dict[str, str],
                   calls: list[dict[str, Any]]) -> Built:
        """One keyword's abstract: the LLM's, or the extractive one (with a note when the LLM's
        could not be used)."""
        client = self._llm_client
        if client is not None:
            try:
                abstract, overview, call = llm_summary(client, sources)
            except Exception as exc:  # the extractive summary replaces it, with a note
                problem = f"{type(exc).__name__}: {exc}"[:300]
                if self._on_agent_failure == "raise":
                    raise AgentError(f"the LLM could not summarise keyword {sources.name!r} ({problem}); nothing was "
                                     "written. Retry, or open the tree with on_agent_failure=\"fallback\" to accept "
                                     "the extractive summary", "agent_failure", problem) from exc
                notes[kid] = f"the LLM's abstract could not be used ({problem}); the extractive one was written"
                calls.append({"keyword_id": kid, "error": problem})
            else:
                calls.append({"keyword_id": kid, **call})
                return Built(kid, abstract, overview, digest, "llm", len(sources.texts))
        abstract, overview = extractive(sources)
        return Built(kid, abstract, overview, digest, "extractive", len(sources.texts))
