"""KeywordTree's agent methods: ``search``, ``agent_stats``, ``reorganize``,
``apply_reorganize_plan``, and the placement and linking that ``create_keyword`` and
``create_info`` ask for.

They are a base class of KeywordTree, kept here so each module stays readable in one sitting;
they use what :class:`kwtree.facade.core.TreeCore` holds: the engine's state reader and write
path, and the descend loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kwtree.agent import reorganize as planner
from kwtree.agent.descend import Descent, DescentStatus, refuse_fallback
from kwtree.engine.engine import Decide
from kwtree.engine.state import State
from kwtree.errors import AgentError, DuplicateKeywordError
from kwtree.facade.core import TreeCore
from kwtree.models import (
    ROOT_ID,
    AgentOutcome,
    Operation,
    RelationType,
    SearchResult,
    SearchStatus,
)
from kwtree.normalize import normalize_name
from kwtree.retrieval import lookup as results
from kwtree.retrieval.scopes import clean_scopes, scope_keyword, scope_subtree
from kwtree.validate import clean_flag, clean_json, clean_text
from kwtree.writes import Stamp, require_keyword
from kwtree.writes import reorganize as reorganize_commands

__all__ = ["MAX_AGENT_LINKS", "ON_AGENT_FAILURE", "AgentMethods"]

#: ``create_info(auto_link=True)`` links an info to at most this many keywords.
MAX_AGENT_LINKS = 5
#: What a tree does when the agent fails (``KeywordTree(on_agent_failure=...)``): use the
#: fallback and say so on the result, or raise AgentError and write nothing.
ON_AGENT_FAILURE = ("fallback", "raise")


def _scope_ids(state: State, scopes: tuple[str, ...]) -> tuple[list[str], set[str]]:
    """The ids of the scopes' keywords that exist, and of every keyword inside them."""
    holders = [keyword.id for keyword in (scope_keyword(state, one) for one in scopes) if keyword is not None]
    return holders, scope_subtree(state, scopes)


def _inside(result: SearchResult, holders: list[str], inside: set[str]) -> SearchResult:
    """``result`` of a walk inside scopes, without anything outside them (a keyword deleted
    or moved out meanwhile): what the walk matched outside is dropped, a suggested parent
    outside becomes the first scope's keyword."""
    if result.node is not None and result.node.id not in inside:
        return SearchResult(SearchStatus.NOT_FOUND, suggested_parent_id=holders[0],
                            suggested_name=result.node.name, reason="moved_out", rounds=result.rounds,
                            trace=result.trace)
    result.candidates = [keyword for keyword in result.candidates if keyword.id in inside]
    if result.status is SearchStatus.AMBIGUOUS and not result.candidates:
        return SearchResult(SearchStatus.NOT_FOUND, suggested_parent_id=holders[0],
                            suggested_name=result.suggested_name, reason="moved_out", rounds=result.rounds,
                            trace=result.trace)
    if result.suggested_parent_id is not None and result.suggested_parent_id not in inside:
        result.suggested_parent_id = holders[0]
    return result


_PLACED = {
    DescentStatus.MATCHED: "the keyword the agent matched",
    DescentStatus.MISSING: "where the agent suggests it belongs",
    DescentStatus.AMBIGUOUS: "as the agent found several possible parents",
}


class AgentMethods(TreeCore):
    """Search, placement, linking and reorganisation (see KeywordTree)."""

    def search(self, query: str, llm_expand_query: bool = True, *,
               scope: str | Sequence[str] | None = None) -> SearchResult:
        """Find the keyword ``query`` names.

        An exact hit on a name or alias (after normalisation) is MATCHED (with its path and
        first infos), or AMBIGUOUS when several keywords answer to it. Otherwise, with
        ``llm_expand_query=False``, NOT_FOUND with reason ``exact_miss_llm_disabled`` and no
        agent call; else the agent walks the tree (the LLM client, or the offline navigator),
        and a miss comes with a suggested parent and name.

        ``scope`` (a scope path such as "user:alice", or a list of them; None: the whole tree)
        finds only keywords inside the scopes' subtrees: exact hits outside are ignored, the
        walk is shown nothing outside, and a miss suggests a parent inside (the first scope's
        keyword when the walk ends above them). A scope that does not exist yet holds nothing:
        NOT_FOUND with reason ``no_scope`` and no suggested parent, without an agent call.
        """
        self._check_open()
        text = clean_text(query, "query", allow_empty=False)
        self._limits.check_text("query", text, "query_bytes")
        expand = clean_flag(llm_expand_query, "llm_expand_query")
        scopes = clean_scopes(scope)
        holders: list[str] | None = None
        inside: set[str] | None = None
        if scopes is not None:
            holders, inside = self._read(lambda state: _scope_ids(state, scopes))
            if not holders:
                return SearchResult(SearchStatus.NOT_FOUND, reason="no_scope")
        key = normalize_name(text)
        hits = self._read(lambda state: state.lookup_names(key)) if key else []
        if inside is not None:
            hits = [kid for kid in hits if kid in inside]
        if len(hits) == 1:
            result = self._read(lambda state: results.matched(state, hits[0]))
            self._agent.remember([keyword.id for keyword in result.path])
            return result
        if hits:
            return self._read(lambda state: results.ambiguous(state, hits, "several keywords have this name"))
        if not expand:
            return SearchResult(SearchStatus.NOT_FOUND, reason="exact_miss_llm_disabled",
                                suggested_parent_id=None if holders is None else holders[0])
        descent = self._agent.descend(self._read, text, "search", within=holders)
        self._refuse_fallback(descent, f"searching for {text!r}",
                              "search with llm_expand_query=False for an exact lookup")
        result = self._read(lambda state: results.from_descent(state, descent))
        if holders is not None:
            result = _inside(result, holders, inside or set())
        return result

    def agent_stats(self) -> dict[str, Any]:
        """What the agent did since this tree was opened: walks (``descents``), navigator
        ``calls`` and ``rounds``, ``failures`` and ``fallbacks`` by reason, ``outcomes``,
        the navigator's name and token ``usage``, and the MRU cache's size."""
        self._check_open()
        return self._agent.stats()

    def _place(self, name: str, description: str) -> tuple[str, Descent]:
        """The parent the agent chooses for a new keyword, and the walk that chose it.
        AgentError if the walk fell back and this tree refuses fallbacks."""
        descent = self._agent.descend(self._read, name.strip(), "suggest_parent", description)
        self._refuse_fallback(descent, f"placing {name.strip()!r}", "retry, or pass parent_id")
        if descent.status is DescentStatus.MATCHED:
            parent = descent.keyword_ids[0]
        elif descent.status is DescentStatus.MISSING and descent.suggested_parent_id is not None:
            parent = descent.suggested_parent_id
        else:
            parent = ROOT_ID
        return parent, descent

    def _refuse_fallback(self, descent: Descent, doing: str, next_step: str) -> None:
        """``refuse_fallback`` as this tree was opened (``on_agent_failure``)."""
        refuse_fallback(descent, self._on_agent_failure == "raise", doing, next_step)

    def _outcome(self, descent: Descent, keyword_ids: tuple[str, ...],
                 chosen_parent: str | None = None) -> AgentOutcome:
        """What ``create_keyword`` (``keyword_ids``: the parent it went under, ``chosen_parent``:
        the one the agent chose) or ``create_info`` (the keywords it linked) tells its caller
        (the result is the channel: the CLI prints it, and a log line would repeat it)."""
        names = self._read(lambda state: [state.keywords[kid].name for kid in keyword_ids])
        failed = f"the agent failed ({descent.fallback}: {descent.error})" if descent.fallback else ""
        if descent.intent == "suggest_parent":
            where = f"placed under {names[0]!r}"
            if keyword_ids[0] != chosen_parent:
                summary = f"{where}: the parent the agent chose was deleted before the write"
            elif failed:
                summary = f"{where} because {failed}"
            else:
                summary = f"{where}, " + _PLACED[descent.status]
        elif keyword_ids:
            listed = ", ".join(repr(name) for name in names)
            summary = (f"linked only to the {len(names)} keyword(s) the text names ({listed}): {failed}" if failed
                       else f"linked to {len(names)} keyword(s) the agent found: {listed}")
        else:
            summary = f"linked to no keyword: {failed or 'the agent found none for the text'}"
        return AgentOutcome(descent.intent, descent.navigator, descent.status.value, keyword_ids,
                            descent.fallback, descent.error, summary)

    def _check_before_agent(self, decide: Decide) -> None:
        """Run a command's checks (and the size limits) on the current state without writing,
        so that bad input fails before any (paid, slow) agent call. A duplicate name is not
        judged here: the agent has not chosen the parent yet."""
        stamp = Stamp("0" * 32, 0.0, self._actor)
        try:
            changes = self._read(lambda state: decide(state, stamp))
        except DuplicateKeywordError:
            return
        self._limits.check_changes(changes)

    def _find_links(self, text: str) -> tuple[list[tuple[str, RelationType]], Descent]:
        """The keywords an info's text is about (see ``search.links_for_text``). AgentError if
        the walk fell back and this tree refuses fallbacks."""
        descent = self._agent.descend(self._read, text, "search")
        self._refuse_fallback(descent, "linking a new info", "retry, or pass keyword_ids and auto_link=False")
        named = self._read(lambda state: results.names_in_text(state, text))
        return results.links_for_text(descent, named, MAX_AGENT_LINKS), descent

    # --- reorganisation ---------------------------------------------------------------------

    def reorganize(self, scope_id: str | None = None) -> dict[str, Any]:
        """A plan, written nowhere, to tidy the subtree under ``scope_id`` (the whole tree
        when None): merges of duplicates, moves of misplaced keywords and new groups under
        crowded parents, each step with a reason. The LLM client drafts it when there is one
        (falling back to the offline planner if it fails, with ``llm_error`` saying why; on a
        tree opened with ``on_agent_failure="raise"``, AgentError instead), the offline planner
        otherwise. Pass it, edited or not, to ``apply_reorganize_plan``."""
        self._check_open()
        scope = ROOT_ID if scope_id is None else self._read(lambda state: require_keyword(state, scope_id).id)
        plan = planner.draft_plan(
            self._llm_client,
            lambda: self._read(lambda state: planner.outline(state, scope)),
            lambda: self._agent.with_lexicon(self._read, lambda state, lex: planner.offline_plan(state, lex, scope)),
            {"scope_id": scope, "based_on": self._engine.state.last_op_id},
        )
        if plan.get("llm_error") and self._on_agent_failure == "raise":
            raise AgentError(f"the LLM could not draft the plan ({plan['llm_error']}); retry, or open the tree with "
                             "on_agent_failure=\"fallback\" to accept the offline planner's", "agent_failure",
                             plan["llm_error"])
        return plan

    def apply_reorganize_plan(self, plan: Mapping[str, Any]) -> Operation | None:
        """Apply every step of ``plan`` (as ``reorganize`` returns it) as ONE operation that
        ``undo`` reverses. Each step is checked against the tree the steps before it leave
        (ids live, no cycles, unique sibling names); if any fails, nothing is written and the
        error names the step. Returns the operation (None for a plan with no steps)."""
        if isinstance(plan, Mapping) and plan.get("steps") == []:
            return None
        steps = reorganize_commands.clean_plan(plan)
        planner = str(plan.get("planner", "caller"))
        audit: dict[str, Any] = {"planner": clean_json(planner, "plan['planner']"), "steps": steps}
        for kept in ("request", "dropped", "llm_error"):  # what an LLM was asked and what it got wrong
            if plan.get(kept):
                audit[kept] = clean_json(plan[kept], f"plan[{kept!r}]")
        audit = {"reorganize": audit}
        return self._commit("reorganize", lambda s, st: reorganize_commands.apply_plan(s, st, plan), audit)
