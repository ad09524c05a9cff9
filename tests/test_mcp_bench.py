"""bench/mcp_recall.py: recall over MCP stdio timed next to the same call in-process, and the
server's start, on a real LoCoMo conversation (skipped when the data set is not there)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")
BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_recall_over_stdio_is_timed_next_to_the_in_process_call(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import mcp_recall
    finally:
        sys.path.remove(str(BENCH))
    if not mcp_recall.DATA.exists():
        pytest.skip(f"{mcp_recall.DATA} not found")
    result = mcp_recall.run(quick=True, work=tmp_path, questions=5)
    assert result["questions"] == 5 and result["infos"] > 100
    for name in ("recall", "toolbox", "stdio"):
        assert result[name]["n"] == 5 and result[name]["median"] > 0
    assert result["start"]["n"] == 3 and result["imports"]["n"] == 3
    table = mcp_recall.markdown(result)
    assert "| `recall` over MCP stdio" in table and "start: spawn" in table
