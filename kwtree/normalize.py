"""Name normalisation for exact lookup (two names that differ only in case, width,
punctuation or spacing normalise to the same key), and word tokenisation for similarity.

``normalize_name`` applies NFKC (which also folds full-width and half-width forms), then
casefolding, then drops every character of the Unicode categories punctuation (P*),
separator (Z*) and other (C*: control, format, unassigned). Symbols and marks stay, so
``"C++"`` and ``"C#"`` remain different from ``"C"``.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize_name", "tokenize"]

_DROP_CATEGORIES = ("P", "Z", "C")
_ASCII_DROP = bytes(c for c in range(128) if unicodedata.category(chr(c))[0] in _DROP_CATEGORIES)


def normalize_name(text: str) -> str:
    """Return the lookup key of a keyword name or alias (may be empty for e.g. ``"..."``)."""
    if text.isascii():
        # Fast paths, same result as the general one: NFKC and casefold are identities on
        # ASCII except for case, and _ASCII_DROP is exactly ASCII's P*, Z* and C* characters.
        # (bytes.translate is about twice as fast as str.translate; replay calls this a lot.)
        if text.isalnum():
            return text.lower()
        return text.encode().lower().translate(None, _ASCII_DROP).decode()
    folded = unicodedata.normalize("NFKC", text).casefold()
    # NFKC again after casefold: casefolding can produce sequences NFKC would compose.
    folded = unicodedata.normalize("NFKC", folded)
    return "".join(ch for ch in folded if unicodedata.category(ch)[0] not in _DROP_CATEGORIES)


# Han, Hiragana, Katakana, Hangul (and their extensions): scripts written without spaces.
_CJK = "\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]")


def tokenize(text: str) -> list[str]:
    """Split ``text`` into casefolded word tokens, in order.

    Letters and digits form words; runs of CJK characters (written without spaces) become
    overlapping character bigrams (a single character stays one token), so ``"我喜欢狗"``
    gives ``["我喜", "喜欢", "欢狗"]``. Punctuation and spacing separate tokens.
    """
    folded = text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()
    tokens: list[str] = []
    for run in _TOKEN.findall(folded):
        if len(run) > 1 and _CJK_RUN.match(run):
            tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            tokens.append(run)
    return tokens
