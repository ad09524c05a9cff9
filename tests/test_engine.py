"""The Engine: one owner of a directory's log, locks, state and clock, and the facade's only
way to them (issue 14, item 2)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import log_bytes

from kwtree.engine.engine import Engine
from kwtree.engine.events import Stamp
from kwtree.engine.state import State
from kwtree.errors import ClosedError, LockTimeoutError, NotFoundError, ReadOnlyError, StorageError
from kwtree.models import EMPTY_METADATA, ROOT_ID, Change, Keyword, Operation
from kwtree.ops.compaction import compacted_operations, differences
from kwtree.stores.lock import LOCK_NAME, WriterLock
from kwtree.writes import keywords as keyword_commands

ROOT = Path(__file__).resolve().parent.parent


def _root(state: State, stamp: Stamp) -> list[Change]:
    if ROOT_ID in state.keywords:
        return []
    ts = stamp.timestamp
    return [Change(Keyword(ROOT_ID, "root", (), None, "", EMPTY_METADATA, 1, ts, ts, False, stamp.op_id), None)]


def _keyword(name: str):  # type: ignore[no-untyped-def]
    return lambda state, stamp: keyword_commands.create_keyword(state, stamp, name, ROOT_ID, None, "", None)


def _engine(directory: Path, **options: object) -> Engine:
    engine = Engine(directory, writable=True, durable=False, **options)  # type: ignore[arg-type]
    engine.commit("init", _root)
    return engine


def test_commit_applies_writes_and_tells_the_listeners_under_the_locks(tree_dir: Path) -> None:
    engine = _engine(tree_dir)
    seen: list[tuple[str, bool, bool]] = []

    def listener(op: Operation, state: State) -> None:
        # Told after the operation is applied, while the writer lock is still held.
        probe = WriterLock(tree_dir / LOCK_NAME, 0.0)
        try:
            probe.acquire()
            probe.release()
            held = False
        except LockTimeoutError:
            held = True
        finally:
            probe.close()
        seen.append((op.kind, state.last_op_id == op.op_id, held))

    engine.add_commit_listener(listener)
    op = engine.commit("create_keyword", _keyword("alpha"))
    assert op is not None
    keyword = op.changes[0].after
    assert isinstance(keyword, Keyword) and engine.read(lambda state: state.keywords[keyword.id].name) == "alpha"
    assert engine.commit("init", _root) is None  # nothing to write: nothing written, nobody told
    assert seen == [("create_keyword", True, True)]
    engine.close()


def test_a_decider_that_raises_leaves_the_log_and_the_state_and_releases_the_locks(tree_dir: Path) -> None:
    engine = _engine(tree_dir)
    engine.commit("create_keyword", _keyword("alpha"))
    before, count = log_bytes(tree_dir), engine.state.op_count
    with pytest.raises(Exception, match="already"):
        engine.commit("create_keyword", _keyword("alpha"))  # a duplicate sibling
    assert log_bytes(tree_dir) == before and engine.state.op_count == count
    assert engine.commit("create_keyword", _keyword("beta")) is not None  # the locks were released
    engine.close()


def test_writing_catches_up_with_other_writers_and_locked_does_not(tree_dir: Path) -> None:
    mine, other = _engine(tree_dir), _engine(tree_dir)
    other.commit("create_keyword", _keyword("from the other"))
    count = other.state.op_count
    with mine.locked() as state:
        assert state.op_count == count - 1
    with mine.writing() as state:
        assert state.op_count == count
    other.commit("create_keyword", _keyword("again"))
    assert mine.catch_up() == 1
    assert [op.kind for op in mine.history(None, None)] == ["init", "create_keyword", "create_keyword"]
    mine.close()
    other.close()


def test_a_read_only_engine_or_a_view_reads_but_never_writes(tree_dir: Path) -> None:
    _engine(tree_dir).close()
    reader = Engine(tree_dir, writable=False)
    for hold in (reader.locked, reader.writing):
        with pytest.raises(ReadOnlyError, match="read_only=True"), hold():
            pass
    with pytest.raises(ReadOnlyError):
        reader.commit("create_keyword", _keyword("no"))
    assert reader.catch_up() == 0 and reader.read(lambda state: ROOT_ID in state.keywords)
    reader.close()
    with pytest.raises(ClosedError):
        reader.check_open()
    with pytest.raises(NotFoundError, match="is not a kwtree directory"):
        Engine(tree_dir.parent / "absent", writable=False)


def test_replace_log_is_all_or_nothing(tree_dir: Path) -> None:
    engine = _engine(tree_dir, segment_bytes=4096)
    for number in range(40):
        engine.commit("create_keyword", _keyword(f"keyword {number}"))
    before = log_bytes(tree_dir)

    def refuse(_: State) -> None:
        raise StorageError("refused by the check")

    with engine.writing() as state, pytest.raises(StorageError, match="refused by the check"):
        engine.replace_log(compacted_operations(state), refuse)
    assert log_bytes(tree_dir) == before and sorted(p.name for p in tree_dir.iterdir() if "log." in p.name) == []
    with engine.writing() as state:
        size = engine.replace_log(compacted_operations(state), lambda rebuilt: None)
    assert size.operations < 41 and size.size == len(log_bytes(tree_dir))
    engine.commit("create_keyword", _keyword("after the swap"))  # appends to the new log
    fresh = Engine(tree_dir, writable=False)
    assert differences(engine.state, fresh.state) == []
    fresh.close()
    engine.close()


def test_reopen_keeps_the_clock_and_stays_closed_when_its_check_fails(tree_dir: Path) -> None:
    engine = _engine(tree_dir)
    last = engine.commit("create_keyword", _keyword("alpha"))
    assert last is not None

    def refuse(_: State) -> None:
        raise ValueError("not this state")

    with engine.exclusive(), pytest.raises(ValueError):
        engine.reopen(refuse)
    assert engine.closed
    with pytest.raises(ClosedError):
        engine.commit("create_keyword", _keyword("beta"))
    engine.reopen()
    op = engine.commit("create_keyword", _keyword("beta"))
    assert op is not None and op.op_id > last.op_id
    engine.close()


def test_importing_the_facade_loads_no_optional_part() -> None:
    # kwtree/__init__.py is bypassed (another change makes it lazy): the facade alone must not
    # load the whole-directory operations or the snapshot archive code.
    code = (
        "import sys, types\n"
        f"package = types.ModuleType('kwtree'); package.__path__ = [{str(ROOT / 'kwtree')!r}]\n"
        "sys.modules['kwtree'] = package\n"
        "import kwtree.facade.tree\n"
        "print(sorted(m for m in sys.modules if m.startswith(('kwtree.ops', 'kwtree.stores.snapshot'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


ENGINE_PRIVATES = {"_log", "_lock", "_state", "_state_lock", "_mutex", "_closed", "_finalizer", "_clock", "_dir"}


def test_the_facade_and_the_worker_use_the_engine_only_through_its_public_api() -> None:
    files = [*sorted((ROOT / "kwtree" / "facade").glob("*.py")), ROOT / "kwtree" / "cli" / "worker.py"]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for part in ast.walk(target):
                        if (isinstance(part, ast.Attribute) and part.attr.startswith("_")
                                and not (isinstance(part.value, ast.Name) and part.value.id == "self")):
                            found.append(f"{path.name}:{part.lineno} assigns {ast.unparse(part)}")
            if isinstance(node, ast.Attribute) and node.attr in ENGINE_PRIVATES:
                found.append(f"{path.name}:{node.lineno} reads {ast.unparse(node)}")
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and "engine" in ast.unparse(node.value)):
                found.append(f"{path.name}:{node.lineno} reaches into the engine: {ast.unparse(node)}")
    assert found == []
