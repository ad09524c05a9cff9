"""Small talk: whether a message says nothing worth remembering.

:func:`small_talk` is the one judgement both sides use: the memory layer extracts no memory
from such a message (``kwtree.memory.extract``) and marks its archived turn
(``metadata["small_talk"]``, ``kwtree.memory.commit``), and retrieval may rank such turns below
facts. It is conservative: a message is small talk only when EVERY part of it is — a
greeting, thanks, a pleasantry, an acknowledgement, or a client command such as ``/clear`` —
so "Hi! I just moved to Denver" is not (the second sentence states a fact), while "Nice to meet
you, Priya! How can I help?" is. A part is a sentence (or a comma-separated piece of one);
each part must be one of the phrases of :data:`PHRASES`, optionally with a name spoken to the
listener ("Thanks, Priya!") and a few filler words ("so much", "again", "today").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["MAX_SMALL_TALK_CHARS", "PHRASES", "small_talk"]

#: The phrases that are small talk, by reason. Matched whole (case-insensitive, after the
#: fillers of ``_FILLER`` and a trailing name are taken off), so "thanks for the recipe" is not one.
PHRASES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "greeting": ("hi", "hello", "hey", "hiya", "howdy", "yo", "greetings", "hi there", "hello there", "hey there",
                 "good morning", "good afternoon", "good evening", "morning", "evening", "welcome", "welcome back",
                 "what's up", "whats up", "sup", "long time no see"),
    "thanks": ("thanks", "thank you", "thx", "ty", "tysm", "many thanks", "cheers", "much appreciated",
               "appreciate it", "i appreciate it", "thanks for your help", "thank you for your help",
               "thanks for the help", "thank you for the help", "thanks for that", "thank you for that",
               "thanks for everything", "that helps", "that helped", "that's helpful", "very helpful"),
    "pleasantry": ("nice to meet you", "pleased to meet you", "great to meet you", "good to meet you",
                   "nice to see you", "good to see you", "how are you", "how are you doing", "how's it going",
                   "hows it going", "how have you been", "how can i help", "how can i help you",
                   "how may i help", "how may i help you", "what can i do for you", "how can i assist you",
                   "is there anything else", "anything else", "let me know if you need anything",
                   "you're welcome", "youre welcome", "no problem", "no worries", "my pleasure", "anytime",
                   "glad to help", "happy to help", "glad i could help", "bye", "goodbye", "bye bye", "see you",
                   "see you later", "see you soon", "see you tomorrow", "see ya", "talk soon", "talk later",
                   "take care", "have a nice day",
                   "have a great day", "have a good day", "have a good one", "good night", "night",
                   "i'm good", "i'm fine", "i'm well", "i'm doing well", "i'm doing good", "i'm doing great",
                   "i'm great", "not bad", "all good", "same here", "you too", "and you"),
    "acknowledgement": ("ok", "okay", "k", "kk", "got it", "gotcha", "sure", "sure thing", "great", "cool",
                        "awesome", "perfect", "nice", "sounds good", "sounds great", "noted", "understood",
                        "will do", "of course", "absolutely", "alright", "all right", "yes", "yeah", "yep", "yup",
                        "no", "nope", "right", "makes sense", "that makes sense", "lol", "haha", "hahaha", "wow",
                        "oh", "ah", "i see", "fair enough", "done", "agreed", "exactly", "indeed", "hmm"),
})
#: Words around a phrase that do not make it say more: "thanks so much", "hi again".
_FILLER = re.compile(r"\b(?:so much|very much|a lot|a bunch|again|too|today|then|there|all|guys|folks|everyone|"
                     r"mate|buddy|friend|dear|really|very|so|just|and|but)\b", re.IGNORECASE)
#: A name spoken to the listener after the phrase ("Thanks, Priya", "hi Marco"): one or two words.
_NAME = re.compile(r"^(?P<phrase>.*?)\s*,?\s+(?P<name>[A-Z][\w'-]*(?:\s[A-Z][\w'-]*)?)$")
#: A message that is only a client command: "/clear", "/compact keep the plan" (at most a few
#: words after the command), or Claude Code's wrappers of one.
_SLASH_COMMAND = re.compile(r"^/[a-z][\w:-]*(?:\s+\S+){0,6}$", re.IGNORECASE)
_COMMAND_WRAPPER = re.compile(r"<(?P<tag>command-name|command-message|command-args|local-command-stdout|"
                              r"local-command-stderr)>.*?</(?P=tag)>", re.DOTALL)
_PARTS = re.compile(r"[.!?;\n]+|,\s*|\s+-\s+|[\u2014\u2013]")
_PUNCTUATION = re.compile(r"[^\w\s']")
#: The longest message judged (longer text always says something).
MAX_SMALL_TALK_CHARS = 200

_REASONS = {" ".join(phrase.split()): reason for reason, phrases in PHRASES.items() for phrase in phrases}


def small_talk(text: str) -> str | None:
    """Why ``text`` is small talk — "client command", "greeting", "thanks", "pleasantry" or
    "acknowledgement" (the reason of its first part) — or None when it is not: when any part
    of it is something else, when it is empty, or longer than MAX_SMALL_TALK_CHARS.
    Never raises for a string."""
    stripped = text.strip()
    if not stripped:
        return None
    if _SLASH_COMMAND.match(stripped) or (_COMMAND_WRAPPER.search(stripped)
                                          and not _COMMAND_WRAPPER.sub("", stripped).strip()):
        return "client command"
    if len(stripped) > MAX_SMALL_TALK_CHARS:
        return None
    reasons = [_reason(part) for part in _PARTS.split(stripped.replace("\u2019", "'")) if part.strip()]
    said = [reason for reason in reasons if reason != _VOCATIVE]
    if not said or any(reason is None for reason in said):
        return None
    return said[0]


#: What ``_reason`` says of a part that is only a name spoken to the listener ("Nice to meet
#: you, Priya!"): neither small talk by itself nor a statement.
_VOCATIVE = "vocative"
_ONLY_NAME = re.compile(r"^(?!I\b|I')[A-Z][\w'-]*(?:\s[A-Z][\w'-]*)?$")
#: The most words of one phrase of PHRASES.
_LONGEST = max(len(phrase.split()) for phrase in _REASONS)


def _reason(part: str) -> str | None:
    """The reason of one part — phrases of PHRASES one after another ("ok thanks"), with
    fillers and a name spoken to the listener — ``_VOCATIVE`` for a lone name, or None."""
    words = " ".join(_PUNCTUATION.sub(" ", part).split())
    named = _NAME.match(words)
    for said in (words, named["phrase"] if named is not None else None):
        if said is not None and (found := _phrases(said.lower().split()) or _phrases(_plain(said).split())):
            return found
    return _VOCATIVE if _ONLY_NAME.match(words) else None


def _phrases(words: list[str]) -> str | None:
    """The reason of the first phrase when ``words`` are phrases of PHRASES one after another
    (longest first), else None."""
    if not words:
        return None
    for size in range(min(_LONGEST, len(words)), 0, -1):
        reason = _REASONS.get(" ".join(words[:size]))
        if reason is not None and (size == len(words) or _phrases(words[size:]) is not None):
            return reason
    return None


def _plain(words: str) -> str:
    return " ".join(_FILLER.sub(" ", words.lower()).split())
