"""The commit-throughput benchmark runs end to end on one LoCoMo conversation, offline and with
an LLM (a fake one on 127.0.0.1); it measures nothing here: no test asserts a timing."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest
from messages_api import FakeMessagesAPI, completion

from kwtree import OpenAILLMClient

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def memory_commit() -> ModuleType:
    """bench/memory_commit.py, or a skip when its LoCoMo data is not here."""
    sys.path.insert(0, str(BENCH))
    try:
        import memory_commit
    finally:
        sys.path.remove(str(BENCH))
    if not memory_commit.DATA.exists():
        pytest.skip(f"{memory_commit.DATA} not found")
    return memory_commit


def test_memory_commit_benchmark_commits_every_session_next_to_its_baseline(tmp_path: Path,
                                                                           memory_commit: ModuleType) -> None:
    result = memory_commit.run(work=tmp_path, conversations=1)
    assert result["sessions"] == len(result["raw_s"]["commit"]) == len(result["raw_s"]["batch"]) > 0
    assert memory_commit.session_time("1:56 pm on 8 May, 2023") == 1683554160.0
    table = memory_commit.markdown(result)
    assert "`commit_session`" in table and "batch_create_infos" in table
    assert list(tmp_path.iterdir()) == []


def test_memory_commit_benchmark_reports_what_each_session_cost_the_llm(tmp_path: Path, api: FakeMessagesAPI,
                                                                         memory_commit: ModuleType,
                                                                         clean_llm_env: None) -> None:
    """``--llm openai`` (here a client of the fake API on 127.0.0.1, answering no memories):
    the calls and tokens of each committed session, read from the client's usage."""
    api.default = completion({"memories": []})
    llm = OpenAILLMClient(model="gpt-test", base_url=f"{api.url}/v1", max_retries=0)
    result = memory_commit.run(work=tmp_path, conversations=1, llm=llm)
    spent = result["llm"]["per_session"]
    assert len(spent["calls"]) == result["sessions"] > 0 and min(spent["calls"]) >= 1
    assert sum(spent["calls"]) == llm.usage["calls"] == len(api.requests)
    assert spent["input_tokens"] == [100 * calls for calls in spent["calls"]]
    assert result["llm"]["name"] == llm.name and result["llm"]["sessions_fell_back"] == 0
    table = memory_commit.markdown(result)
    assert f"LLM {llm.name}" in table and "| input tokens |" in table
