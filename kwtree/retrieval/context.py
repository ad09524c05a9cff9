"""Prompt-ready context: recalled memories grouped under their keyword paths, within a budget.

Token counts are an estimate, documented so callers can reason about it: each CJK character
counts as one token (tokenizers give Chinese and Japanese about one to two characters per
token, so one per character errs on the safe side), and every other run of text counts one
token per four characters, rounded up, with at least one token per word. A memory that has
a ``happened_at`` (``kwtree.retrieval.timeline``) is shown after its date, ``[YYYY-MM-DD]`` (UTC).
"""

from __future__ import annotations

import math
import re

from kwtree.models import Hit, RelationType
from kwtree.normalize import CJK_CHARS
from kwtree.retrieval.timeline import happened_day

__all__ = ["UNFILED", "estimate_tokens", "render_context"]

_CJK = re.compile(f"[{CJK_CHARS}]")
#: The heading of memories linked to no keyword.
UNFILED = "(no keyword)"


def estimate_tokens(text: str) -> int:
    """An upper-leaning estimate of how many tokens ``text`` costs in a prompt."""
    cjk = len(_CJK.findall(text))
    rest = _CJK.sub(" ", text)
    words = len(rest.split())
    return cjk + max(words, math.ceil(len(rest.strip()) / 4))


def _heading(hit: Hit) -> str:
    if not hit.keywords:
        return UNFILED
    primary = [k for k in hit.keywords if k.relation is RelationType.PRIMARY] or hit.keywords
    return " › ".join(keyword.name for keyword in primary[0].path[1:])


def _line(hit: Hit) -> str:
    """``- [YYYY-MM-DD] text (source)``: the date when the memory has a ``happened_at``."""
    text = " ".join(hit.info.content.split())
    day = happened_day(hit.info)
    return "- " + (f"[{day}] " if day else "") + text + (f" ({hit.info.source})" if hit.info.source else "")


def render_context(hits: list[Hit], max_tokens: int) -> str:
    """The hits as markdown: a ``## path`` heading per keyword, most relevant group first,
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
    out: list[str] = []
    used = 0
    for heading, members in groups.items():
        title = f"## {heading}"
        title_cost = estimate_tokens(title) + 1
        lines: list[str] = []
        for hit in members:
            line = _line(hit)
            cost = estimate_tokens(line) + 1
            extra = 0 if lines else title_cost
            if used + cost + extra > max_tokens:
                continue
            lines.append(line)
            used += cost + extra
        if lines:
            out.append("\n".join([title, *lines]))
    return "\n\n".join(out)
