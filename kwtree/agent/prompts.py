"""What the LLM is told: the system prompt, the request document and the answer's schema.

The format is fixed so that clients, stubs and tests can read it: the last user message's
content is a JSON document with ``intent``, ``query``, ``round``, ``current_path`` (names,
root excluded) and ``candidates`` (``{"idx", "name", "path"}``), plus ``description`` when the
item has one. Candidates are addressed by small integers; the prompt never carries ids.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["ACTIONS", "DECISION_SCHEMA", "INTENTS", "PROMPT_VERSION", "SYSTEM_PROMPT", "build_messages"]

PROMPT_VERSION = "descend-1"
INTENTS = ("search", "suggest_parent")
ACTIONS = ("jump", "match", "missing", "ambiguous")

SYSTEM_PROMPT = """You navigate a tree of keywords for a memory system, one round at a time.
Each round you get a JSON document: the intent, the query, the round number, the current path
(names from the top of the tree down to where you are) and a flat list of candidates, each
with an integer idx, a name and its path. Answer with the decide tool, naming candidates only
by idx.

intent "search": find the keyword the query names.
- match: the candidate(s) ARE what the query names (idx, or idxs if several fit equally).
- jump: the answer lies BELOW these candidates; you will see their children next round.
- missing: no keyword for the query exists here; optionally suggest_name for a new one.
- ambiguous: several candidates fit and you cannot choose (idxs).

intent "suggest_parent": the query is a NEW keyword (with its description); find the keyword
it should be placed under.
- match: this candidate is the right parent (idx).
- jump: the right parent lies below this candidate (idx); you will see its children.
- missing: none of the candidates fits; it belongs directly under the current path.
- ambiguous: several parents fit equally (idxs).

Prefer jump over match when a more specific candidate could exist below. Give a short reason."""

DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "idx": {"type": "integer", "description": "one candidate's idx"},
        "idxs": {"type": "array", "items": {"type": "integer"}, "description": "several candidates' idx"},
        "suggest_name": {"type": "string", "description": "for missing: a name for the new keyword"},
        "reason": {"type": "string", "description": "one short sentence"},
    },
    "required": ["action", "reason"],
}


def build_messages(document: dict[str, Any], system: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """The messages of one request: the system prompt (the descend loop's by default), then
    the request document as JSON (so any text it carries stays data, not instructions)."""
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": orjson.dumps(document).decode()},
    ]
