"""The full-text index knows which version of each entity it holds (``kwtree.caches.fulltext_versions``):
operations that come in below its watermark — a git merge, a branch switch, a compaction — reach
it at the next catch-up; read-only trees search the shared index only while it reflects exactly
their state (watermark and op count), and a search whose index is current compares nothing."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import merge_logs

from kwtree import KeywordTree
from kwtree.caches.fulltext_projection import FullTextProjection
from kwtree.caches.fulltext_versions import VERSIONS_FILE
from kwtree.ops.verify import verify_directory

OPTIONS: dict[str, Any] = {"durability": "none", "worker": False, "embed_async": False}


class Private:
    """How many times a read-only tree moved to a private index in memory, while counting."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def private(monkeypatch: pytest.MonkeyPatch) -> Iterator[Private]:
    seen = Private()
    real = FullTextProjection._go_private

    def counting(projection: FullTextProjection) -> None:
        seen.count += 1
        real(projection)

    monkeypatch.setattr(FullTextProjection, "_go_private", counting)
    yield seen


def _bm25(tree: KeywordTree, query: str) -> list[str]:
    return [hit.info.content for hit in tree.recall(query, k=10, mode="bm25")]


def _branches(tmp_path: Path, **options: Any) -> tuple[Path, Path, dict[str, bytes]]:
    """Two copies of one tree (no caches in the copy), and the log segments they share."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    with KeywordTree(ours, **OPTIONS, **options) as tree:
        tree.create_info("the common root memory about owls")
        assert _bm25(tree, "owls") == ["the common root memory about owls"]
    shutil.copytree(ours, theirs, ignore=shutil.ignore_patterns("cache", "outbox*", "lock"))
    return ours, theirs, {path.name: path.read_bytes() for path in (ours / "log").iterdir()}


def _zebras_then_penguins(ours: Path, theirs: Path, n: int = 1, pad: str = "") -> None:
    with KeywordTree(theirs, **OPTIONS) as tree:  # theirs first: older op ids than ours'
        for i in range(n):
            tree.create_info(f"zebras graze on the savanna {i} {pad}".strip())
    with KeywordTree(ours, **OPTIONS) as tree:
        for i in range(n):
            tree.create_info(f"penguins swim in cold water {i} {pad}".strip())
        assert len(_bm25(tree, "penguins")) == n  # the index's watermark is past theirs' zebras


def test_a_merge_across_segments_reaches_the_index(tmp_path: Path) -> None:
    ours, theirs, base = _branches(tmp_path, segment_bytes=4096)
    _zebras_then_penguins(ours, theirs, n=8, pad="and so on " * 30)
    assert len(list((ours / "log").iterdir())) > len(base)  # ours moved on to a new segment
    merge_logs(ours, theirs, base)
    with KeywordTree(ours, **OPTIONS) as tree:
        assert len(_bm25(tree, "zebras")) == 8
        assert len(_bm25(tree, "penguins")) == 8
    assert verify_directory(ours).ok


def test_a_branch_switch_brings_back_older_versions_and_drops_the_others(tmp_path: Path) -> None:
    ours, theirs, _ = _branches(tmp_path)
    with KeywordTree(theirs, **OPTIONS) as tree:
        zebra = tree.create_info("zebras graze on the savanna")  # older than everything ours writes below
    with KeywordTree(ours, **OPTIONS) as tree:
        (owl,) = tree.recall("owls", mode="bm25")
        tree.update_info(owl.info.id, {"content": "the common root memory, now about falcons"})
        tree.create_info("penguins swim in cold water")
        assert _bm25(tree, "falcons") and _bm25(tree, "penguins")
    with KeywordTree(theirs, **OPTIONS) as tree:
        tree.create_info("yaks live in the mountains")  # theirs' last op is past ours' watermark
    # `git checkout` of theirs' branch in ours: the tracked files change, cache/ stays
    shutil.rmtree(ours / "log")
    shutil.copytree(theirs / "log", ours / "log")
    shutil.copy(theirs / "manifest.json", ours / "manifest.json")
    with KeywordTree(ours, **OPTIONS) as tree:
        assert _bm25(tree, "zebras") == [zebra.content]
        assert _bm25(tree, "owls") == ["the common root memory about owls"]  # the version the switch brought back
        assert _bm25(tree, "falcons") == []
        assert _bm25(tree, "penguins") == []  # its document is gone, not only hidden
        assert tree._caches.fulltext._fulltext.count("info") == 3  # (private: what the index holds)
    assert verify_directory(ours).ok


@pytest.mark.parametrize("damage", ["garble", "delete", "stale"])
def test_a_damaged_record_of_versions_means_every_entity_is_fed_again(tmp_path: Path, damage: str) -> None:
    ours, theirs, base = _branches(tmp_path)
    _zebras_then_penguins(ours, theirs)
    record = ours / "cache" / "fulltext" / VERSIONS_FILE
    kept = record.read_bytes()
    merge_logs(ours, theirs, base)
    if damage == "garble":  # the digests changed, the header (and its check) kept
        header, _, body = kept.partition(b"\n")
        record.write_bytes(header + b"\n" + bytes(len(body)))
    elif damage == "delete":
        record.unlink()
    else:  # a record of another commit: the one before
        header = orjson.loads(kept.partition(b"\n")[0])
        record.write_bytes(kept.replace(orjson.dumps(header["ops"]), orjson.dumps(header["ops"] - 1), 1))
    with KeywordTree(ours, **OPTIONS) as tree:
        assert _bm25(tree, "zebras") == ["zebras graze on the savanna 0"]
        assert tree.tree_metrics()["infos"] == 3
    header = orjson.loads(record.read_bytes().partition(b"\n")[0])
    meta = orjson.loads((ours / "cache" / "fulltext" / "meta.json").read_bytes())
    assert (header["at"], header["ops"]) == (meta["watermark"], meta["ops"])  # recorded again
    assert verify_directory(ours).ok


def test_a_read_only_tree_after_a_merge_finds_the_merged_memories(tmp_path: Path, private: Private) -> None:
    ours, theirs, base = _branches(tmp_path)
    _zebras_then_penguins(ours, theirs)
    merge_logs(ours, theirs, base)
    with KeywordTree(ours, read_only=True) as reader:  # the shared index's op count is not the merged log's
        assert _bm25(reader, "zebras") == ["zebras graze on the savanna 0"]
    assert private.count == 1
    with KeywordTree(ours, **OPTIONS) as tree:
        assert _bm25(tree, "zebras") == ["zebras graze on the savanna 0"]
    private.count = 0
    with KeywordTree(ours, read_only=True) as reader:
        assert _bm25(reader, "zebras") == ["zebras graze on the savanna 0"]
        assert _bm25(reader, "penguins") == ["penguins swim in cold water 0"]
    assert private.count == 0  # once a writable tree caught the index up, readers search it


def test_an_index_without_an_op_count_is_searched_privately_until_a_writer_records_it(
        tree_dir: Path, private: Private) -> None:
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        tree.create_info("zebras graze on the savanna")
        assert _bm25(tree, "zebras")
    meta = tree_dir / "cache" / "fulltext" / "meta.json"
    old = orjson.loads(meta.read_bytes())
    # as kwtree wrote it before the op count was recorded
    meta.write_bytes(orjson.dumps({"format": old["format"], "watermark": old["watermark"]}))
    with KeywordTree(tree_dir, read_only=True) as reader:
        assert _bm25(reader, "zebras") == ["zebras graze on the savanna"]
    assert private.count == 1
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert _bm25(tree, "zebras") == ["zebras graze on the savanna"]
    assert orjson.loads(meta.read_bytes())["ops"] == old["ops"]
    private.count = 0
    with KeywordTree(tree_dir, read_only=True) as reader:
        assert _bm25(reader, "zebras") == ["zebras graze on the savanna"]
    assert private.count == 0


@pytest.mark.parametrize("keep_history", [False, True])
def test_after_a_compaction_read_only_trees_search_the_shared_index(
        tree_dir: Path, private: Private, keep_history: bool) -> None:
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        infos = tree.batch_create_infos([{"content": f"memory {n} about zebras"} for n in range(20)])
        ids = [info.id for info in infos]
        tree.delete_info(ids[0])
        assert len(_bm25(tree, "zebras")) == 10
        tree.compact(keep_history=keep_history)  # rewrites every entity under new op ids (without history)
    for _ in range(3):  # every read, not only the first
        with KeywordTree(tree_dir, read_only=True) as reader:
            assert len(reader.recall("zebras", k=30, mode="bm25")) == 19
    assert private.count == 0
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert len(tree.recall("zebras", k=30, mode="bm25")) == 19
        assert tree._caches.fulltext.compared == 0  # (private: the open found the index current)
    assert verify_directory(tree_dir).ok


def test_a_current_index_compares_no_versions_per_search_or_write(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        tree.batch_create_infos([{"content": f"memory {n} about zebras"} for n in range(20)])
        assert _bm25(tree, "zebras")
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        fulltext = tree._caches.fulltext  # (private: nothing public counts the comparisons)
        for n in range(5):
            assert _bm25(tree, "zebras")
            tree.create_info(f"a later memory {n} about kites")
            assert len(_bm25(tree, "kites")) == n + 1
        assert fulltext.compared == 0
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert len(_bm25(tree, "kites")) == 5  # the first sync of a process finds the index current
        tree.create_info("one more memory about kites")
        assert len(_bm25(tree, "kites")) == 6  # then its writes are fed with the record read from its file
        assert tree._caches.fulltext.compared == 0
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        # A process that writes before it first syncs (a hook: open, commit, close) feeds only
        # its writes when the index reflects the state it opened (the same last op id and op count).
        tree.create_info("a write before any search")
        assert len(_bm25(tree, "kites")) == 6
        assert tree._caches.fulltext.compared == 0
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        other = KeywordTree(tree_dir, **OPTIONS)  # another writer, whose write this tree reads first
        other.create_info("a memory about kites from elsewhere")
        other.close()
        tree.refresh()
        tree.create_info("and another about kites")
        assert len(_bm25(tree, "kites")) == 8
        assert tree._caches.fulltext.compared == 1  # its state moved by more than its own writes
