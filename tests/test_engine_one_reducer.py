"""Replay and live writes fold operations with one reducer, so they build equal States.

A history is played on a real tree; its operations are then read back from the log and
stamped with a drawn order of their own timestamps (a log merged from two writers may have a
later op id with an earlier timestamp: two writers in one millisecond, or skewed clocks).
The State that replay builds from those rows — in file order (``replay_chunk``, the path of
every open) and from a shuffled file (``replay_sorted``, the merged-log path) — must equal
the State that ``apply`` builds from the same operations, as ``_commit`` applies a live
write: entities, derived indexes, op count, last op id and last timestamp alike.
"""

from __future__ import annotations

import dataclasses
import random
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, note
from hypothesis import strategies as st

from kwtree import ROOT_ID, KeywordTree, Operation
from kwtree.engine.events import decode_operation, encode_operation, with_checksum
from kwtree.engine.replay import parse_operations, replay_chunk, replay_sorted
from kwtree.engine.state import State, apply
from kwtree.testing import apply_step, log_operations, operation_sequences

_SLOTS = [name for name in State.__slots__ if name != "keyword_journal"]  # (a consumer's, not state)


def _view(state: State) -> dict[str, Any]:
    return {name: getattr(state, name) for name in _SLOTS}


def _history(steps: list[Any]) -> list[Operation]:
    """The operations a real tree writes for ``steps``, in op-id order, read from its log."""
    with tempfile.TemporaryDirectory(prefix="kwtree-reducer-") as tmp:
        with KeywordTree(Path(tmp) / "tree", durability="none", worker=False) as tree:
            keyword_ids, info_ids = [ROOT_ID], []
            for step in steps:
                apply_step(tree, step, keyword_ids, info_ids)
            data_dir = tree.data_dir
        logged = log_operations(data_dir)
    return [decode_operation([orjson.loads(line) for line in op.rows.splitlines()]) for op in logged]


def _encoded(ops: list[Operation]) -> list[bytes]:
    return [with_checksum(encode_operation(op)) for op in ops]


def _states(ops: list[Operation], shuffle: random.Random) -> tuple[State, State, State]:
    """(live, replayed in order, replayed sorted) States of ``ops`` (in op-id order)."""
    encoded = _encoded(ops)
    live = State()
    for data in encoded:  # each State decodes its own entities: the reducer sets fields on them
        apply(live, decode_operation([orjson.loads(line) for line in data.splitlines()]))
    in_order = State()
    result = replay_chunk(in_order, b"".join(encoded), "log/a.jsonl", 1, checksums=True)
    assert result.consumed_bytes == sum(map(len, encoded))
    shuffle.shuffle(encoded)
    raws, _, _ = parse_operations(b"".join(encoded), "log/a.jsonl", 1, checksums=True)
    merged = State()
    replay_sorted(merged, raws)
    return live, in_order, merged


@given(
    steps=operation_sequences(min_size=1, max_size=25),
    data=st.data(),
)
def test_replay_and_live_writes_build_equal_states(steps: list[Any], data: st.DataObject) -> None:
    ops = _history(steps)
    stamps = data.draw(st.permutations([op.timestamp for op in ops]), label="timestamps in op-id order")
    ops = [dataclasses.replace(op, timestamp=stamp) for op, stamp in zip(ops, stamps, strict=True)]
    live, in_order, merged = _states(ops, random.Random(data.draw(st.integers(0, 2**32), label="file order")))
    note(f"last timestamps: live {live.last_timestamp}, replay {in_order.last_timestamp}, "
         f"sorted replay {merged.last_timestamp}")
    assert _view(in_order) == _view(merged)
    assert _view(live) == _view(in_order)


def test_an_older_timestamp_after_a_newer_one_leaves_the_newest() -> None:
    """The case the property found: two writers' operations in one millisecond, the later id
    with the earlier timestamp. Every reader keeps the newest timestamp seen, as the op clock
    needs (``OpClock.observe``: a new operation is never stamped before one in the log)."""
    with tempfile.TemporaryDirectory(prefix="kwtree-reducer-") as tmp:
        with KeywordTree(Path(tmp) / "tree", durability="none", worker=False) as tree:
            tree.create_keyword("a", ROOT_ID)
            tree.create_keyword("b", ROOT_ID)
            data_dir = tree.data_dir
        ops = [decode_operation([orjson.loads(line) for line in op.rows.splitlines()])
               for op in log_operations(data_dir)]
    newest = ops[-2].timestamp + 1.0
    ops[-2] = dataclasses.replace(ops[-2], timestamp=newest)  # later id, earlier stamp after it
    live, in_order, merged = _states(ops, random.Random(0))
    assert live.last_timestamp == in_order.last_timestamp == merged.last_timestamp == newest
    assert live.last_op_id == in_order.last_op_id == ops[-1].op_id
