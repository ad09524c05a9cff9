"""Issue 25, B15, the general rule for the vector store's rows: each key line records the
CRC-32 of its row's vector, so a vector that is not the one its line names (vectors.f32
garbled in place, a key line beside another row's vector) is never a hit, is left out of any
graph built from the rows, is listed by ``check()`` (``verify``) and erased by ``mend()`` (the
writer's repair scan, ``repair``), after which its text is embedded again. Without the
check, a garbled row that happens to point at the query was returned as a perfect match.

Store level, real files and real hnswlib; the tree-level cases are in
tests/test_trust_vector_graph.py and the damage property of kwtree.testing.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import orjson
import pytest
from test_vectors import DIM, random_rows, vector_of

from kwtree.stores.vectors import DEFAULT_EXACT_BELOW, VectorStore

ROWS = 30
KEYS = [(f"e{i}", "h") for i in range(ROWS)]


def write_row(store_dir: Path, row: int, vector: np.ndarray) -> None:
    """Overwrite one row of vectors.f32 in place (its key line stays)."""
    with open(store_dir / "vectors.f32", "r+b") as f:
        f.seek(row * 4 * DIM)
        f.write(np.asarray(vector, dtype=np.float32).tobytes())


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    with VectorStore(directory, "m", DIM) as store:
        store.add(KEYS, random_rows(ROWS))
    return directory


@pytest.mark.parametrize("exact_below", [DEFAULT_EXACT_BELOW, 10], ids=["searched row by row", "through a graph"])
def test_a_garbled_row_is_never_a_hit_and_mend_erases_it_so_it_is_embedded_again(
        store_dir: Path, exact_below: int, caplog: pytest.LogCaptureFixture) -> None:
    bait = vector_of("bait")
    write_row(store_dir, 7, bait)  # garbage that looks like a perfect match for the query
    for writable in (False, True):
        with caplog.at_level(logging.WARNING, logger="kwtree.cache"), \
                VectorStore(store_dir, "m", DIM, exact_below=exact_below, writable=writable) as store:
            hits = store.search(bait, 5)
            assert "e7" not in dict(hits) and len(hits) == 5
            assert store.has("e7", "h")  # not known to be damaged until it is checked in full
    assert "does not match its key line's check" in caplog.text
    with VectorStore(store_dir, "m", DIM, writable=False) as reader:
        [(name, problem)] = reader.check()
        assert name == "vectors.f32" and "1 of its 30 rows" in problem and "row 7, entity e7" in problem
    with VectorStore(store_dir, "m", DIM, exact_below=exact_below) as store:
        [(name, _)] = store.mend()
        assert name == "vectors.f32" and not store.has("e7", "h") and store.check() == []
        store.add([("e7", "h")], random_rows(ROWS)[7:8])  # what the repair scan has embedded again
        assert store.search(random_rows(ROWS)[7], 1)[0] == ("e7", pytest.approx(1.0, abs=1e-5))
    with VectorStore(store_dir, "m", DIM, writable=False) as reader:
        assert reader.check() == [] and len(reader) == ROWS + 1


def test_key_lines_beside_other_rows_vectors_are_damaged_rows(store_dir: Path) -> None:
    keys = store_dir / "keys.jsonl"
    lines = keys.read_bytes().split(b"\n")
    lines[3], lines[4] = lines[4], lines[3]  # the vectors stay where they are
    keys.write_bytes(b"\n".join(lines))
    x = random_rows(ROWS)
    with VectorStore(store_dir, "m", DIM) as store:
        for row in (3, 4):
            assert f"e{row}" not in dict(store.search(x[row], ROWS))
        assert [name for name, _ in store.check()] == ["vectors.f32"]
        store.mend()
        assert not store.has("e3", "h") and not store.has("e4", "h") and store.has("e5", "h")
        assert store.check() == []


def test_a_store_of_format_1_is_read_as_it_is_and_a_writer_records_format_2(tmp_path: Path) -> None:
    """Stores written before key lines had checks keep their rows (nothing is embedded again)."""
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    x = random_rows(5)
    (store_dir / "meta.json").write_bytes(orjson.dumps({"format": 1, "model": "m", "dim": DIM}))
    (store_dir / "vectors.f32").write_bytes(x.tobytes())
    (store_dir / "keys.jsonl").write_bytes(b"".join(orjson.dumps([f"old{i}", "h"]) + b"\n" for i in range(5)))
    with VectorStore(store_dir, "m", DIM, writable=False) as reader:
        assert reader.search(x[2], 1)[0][0] == "old2" and reader.check() == []
    assert orjson.loads((store_dir / "meta.json").read_bytes())["format"] == 1  # a reader writes nothing
    with VectorStore(store_dir, "m", DIM) as store:
        assert len(store) == 5
        store.add([("new", "h")], vector_of("new")[None, :])
    assert orjson.loads((store_dir / "meta.json").read_bytes())["format"] == 2
    last = orjson.loads((store_dir / "keys.jsonl").read_bytes().splitlines()[-1])
    assert last[:2] == ["new", "h"] and len(last) == 3
    with VectorStore(store_dir, "m", DIM, writable=False) as reader:
        assert len(reader) == 6 and reader.check() == [] and reader.search(vector_of("new"), 1)[0][0] == "new"


def test_a_graph_that_lost_its_description_is_never_loaded_and_no_finding(store_dir: Path) -> None:
    """save() removes hnsw.json before it replaces hnsw.bin, so a writer killed in between
    leaves a graph nothing describes: rebuilt by the next search, not a mismatch for verify."""
    with VectorStore(store_dir, "m", DIM, exact_below=10) as store:
        store.warm_up()  # builds the graph and saves it
    (store_dir / "hnsw.json").unlink()
    with VectorStore(store_dir, "m", DIM, exact_below=10, writable=False) as reader:
        assert reader.check() == []
        assert reader.search(random_rows(ROWS)[3], 1)[0][0] == "e3"
        assert reader.stats().loaded_rows == 0  # built, not loaded
