"""Keyword abstracts as keyword versions: the reserved metadata key, the staleness digest and
the decider that writes built abstracts.

A keyword's abstract (L0, one or two sentences) and overview (L1, a paragraph) live in its
metadata under ONE reserved key, ``ABSTRACT_KEY``, as ``{"abstract", "overview", "of", "by",
"infos", "op"}``: ``of`` is ``subtree_digest`` of the subtree it summarises, ``by`` what wrote
it (``"extractive"`` or ``"llm"``), ``infos`` how many memories it read, ``op`` the operation
that wrote it. Writing one is writing the next version of the keyword (operation kind
``"abstract"``): it is in the log, in ``history()``, and ``undo`` restores the previous one;
the log format does not change.

Why the metadata and not a new entity kind: a new kind would change the log format (every
reader, replay, export, verify and compaction would learn it) for what is one more versioned
field of a keyword; a keyword version already carries a before-image for undo.

User metadata is never clobbered: the decider writes ``{**current metadata, ABSTRACT_KEY:
...}`` on the state it commits on. User writes may not set the key (``check_user_metadata``):
``create_keyword`` and ``batch_create_keywords`` refuse it, ``update_keyword`` accepts it only
unchanged (a read-modify-write round trip) and keeps the stored one when a patch omits it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError
from kwtree.memory_schema import (
    ABSTRACT_BY,
    ABSTRACT_DIGEST,
    ABSTRACT_INFOS,
    ABSTRACT_KEY,
    ABSTRACT_OP,
    ABSTRACT_OVERVIEW,
    ABSTRACT_TEXT,
)
from kwtree.models import ROOT_ID, Change, Keyword
from kwtree.validate import clean_metadata
from kwtree.writes import Stamp

__all__ = [
    "ABSTRACT_KEY", "ABSTRACT_KIND", "Built", "check_user_metadata", "holds_memories", "quotes", "stored_abstract",
    "subtree_digest", "write_abstracts",
]

#: The kind of the operation that writes abstracts.
ABSTRACT_KIND = "abstract"
#: ``quotes``: a text at least this long found in an abstract is quoted by it (shorter ones,
#: "tea", occur inside unrelated words), and so is an abstract's sentence at least this long
#: found in a text (the extractive summariser copies whole sentences).
_QUOTED_TEXT = 4
_QUOTED_SENTENCE = 16
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclasses.dataclass(frozen=True, slots=True)
class Built:
    """One abstract ready to write: for ``keyword_id``, summarising the subtree whose digest
    was ``of`` when its memories were read."""

    keyword_id: str
    abstract: str
    overview: str
    of: str
    by: str
    infos: int


def stored_abstract(keyword: Keyword) -> Mapping[str, Any] | None:
    """The abstract stored on ``keyword`` (the reserved key's value), None without one."""
    value = keyword.metadata.get(ABSTRACT_KEY)
    return value if isinstance(value, Mapping) else None


def quotes(stored: Mapping[str, Any], texts: Iterable[str]) -> bool:
    """True when the abstract and overview ``stored`` may hold something of ``texts``: one of
    them appears in it, or one of its sentences appears in one of them. ``forget`` drops such
    abstracts; an LLM's paraphrase escapes this test, which is why forget also drops the
    abstracts of every keyword above an erased memory."""
    written = " ".join(str(stored.get(key, "")) for key in (ABSTRACT_TEXT, ABSTRACT_OVERVIEW))
    sentences = [part for part in _SENTENCE_END.split(written) if len(part) >= _QUOTED_SENTENCE]
    return any((len(text) >= _QUOTED_TEXT and text in written) or any(part in text for part in sentences)
               for text in texts)


def holds_memories(state: State, keyword_id: str) -> bool:
    """True for a live keyword other than the root with at least one live info linked to it:
    the keywords that get an abstract."""
    if keyword_id == ROOT_ID or state.live_keyword(keyword_id) is None:
        return False
    return any(state.live_info(iid) is not None for iid in state.infos_by_keyword.get(keyword_id, ()))


def subtree_digest(state: State, keyword_id: str) -> str:
    """A digest of which memories the subtree of ``keyword_id`` holds and which version of
    each: the sorted ``(info id, version, time of its last write)`` of the live infos linked to
    its live keywords. An info added, edited, unlinked, deleted or moved in or out (with its
    keyword) changes it; writing an abstract (a keyword row) does not, nor does an export and
    import (which keep versions and times, not op ids). It hashes ids, never texts: O(infos)."""
    found: set[str] = set()
    for kid in state.subtree(keyword_id):
        for iid in state.infos_by_keyword.get(kid, ()):
            info = state.live_info(iid)
            if info is not None:
                found.add(f"{iid}:{info.version}:{info.updated_at!r}")
    return hashlib.blake2b("\n".join(sorted(found)).encode(), digest_size=12).hexdigest()


def check_user_metadata(metadata: Mapping[str, Any], current: Keyword | None = None) -> Mapping[str, Any]:
    """``metadata`` a user writes on a keyword, with the reserved key handled: refused when
    ``current`` is None (a new keyword) or when it differs from ``current``'s; otherwise
    ``current``'s stored abstract is kept."""
    stored = None if current is None else current.metadata.get(ABSTRACT_KEY)
    given = metadata.get(ABSTRACT_KEY)
    if ABSTRACT_KEY in metadata and (stored is None or given != stored):
        raise InvalidInputError(
            f"metadata key {ABSTRACT_KEY!r} is reserved for the keyword's abstract (written by tree.abstracts()); "
            f"remove it from the metadata you write")
    if stored is None or ABSTRACT_KEY in metadata:
        return metadata
    return clean_metadata({**metadata, ABSTRACT_KEY: stored})


def write_abstracts(state: State, stamp: Stamp, built: Sequence[Built]) -> list[Change]:
    """The next version of each keyword of ``built`` that is still live, its metadata the
    current one plus the abstract (a keyword deleted meanwhile is skipped)."""
    changes: list[Change] = []
    for item in built:
        keyword = state.live_keyword(item.keyword_id)
        if keyword is None or keyword.id == ROOT_ID:
            continue
        value = {ABSTRACT_TEXT: item.abstract, ABSTRACT_OVERVIEW: item.overview, ABSTRACT_DIGEST: item.of,
                 ABSTRACT_BY: item.by, ABSTRACT_INFOS: item.infos, ABSTRACT_OP: stamp.op_id}
        metadata = clean_metadata({**keyword.metadata, ABSTRACT_KEY: value})
        new = dataclasses.replace(keyword, version=keyword.version + 1, updated_at=stamp.timestamp,
                                  op_id=stamp.op_id, metadata=metadata)
        changes.append(Change(new, keyword))
    return changes
