"""FullTextIndex on a real tantivy index on disk: matching (English, Chinese, Japanese),
BM25 order, kinds, replace and delete, read-your-writes, persistence, rebuild of a bad
cache, read-only mode, an index in memory that writes no file, and query text that would be
tantivy syntax."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from kwtree.errors import ClosedError, InvalidInputError, ReadOnlyError, StorageError
from kwtree.stores.fulltext import FullTextIndex

W1 = "0" * 31 + "1"
W2 = "0" * 31 + "2"


@pytest.fixture
def fts(tmp_path: Path):
    index = FullTextIndex(tmp_path / "fts")
    yield index
    index.close()


def ids(index: FullTextIndex, query: str, kind: str = "info", k: int = 10) -> list[str]:
    return [entity_id for entity_id, _ in index.search(query, kind, k)]


def test_english_words_match_by_word_in_bm25_order(fts: FullTextIndex) -> None:
    fts.upsert("info", "a", "budget meeting notes")
    fts.upsert("info", "b", "the budget, the budget and the budget again: budget review")
    fts.upsert("info", "c", "holiday plans")
    fts.upsert("info", "d", "Budgetary is a different word (its stem is budgetari)")
    results = fts.search("BUDGET", "info")
    assert [entity_id for entity_id, _ in results] == ["b", "a"]
    assert results[0][1] > results[1][1] > 0
    # a document with both words ranks above one with only the more frequent one
    assert ids(fts, "budget holiday")[0] in {"a", "b", "c"}
    fts.upsert("info", "e", "budget holiday")
    assert ids(fts, "budget holiday")[0] == "e"


def test_plural_finds_singular_and_back(fts: FullTextIndex) -> None:
    fts.upsert("info", "dog", "my dog barks")
    fts.upsert("info", "cities", "two cities")
    assert ids(fts, "dogs") == ["dog"]
    assert ids(fts, "city") == ["cities"]


def test_chinese_substrings_match_through_bigrams(fts: FullTextIndex) -> None:
    fts.upsert("info", "zh", "我在北京大学读书")
    fts.upsert("info", "other", "今天的税法会议很长")
    for query in ("北京", "大学", "北京大学", "在北京"):
        assert ids(fts, query) == ["zh"], query
    assert ids(fts, "上海") == []
    assert ids(fts, "税法") == ["other"]


def test_japanese_substring(fts: FullTextIndex) -> None:
    fts.upsert("info", "ja", "東京タワーに行った")
    assert ids(fts, "東京") == ["ja"]
    assert ids(fts, "タワー") == ["ja"]
    assert ids(fts, "大阪") == []


def test_kinds_are_separate(fts: FullTextIndex) -> None:
    fts.upsert("info", "x", "coffee beans")
    fts.upsert("keyword", "x", "coffee")
    fts.upsert("keyword", "y", "tea")
    assert ids(fts, "coffee", "info") == ["x"]
    assert ids(fts, "coffee", "keyword") == ["x"]
    assert ids(fts, "tea", "info") == []
    fts.delete("keyword", "x")  # the info of the same id stays
    assert ids(fts, "coffee", "keyword") == []
    assert ids(fts, "coffee", "info") == ["x"]
    assert (fts.count("info"), fts.count("keyword")) == (1, 1)


def test_upsert_replaces_and_delete_removes(fts: FullTextIndex) -> None:
    fts.upsert("keyword", "k1", "apple")
    fts.commit(W1)
    fts.upsert("keyword", "k1", "banana")
    fts.upsert("keyword", "k1", "cherry")  # twice in one batch: the last one wins
    assert ids(fts, "apple", "keyword") == []
    assert ids(fts, "banana", "keyword") == []
    assert ids(fts, "cherry", "keyword") == ["k1"]
    assert fts.count("keyword") == 1
    fts.delete("keyword", "k1")
    fts.delete("keyword", "never-there")
    assert ids(fts, "cherry", "keyword") == []
    assert fts.count("keyword") == 0
    fts.upsert("keyword", "k2", "grape")
    fts.delete("keyword", "k2")  # in one batch, order decides
    fts.delete("keyword", "k3")
    fts.upsert("keyword", "k3", "grape")
    assert ids(fts, "grape", "keyword") == ["k3"]
    assert (fts.count("keyword"), fts.count("keyword")) == (1, 1)  # counted once per commit, kept until the next
    fts.upsert("keyword", "k4", "plum")
    assert fts.count("keyword") == 2 and fts.count("info") == 0


def test_read_your_writes_without_explicit_commit(fts: FullTextIndex) -> None:
    assert not fts.dirty
    fts.upsert("info", "i1", "quarterly report")
    assert fts.dirty
    assert ids(fts, "report") == ["i1"]  # committed lazily by the search
    assert not fts.dirty
    assert fts.watermark is None  # a lazy commit keeps the watermark


def test_watermark_and_documents_survive_reopen(tmp_path: Path) -> None:
    first = FullTextIndex(tmp_path / "fts")
    assert first.rebuilt and first.watermark is None  # new: the caller must feed everything
    first.upsert("info", "i1", "persistent memory")
    first.commit(W1)
    first.upsert("info", "i2", "pending at close")
    first.close()
    with pytest.raises(ClosedError):
        first.search("memory", "info")
    second = FullTextIndex(tmp_path / "fts")
    assert not second.rebuilt and second.available
    assert second.watermark == W1  # close committed i2 but did not move the watermark
    assert ids(second, "memory") == ["i1"]
    assert ids(second, "pending") == ["i2"]
    second.commit(W2)
    second.close()
    assert FullTextIndex(tmp_path / "fts", writable=False).watermark == W2


@pytest.mark.parametrize(
    "damage",
    ["meta_garbage", "meta_other_format", "meta_missing", "index_garbage", "index_missing"],
)
def test_bad_cache_is_rebuilt_empty(tmp_path: Path, damage: str, caplog) -> None:
    directory = tmp_path / "fts"
    index = FullTextIndex(directory)
    index.upsert("info", "i1", "lost on rebuild")
    index.commit(W1)
    index.close()
    if damage == "meta_garbage":
        (directory / "meta.json").write_bytes(b"{not json")
    elif damage == "meta_other_format":
        (directory / "meta.json").write_bytes(b'{"format": 99, "watermark": null}')
    elif damage == "meta_missing":
        (directory / "meta.json").unlink()
    elif damage == "index_garbage":
        (directory / "index" / "meta.json").write_bytes(b"garbage")
    else:
        for path in (directory / "index").iterdir():
            path.unlink()
    assert not FullTextIndex(directory, writable=False).available  # a reader never repairs
    with caplog.at_level(logging.WARNING, logger="kwtree.cache"):
        rebuilt = FullTextIndex(directory)
    assert rebuilt.rebuilt and rebuilt.available and rebuilt.watermark is None
    assert any("unusable" in record.message for record in caplog.records)
    assert ids(rebuilt, "lost") == [] and rebuilt.count("info") == 0
    rebuilt.upsert("info", "i2", "works again")
    assert ids(rebuilt, "works") == ["i2"]
    rebuilt.close()


def test_read_only_on_missing_directory_is_empty(tmp_path: Path) -> None:
    index = FullTextIndex(tmp_path / "absent", writable=False)
    assert not index.available and not index.rebuilt and index.watermark is None
    assert index.search("anything", "info") == [] and index.count("keyword") == 0
    with pytest.raises(ReadOnlyError):
        index.upsert("info", "i1", "text")
    index.close()
    assert not (tmp_path / "absent").exists()


def test_read_only_sees_committed_documents_and_refreshes(tmp_path: Path) -> None:
    writer = FullTextIndex(tmp_path / "fts")
    writer.upsert("keyword", "k1", "astronomy")
    writer.commit(W1)
    reader = FullTextIndex(tmp_path / "fts", writable=False)
    assert reader.available and reader.watermark == W1
    assert ids(reader, "astronomy", "keyword") == ["k1"]
    writer.upsert("keyword", "k2", "astronomy telescopes")
    writer.commit(W2)
    assert ids(reader, "telescope", "keyword") == []  # a snapshot until refresh()
    reader.refresh()
    assert reader.watermark == W2
    assert ids(reader, "telescope", "keyword") == ["k2"]
    reader.close()
    writer.close()


def test_writer_lock_is_held_only_until_commit(tmp_path: Path) -> None:
    first = FullTextIndex(tmp_path / "fts")
    second = FullTextIndex(tmp_path / "fts")  # e.g. another process's tree
    first.upsert("info", "i1", "held")
    with pytest.raises(StorageError, match="another process"):
        second.upsert("info", "i2", "blocked")
    assert not second.dirty
    first.commit(W1)  # releases tantivy's writer lock
    second.upsert("info", "i2", "now free")
    second.commit(W2)
    first.upsert("info", "i3", "first again")
    first.close()
    second.close()
    reopened = FullTextIndex(tmp_path / "fts", writable=False)
    assert sorted(ids(reopened, "held free first")) == ["i1", "i2", "i3"]


@pytest.mark.parametrize(
    "query", ['"AND (" :*', "dark AND (", 'title:"x', "*", "[a TO", "-", "\\", "^2 ~1", "'", "   ", ""]
)
def test_query_syntax_characters_never_raise(fts: FullTextIndex, query: str) -> None:
    fts.upsert("info", "i1", "dark AND light")
    fts.search(query, "info")
    fts.search(query, "keyword")


def test_queries_without_terms_and_bad_arguments(fts: FullTextIndex) -> None:
    fts.upsert("info", "i1", "the and of")
    fts.upsert("info", "i2", "words")
    assert fts.search("", "info") == []
    assert fts.search("the of and", "info") == []  # only stop words
    assert fts.search("words", "info", k=0) == []
    with pytest.raises(InvalidInputError):
        fts.search("words", "relation")
    with pytest.raises(InvalidInputError):
        fts.upsert("link", "l1", "text")


def test_clear_drops_everything_and_the_watermark(fts: FullTextIndex) -> None:
    fts.upsert("info", "i1", "alpha")
    fts.upsert("keyword", "k1", "alpha")
    fts.commit(W1)
    fts.clear()
    assert fts.watermark is None
    assert ids(fts, "alpha") == [] and fts.count("keyword") == 0
    fts.upsert("info", "i2", "alpha")
    assert ids(fts, "alpha") == ["i2"]


def test_k_limits_results(fts: FullTextIndex) -> None:
    for n in range(20):
        fts.upsert("info", f"i{n}", "common " + "filler " * n)
    results = fts.search("common", "info", k=5)
    assert len(results) == 5
    assert [entity_id for entity_id, _ in results] == ["i0", "i1", "i2", "i3", "i4"]  # shorter first


def test_threads_write_and_search_concurrently(fts: FullTextIndex) -> None:
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for n in range(4):
                fts.upsert("info", f"w{worker}-{n}", f"shared token{worker}x{n}")
                assert f"w{worker}-{n}" in ids(fts, f"token{worker}x{n}")
        except BaseException as exc:  # noqa: BLE001 -- reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert fts.count("info") == 16


def test_an_index_in_memory_searches_like_one_on_disk_and_writes_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    on_disk = FullTextIndex(tmp_path / "fts")
    in_memory = FullTextIndex(None, writable=False)  # always writable: it is nobody else's
    assert in_memory.rebuilt and in_memory.directory is None and in_memory.watermark is None
    for index in (on_disk, in_memory):
        index.upsert("info", "i1", "astronomy notes")
        index.upsert("info", "i2", "astronomy telescopes and astronomy books")
        index.upsert("keyword", "k1", "astronomy")
        index.commit(W1)
        index.delete("info", "i1")
        index.upsert("info", "i3", "home astronomy")
    assert in_memory.search("astronomy", "info") == on_disk.search("astronomy", "info")
    assert in_memory.count("info") == 2 and in_memory.matching("info", ["astronomi"]) == 2
    in_memory.commit(W2)
    assert in_memory.watermark == W2
    in_memory.clear()
    assert in_memory.watermark is None and ids(in_memory, "astronomy") == []
    in_memory.close()
    on_disk.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fts"]  # nothing but the index on disk
