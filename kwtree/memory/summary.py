"""The structured summary of an archived session, extractive (no LLM): topics, decisions and
open questions, each a short list of what the turns and the candidates literally hold.

- topics: the routing keys of the candidates, then the words (4 letters or more, not stop
  words) said at least twice in the new turns, most frequent first;
- decisions: sentences that say a decision or a commitment ("decided", "let's", "I'll",
  "we will", "agreed", "going to", "plan to");
- open questions: the questions of the session's last message (nothing after it answers them).

An incremental commit adds to the lists of the previous summary (each capped); it never
claims more than the text says: an empty list is shown as "none found".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kwtree.memory.candidates import Candidate, Message
from kwtree.memory_schema import SUMMARY_DECISIONS, SUMMARY_OPEN_QUESTIONS, SUMMARY_TOPICS
from kwtree.normalize import STOPWORDS, tokenize

__all__ = ["MAX_ITEMS", "summarise", "summary_text"]

#: Each list keeps at most this many entries, of at most 200 characters.
MAX_ITEMS = 8
_CHARS = 200
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_DECISION = re.compile(r"\b(decided|decide to|let's|let us|i'll|i will|we'll|we will|agreed|going to|plan to)\b",
                       re.I)


def _add(kept: list[str], new: Sequence[str]) -> list[str]:
    seen = {item.casefold() for item in kept}
    for item in new:
        item = item.strip()[:_CHARS]
        if item and item.casefold() not in seen and len(kept) < MAX_ITEMS:
            kept.append(item)
            seen.add(item.casefold())
    return kept


def summarise(messages: Sequence[Message], first_new: int, candidates: Sequence[Candidate],
              previous: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """The summary after the messages from ``first_new`` on, added to ``previous`` (the
    metadata of the summary info of an earlier commit, or None)."""
    old = previous or {}
    topics = _add(list(old.get(SUMMARY_TOPICS, ())), [c.key for c in candidates])
    decisions = list(old.get(SUMMARY_DECISIONS, ()))
    words: Counter[str] = Counter()
    for message in messages[first_new:]:
        text = message["content"]
        words.update(word for word in tokenize(text) if len(word) >= 4 and word.isalpha() and word not in STOPWORDS)
        _add(decisions, [s for s in _SENTENCE.findall(text) if _DECISION.search(s)])
    _add(topics, [word for word, count in words.most_common() if count >= 2])
    questions: list[str] = []
    if len(messages) > first_new:
        _add(questions, [s for s in _SENTENCE.findall(messages[-1]["content"]) if s.strip().endswith("?")])
    return {SUMMARY_TOPICS: topics, SUMMARY_DECISIONS: decisions, SUMMARY_OPEN_QUESTIONS: questions}


def summary_text(session_id: str, summary: Mapping[str, Sequence[str]]) -> str:
    """The summary info's content."""
    def listed(items: Sequence[str]) -> str:
        return "; ".join(items) if items else "none found"

    return (f"Session {session_id}.\nTopics: {listed(summary[SUMMARY_TOPICS])}.\n"
            f"Decisions: {listed(summary[SUMMARY_DECISIONS])}\n"
            f"Open questions: {listed(summary[SUMMARY_OPEN_QUESTIONS])}")
