"""The vector cache knows its position (issue 28): an open whose caches are current hashes
nothing and reads no vector; what was written after the position, a lost outbox row, damage
to the vector files and a git merge below the position are still found, on real files."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import merge_logs

from kwtree import KeywordTree
from kwtree.caches import vector_projection
from kwtree.caches.embed import HashEmbedder
from kwtree.cli.worker import serve_outbox
from kwtree.ops import git as kwgit
from kwtree.ops.verify import verify_directory
from kwtree.stores import vectors as vector_store
from kwtree.stores.vector_files import VECTORS_FILE

LIMIT = 30.0
OPTIONS: dict[str, Any] = {"durability": "none", "embedder": HashEmbedder()}
TEXTS = [f"memory {n} about {topic}" for n, topic in enumerate(
    ["green tea", "the harbour", "sourdough bread", "jazz records", "rust lifetimes", "hiking boots"] * 5)]


class Counts:
    """How many texts the tree hashed and how many vectors it checked, while counting."""

    def __init__(self) -> None:
        self.hashed = 0
        self.checked = 0


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counts]:
    seen = Counts()

    def counting(module: Any, name: str, field: str) -> None:
        real: Callable[..., Any] = getattr(module, name)

        def wrapper(*args: Any) -> Any:
            setattr(seen, field, getattr(seen, field) + 1)
            return real(*args)

        monkeypatch.setattr(module, name, wrapper)

    counting(vector_projection, "content_hash", "hashed")
    real_sound = vector_store.VectorStore._row_sound

    def sound(store: vector_store.VectorStore, row: int) -> bool:
        if store._row_state[row] == vector_store._UNCHECKED:  # its vector is read to be checked
            seen.checked += 1
        return real_sound(store, row)

    monkeypatch.setattr(vector_store.VectorStore, "_row_sound", sound)
    yield seen


def _filled(directory: Path) -> list[str]:
    with KeywordTree(directory, **OPTIONS) as tree:
        ids = [info.id for info in tree.batch_create_infos([{"content": text} for text in TEXTS])]
        assert tree.wait_indexed(LIMIT)
    return ids


def _vector_ids(tree: KeywordTree, query: str) -> list[str]:
    return [hit.info.id for hit in tree.recall(query, k=len(TEXTS) + 5, mode="vector")]


def test_an_open_with_current_caches_hashes_nothing_and_reads_no_vector(tree_dir: Path, counts: Counts) -> None:
    _filled(tree_dir)
    counts.hashed = counts.checked = 0
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)  # (the open's scan has run)
        assert (counts.hashed, counts.checked) == (0, 0)


def test_an_open_hashes_only_what_was_written_after_the_position(tree_dir: Path, counts: Counts) -> None:
    _filled(tree_dir)
    with KeywordTree(tree_dir, **OPTIONS, worker=False) as tree:  # writes whose vectors wait for a worker
        late = tree.create_info("a memory written after the position, about kites")
    counts.hashed = counts.checked = 0
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)
        assert counts.hashed == 2  # the late memory's text only: by the scan, then by its embedding
        assert counts.checked == 0
        assert late.id in _vector_ids(tree, "kites")


def test_a_lost_outbox_row_after_the_position_is_found(tree_dir: Path) -> None:
    _filled(tree_dir)
    with KeywordTree(tree_dir, **OPTIONS, worker=False) as tree:
        late = tree.create_info("a memory whose outbox row is lost, about lanterns")
    (tree_dir / "outbox.jsonl").unlink()
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)
        assert late.id in _vector_ids(tree, "lanterns")


def test_vector_files_damaged_in_place_are_checked_again(tree_dir: Path, counts: Counts) -> None:
    ids = _filled(tree_dir)
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        kept = _vector_ids(tree, "green tea")
    (store,) = (tree_dir / "cache" / "vectors").iterdir()
    with open(store / VECTORS_FILE, "r+b") as f:  # the same file (inode), its middle garbled
        size = f.seek(0, 2)
        f.seek(size // 2)
        f.write(bytes(64))
    counts.hashed = counts.checked = 0
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)
        assert counts.checked >= len(ids)  # every row checked again (the damaged ones erased)
        assert _vector_ids(tree, "green tea") == kept


def test_a_merge_below_the_position_is_embedded(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    _filled(ours)
    shutil.copytree(ours, theirs)
    base = {path.name: path.read_bytes() for path in (ours / "log").iterdir()}
    with KeywordTree(theirs, **OPTIONS) as tree:
        zebra = tree.create_info("zebras graze on the savanna")  # an older op id than ours below
        assert tree.wait_indexed(LIMIT)
    with KeywordTree(ours, **OPTIONS) as tree:
        tree.create_info("penguins swim in cold water")
        assert tree.wait_indexed(LIMIT)  # ours records its position past theirs' zebra
    for name, segment in base.items():
        merged = kwgit.merge_segments(segment, (ours / "log" / name).read_bytes(), (theirs / "log" / name).read_bytes())
        (ours / "log" / name).write_bytes(merged)
    with KeywordTree(ours, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)
        assert zebra.id in _vector_ids(tree, "zebras graze on the savanna")


def test_a_garbled_position_means_a_full_scan(tree_dir: Path, counts: Counts) -> None:
    ids = _filled(tree_dir)
    (store,) = (tree_dir / "cache" / "vectors").iterdir()
    position = store / vector_projection.POSITION_FILE
    position.write_bytes(position.read_bytes().replace(b'"op":"', b'"op":"f'))  # a later op, check unchanged
    counts.hashed = counts.checked = 0
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)
        assert counts.checked >= len(ids) and counts.hashed >= len(ids)


def test_a_merge_of_logs_that_moved_on_to_new_segments_is_embedded(tmp_path: Path) -> None:
    # Found in review: the merge note only follows the shared segment's operations, so a rule
    # keyed on notes missed the other branch's newer segments below the position.
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    with KeywordTree(ours, segment_bytes=4096, **OPTIONS) as tree:
        tree.create_info("the common root memory")
        assert tree.wait_indexed(LIMIT)
    shutil.copytree(ours, theirs, ignore=shutil.ignore_patterns("cache", "outbox*", "lock"))
    base = {path.name: path.read_bytes() for path in (ours / "log").iterdir()}
    with KeywordTree(theirs, **OPTIONS) as tree:  # theirs first: older op ids
        zebras = [tree.create_info(f"zebra fact {n}: zebras graze on the savanna " + "and so on " * 30).id
                  for n in range(8)]
    with KeywordTree(ours, **OPTIONS) as tree:
        for n in range(8):
            tree.create_info(f"penguin fact {n}: penguins swim in cold water " + "and so on " * 30)
        assert tree.wait_indexed(LIMIT)
    assert len(list((ours / "log").iterdir())) > len(base)  # ours moved on to a new segment
    merge_logs(ours, theirs, base)
    with KeywordTree(ours, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)
        assert set(zebras) <= set(_vector_ids(tree, "zebras graze on the savanna"))


def test_a_switch_to_a_branch_with_older_operations_is_embedded(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    with KeywordTree(ours, **OPTIONS) as tree:
        tree.create_info("the common root memory")
        assert tree.wait_indexed(LIMIT)
    shutil.copytree(ours, theirs, ignore=shutil.ignore_patterns("cache", "outbox*", "lock"))
    with KeywordTree(theirs, **OPTIONS, worker=False) as tree:
        zebra = tree.create_info("zebras graze on the savanna")  # an older id than ours' position
    with KeywordTree(ours, **OPTIONS) as tree:
        tree.create_info("penguins swim in cold water")
        assert tree.wait_indexed(LIMIT)  # the position is recorded here
    with KeywordTree(theirs, **OPTIONS, worker=False) as tree:
        tree.create_info("yaks live in the mountains")  # theirs' last op is above ours' position
    # `git checkout` of theirs' branch in ours: the tracked files change, cache/ stays
    shutil.rmtree(ours / "log")
    shutil.copytree(theirs / "log", ours / "log")
    shutil.copy(theirs / "manifest.json", ours / "manifest.json")
    with KeywordTree(ours, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)
        assert zebra.id in _vector_ids(tree, "zebras graze on the savanna")


def test_damage_under_an_open_writer_is_never_recorded_as_sound(tree_dir: Path) -> None:
    # Found in review: a position recorded after damage done while the tree was open vouched
    # for the garbled row, and every later open searched it.
    ids = _filled(tree_dir)
    (store,) = (tree_dir / "cache" / "vectors").iterdir()
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)  # the open's scan trusts the rows
        kept = _vector_ids(tree, "green tea")
        row_bytes = 4 * HashEmbedder().dim
        with open(store / VECTORS_FILE, "r+b") as f:  # in place: the first row := the second's vector
            f.seek(row_bytes)
            second = f.read(row_bytes)
            f.seek(0)
            f.write(second)
        tree.create_info("a later memory about kites")  # a write: its embedding, then a new position
        assert tree.wait_indexed(LIMIT)
    with KeywordTree(tree_dir, **OPTIONS) as tree:
        assert tree.wait_indexed(LIMIT)
        assert _vector_ids(tree, "green tea") == kept
    assert ids and verify_directory(tree_dir).ok


def test_a_kwtree_worker_records_the_position_for_the_next_open(tree_dir: Path, counts: Counts) -> None:
    _filled(tree_dir)
    stop = threading.Event()
    worker = threading.Thread(target=serve_outbox, args=(tree_dir, HashEmbedder()), kwargs={"stop": stop})
    worker.start()
    try:
        with KeywordTree(tree_dir, **OPTIONS, worker=False) as tree:  # a hook: the worker embeds its write
            late = tree.create_info("a memory the worker embeds, about kites")
        deadline = time.monotonic() + LIMIT
        while _recorded_op(tree_dir) != late.op_id:  # the worker embedded it and recorded the position
            assert time.monotonic() < deadline, "the worker did not record a position past the hook's memory"
            time.sleep(0.05)
        counts.hashed = counts.checked = 0
        with KeywordTree(tree_dir, **OPTIONS) as tree:
            assert tree.wait_indexed(LIMIT)
            assert counts.checked == 0
    finally:
        stop.set()
        worker.join(LIMIT)


def _recorded_op(tree_dir: Path) -> str | None:
    """The op id of the vector store's recorded position, if any."""
    found = list((tree_dir / "cache" / "vectors").glob(f"*/{vector_projection.POSITION_FILE}"))
    return orjson.loads(found[0].read_bytes())["op"] if found else None
