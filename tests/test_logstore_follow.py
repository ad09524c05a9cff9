"""The engine's side of the log-store seam: ``follow`` keeps a State in step with a
``LogStore`` exactly as a plain replay of the segment files in op-id order gives it, and an
operation appended through the store is one the tree reads. Real trees, real files, a real
second process."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson

from kwtree import KeywordTree, verify_directory
from kwtree.engine.events import Bound, OpClock, encode_operation
from kwtree.engine.follower import follow
from kwtree.engine.replay import parse_operations, replay_sorted
from kwtree.engine.state import State
from kwtree.models import EMPTY_METADATA, Change, Info, Operation
from kwtree.stores.eventlog import EventLog
from kwtree.stores.manifest import Manifest
from kwtree.stores.segments import SegmentStore


def _facts(state: State) -> tuple[object, ...]:
    return (state.keywords, state.infos, state.links, state.relations, state.children, state.op_count,
            state.last_op_id, state.last_timestamp)


def _replayed(directory: Path, bound: Bound | None = None) -> State:
    """The state of every whole operation in the segment files, applied in op-id order (the
    reference)."""
    manifest = Manifest.load(directory)
    events = EventLog(directory, manifest.segment_bytes, writable=False, preallocate=False,
                      checksums=manifest.checksums)
    try:
        operations = []
        for index in range(len(events.segments)):
            path, data = events.read_segment(index)
            operations.extend(parse_operations(data, path, 1, checksums=manifest.checksums)[0])
    finally:
        events.close()
    state = State()
    replay_sorted(state, operations, bound)
    return state


def _write_some(tree: KeywordTree, tag: str) -> list[str]:
    """A few writes of every kind; their op ids."""
    parent = tree.create_keyword(f"parent {tag}", llm_auto_place=False)
    child = tree.create_keyword(f"child {tag}", parent.id, llm_auto_place=False)
    info = tree.create_info(f"an info about {tag}", keyword_ids=[child.id])
    gone = tree.create_info(f"a passing info about {tag}", keyword_ids=[parent.id])
    tree.update_info(info.id, {"content": f"a changed info about {tag}"})
    tree.delete_info(gone.id)
    return [parent.op_id, child.op_id, info.op_id, tree.last_op_id]


def test_follow_gives_the_state_a_replay_of_the_files_gives(tmp_path):
    with KeywordTree(tmp_path / "t", segment_bytes=4096, durability="none", worker=False) as tree:
        for tag in "abcdefgh":
            _write_some(tree, tag)
    store = SegmentStore(tmp_path / "t", writable=False)
    state, position, head = follow(store, None, State(), None, threading.Lock())
    assert _facts(state) == _facts(_replayed(tmp_path / "t"))
    assert head == verify_directory(tmp_path / "t").head  # the digest the next append will name
    assert list(store.tail(position)) == []
    store.close()


def test_follow_tails_what_another_process_appended(tmp_path, children):
    directory = tmp_path / "t"
    with KeywordTree(directory, durability="none", worker=False) as tree:
        _write_some(tree, "first")
    store = SegmentStore(directory, writable=False)
    state, position, _ = follow(store, None, State(), None, threading.Lock())
    writer = children("""
        import sys
        from kwtree import KeywordTree
        with KeywordTree(sys.argv[1], worker=False) as tree:
            for line in sys.stdin:
                tree.create_keyword(line.strip(), llm_auto_place=False)
                print(tree.last_op_id, flush=True)
    """, directory)
    for name in ("one", "two", "three"):
        writer.send(name)
        op_id = writer.readline()
        before = state.op_count
        state, position, _ = follow(store, position, state, None, threading.Lock())
        assert (state.op_count, state.last_op_id) == (before + 1, op_id)
    writer.wait_exit()
    assert _facts(state) == _facts(_replayed(directory))
    store.close()


def test_follow_replays_a_compacted_log_from_the_start(tmp_path):
    directory = tmp_path / "t"
    with KeywordTree(directory, durability="none", worker=False) as tree:
        _write_some(tree, "old")
        store = SegmentStore(directory, writable=False)
        old_state, position, _ = follow(store, None, State(), None, threading.Lock())
        tree.compact()
        _write_some(tree, "new")
    state, position, _ = follow(store, position, old_state, None, threading.Lock())
    assert state is not old_state
    assert _facts(state) == _facts(_replayed(directory))
    store.close()


def test_follow_stops_at_a_bound(tmp_path):
    directory = tmp_path / "t"
    with KeywordTree(directory, segment_bytes=4096, durability="none", worker=False) as tree:
        ops = _write_some(tree, "a") + _write_some(tree, "b")
    middle = _replayed(directory, Bound(op_id=ops[5])).last_timestamp
    store = SegmentStore(directory, writable=False)
    for bound in (Bound(op_id=ops[2]), Bound(op_id=ops[5]), Bound(timestamp=middle)):
        state, _, _ = follow(store, None, State(), bound, threading.Lock())
        assert _facts(state) == _facts(_replayed(directory, bound))
    store.close()


def test_follow_replays_a_log_out_of_id_order_sorted(tmp_path):
    directory = tmp_path / "t"
    with KeywordTree(directory, durability="none", worker=False) as tree:
        _write_some(tree, "a")
    segment = next((directory / "log").glob("*.jsonl"))
    rows = segment.read_bytes().split(b"\n")[:-1]
    by_op: dict[str, list[bytes]] = {}
    for row in rows:
        by_op.setdefault(orjson.loads(row)["op"], []).append(row)
    segment.write_bytes(b"".join(b"\n".join(lines) + b"\n" for lines in reversed(list(by_op.values()))))
    store = SegmentStore(directory, writable=False)
    state, _, _ = follow(store, None, State(), None, threading.Lock())
    assert _facts(state) == _facts(_replayed(directory))
    assert state.op_count == len(by_op)
    store.close()


def test_an_operation_appended_through_the_store_is_read_by_the_tree(tmp_path):
    """The write path over the seam: lock, catch up, decide, append, as the Engine will."""
    directory = tmp_path / "t"
    with KeywordTree(directory, worker=False) as tree:
        keyword = tree.create_keyword("topic", llm_auto_place=False)
    store = SegmentStore(directory)
    clock = OpClock()
    with store.locked():
        state, position, _ = follow(store, None, State(), None, threading.Lock())
        clock.observe(state.last_op_id, state.last_timestamp)
        op_id, ts = clock.next()
        info = Info("i" * 32, "written through the seam", "", EMPTY_METADATA, 1, ts, ts, False, op_id)
        store.append(encode_operation(Operation(op_id, "create_info", "user", ts, (Change(info, None),))), op_id,
                     after=position)
    store.close()
    with KeywordTree(directory, worker=False) as tree:
        assert tree.get_info(info.id).content == "written through the seam"
        assert tree.last_op_id == op_id
        assert tree.get_keyword(keyword.id).name == "topic"
