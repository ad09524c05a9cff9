"""The memory pipeline with OpenAILLMClient as its LLM ("any LLM, same pipeline"): a commit
whose LLM fails in any way still commits the conversation, with what the offline rules find,
and names each step that fell back and why, on the result and in the operation's audit; a
scripted extraction goes through the same ``commit_session``; and ``KWTREE_LLM=openai`` reaches
the CLI and ``Memory`` (``llm_from_env``). The LLM is a fake Chat Completions API on 127.0.0.1
(tests/messages_api.py); the scripted answers check the protocol and the wiring, not quality.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from memory_helpers import CHAT, SEED
from messages_api import HANG, FakeMessagesAPI, Reply, closed_port, completion, error, llm_env

from kwtree import KeywordTree, Memory, OpenAILLMClient, llm_from_env
from kwtree.cli.main import main

SCOPE = "user:alice"
TIMEOUT = 0.3
WHERE = "the OpenAI-compatible API at"

#: No key, endpoint, LLM setting or proxy of the developer's shell reaches these tests (conftest.py).
pytestmark = pytest.mark.usefixtures("clean_llm_env")


def client(base_url: str, timeout: float = 10.0, max_retries: int = 1) -> OpenAILLMClient:
    made = OpenAILLMClient(model="gpt-test", base_url=base_url, timeout=timeout, max_retries=max_retries,
                           backoff=0.001, max_backoff=0.001)
    made._sleep = lambda seconds: None  # the seam tests/test_openai_client.py uses: no real wait
    return made


def open_tree(directory: Path, llm: OpenAILLMClient | None = None, **options: Any) -> KeywordTree:
    return KeywordTree(directory, durability="none", worker=False, llm_client=llm, **options)


def seed(directory: Path) -> None:
    with open_tree(directory) as tree:
        tree.commit_session(SEED, session_id="s0", scope=SCOPE)


#: How the LLM fails: what the fake API answers (None: nothing listens), and how the error
#: of each step that fell back begins. A malformed or refused answer is not an outage, so the
#: commit goes on asking (each step falls back on its own answer); after a call that got no
#: answer it asks no more ("not asked").
FAILURES: dict[str, tuple[Reply | None, str, bool]] = {
    "malformed JSON": (completion(content='{"memories": [oops'), "LLMResponseError: the answer is not JSON", True),
    "refusal": (completion(content="", refusal="I can't help with that."),
                "LLMResponseError: the model refused to answer: I can't help with that.", True),
    "500s": (error(500, "server_error", "The server had an error"),
             f"LLMUnavailableError: {WHERE} http://127.0.0.1", False),
    "closed port": (None, f"LLMUnavailableError: cannot reach {WHERE} http://127.0.0.1", False),
    "hangs": (HANG, f"LLMTimeoutError: no answer from {WHERE} http://127.0.0.1", False),
}


@pytest.mark.parametrize("kind", list(FAILURES))
def test_a_commit_whose_llm_fails_commits_offline_and_says_why(tmp_path: Path, api: FakeMessagesAPI,
                                                               kind: str) -> None:
    reply, failed, answered = FAILURES[kind]
    if reply is None:
        llm = client(f"http://127.0.0.1:{closed_port()}/v1")
    else:
        api.default = reply
        llm = client(f"{api.url}/v1", timeout=TIMEOUT if reply is HANG else 10.0)
    seed(tmp_path / "offline")
    seed(tmp_path / "failing")
    with open_tree(tmp_path / "offline") as tree:
        offline = tree.commit_session(CHAT, session_id="s1", scope=SCOPE)
        expected = sorted(info.content for info in tree.memories(SCOPE))
    with open_tree(tmp_path / "failing", llm) as tree:
        result = tree.commit_session(CHAT, session_id="s1", scope=SCOPE)
        assert result.op_id == tree.history()[-1].op_id  # committed: one operation, the conversation kept
        assert sorted(info.content for info in tree.memories(SCOPE)) == expected
        assert [d.content for d in result.decisions] == [d.content for d in offline.decisions]
        assert result.fell_back and [f.step for f in result.fallbacks] == ["extraction", "placement", "dedup"]
        first, *later = result.fallbacks
        assert first.error.startswith(failed), first.error
        for fallback in later:
            if answered:  # the LLM is up: each step was asked and got the same unusable answer
                assert fallback.error.startswith(failed), fallback.error
            else:
                assert fallback.error == f"not asked: the LLM failed earlier in this commit ({first.error})"
        audit = tree.history()[-1].audit["commit_session"]
        assert audit["fallbacks"] == [dataclasses.asdict(f) for f in result.fallbacks]
        if answered:  # the judge's failed call is kept with its error
            assert audit["dedup"]["calls"][0]["error"] == later[-1].error
        else:
            assert audit["dedup"] == "offline"
    if reply is not None and not answered:
        assert len(api.requests) == 2  # one call and its one retry, then no more
    if reply is not None:
        assert all(r["path"] == "/v1/chat/completions" for r in api.requests)


EXTRACTED = {"memories": [
    {"category": "preferences", "key": "green tea", "abstract": "Alice loves green tea with honey.",
     "content": "I love green tea with honey.", "confidence": 0.9, "sources": [0], "happened": None},
    {"category": "entities", "key": "Tom", "abstract": "Alice's brother Tom works as a nurse.",
     "content": "My brother Tom works as a nurse.", "confidence": 0.9, "sources": [0], "happened": "2024-05-06"},
]}


def test_a_scripted_extraction_goes_through_commit_session(tmp_path: Path, api: FakeMessagesAPI) -> None:
    """The model's answers (scripted) extract, place and judge: no fallback, and the client's
    usage counts the commit's calls and tokens."""
    seed(tmp_path / "tree")
    api.script(completion(EXTRACTED), completion({"action": "missing", "reason": "a new person"}),
               completion({"decisions": [{"item": 0, "action": "merge", "existing": 0, "reason": "the same tea"}]}))
    api.default = completion({"action": "missing", "reason": "nothing fits"})
    llm = client(f"{api.url}/v1")
    with open_tree(tmp_path / "tree", llm) as tree:
        result = tree.commit_session(CHAT, session_id="s1", scope=SCOPE)
        assert result.fallbacks == () and not result.fell_back
        assert [d.content for d in result.decisions] == ["I love green tea with honey.",
                                                         "My brother Tom works as a nurse."]
        assert [d.action for d in result.decisions] == ["merge", "create"]  # as the scripted judge said
        audit = tree.history()[-1].audit["commit_session"]
        assert audit["dedup"]["judge"] == "llm"
        assert {p["agent"]["navigator"] for p in audit["placements"] if "agent" in p} == {llm.name}
        tom = tree.get_keyword(result.decisions[1].keyword_id)
        assert [k.name for k in tree.get_path(tom.id)][-1] == "Tom"
    extraction = api.requests[0]["body"]
    assert extraction["response_format"]["type"] == "json_schema"
    assert [m["role"] for m in extraction["messages"]] == ["system", "user"]
    assert "extract long-term memories" in extraction["messages"][0]["content"]
    assert "I love green tea with honey." not in extraction["messages"][0]["content"]  # the chat stays data
    assert "I love green tea with honey." in extraction["messages"][1]["content"]
    calls = len(api.requests)
    assert llm.usage == {"calls": calls, "input_tokens": 100 * calls, "output_tokens": 20 * calls, "retries": 0}


def test_kwtree_commit_with_kwtree_llm_openai_down_warns_and_exits_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "session.json"
    session.write_text('{"session_id": "s1", "messages": [{"role": "user", "content": "I love green tea."}]}')
    for name, value in llm_env(f"http://127.0.0.1:{closed_port()}/v1", "openai").items():
        monkeypatch.setenv(name, value)
    assert main(["commit", str(tmp_path / "memory"), str(session), "--scope", SCOPE]) == 0
    out, err = capsys.readouterr()
    assert "extracted 1: created 1" in out
    assert err.startswith(f"warning: the LLM failed (LLMUnavailableError: cannot reach {WHERE} http://127.0.0.1"), err
    assert err.rstrip().endswith("; done offline instead: extraction")


def test_kwtree_commit_with_kwtree_llm_openai_asks_the_server(tmp_path: Path, api: FakeMessagesAPI,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "session.json"
    session.write_text('{"session_id": "s1", "messages": [{"role": "user", "content": "I love green tea."}]}')
    api.default = completion({"memories": [
        {"category": "preferences", "key": "green tea", "abstract": "The user loves green tea.",
         "content": "I love green tea.", "confidence": 0.9, "sources": [0], "happened": None}]})
    for name, value in llm_env(f"{api.url}/v1", "openai").items():
        monkeypatch.setenv(name, value)
    assert main(["commit", str(tmp_path / "memory"), str(session), "--scope", SCOPE]) == 0
    out, err = capsys.readouterr()
    assert "extracted 1: created 1" in out and err == ""
    assert api.requests[0]["path"] == "/v1/chat/completions"
    assert api.requests[0]["body"]["model"] == "gpt-test" and "authorization" not in api.requests[0]["headers"]


def test_memory_gets_kwtree_llm_openai_through_llm_from_env(tmp_path: Path, api: FakeMessagesAPI,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    api.default = error(503, "server_error", "down")
    for name, value in llm_env(f"{api.url}/v1", "openai").items():
        monkeypatch.setenv(name, value)
    with Memory(tmp_path / "memory", llm=llm_from_env(), durability="none", worker=False) as mem:
        added = mem.add(CHAT, user_id="alice")
        assert len(added["op_ids"]) == 1 and {item["event"] for item in added["results"]} == {"ADD"}
        assert added["fallbacks"][0]["step"] == "extraction"
        assert added["fallbacks"][0]["error"].startswith(f"LLMUnavailableError: {WHERE} {api.url}/v1 answered 503")
    assert len(api.requests) == 1 and api.requests[0]["path"] == "/v1/chat/completions"


def test_memory_without_an_llm_uses_the_one_kwtree_llm_names(tmp_path: Path, api: FakeMessagesAPI,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    api.default = error(503, "server_error", "down")
    for name, value in llm_env(f"{api.url}/v1", "openai").items():
        monkeypatch.setenv(name, value)
    with Memory(tmp_path / "memory", durability="none", worker=False) as mem:  # one setting, as the CLI reads it
        added = mem.add(CHAT, user_id="alice")
        assert added["fallbacks"][0]["step"] == "extraction"
    assert len(api.requests) == 1 and api.requests[0]["path"] == "/v1/chat/completions"
    monkeypatch.setenv("KWTREE_LLM", "offline")
    with Memory(tmp_path / "offline", durability="none", worker=False) as mem:
        assert "fallbacks" not in mem.add(CHAT, user_id="alice")
    assert len(api.requests) == 1
