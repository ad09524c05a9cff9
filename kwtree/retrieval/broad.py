"""Questions about a person as a whole, and the names a scope's owner goes by.

"What do you know about me?" shares no word with any memory: every memory of the user is an
answer, none more than another, so ranking by the query's words returns nothing (the floor
finds no term covered). ``asks_about`` reads such a question and says whom it is about
(``SELF`` for the speaker); recall then answers with the person's profile and key facts
(``KeywordTree.recall``). A question that names what it wants ("what do you know about my
diet?") is an ordinary question: only a person, the speaker or a name, is an overview.

``owner_names`` are the names of the person a scope belongs to: the last part of its path
("user:priya" -> "priya") and the names the person stated (a profile memory of attribute
``name``). Every memory of a user's scope is about its owner, so "where does Priya live?"
asked in Priya's scope is "where does she live?": the owner's name is no term a memory must
hold (``without_names``), as "I" is none in "where do I live?".

Imports the ground floor only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kwtree.normalize import normalize_name

__all__ = ["SELF", "asks_about", "owner_names", "without_names"]

#: What ``asks_about`` returns for a question about the speaker.
SELF = "self"
_SPEAKER = frozenset({"me", "myself", "us", "ourselves", "i"})
_LEAD = r"^\s*(?:(?:so|ok|okay|hey|hi|and|well|now)[,!.]?\s+)*(?:please\s+)?"
_OVERVIEW = (
    # what (else) do you know / remember / have on X; what have you learned about X
    re.compile(_LEAD + r"(?:what|anything)\s+(?:else\s+)?(?:do|did|does|have|can|could)\s+you\s+"
               r"(?:know|remember|recall|have|learn(?:ed|t)?|store[d]?|keep|kept)\s+"
               r"(?:(?:so\s+far|already)\s+)?(?:about|on|of|regarding)\s+(?P<who>[\w' .-]{1,40}?)"
               r"(?:\s+so\s+far)?\s*[?.!]*\s*$", re.IGNORECASE),
    # tell me (everything / what you know) about X; summarize what you know about X
    re.compile(_LEAD + r"(?:tell\s+me|summari[sz]e|describe)\s+(?:(?:everything|all|what\s+you\s+know|"
               r"what\s+you\s+remember)\s+)?(?:about\s+)?(?P<who>[\w' .-]{1,40}?)\s*[?.!]*\s*$", re.IGNORECASE),
    re.compile(_LEAD + r"who\s+am\s+(?P<who>i)\s*[?.!]*\s*$", re.IGNORECASE),
)


def asks_about(query: str) -> str | None:
    """Whom ``query`` asks for an overview of: ``SELF`` (the speaker: "what do you know about
    me?", "who am I?"), a name as written ("tell me about Alice"), or None for any other
    question."""
    for pattern in _OVERVIEW:
        found = pattern.match(query)
        if found is None:
            continue
        who = found["who"].strip(" .'")
        if who.lower() in _SPEAKER:
            return SELF
        words = who.split()
        if 0 < len(words) <= 3 and all(word[:1].isalpha() for word in words) and not _generic(words):
            return who
    return None


def _generic(words: list[str]) -> bool:
    """A thing, not a person: "my diet", "the project", "yourself"."""
    return words[0].lower() in {"my", "our", "the", "a", "an", "this", "that", "your", "yourself", "it", "them"}


def owner_names(scopes: Iterable[str], stated: Iterable[str]) -> frozenset[str]:
    """The normalised names of the owner of ``scopes`` (each path's last part after ":" or
    "/") and the ``stated`` names (the person's own, e.g. a profile's ``name`` value)."""
    names = {normalize_name(re.split(r"[:/]", scope)[-1]) for scope in scopes}
    names.update(normalize_name(name) for name in stated)
    return frozenset(name for name in names if name)


def without_names(query: str, names: frozenset[str]) -> str:
    """``query`` without the words (and possessives: "Priya's") that are one of ``names``;
    the query itself when nothing would be left."""
    if not names:
        return query
    kept = [word for word in query.split()
            if normalize_name(re.sub(r"(?:'s|\u2019s|')?[?.!,;:]*$", "", word)) not in names]
    return " ".join(kept) if kept else query
