"""The vector cache (kwtree.stores.vectors): add / search / has, the accept filter and its
widening, one hit per entity, dimension checks, the persisted hnswlib index (reused, or
rebuilt when missing or corrupt), torn tails, several appending processes, read-only stores
(``writable=False``: they find what a writer finds and write nothing), growth past the
index's capacity, threads, and recall against exact search.

Real files, real hnswlib, real subprocesses; no mocks, no sleeps, no timing assertions.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import textwrap
import threading
import zlib
from pathlib import Path

import filelock
import numpy as np
import orjson
import pytest
from helpers import dir_bytes

from kwtree.errors import (
    ClosedError,
    InvalidInputError,
    LockTimeoutError,
    ReadOnlyError,
)
from kwtree.stores.vectors import VectorStore

DIM = 16
HANG = 120  # seconds before a stuck child is reported (never reached normally)


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def vector_of(entity_id: str, content_hash: str = "h", dim: int = DIM) -> np.ndarray:
    """A deterministic unit vector per key (the same in every process)."""
    rng = np.random.default_rng(zlib.crc32(f"{entity_id}/{content_hash}".encode()))
    return unit(rng.standard_normal(dim))


def random_rows(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    return unit(np.random.default_rng(seed).standard_normal((n, dim)))


def low_rank_rows(n: int, dim: int, seed: int) -> np.ndarray:
    """32-d latent Gaussian projected to ``dim`` plus 10% noise (as bench/vectors.py)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((32, dim), dtype=np.float32)
    x = rng.standard_normal((n, 32), dtype=np.float32) @ w
    x += 0.1 * np.linalg.norm(x, axis=1, keepdims=True) / np.sqrt(dim) * rng.standard_normal((n, dim), dtype=np.float32)
    return unit(x)


def near(q: np.ndarray, sims: list[float], seed: int) -> np.ndarray:
    """Unit vectors whose cosine similarity to unit ``q`` is exactly each of ``sims``."""
    rng = np.random.default_rng(seed)
    out = []
    for s in sims:
        r = rng.standard_normal(len(q))
        r -= (r @ q) * q
        r /= np.linalg.norm(r)
        out.append(s * q + np.sqrt(1 - s * s) * r)
    return unit(np.array(out))


def reference(keys, matrix, q, k, accept=None):
    """Exact answer of the search contract, computed the slow, obvious way."""
    scores = matrix @ unit(q)
    hits, taken = [], set()
    for row in np.argsort(-scores, kind="stable"):
        entity_id, content_hash = keys[row]
        if entity_id in taken or (accept is not None and not accept(entity_id, content_hash)):
            continue
        taken.add(entity_id)
        hits.append((entity_id, float(scores[row])))
        if len(hits) == k:
            break
    return hits


def assert_same_hits(got, expected):
    assert [e for e, _ in got] == [e for e, _ in expected]
    assert np.allclose([s for _, s in got], [s for _, s in expected], atol=1e-4)


def file_rows(directory: Path, dim: int = DIM) -> tuple[list[tuple[str, str]], np.ndarray]:
    keys = [tuple(orjson.loads(line)[:2]) for line in (directory / "keys.jsonl").read_bytes().splitlines()]
    vectors = np.fromfile(directory / "vectors.f32", dtype=np.float32).reshape(-1, dim)
    return keys, vectors


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "vectors" / "test-model"


# --- basics ---------------------------------------------------------------------------------


def test_add_search_has_and_len(store_dir):
    x = random_rows(50)
    keys = [(f"e{i}", f"h{i}") for i in range(50)]
    with VectorStore(store_dir, "test-model", DIM) as store:
        assert len(store) == 0 and store.search(x[0], 5) == []
        store.add(keys, x)
        assert len(store) == 50
        assert store.has("e7", "h7") and not store.has("e7", "h8") and not store.has("nope", "h7")
        assert store.known() == set(keys)
        hits = store.search(x[7], 5)
        assert hits[0][0] == "e7" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        assert_same_hits(hits, reference(keys, x, x[7], 5))
        assert all(-1.0 <= s <= 1.0 for _, s in hits)
        assert len(store.search(x[7], 500)) == 50
        store.add(keys[:3] + [("e7", "h7")], x[:4])  # keys already stored are skipped
        assert len(store) == 50
    meta = orjson.loads((store_dir / "meta.json").read_bytes())
    assert meta == {"format": 2, "model": "test-model", "dim": DIM}


def test_invalid_input_is_rejected_and_nothing_is_written(store_dir):
    x = random_rows(3)
    keys = [("a", "1"), ("b", "1"), ("c", "1")]
    with VectorStore(store_dir, "m", DIM) as store:
        bad_calls = [
            (keys, x.astype(np.float64)),  # dtype
            (keys, x[:, :8].copy()),  # dim
            (keys, x[0]),  # 1-d
            (keys[:2], x),  # count
            ([("a", "")] + keys[1:], x),  # empty hash
            ([("a", 1)] + keys[1:], x),  # not a string
            (keys, x * 3),  # not normalised
            (keys, np.where(np.arange(DIM) == 0, np.nan, x).astype(np.float32)),  # NaN
        ]
        for call_keys, vectors in bad_calls:
            with pytest.raises(InvalidInputError):
                store.add(call_keys, vectors)
        assert len(store) == 0
        store.add(keys, x)
        for query, k in [(x[0][:8], 3), (np.zeros(DIM), 3), (x[0], 0), (x[0], True), (["a"] * DIM, 3)]:
            with pytest.raises(InvalidInputError):
                store.search(query, k)
        assert store.search(x[0:1].astype(np.float64), 1)[0][0] == "a"  # (1, dim) and float64 are fine
    with pytest.raises(InvalidInputError):
        VectorStore(store_dir, "m", 0)


@pytest.mark.parametrize("exact_below", [0, 10_000], ids=["hnsw", "exact"])
def test_blank_rows_are_stored_but_never_returned(store_dir, exact_below):
    # The embedders return an all-zero row for a text with nothing to embed.
    x = random_rows(3000, seed=12)
    x[::100] = 0.0
    keys = [(f"e{i}", "h") for i in range(3000)]
    with VectorStore(store_dir, "m", DIM, exact_below=exact_below) as store:
        store.add(keys, x)
        assert len(store) == 3000 and store.has("e0", "h") and store.has("e100", "h")
        for q in random_rows(5, seed=13):
            hits = store.search(q, 10)
            assert len(hits) == 10 and not any(int(e[1:]) % 100 == 0 for e, _ in hits)
        everything = store.search(x[1], 3000)
        assert len(everything) == 2970 and "e100" not in {e for e, _ in everything}


def test_another_dimension_or_model_is_refused(store_dir):
    VectorStore(store_dir, "model-x", 384).close()
    with pytest.raises(InvalidInputError, match=r"holds 384-d vectors of model 'model-x'"):
        VectorStore(store_dir, "model-x", 768)
    with pytest.raises(InvalidInputError, match="model 'model-x'"):
        VectorStore(store_dir, "model-y", 384)
    VectorStore(store_dir, "model-x", 384).close()


def test_corrupt_meta_with_data_empties_the_store_with_a_warning(store_dir, caplog):
    with VectorStore(store_dir, "m", DIM) as store:
        store.add([("a", "1")], random_rows(1))
    (store_dir / "meta.json").write_bytes(b"{not json")
    with caplog.at_level(logging.WARNING, logger="kwtree.cache"), VectorStore(store_dir, "m", DIM) as store:
        assert len(store) == 0 and not store.has("a", "1")
        store.add([("b", "1")], random_rows(1, seed=2))
        assert len(store) == 1
    assert "meta.json is missing or unreadable" in caplog.text
    (store_dir / "meta.json").write_bytes(orjson.dumps({"format": 99, "model": "m", "dim": DIM}))
    with VectorStore(store_dir, "m", DIM) as store:
        assert len(store) == 0
    assert "of format 99" in caplog.text


def test_a_store_emptied_under_an_open_one_is_read_again(store_dir, caplog):
    first = VectorStore(store_dir, "m", DIM)
    first.add([("old", "h")], np.array([vector_of("old")]))
    (store_dir / "meta.json").write_bytes(b"")
    with VectorStore(store_dir, "m", DIM) as second:  # empties the store: new files
        second.add([("new", "h")], np.array([vector_of("new")]))
    with caplog.at_level(logging.WARNING, logger="kwtree.cache"):
        assert first.refresh() == 1
    assert "replaced or shrank" in caplog.text
    assert first.known() == {("new", "h")}
    first.add([("newer", "h")], np.array([vector_of("newer")]))  # into the new files
    first.close()
    file_keys, file_vectors = file_rows(store_dir)
    assert file_keys == [("new", "h"), ("newer", "h")]
    assert np.array_equal(file_vectors, np.array([vector_of("new"), vector_of("newer")]))


def test_closed_store_refuses_use(store_dir):
    store = VectorStore(store_dir, "m", DIM)
    store.close()
    store.close()  # idempotent
    for call in (lambda: store.add([("a", "1")], random_rows(1)), lambda: store.search(random_rows(1)[0], 1),
                 store.refresh, store.save):
        with pytest.raises(ClosedError):
            call()


# --- search contract: accept filter, widening, one hit per entity ---------------------------


def accept_filter_case(seed: int):
    """A store whose nearest rows to q are mostly rejected: 30 deleted entities, stale rows of
    'multi', and a duplicate-row entity; live entities lie further out among 3,000 random rows."""
    rng = np.random.default_rng(seed)
    q = unit(rng.standard_normal(DIM))
    keys: list[tuple[str, str]] = []
    blocks = []
    dead = near(q, list(np.linspace(0.995, 0.97, 30)), seed)
    keys += [(f"dead{i}", "h") for i in range(30)]
    blocks.append(dead)
    keys += [("multi", "old1"), ("multi", "old2"), ("multi", "cur")]
    blocks.append(near(q, [0.999, 0.985, 0.90], seed + 1))
    keys += [("twice", "a"), ("twice", "b")]
    blocks.append(near(q, [0.95, 0.94], seed + 2))
    live = near(q, list(np.linspace(0.93, 0.80, 12)), seed + 3)
    keys += [(f"live{i}", "h") for i in range(12)]
    blocks.append(live)
    keys += [(f"bg{i}", "h") for i in range(3000)]
    blocks.append(random_rows(3000, seed=seed + 4))
    matrix = np.vstack(blocks).astype(np.float32)
    order = rng.permutation(len(keys))  # rows in no particular order on disk
    return q, [keys[i] for i in order], matrix[order]


def is_current(entity_id: str, content_hash: str) -> bool:
    return not entity_id.startswith("dead") and not (entity_id == "multi" and content_hash != "cur")


@pytest.mark.parametrize("exact_below", [0, 10_000], ids=["hnsw", "exact"])
def test_accept_skips_stale_and_deleted_rows_and_widens(store_dir, exact_below):
    # ef=16 so that widening takes a second round through the graph (ef 64) on 3,000 rows
    # before it falls back to an exact pass.
    q, keys, matrix = accept_filter_case(seed=3)
    calls: list[tuple[str, str]] = []

    def accept(entity_id: str, content_hash: str) -> bool:
        calls.append((entity_id, content_hash))
        return is_current(entity_id, content_hash)

    with VectorStore(store_dir, "m", DIM, exact_below=exact_below, ef=16) as store:
        store.add(keys, matrix)
        for k in (1, 5, 10):
            calls.clear()
            hits = store.search(q, k, accept)
            assert_same_hits(hits, reference(keys, matrix, q, k, is_current))
            assert len(calls) == len(set(calls))  # each row is asked about at most once
            ids = [e for e, _ in hits]
            assert not any(e.startswith("dead") for e in ids) and len(ids) == len(set(ids))
        hits = dict(store.search(q, 5, accept))
        assert hits["multi"] == pytest.approx(0.90, abs=1e-4)  # its current row, not the stale ones
        assert hits["twice"] == pytest.approx(0.95, abs=1e-4)  # once, with its best row
        # Everything rejected: the search gives up only when the store is exhausted.
        assert store.search(q, 3, lambda e, h: False) == []
        assert [e for e, _ in store.search(q, 3, lambda e, h: e == "bg17")] == ["bg17"]


def test_entity_with_several_rows_is_returned_once(store_dir):
    rng = np.random.default_rng(5)
    q = unit(rng.standard_normal(DIM))
    x = np.vstack([near(q, [0.99, 0.98, 0.97], 1), near(q, [0.9], 2), random_rows(3000, seed=6)])
    keys = [("same", "v1"), ("same", "v2"), ("same", "v3"), ("other", "h")] + [(f"bg{i}", "h") for i in range(3000)]
    for exact_below in (0, 10_000):
        with VectorStore(store_dir / str(exact_below), "m", DIM, exact_below=exact_below) as store:
            store.add(keys, x)
            hits = store.search(q, 2)
            assert [e for e, _ in hits] == ["same", "other"]
            assert hits[0][1] == pytest.approx(0.99, abs=1e-4)


# --- the persisted index ---------------------------------------------------------------------


def test_reopen_loads_the_persisted_index_and_adds_the_tail(store_dir):
    x = random_rows(2600, seed=7)
    keys = [(f"e{i}", "h") for i in range(2600)]
    with VectorStore(store_dir, "m", DIM, exact_below=0) as store:
        store.add(keys[:2500], x[:2500])
        assert store.search(x[10], 1)[0][0] == "e10"
        assert store.stats().indexed_rows == 2500 and store.stats().loaded_rows == 0
    assert orjson.loads((store_dir / "hnsw.json").read_bytes())["rows"] == 2500

    with VectorStore(store_dir, "m", DIM, exact_below=0) as store:
        assert store.stats().indexed_rows == 0  # loaded lazily, on the first search
        store.add(keys[2500:], x[2500:])
        for row in (10, 2499, 2500, 2599):
            assert store.search(x[row], 1)[0][0] == f"e{row}"
        stats = store.stats()
        assert (stats.loaded_rows, stats.indexed_rows, stats.persisted_rows) == (2500, 2600, 2500)
    assert orjson.loads((store_dir / "hnsw.json").read_bytes())["rows"] == 2600

    with VectorStore(store_dir, "m", DIM, exact_below=0) as store:
        store.warm_up()
        assert store.stats().loaded_rows == 2600
        mtime = (store_dir / "hnsw.bin").stat().st_mtime_ns
    assert (store_dir / "hnsw.bin").stat().st_mtime_ns == mtime  # nothing new: not rewritten


def flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "bin deleted": lambda d: (d / "hnsw.bin").unlink(),
    "json deleted": lambda d: (d / "hnsw.json").unlink(),
    "bin bytes flipped": lambda d: flip_middle(d / "hnsw.bin"),
    "bin truncated": lambda d: (d / "hnsw.bin").write_bytes((d / "hnsw.bin").read_bytes()[:1000]),
    "bin garbage": lambda d: (d / "hnsw.bin").write_bytes(b"\xff" * 4096),
    "json garbage": lambda d: (d / "hnsw.json").write_bytes(b"]["),
    "json stale format": lambda d: (d / "hnsw.json").write_bytes(
        orjson.dumps(orjson.loads((d / "hnsw.json").read_bytes()) | {"format": 0})),
    "json claims more rows": lambda d: (d / "hnsw.json").write_bytes(
        orjson.dumps(orjson.loads((d / "hnsw.json").read_bytes()) | {"rows": 99_999})),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_missing_or_corrupt_index_is_rebuilt(store_dir, damage, caplog):
    x = random_rows(2100, seed=8)
    keys = [(f"e{i}", "h") for i in range(2100)]
    queries = random_rows(5, seed=9)
    with VectorStore(store_dir, "m", DIM, exact_below=0) as store:
        store.add(keys, x)
        before = [store.search(q, 10) for q in queries]
    DAMAGE[damage](store_dir)
    with caplog.at_level(logging.WARNING, logger="kwtree.cache"), \
            VectorStore(store_dir, "m", DIM, exact_below=0) as store:
        after = [store.search(q, 10) for q in queries]
        assert store.stats().loaded_rows == 0 and store.stats().indexed_rows == 2100
    assert "rebuilding it from the vectors" in caplog.text
    for a, b in zip(after, before, strict=True):
        assert_same_hits(a, b)
    with VectorStore(store_dir, "m", DIM, exact_below=0) as store:  # the rebuilt index was saved
        store.warm_up()
        assert store.stats().loaded_rows == 2100


# --- torn tails -------------------------------------------------------------------------------


TORN = {
    "vector cut mid-row": lambda d: (d / "vectors.f32").write_bytes((d / "vectors.f32").read_bytes()[:-7]),
    "key line without vector": lambda d: (d / "keys.jsonl").open("ab").write(b'["ghost","h"]\n'),
    "half a key line": lambda d: (
        (d / "vectors.f32").open("ab").write(vector_of("ghost").tobytes()),
        (d / "keys.jsonl").open("ab").write(b'["gho'),
    ),
    "vector without key line": lambda d: (d / "vectors.f32").open("ab").write(vector_of("ghost").tobytes()),
    "garbage key line": lambda d: (
        (d / "vectors.f32").open("ab").write(vector_of("ghost").tobytes() * 2),
        (d / "keys.jsonl").open("ab").write(b'{"x": 1}\n["ghost2","h"]\n'),
    ),
}


@pytest.mark.parametrize("tear", list(TORN))
def test_a_torn_tail_is_ignored_and_trimmed_by_the_next_add(store_dir, tear, caplog):
    keys = [(f"e{i}", "h") for i in range(10)]
    x = np.array([vector_of(e) for e, _ in keys])
    with VectorStore(store_dir, "m", DIM) as store:
        store.add(keys, x)
    TORN[tear](store_dir)
    survivors = 9 if tear == "vector cut mid-row" else 10
    reader = VectorStore(store_dir, "m", DIM)  # a reader never trims
    assert len(reader) == survivors and not reader.has("ghost", "h") and not reader.has("ghost2", "h")
    with caplog.at_level(logging.WARNING, logger="kwtree.cache"), VectorStore(store_dir, "m", DIM) as store:
        assert len(store) == survivors
        store.add([("new", "h"), ("e9", "h")], np.array([vector_of("new"), vector_of("e9")]))
        assert len(store) == 11
        assert store.search(vector_of("new"), 1)[0][0] == "new"
    assert "torn tail" in caplog.text
    file_keys, file_vectors = file_rows(store_dir)
    assert len(file_keys) == len(file_vectors) == 11 and "ghost" not in {e for e, _ in file_keys}
    for (entity_id, _), row in zip(file_keys, file_vectors, strict=True):
        assert np.array_equal(row, vector_of(entity_id))
    assert reader.refresh() == 11 - survivors and len(reader) == 11
    assert reader.search(vector_of("new"), 1)[0][0] == "new"
    reader.close()


# --- several writers --------------------------------------------------------------------------


CHILD = """
import sys
import numpy as np
from kwtree.stores.vectors import VectorStore

directory, name, batches, tests_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, tests_dir)
from test_vectors import vector_of  # the very same vectors as the parent's

with VectorStore(directory, "m", 16) as store:
    print("ready", flush=True)
    sys.stdin.readline()  # go
    for b in range(batches):
        # own rows plus one key the other child adds too: stored once whoever wins
        ids = [f"{name}-{b}-{i}" for i in range(3)] + [f"shared-{b}"]
        store.add([(e, "h") for e in ids], np.array([vector_of(e) for e in ids]))
print("done", flush=True)
"""


def test_two_processes_append_concurrently(store_dir):
    batches = 150
    store = VectorStore(store_dir, "m", DIM)
    children = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), str(store_dir), name, str(batches),
                          str(Path(__file__).parent)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("a", "b")
    ]
    for child in children:
        assert child.stdout.readline() == "ready\n", child.stderr.read()
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    refreshes = 0
    while any(child.poll() is None for child in children) or refreshes == 0:
        store.refresh()  # while they write: only whole rows, never a duplicate key
        refreshes += 1
        assert len(store.known()) == len(store)
    for child in children:
        out, err = child.communicate(timeout=HANG)
        assert child.returncode == 0 and out == "done\n", err
    store.refresh()
    expected = {(f"{n}-{b}-{i}", "h") for n in "ab" for b in range(batches) for i in range(3)}
    expected |= {(f"shared-{b}", "h") for b in range(batches)}
    assert store.known() == expected and len(store) == len(expected)
    file_keys, file_vectors = file_rows(store_dir)
    assert len(file_keys) == len(file_vectors) == len(expected) == len(set(file_keys))
    for (entity_id, _), row in zip(file_keys, file_vectors, strict=True):
        assert np.array_equal(row, vector_of(entity_id))
    for entity_id in ("a-0-0", "b-149-2", "shared-77"):
        hit = store.search(vector_of(entity_id), 1)[0]
        assert hit[0] == entity_id and hit[1] == pytest.approx(1.0, abs=1e-5)
    store.close()


def test_refresh_feeds_another_stores_rows_into_the_built_index(store_dir):
    x = random_rows(2400, seed=10)
    keys = [(f"e{i}", "h") for i in range(2400)]
    with VectorStore(store_dir, "m", DIM, exact_below=0) as reader, \
            VectorStore(store_dir, "m", DIM, exact_below=0) as writer:
        writer.add(keys[:2000], x[:2000])
        assert reader.refresh() == 2000 and reader.refresh() == 0
        reader.warm_up()
        writer.add(keys[2000:], x[2000:])
        assert not reader.has("e2300", "h")
        assert reader.refresh() == 400
        assert reader.stats().indexed_rows == 2400
        assert reader.search(x[2300], 1)[0][0] == "e2300"


def test_lock_timeout_is_reported(store_dir):
    store = VectorStore(store_dir, "m", DIM, lock_timeout=0.05)
    holder = filelock.FileLock(str(store_dir / "lock"))
    with holder:
        result: list[BaseException] = []
        thread = threading.Thread(target=lambda: _capture(result, store.add, [("a", "h")], random_rows(1)))
        thread.start()
        thread.join(HANG)
    assert len(result) == 1 and isinstance(result[0], LockTimeoutError)
    assert "lock_timeout" in str(result[0]) and len(store) == 0
    store.add([("a", "h")], random_rows(1))
    assert len(store) == 1
    store.close()


def _capture(result: list[BaseException], call, *args) -> None:
    try:
        call(*args)
    except BaseException as exc:  # noqa: BLE001 - handed to the test thread
        result.append(exc)


def test_threads_share_one_store(store_dir):
    store = VectorStore(store_dir, "m", DIM, exact_below=200)  # the index is built midway
    barrier = threading.Barrier(4)
    writers_done = threading.Event()
    errors: list[BaseException] = []
    searched: list[int] = []

    def writer(name: str) -> None:
        barrier.wait()
        for b in range(60):
            ids = [f"{name}-{b}-{i}" for i in range(5)]
            store.add([(e, "h") for e in ids], np.array([vector_of(e) for e in ids]))

    def searcher() -> None:
        barrier.wait()
        b = 0
        while not writers_done.is_set():
            hits = store.search(vector_of(f"q{b}"), 5)
            assert len({e for e, _ in hits}) == len(hits)
            b += 1
        searched.append(b)

    writers = [threading.Thread(target=_capture, args=(errors, writer, name)) for name in "ab"]
    searchers = [threading.Thread(target=_capture, args=(errors, searcher)) for _ in range(2)]
    for t in writers + searchers:
        t.start()
    for t in writers:
        t.join(HANG)
    writers_done.set()
    for t in searchers:
        t.join(HANG)
    assert errors == [] and len(searched) == 2
    store.search(vector_of("last"), 5)  # in case no search ran after the last add
    assert len(store) == 600 and store.stats().indexed_rows == 600
    for entity_id in ("a-0-0", "b-59-4", "a-31-2"):
        assert store.search(vector_of(entity_id), 1)[0][0] == entity_id
    store.close()


# --- read-only stores (writable=False) -----------------------------------------------------------


def _store_with_graph(store_dir: Path, graph: str) -> np.ndarray:
    """2,400 rows (returned); hnsw.bin covering none of them, the first 2,000 ("stale") or all; no lock
    file (so a reader that made one would show)."""
    x = random_rows(2400, seed=11)
    keys = [(f"e{i}", "h") for i in range(2400)]
    with VectorStore(store_dir, "m", DIM, exact_below=0) as store:
        store.add(keys[:2000], x[:2000])
        if graph != "none":
            store.warm_up()  # builds and saves the graph of the first 2,000
    with VectorStore(store_dir, "m", DIM, exact_below=10**9) as store:  # builds no graph
        store.add(keys[2000:], x[2000:])
    if graph == "current":
        with VectorStore(store_dir, "m", DIM, exact_below=0) as store:
            store.warm_up()  # loads the stale one, adds the tail and saves it on close
    (store_dir / "lock").unlink()
    return x


@pytest.mark.parametrize("graph", ["none", "stale", "current"])
@pytest.mark.parametrize("exact_below", [0, 10**9], ids=["graph", "exact"])
def test_a_read_only_store_finds_what_a_writer_finds_and_writes_nothing(tmp_path, graph, exact_below):
    store_dir = tmp_path / "store"
    x = _store_with_graph(store_dir, graph)
    persisted = {"none": 0, "stale": 2000, "current": 2400}[graph]
    queries = [*random_rows(5, seed=12), x[5], x[2300]]

    def accept(entity_id: str, _: str) -> bool:
        return not entity_id.endswith("7")  # a tenth rejected: the search widens

    shutil.copytree(store_dir, tmp_path / "copy")
    with VectorStore(tmp_path / "copy", "m", DIM, exact_below=exact_below) as writer:
        expected = [writer.search(q, 10, accept) for q in queries]
    before = dir_bytes(store_dir)
    with VectorStore(store_dir, "m", DIM, exact_below=exact_below, writable=False) as reader:
        reader.warm_up()
        for q, hits in zip(queries, expected, strict=True):
            assert_same_hits(reader.search(q, 10, accept), hits)
        stats = reader.stats()
        if exact_below == 0:  # the graph: loaded as far as the saved one goes, the rest built in memory
            assert (stats.indexed_rows, stats.loaded_rows, stats.persisted_rows) == (2400, persisted, persisted)
        else:
            assert stats.indexed_rows == 0
        with pytest.raises(ReadOnlyError):
            reader.add([("new", "h")], np.array([vector_of("new")]))
        with pytest.raises(ReadOnlyError):
            reader.save()
        assert len(reader) == 2400 and not reader.has("new", "h")
    assert dir_bytes(store_dir) == before  # no graph saved, no lock file, nothing trimmed


def test_a_read_only_store_of_a_missing_directory_is_empty_until_a_writer_makes_it(tmp_path):
    store_dir = tmp_path / "cache" / "vectors" / "m"
    with VectorStore(store_dir, "m", DIM, exact_below=0, writable=False) as reader:
        assert len(reader) == 0 and reader.refresh() == 0
        assert reader.search(vector_of("a"), 3) == []
        assert list(tmp_path.iterdir()) == []  # not even the directory
        with VectorStore(store_dir, "m", DIM) as writer:
            writer.add([(e, "h") for e in "abc"], np.array([vector_of(e) for e in "abc"]))
            assert reader.refresh() == 3
            assert reader.search(vector_of("b"), 1)[0][0] == "b"  # from a graph built in memory
            writer.add([("d", "h")], np.array([vector_of("d")]))
            assert not reader.has("d", "h")
            assert reader.refresh() == 1 and reader.search(vector_of("d"), 1)[0][0] == "d"
        assert reader.stats().indexed_rows == 4
    assert sorted(p.name for p in store_dir.iterdir()) == ["keys.jsonl", "lock", "meta.json", "vectors.f32"]


@pytest.mark.parametrize("meta", ["garbage", "deleted", "format 99", "truncated"])
def test_a_read_only_store_searches_a_bad_meta_as_empty_and_leaves_it_to_a_writer(store_dir, meta, caplog):
    x = random_rows(30, seed=13)
    keys = [(f"e{i}", "h") for i in range(30)]
    with VectorStore(store_dir, "m", DIM, exact_below=0) as store:
        store.add(keys, x)
        store.warm_up()  # and a saved graph
    path = store_dir / "meta.json"
    if meta == "deleted":
        path.unlink()
    else:
        damaged = {"garbage": b"{not json", "truncated": path.read_bytes()[:10],
                   "format 99": orjson.dumps({"format": 99, "model": "m", "dim": DIM})}
        path.write_bytes(damaged[meta])
    before = dir_bytes(store_dir)
    with caplog.at_level(logging.WARNING, logger="kwtree.cache"), \
            VectorStore(store_dir, "m", DIM, exact_below=0, writable=False) as reader:
        assert len(reader) == 0 and not reader.has("e1", "h")
        assert reader.search(x[1], 5) == [] and reader.refresh() == 0
        assert dir_bytes(store_dir) == before  # not emptied: that is a writer's job
        with VectorStore(store_dir, "m", DIM) as writer:  # empties the store, then adds to it
            writer.add([("new", "h")], np.array([vector_of("new")]))
        assert reader.refresh() == 1
        assert reader.search(vector_of("new"), 5) == [("new", pytest.approx(1.0, abs=1e-5))]
    assert "searching the store as empty" in caplog.text


# --- growth and quality ------------------------------------------------------------------------


def test_the_index_grows_past_its_initial_capacity(store_dir):
    x = random_rows(3000, seed=11)
    keys = [(f"e{i}", "h") for i in range(3000)]
    with VectorStore(store_dir, "m", DIM, exact_below=0) as store:
        store.add(keys[:600], x[:600])
        store.warm_up()
        first_capacity = store.stats().capacity
        assert first_capacity < 3000
        for start in range(600, 3000, 400):
            store.add(keys[start:start + 400], x[start:start + 400])
            newest = start + 399
            assert store.search(x[newest], 1)[0][0] == f"e{newest}"
        stats = store.stats()
        assert stats.indexed_rows == 3000 and stats.capacity >= 3000 > first_capacity
    with VectorStore(store_dir, "m", DIM, exact_below=0) as store:
        assert store.search(x[2999], 1)[0][0] == "e2999"
        assert store.stats().loaded_rows == 3000


def test_recall_at_10_against_brute_force(store_dir):
    n, dim, k = 4000, 384, 10
    data = low_rank_rows(n + 200, dim, seed=0)  # one projection: queries are like the rows
    x, queries = data[:n], data[n:]
    keys = [(f"e{i}", "h") for i in range(n)]
    truth = np.argpartition(-(queries @ x.T), k, axis=1)[:, :k]
    with VectorStore(store_dir, "m", dim, exact_below=0) as store:
        store.add(keys, x)
        found = 0
        for q, exact in zip(queries, truth, strict=True):
            hits = store.search(q, k)
            found += len({f"e{i}" for i in exact} & {e for e, _ in hits})
    assert found / (len(queries) * k) >= 0.95


def test_key_lines_parse_up_to_the_first_bad_one_across_chunks(caplog):
    from kwtree.stores.vector_files import PARSE_CHUNK, parse_keys

    # Lines with a check and lines of format 1 (without one) alike.
    good = [orjson.dumps([f"e{i}", "h", f"{i:08x}"] if i % 2 else [f"e{i}", "h"]) for i in range(PARSE_CHUNK + 10)]
    checks = [f"{i:08x}" if i % 2 else None for i in range(PARSE_CHUNK + 10)]
    assert parse_keys(good) == ([(f"e{i}", "h") for i in range(PARSE_CHUNK + 10)], checks)
    for bad in (b'{"x": 1}', b'["a","b"]["c","d"]', b'["cut', b'["a","b","short"]', b'["a","b","00000000",1]'):
        with caplog.at_level(logging.WARNING, logger="kwtree.cache"):
            keys = parse_keys([*good[: PARSE_CHUNK + 3], bad, *good[PARSE_CHUNK + 3 :]])
        assert keys == ([(f"e{i}", "h") for i in range(PARSE_CHUNK + 3)], checks[: PARSE_CHUNK + 3])
        assert "unreadable key line" in caplog.text
