"""The commit-throughput benchmark runs end to end on one LoCoMo conversation (it measures
nothing here: no test asserts a timing)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_memory_commit_benchmark_commits_every_session_next_to_its_baseline(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import memory_commit
    finally:
        sys.path.remove(str(BENCH))
    if not memory_commit.DATA.exists():
        pytest.skip(f"{memory_commit.DATA} not found")
    result = memory_commit.run(work=tmp_path, conversations=1)
    assert result["sessions"] == len(result["raw_s"]["commit"]) == len(result["raw_s"]["batch"]) > 0
    assert memory_commit.session_time("1:56 pm on 8 May, 2023") == 1683554160.0
    table = memory_commit.markdown(result)
    assert "`commit_session`" in table and "batch_create_infos" in table
    assert list(tmp_path.iterdir()) == []
