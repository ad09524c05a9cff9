"""Checking the full-text index against the log, for ``verify``.

The index is a cache, but a damaged one does not always fail: a flipped bit in a tantivy
segment can leave it readable while it returns other documents or other ids (seen with
flips in the postings and the document store). So ``verify`` compares it with the state the
log replays to, when the index claims to reflect exactly that state (its watermark is the
log's last op id and the op count its meta.json records, if any, the log's: a git merge adds
operations below an unchanged last op id; an index that lags is brought up to date by the
next open, and one ahead of the log is already an error):

- every file of the segments tantivy's ``index/meta.json`` lists matches the CRC32 in its
  footer (``kwtree.stores.fulltext.checksum_problems``, which every open of the index checks
  too, so a tree never searches such an index; verify reports it all the same);

- the number of live documents of each kind equals the number of live entities, and their
  stored keys (what a search returns) are exactly the entities' keys;
- for a sample of up to ``SAMPLE`` entities of each kind (spread evenly over their ids), the
  entity's document holds every term of its text;
- for every term of the texts (up to ``TERMS`` of each kind, spread evenly), the number of
  live documents holding it equals the number of entities whose text has it.

It reads every stored key and tokenises every text once: about as long as replaying the log.

A mismatch is an error (``fulltext-mismatch``): searches may return wrong results. On a
file system verify may not write, tantivy cannot open the index at all (it creates a lock file
to open one): then only the checksums are compared, and a warning (``fulltext-unchecked``)
says the rest was not (copying the index elsewhere to open it would leave memories' text in a
temporary directory that a killed process never removes).
``kwtree repair`` deletes the index, as it does every cache with a watermark, and the next
open rebuilds it from the log. The check reads the index and never writes it.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from kwtree.caches.texts import search_text
from kwtree.engine.state import State
from kwtree.normalize import terms
from kwtree.ops.verify_segments import Findings
from kwtree.stores.directory import CACHE_DIR
from kwtree.stores.fulltext import KINDS, FullTextIndex, checksum_problems, is_panic

__all__ = ["SAMPLE", "check_fulltext"]

#: Entities of each kind whose documents are compared term by term.
SAMPLE = 64
#: Terms of each kind whose document counts are compared (all of them in smaller trees).
TERMS = 20_000
_FULLTEXT = "fulltext"


def _texts(state: State, kind: str) -> dict[str, str]:
    ids = state.infos if kind == "info" else state.keywords
    found = {}
    for entity_id in ids:
        text = search_text(state, kind, entity_id)
        if text is not None:
            found[entity_id] = text
    return found


def _sample(items: list[str], size: int = SAMPLE) -> list[str]:
    if len(items) <= size:
        return items
    step = len(items) / size
    return [items[int(n * step)] for n in range(size)]


def _problems(index: FullTextIndex, state: State) -> list[str]:
    problems = []
    for kind in KINDS:
        texts = _texts(state, kind)
        count = index.count(kind)
        if count != len(texts):
            problems.append(f"it holds {count} {kind} documents where the log has {len(texts)}")
        stored = Counter(index.all_keys(kind))
        wanted = Counter(f"{kind}:{entity_id}" for entity_id in texts)
        if stored != wanted:
            odd = sorted((stored - wanted) + (wanted - stored))
            problems.append(f"{len(odd)} {kind} keys differ between the index and the log (e.g. {odd[0]!r})")
        holding: Counter[str] = Counter()
        for entity_id in _sample(sorted(texts)):
            own = list(dict.fromkeys(terms(texts[entity_id], cjk_singles=True)))
            if own and index.matching(kind, own, entity_id) != 1:
                problems.append(f"the document of {kind} {entity_id} lacks terms of its text")
        for text in texts.values():
            holding.update(set(terms(text, cjk_singles=True)))
        for word in _sample(sorted(holding), TERMS):
            found = index.matching(kind, [word])
            if found != holding[word]:
                problems.append(f"{found} {kind} documents hold the term {word!r} where {holding[word]} texts do")
    return problems


def _compare(index: FullTextIndex, where: Path, state: State, findings: Findings) -> list[str]:
    if index.available and (index.watermark != state.last_op_id
                            or index.ops not in (None, state.op_count)):
        return []  # it lags (the next open catches it up) or is ahead (a cache-watermark error)
    problems = checksum_problems(where / "index")
    if not index.available and not problems and not os.access(where, os.W_OK):
        findings.add("warning", "fulltext-unchecked", f"{CACHE_DIR}/{_FULLTEXT}", None,
                     "the full-text index's checksums match, but its contents were not compared with the log: "
                     "tantivy cannot open an index where it may not create its lock file (a read-only file "
                     "system or directory); verify it where it can be written")
        return []
    if not index.available:
        return problems or ["tantivy cannot open it"]
    try:
        problems += _problems(index, state)
    except BaseException as exc:  # tantivy reports damage as ValueError, or panics
        if not (isinstance(exc, (OSError, ValueError)) or is_panic(exc)):
            raise
        problems.append(f"it cannot be read ({exc})")
    return problems


def check_fulltext(directory: Path, state: State, findings: Findings) -> None:
    """Compare the full-text index under ``directory`` with ``state`` (the log's replay) and
    add a ``fulltext-mismatch`` error to ``findings`` if they disagree (or tantivy cannot
    open it). Nothing to compare when there is no index or it does not reflect the log's
    last operation."""
    where = Path(directory) / CACHE_DIR / _FULLTEXT
    if not (where / "meta.json").exists():
        return
    index = FullTextIndex(where, writable=False)
    try:
        problems = _compare(index, where, state, findings)
    finally:
        index.close()
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        findings.add("error", "fulltext-mismatch", f"{CACHE_DIR}/{_FULLTEXT}", None,
                     f"the full-text index disagrees with the log: {'; '.join(problems[:3])}{more}; searches "
                     "may return wrong results; `kwtree repair` deletes it so that it is rebuilt from the log")
