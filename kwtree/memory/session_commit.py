"""One ``commit_session``, outside the decider: it checks the arguments, extracts candidates,
places new keywords with the descend loop, runs the dedup prefilter on the full-text and vector
indexes (and the LLM's verdicts) outside the write lock, so that an LLM that is slow or hangs
never holds the lock, then hands the plan to the decider
``kwtree.memory.commit.commit_changes``, which re-checks it against the fresh state and writes
the whole session as ONE operation. A step the LLM fails is done offline instead
(``kwtree.memory.outage``), or refused with AgentError on a tree that refuses fallbacks.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from kwtree.agent.descend import Descent, DescentStatus, refuse_fallback
from kwtree.agent.navigation import LLMNavigator
from kwtree.agent.offline import OfflineNavigator
from kwtree.engine.state import State
from kwtree.errors import AgentError, InvalidInputError, KwtreeError, LLMError
from kwtree.memory import dedup
from kwtree.memory.candidates import Candidate, ExtractContext, Extraction, Extractor, Message
from kwtree.memory.commit import (
    DEDUP_MODES,
    CommitFallback,
    CommitOptions,
    CommitPlan,
    CommitResult,
    Decided,
    StalePlanError,
    commit_changes,
    find_branch,
    find_holder,
    find_session,
    holder_keys,
)
from kwtree.memory.extract import default_extractor, extract_offline
from kwtree.memory.messages import clean_messages, digest, turn_text
from kwtree.memory.outage import STEPS, CommitLLM, described
from kwtree.memory.policies import Policy
from kwtree.memory.port import MemoryPort
from kwtree.memory.when import parse_time
from kwtree.memory_schema import DEFAULT_SCOPE, DIGEST, ROLE, SEEN, SESSION_TIME, SESSIONS_BRANCH, TURN
from kwtree.models import Change, Info, Keyword, Operation, info_text
from kwtree.normalize import normalize_name
from kwtree.retrieval.scopes import clean_scope, scope_keyword
from kwtree.validate import (
    clean_choice,
    clean_flag,
    clean_int,
    clean_label,
    clean_metadata,
    clean_provenance,
    finite_number,
    shown,
)
from kwtree.writes import Stamp

__all__ = ["commit_session"]

#: How many times a commit is prepared again when another writer committed the same session
#: meanwhile (each time the plan is made against what that writer left).
_ATTEMPTS = 3
#: The prefilter asks each index for this many times ``prefilter_k`` hits before keeping those
#: inside the scope's branch (the indexes rank the whole tree).
_PREFILTER_OVERFETCH = 6
#: The prefilter searches the full-text index as it is while at most this many entities were
#: written since its last commit, and ranks those itself: so ``after_turn`` does not commit the
#: index on every turn (``FullTextProjection.indexed_text_hits``).
_MOST_UNINDEXED = 256
#: The navigator of a commit's walks once its LLM failed (it keeps no state).
_OFFLINE = OfflineNavigator()


def commit_session(port: MemoryPort, messages: Sequence[Message], *, session_id: str, scope: str | None = None,
                   options: CommitOptions | None = None) -> CommitResult:
    """``AgentMemory.commit_session`` (see its promises) on the tree behind ``port``."""
    opts = _clean_options(options)
    if opts.dry_run:
        port.check_open()
    else:
        port.check_writable()
    sid = clean_label(session_id, "session_id")
    port.limits.check_text("session_id", sid, "label_bytes")
    if not normalize_name(sid):
        raise InvalidInputError(f"session_id {shown(sid)} must hold a letter or a digit (it names the session's "
                                f"keyword)")
    path = DEFAULT_SCOPE if scope is None else clean_scope(scope)
    cleaned = clean_messages(messages)
    if opts.dedup == "llm" and port.llm_client is None:
        raise InvalidInputError("options.dedup='llm' needs a tree opened with an llm_client; "
                                "pass dedup='auto' or 'offline'")
    session_time = parse_time(opts.session_time, "options.session_time")
    if session_time is None:
        session_time = next((parse_time(m.get("ts"), "ts") for m in cleaned if m.get("ts") is not None), None)
    llm = None if port.llm_client is None else CommitLLM(port.llm_client)
    for attempt in range(_ATTEMPTS):
        plan = _prepare(port, cleaned, sid, path, session_time, opts, llm)
        if plan is None:
            return _nothing_new(sid, path, len(cleaned), port.read(lambda s: _session_id_of(s, path, sid)),
                                opts.dry_run)
        try:
            return _write_plan(port, plan, opts.dry_run)
        except StalePlanError:
            if attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover

def _write_plan(port: MemoryPort, plan: CommitPlan, dry_run: bool) -> CommitResult:
    """Decide the plan against the fresh state and commit it (a dry run: decide it on the
    current state and return what it would write)."""
    if dry_run:
        stamp = Stamp("0" * 32, port.read(lambda state: state.last_timestamp), port.actor)
        decided = port.read(lambda state: commit_changes(state, stamp, plan))
        port.limits.check_changes(decided.changes)
        return _result(plan, decided, None, dry_run=True)
    # The engine may decide again on a newer state (a store that refuses a stale append):
    # the operation records the audit of the decision it wrote, the last one.
    audit: dict[str, Any] = {}
    last: list[Decided] = []

    def decide(state: State, stamp: Stamp) -> list[Change]:
        decided = commit_changes(state, stamp, plan)
        last[:] = [decided]
        audit.clear()
        audit.update(decided.audit)
        return decided.changes

    op = port.commit("commit_session", decide, {"commit_session": audit})
    assert op is not None  # a commit with new messages always writes the session's metadata
    return _result(plan, last[0], op)

# --- preparing the plan outside the write lock ------------------------------------------------

def _prepare(port: MemoryPort, messages: list[Message], session_id: str, scope: str, session_time: float | None,
             opts: CommitOptions, llm: CommitLLM | None) -> CommitPlan | None:
    """The plan of the commit, or None when every message was committed before. ``llm``
    is the tree's client as this commit uses it (None: the tree has none)."""
    seen = port.read(lambda state: _check_resent(state, scope, session_id, messages))
    if seen == len(messages):
        return None
    if session_time is None and seen:  # the date an earlier commit of the session recorded
        earlier = port.read(lambda state: _session(state, scope, session_id))
        recorded = earlier.metadata.get(SESSION_TIME) if earlier is not None else None
        session_time = finite_number(recorded)
    fallbacks: list[CommitFallback] = []
    found = _extract(port, messages, ExtractContext(session_id, seen, session_time), opts.extractor, llm,
                          fallbacks)
    candidates = _clean_candidates(found, opts.policies, len(messages))
    passed_over = found.passed_over if isinstance(found, Extraction) else ()
    audit: dict[str, Any] = {"session_id": session_id, "scope": scope, "first_new": seen,
                             "seen": len(messages), "candidates": len(candidates)}
    if passed_over:
        audit["passed_over"] = [dataclasses.asdict(passed) for passed in passed_over]
    plan = CommitPlan(scope, session_id, messages, seen, session_time, opts.keep_turns, candidates,
                      opts.policies, opts.thresholds, {}, [], [None] * len(candidates), audit, opts.metadata,
                      opts.keep_summary, fallbacks, provenance=opts.provenance, passed_over=passed_over)
    _place_holders(port, plan, llm)
    plan.neighbours = [_neighbours(port, plan, c, opts.prefilter_k) for c in candidates]
    audit["dedup"] = "offline"
    if llm is not None and opts.dedup != "offline":  # "llm" without a client was refused above
        audit["dedup"] = "llm"
        _llm_verdicts(port, plan, llm)
    if fallbacks:
        audit["fallbacks"] = [dataclasses.asdict(fallback) for fallback in fallbacks]
    return plan

def _extract(port: MemoryPort, messages: list[Message], context: ExtractContext, chosen: Extractor | None,
             llm: CommitLLM | None, fallbacks: list[CommitFallback]) -> object:
    """What the extractor (``chosen``, else the default over ``llm``) found, unchecked.
    When the LLM failed it (an LLMError, or anything the tree's client raised under the
    default extractor): AgentError on a tree that refuses fallbacks, else what the
    offline rules find, and a fallback saying so. Any other failure of a caller's
    extractor is AgentError; a KwtreeError (bad input) propagates."""
    extractor = chosen if chosen is not None else default_extractor(llm)
    try:
        return extractor(messages, context)
    except LLMError as exc:
        failure: Exception = exc
    except KwtreeError:
        raise
    except Exception as exc:
        if chosen is not None or llm is None:  # not the LLM's failure: the extractor's own
            raise AgentError(f"the extractor failed ({type(exc).__name__}: {exc}); nothing was written",
                             "agent_failure", f"{type(exc).__name__}: {exc}") from exc
        failure = exc
    error = described(failure)
    if port.refuses_fallbacks:
        raise AgentError(f"the LLM could not extract the memories ({error}); nothing was written. Retry, pass "
                         "CommitOptions(extractor=kwtree.memory.extract.extract_offline), or open the tree with "
                         "on_agent_failure=\"fallback\" to commit what the offline rules find",
                         "agent_failure", error) from failure
    fallbacks.append(CommitFallback("extraction", error, STEPS["extraction"]))
    return extract_offline(messages, context)

def _place_holders(port: MemoryPort, plan: CommitPlan, llm: CommitLLM | None) -> None:
    """Where each new holder keyword goes: the agent walks the category's branch (when it
    exists and holds no keyword for the routing key)."""
    for category, key, about in holder_keys(plan.candidates, plan.policies):
        policy = plan.policies[category]
        where = (category, key)
        if policy.holder != "key" or where in plan.placements:
            continue
        branch_id = _branch_of(port, plan, policy.branch)[0]
        if branch_id is None or port.read(
                functools.partial(find_holder, branch_id=branch_id, key=key)) is not None:
            plan.placements[where] = (None, None)
            continue
        descent, walk = _walk(port, plan, llm, category, key, about, branch_id)
        if descent.status is DescentStatus.MATCHED:
            parent: str | None = descent.keyword_ids[0]
        elif descent.status is DescentStatus.MISSING:
            parent = descent.suggested_parent_id
        else:
            parent = None
        plan.placements[where] = (parent, walk)

def _walk(port: MemoryPort, plan: CommitPlan, llm: CommitLLM | None, category: str, key: str, about: str,
          branch_id: str) -> tuple[Descent, dict[str, Any]]:
    """The walk that places a new keyword inside its branch, and its audit: the LLM's (the
    tree's navigator when it has none) or, when the LLM failed this walk or earlier in the
    commit, the offline navigator's, as a fallback (its audit keeps the LLM's failed walk
    under ``llm_walk``). AgentError when the LLM failed and the tree refuses fallbacks."""
    failed: Descent | None = None
    if llm is not None and llm.down is not None:
        _fell_back(plan, "placement", llm.not_asked)
    else:
        descent = port.walk(key, about, [branch_id], None if llm is None else LLMNavigator(llm))
        refuse_fallback(descent, port.refuses_fallbacks, f"placing the {category} keyword {key!r}",
                              "retry, or commit with another extractor")
        if descent.fallback is None or llm is None:
            return descent, descent.audit()
        failed = descent
        _fell_back(plan, "placement", descent.error if descent.fallback == "agent_failure"
                   else f"{descent.fallback}: {descent.error}")
    offline = port.walk(key, about, [branch_id], _OFFLINE)
    walk = offline.audit()
    if failed is not None:
        walk["llm_walk"] = failed.audit()
    return offline, walk

def _branch_of(port: MemoryPort, plan: CommitPlan, branch: str) -> tuple[str | None, frozenset[str]]:
    """``branch`` of the plan's scope: its keyword's id and subtree (None and empty when it
    does not exist yet), resolved once per commit."""
    found = plan.branches.get(branch)
    if found is None:
        found = plan.branches[branch] = port.read(functools.partial(_branch, scope=plan.scope, branch=branch))
    return found

def _neighbours(port: MemoryPort, plan: CommitPlan, candidate: Candidate, k: int) -> list[dedup.Neighbour]:
    """The prefilter: the memories inside the candidate's branch of the scope that BM25 and
    the vectors rank nearest its text (at most ``k`` from each)."""
    policy = plan.policies[candidate.category]
    if policy.write == "accumulate":
        return []
    inside = _branch_of(port, plan, policy.branch)[1]
    if not inside:
        return []
    fetch = k * _PREFILTER_OVERFETCH
    text, unindexed = port.text_hits(candidate.content, fetch, _MOST_UNINDEXED)
    found: dict[str, None] = {}
    for hits in (text, port.vector_hits(candidate.content, fetch)):
        kept = port.read(lambda state, hits=hits: _in_subtree(state, hits, inside, k))  # type: ignore[misc]
        found.update(dict.fromkeys(kept))
    if unindexed:  # written since the full-text index's last commit: ranked here, on their terms
        near = port.read(lambda state: _nearest(state, candidate.content, unindexed, inside, k))
        found.update(dict.fromkeys(near))
    return port.read(lambda state: [dedup.Neighbour(iid, state.infos[iid].content) for iid in found
                                     if state.live_info(iid) is not None])

def _llm_verdicts(port: MemoryPort, plan: CommitPlan, llm: CommitLLM) -> None:
    """The LLM's verdicts on the candidates that have neighbours (one call per batch), in
    ``plan.verdicts``; the thresholds judge those it gave none for. When the LLM failed
    (here or earlier in the commit): AgentError on a tree that refuses fallbacks, else a
    fallback saying so."""
    asked = [i for i, c in enumerate(plan.candidates)
             if plan.neighbours[i] and plan.policies[c.category].write in ("aggregate", "supersede")]
    if not asked:
        return
    if llm.down is not None:
        plan.audit["dedup"] = "offline"
        _fell_back(plan, "dedup", llm.not_asked)
        return
    items = [(plan.candidates[i].content, plan.neighbours[i]) for i in asked]
    found, calls = dedup.llm_judgements(llm, items, [True] * len(asked))
    plan.audit["dedup"] = {"judge": "llm", "calls": calls}
    failed = [call["error"] for call in calls if "error" in call]
    if failed and port.refuses_fallbacks:
        raise AgentError(f"the LLM could not judge duplicates ({failed[0]}); nothing was written. Retry, pass "
                         "CommitOptions(dedup='offline'), or open the tree with on_agent_failure=\"fallback\"",
                         "agent_failure", failed[0])
    if failed:
        _fell_back(plan, "dedup", failed[0])
    for position, index in enumerate(asked):
        plan.verdicts[index] = found[position]


def _fell_back(plan: CommitPlan, step: str, error: str) -> None:
    """Note that the LLM failed ``step`` (once per step: the first error is the one named)."""
    if all(fallback.step != step for fallback in plan.fallbacks):
        plan.fallbacks.append(CommitFallback(step, error, STEPS[step]))


# --- reading the state ------------------------------------------------------------------------


def _existing_branch(state: State, scope: str, branch: str) -> str | None:
    scope_kw = scope_keyword(state, scope)
    found = find_branch(state, scope_kw.id, branch) if scope_kw is not None else None
    return found.id if found is not None else None


def _branch(state: State, scope: str, branch: str) -> tuple[str | None, frozenset[str]]:
    branch_id = _existing_branch(state, scope, branch)
    return branch_id, frozenset(state.subtree(branch_id)) if branch_id is not None else frozenset()


def _linked_inside(state: State, info_id: str, inside: AbstractSet[str]) -> bool:
    return any(kid in inside for kid in state.keywords_by_info.get(info_id, ()))


def _in_subtree(state: State, hits: Sequence[tuple[str, float]], inside: AbstractSet[str], k: int) -> list[str]:
    kept: list[str] = []
    for info_id, _ in hits:
        if _linked_inside(state, info_id, inside):
            kept.append(info_id)
            if len(kept) == k:
                break
    return kept


def _nearest(state: State, text: str, info_ids: frozenset[str], inside: AbstractSet[str], k: int) -> list[str]:
    """The ``k`` live infos of ``info_ids`` linked inside ``inside`` that hold the largest
    share of ``text``'s terms (none that holds none of them), best first."""
    scored = []
    for info_id in info_ids:
        info = state.live_info(info_id)
        if info is not None and _linked_inside(state, info_id, inside):
            share = dedup.containment(text, info_text(info))
            if share > 0:
                scored.append((-share, info_id))
    return [info_id for _, info_id in sorted(scored)[:k]]


def _session(state: State, scope: str, session_id: str) -> Keyword | None:
    sessions = _existing_branch(state, scope, SESSIONS_BRANCH)
    return find_session(state, sessions, session_id) if sessions is not None else None


def _session_id_of(state: State, scope: str, session_id: str) -> str | None:
    found = _session(state, scope, session_id)
    return found.id if found is not None else None


def _check_resent(state: State, scope: str, session_id: str, messages: list[Message]) -> int:
    """How many of ``messages`` an earlier commit of the session saw; InvalidInputError when
    the caller resent fewer, or changed one (named when the turns were kept)."""
    session = _session(state, scope, session_id)
    if session is None:
        return 0
    seen = int(session.metadata.get(SEEN, 0))
    if len(messages) < seen:
        raise InvalidInputError(
            f"messages holds {len(messages)} messages but {seen} of session {session_id!r} were committed before; "
            f"resend the whole conversation (the earlier messages are context only)")
    if digest(messages[:seen]) != session.metadata.get(DIGEST):
        turns: dict[int, Info] = {}
        for info_id in state.infos_by_keyword.get(session.id, {}):
            info = state.infos[info_id]
            if not info.deleted and type(info.metadata.get(TURN)) is int:
                turns[int(info.metadata[TURN])] = info
        changed = next((i for i in range(seen) if i in turns
                        and (turns[i].content != turn_text(messages[i])
                             or turns[i].metadata.get(ROLE) != messages[i]["role"])), None)
        which = f"messages[{changed}] differs" if changed is not None else "they differ"
        raise InvalidInputError(
            f"the first {seen} messages of session {session_id!r} were committed before, and {which} from what was "
            f"committed; resend them unchanged (they are context only), or commit the changed conversation under a "
            f"new session_id")
    return seen


# --- checking the arguments and the extractor's output ------------------------------------------


def _clean_options(options: object) -> CommitOptions:
    if options is None:
        return CommitOptions()
    if not isinstance(options, CommitOptions):
        raise InvalidInputError(f"options must be a kwtree.CommitOptions, got {shown(options)}")
    clean_flag(options.keep_turns, "options.keep_turns")
    clean_flag(options.keep_summary, "options.keep_summary")
    clean_flag(options.dry_run, "options.dry_run")
    if options.extractor is not None and not callable(options.extractor):
        raise InvalidInputError("options.extractor must be a function (messages, context) -> list[Candidate]")
    policies = options.policies
    if not isinstance(policies, Mapping) or not policies or not all(
            isinstance(name, str) and isinstance(policy, Policy) for name, policy in policies.items()):
        raise InvalidInputError("options.policies must map each category name to a kwtree.Policy")
    if not isinstance(options.thresholds, dedup.DedupThresholds):
        raise InvalidInputError("options.thresholds must be a kwtree.DedupThresholds")
    clean_choice(options.dedup, "options.dedup", DEDUP_MODES)
    clean_int(options.prefilter_k, "options.prefilter_k", 1, 100)
    if options.provenance is not None:
        clean_provenance(options.provenance, "options.provenance")
    if options.metadata is not None:
        return dataclasses.replace(options, metadata=dict(clean_metadata(options.metadata)))
    return options


def _clean_candidates(found: object, policies: Mapping[str, Policy], count: int) -> list[Candidate]:
    if not isinstance(found, (list, tuple)):
        raise InvalidInputError(f"the extractor must return a list of Candidate, got {shown(found)}")
    for index, candidate in enumerate(found):
        where = f"the extractor's candidates[{index}]"
        if not isinstance(candidate, Candidate):
            raise InvalidInputError(f"{where} must be a kwtree.Candidate, got {shown(candidate)}")
        if candidate.category not in policies:
            raise InvalidInputError(f"{where}.category {shown(candidate.category)} has no policy; the categories are "
                                    f"{', '.join(policies)} (add a Policy to CommitOptions.policies for a new one)")
        if not isinstance(candidate.key, str) or not normalize_name(candidate.key):
            raise InvalidInputError(f"{where}.key must name a topic, entity or tool, got {shown(candidate.key)}")
        if not isinstance(candidate.content, str) or not candidate.content.strip():
            raise InvalidInputError(f"{where}.content must be non-empty text, got {shown(candidate.content)}")
        if not isinstance(candidate.abstract, str):
            raise InvalidInputError(f"{where}.abstract must be text, got {shown(candidate.abstract)}")
        if type(candidate.confidence) not in (int, float) or not 0.0 <= candidate.confidence <= 1.0:
            raise InvalidInputError(f"{where}.confidence must be a number in [0, 1], got {shown(candidate.confidence)}")
        if not isinstance(candidate.sources, tuple) or not all(
                type(i) is int and 0 <= i < count for i in candidate.sources):
            raise InvalidInputError(f"{where}.sources must be a tuple of message indices below {count}, "
                                    f"got {shown(candidate.sources)}")
        happened = candidate.happened_at
        if happened is not None and (type(happened) not in (int, float) or finite_number(happened) is None):
            raise InvalidInputError(f"{where}.happened_at must be epoch seconds or None, got {shown(happened)}")
    return list(found)


# --- the result -------------------------------------------------------------------------------


def _result(plan: CommitPlan, decided: Decided, op: Operation | None, dry_run: bool = False) -> CommitResult:
    changes: Sequence[Any] = decided.changes if op is None else op.changes
    created = tuple(c.after.id for c in changes if c.before is None and type(c.after) in (Keyword, Info))
    changed = tuple(c.after.id for c in changes if c.before is not None and type(c.after) in (Keyword, Info))
    actions = [d.action for d in decided.decisions]
    session_kw: str | None = decided.session_keyword_id
    if dry_run and session_kw in created:
        session_kw = None
    return CommitResult(
        plan.session_id, plan.scope, op.op_id if op is not None else None, session_kw, plan.first_new,
        len(plan.messages), len(plan.candidates), actions.count("create"), actions.count("append"),
        actions.count("merge"), actions.count("supersede"), actions.count("skip"), created, changed,
        decided.decisions, dry_run, tuple(plan.fallbacks), plan.passed_over)


def _nothing_new(session_id: str, scope: str, seen: int, session_kw: str | None, dry_run: bool) -> CommitResult:
    return CommitResult(session_id, scope, None, session_kw, seen, seen, 0, 0, 0, 0, 0, 0, (), (), (), dry_run)
