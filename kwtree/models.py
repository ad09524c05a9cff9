"""The public entities: keywords, infos, links, relations, and the operations that wrote them.

Entities are slotted dataclasses that kwtree never changes after handing them out: every
write makes a new object, so a value you hold is a consistent snapshot. Treat them as
read-only; ``metadata`` is a read-only mapping to make the intent plain. The four entity
classes are final: replay and the writes dispatch on an entity's exact type.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias, final

from kwtree.memory_schema import INFO_ABSTRACT

__all__ = [
    "DIRECTIONS",
    "DURABILITY_MODES",
    "EMPTY_METADATA",
    "FORGOTTEN_BY",
    "INFO_POLICIES",
    "NOTE",
    "PROVENANCES",
    "ROOT_ID",
    "UNKNOWN_PROVENANCE",
    "AgentOutcome",
    "Change",
    "Entity",
    "Hit",
    "Info",
    "Keyword",
    "Link",
    "LinkedKeyword",
    "Note",
    "Operation",
    "Relation",
    "RelationType",
    "SearchResult",
    "SearchStatus",
    "entity_key",
    "info_text",
    "is_forgotten",
    "least_trusted",
]

#: The metadata key of a forget tombstone: the id of the forget operation that erased the
#: entity (``kwtree.writes.forget``). Here, on the ground floor, because the caches must tell
#: a forgotten entity from a deleted one too.
FORGOTTEN_BY = "forgotten_by"
ROOT_ID = "root"
#: The shared metadata of every entity that has none (one object, not one per entity).
EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})

# The allowed values of KeywordTree's choice arguments. They live down here, beside the
# entities, so that the ``kwtree`` command can offer them without importing the facade.
#: ``durability``: "full" syncs every write to disk before returning; "none" skips the syncs.
DURABILITY_MODES = ("full", "none")
#: ``get_relations(direction=...)``: the relations starting at, ending at, or touching a keyword.
DIRECTIONS = ("out", "in", "both")
#: ``delete_keyword(info_policy=...)``: what becomes of the infos linked to deleted keywords.
INFO_POLICIES = ("reattach", "delete", "keep")
#: Who said a memory's text (``Info.provenance``), recorded when the text is written, most
#: trusted first: "system" (the agent's instructions: a system or developer message), "api"
#: (the application's own code: ``create_info``, ``batch_create_infos`` and ``update_info`` by
#: default), "user" (the person in the conversation, or a named speaker of it), "assistant"
#: (the agent, also when it writes through a memory tool), "import" (``import_json`` of an
#: export that did not say), "tool" (a tool's result: a web page, a file, a command's output)
#: and "unknown" (written before kwtree recorded provenance, or erased by ``forget``). The
#: order is a trust order only for combining: a text drawn from several sources takes the
#: last of theirs (``least_trusted``); reads filter on the values, never on the order.
PROVENANCES = ("system", "api", "user", "assistant", "import", "tool", "unknown")
#: The provenance of a row that records none (rows are written without it at this default).
UNKNOWN_PROVENANCE = "unknown"
_TRUST_RANK = {name: rank for rank, name in enumerate(PROVENANCES)}


def least_trusted(provenances: Iterable[str]) -> str:
    """The provenance of a text drawn from texts of these provenances: the last of them in
    PROVENANCES' order (a memory merged from what the user said and what a tool returned is
    the tool's, so a filter for "user" never lets the tool's words through). "unknown" when
    there are none; a value outside PROVENANCES counts as "unknown"."""
    found = [name if name in _TRUST_RANK else UNKNOWN_PROVENANCE for name in provenances]
    return max(found, key=_TRUST_RANK.__getitem__, default=UNKNOWN_PROVENANCE)


class RelationType(str, enum.Enum):
    """How an info relates to a keyword it is linked to."""

    PRIMARY = "primary"
    RELATED = "related"
    EXAMPLE = "example"
    SOURCE = "source"


@dataclass(frozen=True, slots=True)
class AgentOutcome:
    """What the agent did for the write that returned it: ``create_keyword`` placing a keyword
    (``intent`` "suggest_parent") or ``create_info(auto_link=True)`` linking an info
    (``intent`` "search").

    ``keyword_ids`` are the parent the keyword went under, or the keywords the agent linked
    the info to (empty: none). ``fallback`` is None when the navigator decided, else why the
    walk was cut short: ``agent_failure`` (the LLM client raised or answered something that
    is not a decision), ``invalid_jump`` or ``agent_timeout``, with ``error`` saying what
    went wrong. ``status`` is how the walk ended and ``summary`` says it all in one sentence.
    """

    intent: str
    navigator: str
    status: str
    keyword_ids: tuple[str, ...]
    fallback: str | None
    error: str
    summary: str

    @property
    def fell_back(self) -> bool:
        """True when the result is a fallback, not the navigator's decision."""
        return self.fallback is not None


@final
@dataclass(slots=True, eq=True)
class Keyword:
    """One node of the tree. ``level`` (root = 0) is derived at replay, never stored.

    ``op_id`` is the operation that wrote this version; ``version`` counts the writes.
    ``agent`` is set only on the keyword ``create_keyword`` returns when the agent placed it
    (None everywhere else; never stored, never compared).
    """

    id: str
    name: str
    aliases: tuple[str, ...]
    parent_id: str | None
    description: str
    metadata: Mapping[str, Any]
    version: int
    created_at: float
    updated_at: float
    deleted: bool
    op_id: str
    level: int = 0
    agent: AgentOutcome | None = field(default=None, compare=False, repr=False)


@final
@dataclass(slots=True, eq=True)
class Info:
    """A text memory, linked to any number of keywords. ``provenance`` says who said its
    text (one of PROVENANCES), recorded when the text was written. ``agent`` is set only on
    the info ``create_info(auto_link=True)`` returns (None everywhere else; never stored,
    never compared)."""

    id: str
    content: str
    source: str
    metadata: Mapping[str, Any]
    version: int
    created_at: float
    updated_at: float
    deleted: bool
    op_id: str
    provenance: str = UNKNOWN_PROVENANCE
    agent: AgentOutcome | None = field(default=None, compare=False, repr=False)


def info_text(info: Info) -> str:
    """What search reads of an info (the full-text index, the relevance floor): its content,
    and after it its abstract (``INFO_ABSTRACT`` metadata) when that is a string the content
    does not already hold (read twice, its words would count twice)."""
    abstract = info.metadata.get(INFO_ABSTRACT)
    if not isinstance(abstract, str) or not abstract.strip() or abstract.strip() in info.content:
        return info.content
    return f"{info.content}\n{abstract}"


def is_forgotten(entity: Info | Keyword) -> bool:
    """True when this version is a forget tombstone (deleted, its text erased)."""
    return entity.deleted and FORGOTTEN_BY in entity.metadata


@final
@dataclass(slots=True, eq=True)
class Link:
    """Info ↔ keyword. At most one link exists per (info, keyword) pair."""

    info_id: str
    keyword_id: str
    relation: RelationType
    created_by: str
    created_at: float
    deleted: bool
    version: int
    op_id: str


@final
@dataclass(slots=True, eq=True)
class Relation:
    """A directed, typed edge between two keywords; one per (from, to, type)."""

    from_id: str
    to_id: str
    type: str
    weight: float
    reason: str
    created_at: float
    deleted: bool
    version: int
    op_id: str


Entity: TypeAlias = Keyword | Info | Link | Relation


@dataclass(frozen=True, slots=True)
class Note:
    """The one row of an operation that records something about the log itself and changes no
    entity (format 3): a merge of two git branches (kind ``merge``) or a re-chaining of the
    log by forget's erasure or a repair (kind ``rechain``). What it records is the operation's
    audit; replay applies nothing for it. docs/log-format.md, "The hash chain"."""


#: The row of every note (it holds nothing of its own: the operation's audit says it all).
NOTE = Note()


def entity_key(entity: Entity) -> str:
    """The string that names ``entity`` in operations and ``history(entity_id=...)``.

    Keywords and infos are named by their id, a link by ``"<info_id>/<keyword_id>"``
    and a relation by ``"<from_id>/<to_id>/<type>"``.
    """
    if type(entity) is Keyword or type(entity) is Info:
        return entity.id
    if type(entity) is Link:
        return f"{entity.info_id}/{entity.keyword_id}"
    return f"{entity.from_id}/{entity.to_id}/{entity.type}"


@dataclass(slots=True)
class Change:
    """One row of an operation: the entity's new state and its state before (None if new)."""

    after: Entity
    before: Entity | None

    @property
    def key(self) -> str:
        return entity_key(self.after)


@dataclass(slots=True)
class Operation:
    """One committed (or about to be committed) operation of the event log.

    ``kind`` names the API call (``create_keyword``, ``merge_keywords``, ``undo`` ...),
    ``timestamp`` is in epoch seconds and ``audit`` holds agent decisions when there were any.
    """

    op_id: str
    kind: str
    actor: str
    timestamp: float
    changes: tuple[Change, ...]
    audit: Mapping[str, Any] | None = None

    @property
    def entity_ids(self) -> tuple[str, ...]:
        """The keys of every entity this operation wrote, in write order."""
        return tuple(entity_key(c.after) for c in self.changes)


class SearchStatus(str, enum.Enum):
    """How a search ended."""

    MATCHED = "matched"
    AMBIGUOUS = "ambiguous"
    NOT_FOUND = "not_found"


@dataclass(slots=True)
class SearchResult:
    """The answer of ``search``.

    MATCHED: ``node`` with its ``path`` (root first) and its first ``infos``. AMBIGUOUS:
    ``candidates``. NOT_FOUND: ``reason`` (``exact_miss_llm_disabled``, ``agent_failure``,
    ``agent_timeout``, ``invalid_jump`` or the navigator's words) and, when the agent walked
    the tree, ``suggested_parent_id`` and ``suggested_name`` for creating it. ``rounds`` and
    ``trace`` show the agent's work (empty for an exact hit).
    """

    status: SearchStatus
    node: Keyword | None = None
    path: list[Keyword] = field(default_factory=list)
    infos: list[Info] = field(default_factory=list)
    candidates: list[Keyword] = field(default_factory=list)
    suggested_parent_id: str | None = None
    suggested_name: str | None = None
    reason: str = ""
    rounds: int = 0
    trace: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class LinkedKeyword:
    """A keyword an info is linked to, with the link's relation and the keyword's path."""

    keyword: Keyword
    relation: RelationType
    path: list[Keyword]


@dataclass(slots=True)
class Hit:
    """One result of ``recall``: the info, its final score and the parts of that score.

    ``bm25`` is the full-text score and ``vector`` the cosine similarity (None when that
    retriever did not return the info); ``text_rank`` and ``vector_rank`` their ranks (1 =
    best); ``info_score`` the fused score of the two plus ``thread``, the part it gains from
    its neighbours in its thread (the infos linked just before and after it to its most
    specific keyword); ``keyword_score`` the tree's part (the best score among the keywords
    it is linked to that the query names or matches); and
    ``score = a * info_score + (1 - a) * keyword_score``. ``signpost`` is the score of the
    keyword abstract that matched the query above the info (0.0: none); when it is higher than
    the info's own score, ``score = alpha * that + (1 - alpha) * signpost`` (alpha is
    ``RecallWeights.signpost_alpha``). ``score`` ranks: it says how an
    info compares with the others, not whether it is relevant at all. ``relevance`` (in
    [0, 1]) does: the share of the query's terms, weighted by how rare they are, that the
    info, the keywords it is linked to and its thread neighbours contain (1.0 when the query
    has no term to judge by); ``recall(min_score=)`` is a floor on it (docs/retrieval.md).
    """

    info: Info
    score: float
    info_score: float
    keyword_score: float
    bm25: float | None = None
    vector: float | None = None
    text_rank: int | None = None
    vector_rank: int | None = None
    thread: float = 0.0
    keywords: list[LinkedKeyword] = field(default_factory=list)
    relevance: float = 1.0
    signpost: float = 0.0
