"""The decider that writes a whole session as ONE operation, and the shapes of its request
and answer (``CommitOptions``, ``CommitResult``, ``CommitDecision``).

``AgentMemory.commit_session`` (``kwtree/memory/session_commit.py``) prepares a :class:`CommitPlan`
outside the write lock (extraction, placement by the descend loop, the dedup prefilter, the
LLM's dedup verdicts); :func:`commit_changes` then decides, inside the lock and against the
fresh state, every change: the scope keyword and its branches on first use, the session
keyword, its summary info and its turns, and each candidate routed by its category's policy
(``kwtree.memory.policies``). What was decided outside is checked again here (a parent or a
target another writer deleted meanwhile falls back, and says so in the audit; a session another
writer committed meanwhile raises :class:`StalePlanError`, and the facade prepares again). The
steps run on a fork of the state and are folded to one row per entity, as a reorganisation
plan is (``kwtree.writes.reorganize``), so ``undo`` reverses the whole commit.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kwtree.engine.state import State
from kwtree.errors import DuplicateKeywordError, InvalidInputError, KwtreeError
from kwtree.memory.candidates import ENTITIES_KEY, USER_SUBJECT, Candidate, Extractor, Message, PassedOver
from kwtree.memory.dedup import DedupThresholds, Judgement, Neighbour, judge, merged_text
from kwtree.memory.messages import digest, turn_text
from kwtree.memory.policies import POLICIES, Policy
from kwtree.memory.reading import provenance_of
from kwtree.memory.statements import led_by_someone_else, sentences
from kwtree.memory.summary import summarise, summary_text
from kwtree.memory.when import parse_time
from kwtree.memory_schema import (
    ATTRIBUTE,
    BRANCH_KEY,
    CALLS,
    CATEGORY,
    CONFIDENCE,
    DIGEST,
    DURATION_MEAN,
    DURATION_TOTAL,
    FAILURES,
    GUIDE,
    HAPPENED_AT,
    INFO_ABSTRACT,
    KIND,
    ROLE,
    ROUTING_KEY,
    SEEN,
    SESSION_ID,
    SESSION_TIME,
    SESSIONS_BRANCH,
    SMALL_TALK,
    SOURCES,
    SUBJECT,
    SUCCESSES,
    SUMMARY_KIND,
    SUPERSEDED_BY,
    TIMED_CALLS,
    TURN,
    USER_METADATA,
    VALID_UNTIL,
    VALUE,
)
from kwtree.models import Change, Info, Keyword, RelationType, least_trusted
from kwtree.normalize import normalize_name, terms
from kwtree.retrieval.scopes import scope_keyword, scope_specs
from kwtree.retrieval.smalltalk import small_talk
from kwtree.retrieval.timeline import happened_at
from kwtree.validate import finite_number
from kwtree.writes import Stamp
from kwtree.writes import infos as info_commands
from kwtree.writes import keywords as keyword_commands
from kwtree.writes.reorganize import coalesce, put_changes
from kwtree.writes.undo import check_consistent, in_apply_order

__all__ = ["DEDUP_MODES", "CommitDecision", "CommitFallback",
           "CommitOptions", "CommitPlan", "CommitResult", "Decided", "StalePlanError", "commit_changes", "find_branch",
           "find_holder", "find_session", "holder_keys"]

#: ``CommitOptions.dedup``: the LLM when the tree has one ("auto"), always the thresholds, or the LLM.
DEDUP_MODES = ("auto", "offline", "llm")


@dataclass(frozen=True, slots=True)
class CommitOptions:
    """How ``commit_session`` works.

    ``keep_turns`` stores each message as a turn info under the session keyword;
    ``keep_summary`` keeps the session's summary info (a commit that only stores facts word
    for word, as ``remember`` does, has nothing to summarise: recall and the hooks' "last
    session" would show an empty summary);
    ``dry_run`` returns the plan and writes nothing; ``extractor`` finds the candidates (None:
    ``kwtree.memory.extract.default_extractor`` with the tree's LLM client); ``policies`` maps
    each category to its write policy; ``thresholds`` are the offline dedup cut-offs;
    ``dedup`` is one of DEDUP_MODES; ``prefilter_k`` how many existing memories (BM25 and
    vector hits each) a candidate is compared with; ``session_time`` when the session took
    place (epoch seconds or ISO 8601; default: the first message's ``ts``); ``metadata`` is
    the caller's, put under ``metadata["user_metadata"]`` of every memory the commit creates,
    appends, merges into or supersedes (over what that memory held there), in the same
    operation; ``provenance`` says who said every message (one of ``kwtree.PROVENANCES``: the
    agent's ``remember`` tool passes "assistant"), None: each message's role says
    (``kwtree.memory.reading.provenance_of``)."""

    keep_turns: bool = True
    keep_summary: bool = True
    dry_run: bool = False
    extractor: Extractor | None = None
    policies: Mapping[str, Policy] = field(default_factory=lambda: POLICIES)
    thresholds: DedupThresholds = field(default_factory=DedupThresholds)
    dedup: str = "auto"
    prefilter_k: int = 8
    session_time: float | str | None = None
    metadata: Mapping[str, Any] | None = None
    provenance: str | None = None


@dataclass(frozen=True, slots=True)
class CommitDecision:
    """What became of one candidate (``index`` in the extractor's list): ``action`` is
    ``create`` (a new memory), ``append`` (a new record of an append-only category), ``merge``
    (added to an existing memory), ``supersede`` (replaced a contradicted fact, whose old
    version stays in ``history()``) or ``skip`` (already held); ``info_id`` the memory written
    or, for a skip, the one that already holds it; ``previous`` the superseded or merged
    text; ``keyword_id`` the keyword holding it."""

    index: int
    category: str
    key: str
    action: str
    reason: str
    content: str
    info_id: str | None
    keyword_id: str | None
    previous: str | None = None


@dataclass(frozen=True, slots=True)
class CommitFallback:
    """A step of the commit that the LLM did not do, done as a tree without an LLM does it
    (``kwtree.memory.outage``): ``step`` is "extraction", "placement" or "dedup", ``error``
    the LLM's first error in that step (``"<class>: <message>"``; ``"not asked: ..."`` when an
    earlier call of the commit got no answer) and ``instead`` what did the step."""

    step: str
    error: str
    instead: str


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What ``commit_session`` did (or, with ``dry_run``, would do).

    Counts of the candidates ``extracted`` and of the decisions; ``created_ids`` the keywords
    and infos the commit created, ``changed_ids`` those it updated (on a dry run: the ids it
    would use); ``session_keyword_id`` (None on a dry run that would create it); ``op_id`` the
    operation (None on a dry run or when nothing was new); ``first_new`` the first message
    not seen before this commit and ``seen`` how many are seen after it. ``fallbacks`` are the
    steps the LLM failed (empty when it failed none, or the tree has none), in the order they
    ran; the operation's audit holds them too (``audit["commit_session"]["fallbacks"]``).
    ``passed_over`` are the candidates the extractor found but did not return, each with its
    reason (a cap, folded into another, small talk; only an extractor that returns a
    ``kwtree.memory.candidates.Extraction`` tells them), also in
    ``audit["commit_session"]["passed_over"]``."""

    session_id: str
    scope: str
    op_id: str | None
    session_keyword_id: str | None
    first_new: int
    seen: int
    extracted: int
    created: int
    appended: int
    merged: int
    superseded: int
    skipped: int
    created_ids: tuple[str, ...]
    changed_ids: tuple[str, ...]
    decisions: tuple[CommitDecision, ...]
    dry_run: bool = False
    fallbacks: tuple[CommitFallback, ...] = ()
    passed_over: tuple[PassedOver, ...] = ()

    @property
    def fell_back(self) -> bool:
        """True when the LLM failed a step and the commit did it without the LLM."""
        return bool(self.fallbacks)


class StalePlanError(KwtreeError):
    """Raised by the decider when another writer committed the same session while this commit
    was being prepared: the plan no longer fits (the facade prepares it again)."""


@dataclass(slots=True)
class CommitPlan:
    """What the facade prepared outside the write lock. ``placements`` maps (category, key)
    to the parent the agent chose for a new holder keyword (None: the branch) and the walk's
    audit; ``neighbours`` and ``verdicts`` are per candidate (a verdict only from the LLM)."""

    scope: str
    session_id: str
    messages: Sequence[Message]
    first_new: int
    session_time: float | None
    keep_turns: bool
    candidates: Sequence[Candidate]
    policies: Mapping[str, Policy]
    thresholds: DedupThresholds
    placements: dict[tuple[str, str], tuple[str | None, dict[str, Any] | None]]
    neighbours: list[list[Neighbour]]
    verdicts: list[Judgement | None]
    audit: dict[str, Any] = field(default_factory=dict)
    #: the caller's metadata for every memory written (``CommitOptions.metadata``)
    user_metadata: Mapping[str, Any] | None = None
    #: whether the session keeps a summary info (``CommitOptions.keep_summary``)
    keep_summary: bool = True
    #: the steps the LLM failed, filled while the plan is prepared
    fallbacks: list[CommitFallback] = field(default_factory=list)
    #: who said every message (``CommitOptions.provenance``); None: each message's role says
    provenance: str | None = None
    #: what the extractor found but did not return, and why (``CommitResult.passed_over``)
    passed_over: tuple[PassedOver, ...] = ()
    #: each branch of the scope as the plan was prepared, resolved once: branch name -> its
    #: keyword's id and the ids of its subtree (None and empty when it does not exist yet)
    branches: dict[str, tuple[str | None, frozenset[str]]] = field(default_factory=dict)


# --- finding the scope's parts (also used by the facade on a read) ------------------------------


def _child(state: State, parent: str, key: str, value: str) -> Keyword | None:
    for kid in state.children.get(parent, ()):
        keyword = state.keywords[kid]
        if keyword.metadata.get(key) == value:
            return keyword
    return None


def find_branch(state: State, scope_id: str, branch: str) -> Keyword | None:
    """The live branch keyword ``branch`` of the scope keyword ``scope_id``."""
    return _child(state, scope_id, BRANCH_KEY, branch)


def find_session(state: State, sessions_id: str, session_id: str) -> Keyword | None:
    """The live session keyword of ``session_id`` under the sessions branch ``sessions_id``."""
    return _child(state, sessions_id, SESSION_ID, session_id)


def find_holder(state: State, branch_id: str, key: str) -> Keyword | None:
    """The live keyword inside the branch answering to the routing ``key`` (oldest first)."""
    for kid in state.lookup_names(normalize_name(key)):
        if kid != branch_id and state.is_descendant(kid, branch_id):
            return state.keywords[kid]
    return None


# --- the decider --------------------------------------------------------------------------------


class _Draft:
    """The steps of one commit, tried on a fork of the state."""

    def __init__(self, state: State, stamp: Stamp) -> None:
        self.state = state.fork()
        self.stamp = stamp
        self.changes: list[Change] = []
        self.decisions: list[CommitDecision] = []  # one per candidate, in order
        self.placements: list[dict[str, Any]] = []  # where each new holder keyword went, for the audit
        self.branches: dict[str, str] = {}  # branch name -> its keyword's id, once found or made

    def put(self, changes: list[Change]) -> list[Change]:
        put_changes(self.state, changes)
        self.changes.extend(changes)
        return changes

    def keyword(self, name: str, parent: str, metadata: Mapping[str, Any], what: str) -> Keyword:
        try:
            made = self.put(keyword_commands.create_keyword(self.state, self.stamp, name, parent, None, "", metadata))
        except DuplicateKeywordError as exc:
            raise InvalidInputError(
                f"cannot create the {what} {name!r}: {exc}. A keyword of that name that kwtree did not create as "
                f"the {what} is in the way; rename or move it") from None
        return made[0].after  # type: ignore[return-value]

    def info(self, content: str, keyword_id: str, metadata: Mapping[str, Any], provenance: str) -> Info:
        made = self.put(info_commands.create_info(self.state, self.stamp, content, "", [keyword_id], metadata, (),
                                                  provenance))
        return made[0].after  # type: ignore[return-value]

    def link(self, info_id: str, keyword_id: str) -> None:
        self.put(info_commands.link_info(self.state, self.stamp, info_id, keyword_id, RelationType.RELATED, "agent"))

    def update_info(self, info: Info, content: str, metadata: Mapping[str, Any], provenance: str) -> Info:
        patch = {"content": content, "metadata": metadata, "provenance": provenance}
        return self.put(info_commands.update_info(self.state, self.stamp, info.id, patch, None))[0].after  # type: ignore[return-value]

    def update_keyword_metadata(self, keyword: Keyword, metadata: Mapping[str, Any]) -> Keyword:
        current = self.state.keywords[keyword.id]
        changes = keyword_commands.update_keyword(self.state, self.stamp, current.id, {"metadata": metadata},
                                                  current.version)
        return self.put(changes)[0].after  # type: ignore[return-value]

    def infos_of(self, keyword_id: str) -> list[Info]:
        infos = self.state.infos
        return [infos[iid] for iid in self.state.infos_by_keyword.get(keyword_id, {}) if not infos[iid].deleted]


def _scope(draft: _Draft, scope: str) -> Keyword:
    """The keyword of ``scope``, its missing keywords created as ``scope_specs`` says (one by
    one, so that a keyword in the way is named in the error)."""
    specs, inside = scope_specs(scope, lambda path: scope_keyword(draft.state, path))
    made: dict[str, str] = {}  # ref (the scope path) -> id of the keyword created for it
    for spec in specs:
        parent = made[spec["parent_ref"]] if "parent_ref" in spec else spec["parent_id"]
        made[spec["ref"]] = draft.keyword(spec["name"], parent, spec["metadata"], "scope keyword").id
    return draft.state.keywords[made[scope] if specs else inside["parent_id"]]


def _branch(draft: _Draft, scope_kw: Keyword, branch: str) -> Keyword:
    """The branch keyword of the commit's scope, found (or made) once per commit."""
    known = draft.branches.get(branch)
    if known is None:
        found = find_branch(draft.state, scope_kw.id, branch) or draft.keyword(
            branch, scope_kw.id, {BRANCH_KEY: branch}, f"branch of scope {scope_kw.name!r}")
        known = draft.branches[branch] = found.id
    return draft.state.keywords[known]


def _new_session(draft: _Draft, sessions: Keyword, session_id: str) -> Keyword:
    """The session's keyword, named after its id; ids that differ only in case or punctuation
    ("Trip 1", "trip-1") are different sessions with the same name key, so a later one is
    named "<id> (2)", "<id> (3)" ... (the ``session_id`` metadata, not the name, finds it)."""
    taken = {normalize_name(draft.state.keywords[kid].name) for kid in draft.state.children.get(sessions.id, ())}
    name, number = session_id, 1
    while normalize_name(name) in taken:
        number += 1
        name = f"{session_id} ({number})"
    return draft.keyword(name, sessions.id, {SESSION_ID: session_id}, "session keyword")


def _said_by(plan: CommitPlan, indices: Iterable[int]) -> str:
    """Who said what ``plan.messages[indices]`` hold: the commit's provenance when it sets one,
    else the least trusted of their speakers' (none given: of every new message's)."""
    if plan.provenance is not None:
        return plan.provenance
    chosen = list(indices) or range(plan.first_new, len(plan.messages))
    return least_trusted(provenance_of(plan.messages[index]) for index in chosen)


@dataclass(frozen=True, slots=True)
class Decided:
    """What ``commit_changes`` decided: the changes (one row per entity, in an order ``apply``
    takes), the decision on each candidate, the session's keyword and the operation's audit."""

    changes: list[Change]
    decisions: tuple[CommitDecision, ...]
    session_keyword_id: str
    audit: dict[str, Any]


def commit_changes(state: State, stamp: Stamp, plan: CommitPlan) -> Decided:
    """Every change of the commit ``plan`` describes, decided against ``state``. A decider: it
    changes neither ``state`` nor ``plan`` (the engine may ask it again, on a newer state, and
    gets the same answer for the same state). Raises StalePlanError when the session moved on
    since the plan was made, InvalidInputError when a keyword of a scope's name that is not
    that scope is in the way."""
    draft = _Draft(state, stamp)
    scope_kw = _scope(draft, plan.scope)
    sessions = _branch(draft, scope_kw, SESSIONS_BRANCH)
    session_kw = find_session(draft.state, sessions.id, plan.session_id)
    seen = int(session_kw.metadata.get(SEEN, 0)) if session_kw is not None else 0
    if seen != plan.first_new or (seen and session_kw is not None
                                  and session_kw.metadata.get(DIGEST) != digest(plan.messages[:seen])):
        raise StalePlanError(f"session {plan.session_id!r} was committed by another writer while this commit was "
                             f"prepared ({seen} messages seen, {plan.first_new} expected); commit it again")
    session_time = plan.session_time
    if session_time is None and session_kw is not None:
        session_time = session_kw.metadata.get(SESSION_TIME)
    if session_kw is None:
        session_kw = _new_session(draft, sessions, plan.session_id)
    summary_info = next((info for info in draft.infos_of(session_kw.id)
                         if info.metadata.get(KIND) == SUMMARY_KIND), None)
    said = _said_by(plan, ())  # what the summary is drawn from: every new message
    if summary_info is None and plan.keep_summary:  # first, so that it leads the session's infos
        summary_info = draft.info(f"Session {plan.session_id}.", session_kw.id,
                                  {KIND: SUMMARY_KIND, SESSION_ID: plan.session_id}, said)
    turn_ids = _turns(draft, plan, session_kw, session_time)
    for index, candidate in enumerate(plan.candidates):
        _route(draft, plan, scope_kw, index, candidate, turn_ids, session_time)
    if summary_info is not None:
        summary = summarise(plan.messages, plan.first_new, plan.candidates, summary_info.metadata)
        when = _session_when(plan, session_time)
        if when is None:
            when = summary_info.metadata.get(HAPPENED_AT)
        dated = {HAPPENED_AT: when} if when is not None else {}
        draft.update_info(summary_info, summary_text(plan.session_id, summary),
                          {KIND: SUMMARY_KIND, SESSION_ID: plan.session_id, **summary, **dated},
                          least_trusted((summary_info.provenance, said)))
    metadata: dict[str, Any] = {**session_kw.metadata, SESSION_ID: plan.session_id,
                                SEEN: len(plan.messages), DIGEST: digest(plan.messages)}
    if session_time is not None:
        metadata[SESSION_TIME] = session_time
    draft.update_keyword_metadata(session_kw, metadata)
    changes = coalesce(draft.changes)
    check_consistent(state, changes, "commit_session")
    audit = {**plan.audit, **({"placements": draft.placements} if draft.placements else {}),
             "decisions": [_decision_audit(d) for d in draft.decisions]}
    return Decided(in_apply_order(state, changes), tuple(draft.decisions), session_kw.id, audit)


def _session_when(plan: CommitPlan, session_time: float | None) -> float | None:
    """When the session happened, for its summary: ``session_time``, else the time of its
    earliest timed message, else None (then the summary is dated by when it was recorded), so
    that a time filter reads a summary as the session it sums up."""
    if session_time is not None:
        return session_time
    times = [when for message in plan.messages if (when := parse_time(message.get("ts"), "ts")) is not None]
    return min(times, default=None)


def _turns(draft: _Draft, plan: CommitPlan, session_kw: Keyword, session_time: float | None) -> dict[int, str]:
    """The turn infos of the session by message index: those of earlier commits, and (with
    ``keep_turns``) the new messages', created in order; a turn that is small talk
    (``kwtree.retrieval.smalltalk.small_talk``) says why in ``metadata["small_talk"]``."""
    found = {int(info.metadata[TURN]): info.id for info in draft.infos_of(session_kw.id)
             if type(info.metadata.get(TURN)) is int}
    if not plan.keep_turns:
        return found
    for index in range(plan.first_new, len(plan.messages)):
        message = plan.messages[index]
        text = turn_text(message)
        if not text:
            continue
        when = parse_time(message.get("ts"), "ts")
        when = when if when is not None else session_time if session_time is not None else draft.stamp.timestamp
        metadata = {ROLE: message["role"], TURN: index, SESSION_ID: plan.session_id, HAPPENED_AT: when}
        chatter = small_talk(text)
        if chatter is not None:  # archived all the same; retrieval ranks it below what states a fact
            metadata[SMALL_TALK] = chatter
        about = _about_someone_else(text) if message["role"] != "assistant" else None
        if about is not None:  # "My coworker Kenji climbs V9": retrieval ranks it as Kenji's, not the user's
            metadata[SUBJECT] = about
        found[index] = draft.info(text, session_kw.id, metadata, _said_by(plan, (index,))).id
    return found


def _about_someone_else(text: str) -> str | None:
    """Whom a turn is about when every sentence of it (of three words or more) leads with the
    same other person the speaker names (``statements.led_by_someone_else``) or, after one
    that does, with "he", "she" or "they"; else None."""
    people: set[str | None] = set()
    last: str | None = None
    for sentence in sentences(text):
        if len(sentence.split()) < 3:
            continue
        person = led_by_someone_else(sentence)
        if person is None and last is not None and _GOES_ON.match(sentence):
            person = last
        people.add(person)
        last = person
    return people.pop() if len(people) == 1 and None not in people else None


#: A sentence that goes on about the person the one before it named.
_GOES_ON = re.compile(r"\W*(?:he|she|they|his|her|their|he's|she's|they're)\b", re.IGNORECASE)


def _decide(draft: _Draft, index: int, candidate: Candidate, action: str, reason: str,
            info_id: str | None, keyword_id: str | None, previous: str | None = None) -> None:
    draft.decisions.append(CommitDecision(index, candidate.category, candidate.key, action, reason,
                                         candidate.content, info_id, keyword_id, previous))


def holder_keys(candidates: Sequence[Candidate], policies: Mapping[str, Policy]) -> list[tuple[str, str, str]]:
    """``(category, key, abstract)`` of each keyword the candidates are filed under: their own
    routing key's, and each name they mention (``ENTITIES_KEY``) under the ``entities``
    category's (when it has a policy), in order, once each."""
    found: dict[tuple[str, str], str] = {}
    for candidate in candidates:
        found.setdefault((candidate.category, candidate.key), candidate.abstract)
        for name in _mentions(candidate, policies):
            found.setdefault(("entities", name), candidate.abstract)
    return [(category, key, about) for (category, key), about in found.items()]


def _mentions(candidate: Candidate, policies: Mapping[str, Policy]) -> list[str]:
    """The names ``candidate`` is filed under besides its own key (none when the ``entities``
    category has no policy, or for an entity itself)."""
    names = (candidate.facts or {}).get(ENTITIES_KEY)
    if "entities" not in policies or candidate.category == "entities" or not isinstance(names, list):
        return []
    return [name for name in names if type(name) is str and name.strip()]


def _holder(draft: _Draft, plan: CommitPlan, branch: Keyword, category: str, key: str, policy: Policy) -> Keyword:
    if policy.holder == "branch":
        return branch
    found = find_holder(draft.state, branch.id, key)
    if found is not None:
        return found
    chosen, agent = plan.placements.get((category, key), (None, None))
    parent = branch.id
    entry: dict[str, Any] = {"category": category, "key": key}
    if agent is not None:
        entry["agent"] = agent
    if chosen is not None:
        if draft.state.live_keyword(chosen) is not None and draft.state.is_descendant(chosen, branch.id):
            parent = chosen
        else:  # deleted or moved out by another writer meanwhile
            entry["parent_fallback"] = f"{chosen} is no longer inside the branch; placed under the branch"
    draft.placements.append(entry)
    return draft.keyword(key, parent, {CATEGORY: category, ROUTING_KEY: key}, f"{category} keyword")


def _memory_metadata(candidate: Candidate, plan: CommitPlan, turn_ids: dict[int, str],
                     session_time: float | None, stamp: Stamp) -> dict[str, Any]:
    happened = candidate.happened_at if candidate.happened_at is not None else session_time
    metadata: dict[str, Any] = {
        CATEGORY: candidate.category, ROUTING_KEY: candidate.key, INFO_ABSTRACT: candidate.abstract,
        CONFIDENCE: candidate.confidence, SOURCES: [turn_ids[i] for i in candidate.sources if i in turn_ids],
        HAPPENED_AT: happened if happened is not None else stamp.timestamp, SESSION_ID: plan.session_id,
    }
    subject = (candidate.facts or {}).get(SUBJECT)
    if isinstance(subject, str) and subject.strip() and subject != USER_SUBJECT:
        metadata[SUBJECT] = subject
    attribute = (candidate.facts or {}).get(ATTRIBUTE)
    if isinstance(attribute, str) and attribute:
        metadata[ATTRIBUTE] = attribute
        value = (candidate.facts or {}).get(VALUE)
        if isinstance(value, str) and value.strip():
            metadata[VALUE] = value
    return metadata


def _with_user_metadata(metadata: dict[str, Any], plan: CommitPlan, held: Info | None) -> dict[str, Any]:
    """``metadata`` with the caller's (``CommitOptions.metadata``) over what ``held`` had there."""
    if not plan.user_metadata:
        return metadata
    before = held.metadata.get(USER_METADATA) if held is not None else None
    return {**metadata, USER_METADATA: {**(before if isinstance(before, dict) else {}), **plan.user_metadata}}


def _route(draft: _Draft, plan: CommitPlan, scope_kw: Keyword, index: int, candidate: Candidate,
           turn_ids: dict[int, str], session_time: float | None) -> None:
    written = len(draft.decisions)
    _write(draft, plan, scope_kw, index, candidate, turn_ids, session_time)
    memory = draft.decisions[-1].info_id if len(draft.decisions) > written else None
    if memory is not None and draft.decisions[-1].action != "skip" and (candidate.facts or {}).get("corrects"):
        _correct(draft, plan, scope_kw.id, memory, candidate, turn_ids)
    names = _mentions(candidate, plan.policies)
    if memory is None or not names or draft.state.live_info(memory) is None:
        return
    policy = plan.policies["entities"]
    branch = _branch(draft, scope_kw, policy.branch)
    for name in names:  # the memory filed under each name it mentions: a link, not a copy
        draft.link(memory, _holder(draft, plan, branch, "entities", name, policy).id)


def _write(draft: _Draft, plan: CommitPlan, scope_kw: Keyword, index: int, candidate: Candidate,
           turn_ids: dict[int, str], session_time: float | None) -> None:
    policy = plan.policies[candidate.category]
    branch = _branch(draft, scope_kw, policy.branch)
    holder = _holder(draft, plan, branch, candidate.category, candidate.key, policy)
    metadata = _memory_metadata(candidate, plan, turn_ids, session_time, draft.stamp)
    said = _said_by(plan, candidate.sources)
    if policy.write == "accumulate":
        _accumulate(draft, plan, index, candidate, holder, metadata, said)
        return
    # (a memory of another category filed here by a name it mentions is not this key's to merge into)
    held = [info for info in draft.infos_of(holder.id) if info.metadata.get(CATEGORY) == candidate.category]
    if policy.write == "supersede" and ATTRIBUTE in metadata:
        same = [info for info in held if info.metadata.get(ATTRIBUTE) == metadata[ATTRIBUTE]
                and not info.metadata.get(SUPERSEDED_BY) and _alone(draft.state, info.id, scope_kw.id)]
        if same:
            _supersede(draft, plan, index, candidate, holder, same[-1], metadata, said, scope_kw.id)
            return
    verdict = _verdict(draft, plan, index, candidate, branch, held, may_merge=policy.write != "append")
    if verdict.action == "merge" and not _alone(draft.state, verdict.target, scope_kw.id):  # type: ignore[arg-type]
        verdict = dataclasses.replace(verdict, action="create", target=None, reason=(
            f"{verdict.reason}; that memory is also filed in another scope, which must not see it change: "
            "this one is kept apart"))
    if verdict.action == "skip":
        _decide(draft, index, candidate, "skip", verdict.reason, verdict.target, holder.id)
    elif verdict.action == "merge":
        target = draft.state.infos[verdict.target]  # type: ignore[index]
        sources = list(dict.fromkeys([*target.metadata.get(SOURCES, ()), *metadata[SOURCES]]))
        content = merged_text(target.content, candidate.content)
        if content == target.content and sources == list(target.metadata.get(SOURCES, ())):
            _decide(draft, index, candidate, "skip", f"{verdict.reason}; nothing new to add", target.id, holder.id)
            return
        draft.update_info(target, content, _with_user_metadata({**target.metadata, SOURCES: sources}, plan, target),
                          least_trusted((target.provenance, said)))
        _decide(draft, index, candidate, "merge", verdict.reason, target.id, holder.id, previous=target.content)
    else:
        info = draft.info(candidate.content, holder.id, _with_user_metadata(metadata, plan, None), said)
        action = "append" if policy.write == "append" else "create"
        _decide(draft, index, candidate, action, verdict.reason, info.id, holder.id)


def _value(info_or_candidate: Mapping[str, Any], content: str) -> str:
    value = info_or_candidate.get(VALUE)
    return normalize_name(value if isinstance(value, str) and value.strip() else content)


def _supersede(draft: _Draft, plan: CommitPlan, index: int, candidate: Candidate, holder: Keyword, old: Info,
               metadata: dict[str, Any], said: str, scope_id: str) -> None:
    """A new value of the attribute ``old`` holds: a new memory, and the older of the two (with
    its copies and the turns it came from) marked superseded by the newer, which stays live
    for history and ``as_of`` (recall ranks it below; blocks say it is an earlier value)."""
    attribute = metadata[ATTRIBUTE]
    if _value(old.metadata, old.content) == _value(metadata, candidate.content):
        _decide(draft, index, candidate, "skip", f"the same {attribute} is held already", old.id, holder.id)
        return
    new = draft.info(candidate.content, holder.id, _with_user_metadata(metadata, plan, None), said)
    older, newer = (old, new) if happened_at(old) <= happened_at(new) else (new, old)
    _mark_superseded(draft, scope_id, older, newer.id, happened_at(newer))
    reason = (f"a new {attribute}: the earlier one is kept, marked superseded" if older is old else
              f"an earlier {attribute} than the one held (it happened before): kept, marked superseded")
    _decide(draft, index, candidate, "supersede", reason, new.id, holder.id, previous=old.content)


def _mark_superseded(draft: _Draft, scope_id: str, info: Info, by: str, until: float) -> None:
    """``info``, the memories of the scope (keyword ``scope_id``) drawn from the same turns that
    hold its text (its copies filed under the names it mentions, alone or merged with other
    sentences), and those turns, marked superseded by memory ``by``."""
    state = draft.state
    sources = info.metadata.get(SOURCES)
    turns = {turn for turn in sources if isinstance(turn, str)} if isinstance(sources, list) else set()
    marked = {info.id, *turns}
    marked.update(other.id for other in _drawn_from(state, scope_id, turns) if info.content in other.content)
    _mark(draft, marked - {by}, by, until)


def _drawn_from(state: State, scope_id: str, turns: set[str]) -> list[Info]:
    """The infos of the scope (keyword ``scope_id``) drawn from any of ``turns`` (their
    ``sources``), each once."""
    if not turns:
        return []
    found: dict[str, Info] = {}
    for kid in state.subtree(scope_id):
        for iid in state.infos_by_keyword.get(kid, ()):
            sources = state.infos[iid].metadata.get(SOURCES)
            if isinstance(sources, list) and turns.intersection(sources):
                found[iid] = state.infos[iid]
    return list(found.values())


def _mark(draft: _Draft, info_ids: Iterable[str], by: str, until: float) -> None:
    """Each of ``info_ids`` that is live and not superseded yet marked superseded by ``by``."""
    for iid in sorted(info_ids):
        current = draft.state.live_info(iid)
        if current is not None and not current.metadata.get(SUPERSEDED_BY):
            draft.update_info(current, current.content, {**current.metadata, SUPERSEDED_BY: by, VALID_UNTIL: until},
                              current.provenance)


def _correct(draft: _Draft, plan: CommitPlan, scope_id: str, memory: str, candidate: Candidate,
             turn_ids: Mapping[int, str]) -> None:
    """A correction (``kwtree.memory.corrections``) written as memory ``memory``: the scope's
    memories drawn from the corrected turn that hold the corrected sentence, and the turn when
    that sentence is most of it (``CORRECTED_SHARE``) or every memory drawn from it is corrected,
    marked superseded by it; its decision says so."""
    facts = candidate.facts or {}
    sentence, index = facts.get("corrects"), facts.get("corrects_turn")
    turn = turn_ids.get(index) if type(index) is int else None
    if not isinstance(sentence, str) or turn is None or draft.state.live_info(turn) is None:
        return
    state = draft.state
    said = set(terms(sentence))
    drawn, marked = set(), set()
    for info in _drawn_from(state, scope_id, {turn}):
        if info.id == memory:
            continue
        drawn.add(info.id)
        own = set(terms(info.content))
        if info.content.strip() in sentence or sentence in info.content \
                or (own and len(own & said) >= CORRECTED_SHARE * len(own)):
            marked.add(info.id)
    whole = state.infos[turn].content
    if len(sentence) >= CORRECTED_SHARE * len(whole) or (drawn and drawn == marked):
        marked.add(turn)
    if not marked:
        return
    _mark(draft, marked, memory, happened_at(state.infos[memory]))
    last = draft.decisions[-1]
    draft.decisions[-1] = dataclasses.replace(last, action="supersede", previous=sentence, reason=(
        f"a correction of an earlier statement: {len(marked)} record(s) of it kept, marked superseded"))


#: A corrected sentence that is at least this share of its turn's text stands for the whole turn
#: (the turn is marked superseded with the memories holding it); a memory holding this share of
#: its terms in the corrected sentence holds that sentence.
CORRECTED_SHARE = 0.6


def _alone(state: State, info_id: str, scope_id: str) -> bool:
    """Whether the memory is filed only inside the scope (keyword ``scope_id``): a commit merges
    into or supersedes only such memories, so another scope never sees what it holds change."""
    return all(state.is_descendant(kid, scope_id) for kid in state.keywords_by_info.get(info_id, ()))


def _verdict(draft: _Draft, plan: CommitPlan, index: int, candidate: Candidate, branch: Keyword,
             held: list[Info], *, may_merge: bool) -> Judgement:
    """The LLM's verdict when it still fits the fresh state, else the thresholds' over the
    prefilter's neighbours that are still live and inside the branch, and what the holder holds."""
    state = draft.state
    # A single-valued fact is judged against memories of its own attribute only: "I'm an engineer
    # at Rakuten" states a job and an employer in one clause, two facts with the same words.
    attribute = (candidate.facts or {}).get(ATTRIBUTE)

    def inside(info_id: str) -> bool:
        info = state.live_info(info_id)
        return (info is not None and info.metadata.get(CATEGORY) == candidate.category
                and (attribute is None or info.metadata.get(ATTRIBUTE) == attribute)
                and any(state.is_descendant(kid, branch.id) for kid in state.keywords_by_info.get(info_id, ())))

    verdict = plan.verdicts[index] if index < len(plan.verdicts) else None
    if verdict is not None and (verdict.target is None or inside(verdict.target)):
        return verdict
    neighbours = {n.info_id: n for n in plan.neighbours[index] if inside(n.info_id)}
    for info in held:
        if attribute is None or info.metadata.get(ATTRIBUTE) == attribute:
            neighbours.setdefault(info.id, Neighbour(info.id, info.content))
    fresh = [dataclasses.replace(n, content=state.infos[n.info_id].content) for n in neighbours.values()]
    found = judge(candidate.content, fresh, plan.thresholds, may_merge=may_merge)
    if verdict is not None:  # the LLM's target is gone
        return dataclasses.replace(found, reason=f"the LLM's target {verdict.target} was deleted meanwhile; "
                                                 f"{found.reason}")
    return found


def _accumulate(draft: _Draft, plan: CommitPlan, index: int, candidate: Candidate, holder: Keyword,
                metadata: dict[str, Any], said: str) -> None:
    """A skill: its statistics in the holder's metadata, its lesson merged into the guide."""
    facts = candidate.facts or {}
    current = draft.state.keywords[holder.id]
    stats = dict(current.metadata)
    stats[CALLS] = int(stats.get(CALLS, 0)) + 1
    outcome = facts.get("outcome")
    if outcome == "success":
        stats[SUCCESSES] = int(stats.get(SUCCESSES, 0)) + 1
    elif outcome == "failure":
        stats[FAILURES] = int(stats.get(FAILURES, 0)) + 1
    duration = finite_number(facts.get("duration"))
    if duration is not None and duration >= 0:
        stats[DURATION_TOTAL] = float(stats.get(DURATION_TOTAL, 0.0)) + duration
        stats[TIMED_CALLS] = int(stats.get(TIMED_CALLS, 0)) + 1
        stats[DURATION_MEAN] = stats[DURATION_TOTAL] / stats[TIMED_CALLS]
    draft.update_keyword_metadata(current, stats)
    guide = next((info for info in draft.infos_of(holder.id) if info.metadata.get(GUIDE)), None)
    if guide is None:
        info = draft.info(candidate.content, holder.id, {**metadata, GUIDE: True}, said)
        _decide(draft, index, candidate, "create", "the first lesson about this tool: a new guide", info.id, holder.id)
        return
    content = merged_text(guide.content, candidate.content)
    if content == guide.content:
        _decide(draft, index, candidate, "skip", "the guide holds this lesson already (statistics counted)",
                guide.id, holder.id)
        return
    sources = list(dict.fromkeys([*guide.metadata.get(SOURCES, ()), *metadata[SOURCES]]))
    draft.update_info(guide, content, {**guide.metadata, SOURCES: sources}, least_trusted((guide.provenance, said)))
    _decide(draft, index, candidate, "merge", "a new lesson merged into the tool's guide", guide.id, holder.id,
            previous=guide.content)


def _decision_audit(decision: CommitDecision) -> dict[str, Any]:
    return {"index": decision.index, "category": decision.category, "key": decision.key,
            "action": decision.action, "reason": decision.reason, "info_id": decision.info_id,
            "keyword_id": decision.keyword_id, "content": decision.content,
            **({"previous": decision.previous} if decision.previous is not None else {})}
