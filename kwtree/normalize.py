"""Name normalisation for exact lookup: two names that differ only in case, width,
punctuation or spacing normalise to the same key.

``normalize_name`` applies NFKC (which also folds full-width and half-width forms), then
casefolding, then drops every character of the Unicode categories punctuation (P*),
separator (Z*) and other (C*: control, format, unassigned). Symbols and marks stay, so
``"C++"`` and ``"C#"`` remain different from ``"C"``.
"""

from __future__ import annotations

import unicodedata

__all__ = ["normalize_name"]

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
