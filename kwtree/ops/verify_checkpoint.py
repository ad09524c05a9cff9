"""Checking the state checkpoint (``kwtree.engine.checkpoint``) against the log, for ``verify``.

An open trusts the checkpoint only when the log proves it current, so a stale or damaged one
costs a replay, never a wrong answer: verify says which it is (info ``state-checkpoint`` when
stale, a warning when damaged). A current one is loaded, the operations after it applied as
an open would, and the state compared with the log's full replay; a difference (a kwtree bug,
or a file forged to pass every check) is the error ``state-checkpoint``, and ``kwtree repair``
deletes it. The check reads and never writes.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

from kwtree.engine import checkpoint
from kwtree.engine.follower import follow
from kwtree.engine.state import State
from kwtree.errors import KwtreeError
from kwtree.models import ROOT_ID
from kwtree.ops.verify_segments import Findings
from kwtree.stores.directory import CACHE_DIR
from kwtree.stores.segments import SegmentStore

__all__ = ["check_checkpoint", "same_state"]

_FILE = f"{CACHE_DIR}/{checkpoint.CHECKPOINT_NAME}"
#: What a state is made of, beyond its bookkeeping for consumers (``keyword_journal``).
_PARTS = tuple(name for name in State.__slots__ if name != "keyword_journal")


def same_state(ours: State, theirs: State) -> list[str]:
    """The parts in which two states differ (entities, indexes in their order, counters)."""
    differ = []
    for name in _PARTS:
        a, b = getattr(ours, name), getattr(theirs, name)
        if a != b or (isinstance(a, dict) and [*a.items()] != [*b.items()]):
            differ.append(name)
    return differ


def _root_as_opened(replayed: State, opened: State) -> State:
    """``replayed`` (verify's replay, which starts from a placeholder root so that a log without
    one can be examined: its root is one version on) with ``opened``'s root when the two roots
    differ in their version alone."""
    ours, theirs = opened.keywords.get(ROOT_ID), replayed.keywords.get(ROOT_ID)
    if ours is None or theirs is None or ours == theirs or dataclasses.replace(ours, version=theirs.version) != theirs:
        return replayed
    copy = State()
    for name in _PARTS:
        setattr(copy, name, getattr(replayed, name))
    copy.keywords = {**replayed.keywords, ROOT_ID: ours}
    return copy


def check_checkpoint(directory: Path, state: State, findings: Findings) -> None:
    """Add what the checkpoint of ``directory`` is to ``findings``, given the state the whole
    log replays to (a log read without damage). Nothing when there is none."""
    if not (directory / _FILE).exists():
        return
    try:
        store = SegmentStore(directory, writable=False, durable=False)
    except (KwtreeError, OSError) as exc:
        findings.add("warning", "state-checkpoint", _FILE, None, f"not checked: the log cannot be opened ({exc})")
        return
    try:
        found = checkpoint.examine(directory, store)
        if isinstance(found, checkpoint.Unusable):
            severity, what = ("warning", "damaged") if found.damaged else ("info", "not current")
            findings.add(severity, "state-checkpoint", _FILE, None,
                         f"{what} ({found.why}): an open replays the whole log instead; the next writable open "
                         f"deletes it")
            return
        if found is None:
            return
        loaded = follow(store, found.position, found.state, None, threading.Lock()).state
    except KwtreeError as exc:
        findings.add("warning", "state-checkpoint", _FILE, None, f"not checked: {exc}")
        return
    finally:
        store.close()
    differ = same_state(loaded, _root_as_opened(state, loaded))
    if differ:
        findings.add("error", "state-checkpoint", _FILE, None,
                     f"it and the operations after it give another state than the log ({', '.join(differ)} differ): "
                     "an open would answer from it; `kwtree repair` deletes it (please report this)")
    else:
        findings.add("info", "state-checkpoint", _FILE, None,
                     f"current: it covers {found.covered:,} bytes of the log, and an open replays only what follows")
