"""Issue 13, item 11 (e): a damaged full-text index is never silent.

A bit flip inside a tantivy segment can leave the index readable while it returns other
documents or scores. ``verify()`` compares the index with the log (segment checksums, counts,
stored keys, sampled documents and term counts) and reports ``fulltext-mismatch``;
``repair()`` deletes it and the tree rebuilds it from the log.
"""

from __future__ import annotations

import logging
import random
import shutil
from pathlib import Path

import pytest

from kwtree import KeywordTree
from kwtree.verify import verify_directory

WORDS = "apple banana cherry delta echo foxtrot golf hotel india juliet kilo lima mike".split()
QUERIES = ("apple banana", "kilo", "item7 golf", "juliet")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("fulltext") / "tree"
    rnd = random.Random(1)
    with KeywordTree(directory, durability="none", worker=False) as tree:
        for n in range(200):
            tree.create_info(" ".join(rnd.choice(WORDS) for _ in range(12)) + f" item{n}")
        tree.recall("apple")
    return directory


def _results(directory: Path) -> list[tuple[str, float]]:
    with KeywordTree(directory, read_only=True, worker=False) as tree:
        return [(hit.info.id, round(hit.bm25 or 0.0, 4)) for q in QUERIES for hit in tree.recall(q, k=10, mode="bm25")]


def _mismatch(directory: Path) -> list[str]:
    return [f.message for f in verify_directory(directory).findings if f.code == "fulltext-mismatch"]


def _flipped(base: Path, target: Path, name: str, position: int) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(base, target, ignore=shutil.ignore_patterns("lock"))
    path = target / "cache" / "fulltext" / "index" / name
    data = bytearray(path.read_bytes())
    data[position] ^= 0x04
    path.write_bytes(bytes(data))
    return target


def _segment_files(base: Path) -> list[Path]:
    index = base / "cache" / "fulltext" / "index"
    return sorted(p for p in index.iterdir() if p.suffix in (".idx", ".store", ".term", ".pos", ".fieldnorm", ".fast"))


def test_an_intact_index_passes(base: Path) -> None:
    assert _mismatch(base) == []


def test_every_bit_flip_in_a_segment_is_reported_and_silent_ones_exist(base: Path, tmp_path: Path) -> None:
    logging.disable(logging.WARNING)  # tantivy's complaints about the damage it notices
    try:
        original = _results(base)
        silent = 0
        for path in _segment_files(base):
            data_end = path.stat().st_size - 128  # before tantivy's footer
            for position in range(0, max(data_end, 1), max(data_end // 6, 1)):
                copy = _flipped(base, tmp_path / "copy", path.name, position)
                try:
                    changed = _results(copy) != original
                except BaseException:  # noqa: BLE001 -- tantivy noticed (an error or a panic): not silent
                    changed = False
                silent += changed
                assert _mismatch(copy), f"a flip at {path.name}:{position} went unreported"
        assert silent, "no flip changed the results silently: the premise of this test is gone"
    finally:
        logging.disable(logging.NOTSET)


def test_repair_rebuilds_a_damaged_index(base: Path, tmp_path: Path) -> None:
    original = _results(base)
    store = next(p for p in _segment_files(base) if p.suffix == ".store")
    copy = _flipped(base, tmp_path / "copy", store.name, store.stat().st_size // 3)
    assert _mismatch(copy)
    with KeywordTree(copy, worker=False) as tree:
        tree.repair()
        assert _results(copy) == original
    assert _mismatch(copy) == []
    assert verify_directory(copy).ok


def test_updates_deletes_and_moves_do_not_look_like_damage(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        a = tree.create_keyword("alpha", llm_auto_place=False)
        b = tree.create_keyword("beta", parent_id=a.id, llm_auto_place=False)
        c = tree.create_keyword("gamma", llm_auto_place=False)
        infos = [tree.create_info(f"note {n} about {WORDS[n % len(WORDS)]}", keyword_ids=[b.id]) for n in range(30)]
        for info in infos[:10]:
            tree.update_info(info.id, {"content": info.content + " revised kilo"})
        for info in infos[10:15]:
            tree.delete_info(info.id)
        tree.move_keyword(b.id, c.id)
        tree.update_keyword(a.id, {"name": "alpha prime"}, tree.get_keyword(a.id).version)
        tree.recall("kilo")
    assert _mismatch(tree_dir) == []
    assert verify_directory(tree_dir).ok
