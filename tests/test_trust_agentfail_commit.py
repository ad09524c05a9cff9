"""Issue 25, B19: an LLM outage must not lose the conversation.

With the LLM unreachable, ``commit_session`` used to raise LLMUnavailableError even under the
default ``on_agent_failure="fallback"``, and nothing was committed. Now each step the LLM could
not do (extraction, placement, dedup) is done the way a tree without an LLM does it, the
session is committed as ONE operation, and the result and the operation's audit name each step
that fell back and the LLM's error. After the first call that got no answer the commit asks no
more, so a hung LLM costs one call's timeout, not one per step. Under
``on_agent_failure="raise"`` the commit is refused with AgentError and nothing is written.

The LLM is the real AnthropicLLMClient against 127.0.0.1 (tests/messages_api.py): a port
nothing listens on, an API that answers 529 to everything, one that never answers.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import dir_bytes
from memory_helpers import CHAT, SEED
from messages_api import HANG, FakeMessagesAPI, closed_port, decided, error, llm_env

from kwtree import AgentError, CommitResult, KeywordTree, Memory
from kwtree.agent.anthropic_client import AnthropicLLMClient
from kwtree.cli.main import main

SCOPE = "user:alice"
#: The steps a commit of CHAT on the seeded tree asks the LLM for: the candidates, where the
#: new entities Tom and Leeds go, and whether "green tea with honey" repeats "green tea".
STEPS = ["extraction", "placement", "dedup"]
#: How long the tests' client waits for an answer: the hung API's test waits this, twice.
TIMEOUT = 0.3


#: No key, endpoint, LLM setting or proxy of the developer's shell reaches these tests (conftest.py).
pytestmark = pytest.mark.usefixtures("clean_llm_env")


def client(url: str, timeout: float = 10.0, max_retries: int = 1) -> AnthropicLLMClient:
    made = AnthropicLLMClient(api_key="test-key", base_url=url, model="claude-test", timeout=timeout,
                              max_retries=max_retries, backoff=0.001, max_backoff=0.001)
    made._sleep = lambda seconds: None  # the seam tests/test_anthropic_client.py uses: no real wait
    return made


def outage(kind: str, api: FakeMessagesAPI) -> tuple[AnthropicLLMClient, str]:
    """A client of an LLM that is down as ``kind`` says, and how the client's error begins."""
    if kind == "refused":
        return client(f"http://127.0.0.1:{closed_port()}"), "LLMUnavailableError: cannot reach the Anthropic API"
    if kind == "overloaded":
        api.default = error(529, "overloaded_error", "Overloaded")
        return client(api.url), "LLMUnavailableError: the Anthropic API answered 529 (overloaded_error)"
    api.default = HANG
    return client(api.url, TIMEOUT), f"LLMTimeoutError: no answer from the Anthropic API within {TIMEOUT}s"


def open_tree(directory: Path, llm: AnthropicLLMClient | None = None, **options: Any) -> KeywordTree:
    return KeywordTree(directory, durability="none", worker=False, llm_client=llm, **options)


def seed(directory: Path) -> None:
    with open_tree(directory) as tree:
        tree.commit_session(SEED, session_id="s0", scope=SCOPE)


def decisions(tree: KeywordTree, result: CommitResult) -> list[tuple[Any, ...]]:
    """What the commit decided, with the path of the keyword holding each memory."""
    return [(d.action, d.category, d.key, d.content, d.reason,
             [k.name for k in tree.get_path(d.keyword_id)] if d.keyword_id else None) for d in result.decisions]


@pytest.mark.parametrize("kind", ["refused", "overloaded", "hangs"])
def test_a_commit_with_the_llm_down_commits_what_a_tree_without_one_would(tmp_path: Path, api: FakeMessagesAPI,
                                                                          kind: str) -> None:
    llm, failed = outage(kind, api)
    seed(tmp_path / "down")
    seed(tmp_path / "offline")
    with open_tree(tmp_path / "offline") as tree:
        offline = tree.commit_session(CHAT, session_id="s1", scope=SCOPE)
        expected = decisions(tree, offline)
        expected_memories = sorted(info.content for info in tree.memories(SCOPE))
    with open_tree(tmp_path / "down", llm) as tree:
        result = tree.commit_session(CHAT, session_id="s1", scope=SCOPE)  # before: LLMUnavailableError
        # the offline rules' candidates, the offline navigator's placements and the thresholds' verdicts
        assert decisions(tree, result) == expected and {"merge", "create"} <= {d[0] for d in expected}
        assert sorted(info.content for info in tree.memories(SCOPE)) == expected_memories
        hits = tree.recall("what does Alice's brother Tom do?", scope=SCOPE)
        assert "My brother Tom works as a nurse." in [hit.info.content for hit in hits]
        session = tree.get_keyword(result.session_keyword_id)
        assert session.metadata["seen"] == len(CHAT) and result.op_id == tree.history()[-1].op_id
        assert [i.metadata["turn"] for i in tree.get_infos_of_keyword(session.id) if "turn" in i.metadata] == [0, 1, 2]

        assert result.fell_back and [f.step for f in result.fallbacks] == STEPS
        first, *later = result.fallbacks
        assert first.error.startswith(failed), first.error
        for fallback in later:  # the commit stopped asking after the first call that got no answer
            assert fallback.error == f"not asked: the LLM failed earlier in this commit ({first.error})"
        assert "offline rules" in first.instead and "offline navigator" in later[0].instead
        audit = tree.history()[-1].audit["commit_session"]
        assert audit["fallbacks"] == [dataclasses.asdict(f) for f in result.fallbacks]
        walked = {p["key"]: p["agent"]["navigator"] for p in audit["placements"] if "agent" in p}
        assert walked == {"Tom": "offline", "Leeds": "offline"}
        assert audit["dedup"] == "offline"
    if kind != "refused":  # one call, with its one retry: not one per step and keyword
        assert len(api.requests) == 2
        assert all("extract long-term memories" in r["body"]["system"] for r in api.requests)


@pytest.mark.parametrize("kind", ["refused", "hangs"])
def test_on_agent_failure_raise_refuses_the_commit_and_writes_nothing(tmp_path: Path, api: FakeMessagesAPI,
                                                                      kind: str) -> None:
    llm, failed = outage(kind, api)
    seed(tmp_path / "tree")
    before = dir_bytes(tmp_path / "tree" / "log")
    with (open_tree(tmp_path / "tree", llm, on_agent_failure="raise") as tree,
          pytest.raises(AgentError) as refused):
        tree.commit_session(CHAT, session_id="s1", scope=SCOPE)  # before: LLMUnavailableError, not an AgentError
    assert refused.value.reason == "agent_failure" and refused.value.detail.startswith(failed)
    assert "could not extract the memories" in str(refused.value) and "nothing was written" in str(refused.value)
    assert dir_bytes(tmp_path / "tree" / "log") == before


EXTRACTED = {"memories": [
    {"category": "preferences", "key": "green tea", "abstract": "Alice loves green tea with honey.",
     "content": "I love green tea with honey.", "confidence": 0.9, "sources": [0], "happened": None},
    {"category": "entities", "key": "Tom", "abstract": "Alice's brother Tom works as a nurse.",
     "content": "My brother Tom works as a nurse.", "confidence": 0.9, "sources": [0], "happened": None},
]}


def test_the_llm_failing_after_the_extraction_falls_back_for_placement_and_dedup(tmp_path: Path,
                                                                                 api: FakeMessagesAPI) -> None:
    seed(tmp_path / "tree")
    api.script(decided(EXTRACTED))
    api.default = error(529, "overloaded_error", "Overloaded")  # down from the second call on
    with open_tree(tmp_path / "tree", client(api.url)) as tree:
        result = tree.commit_session(CHAT, session_id="s1", scope=SCOPE)
        assert [d.content for d in result.decisions] == ["I love green tea with honey.",
                                                         "My brother Tom works as a nurse."]
        placed, judged = result.fallbacks
        assert placed.step == "placement" and placed.error.startswith("LLMUnavailableError: the Anthropic API "
                                                                      "answered 529 (overloaded_error)")
        assert judged.step == "dedup" and judged.error.startswith("not asked: the LLM failed earlier in this commit")
        placement = tree.history()[-1].audit["commit_session"]["placements"][0]
        assert placement["key"] == "Tom" and placement["agent"]["navigator"] == "offline"
        failed_walk = placement["agent"]["llm_walk"]  # what the LLM did, kept
        assert failed_walk["rounds"][0]["error"].startswith("LLMUnavailableError: ")
        tom = tree.get_keyword(result.decisions[1].keyword_id)
        path = [k.name for k in tree.get_path(tom.id)]
        assert path[path.index("user:alice") + 1] == "entities" and path[-1] == "Tom"  # inside the branch
    assert len(api.requests) == 3  # the extraction, then the placement's call and its retry


def test_the_llm_failing_only_at_dedup_falls_back_to_the_thresholds(tmp_path: Path, api: FakeMessagesAPI) -> None:
    seed(tmp_path / "tree")
    api.script(decided(EXTRACTED), decided({"action": "missing", "reason": "a new person"}))
    api.default = error(529, "overloaded_error", "Overloaded")
    with open_tree(tmp_path / "tree", client(api.url)) as tree:
        result = tree.commit_session(CHAT, session_id="s1", scope=SCOPE)
        assert [(f.step, f.error[:48]) for f in result.fallbacks] == [
            ("dedup", "LLMUnavailableError: the Anthropic API answered ")]
        assert "thresholds" in result.fallbacks[0].instead
        merged = result.decisions[0]
        assert merged.action == "merge" and "merge threshold" in merged.reason
        audit = tree.history()[-1].audit["commit_session"]
        assert audit["placements"][0]["agent"]["navigator"] == "anthropic:claude-test"  # the LLM placed Tom
        assert audit["dedup"]["calls"][0]["error"] == result.fallbacks[0].error


def test_an_unusable_extraction_answer_falls_back_and_the_llm_is_still_asked(tmp_path: Path,
                                                                            api: FakeMessagesAPI) -> None:
    """A malformed answer is not an outage: the offline rules extract, and the LLM, which did
    answer, still places the new keywords and judges duplicates."""
    seed(tmp_path / "tree")
    api.script(decided({"memories": "none"}), *[decided({"action": "missing", "reason": "new"})] * 2,
               decided({"decisions": []}))
    with open_tree(tmp_path / "tree", client(api.url)) as tree:
        result = tree.commit_session(CHAT, session_id="s1", scope=SCOPE)
        assert [f.step for f in result.fallbacks] == ["extraction"]
        assert result.fallbacks[0].error.startswith("LLMResponseError: the answer does not match the schema")
        audit = tree.history()[-1].audit["commit_session"]
        assert {p["agent"]["navigator"] for p in audit["placements"] if "agent" in p} == {"anthropic:claude-test"}
        assert audit["dedup"]["judge"] == "llm"
    assert len(api.requests) == 4


@pytest.mark.parametrize(("answered", "refusal"), [(1, "while placing the entities keyword 'Tom'"),
                                                   (2, "could not judge duplicates")])
def test_on_agent_failure_raise_refuses_a_later_step_the_llm_fails(tmp_path: Path, api: FakeMessagesAPI,
                                                                   answered: int, refusal: str) -> None:
    seed(tmp_path / "tree")
    before = dir_bytes(tmp_path / "tree" / "log")
    api.script(*[decided(EXTRACTED), decided({"action": "missing", "reason": "a new person"})][:answered])
    api.default = error(529, "overloaded_error", "Overloaded")
    with (open_tree(tmp_path / "tree", client(api.url), on_agent_failure="raise") as tree,
          pytest.raises(AgentError) as refused):
        tree.commit_session(CHAT, session_id="s1", scope=SCOPE)
    assert refusal in str(refused.value) and "nothing was written" in str(refused.value)
    assert refused.value.detail.startswith("LLMUnavailableError: the Anthropic API answered 529")
    assert dir_bytes(tmp_path / "tree" / "log") == before


def test_a_hung_llm_does_not_hold_the_writer_lock(tmp_path: Path, api: FakeMessagesAPI) -> None:
    """The LLM is asked while the commit is prepared, before the write lock is taken: another
    writer commits while the LLM hangs. Then the API hangs up without an answer, and the commit
    falls back and lands after that write."""
    seed(tmp_path / "tree")
    api.default = HANG
    committed: list[CommitResult] = []

    def commit() -> None:  # the hang ends when the test releases it, long before this timeout
        with open_tree(tmp_path / "tree", client(api.url, timeout=600.0, max_retries=0)) as tree:
            committed.append(tree.commit_session(CHAT, session_id="s1", scope=SCOPE))

    worker = threading.Thread(target=commit)
    worker.start()
    try:
        assert api.arrived.wait(120), "the commit never asked the LLM"
        with open_tree(tmp_path / "tree", lock_timeout=60.0) as other:  # LockTimeoutError if the commit held it
            meanwhile = other.create_keyword("Written while the LLM hung", "root")
    finally:
        api.released.set()
        worker.join(120)
    assert not worker.is_alive() and committed
    result = committed[0]
    assert result.fallbacks[0].error.startswith("LLMUnavailableError: cannot reach the Anthropic API")
    with open_tree(tmp_path / "tree") as tree:
        assert [op.op_id for op in tree.history()][-2:] == [meanwhile.op_id, result.op_id]


@pytest.mark.parametrize("kind", ["refused", "hangs"])
def test_memory_add_with_the_llm_down_adds_what_the_offline_rules_find(tmp_path: Path, api: FakeMessagesAPI,
                                                                       kind: str) -> None:
    llm, failed = outage(kind, api)
    with Memory(tmp_path / "memory", llm=llm, durability="none", worker=False) as mem:
        added = mem.add(CHAT, user_id="alice")  # before: LLMUnavailableError, nothing added
        assert len(added["op_ids"]) == 1 and {item["event"] for item in added["results"]} == {"ADD"}
        assert added["fallbacks"][0]["step"] == "extraction" and added["fallbacks"][0]["error"].startswith(failed)
        everything = [item["memory"] for item in mem.get_all(user_id="alice")["results"]]
        assert "My brother Tom works as a nurse." in everything and "I live in Leeds." in everything
        found = mem.search("where does Alice live?", user_id="alice")["results"]
        assert "I live in Leeds." in [item["memory"] for item in found]
        assert "fallbacks" not in mem.add("My name is Alice.", user_id="bob", infer=False)  # no LLM asked


def test_memory_add_under_raise_writes_nothing(tmp_path: Path) -> None:
    with Memory(tmp_path / "memory", durability="none", worker=False) as mem:
        mem.add("My name is Alice.", user_id="alice")
    before = dir_bytes(tmp_path / "memory" / "log")
    llm = client(f"http://127.0.0.1:{closed_port()}")
    with (Memory(tmp_path / "memory", llm=llm, on_agent_failure="raise", worker=False) as mem,
          pytest.raises(AgentError, match="could not extract the memories")):
        mem.add(CHAT, user_id="alice")
    assert dir_bytes(tmp_path / "memory" / "log") == before


def test_kwtree_commit_with_the_llm_down_warns_and_exits_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "session.json"
    session.write_text('{"session_id": "s1", "messages": [{"role": "user", "content": "I love green tea."}]}')
    for name, value in llm_env(f"http://127.0.0.1:{closed_port()}").items():
        monkeypatch.setenv(name, value)
    assert main(["commit", str(tmp_path / "memory"), str(session), "--scope", SCOPE]) == 0
    out, err = capsys.readouterr()
    assert "extracted 1: created 1" in out
    assert err.startswith("warning: the LLM failed (LLMUnavailableError: cannot reach the Anthropic API"), err
    assert err.rstrip().endswith("; done offline instead: extraction") and err.count("\n") == 1
