"""Issue 13, item 12: agent failures the caller and the CLI user see.

An LLM that is down, times out or answers nonsense used to leave a keyword under the root, or
an info linked to nothing, with no word. Now the returned keyword / info carries an
``agent`` outcome naming the fallback and why, ``kwtree add`` prints a warning line (exit 0),
and a tree opened with ``on_agent_failure="raise"`` refuses the fallback with AgentError and
writes nothing. The LLM is driven two ways: the scripted StubLLMClient, and the real
AnthropicLLMClient against a fake Messages API on 127.0.0.1 (tests/test_anthropic_client.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import dir_bytes, snapshot
from messages_api import FakeMessagesAPI, Reply, closed_port, error, llm_env

from kwtree import (
    AgentError,
    AgentOutcome,
    InvalidInputError,
    KeywordTree,
    LLMUnavailableError,
)
from kwtree.agent.anthropic_client import AnthropicLLMClient
from kwtree.agent.clients import StubLLMClient
from kwtree.cli.main import main

DOWN = LLMUnavailableError("the Anthropic API could not be reached: connection refused")



#: No key, endpoint, LLM setting or proxy of the developer's shell reaches these tests (conftest.py).
pytestmark = pytest.mark.usefixtures("clean_llm_env")


def open_tree(directory: Path, client: Any, **options: Any) -> KeywordTree:
    return KeywordTree(directory, durability="none", worker=False, llm_client=client, **options)


def seed(directory: Path) -> str:
    with KeywordTree(directory, durability="none", worker=False) as tree:
        return tree.create_keyword("Languages", parent_id="root").id


def test_a_placement_the_llm_could_not_make_says_so_on_the_keyword(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    seed(directory)
    with open_tree(directory, StubLLMClient([DOWN])) as tree:
        rust = tree.create_keyword("Rust")
        outcome = rust.agent  # before: Keyword had no such field, and nothing said it fell back
        assert isinstance(outcome, AgentOutcome) and outcome.fell_back
        assert (outcome.intent, outcome.fallback, outcome.keyword_ids) == ("suggest_parent", "agent_failure", ("root",))
        assert outcome.error.startswith("LLMUnavailableError: ") and "connection refused" in outcome.error
        assert "placed under 'root' because the agent failed" in outcome.summary
        assert rust.parent_id == "root"
        stored = tree.get_keyword(rust.id)
        assert stored == rust and stored.agent is None  # an outcome, not data: never stored or compared
        assert tree.history(rust.id)[-1].audit["agent"]["outcome"]["reason"] == "agent_failure"
        assert tree.agent_stats()["fallbacks"] == {"agent_failure": 1}


def test_a_placement_the_llm_made_says_where_and_why(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    languages = seed(directory)
    with open_tree(directory, StubLLMClient([{"action": "match", "idx": 0, "reason": "a language"}])) as tree:
        rust = tree.create_keyword("Rust")
    assert rust.parent_id == languages and rust.agent is not None and not rust.agent.fell_back
    assert rust.agent.keyword_ids == (languages,)
    assert rust.agent.summary == "placed under 'Languages', the keyword the agent matched"


def test_auto_link_says_which_infos_the_failing_llm_left_unlinked(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    languages = seed(directory)

    def decide(document: dict[str, Any]) -> dict[str, Any]:
        if "flaky" in document["query"]:
            raise DOWN
        return {"action": "match", "idx": 0}

    with open_tree(directory, StubLLMClient([decide] * 10)) as tree:
        infos = [tree.create_info(f"memory {n}" + (" flaky" if n % 5 in (1, 3) else ""), auto_link=True)
                 for n in range(10)]
        unlinked = [info.content for info in infos if not tree.get_keywords_of_info(info.id)]
        told = [info.content for info in infos if info.agent is not None and info.agent.fell_back]
        assert len(unlinked) == 4 and told == unlinked  # before: no word about the 4 unlinked
        for info in infos:
            assert info.agent is not None
            if info.agent.fell_back:
                assert info.agent.keyword_ids == () and info.agent.fallback == "agent_failure"
                assert info.agent.summary.startswith("linked to no keyword: the agent failed (agent_failure: ")
            else:
                assert info.agent.keyword_ids == (languages,)
                assert info.agent.summary == "linked to 1 keyword(s) the agent found: 'Languages'"


@pytest.mark.parametrize("answer, reason", [
    (DOWN, "agent_failure"),
    ({"action": "teleport"}, "agent_failure"),
    ({"action": "match", "idx": 99}, "invalid_jump"),
])
def test_on_agent_failure_raise_refuses_the_fallback_and_writes_nothing(tmp_path: Path, answer: Any,
                                                                         reason: str) -> None:
    directory = tmp_path / "tree"
    languages = seed(directory)
    before = dir_bytes(directory / "log")
    with open_tree(directory, StubLLMClient([answer] * 4), on_agent_failure="raise") as tree:
        seen = snapshot(tree, [languages])
        with pytest.raises(AgentError) as placing:
            tree.create_keyword("Rust")
        assert placing.value.reason == reason and placing.value.detail
        assert "placing 'Rust'" in str(placing.value) and "nothing was written" in str(placing.value)
        assert "parent_id" in str(placing.value)  # the next step
        with pytest.raises(AgentError, match="linking a new info"):
            tree.create_info("rust is fast", auto_link=True)
        with pytest.raises(AgentError, match="searching for 'systems language'"):
            tree.search("systems language")
        if isinstance(answer, Exception):  # (a plan answer it cannot use is dropped step by step)
            with pytest.raises(AgentError, match="could not draft the plan"):
                tree.reorganize()
        assert snapshot(tree, [languages]) == seen
    assert dir_bytes(directory / "log") == before


def test_on_agent_failure_raise_changes_nothing_when_the_agent_decides(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    languages = seed(directory)
    with open_tree(directory, StubLLMClient([{"action": "match", "idx": 0}]), on_agent_failure="raise") as tree:
        assert tree.create_keyword("Rust").parent_id == languages
    with pytest.raises(InvalidInputError, match="on_agent_failure must be one of 'fallback', 'raise'"):
        KeywordTree(directory, on_agent_failure="ignore")


def test_the_anthropic_client_failing_over_http_is_named_on_the_keyword(tmp_path: Path, api: FakeMessagesAPI) -> None:
    directory = tmp_path / "tree"
    seed(directory)
    api.script(error(529, "overloaded_error", "Overloaded"), error(500, "api_error", "boom"))
    client = AnthropicLLMClient(api_key="test-key", base_url=api.url, model="claude-test", max_retries=1,
                                backoff=0.001, max_backoff=0.001)
    client._sleep = lambda seconds: None  # the seam tests/test_anthropic_client.py uses: no real wait
    with open_tree(directory, client) as tree:
        rust = tree.create_keyword("Rust")
    assert len(api.requests) == 2  # one attempt and one retry, then the fallback
    assert rust.parent_id == "root" and rust.agent is not None and rust.agent.fallback == "agent_failure"
    assert rust.agent.error.startswith("LLMUnavailableError: ") and "500" in rust.agent.error


def test_the_anthropic_client_timing_out_is_named_and_refused_under_raise(tmp_path: Path, api: FakeMessagesAPI) -> None:
    directory = tmp_path / "tree"
    seed(directory)
    before = dir_bytes(directory / "log")
    api.script(Reply(body={}, delay=60.0))  # never answers in time (released at teardown)
    client = AnthropicLLMClient(api_key="test-key", base_url=api.url, model="claude-test", timeout=0.2, max_retries=0)
    with open_tree(directory, client, on_agent_failure="raise") as tree, pytest.raises(AgentError) as refused:
        tree.create_info("rust is fast", auto_link=True)
    assert refused.value.reason == "agent_failure" and refused.value.detail.startswith("LLMTimeoutError: ")
    assert dir_bytes(directory / "log") == before


def test_kwtree_add_with_an_unreachable_llm_warns_and_exits_0(tmp_path: Path) -> None:
    directory = tmp_path / "tree"
    seed(directory)
    done = subprocess.run([sys.executable, "-m", "kwtree", "add", str(directory), "Rust"], capture_output=True,
                          text=True, timeout=120, env=llm_env(f"http://127.0.0.1:{closed_port()}"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("\tRust\tunder root")
    # before: exit 0 and an empty stderr, after ~10 s of retries
    assert done.stderr.startswith("warning: placed under 'root' because the agent failed (agent_failure: "
                                  "LLMUnavailableError: "), done.stderr
    assert done.stderr.count("\n") == 1


def test_kwtree_add_under_raise_exits_1_and_writes_nothing(tmp_path: Path, api: FakeMessagesAPI,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "tree"
    seed(directory)
    before = dir_bytes(directory / "log")
    api.script(error(500, "api_error", "boom"))
    for name, value in llm_env(api.url, KWTREE_ON_AGENT_FAILURE="raise").items():
        monkeypatch.setenv(name, value)
    assert main(["add", str(directory), "Rust"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: the agent failed while placing 'Rust' (agent_failure: ")
    assert dir_bytes(directory / "log") == before
    monkeypatch.setenv("KWTREE_ON_AGENT_FAILURE", "sometimes")
    assert main(["add", str(directory), "Rust"]) == 1
    assert "KWTREE_ON_AGENT_FAILURE must be 'fallback' or 'raise'" in capsys.readouterr().err
    monkeypatch.setenv("KWTREE_ON_AGENT_FAILURE", "fallback")
    monkeypatch.setenv("KWTREE_LLM_TIMEOUT", "soon")
    assert main(["add", str(directory), "Rust"]) == 1
    assert "KWTREE_LLM_TIMEOUT must be a float" in capsys.readouterr().err


def test_kwtree_add_info_auto_link_warns_when_nothing_was_linked(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "tree"
    seed(directory)
    assert main(["add-info", str(directory), "zzz qqq", "--auto-link"]) == 0
    out, err = capsys.readouterr()
    assert out.count("\n") == 1
    assert err == "warning: linked to no keyword: the agent found none for the text\n"
    assert main(["add-info", str(directory), "Languages I speak", "--auto-link", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and '"summary": "linked to 1 keyword(s) the agent found: \'Languages\'"' in out
