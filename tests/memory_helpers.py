"""Helpers of the commit-pipeline tests: extractors that return fixed candidates (so the tests
hold whatever the default extractor finds), and reads of what a commit archived."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kwtree import Candidate, CommitOptions, ExtractContext, Info, Keyword, KeywordTree

__all__ = ["CHAT", "SEED", "doc_examples", "fixed", "memory", "options", "prints_its_comments", "restorable",
           "scope_part", "session_turns"]

#: The LLM-failure tests' conversation: a seed session, then CHAT, whose commit on the seeded
#: tree asks the LLM for every step: the candidates, where the new entities Tom and Leeds go,
#: and whether "green tea with honey" repeats "green tea".
SEED = [{"role": "user", "content": "My name is Alice. I love green tea. My sister Ann lives in York.",
         "ts": "2024-05-01T10:00:00Z"}]
CHAT = [
    {"role": "user", "content": "I love green tea with honey. My brother Tom works as a nurse.",
     "ts": "2024-05-08T10:00:00Z"},
    {"role": "assistant", "content": "Noted."},
    {"role": "user", "content": "I usually run every morning. I live in Leeds."},
]


def fixed(*candidates: Candidate, seen: list[ExtractContext] | None = None) -> Any:
    """An extractor returning ``candidates`` (recording each context in ``seen``)."""

    def extract(messages: Sequence[Any], context: ExtractContext) -> list[Candidate]:
        if seen is not None:
            seen.append(context)
        return list(candidates)

    return extract


def options(*candidates: Candidate, **more: Any) -> CommitOptions:
    return CommitOptions(extractor=fixed(*candidates), **more)


def memory(category: str, key: str, content: str, *, source: int = 0, **facts: Any) -> Candidate:
    return Candidate(category, key, content, content, 0.9, (source,), None, facts or None)


def scope_part(tree: KeywordTree, scope: str, *names: str) -> Any:
    """The keyword at scope › names..., found by name."""
    node = next(k for k in tree.get_children("root") if k.metadata.get("scope") == scope)
    for name in names:
        node = next(k for k in tree.get_children(node.id) if k.name == name)
    return node


def session_turns(tree: KeywordTree, session_keyword_id: str) -> list[Any]:
    return [i for i in tree.get_infos_of_keyword(session_keyword_id, size=10_000) if "turn" in i.metadata]


_BOOKKEEPING = {"version", "op_id", "updated_at"}


def restorable(reads: Any) -> Any:
    """``public_reads`` without what an undo cannot give back: the versions, writers and update
    times of the entities it restores, the newest op id and the count of operations."""
    if isinstance(reads, (Keyword, Info)):
        return {f.name: getattr(reads, f.name) for f in dataclasses.fields(reads) if f.name not in _BOOKKEEPING}
    if isinstance(reads, dict):
        return {key: restorable(value) for key, value in reads.items()
                if key not in ("last_op_id", "operations")}
    if isinstance(reads, (list, tuple)):
        return [restorable(item) for item in reads]
    return reads


def doc_examples(*sections: str) -> list[str]:
    """The python blocks of docs/agent-memory.md's ``## `` sections whose titles start so."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "agent-memory.md").read_text()
    return [block for section in re.split(r"^## ", doc, flags=re.M) if section.startswith(sections)
            for block in re.findall(r"```python\n(.*?)```", section, re.S)]


def prints_its_comments(block: str, printed: Any) -> bool:
    """Run a docs block; True when what it printed (``printed()`` gives it) is its trailing
    ``# `` comment lines, and it has some."""
    expected = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    exec(compile(block, "agent-memory.md", "exec"), {})
    return bool(expected) and printed().splitlines() == expected

