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
import tantivy

from kwtree import KeywordTree
from kwtree.normalize import terms
from kwtree.ops.verify import verify_directory

WORDS = ["apple", "banana", "cherry", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike"]
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


def _searches(directory: Path) -> list[tuple[str, float]] | None:
    """The full-text hits of QUERIES as tantivy itself gives them from the index on disk
    (None: it fails), with the queries FullTextIndex.search makes: tantivy alone, without the
    checksums kwtree checks before it opens an index."""
    try:
        index = tantivy.Index.open(str(directory / "cache" / "fulltext" / "index"))
        searcher, schema = index.searcher(), index.schema
        found = []
        for q in QUERIES:
            term = tantivy.Query.term_query
            clauses = [(tantivy.Occur.Should, term(schema, "text", f"i:{word}", index_option="freq"))
                       for word in dict.fromkeys(terms(q))]
            for score, address in searcher.search(tantivy.Query.boolean_query(clauses), 10).hits:
                found.append((searcher.doc(address).get_first("key"), round(score, 4)))
        return found
    except BaseException:  # noqa: BLE001 -- tantivy noticed the damage (an error or a panic)
        return None


def _flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x04]))


def test_every_bit_flip_in_a_segment_is_reported(base: Path, tmp_path: Path) -> None:
    logging.disable(logging.WARNING)  # tantivy's complaints about the damage it notices
    try:
        copy = tmp_path / "copy"
        shutil.copytree(base, copy, ignore=shutil.ignore_patterns("lock"))
        for path in _segment_files(copy):
            data_end = path.stat().st_size - 128  # before tantivy's footer
            for position in range(0, max(data_end, 1), max(data_end // 8, 1)):
                _flip(path, position)
                assert _mismatch(copy), f"a flip at {path.name}:{position} went unreported"
                _flip(path, position)
        assert _mismatch(copy) == []
    finally:
        logging.disable(logging.NOTSET)


def _silently_flipped(base: Path, copy: Path) -> tuple[str, int]:
    """Copy ``base`` to ``copy`` and flip a byte of the copy's index that tantivy does not
    notice, after which its searches answer otherwise; returns (file, position)."""
    shutil.copytree(base, copy, ignore=shutil.ignore_patterns("lock"))
    original = _searches(copy)
    assert original
    for path in (p for p in _segment_files(copy) if p.suffix in (".store", ".idx")):
        for position in range(0, path.stat().st_size - 128, 7):
            _flip(path, position)
            results = _searches(copy)
            if results is not None and results != original:
                return path.name, position
            _flip(path, position)
    raise AssertionError("no flip changed the results silently: the premise of this test is gone")


def test_a_flip_that_changes_results_silently_is_reported(base: Path, tmp_path: Path) -> None:
    # The case: a flip tantivy does not notice, after which searches answer otherwise.
    logging.disable(logging.WARNING)
    try:
        found = _silently_flipped(base, tmp_path / "copy")
        assert _mismatch(tmp_path / "copy"), f"the silent flip at {found} went unreported"
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("read_only", [False, True])
def test_a_tree_never_searches_an_index_whose_checksums_fail(base: Path, tmp_path: Path, read_only: bool,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """Issue 25, B15's rule for the full-text index: the flip tantivy does not notice is found
    by the checksums every open checks, and the index is rebuilt (a read-only tree builds a
    private one), so recall answers as the undamaged index does."""
    original = _results(base)
    logging.disable(logging.WARNING)
    try:
        found = _silently_flipped(base, tmp_path / "copy")
    finally:
        logging.disable(logging.NOTSET)
    with caplog.at_level(logging.WARNING, logger="kwtree.cache"):
        if read_only:
            assert _results(tmp_path / "copy") == original
        else:
            with KeywordTree(tmp_path / "copy", worker=False) as tree:
                assert [(h.info.id, round(h.bm25 or 0.0, 4)) for q in QUERIES
                        for h in tree.recall(q, k=10, mode="bm25")] == original
    assert f"{found[0]} does not match its checksum" in caplog.text


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


def test_verify_on_a_read_only_file_system_warns_that_it_could_not_open_the_index(tmp_path: Path) -> None:
    """tantivy creates a lock file to open an index: on a read-only file system verify checks
    the checksums and says it compared nothing else, rather than calling a sound index damaged."""
    import subprocess

    from helpers import tmpfs

    with tmpfs(tmp_path / "ro", "size=32m") as home:
        with KeywordTree(home / "m", durability="none", worker=False) as tree:
            tree.create_info("green tea every morning")
            tree.recall("tea")  # the shared index reflects the log
        done = subprocess.run(["mount", "-o", "remount,ro", str(home)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        report = verify_directory(home / "m")
        assert report.ok, report.to_text()
        assert [finding.code for finding in report.findings] == ["fulltext-unchecked"]


def test_two_writers_creating_the_index_at_once_do_not_remove_each_other_s(tree_dir: Path, monkeypatch) -> None:
    """Two writers that open a directory without an index create it at the same moment. One
    used to delete the other's half-made index (its meta.json's temporary file included), and
    the other failed with StorageError (seen as a flaky two-process commit_session test)."""
    import os
    import threading

    KeywordTree(tree_dir).close()
    shutil.rmtree(tree_dir / "cache" / "fulltext", ignore_errors=True)
    first, second = KeywordTree(tree_dir), KeywordTree(tree_dir)
    inside, second_done, errors = threading.Event(), threading.Event(), []
    replace = os.replace

    def slow_replace(source, target, *args, **kwargs):  # the first creator stops before its meta.json's rename
        if threading.current_thread().name == "first" and str(target).endswith("meta.json") and not inside.is_set():
            inside.set()
            second_done.wait(1)  # (the second now waits for the first's lock: 1 s, then on)
        return replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", slow_replace)

    def open_index(tree: KeywordTree, after: threading.Event | None) -> None:
        try:
            if after is not None:
                after.wait(5)
            tree._caches.fulltext.indexed_text_hits("x", "info", 5, 10)
        except Exception as exc:  # noqa: BLE001 -- collected and asserted on below
            errors.append(exc)
        finally:
            if after is not None:
                second_done.set()

    threads = [threading.Thread(target=open_index, args=(first, None), name="first"),
               threading.Thread(target=open_index, args=(second, inside), name="second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    first.close()
    second.close()
    assert inside.is_set()  # the race was run: the first creator stood between its files
    assert errors == []
    assert not any(f.severity == "error" for f in verify_directory(tree_dir).findings)
