"""The benchmark harness runs end to end on tiny sizes (it measures nothing here: timings
belong in bench/, and no test asserts one)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_core_benchmarks_run_on_tiny_sizes(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import core
    finally:
        sys.path.remove(str(BENCH))
    plan = core.Plan(replay_rows=(2_000,), replay_repeats=1, write_n=5, write_rounds=1, batch_rounds=1,
                     memory_n=2_000, batch_size=500)
    results = core.run(plan, tmp_path)
    (replay,) = results["replay"]
    assert replay["rows"] >= 2_000 and replay["raw"][0]["rows"] == replay["rows"]
    assert set(results["durable_write"]["raw_us"]) == {
        "kwtree_create_keyword", "kwtree_create_info", "sqlite_wal_full", "append_fsync"}
    assert all(len(v) == 5 for v in results["durable_write"]["raw_us"].values())
    assert results["batch"]["batch_size"] == 500 and len(results["batch"]["raw_rows_per_s"]["kwtree"]) == 3
    assert results["memory"]["kwtree"]["n"] == 3
    table = core.markdown(results)
    assert "### Replay" in table and "### Durable single writes" in table and "### Memory per keyword" in table
    assert list(tmp_path.iterdir()) == []  # its scratch data is removed


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
    result = compaction.run(200, 800, tmp_path)
    assert (result["rows_before"], result["rows_after"], result["rows"]) == (1_001, 201, 1_001)
    assert result["bytes_after"] < result["bytes_before"]
    assert "Compaction of a 1,001-row log (80% superseded rows)" in compaction.markdown(result)
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
