"""Corrections: a message that takes back something its speaker said earlier in the session
("Correction on the date: it's Thursday the 7th, not Tuesday the 5th", "oh scratch that, the
lease starts on the 1st of April", "wait no sorry, march 21, I mixed it up").

A message corrects when it holds a marker (:data:`MARKER`: "correction", "scratch that",
"wait, no", "I mixed it up", "I got it wrong", "my mistake", "I meant", "actually, it's ...")
and an earlier message of the same speaker in the session holds a sentence it corrects: the one
holding the value it names as wrong ("not Tuesday the 5th"), else the one sharing the most of
its terms (at least :data:`MIN_SHARED_TERMS`), the latest on a tie. Without such a sentence it
corrects nothing said here, and is read as any other message. The commit
(``kwtree.memory.commit``) marks the memories holding the corrected sentence, and its turn when
that sentence is most of it, superseded by the correction's memory.

Imports the ground floor, ``kwtree.memory.candidates``, ``kwtree.memory.reading`` and
``kwtree.memory.statements`` only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kwtree.memory.candidates import Message
from kwtree.memory.reading import speaker_of, text_of
from kwtree.memory.statements import sentences
from kwtree.normalize import terms

__all__ = ["MARKER", "MIN_SHARED_TERMS", "Correction", "correction"]

#: What a speaker says to take back something said before, leading a sentence (after at most
#: three interjections: "oh", "wait", "sorry" ...): "I need a correction to my essay", "I
#: meant to ask" and the filler "I mean, who doesn't love it" take nothing back. "actually"
#: alone is an opinion's opener ("actually, I love it"): it corrects only as "actually, it's /
#: that's / the ... is".
MARKER = re.compile(
    r"(?:^|[.!?;:\n]\s*|\s[-\u2013\u2014]\s)\s*(?:(?:oh|wait|sorry|oops|ok|okay|hmm|um|no|ah|and|so|yes|pls|please)"
    r"[,!.]*\s+){0,3}"
    r"(?:correction|scratch that|wait,? no|no,? wait|i mixed (?:it|them|that|those) up|i got (?:it|that) wrong|"
    r"my mistake|my bad|i meant(?! to\b)|"
    r"actually,? (?:it's|it is|it was|its|that's|that is|they're|he's|she's|the \w+ (?:is|was|starts|started)))"
    r"(?![\w'])", re.IGNORECASE)
#: "not X" names the value taken back: X is the clause's next few words.
_NOT_THAT = re.compile(r"(?<![\w'])not (?P<was>[^,.;:!?]{2,40})", re.IGNORECASE)
#: A corrected sentence shares at least this many terms with the correction (or holds its "not X").
MIN_SHARED_TERMS = 2


@dataclass(frozen=True, slots=True)
class Correction:
    """Message ``index`` corrects sentence ``sentence`` of the earlier message ``corrected``."""

    index: int
    corrected: int
    sentence: str


def correction(messages: Sequence[Message], index: int) -> Correction | None:
    """The earlier statement message ``index`` corrects (see the module), or None."""
    text = text_of(messages[index])
    if MARKER.search(text) is None:
        return None
    speaker = speaker_of(messages[index])
    said = set(terms(MARKER.sub(" ", text)))
    named = [set(terms(match["was"])) for match in _NOT_THAT.finditer(text)]
    best: tuple[int, int, int, str] | None = None  # (names the old value, shared terms, index, sentence)
    for earlier in range(index - 1, -1, -1):
        if speaker_of(messages[earlier]) != speaker:
            continue
        for sentence in sentences(text_of(messages[earlier])):
            bag = set(terms(sentence))
            names = int(any(was and was <= bag for was in named))
            shared = len(bag & said)
            if (names or shared >= MIN_SHARED_TERMS) and (best is None or (names, shared) > best[:2]):
                best = (names, shared, earlier, sentence)
    return None if best is None else Correction(index, best[2], best[3])
