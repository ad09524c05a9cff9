"""Name normalisation for exact lookup (two names that differ only in case, width,
punctuation or spacing normalise to the same key), word tokenisation, and the terms that
similarity and full-text search compare (stop words dropped, English words stemmed).

``normalize_name`` applies NFKC (which also folds full-width and half-width forms), then
casefolding, then drops every character of the Unicode categories punctuation (P*),
separator (Z*) and other (C*: control, format, unassigned). Symbols and marks stay, so
``"C++"`` and ``"C#"`` remain different from ``"C"``.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from typing import Any

from kwtree.errors import InvalidInputError

__all__ = ["CJK_CHARS", "STOPWORDS", "normalize_name", "terms", "tokenize"]

_DROP_CATEGORIES = ("P", "Z", "C")
_ASCII_DROP = bytes(c for c in range(128) if unicodedata.category(chr(c))[0] in _DROP_CATEGORIES)


def normalize_name(text: str) -> str:
    """Return the lookup key of a keyword name or alias (may be empty for e.g. ``"..."``).
    Raises InvalidInputError if ``text`` is not a string."""
    if type(text) is not str and not isinstance(text, str):
        raise InvalidInputError(f"normalize_name takes a string, got {type(text).__name__}")
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
#: A regex character class (without brackets) of those scripts, for other modules' patterns.
CJK_CHARS = _CJK = "\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"


@functools.cache
def _token_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A word or CJK run, and a CJK character. Compiled at the first tokenize, not at import:
    the Unicode classes take ~8 ms to compile, which ``import kwtree`` need not pay."""
    return re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+"), re.compile(rf"[{_CJK}]")


def tokenize(text: str, cjk_singles: bool = False) -> list[str]:
    """Split ``text`` into casefolded word tokens, in order.

    Letters and digits form words; runs of CJK characters (written without spaces) become
    overlapping character pairs (a single character stays one token), so ``"我喜欢狗"`` gives
    ``["我喜", "喜欢", "欢狗"]``. With ``cjk_singles`` a longer run also gives each of its
    characters (``["我", "我喜", "喜", ...]``): the full-text index stores documents that way,
    so a one-character query (猫) finds the texts that hold it, while a query of two or more
    characters still matches by pairs (南京路 does not find 北京 by their shared 京).
    Punctuation and spacing separate tokens; a camel-case identifier also gives its words
    after itself ("TaskGroup" -> ``["taskgroup", "task", "group"]``).
    """
    folded = text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()
    token, cjk_run = _token_patterns()
    parts = _camel_parts(text)
    tokens: list[str] = []
    for run in token.findall(folded):
        if len(run) > 1 and cjk_run.match(run):
            for i in range(len(run)):
                if cjk_singles:
                    tokens.append(run[i])
                if i + 1 < len(run):
                    tokens.append(run[i : i + 2])
        else:
            tokens.append(run)
            tokens.extend(parts.get(run, ()))
    return tokens


_CAMEL = re.compile(r"[A-Za-z][a-z0-9]*(?:[A-Z][a-z0-9]+)+(?![A-Za-z0-9])")
_CAMEL_CUT = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _camel_parts(text: str) -> dict[str, list[str]]:
    """The words inside each camel-case identifier of ``text`` ("TaskGroup" -> task, group;
    "useEffect" -> use, effect), by the identifier's folded form: a token gives them after
    itself, so "task groups" finds "asyncio.TaskGroup"."""
    if text.islower() or not text.isascii():
        return {}
    return {word.lower(): [part.lower() for part in _CAMEL_CUT.split(word)] for word in _CAMEL.findall(text)}


#: English function words (articles, prepositions, pronouns, auxiliaries) that say nothing
#: about a topic, and the pieces the tokenizer cuts contractions into ("doesn't" -> "doesn",
#: "t"; "I'll" -> "ll"). Modal words that are also nouns ("may", "will", "can") stay.
STOPWORDS = frozenset(
    """a an the of and or for to in on at by with from as is are was were be been being it its
    this that these those which who whom whose what when where how than then there such any
    some one other into onto over under about after before between while usually often
    especially etc e g i also not no but so very more most
    me my myself we us our ours you your yours he him his she her hers they them their theirs
    do does did done doing have has had having would could should am
    cannot s t ll d re ve m don doesn didn isn aren wasn weren wouldn couldn shouldn hasn haven
    hadn""".split()  # noqa: SIM905
)


@functools.cache
def _english_stemmer() -> Any:
    """The Snowball English (Porter2) stemmer, made at the first stem rather than at import:
    importing ``snowballstemmer`` loads the stemmers of all its languages (~20 ms), which
    ``import kwtree`` and the ``kwtree`` command's help need not pay."""
    import snowballstemmer

    return snowballstemmer.stemmer("english")


_STEMMER_LOCK = threading.Lock()  # a Snowball stemmer keeps its word in its own fields
_STEMS: dict[str, str] = {}
_STEMS_LIMIT = 200_000
#: Longer words are not stemmed: no English word is this long, and the Snowball stemmer's
#: time grows with the square of a word's length (a 1 MB word took minutes).
_MAX_STEM_CHARS = 64


def _stem(word: str) -> str:
    """The English (Porter2) stem of an ASCII word of 4 to ``_MAX_STEM_CHARS`` letters;
    others unchanged."""
    found = _STEMS.get(word)
    if found is not None:
        return found
    if not 3 < len(word) <= _MAX_STEM_CHARS or not word.isascii() or not word.isalpha():
        return word
    with _STEMMER_LOCK:
        stem: str = _english_stemmer().stemWord(word)  # snowballstemmer has no types
    if len(_STEMS) >= _STEMS_LIMIT:
        _STEMS.clear()
    _STEMS[word] = stem
    return stem


def terms(text: str, cjk_singles: bool = False) -> list[str]:
    """The terms of ``text`` in order: tokens, stop words dropped, English words reduced to
    their Snowball (Porter2) stems, so "painting", "painted" and "paints" all give "paint";
    ``cjk_singles`` as for ``tokenize``."""
    return [_stem(token) for token in tokenize(text, cjk_singles) if token not in STOPWORDS]
