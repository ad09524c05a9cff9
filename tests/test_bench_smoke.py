"""The benchmark harness runs end to end on tiny sizes (it measures nothing here: timings
belong in bench/, and no test asserts one)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import bench_module

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_core_benchmarks_run_on_tiny_sizes(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import core
    finally:
        sys.path.remove(str(BENCH))
    plan = core.Plan(sizes=(1_000, 2_000), replay_repeats=1, sized_writes=10, write_n=5, write_rounds=1,
                     memory_repeats=1)
    results = core.run(plan, tmp_path)
    assert [r["rows"] >= n for r, n in zip(results["replay"], plan.sizes, strict=True)] == [True, True]
    for replay in results["replay"]:
        for caches in ("none", "warm"):
            (run,) = replay["raw"][caches]
            assert run["rows"] == replay["rows"] and run["open_s"] > 0 and run["first_search_s"] > 0
    assert [len(r["raw_us"]["kwtree_create_info"]) for r in results["writes_at_size"]] == [10, 10]
    assert set(results["durable_write"]["raw_us"]) == {
        "kwtree_create_keyword", "kwtree_create_info", "sqlite_wal_full", "append_fsync"}
    assert all(len(v) == 5 for v in results["durable_write"]["raw_us"].values())
    for memory, n in zip(results["memory"], plan.sizes, strict=True):
        for kind in ("keyword", "info"):
            (ours,) = memory[kind]["raw"]["kwtree"]
            assert ours["count"] == n and 0 < ours["string_bytes"] < ours["bytes"]
            assert memory[kind]["raw"]["sqlite"][0]["count"] == n and memory[kind]["sqlite_file_bytes"] > 0
    table = core.markdown(results)
    for heading in ("### Open (replay)", "### Durable single writes into trees", "### Durable single writes (µs",
                    "### Memory per keyword and per info"):
        assert heading in table
    assert table.count("Scaling, from the medians") == 3
    assert list(tmp_path.iterdir()) == []  # its scratch data is removed


def test_bulk_benchmark_runs_on_tiny_sizes(tmp_path):
    bulk = bench_module("bulk")
    results = bulk.run(size=200, rounds=2, work=tmp_path)
    raw = results["raw_rows_per_s"]
    assert [len(raw[f"keywords_{who}"]) for who in ("kwtree", "sqlite", "floor")] == [6, 6, 6]
    assert [len(raw[f"{load}_{who}"]) for load in ("infos", "load") for who in ("kwtree", "sqlite")] == [2] * 4
    assert results["load_rows"] == 2 * 20 + 2 * 200 and all(ratio > 0 for ratio in results["ratios"].values())
    assert "### Bulk loads against SQLite" in bulk.markdown(results)
    assert list(tmp_path.iterdir()) == []  # its scratch data is removed


def test_checkpoint_benchmark_runs_on_a_tiny_tree(monkeypatch):
    bench_checkpoint = bench_module("checkpoint")
    from kwtree.engine import checkpoint

    monkeypatch.setattr(checkpoint, "MIN_LOG_BYTES", 1)  # (this tree's log is far below it)
    results = bench_checkpoint.run(keywords=300, infos=300, runs=1)
    assert [len(results["raw"][how]) for how in ("checkpoint", "replay")] == [1, 1]  # (it asserts which open read what)
    assert results["covered"] > 0 and results["checkpoint_bytes"] > 0 and results["ratio_open"] > 0


TINY_WORDNET = """\
id\tparent\tdepth\tname\tpath\tlemmas\tgloss\tn_hypernyms
1\t\t0\tfood\tfood\tfood; nutrient\tany substance that can be eaten\t1
2\t1\t1\tbeverage\tfood > beverage\tbeverage; drink\tany liquid suitable for drinking\t1
3\t2\t2\ttea\tfood > beverage > tea\ttea\ta beverage made by steeping tea leaves in water\t1
4\t2\t2\tcoffee\tfood > beverage > coffee\tcoffee; java\ta beverage made from roasted coffee beans\t1
5\t2\t2\tjuice\tfood > beverage > juice\tjuice\ta beverage of fruit pressed for drinking\t1
6\t\t0\tdevice\tdevice\tdevice\tan instrumentality invented for a particular purpose\t1
7\t6\t1\tlamp\tdevice > lamp\tlamp\ta device for giving light\t1
8\t7\t2\toil lamp\tdevice > lamp > oil lamp\toil lamp; kerosene lamp\ta lamp that burns oil\t1
9\t7\t2\tdesk lamp\tdevice > lamp > desk lamp\tdesk lamp\ta lamp for a desk\t1
"""


def test_placement_benchmark_runs_on_a_tiny_hierarchy(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import placement
    finally:
        sys.path.remove(str(BENCH))
    data = tmp_path / "tiny.tsv"
    data.write_text(TINY_WORDNET)
    work = tmp_path / "work"
    work.mkdir()
    result = placement.run(seed=1, work=work, data=data, hide=3)
    assert result["hidden"] == 3 and result["tree_size"] == 6 and result["llm_calls"] == 0
    for method in ("kwtree", "knn", "global_best_parent"):
        assert set(result[method]) == {"exact", "depth1", "depth2", "depth3"}
        assert all(0.0 <= share <= 100.0 for share in result[method].values())
    assert "| **kwtree create_keyword" in placement.markdown(result)
    assert list(work.iterdir()) == []
    assert "Skipped" in placement.markdown(placement.run(data=tmp_path / "absent.tsv"))


def test_compaction_benchmark_runs_on_a_tiny_log(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import compaction
    finally:
        sys.path.remove(str(BENCH))
    result = compaction.run(200, 800, tmp_path, runs=2)
    small, large = result["sizes"]
    # (after: the live rows and the note that says which log the compaction replaced)
    assert (small["rows_before"], small["rows_after"], small["rows"]) == (101, 21 + 1, 101)
    assert (large["rows_before"], large["rows_after"], large["rows"]) == (1_001, 201 + 1, 1_001)
    for size in result["sizes"]:
        assert size["bytes_after"] < size["bytes_before"]
        assert set(size["raw_s"]) == set(size["s"]) == set(compaction.TIMES)
        assert all(len(samples) == 2 for samples in size["raw_s"].values())
        assert size["s"]["compact"]["n"] == 2
    table = compaction.markdown(result)
    assert "Compaction of logs of 101 and 1,001 rows (80% superseded rows)" in table
    assert "Scaling from 101 to 1,001 rows" in table and table.count("| `compact()` |") == 4
    assert list(tmp_path.iterdir()) == []


def test_export_benchmark_runs_on_tiny_trees(tmp_path):
    export = bench_module("export")
    result = export.run(20, 200, tmp_path, runs=2)
    assert result["same_counts"] and [size["infos"] for size in result["sizes"]] == [20, 200]
    for size in result["sizes"]:
        assert set(size["raw_s"]) == set(size["s"]) == {key for key, *_ in export.STEPS}
        assert all(len(samples) == 2 for samples in size["raw_s"].values())
    table = export.markdown(result)
    assert "Scaling from 20 to 200 infos" in table and table.count("| export, JSON |") == 2
    assert list(tmp_path.iterdir()) == []


def test_snapshot_benchmark_runs_on_tiny_logs(tmp_path):
    snapshot = bench_module("snapshot")
    work = tmp_path / "work"
    work.mkdir()
    result = snapshot.run(2, 2, cache=tmp_path / "cache", work=work)
    assert [size["runs"] for size in result["sizes"]] == [2, 2] and len(result["sizes"]) == 2
    for size in result["sizes"]:
        assert set(size["raw_s"]) == set(size["s"]) == {"snapshot", "restore", "stage", "tar_create", "tar_extract"}
        assert all(len(samples) == 2 for samples in size["raw_s"].values())
    table = snapshot.markdown(result)
    assert "Scaling from 1 MB to 2 MB" in table and table.count("`tree.snapshot()`") == 3
    assert list(work.iterdir()) == []


def test_fulltext_benchmark_runs_on_a_tiny_corpus(tmp_path):
    fulltext = bench_module("fulltext")
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    docs = [" ".join(words[(n + i) % 6] for i in range(n % 4 + 1)) for n in range(60)]
    result = fulltext.run(docs, [("alpha", "beta"), ("gamma", "omega")], 2, tmp_path)
    for engine in ("kwtree", "fts5"):
        assert [len(run["raw_ms"]["query"]) for run in result[engine]] == [2, 2]
        assert set(result[engine][0]["query"]) == {"median", "p90", "p99", "max", "n"}
    assert len(result["kwtree"][0]["raw_ms"]["ryw"]) == fulltext.RYW_ROUNDS
    assert "kwtree ÷ FTS5, medians of the query times" in fulltext.markdown(result, len(docs), 2)
    assert list(tmp_path.iterdir()) == []


def test_retrieval_benchmark_runs_on_tiny_corpora(tmp_path):
    retrieval = bench_module("retrieval")
    if not retrieval.CORPUS.exists():
        pytest.skip(f"{retrieval.CORPUS} not found")
    result = retrieval.run(600, 60, tmp_path, sizes=(300, 600))
    assert [size["docs"] for size in result["sizes"]] == [300, 600] and result["queries"] == 60
    for size in result["sizes"]:
        assert set(size["ms"]) == set(size["raw_ms"]) == {
            "bm25", "fts5", "hnsw", "brute", "recall_vector", "recall_vector_again", "hybrid", "fts5_brute"}
        assert len(size["raw_ms"]["bm25"]) == 60 and len(size["raw_ms"]["hybrid"]) == 10
    assert "skipped" in result["real_vector"]  # no cached real vectors for 600 docs
    table = retrieval.markdown(result)
    assert "Scaling from 300 to 600 infos" in table and table.count("| 600 |") == 5
    assert list(tmp_path.iterdir()) == []


def test_locomo_benchmark_times_recall_and_its_baselines(tmp_path):
    locomo = bench_module("locomo")
    if not locomo.DATA.exists():
        pytest.skip(f"{locomo.DATA} not found")
    result = locomo.run("hash", work=tmp_path, conversations=1)
    questions = result["questions"]
    for kind in ("kwtree", "baseline"):
        assert {mode: len(samples) for mode, samples in result["raw_ms"][kind].items()} == dict.fromkeys(
            locomo.MODES, questions)
    assert result["latency_ms"]["hybrid"]["n"] == result["baseline_ms"]["hybrid"]["n"] == questions
    assert "kwtree ÷ baseline (medians)" in locomo.markdown([result])
    assert list(tmp_path.iterdir()) == []


def test_reads_benchmark_runs_on_tiny_trees(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import reads
    finally:
        sys.path.remove(str(BENCH))
    result = reads.run((200, 2_000), 50, tmp_path)
    assert [size["n"] for size in result["sizes"]] == [200, 2_000]
    for size in result["sizes"]:
        assert set(size["kwtree_us"]) == set(size["sqlite_us"]) == set(reads.CALLS)
        assert all(len(samples) == 50 for samples in size["raw_us"]["kwtree"].values())
        assert size["mean_path_length"] > 2  # a deep tree, not every keyword under the root
    table = reads.markdown(result)
    assert "Scaling from 200 to 2,000 keywords" in table and table.count("| `get_path` |") == 2
    assert list(tmp_path.iterdir()) == []


# --- peers adapter ---


def test_peer_kwtree_adapter_maps_vector_hits_back_to_doc_ids(tmp_path):
    """bench/peer_kwtree.py, the Store the peers' driver uses for kwtree: a 50-doc store built
    through it answers with the workload's doc ids, in this process and after a reopen."""
    import json

    import numpy as np

    sys.path.insert(0, str(BENCH))
    try:
        import peer_kwtree
    finally:
        sys.path.remove(str(BENCH))
    rng = np.random.default_rng(7)
    doc_vecs = rng.standard_normal((50, peer_kwtree.DIM)).astype(np.float32)
    doc_vecs /= np.linalg.norm(doc_vecs, axis=1, keepdims=True)
    texts = [f"doc{i} word{i % 7} shared" for i in range(50)]
    data = tmp_path / "data"
    data.mkdir()
    (data / "docs.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    (data / "queries.jsonl").write_text(json.dumps({"id": 0, "text": "word3 query"}) + "\n")
    np.save(data / "doc_vecs.npy", doc_vecs)
    np.save(data / "query_vecs.npy", doc_vecs[[17]])
    ids = [1_000 + i for i in range(50)]  # not row numbers: the adapter must map hits to these

    store = peer_kwtree.Store(tmp_path / "store", create=True, n=50, data=data)
    store.bulk_insert(ids, texts, doc_vecs)
    assert store.count() == 50
    assert store.vquery(doc_vecs[5])[0] == 1_005
    assert store.vquery(doc_vecs[17], "word3 query", mode="recall")[0] == 1_017
    assert set(store.fts("word3 nothing")) == {1_000 + i for i in range(50) if i % 7 == 3}
    store.close()

    reopened = peer_kwtree.Store(tmp_path / "store", create=False, n=50, data=data)
    assert reopened.vquery(doc_vecs[42])[0] == 1_042
    assert reopened.vquery(doc_vecs[17], "word3 query", mode="recall")[0] == 1_017
    reopened.close()
    # Texts no caller handed a vector for are looked up in the workload files.
    embedder = peer_kwtree.WorkloadEmbedder(data)
    assert np.array_equal(embedder.embed([texts[3]]), doc_vecs[[3]])
    assert np.array_equal(embedder.embed_query(["word3 query"]), doc_vecs[[17]])


def test_write_path_benchmark_compares_this_checkout_with_a_revision():
    import subprocess

    done = subprocess.run([sys.executable, str(BENCH / "write_path.py"), "HEAD", "20", "1"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and "not a git repository" in done.stderr:
        pytest.skip("needs a git checkout")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("durability=none, 1 rounds x 20 writes")
    assert [line.split()[0] for line in lines[1:]] == ["create_keyword", "create_info"]
    assert all("ratio of medians" in line for line in lines[1:])


def test_cold_recall_benchmark_times_read_only_recalls():
    import subprocess

    done = subprocess.run([sys.executable, str(BENCH / "cold_recall.py"), "30", "1", "hybrid"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "bulk load of 30 infos, embedded, closed" in done.stdout, done.stdout
    assert "read-only `kwtree recall --mode hybrid`, 1 runs: median" in done.stdout, done.stdout


@pytest.mark.slow
def test_postgres_benchmark_runs_briefly(tmp_path):
    """The PostgreSQL suite starts its own server, times both logs and the plain INSERT, and
    says why when no server can start."""
    sys.path.insert(0, str(BENCH))
    try:
        import postgres
    finally:
        sys.path.remove(str(BENCH))
    result = postgres.run(seconds=0.5, work=tmp_path, lag_writes=10, writers=(2,), settle=1.5)
    text = postgres.markdown(result)
    if "skipped" in result:
        assert "Skipped: " in text
        return
    assert set(result["writers"]) == {"2"}
    for row in result["writers"].values():
        assert {"jsonl", "postgres", "insert", "chain"} <= set(row) and all(row[k]["writes"] > 0 for k in row)
    assert result["lag"]["postgres"]["n"] == result["lag"]["follower"]["n"] == 10 and "| 2 |" in text
    assert "follower" in text


def test_updates_benchmark_scores_the_shared_set_per_embedder():
    """bench/updates.py runs the shared scorer and lays its figures beside the issue's targets."""
    sys.path.insert(0, str(BENCH))
    try:
        import updates
    finally:
        sys.path.remove(str(BENCH))
    result = updates.run(quick=True, users="u1")
    if "skipped" in result:
        pytest.skip(result["skipped"])
    report = result["runs"]["hash"]
    assert report["users"] == 1 and report["commit_counts"]["extracted"] > 0
    table = updates.markdown(result)
    assert "| current cur>stale |" in table and ">= 95" in table
