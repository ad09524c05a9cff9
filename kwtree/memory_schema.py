"""The metadata schema of agent memory: every key the memory pipeline writes into the free-form
``metadata`` of keywords and infos, and every fixed value compared there, each named once.

Agent memory keeps its structure in ordinary metadata: a scope is a keyword marked with
``SCOPE_KEY``, a branch one marked with ``BRANCH_KEY``, a session one marked with ``SESSION_ID``,
a turn an info carrying ``ROLE`` and ``TURN``, and so on. The writer (``kwtree.memory.commit``),
the readers (``kwtree.memory.shelf``, recall, the hooks, ``kwtree.Memory``, the tools) and the
abstracts all spell these keys through this module, so a key is renamed, or a reader finds what
the writer wrote, in one place. The strings are the stored format: changing one changes what
existing trees hold, so they never change.

Imports nothing: it is on the ground floor, where every layer may read it.
"""

from __future__ import annotations

__all__ = [
    "ABSTRACT_BY", "ABSTRACT_DIGEST", "ABSTRACT_INFOS", "ABSTRACT_KEY", "ABSTRACT_OP", "ABSTRACT_OVERVIEW",
    "ABSTRACT_TEXT", "ASSISTANT_ROLE", "ATTRIBUTE", "BRANCH_KEY", "CALLS", "CATEGORY", "CONFIDENCE",
    "DEFAULT_SCOPE", "DIGEST", "DURATION_MEAN", "DURATION_TOTAL", "FAILURES", "GUIDE", "HAPPENED_AT",
    "INFO_ABSTRACT", "KIND", "ROLE", "ROUTING_KEY", "SCOPE_KEY", "SEEN", "SESSIONS_BRANCH", "SESSION_ID",
    "SESSION_TIME", "SMALL_TALK", "SOURCES", "SUBJECT", "SUCCESSES", "SUMMARY_DECISIONS", "SUMMARY_KIND",
    "SUMMARY_OPEN_QUESTIONS", "SUMMARY_TOPICS", "SUPERSEDED_BY", "TIMED_CALLS", "TURN", "USER_METADATA",
    "VALID_UNTIL", "VALUE",
]

# --- the scope tree: keyword metadata --------------------------------------------------------

#: Marks a keyword as a scope; holds the scope's whole path ("user:alice/run:42").
SCOPE_KEY = "scope"
#: Marks a keyword as a branch of its scope; holds the branch's name ("profile", "sessions").
BRANCH_KEY = "branch"
#: Where agent memory goes when a write names no scope (``commit_session``, the tools' remember,
#: the Claude Code hook's ``--scope``): a ``SCOPE_KEY`` value.
DEFAULT_SCOPE = "user:default"
#: The ``BRANCH_KEY`` of the branch that holds a scope's archived sessions.
SESSIONS_BRANCH = "sessions"

# --- a session: its keyword, its summary info and its turn infos ------------------------------

#: The caller's id of the session: marks the session keyword, and is on its summary, turns and memories.
SESSION_ID = "session_id"
#: On the session keyword: how many of the session's messages have been committed.
SEEN = "seen"
#: On the session keyword: the digest of those messages (``kwtree.memory.messages.digest``).
DIGEST = "digest"
#: On the session keyword: when the session took place (epoch seconds), when known.
SESSION_TIME = "session_time"
#: What sort of info this is (most infos have none); recall keeps a thread within one kind.
KIND = "kind"
#: The ``KIND`` of a session's summary info (recall ranks it below the facts it lists).
SUMMARY_KIND = "session_summary"
#: On a summary info: the session's topics, its decisions and its open questions (lists of text).
SUMMARY_TOPICS = "topics"
SUMMARY_DECISIONS = "decisions"
SUMMARY_OPEN_QUESTIONS = "open_questions"
#: On a turn info: the role of the message it archives ("user", "assistant", a speaker's role).
ROLE = "role"
#: The ``ROLE`` of a turn the assistant said (recall ranks such turns below the user's own).
ASSISTANT_ROLE = "assistant"
#: On a turn info: the index of its message in the session.
TURN = "turn"
#: On a turn info that is small talk (a greeting, thanks, a client command): why it is
#: (``kwtree.retrieval.smalltalk``). Recall ranks such turns low.
SMALL_TALK = "small_talk"

# --- a memory: the info an extracted candidate became, and the keyword holding it ------------

#: A memory's category ("profile", "events", ...); also on the keyword holding a routing key.
CATEGORY = "category"
#: A memory's routing key (the name of the keyword holding it); also on that keyword.
ROUTING_KEY = "key"
#: The fact in a sentence of its own (the speaker named, the date resolved): "Nate won his second
#: tournament (8 May 2022)." for "Last week I won my second tournament!". Search reads it with
#: the content (``kwtree.models.info_text``).
INFO_ABSTRACT = "abstract"
#: How sure the extractor was of the memory (0 to 1).
CONFIDENCE = "confidence"
#: The ids of the turn infos a memory was extracted from (recall lets a memory stand for them).
SOURCES = "sources"
#: When the fact happened (epoch seconds, UTC), besides ``created_at`` (when it was recorded);
#: on memories, turns and summaries. ``recall(since=, until=)`` filters on it.
HAPPENED_AT = "happened_at"
#: Whom a memory or turn is about when that is not the user ("sister Ann", "Tom", a named
#: speaker): recall ranks it low for a question that does not name them.
SUBJECT = "subject"
#: The single-valued attribute a memory states ("home", "job": ``kwtree.memory.candidates.ATTRIBUTES``).
ATTRIBUTE = "attribute"
#: The value alone of that attribute ("Denver"), when the extractor gave it.
VALUE = "value"
#: The caller's own metadata of a memory (``CommitOptions.metadata``), kept apart from kwtree's.
USER_METADATA = "user_metadata"
#: On a superseded memory (and its copies and source turns): the id of the memory holding the
#: newer value, and until when it held (epoch seconds: when the newer value happened). Recall
#: ranks such infos below current ones; blocks mark them as earlier values.
SUPERSEDED_BY = "superseded_by"
VALID_UNTIL = "valid_until"

# --- a skill: statistics on the tool's keyword, lessons in one guide info ---------------------

#: On a skill keyword: how many calls were reported, how many succeeded and how many failed.
CALLS = "calls"
SUCCESSES = "successes"
FAILURES = "failures"
#: On a skill keyword: the summed duration of the calls that reported one, how many did, the mean.
DURATION_TOTAL = "duration_total"
TIMED_CALLS = "timed_calls"
DURATION_MEAN = "duration_mean"
#: Marks the info (True) that holds a skill's lessons.
GUIDE = "guide"

# --- a keyword's abstract (``KeywordTree.abstracts``; recall reads it as a signpost) -----------

#: The keyword metadata key reserved for the keyword's abstract record (``kwtree.writes.abstracts``).
ABSTRACT_KEY = "kwtree:abstract"
#: In that record: the abstract (one or two sentences, L0) and the overview (L1).
ABSTRACT_TEXT = "abstract"
ABSTRACT_OVERVIEW = "overview"
#: In that record: the digest of the subtree it was built from (it is stale when that changes).
ABSTRACT_DIGEST = "of"
#: In that record: what wrote it ("extractive" or "llm").
ABSTRACT_BY = "by"
#: In that record: how many memories it read, and the operation that wrote it.
ABSTRACT_INFOS = "infos"
ABSTRACT_OP = "op"
