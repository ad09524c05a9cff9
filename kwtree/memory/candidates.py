"""What extraction produces and what it reads: messages, candidate memories, the categories.

A message is a mapping with ``role`` and ``content`` (a string; tool calls and results may
carry other keys, kept as they are) and optionally ``ts``: when it was said, as epoch seconds
or an ISO 8601 date or datetime. A :class:`Candidate` is one memory an extractor found in
them; the write policy of its ``category`` decides where it goes (``kwtree.memory.policies``).

**The attribute contract.** A fact that holds ONE value at a time for its subject carries
``facts["attribute"]``, a name from :data:`ATTRIBUTES`, ``facts["value"]`` (the value alone:
"Denver", "product manager", "vegetarian") and ``facts["subject"]``: :data:`USER_SUBJECT` for
the user's own facts, the speaker's name for a named speaker's (LoCoMo's roles), or another
person's label ("sister", "Tom") for what the speaker says of someone else. A new candidate with
the same attribute and subject, committed into the same scope, supersedes the memory holding
the old value (``kwtree.memory.commit``); the speaker's own such facts are category
``profile``, another person's are ``entities`` (keyed by that person), so a sister's move never
replaces the user's home. A fact that may hold many values at once (allergies, pets, health
conditions, family, likes, dislikes, tools) carries no attribute: such facts are aggregated,
never superseded; ``facts["aspect"]`` (one of :data:`ASPECTS`) says what it is about.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ABOUT", "ASPECTS", "ATTRIBUTES", "CATEGORIES", "ENTITIES_KEY", "USER_SUBJECT", "Candidate",
           "ExtractContext", "Extraction", "Extractor", "Message", "PassedOver"]

#: The categories of memories, in the order a context block shows them.
CATEGORIES = ("profile", "preferences", "entities", "patterns", "events", "cases", "skills")

Message = Mapping[str, Any]
#: ``Candidate.facts[ENTITIES_KEY]``: the names a memory mentions. The commit files the memory
#: under each name's keyword of the ``entities`` category too (a link, not a second memory
#: holding the same words).
ENTITIES_KEY = "entities"

#: The single-valued attributes (``facts["attribute"]``): each holds one value at a time for
#: its subject, so a later value supersedes the earlier one.
#:
#: - ``name``: what the person is called ("Priya").
#: - ``age``: their age in years ("34").
#: - ``home``: the place they live now ("Denver"; "since moving to Lisbon" says it too).
#: - ``origin``: where they come from ("Sweden"); it does not change, but has one value.
#: - ``job``: their occupation or role ("product manager", "retired").
#: - ``employer``: the organisation they work for now ("Stripe"; "none" after "I quit my job").
#: - ``school``: the school or university they attend ("MIT").
#: - ``relationship``: their relationship status ("married", "engaged", "in a relationship",
#:   "single", "separated", "divorced"), the partner's name in ``facts["partner"]`` when said.
#: - ``diet``: the diet they follow ("vegetarian", "keto", "no longer vegan", "eats meat").
#: - ``car``: the car they drive ("Prius").
ATTRIBUTES = ("name", "age", "home", "origin", "job", "employer", "school", "relationship", "diet", "car")
#: What a multi-valued fact is about (``facts["aspect"]``; no attribute: these aggregate):
#: ``allergy``, ``health`` (a condition), ``pet``, ``family`` (children, siblings, a baby on the
#: way) and ``identity`` ("I am a runner") are profile facts, the things an agent must keep in
#: mind about the person; ``tool`` (what they use), ``like`` and ``dislike`` are preferences,
#: one keyword per topic; ``plan`` ("I'm planning to ...") is an event.
ASPECTS = ("allergy", "health", "pet", "family", "identity", "tool", "like", "dislike", "plan")
#: What an attribute or aspect covers besides its name, in plain words: a fact's abstract leads
#: with its name and them
#: ("Diet (food, eating): The user is vegetarian."), so that a question asking for the kind
#: of fact ("what can't she eat?", "does he have a pet?") finds the fact, which states only
#: its value. A description of this module's own schema, one per name, not a list of
#: phrasings.
ABOUT: dict[str, str] = {
    "age": "how old", "home": "where they live: city, town, neighbourhood, address",
    "origin": "where they are from, grew up, hometown", "job": "work, occupation, profession, role, title",
    "employer": "work, company, employer, workplace", "school": "studies, degree, university",
    "relationship": "partner, dating, married, single", "diet": "food, eating", "car": "driving, vehicle, car",
    "allergy": "food, things to avoid", "health": "medical condition", "pet": "animal, pet",
    "tool": "software, uses",
}
#: ``facts["subject"]`` of the user's own facts (role ``user``).
USER_SUBJECT = "user"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One memory found in a conversation.

    ``category`` is one of CATEGORIES; ``key`` the routing key (the topic, entity or tool the
    memory is about: one keyword per key for the aggregating categories); ``abstract`` one or
    two sentences; ``content`` the memory itself; ``confidence`` in [0, 1]; ``sources`` the
    indices (in the session's messages) it was drawn from; ``happened_at`` when the fact
    happened (epoch seconds) if known; ``facts`` extra structured fields a policy may use
    (a skill's ``outcome`` and ``duration``, a profile fact's ``attribute``, the names it
    mentions under ``ENTITIES_KEY``)."""

    category: str
    key: str
    abstract: str
    content: str
    confidence: float
    sources: tuple[int, ...]
    happened_at: float | None = None
    facts: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PassedOver:
    """A candidate an extractor found but did not return, and why: ``index`` is the message
    it came from, ``text`` its content, ``category`` and ``key`` what it would have been, and
    ``reason`` why it was passed over (a cap, folded into another candidate, small talk)."""

    index: int
    text: str
    reason: str
    category: str
    key: str


class Extraction(list[Candidate]):
    """An extractor's candidates (a plain list of them, so it satisfies :class:`Extractor`)
    that also says what the extractor passed over (``passed_over``), so a commit can report it.
    An extractor that returns a plain list passed over nothing it tells of."""

    passed_over: tuple[PassedOver, ...]

    def __init__(self, candidates: Sequence[Candidate] = (), passed_over: Sequence[PassedOver] = ()) -> None:
        super().__init__(candidates)
        self.passed_over = tuple(passed_over)


@dataclass(frozen=True, slots=True)
class ExtractContext:
    """What an extractor knows besides the messages: the index of the first message not
    seen before (earlier ones are context only: extract nothing from them), the session's
    date (epoch seconds, the anchor for "yesterday" and "last Friday") and its id."""

    session_id: str
    first_new: int
    session_time: float | None


class Extractor(Protocol):
    """Finds candidate memories in ``messages[context.first_new:]``; it may return an
    :class:`Extraction` (a list that also tells what it passed over)."""

    def __call__(self, messages: Sequence[Message], context: ExtractContext) -> list[Candidate]: ...
