"""Lexical profiles of keywords, and how relevant each keyword is to a query.

The offline navigator decides from these scores, and the descend loop uses them to choose
which candidates to show when a level has more nodes than the prompt has room for.

A keyword's profile is the set of (lightly stemmed, stop-word free) terms of each of its
names, and of its description. A query is scored against every keyword that shares a term
with it, with terms weighted by inverse document frequency, in two ways:

- **match** — does the keyword name what the query names? The weighted Dice overlap of the
  query and the keyword's best name, or the keyword's name appearing inside a long query, or
  (weaker) the query's words appearing in the keyword's description.
- **parent** — would the keyword be a good parent for the query? Its name appearing early in
  the query's description (definitions start with their genus: "a hound with ..."), its name
  being the head of the query's name ("sea bass" under "bass"), its children resembling the
  query (siblings share words), and its own text resembling the query.

Scores lie in [0, 1]. ``Relevance.reach`` carries each score up to every ancestor, so a
candidate can be judged by the best match anywhere below it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from kwtree.engine.state import State
from kwtree.heap import collector_paused
from kwtree.models import ROOT_ID, Keyword
from kwtree.normalize import terms

__all__ = ["KeywordLexicon", "Relevance", "char_similarity"]

COMPARISONS = frozenset(["like", "unlike", "near", "besides", "versus", "vs", "similar", "resembling", "except"])
#: Terms in more keywords than this are too common to use as evidence (keeps queries fast).
MAX_POSTINGS = 5000
#: Re-indexing this many keywords at once pauses the garbage collector meanwhile.
_MANY = 1000
#: Scored keywords whose score is carried up to their ancestors.
REACH_TOP = 400

# Weights of the parent score's parts (tuned on WordNet leaves other than the benchmark's).
GENUS_WEIGHT = 0.55
SIBLING_WEIGHT = 0.3
TOPIC_WEIGHT = 0.15
#: A keyword without children counts this share of its parent score.
LEAF_PARENT_FACTOR = 0.7
#: A parent's descendant scoring at least this share of its score is preferred to it.
SPECIFIC_RATIO = 0.8


def _trigrams(text: str) -> set[str]:
    padded = f"  {text.lower()} "
    return {padded[i : i + 3] for i in range(len(padded) - 2)}


def _edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of
    two neighbouring characters each cost 1."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[len(b)]


def char_similarity(a: str, b: str) -> float:
    """How alike two spellings are, in [0, 1] (1.0 when equal ignoring case): the better of
    the Dice overlap of their character trigrams and, for short strings, one minus their edit
    distance over the longer length (so a swapped pair of letters, "pyhton", stays close)."""
    a, b = a.lower(), b.lower()
    if a == b:
        return 1.0
    grams_a, grams_b = _trigrams(a), _trigrams(b)
    dice = 2 * len(grams_a & grams_b) / (len(grams_a) + len(grams_b))
    if max(len(a), len(b)) > 32:
        return dice
    return max(dice, 1.0 - _edit_distance(a, b) / max(len(a), len(b)))


class _Profile(NamedTuple):  # (a tuple: every keyword has one, made in C)
    names: tuple[tuple[str, ...], ...]  # the terms of the name and of each alias, in order
    name_sets: tuple[frozenset[str], ...]
    description: frozenset[str]
    all_terms: frozenset[str]


_NOTHING: frozenset[str] = frozenset()
_NO_PROFILE = _Profile((), (), _NOTHING, _NOTHING)


def _profile(keyword: Keyword) -> _Profile:
    if not keyword.aliases and not keyword.description:  # (most keywords: a name alone)
        name = tuple(terms(keyword.name))
        if not name:
            return _NO_PROFILE
        found = frozenset(name)
        return _Profile((name,), (found,), _NOTHING, found)
    names = tuple(t for t in (tuple(terms(name)) for name in (keyword.name, *keyword.aliases)) if t)
    name_sets = tuple(frozenset(name) for name in names)
    description = frozenset(terms(keyword.description))
    all_terms = description.union(*name_sets) if name_sets else description
    return _Profile(names, name_sets, description, all_terms)


@dataclass(slots=True)
class Relevance:
    """How relevant each keyword is to one query (ids of keywords that scored above zero)."""

    match: dict[str, float] = field(default_factory=dict)
    parent: dict[str, float] = field(default_factory=dict)
    #: keyword id -> (best match score in its subtree, the id that has it)
    match_reach: dict[str, tuple[float, str]] = field(default_factory=dict)
    parent_reach: dict[str, tuple[float, str]] = field(default_factory=dict)
    #: the best match and the best parent (score, id), and the ids on their paths
    match_target: tuple[float, str | None] = (0.0, None)
    parent_target: tuple[float, str | None] = (0.0, None)
    match_path: frozenset[str] = frozenset()
    parent_path: frozenset[str] = frozenset()

    def best_match(self) -> tuple[float, str | None]:
        return self.match_target

    def best_parent(self) -> tuple[float, str | None]:
        return self.parent_target

    def priority(self, keyword_id: str) -> float:
        """How much a keyword's subtree matters to the query (for cutting candidate lists)."""
        match = self.match_reach.get(keyword_id)
        parent = self.parent_reach.get(keyword_id)
        return max(match[0] if match else 0.0, parent[0] if parent else 0.0)


class KeywordLexicon:
    """Term postings over the live keywords of one State, kept in step with it.

    Call ``sync(state)`` (under the state's lock) before scoring: the first call indexes
    every keyword; later calls re-index only the keywords written since (the state's
    journal), or everything if the state object was replaced.
    """

    def __init__(self) -> None:
        self._state: State | None = None
        self._profiles: dict[str, _Profile] = {}
        self._postings: dict[str, set[str]] = {}

    def sync(self, state: State) -> None:
        journal = state.keyword_journal
        if state is not self._state or journal is None:
            self._profiles.clear()
            self._postings.clear()
            self._state = state
            changed: Collection[str] = state.keywords
        else:
            changed = dict.fromkeys(journal)
        state.keyword_journal = []
        # (a profile per keyword, no cycles among them: no collection need walk the heap meanwhile)
        with collector_paused() if len(changed) >= _MANY else contextlib.nullcontext():
            for kid in changed:
                self._reindex(state, kid)

    def _reindex(self, state: State, kid: str) -> None:
        old = self._profiles.pop(kid, None)
        if old is not None:
            for term in old.all_terms:
                holders = self._postings[term]
                holders.discard(kid)
                if not holders:
                    del self._postings[term]
        keyword = state.keywords.get(kid)
        if keyword is None or keyword.deleted or kid == ROOT_ID:
            return
        profile = _profile(keyword)
        self._profiles[kid] = profile
        for term in profile.all_terms:
            self._postings.setdefault(term, set()).add(kid)

    def __len__(self) -> int:
        return len(self._profiles)

    def score(self, state: State, query: str, description: str = "", exclude: str | None = None,
              within: set[str] | None = None) -> Relevance:
        """Score every keyword that shares a term with ``query`` (a name or a text) and its
        optional ``description``, except ``exclude`` and its subtree (a keyword being
        re-placed), and only those in ``within`` when given (a scoped search). Call after
        ``sync(state)``, under the same lock."""
        asked = _Query(terms(query), terms(description), self._postings, len(self._profiles) + 1)
        touched = asked.touched()
        if exclude is not None:
            touched.difference_update(state.subtree(exclude))
        if within is not None:
            touched.intersection_update(within)
        relevance = Relevance()
        if not touched:
            return relevance
        similar: dict[str, float] = {}
        for kid in touched:
            match, genus, similar[kid] = asked.judge(self._profiles[kid])
            if match > 0:
                relevance.match[kid] = min(1.0, match)
            if genus > 0:
                relevance.parent[kid] = GENUS_WEIGHT * min(1.0, genus)
        _add_parents(state, relevance, similar)
        relevance.match_reach = _reach(state.keywords, relevance.match)
        relevance.parent_reach = _reach(state.keywords, relevance.parent)
        relevance.match_target = _best(relevance.match_reach, relevance.match)
        best = _best(relevance.parent_reach, relevance.parent)
        relevance.parent_target = _most_specific(state, relevance.parent, best)
        relevance.match_path = _path_set(state, relevance.match_target[1])
        relevance.parent_path = _path_set(state, relevance.parent_target[1])
        return relevance


class _Query:
    """A query's terms as ``KeywordLexicon.score`` weighs them: each term's idf (memoised),
    the rare ones that count as evidence (held by at most ``MAX_POSTINGS`` keywords), and
    the name's and the description's terms as a keyword's names are compared with them."""

    def __init__(self, name: list[str], description: list[str], postings: dict[str, set[str]], total: int) -> None:
        self._postings, self._total = postings, total
        self._idf: dict[str, float] = {}  # every term seen so far
        self.name = name
        self.name_set = frozenset(name)
        self.everything = set(name) | set(description)
        self.evidence = {term for term in self.everything
                         if (holders := postings.get(term)) and len(holders) <= MAX_POSTINGS}
        self.name_weight = sum(map(self.idf, self.name_set))
        self.first_position: dict[str, int] = {}
        for position, term in enumerate(description):
            self.first_position.setdefault(term, position)
        # "like sushi", "near Tokyo": a word right after a comparison is not the genus.
        compared = {description[i + 1] for i, term in enumerate(description[:-1]) if term in COMPARISONS}
        self.genus_terms = frozenset(description) - compared
        self.weight_all = sum(map(self.idf, self.everything))
        self.norm = math.sqrt(sum(self.idf(t) ** 2 for t in self.everything)) or 1.0
        self.long = len(name) > 4

    def idf(self, term: str) -> float:
        value = self._idf.get(term)
        if value is None:
            holders = self._postings.get(term)
            value = self._idf[term] = math.log(self._total / ((len(holders) if holders else 0) + 0.5)) + 0.1
        return value

    def weight(self, words: Iterable[str]) -> float:
        """The idf of the evidence among ``words``."""
        return sum(self.idf(word) for word in words if word in self.evidence)

    def touched(self) -> set[str]:
        """The keywords holding a term of the evidence."""
        found: set[str] = set()
        for term in self.everything:
            if term in self.evidence:
                found.update(self._postings[term])
        return found

    def judge(self, profile: _Profile) -> tuple[float, float, float]:
        """How well a keyword's ``profile`` matches the query as its name (its best name, the
        names the query contains, its description), as its genus (the head of its name, a
        name in the description's words, early), and how similar its terms are overall."""
        best_name = containment = genus = 0.0
        for ordered, name in zip(profile.names, profile.name_sets, strict=True):
            own = sum(self.idf(word) for word in name)
            shared = self.weight(name & self.name_set)
            if shared:
                best_name = max(best_name, 2 * shared / (own + self.name_weight))
                if len(ordered) < len(self.name) and tuple(self.name[-len(ordered):]) == ordered:
                    genus = max(genus, 0.9)  # the head of the name: "sea bass" is a kind of "bass"
            in_query = self.weight(name & self.everything)
            if in_query:
                containment = max(containment, in_query / own)
            in_desc = name & self.genus_terms
            if in_desc:
                position = min(self.first_position[word] for word in in_desc)
                cover = self.weight(in_desc) / own
                genus = max(genus, cover * cover / (1.0 + 0.12 * position))
        topic_weight = sum(self.idf(t) ** 2 for t in profile.all_terms & self.evidence)
        own_norm = math.sqrt(sum(self.idf(t) ** 2 for t in profile.all_terms)) or 1.0
        desc_cover = self.weight(profile.description & self.everything) / self.weight_all if self.weight_all else 0.0
        match = max(best_name, 0.8 * containment if self.long else 0.0, 0.5 * desc_cover)
        return match, genus, topic_weight / (self.norm * own_norm)


def _add_parents(state: State, relevance: Relevance, similar: dict[str, float]) -> None:
    """Parent evidence from siblings: a keyword whose children resemble the query is a likely
    parent (the mean of its three most similar children); then a keyword's own similarity adds
    to its evidence, less for one with no children (a category less often)."""
    keywords = state.keywords
    by_parent: dict[str, list[float]] = {}
    for kid, sim in similar.items():
        parent_id = keywords[kid].parent_id
        if parent_id is not None and sim > 0:
            by_parent.setdefault(parent_id, []).append(sim)
    for parent_id, sims in by_parent.items():
        sims.sort(reverse=True)
        sibling = sum(sims[:3]) / 3
        relevance.parent[parent_id] = relevance.parent.get(parent_id, 0.0) + SIBLING_WEIGHT * min(1.0, 2 * sibling)
    relevance.parent.pop(ROOT_ID, None)
    # A keyword that merely resembles the query is more likely its sibling than its
    # parent: its own similarity only adds to evidence of the two kinds above.
    children = state.children
    for kid in relevance.parent:
        score = relevance.parent[kid] + TOPIC_WEIGHT * similar.get(kid, 0.0)
        relevance.parent[kid] = score if children.get(kid) else LEAF_PARENT_FACTOR * score


def _path_set(state: State, kid: str | None) -> frozenset[str]:
    return frozenset(state.ancestry(kid)) if kid is not None else frozenset()


def _most_specific(
    state: State, scores: dict[str, float], best: tuple[float, str | None]
) -> tuple[float, str | None]:
    """The deepest descendant of the best parent that scores nearly as well (at least
    ``SPECIFIC_RATIO`` of it) is the better parent: "a systems programming language" goes
    under Languages, not Programming. The best parent itself when there is none."""
    top_score, top = best
    if top is None:
        return best
    keywords = state.keywords
    chosen, chosen_rank = best, (keywords[top].level, top_score)
    for kid, score in scores.items():
        if kid == top or score < SPECIFIC_RATIO * top_score:
            continue
        rank = (keywords[kid].level, score)
        if rank > chosen_rank and state.is_descendant(kid, top):
            chosen, chosen_rank = (score, kid), rank
    return chosen


def _best(reach: dict[str, tuple[float, str]], scores: dict[str, float]) -> tuple[float, str | None]:
    top = reach.get(ROOT_ID)  # every scored keyword is under the root
    return (top[0], top[1]) if top is not None and top[1] in scores else (0.0, None)


def _reach(keywords: dict[str, Keyword], scores: dict[str, float]) -> dict[str, tuple[float, str]]:
    """Each scored keyword's score carried up to every ancestor (best score per subtree)."""
    reach: dict[str, tuple[float, str]] = {}
    # Best first (ties broken by id, so the result does not depend on dict order).
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:REACH_TOP]
    for kid, score in ranked:  # best first, so a node keeps the first (best) score it gets
        node: str | None = kid
        while node is not None and node not in reach:
            reach[node] = (score, kid)
            node = keywords[node].parent_id
    return reach
