"""The descend loop: walk the tree round by round with a navigator, for search or placement.

Each round shows the navigator a flat list of at most ``max_candidates`` keywords, collected
breadth first from the round's starting points, each as ``{idx, name, path}``; the navigator
answers with idx integers, which the loop maps back to ids. The first round starts from the
MRU entries (recent matches, most recent first, at most half the list) and the root's
children; a node is listed once even when an entry point is also reachable through an
ancestor. When a level has more nodes than fit, the ones whose subtree is most relevant to the
query are kept.

Actions (see ``prompts.SYSTEM_PROMPT``):

- ``jump`` to one candidate continues from its children; to several, from the union of their
  children with the path at their lowest common ancestor; jumping only to leaves is ambiguous
  when there are several (a single leaf has no children: the next round ends the walk as
  missing under it).
- ``match`` one candidate: matched; several: ambiguous.
- ``missing``: the suggested parent is where the path ends (the root on the first round) and
  the suggested name is the answer's ``suggest_name`` (else the query).
- ``ambiguous``: the candidates named.

Fallbacks end the walk as missing with reason ``agent_failure`` (the navigator raised or
answered something that is not a decision), ``invalid_jump`` (an idx that was not shown) or
``agent_timeout`` (no answer within ``max_rounds`` rounds).
"""

from __future__ import annotations

import enum
import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import orjson

from kwtree.agent.lexicon import KeywordLexicon, Relevance
from kwtree.agent.mru import MRUCache
from kwtree.agent.navigation import Navigator, RoundKeyword, RoundRequest
from kwtree.agent.prompts import ACTIONS, INTENTS, PROMPT_VERSION
from kwtree.engine.state import State
from kwtree.errors import AgentError
from kwtree.models import ROOT_ID

__all__ = ["FALLBACKS", "DescendLoop", "Descent", "DescentStatus", "Reader", "refuse_fallback"]

T = TypeVar("T")


class Reader(Protocol):
    """Runs a function on the current state under the state's lock and returns its result."""

    def __call__(self, use: Callable[[State], T], /) -> T: ...


#: Why a walk can end in a fallback instead of the navigator's decision.
FALLBACKS = ("agent_failure", "invalid_jump", "agent_timeout")


class DescentStatus(str, enum.Enum):
    MATCHED = "matched"
    AMBIGUOUS = "ambiguous"
    MISSING = "missing"


@dataclass(slots=True)
class Descent:
    """How a walk ended. ``keyword_ids`` holds the match (one) or the ambiguous candidates;
    ``suggested_parent_id`` and ``suggested_name`` are set when missing. ``trace`` holds
    every round's request document, answer and outcome. ``fallback`` (one of FALLBACKS) and
    ``error`` say why a walk that did not end on the navigator's decision ended."""

    intent: str
    query: str
    status: DescentStatus
    keyword_ids: tuple[str, ...] = ()
    suggested_parent_id: str | None = None
    suggested_name: str | None = None
    reason: str = ""
    navigator: str = ""
    trace: list[dict[str, Any]] = field(default_factory=list)
    fallback: str | None = None
    error: str = ""

    @property
    def rounds(self) -> int:
        """Rounds the navigator was asked (a fallback entry of the trace is not a round)."""
        return sum(1 for entry in self.trace if "round" in entry)

    def audit(self) -> dict[str, Any]:
        """What the operation this walk decided records about it (DESIGN §3)."""
        return {
            "intent": self.intent,
            "query": self.query,
            "navigator": self.navigator,
            "prompt": PROMPT_VERSION,
            "rounds": self.trace,
            "outcome": {
                "status": self.status.value,
                "keyword_ids": list(self.keyword_ids),
                "suggested_parent_id": self.suggested_parent_id,
                "suggested_name": self.suggested_name,
                "reason": self.reason,
            },
        }


def refuse_fallback(descent: Descent, refuses: bool, doing: str, next_step: str) -> None:
    """AgentError (raised before anything is written) when the walk fell back and the tree
    ``refuses`` fallbacks (``on_agent_failure="raise"``); ``doing`` and ``next_step`` say what
    was being done and what the caller can do instead."""
    if descent.fallback is not None and refuses:
        raise AgentError(
            f"the agent failed while {doing} ({descent.fallback}: {descent.error}); nothing was written. "
            f"{next_step[0].upper()}{next_step[1:]}, or open the tree with on_agent_failure=\"fallback\" to "
            "accept the fallback",
            descent.fallback, descent.error,
        )


class _Fallback(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class DescendLoop:
    """The loop with its navigator, MRU cache, keyword lexicon and counters. Thread-safe."""

    def __init__(self, navigator: Navigator, mru_capacity: int = 128, max_candidates: int = 50,
                 max_rounds: int = 6) -> None:
        self.navigator = navigator
        self.mru = MRUCache(mru_capacity)
        self.max_candidates = max_candidates
        self.max_rounds = max_rounds
        self._lexicon = KeywordLexicon()
        self._lexicon_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._stats: dict[str, Any] = {"descents": 0, "calls": 0, "rounds": 0, "failures": 0,
                                       "fallbacks": {}, "outcomes": {}}

    # --- relevance ---------------------------------------------------------------------------

    def relevance(self, read: Reader, query: str, description: str = "",
                  within: set[str] | None = None) -> Relevance:
        """The lexical relevance of every keyword (of ``within``, when given) to the query,
        on the current state."""

        def score(state: State) -> Relevance:
            with self._lexicon_lock:
                self._lexicon.sync(state)
                return self._lexicon.score(state, query, description, within=within)

        return read(score)

    def with_lexicon(self, read: Reader, use: Callable[[State, KeywordLexicon], T]) -> T:
        """``use(state, lexicon)`` on the current state with the keyword lexicon in step with it."""

        def run(state: State) -> T:
            with self._lexicon_lock:
                self._lexicon.sync(state)
                return use(state, self._lexicon)

        return read(run)

    # --- the loop ----------------------------------------------------------------------------

    def descend(self, read: Reader, query: str, intent: str, description: str = "",
                within: Sequence[str] | None = None, navigator: Navigator | None = None) -> Descent:
        """Walk the tree for ``query`` (a name or a text) with ``intent`` "search" or
        "suggest_parent". With ``within`` (ids of live keywords: a read's scopes), the walk
        starts at their children and is shown, and scores, nothing outside their subtrees;
        it may end missing at a keyword outside them (the root, for scopes that share no
        ancestor below it), which the caller clips. ``navigator`` decides this walk's rounds
        instead of the loop's own (a commit walks offline once its LLM failed). Never raises
        for what the navigator does: failures are fallbacks."""
        assert intent in INTENTS
        navigator = self.navigator if navigator is None else navigator
        inside = None if within is None else read(lambda state: {kid for top in within for kid in state.subtree(top)})
        relevance = self.relevance(read, query, description, inside)
        descent = Descent(intent, query, DescentStatus.MISSING, navigator=navigator.name)
        if within is None:
            starts = read(lambda state: self._entry_points(state))
            current = ROOT_ID
        else:
            starts = read(lambda state: self._entry_points(state, within, inside))
            current = read(functools.partial(_common_ancestor, ids=list(within)))
        try:
            for round_number in range(1, self.max_rounds + 1):
                candidates, path = read(functools.partial(self._view, starts=starts, relevance=relevance,
                                                          current=current))
                if not candidates:
                    return self._finish(descent, DescentStatus.MISSING, parent=current, reason="no_candidates")
                request = RoundRequest(intent, query, description, round_number, path, current, candidates, relevance)
                entry: dict[str, Any] = {"round": round_number, "request": request.document()}
                descent.trace.append(entry)
                try:
                    answer = navigator.decide(request)
                except Exception as exc:  # noqa: BLE001 -- any navigator failure is a fallback, never the caller's error
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                    raise _Fallback("agent_failure", entry["error"]) from None
                finally:
                    self._count(calls=1, rounds=1)
                entry["answer"] = _recordable(answer)
                action, chosen, suggest_name = _parse(answer, candidates)
                if action == "jump":
                    parents = [c for c in chosen if c.has_children]
                    if len(chosen) > 1 and not parents:
                        return self._finish(descent, DescentStatus.AMBIGUOUS, ids=[c.id for c in chosen],
                                            reason="jumped to leaves")
                    targets = parents or chosen
                    target_ids = [c.id for c in targets]
                    starts = read(functools.partial(_children_of, ids=target_ids))
                    current = read(functools.partial(_common_ancestor, ids=target_ids))
                    continue
                if action == "match":
                    status = DescentStatus.MATCHED if len(chosen) == 1 else DescentStatus.AMBIGUOUS
                    return self._finish(descent, status, ids=[c.id for c in chosen], reason=_reason(answer), read=read)
                if action == "ambiguous":
                    return self._finish(descent, DescentStatus.AMBIGUOUS, ids=[c.id for c in chosen],
                                        reason=_reason(answer))
                return self._finish(
                    descent, DescentStatus.MISSING, parent=current, name=suggest_name or query, reason=_reason(answer)
                )
            raise _Fallback("agent_timeout", f"no decision within {self.max_rounds} rounds")
        except _Fallback as fallback:
            self._count(failures=1, fallback=fallback.reason)
            descent.trace.append({"fallback": fallback.reason, "detail": str(fallback)})
            descent.fallback, descent.error = fallback.reason, str(fallback)
            return self._finish(descent, DescentStatus.MISSING, parent=current, name=query, reason=fallback.reason)

    def _finish(
        self,
        descent: Descent,
        status: DescentStatus,
        *,
        ids: Sequence[str] = (),
        parent: str | None = None,
        name: str | None = None,
        reason: str = "",
        read: Reader | None = None,
    ) -> Descent:
        descent.status = status
        descent.keyword_ids = tuple(dict.fromkeys(ids))
        descent.reason = reason
        if status is DescentStatus.MISSING:
            descent.suggested_parent_id = parent
            descent.suggested_name = name if name is not None else descent.query
        if status is DescentStatus.MATCHED and read is not None:
            self.remember(read(lambda state: state.ancestry(descent.keyword_ids[0])))
        self._count(descents=1, outcome=status.value)
        return descent

    # --- MRU ---------------------------------------------------------------------------------

    def remember(self, path_ids: Sequence[str]) -> None:
        """Touch a matched keyword and every keyword on its path (given root-first)."""
        self.mru.touch(kid for kid in reversed(path_ids) if kid != ROOT_ID)

    def forget(self, ids: Iterable[str]) -> None:
        self.mru.evict(ids)

    def _entry_points(self, state: State, within: Sequence[str] = (ROOT_ID,),
                      inside: set[str] | None = None) -> list[str]:
        """Recent matches (inside ``inside``, when given), then the children of ``within``."""
        recent = [kid for kid in self.mru.snapshot()
                  if state.live_keyword(kid) is not None and (inside is None or kid in inside)]
        recent = recent[: self.max_candidates // 2]
        return list(dict.fromkeys([*recent, *(child for top in within for child in state.children.get(top, ()))]))

    def _view(self, state: State, starts: list[str], relevance: Relevance,
              current: str) -> tuple[list[RoundKeyword], list[str]]:
        """A round's candidates, and the names on the path from the root to ``current``."""
        return self._collect(state, starts, relevance), _path_names(state, current)

    def _collect(self, state: State, starts: list[str], relevance: Relevance) -> list[RoundKeyword]:
        """Breadth first from ``starts``, each node once, at most ``max_candidates``; a level
        that does not fit keeps its most relevant nodes (in their original order)."""
        budget = self.max_candidates
        listed: dict[str, None] = {}
        level = [kid for kid in starts if state.live_keyword(kid) is not None]
        children = state.children
        while level and len(listed) < budget:
            level = [kid for kid in dict.fromkeys(level) if kid not in listed]
            room = budget - len(listed)
            if len(level) > room:
                keep = set(sorted(level, key=lambda kid: -relevance.priority(kid))[:room])
                level = [kid for kid in level if kid in keep]
            listed.update(dict.fromkeys(level))
            level = [child for kid in level for child in children.get(kid, ())]
        return [_candidate(state, index, kid) for index, kid in enumerate(listed)]

    # --- counters ----------------------------------------------------------------------------

    def _count(self, *, descents: int = 0, calls: int = 0, rounds: int = 0, failures: int = 0,
               fallback: str | None = None, outcome: str | None = None) -> None:
        with self._stats_lock:
            stats = self._stats
            stats["descents"] += descents
            stats["calls"] += calls
            stats["rounds"] += rounds
            stats["failures"] += failures
            if fallback is not None:
                stats["fallbacks"][fallback] = stats["fallbacks"].get(fallback, 0) + 1
            if outcome is not None:
                stats["outcomes"][outcome] = stats["outcomes"].get(outcome, 0) + 1

    def stats(self) -> dict[str, Any]:
        """Descents, navigator calls, rounds, failures by fallback reason, outcomes, and the
        navigator's token usage."""
        with self._stats_lock:
            stats = {key: dict(value) if isinstance(value, dict) else value for key, value in self._stats.items()}
        stats["navigator"] = self.navigator.name
        stats["usage"] = self.navigator.usage()
        stats["mru_size"] = len(self.mru)
        return stats


def _parse(answer: Any, candidates: list[RoundKeyword]) -> tuple[str, list[RoundKeyword], str | None]:
    """The action, the chosen candidates and the suggested name, or a _Fallback."""
    if not isinstance(answer, dict):
        raise _Fallback("agent_failure", f"the answer is not a JSON object: {answer!r:.200}")
    action = answer.get("action")
    if action not in ACTIONS:
        raise _Fallback("agent_failure", f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    suggest_name = answer.get("suggest_name")
    if suggest_name is not None and (type(suggest_name) is not str or not suggest_name.strip()):
        suggest_name = None
    elif suggest_name is not None:
        suggest_name = _text(suggest_name)
    if action == "missing":
        return action, [], suggest_name
    raw = answer.get("idxs") if answer.get("idxs") not in (None, []) else answer.get("idx")
    idxs = raw if isinstance(raw, list) else [raw]
    if not idxs or raw is None:
        raise _Fallback("agent_failure", f"{action} names no candidate (no idx or idxs)")
    chosen = []
    for idx in idxs:
        if type(idx) is not int:
            raise _Fallback("agent_failure", f"idx must be an integer, got {idx!r:.50}")
        if not 0 <= idx < len(candidates):
            raise _Fallback("invalid_jump", f"idx {idx} was not among the {len(candidates)} candidates shown")
        chosen.append(candidates[idx])
    return action, list({c.id: c for c in chosen}.values()), suggest_name


def _recordable(answer: Any) -> Any:
    """The answer as the audit can store it: itself when it encodes as JSON, else its repr
    (a valid JSON answer may still hold e.g. an integer beyond 64 bits or a lone surrogate)."""
    try:
        orjson.dumps(answer)
    except (TypeError, orjson.JSONEncodeError):
        return {"unrecordable_answer": repr(answer)[:2000]}
    return answer


def _text(value: str) -> str:
    """``value`` with anything UTF-8 cannot carry (a lone surrogate) replaced."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return value.encode(errors="replace").decode()
    return value


def _reason(answer: dict[str, Any]) -> str:
    reason = answer.get("reason")
    return _text(reason) if type(reason) is str else ""


def _candidate(state: State, idx: int, kid: str) -> RoundKeyword:
    keyword = state.keywords[kid]
    return RoundKeyword(
        idx, kid, keyword.name, " > ".join(_path_names(state, kid)), keyword.aliases,
        keyword.description, keyword.level, bool(state.children.get(kid)),
    )


def _path_names(state: State, kid: str) -> list[str]:
    return [state.keywords[node].name for node in state.ancestry(kid)[1:]]


def _children_of(state: State, ids: list[str]) -> list[str]:
    return [child for kid in ids for child in state.children.get(kid, ())]


def _common_ancestor(state: State, ids: list[str]) -> str:
    paths = [state.ancestry(kid) for kid in ids]
    common = ROOT_ID
    for nodes in zip(*paths, strict=False):
        if len(set(nodes)) != 1:
            break
        common = nodes[0]
    return common
