"""The Engine reaches the durable log only through the log-store seam (issue 14, item 3): it
imports none of the JSONL store's parts, and it takes its store from a factory, so another
store (PostgreSQL, in a later issue) plugs in where the JSONL ``SegmentStore`` is the default."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from kwtree.engine.engine import Engine
from kwtree.engine.events import Stamp
from kwtree.engine.state import State
from kwtree.errors import StorageError
from kwtree.models import EMPTY_METADATA, ROOT_ID, Change, Keyword
from kwtree.ops.compaction import compacted_operations, differences
from kwtree.stores.logstore import Batch, LogStore, Position
from kwtree.stores.segments import SegmentStore

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "kwtree" / "engine" / "engine.py"
JSONL_PARTS = ("kwtree.stores.eventlog", "kwtree.stores.lock", "kwtree.stores.logswap")


def _imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports, function-level imports included (``from a import b``
    counts as both ``a`` and ``a.b``, so that importing a submodule by its package shows)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_engine_imports_none_of_the_jsonl_store_parts() -> None:
    imported = _imported_modules(ENGINE)
    assert "kwtree.stores.logstore" in imported  # (the walk sees the engine's imports)
    assert [name for name in imported if name.startswith(JSONL_PARTS)] == []


def test_the_engine_names_the_default_store_in_one_place() -> None:
    # SegmentStore is the default of the ``log_store`` factory and the type the JSONL-only
    # calls ask for; nothing else of the JSONL store is constructed or reached.
    source = ENGINE.read_text()
    assert source.count("SegmentStore(") == 0
    assert "log_store: LogStoreFactory = SegmentStore" in source


class RecordingStore:
    """A LogStore that is not the JSONL one: it hands every call to a ``SegmentStore`` and
    records what the engine asked of it."""

    def __init__(self, directory: Path, *, writable: bool, durable: bool, lock_timeout: float) -> None:
        self.inner = SegmentStore(directory, writable=writable, durable=durable, lock_timeout=lock_timeout)
        self.calls: list[str] = []
        OPENED.append(self)

    @property
    def chained(self) -> bool:
        return self.inner.chained

    def tail(self, after: Position | None) -> Iterator[Batch]:
        self.calls.append("tail")
        return self.inner.tail(after)

    def read(self, after: Position | None) -> Iterator[Batch]:
        self.calls.append("read")
        return self.inner.read(after)

    def append(self, encoded: bytes, op_id: str, *, after: Position | None, sync: bool = True) -> Position:
        self.calls.append("append")
        return self.inner.append(encoded, op_id, after=after, sync=sync)

    def replace(self, operations: Iterable[tuple[str, bytes]], *, after: Position | None,
                check: Callable[[Iterator[Batch]], None] | None = None) -> Position:
        self.calls.append("replace")
        return self.inner.replace(operations, after=after, check=check)

    def locked(self) -> AbstractContextManager[None]:
        self.calls.append("locked")
        return self.inner.locked()

    def close(self) -> None:
        self.calls.append("close")
        self.inner.close()


OPENED: list[RecordingStore] = []


def _root(state: State, stamp: Stamp) -> list[Change]:
    if ROOT_ID in state.keywords:
        return []
    ts = stamp.timestamp
    return [Change(Keyword(ROOT_ID, "root", (), None, "", EMPTY_METADATA, 1, ts, ts, False, stamp.op_id), None)]


def _keyword(name: str) -> Callable[[State, Stamp], list[Change]]:
    from kwtree.writes import keywords as keyword_commands

    return lambda state, stamp: keyword_commands.create_keyword(state, stamp, name, ROOT_ID, None, "", None)


def test_the_engine_writes_reads_and_replaces_the_log_through_the_store_it_is_given(tree_dir: Path) -> None:
    OPENED.clear()
    engine = Engine(tree_dir, writable=True, durable=False, segment_bytes=4096, log_store=RecordingStore)
    store = OPENED[-1]
    assert isinstance(store, LogStore)
    engine.commit("init", _root)
    for number in range(30):
        engine.commit("create_keyword", _keyword(f"keyword {number}"))
    assert store.calls.count("append") == 31 and store.calls.count("locked") == 31
    assert [op.kind for op in engine.history(None, 2)] == ["create_keyword", "create_keyword"]
    assert "read" in store.calls
    with engine.writing() as state:
        size = engine.replace_log(compacted_operations(state), lambda rebuilt: None)
    assert "replace" in store.calls and 0 < size.operations < 31
    engine.commit("create_keyword", _keyword("after the swap"))  # appends to the new log
    with engine.exclusive():
        engine.reopen()  # the factory opens the store again
    assert store.calls[-1] == "close" and OPENED[-1] is not store
    fresh = Engine(tree_dir, writable=False)
    assert differences(engine.state, fresh.state) == [] and fresh.state.op_count == engine.state.op_count
    fresh.close()
    # What reads the segment files themselves says that it needs the JSONL store; the size of
    # the log comes from a store that can tell it (size()), and this one cannot.
    segments_only = pytest.raises(StorageError, match=r"JSONL segments of a tree's directory; the log .* is in "
                                                      "RecordingStore")
    with segments_only, engine.exclusive():
        engine.cut_log(lambda segments, position, rewritten: None)  # what a snapshot takes
    with pytest.raises(StorageError, match="RecordingStore cannot tell the size of its log"):
        engine.log_size()
    first = engine.history(None, None)[1]
    with engine.exclusive():  # undo's lookup of one operation reads any store from its start
        found = engine.find_operation(first.op_id)
    assert found is not None and found.op_id == first.op_id and found.kind == "create_keyword"
    engine.close()
    assert OPENED[-1].calls[-1] == "close"


def test_two_engines_writing_in_turn_across_segments_each_see_every_operation(tree_dir: Path) -> None:
    # The catch-up before each write answers "nothing new" without reading the log through;
    # here something is always new (the other engine's write), often in a segment started
    # since, and each engine must apply it before its own.
    first = Engine(tree_dir, writable=True, durable=False, segment_bytes=4096)
    first.commit("init", _root)
    second = Engine(tree_dir, writable=True, durable=False)
    for number in range(60):
        writer = first if number % 3 else second
        writer.commit("create_keyword", _keyword(f"keyword {number}"))
    assert len(list((tree_dir / "log").glob("*.jsonl"))) > 2
    first.catch_up()
    second.catch_up()
    fresh = Engine(tree_dir, writable=False)
    for engine in (first, second):
        assert differences(engine.state, fresh.state) == [] and engine.state.op_count == fresh.state.op_count == 61
    for engine in (fresh, first, second):
        engine.close()
