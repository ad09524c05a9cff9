"""bench/memory_hooks.py: after_turn timed per turn pair next to its baselines, on real LoCoMo
sessions (skipped when the data set is not there)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_after_turn_is_timed_per_turn_pair_next_to_plain_writes(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import memory_hooks
    finally:
        sys.path.remove(str(BENCH))
    if not memory_hooks.DATA.exists():
        pytest.skip(f"{memory_hooks.DATA} not found")
    result = memory_hooks.run(work=tmp_path, conversations=1, per_conversation=2, large=(300, 600))
    assert result["sessions"] == 2 and result["pairs"] == len(result["raw_ms"]["after_turn"]) > 2
    for name in ("after_turn", "create_info", "batch_create_infos"):
        assert result[name]["n"] == result["pairs"] and result[name]["median"] > 0
    table = memory_hooks.markdown(result)
    assert "| `after_turn` (incremental" in table and "p99" in table
    grown = result["large"]
    assert (grown["keywords"], grown["infos"], grown["sessions"]) == (300, 600, 2)
    assert grown["after_turn"]["n"] == grown["create_info"]["n"] == grown["pairs"] > 2
    assert "already holds 300 keywords and 600 memories" in table
