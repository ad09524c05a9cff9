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
