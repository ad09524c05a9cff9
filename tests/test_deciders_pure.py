"""Deciders are pure (issue 28): the engine may ask a decider again, on a newer state (the
PostgreSQL path after another writer appended first), so each must answer the same for the same
state and change nothing it was given — neither the state, nor its arguments, nor the audit the
operation will record.

Every public write of a real tree is played with the engine's decide step asked twice on the
same state and stamp: the two answers must be equal, the state untouched and the audit as it
was after the first. (Before the fix, commit_session's decider appended its placements to the
plan's audit on every call: 4 placements became 8 on the second.)
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from kwtree import KeywordTree
from kwtree.engine import engine as engine_module
from kwtree.engine.engine import Decide, Engine
from kwtree.engine.state import State
from kwtree.models import ROOT_ID, Operation
from kwtree.testing import apply_step, operation_sequences


def _fingerprint(state: State) -> str:
    """A digest of what a decider could change in ``state``."""
    parts = [state.op_count, state.last_op_id, state.keywords, state.infos, state.links, state.relations,
             state.children, state.infos_by_keyword, state.keywords_by_info, state.rel_out, state.rel_in]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


_ID = re.compile(r"[0-9a-f]{32}")


def _canonical(decided: Any, state: State) -> str:
    """``decided`` as text, each id of an entity the decision makes (one ``state`` does not
    hold: a fresh uuid on every call) named by the order it first appears in."""
    fresh: dict[str, str] = {}

    def name(match: re.Match[str]) -> str:
        found = match.group()
        if found in state.keywords or found in state.infos or found == state.last_op_id:
            return found
        return fresh.setdefault(found, f"<new {len(fresh)}>")

    return _ID.sub(name, repr(decided))


def asking_twice(checked: list[str]) -> Any:
    """``Engine._decide`` with the decide step asked twice on the same state and stamp and
    both answers checked; the kind of every checked decision is appended to ``checked``."""
    original = Engine._decide

    def twice(self: Engine, kind: str, decide: Decide, audit: Mapping[str, Any] | None,
              state: State) -> Operation | None:
        before = _fingerprint(state)

        def probe(state: State, stamp: Any) -> Any:
            first = decide(state, stamp)
            audit_after_first = copy.deepcopy(audit)
            second = decide(state, stamp)
            assert _canonical(second, state) == _canonical(first, state), \
                f"{kind}: a second decision on the same state differs"
            assert _canonical(audit, state) == _canonical(audit_after_first, state), \
                f"{kind}: deciding again changed the audit"
            assert _fingerprint(state) == before, f"{kind}: the decider changed the state it was given"
            checked.append(kind)
            return second

        return original(self, kind, probe, audit, state)

    return twice


@pytest.fixture
def decided_twice(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every decide step of every engine asked twice; yields the kinds checked so far."""
    checked: list[str] = []
    monkeypatch.setattr(engine_module.Engine, "_decide", asking_twice(checked))
    yield checked


CONVERSATION = [
    {"role": "user", "content": "I live in Lyon and work as a nurse at the Croix-Rousse hospital."},
    {"role": "assistant", "content": "Noted."},
    {"role": "user", "content": "My sister Ana lives in Porto. I'm vegetarian and I love green tea."},
    {"role": "user", "content": "Actually I moved to Grenoble last month."},
]


def test_agent_memory_forget_reorganize_and_import_decide_alike_twice(decided_twice: list[str],
                                                                       tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "m", durability="none", worker=False) as tree:
        first = tree.commit_session(CONVERSATION[:3], session_id="s1", scope="user:ana")
        later = tree.commit_session(CONVERSATION, session_id="s1", scope="user:ana")
        assert first.op_id is not None and later.op_id is not None
        audit = next(op for op in tree.history() if op.op_id == first.op_id).audit["commit_session"]
        assert len(audit["placements"]) == len({(p["category"], p["key"]) for p in audit["placements"]})
        plan = tree.reorganize()
        tree.apply_reorganize_plan(plan)
        tree.undo(tree.last_op_id)
        victim = tree.memories("user:ana")[0]
        tree.forget(victim.id)
        tree.export(tmp_path / "tree.json")
    KeywordTree.import_json(tmp_path / "tree.json", tmp_path / "copy", durability="none", worker=False).close()
    assert {"commit_session", "forget", "import", "undo"} <= set(decided_twice)


@settings(max_examples=15)
@given(steps=operation_sequences(min_size=5, max_size=25))
def test_every_public_write_decides_alike_twice(steps: list[Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    kinds: list[str] = []
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(engine_module.Engine, "_decide", asking_twice(kinds))
        with KeywordTree(tmp_path_factory.mktemp("t") / "m", durability="none", worker=False) as tree:
            keyword_ids, info_ids = [ROOT_ID], []
            for step in steps:
                apply_step(tree, step, keyword_ids, info_ids)
    assert kinds  # at least the tree's init was decided twice
