"""The state checkpoint (``kwtree.engine.checkpoint``): a large tree opens from it and the
operations after it; a stale, damaged or forged one is ignored and reported, never trusted;
one never outlives a log a forget rewrote."""

from __future__ import annotations

import io
import logging
import os
import pickle
import re
import shutil
import zlib
from pathlib import Path

import orjson
import pytest
from helpers import copy_tree_dir

from kwtree import CorruptLogError, KeywordTree
from kwtree.engine import checkpoint
from kwtree.engine.state import State
from kwtree.ops.repair import repair_directory
from kwtree.ops.verify import verify_directory
from kwtree.testing import assert_replay_equivalent

CKPT = Path("cache") / checkpoint.CHECKPOINT_NAME
FIELDS = [name for name in State.__slots__ if name != "keyword_journal"]


@pytest.fixture(autouse=True)
def every_close_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small logs get checkpoints too, at every writable close that follows a write."""
    monkeypatch.setattr(checkpoint, "MIN_LOG_BYTES", 1)


def fill(tree: KeywordTree, n: int = 40, tag: str = "") -> None:
    parents = [k.id for k in tree.batch_create_keywords([{"name": f"topic {tag}{i}", "aliases": [f"t{tag}{i}"]}
                                                         for i in range(n // 4)])]
    kids = tree.batch_create_keywords([{"name": f"leaf {i}", "parent_id": parents[i % len(parents)]} for i in range(n)])
    infos = tree.batch_create_infos([{"content": f"memory {i}", "keyword_ids": [kids[i].id], "metadata": {"i": i}}
                                     for i in range(n)])
    tree.relate(parents[0], parents[1], "related_to", 0.5, "because")
    tree.update_info(infos[0].id, {"content": "changed"})
    tree.delete_keyword(kids[1].id)
    tree.move_keyword(kids[2].id, parents[-1])


def replayed(directory: Path) -> State:
    """The state a full replay gives (the checkpoint moved aside meanwhile)."""
    aside = directory / "cache" / "aside"
    (directory / CKPT).rename(aside)
    try:
        with KeywordTree(directory, read_only=True, worker=False) as tree:
            return tree._engine.state
    finally:
        aside.rename(directory / CKPT)


def assert_same_state(ours: State, theirs: State) -> None:
    for name in FIELDS:
        assert getattr(ours, name) == getattr(theirs, name), name
    # Arrival orders are part of the state: children, names and link order.
    assert {k: list(v) for k, v in ours.children.items()} == {k: list(v) for k, v in theirs.children.items()}
    assert [list(v) for v in ours.infos_by_keyword.values()] == [list(v) for v in theirs.infos_by_keyword.values()]


def opened(directory: Path) -> KeywordTree:
    return KeywordTree(directory, read_only=True, worker=False)


def test_a_closed_tree_opens_from_its_checkpoint_and_the_operations_after_it(tree_dir, caplog):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
    assert (tree_dir / CKPT).exists()
    with KeywordTree(tree_dir, worker=False) as tree:
        assert tree._engine._checkpointed > 0  # read from the checkpoint
        assert_same_state(tree._engine.state, replayed(tree_dir))
        assert_replay_equivalent(tree)
        later = tree.create_keyword("after the checkpoint")
        tree.create_info("a memory after it", keyword_ids=[later.id])
    with KeywordTree(tree_dir, worker=False) as writer, opened(tree_dir) as reader:
        assert reader.get_keyword(later.id).name == "after the checkpoint"
        writer.create_keyword("newer still")  # appended after this reader's open: refresh reads it
        reader.refresh()
        assert [k.name for k in reader.find_keywords("newer still")] == ["newer still"]
    assert_same_state(opened(tree_dir).__enter__()._engine.state, replayed(tree_dir))
    assert "state checkpoint" not in caplog.text  # nothing stale or damaged on the way


def test_it_is_rewritten_only_when_the_log_grew_by_a_quarter(tree_dir):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree, 200)
    first = (tree_dir / CKPT).stat().st_mtime_ns
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.create_keyword("one more")  # a few bytes: the checkpoint stays as it is
    assert (tree_dir / CKPT).stat().st_mtime_ns == first
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree, 200, "again ")
    assert (tree_dir / CKPT).stat().st_mtime_ns != first
    with KeywordTree(tree_dir, worker=False) as tree:
        assert_same_state(tree._engine.state, replayed(tree_dir))


def test_read_only_opens_and_views_write_none_and_views_do_not_read_one(tree_dir):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
        first = tree.history()[-1].op_id
    (tree_dir / CKPT).unlink()
    with opened(tree_dir) as reader:
        assert reader.get_children("root")
    assert not (tree_dir / CKPT).exists()
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.create_keyword("x")
    assert (tree_dir / CKPT).exists()
    with KeywordTree(tree_dir, as_of=first, worker=False) as view:
        assert view._engine._checkpointed == 0 and view.last_op_id == first


def _rewrite(directory: Path, change) -> None:
    path = directory / CKPT
    data = path.read_bytes()
    path.write_bytes(change(data))


def _with_payload(data: bytes, payload: bytes) -> bytes:
    """A checkpoint whose payload is ``payload``, its header's checksum made to match."""
    magic = b"kwtree state checkpoint\n"
    end = data.index(b"\n", len(magic))
    header = orjson.loads(data[len(magic):end])
    header["payload_bytes"], header["payload_crc"] = len(payload), zlib.crc32(payload)
    return magic + orjson.dumps(header) + b"\n" + payload


def _short_column(data: bytes) -> bytes:
    """The checkpoint with one keyword column a row short (its checksum made to match): a
    file whose columns disagree, which only a forger or a bug could write (found by review:
    the open took it and a later read raised IndexError)."""
    magic = b"kwtree state checkpoint\n"
    start = data.index(b"\n", len(magic)) + 1
    snapshot = checkpoint._Unpickler(io.BytesIO(data[start:])).load()
    snapshot["entities"][0][1] = snapshot["entities"][0][1][:-1]
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.dispatch_table = checkpoint._reducers()
    pickler.dump(snapshot)
    return _with_payload(data, out.getvalue())


@pytest.mark.parametrize("damage", ["flipped byte", "cut short", "not a checkpoint", "forged global",
                                    "wrong layout", "columns disagree"])
def test_a_damaged_or_forged_checkpoint_is_ignored_and_reported(tree_dir, caplog, damage, tmp_path):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
    expected = replayed(tree_dir)
    witness = tmp_path / "ran"
    if damage == "flipped byte":
        _rewrite(tree_dir, lambda d: d[:-100] + bytes([d[-100] ^ 0x40]) + d[-99:])
    elif damage == "cut short":
        _rewrite(tree_dir, lambda d: d[: len(d) // 2])
    elif damage == "not a checkpoint":
        _rewrite(tree_dir, lambda d: b"hello\n" + d)
    elif damage == "columns disagree":
        _rewrite(tree_dir, _short_column)
    elif damage == "forged global":  # a valid pickle that would run a command if loaded blindly
        forged = pickle.dumps(type("X", (), {"__reduce__": lambda self: (os.system, (f"touch {witness}",))})())
        _rewrite(tree_dir, lambda d: _with_payload(d, forged))
    else:
        _rewrite(tree_dir, lambda d: d.replace(b'"layout":', b'"layout":1', 1))
    caplog.set_level(logging.INFO, "kwtree.engine.replay")
    with opened(tree_dir) as tree:
        assert_same_state(tree._engine.state, expected)
        assert tree._engine._checkpointed == 0
    assert "state checkpoint" in caplog.text
    level = logging.INFO if damage == "wrong layout" else logging.WARNING
    assert any(r.levelno == level and "state checkpoint" in r.getMessage() for r in caplog.records)
    assert not witness.exists()


def test_a_changed_byte_of_the_log_it_covers_makes_it_stale_and_the_replay_reports_the_damage(tree_dir, caplog):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
    (segment,) = sorted((tree_dir / "log").glob("*.jsonl"))
    data = bytearray(segment.read_bytes())
    at = data.index(b'"memory 3"')
    data[at + 1] = ord("M")  # valid JSON still: only the operation's checksum tells
    segment.write_bytes(bytes(data))
    caplog.set_level(logging.INFO, "kwtree.engine.replay")
    with pytest.raises(CorruptLogError):
        opened(tree_dir)
    assert "is not current" in caplog.text


def test_operations_merged_into_the_log_after_it_are_replayed_in_op_id_order(tree_dir, tmp_path):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
    other = copy_tree_dir(tree_dir, tmp_path / "other")
    with KeywordTree(other, worker=False) as theirs:
        theirs.create_keyword("written elsewhere first")
    with KeywordTree(tree_dir, worker=False) as ours:
        ours.create_keyword("written here later")
    # As a git merge of the two leaves it: our log, then their operation (an older op id) appended.
    (ours_segment,) = sorted((tree_dir / "log").glob("*.jsonl"))
    (theirs_segment,) = sorted((other / "log").glob("*.jsonl"))
    ours_data, theirs_data = ours_segment.read_bytes(), theirs_segment.read_bytes()
    same = next(at for at, (a, b) in enumerate(zip(ours_data, theirs_data, strict=False)) if a != b)
    shared = ours_data.rindex(b"\n", 0, same) + 1  # the lines both have
    with open(ours_segment, "ab") as out:
        out.write(theirs_segment.read_bytes()[shared:])
    with opened(tree_dir) as tree:
        names = {k.name for k in tree.find_keywords("written elsewhere first")}
        assert names == {"written elsewhere first"}
        assert_same_state(tree._engine.state, replayed(tree_dir))


def test_a_replaced_log_leaves_no_checkpoint_and_a_reader_of_the_old_one_writes_none(tree_dir):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
        secret = tree.create_info("my secret is quokka").id
    assert b"quokka" in (tree_dir / CKPT).read_bytes()
    stale = KeywordTree(tree_dir, worker=False)  # opened from the checkpoint, holds the text
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.forget(secret)
        assert not (tree_dir / CKPT).exists()  # gone with the old log
    assert b"quokka" not in (tree_dir / CKPT).read_bytes()  # (the forgetting tree's close wrote the new one's)
    stale.create_keyword("written after the forget")  # it reads the new log first, then writes
    stale.close()
    assert b"quokka" not in (tree_dir / CKPT).read_bytes()
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.compact()
        assert not (tree_dir / CKPT).exists()


def test_a_writer_of_the_old_log_that_never_read_the_new_one_writes_no_checkpoint(tree_dir):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
        secret = tree.create_info("my secret is quokka").id
    stale = KeywordTree(tree_dir, worker=False)
    stale.create_keyword("grows the log past the checkpoint")
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.forget(secret)
    current = (tree_dir / CKPT).read_bytes()  # the forgetting tree's, of the new log
    assert b"quokka" not in current
    stale._engine._checkpointed = 0  # due, whatever it read
    assert stale._engine.save_checkpoint() is None  # its state is of the old log
    stale.close()
    assert (tree_dir / CKPT).read_bytes() == current


def _verdict(directory: Path) -> list[tuple[str, str]]:
    return [(f.severity, f.message) for f in verify_directory(directory).findings if f.code == "state-checkpoint"]


def test_verify_says_what_the_checkpoint_is_and_repair_deletes_a_false_one(tree_dir):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
    (severity, message), = _verdict(tree_dir)
    assert severity == "info" and message.startswith("current: it covers")
    with KeywordTree(tree_dir, worker=False) as tree:
        tree.create_keyword("after it")  # (a few bytes: not rewritten at close)
    assert _verdict(tree_dir)[0][1].startswith("current")  # and the operation after it is replayed onto it
    # A file that passes every check but holds another state: only a comparison finds it.
    _rewrite(tree_dir, lambda d: _with_payload(d, d[d.index(b"\n", 24) + 1:].replace(b"leaf 7", b"LEAF 7", 1)))
    (severity, message), = _verdict(tree_dir)
    assert severity == "error" and "keywords" in message
    repaired = repair_directory(tree_dir)
    assert any(f.code == "removed-cache" and f.file == str(CKPT) for f in repaired.findings)
    assert not (tree_dir / CKPT).exists() and _verdict(tree_dir) == []


@pytest.mark.parametrize("damage", ["stale", "damaged"])
def test_verify_reports_a_stale_or_damaged_checkpoint_without_an_error(tree_dir, damage):
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
    if damage == "stale":
        _rewrite(tree_dir, lambda d: d.replace(b'"generation":"', b'"generation":"9', 1))
    else:
        _rewrite(tree_dir, lambda d: d[:-10])
    (severity, message), = _verdict(tree_dir)
    expected = ("info", "not current") if damage == "stale" else ("warning", "damaged")
    assert (severity, message.split(" (")[0]) == expected
    assert not any(f.severity == "error" for f in verify_directory(tree_dir).findings)


def _replace_segments(directory: Path, source: Path) -> None:
    """What a git checkout does to a tree's log: the segment files rewritten in place."""
    for segment in (directory / "log").glob("*.jsonl"):
        segment.unlink()
    for segment in (source / "log").glob("*.jsonl"):
        shutil.copy(segment, directory / "log" / segment.name)


def test_a_writer_whose_log_was_rewritten_in_place_under_it_writes_no_checkpoint(tree_dir, tmp_path):
    # Found by review: the close took the CRCs of the files as they were then, with the state
    # of the files it had read; every later open trusted that pairing.
    with KeywordTree(tree_dir, worker=False) as tree:
        base = tree.create_keyword("base")
    other = copy_tree_dir(tree_dir, tmp_path / "other")
    with KeywordTree(other, worker=False) as theirs:
        theirs.create_info("theirs AAAA", keyword_ids=[base.id])  # the same length as ours
    writer = KeywordTree(tree_dir, worker=False)
    writer.create_info("secret BBBB", keyword_ids=[base.id])
    _replace_segments(tree_dir, other)
    writer._engine._checkpointed = 0  # (due)
    assert writer._engine.save_checkpoint() is None
    writer.close()
    with opened(tree_dir) as tree:
        assert sorted(i.content for i in tree._engine.state.infos.values()) == ["theirs AAAA"]


def test_the_head_an_open_from_a_checkpoint_writes_after_is_the_log_s_own(tree_dir):
    # Found by review: the head came from the file's header, which no checksum covered; one
    # changed digit broke the log's hash chain at the next write. It is read from the log now.
    with KeywordTree(tree_dir, worker=False) as tree:
        fill(tree)
        head = tree._engine.head
    forged = b'"head":"' + b"0" * 64 + b'"'
    _rewrite(tree_dir, lambda d: re.sub(rb'"head":"[0-9a-f]{64}"', forged, d, count=1) if b'"head":"' in d
             else d.replace(b'"layout":', forged + b',"layout":', 1))
    with KeywordTree(tree_dir, worker=False) as tree:
        assert tree._engine._checkpointed > 0 and tree._engine.head == head
        tree.create_keyword("written after it")
    assert not any(f.severity == "error" for f in verify_directory(tree_dir).findings)


def test_a_writable_open_deletes_a_checkpoint_it_cannot_use(tree_dir, tmp_path, monkeypatch):
    # Found by review: a forget that reached this directory through git left its stale
    # checkpoint, with the erased text, on disk for as long as no close wrote a new one.
    with KeywordTree(tree_dir, worker=False) as tree:
        base = tree.create_keyword("base")
        secret = tree.create_info("my secret is quokka", keyword_ids=[base.id]).id
    other = copy_tree_dir(tree_dir, tmp_path / "other")
    with KeywordTree(other, worker=False) as theirs:
        theirs.forget(secret)
    _replace_segments(tree_dir, other)
    monkeypatch.setattr(checkpoint, "MIN_LOG_BYTES", 4 << 20)  # (no close writes a new one)
    with opened(tree_dir):
        pass
    assert b"quokka" in (tree_dir / CKPT).read_bytes()  # a reader writes nothing, not even a deletion
    with KeywordTree(tree_dir, worker=False):
        pass
    assert not (tree_dir / CKPT).exists()
