"""The write policy of each memory category, as data.

Each category names the branch of its scope it lives under, which keyword holds its memories,
and how a new memory meets the ones already there. ``commit_session`` reads nothing but this
table: adding a category is adding a row (``CommitOptions(policies={**POLICIES, "goals":
Policy(...)})`` for one call, or a row here for everyone).

- profile: held by the branch itself (one keyword per scope); ``supersede``: a fact with the
  same ``facts["attribute"]`` and another value updates the old info (its old version stays in
  ``history()``); a fact without an attribute is aggregated.
- preferences, entities, patterns: a keyword per routing key; ``aggregate``: new facts are new
  infos, near-duplicates merged into the one they extend, duplicates skipped.
- events, cases: a keyword per routing key; ``append``: every new fact a new info, never merged
  or overwritten; only an exact repeat is skipped.
- skills: a keyword per tool; ``accumulate``: call / success / failure / duration statistics in
  the keyword's metadata, and one guide info that new lessons merge into.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kwtree.memory_schema import SESSIONS_BRANCH

__all__ = ["HOLDERS", "POLICIES", "WRITES", "Policy"]

#: Which keyword holds a category's memories: the branch itself, or one keyword per routing key.
HOLDERS = ("branch", "key")
#: How a new memory meets the existing ones (see the module's table).
WRITES = ("supersede", "aggregate", "append", "accumulate")


@dataclass(frozen=True, slots=True)
class Policy:
    """Where a category's memories go and how they are written: under the scope's branch
    named ``branch``, held by the branch keyword itself (``holder="branch"``) or by a keyword
    per routing key (``"key"``), written by one of WRITES."""

    branch: str
    holder: str
    write: str

    def __post_init__(self) -> None:
        if self.holder not in HOLDERS or self.write not in WRITES or not self.branch.strip():
            raise ValueError(f"a Policy needs a branch name, holder in {HOLDERS} and write in {WRITES}, got {self}")
        if self.branch == SESSIONS_BRANCH:
            raise ValueError(f"the branch {SESSIONS_BRANCH!r} holds the archived sessions; choose another")


#: The policy of each category of ``kwtree.memory.candidates.CATEGORIES``.
POLICIES: Mapping[str, Policy] = MappingProxyType({
    "profile": Policy("profile", "branch", "supersede"),
    "preferences": Policy("preferences", "key", "aggregate"),
    "entities": Policy("entities", "key", "aggregate"),
    "patterns": Policy("patterns", "key", "aggregate"),
    "events": Policy("events", "key", "append"),
    "cases": Policy("cases", "key", "append"),
    "skills": Policy("skills", "key", "accumulate"),
})
