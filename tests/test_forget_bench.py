"""The forget benchmark runs end to end on a tiny log (it measures nothing here: timings
belong in bench/, and no test asserts one)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_forget_benchmark_runs_on_a_tiny_log(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import forget
    finally:
        sys.path.remove(str(BENCH))
    result = forget.run(500, tmp_path, runs=2)
    assert result["rows"] == 501 and result["rows_rewritten"] >= 2
    assert set(result["raw_s"]) == set(result["s"]) == set(forget.TIMES)
    assert all(len(samples) == 2 for samples in result["raw_s"].values())
    table = forget.markdown(result)
    assert "Forgetting one info from a log of 501 rows" in table and table.count("| `forget(info_id)` |") == 2
    assert list(tmp_path.iterdir()) == []
