"""Prompt-ready context: recalled memories grouped under their keyword paths, within a budget,
fenced as recalled data (``kwtree.retrieval.fence``).

Token counts are an estimate, documented so callers can reason about it: each CJK character
counts as one token (tokenizers give Chinese and Japanese about one to two characters per
token, so one per character errs on the safe side), and every other run of text counts one
token per four characters, rounded up, with at least one token per word. Each memory is one
line, ``- [who, date] "text"``: who said it (its provenance), the day it happened (its
``happened_at``, ``kwtree.retrieval.timeline``; else the day it was stored, UTC), and its
text as a JSON string (``fence.quote``).
"""

from __future__ import annotations

import math
import re

from kwtree.models import Hit, RelationType
from kwtree.normalize import CJK_CHARS
from kwtree.retrieval.fence import fenced, memory_line, path_heading

__all__ = ["UNFILED", "Block", "estimate_tokens", "render_context"]

_CJK = re.compile(f"[{CJK_CHARS}]")
#: No text longer than this many characters per token of the budget can fit (a token costs at
#: most four characters by the estimate, and quoting only lengthens a text).
_CHARS_PER_TOKEN = 4
#: The heading of memories linked to no keyword.
UNFILED = "## (no keyword)"


def estimate_tokens(text: str) -> int:
    """An upper-leaning estimate of how many tokens ``text`` costs in a prompt."""
    cjk = len(_CJK.findall(text))
    rest = _CJK.sub(" ", text)
    words = len(rest.split())
    return cjk + max(words, math.ceil(len(rest.strip()) / 4))


class Block:
    """Memory lines under headings, fenced, never over ``max_tokens``: ``estimate_tokens`` of
    the whole block (fence and note included) is measured as each line is added."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.lines: list[str] = []
        self._heading: str | None = None

    def add(self, heading: str, line: str) -> bool:
        """Add ``line`` (a ``fence.memory_line``) under ``heading`` (a ``## `` line; written
        first when the section is not the one added to last); False, and nothing added, when
        the block would no longer fit."""
        added = [line] if heading == self._heading else [heading, line]
        if estimate_tokens(fenced([*self.lines, *added])) > self.max_tokens:
            return False
        self.lines += added
        self._heading = heading
        return True

    def text(self) -> str:
        """The fenced block; "" when no line was added."""
        return fenced(self.lines)


def _heading(hit: Hit) -> str:
    if not hit.keywords:
        return UNFILED
    primary = [k for k in hit.keywords if k.relation is RelationType.PRIMARY] or hit.keywords
    return path_heading([keyword.name for keyword in primary[0].path[1:]])


def render_context(hits: list[Hit], max_tokens: int) -> str:
    """The hits as a block: a ``## path`` heading per keyword, most relevant group first,
    each memory once (the same text twice is shown once), and nothing past ``max_tokens``
    (a memory that does not fit is left out; a shorter later one may still fit)."""
    groups: dict[str, list[Hit]] = {}
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    for hit in hits:  # best first, so a group's position is that of its best memory
        text = " ".join(hit.info.content.split()).casefold()
        if hit.info.id in seen_ids or text in seen_text:
            continue
        seen_ids.add(hit.info.id)
        seen_text.add(text)
        groups.setdefault(_heading(hit), []).append(hit)
    block = Block(max_tokens)
    for heading, members in groups.items():
        for hit in members:
            if len(hit.info.content) <= _CHARS_PER_TOKEN * max_tokens:  # (no line this long fits: not quoted)
                block.add(heading, memory_line(hit.info))
    return block.text()
