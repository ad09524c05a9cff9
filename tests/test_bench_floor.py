"""The relevance-floor benchmark runs end to end on two conversations and a few questions
(it measures nothing here: the figures come from bench/run.py --only floor)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_floor_benchmark_measures_real_and_cross_pairs_and_scoped_latency(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import floor
    finally:
        sys.path.remove(str(BENCH))
    if not floor.locomo.DATA.exists():
        pytest.skip(f"{floor.locomo.DATA} not found")
    result = floor.run(work=tmp_path, conversations=2, questions=6)
    assert result["conversations"] == 2
    measured = result["floor"]
    assert set(measured["sweep"]) == {str(value) for value in floor.SWEEP}
    assert measured["cross_questions"] == measured["questions"]  # each asked of the one other memory
    assert 0 <= measured["at_default"]["cross_empty_pct"] <= 100
    assert result["scopes"]["all_ms"]["n"] == result["scopes"]["scoped_ms"]["n"] == result["scopes"]["questions"]
    text = floor.markdown(result)
    assert "Relevance floor" in text and "scope=" in text
    assert list(tmp_path.iterdir()) == []
