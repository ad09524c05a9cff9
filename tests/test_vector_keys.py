"""The keys of a vector store's rows kept as keys.jsonl's bytes (kwtree.stores.vector_keys):
whatever the lines, ``KeyRows`` takes the rows a parse of every line takes and reports the
keys, checks and graph digest that parse gives; a read-only open and search parse only the
lines of the rows they return; rows erased in place, by this store or by a forget elsewhere,
are taken as their lines are now.

Real files and real stores; no mocks, no timing assertions.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_vectors import DIM, random_rows

from kwtree.stores.vector_erase import erase_vectors
from kwtree.stores.vector_files import erased_key_line, parse_keys, row_check
from kwtree.stores.vector_graph import rows_digest
from kwtree.stores.vector_keys import KeyRows
from kwtree.stores.vectors import VectorStore

CHECK = "0badcafe"


def lines_of(rows: list[tuple[str, str, str | None]]) -> bytes:
    """keys.jsonl's bytes for (entity id, content hash, check or None: a format-1 line)."""
    return b"".join(orjson.dumps([e, h] if c is None else [e, h, c]) + b"\n" for e, h, c in rows)


def assert_as_parsed(rows: KeyRows, data: bytes) -> None:
    """``rows`` holds what parsing every line of ``data`` gives, up to the first bad one."""
    keys, checks = parse_keys(data.split(b"\n")[:-1])
    assert len(rows) == len(keys)
    assert [rows.key(row) for row in range(len(rows))] == keys
    assert [rows.check(row) for row in range(len(rows))] == checks
    for n in range(1, len(keys) + 1):
        assert rows.digest(n) == rows_digest(keys, checks, n)
    assert rows.every_key() == keys  # (parsed now, and kept)
    assert all(rows.has(key) for key in keys)
    assert rows.known() == set(keys)


TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=8)
PLAIN = st.text(alphabet="0123456789abcdef", min_size=1, max_size=8)
LINE = st.tuples(st.one_of(PLAIN, TEXT), st.one_of(PLAIN, TEXT),
                 st.one_of(st.none(), st.just(CHECK), st.text(min_size=8, max_size=8)))


@given(st.lists(LINE, max_size=12), st.lists(LINE, max_size=4), st.integers(0, 3))
def test_any_key_lines_are_taken_as_a_parse_of_every_line_takes_them(first, later, split):
    """Plain lines, format-1 lines, strings that need escapes, non-ASCII checks, in any order
    and taken in two reads: the same rows, keys, checks and digests as parsing them all."""
    rows = KeyRows()
    data = lines_of(first + later)
    cut = len(lines_of(first[: len(first) - split]))
    assert rows.take(data[:cut], len(data)) == len(first[: len(first) - split])
    rows.take(data[cut:], len(data))
    assert rows.size == len(data)
    assert_as_parsed(rows, data)


@pytest.mark.parametrize("bad", [
    b'{"x": 1}', b'["a","b"]["c","d"]', b'["cut', b'["a","b","short"]', b'["a","b","00000000",1]', b"",
    b'["a\xff","b","00000000"]',  # not UTF-8
    b'["a\x01","b","00000000"]',  # a control character JSON wants escaped
    '["a","b","éééé"]'.encode(),  # a check of 8 bytes but 4 characters
])
@pytest.mark.parametrize("before", ["plain", "format 1", "escaped"])
def test_rows_end_at_the_first_line_that_is_no_key_line(bad, before, caplog):
    check = {"plain": CHECK, "format 1": None, "escaped": CHECK}[before]
    good = lines_of([(f'e"{i}' if before == "escaped" else f"e{i}", "h", check) for i in range(5)])
    data = good + bad + b"\n" + lines_of([("after", "h", CHECK)])
    rows = KeyRows()
    with caplog.at_level(logging.WARNING, logger="kwtree.cache"):
        assert rows.take(data, 100) == 5
    assert "unreadable key line" in caplog.text
    assert rows.size == len(good)
    assert_as_parsed(rows, good)


def test_at_most_the_lines_asked_for_and_whole_lines_only_are_taken():
    data = lines_of([(f"e{i}", "h", CHECK) for i in range(4)])
    rows = KeyRows()
    assert rows.take(data, 2) == 2  # (the store asks for as many rows as have their whole vector)
    assert rows.take(data[rows.size : -3], 10) == 1  # a torn last line waits for its end
    assert rows.take(data[rows.size :], 10) == 1
    assert rows.take(b"", 10) == 0
    assert_as_parsed(rows, data)


def test_a_row_erased_in_place_is_taken_as_its_line_is_now():
    data = lines_of([(f"e{i}", f"h{i}", row_check(bytes(4 * DIM))) for i in range(3)])
    rows = KeyRows()
    rows.take(data, 3)
    assert rows.has(("e1", "h1"))
    line = data.split(b"\n")[1]
    erased = erased_key_line(line, 4 * DIM)
    assert erased is not None
    assert not rows.replace(1, erased + b"x")  # another length: not an erasure, nothing taken
    assert not rows.replace(1, b"[" + b" " * (len(line) - 2) + b"]")  # no key line
    assert rows.key(1) == ("e1", "h1")
    assert rows.replace(1, erased)
    assert not rows.has(("e1", "h1"))
    assert rows.has(("e1", "00"))
    assert_as_parsed(rows, data.replace(line, erased))


# --- the store ----------------------------------------------------------------------------------


def build(directory: Path, n: int) -> list[tuple[str, str]]:
    keys = [(f"e{i}", f"h{i}") for i in range(n)]
    with VectorStore(directory, "m", DIM, exact_below=100) as store:
        store.add(keys, random_rows(n))
        store.persist()
    return keys


def test_a_read_only_open_and_search_parse_only_the_lines_of_the_rows_returned(tmp_path):
    directory = tmp_path / "store"
    build(directory, 300)
    store = VectorStore(directory, "m", DIM, exact_below=100, writable=False)
    hits = store.search(random_rows(1, seed=1)[0], 5)
    assert len(hits) == 5
    assert store.stats().loaded_rows == 300  # the saved graph's digest matched, from the bytes
    assert store._rows._keys is None  # no row's key was parsed beyond those looked at
    assert store.has("e7", "h7")  # (asking parses them)
    store.close()


def test_a_store_takes_rows_a_forget_elsewhere_erased_and_never_saves_their_vectors(tmp_path):
    directory = tmp_path / "store"
    build(directory, 300)
    with VectorStore(directory, "m", DIM, exact_below=100) as store:
        store.add([("new", "h")], random_rows(1, seed=2))
        store.warm_up()  # the saved graph, and the row it lacks: save() would write it
        assert erase_vectors(directory, {"e3"}) == 1  # another process's forget
        store.save()
        assert not (directory / "hnsw.bin").exists()  # its graph held e3's vector
        assert not store.has("e3", "h3")
        assert store.has("e3", "0" * len("h3"))
        assert "e3" not in {entity for entity, _ in store.search(random_rows(1, seed=3)[0], 300)}
    with VectorStore(directory, "m", DIM, exact_below=100, writable=False) as reader:
        assert len(reader) == 301
        assert reader.check() == []
