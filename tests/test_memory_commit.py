"""commit_session: the archive, one operation per commit, undo, incremental commits, dry runs,
bad input, re-checks against what another writer did meanwhile, two processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import log_bytes, snapshot
from hypothesis import given
from hypothesis import strategies as st
from memory_helpers import fixed, memory, options, restorable, scope_part, session_turns

from kwtree import (
    AgentError,
    CommitOptions,
    ExtractContext,
    InvalidInputError,
    KeywordTree,
    ReadOnlyError,
)
from kwtree.memory_schema import DEFAULT_SCOPE
from kwtree.testing import known_ids

CHAT = [
    {"role": "user", "content": "Hi, my name is Alice and I live in Paris.", "ts": "2023-05-08T13:56:00"},
    {"role": "assistant", "content": "Nice to meet you, Alice. Let's plan your trip."},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "search_flights", "arguments": {"to": "Rome"}}]},
    {"role": "tool", "name": "search_flights", "content": "3 flights found", "tool_call_id": "c1"},
    {"role": "user", "content": "Which one is the cheapest?"},
]


def test_a_commit_is_one_operation_that_archives_the_session(tree: KeywordTree) -> None:
    before = len(tree.history())
    result = tree.commit_session(CHAT, session_id="trip-1", scope="user:alice",
                                 options=options(memory("preferences", "travel", "Alice plans a trip to Rome.")))
    history = tree.history()
    assert len(history) == before + 1
    op = history[-1]
    assert (op.kind, op.op_id) == ("commit_session", result.op_id)
    scope_kw = scope_part(tree, "user:alice")
    assert scope_kw.metadata == {"scope": "user:alice"}
    sessions = scope_part(tree, "user:alice", "sessions")
    assert sessions.metadata == {"branch": "sessions"}
    session = tree.get_keyword(result.session_keyword_id)
    assert session.parent_id == sessions.id and session.name == "trip-1"
    assert session.metadata["seen"] == len(CHAT) and session.metadata["session_id"] == "trip-1"
    assert session.metadata["session_time"] == 1683554160.0  # the first message's ts, UTC
    infos = tree.get_infos_of_keyword(session.id)
    assert infos[0].metadata["kind"] == "session_summary"  # the summary leads
    summary = infos[0].metadata
    assert "travel" in summary["topics"] and any("Let's plan your trip" in d for d in summary["decisions"])
    assert summary["open_questions"] == ["Which one is the cheapest?"]
    turns = infos[1:]
    assert [t.metadata["turn"] for t in turns] == [0, 1, 2, 3, 4]  # in order, the tool call too
    assert [t.metadata["role"] for t in turns] == ["user", "assistant", "assistant", "tool", "user"]
    assert turns[2].content.startswith("tool call: ") and "search_flights" in turns[2].content
    assert {t.metadata["session_id"] for t in turns} == {"trip-1"}
    assert turns[0].metadata["happened_at"] == 1683554160.0
    memory_info = tree.get_info(result.decisions[0].info_id)
    assert memory_info.metadata["sources"] == [turns[0].id]
    assert memory_info.metadata["category"] == "preferences" and memory_info.metadata["key"] == "travel"
    assert set(result.created_ids) >= {session.id, memory_info.id, *(t.id for t in turns)}
    assert op.audit["commit_session"]["decisions"][0]["action"] == "create"
    assert (result.extracted, result.created, result.skipped, result.first_new, result.seen) == (1, 1, 0, 0, 5)


def test_the_memories_are_embedded_through_the_outbox(tree: KeywordTree) -> None:
    result = tree.commit_session(CHAT, session_id="s", scope="user:alice", options=options(
        memory("preferences", "tea", "Alice drinks green tea every morning.")))
    assert tree.wait_indexed(120)
    hits = tree.recall("green tea every morning", k=5, mode="vector")
    assert result.decisions[0].info_id in [hit.info.id for hit in hits]
    assert tree.outbox_status()["pending"] == 0


def test_without_turns_only_the_summary_is_archived(tree: KeywordTree) -> None:
    result = tree.commit_session(CHAT, session_id="s", scope="user:alice",
                                 options=CommitOptions(keep_turns=False, extractor=fixed()))
    infos = tree.get_infos_of_keyword(result.session_keyword_id)
    assert [i.metadata.get("kind") for i in infos] == ["session_summary"]


def test_the_default_scope_is_one_default_user(tree: KeywordTree) -> None:
    result = tree.commit_session(CHAT[:1], session_id="s", options=options())
    assert result.scope == DEFAULT_SCOPE == "user:default"
    assert scope_part(tree, "user:default", "sessions").id == tree.get_keyword(result.session_keyword_id).parent_id


def test_session_ids_that_differ_only_in_case_are_two_sessions(tree: KeywordTree) -> None:
    first = tree.commit_session(CHAT[:1], session_id="Trip 1", scope="user:alice", options=options())
    second = tree.commit_session(CHAT[:2], session_id="trip-1", scope="user:alice", options=options())
    assert first.session_keyword_id != second.session_keyword_id and second.first_new == 0
    assert tree.get_keyword(second.session_keyword_id).name == "trip-1 (2)"
    assert tree.get_keyword(second.session_keyword_id).metadata["session_id"] == "trip-1"


def test_a_keyword_named_like_the_scope_is_not_taken_for_it(tree: KeywordTree) -> None:
    impostor = tree.create_keyword("user:alice", llm_auto_place=False)
    frozen = log_bytes(tree.data_dir)
    with pytest.raises(InvalidInputError, match=r"scope keyword 'user:alice'.*in the way"):
        tree.commit_session(CHAT, session_id="s", scope="user:alice", options=options())
    assert log_bytes(tree.data_dir) == frozen and tree.get_children(impostor.id) == []


def test_a_scope_marker_on_a_keyword_of_another_name_is_not_taken_for_the_scope(tree: KeywordTree) -> None:
    # reads find a scope by its keyword's name and marker (scope_keyword): a commit files where they look
    stray = tree.create_keyword("Alice", metadata={"scope": "user:alice"}, llm_auto_place=False)
    result = tree.commit_session(CHAT, session_id="s", scope="user:alice", options=options())
    held = tree.scope_keyword("user:alice")
    assert held is not None and held.id != stray.id
    assert held.id in [keyword.id for keyword in tree.get_path(result.session_keyword_id)]
    assert tree.get_children(stray.id) == []


def test_undo_of_a_commit_restores_the_tree_exactly(tree: KeywordTree) -> None:
    tree.commit_session(CHAT[:2], session_id="s0", scope="user:alice",
                        options=options(memory("preferences", "travel", "Alice likes trains.")))
    kids, iids = known_ids(tree)
    before = snapshot(tree, kids, iids)
    result = tree.commit_session(CHAT, session_id="s0", scope="user:alice", options=options(
        memory("preferences", "travel", "Alice likes trains and planes.", source=3),
        memory("profile", "location", "Alice lives in Paris.", source=3, attribute="location")))
    assert result.merged == 1 and result.created == 1
    tree.undo(result.op_id)
    assert restorable(snapshot(tree, kids, iids)) == restorable(before)


def test_committing_again_extracts_only_the_new_messages(tree: KeywordTree) -> None:
    contexts: list[ExtractContext] = []
    first = tree.commit_session(CHAT[:2], session_id="s", scope="user:alice",
                                options=CommitOptions(extractor=fixed(seen=contexts)))
    no_dates = [{key: value for key, value in m.items() if key != "ts"} for m in CHAT]
    second = tree.commit_session(no_dates, session_id="s", scope="user:alice",
                                 options=CommitOptions(extractor=fixed(seen=contexts)))
    assert [c.first_new for c in contexts] == [0, 2]
    assert [c.session_time for c in contexts] == [1683554160.0] * 2  # the first commit's date, kept
    assert (first.first_new, first.seen, second.first_new, second.seen) == (0, 2, 2, 5)
    assert second.session_keyword_id == first.session_keyword_id
    turns = session_turns(tree, first.session_keyword_id)
    assert [t.metadata["turn"] for t in turns] == [0, 1, 2, 3, 4]  # the first two once, not again
    data_dir = tree.data_dir
    frozen = log_bytes(data_dir)
    third = tree.commit_session(CHAT, session_id="s", scope="user:alice",
                                options=CommitOptions(extractor=fixed(seen=contexts)))
    assert third.op_id is None and third.seen == 5 and len(contexts) == 2  # nothing new: no extraction
    assert log_bytes(data_dir) == frozen


def test_a_changed_earlier_message_is_refused_naming_it(tree: KeywordTree) -> None:
    tree.commit_session(CHAT[:3], session_id="s", scope="user:alice", options=options())
    frozen = log_bytes(tree.data_dir)
    changed = [dict(m) for m in CHAT]
    changed[1]["content"] = "Something else entirely."
    with pytest.raises(InvalidInputError, match=r"messages\[1\] differs.*new session_id"):
        tree.commit_session(changed, session_id="s", scope="user:alice", options=options())
    with pytest.raises(InvalidInputError, match="holds 2 messages but 3"):
        tree.commit_session(CHAT[:2], session_id="s", scope="user:alice", options=options())
    assert log_bytes(tree.data_dir) == frozen
    # another session id takes the changed conversation
    assert tree.commit_session(changed, session_id="s-edited", scope="user:alice", options=options()).op_id


def test_a_dry_run_returns_the_plan_and_writes_nothing(tree: KeywordTree) -> None:
    tree.commit_session(CHAT[:1], session_id="s", scope="user:alice",
                        options=options(memory("preferences", "tea", "Alice likes green tea.")))
    frozen = log_bytes(tree.data_dir)
    ops = len(tree.history())
    candidates = (memory("preferences", "tea", "Alice likes green tea.", source=1),
                  memory("preferences", "coffee", "Alice dislikes coffee.", source=1))
    plan = tree.commit_session(CHAT[:2], session_id="s", scope="user:alice",
                               options=CommitOptions(extractor=fixed(*candidates), dry_run=True))
    assert plan.dry_run and plan.op_id is None
    assert [d.action for d in plan.decisions] == ["skip", "create"] and plan.created_ids
    assert log_bytes(tree.data_dir) == frozen and len(tree.history()) == ops
    real = tree.commit_session(CHAT[:2], session_id="s", scope="user:alice", options=options(*candidates))
    assert [(d.action, d.reason) for d in real.decisions] == [(d.action, d.reason) for d in plan.decisions]


def test_a_dry_run_works_on_a_read_only_tree_and_a_commit_does_not(tree_dir: Path) -> None:
    KeywordTree(tree_dir, durability="none").close()
    with KeywordTree(tree_dir, read_only=True) as reader:
        plan = reader.commit_session(CHAT, session_id="s", options=CommitOptions(dry_run=True, extractor=fixed()))
        assert plan.session_keyword_id is None and plan.created_ids
        with pytest.raises(ReadOnlyError):
            reader.commit_session(CHAT, session_id="s", options=options())


BAD_CALLS = [
    ({"messages": "hello"}, "messages must be a list"),
    ({"messages": [{"role": "user"}]}, r"messages\[0\].content must be a string"),
    ({"messages": [{"content": "hi"}]}, r"messages\[0\].role"),
    ({"messages": [{"role": "user", "content": 3}]}, r"messages\[0\].content"),
    ({"messages": [{"role": "user", "content": "hi", "ts": "yesterday"}]}, r"messages\[0\].ts"),
    ({"messages": ["hi"]}, r"messages\[0\] must be a dict"),
    ({"session_id": ""}, "session_id"),
    ({"session_id": 7}, "session_id"),
    ({"session_id": "!!!"}, "session_id '!!!' must hold a letter or a digit"),
    ({"scope": "alice"}, "scope"),
    ({"scope": "user:"}, "scope"),
    ({"options": {"dry_run": True}}, "options must be a kwtree.CommitOptions"),
    ({"options": CommitOptions(keep_turns="yes")}, "options.keep_turns"),  # type: ignore[arg-type]
    ({"options": CommitOptions(dedup="maybe")}, "options.dedup"),
    ({"options": CommitOptions(dedup="llm")}, "needs a tree opened with an llm_client"),
    ({"options": CommitOptions(prefilter_k=0)}, "options.prefilter_k"),
    ({"options": CommitOptions(session_time="soon")}, "options.session_time"),
    ({"options": CommitOptions(policies={"x": "y"})}, "options.policies"),  # type: ignore[dict-item]
    ({"options": options(memory("moods", "k", "Happy."))}, r"candidates\[0\].category 'moods' has no policy"),
    ({"options": options(memory("preferences", "!!!", "Tea."))}, r"candidates\[0\].key"),
    ({"options": options(memory("preferences", "tea", "Tea.", source=99))}, r"candidates\[0\].sources"),
    ({"options": CommitOptions(extractor=lambda m, c: "nope")}, "must return a list of Candidate"),
]


@pytest.mark.parametrize(("change", "message"), BAD_CALLS)
def test_bad_input_names_the_field_and_writes_nothing(tree: KeywordTree, change: dict, message: str) -> None:
    tree.commit_session(CHAT[:1], session_id="s", scope="user:alice", options=options())
    frozen = log_bytes(tree.data_dir)
    call = {"messages": CHAT, "session_id": "s2", "scope": "user:alice", "options": options(), **change}
    messages = call.pop("messages")
    with pytest.raises(InvalidInputError, match=message):
        tree.commit_session(messages, **call)
    assert log_bytes(tree.data_dir) == frozen


def test_an_extractor_that_raises_is_an_agent_error_and_writes_nothing(tree: KeywordTree) -> None:
    def broken(messages: object, context: object) -> list:
        raise RuntimeError("model on fire")

    frozen = log_bytes(tree.data_dir)
    with pytest.raises(AgentError, match="model on fire"):
        tree.commit_session(CHAT, session_id="s", options=CommitOptions(extractor=broken))
    assert log_bytes(tree.data_dir) == frozen


def test_a_session_another_writer_committed_meanwhile_is_prepared_again(tree: KeywordTree) -> None:
    """The extractor runs outside the write lock; another process (here another tree on the
    same directory) commits the same session meanwhile: the decider notices and the commit is
    prepared again, finding nothing new."""
    other = KeywordTree(tree.data_dir, durability="none", worker=False)
    calls: list[int] = []

    def racing(messages: object, context: ExtractContext) -> list:
        calls.append(context.first_new)
        if len(calls) == 1:
            other.commit_session(CHAT, session_id="s", scope="user:alice", options=options())
        return []

    try:
        result = tree.commit_session(CHAT, session_id="s", scope="user:alice",
                                     options=CommitOptions(extractor=racing))
    finally:
        other.close()
    assert calls == [0] and result.op_id is None and result.seen == len(CHAT)
    assert [op.kind for op in tree.history()].count("commit_session") == 1


COMMITTER = """
    import json, sys
    from kwtree import Candidate, CommitOptions, KeywordTree
    data_dir, tag = sys.argv[1], sys.argv[2]
    tree = KeywordTree(data_dir, durability="full", lock_timeout=60)
    print("ready", flush=True)
    assert sys.stdin.readline() == "go\\n"
    done = []
    for n in range(5):
        messages = [{"role": "user", "content": f"{tag} message {i}"} for i in range(n + 1)]
        text = f"{tag} did thing {n}"
        candidate = Candidate("events", f"{tag}-event", text, text, 0.9, (n,))
        result = tree.commit_session(messages, session_id=f"{tag}-s{n % 2}", scope="user:shared",
                                     options=CommitOptions(extractor=lambda m, c, x=candidate: [x]))
        done.append(result.op_id)
    tree.close()
    print(json.dumps(done), flush=True)
"""


def test_two_processes_commit_different_sessions_to_one_directory(tmp_path: Path, children) -> None:
    data_dir = tmp_path / "tree"
    KeywordTree(data_dir).close()
    procs = [children(COMMITTER, data_dir, tag) for tag in ("a", "b")]
    for child in procs:
        child.expect("ready")
    for child in procs:
        child.send("go")
    written = [json.loads(child.readline()) for child in procs]
    for child in procs:
        child.finish()
    with KeywordTree(data_dir, read_only=True) as tree:
        ops = [op for op in tree.history() if op.kind == "commit_session"]
        assert sorted(op.op_id for op in ops) == sorted(written[0] + written[1])
        scopes = [k for k in tree.get_children("root") if k.metadata.get("scope") == "user:shared"]
        assert len(scopes) == 1  # created once, by whichever came first
        sessions = tree.get_children(scope_part(tree, "user:shared", "sessions").id)
        assert sorted(s.name for s in sessions) == ["a-s0", "a-s1", "b-s0", "b-s1"]
        for session in sessions:
            turns = session_turns(tree, session.id)
            assert [t.metadata["turn"] for t in turns] == list(range(session.metadata["seen"]))
        events = tree.get_children(scope_part(tree, "user:shared", "events").id)
        assert sorted(k.name for k in events) == ["a-event", "b-event"]
        for event in events:
            assert len(tree.get_infos_of_keyword(event.id)) == 5  # append only: all five


# --- properties ----------------------------------------------------------------------------------

WORDS = st.sampled_from(["tea", "coffee", "Paris", "Rome", "trains", "chess", "jazz", "hiking"])
TURN = st.one_of(
    st.builds(lambda w: {"role": "user", "content": f"I love {w}."}, WORDS),
    st.builds(lambda w: {"role": "user", "content": f"Hi, my name is {w.title()}. I live in {w.title()}."}, WORDS),
    st.builds(lambda w: {"role": "assistant", "content": f"Tell me more about {w}?"}, WORDS),
    st.builds(lambda w, ok: {"role": "tool", "name": w, "content": "ok" if ok else "error: failed", "duration": 0.5},
              WORDS, st.booleans()),
)


@given(first=st.lists(TURN, min_size=1, max_size=6), more=st.lists(TURN, max_size=4), turns=st.booleans())
def test_property_commit_twice_writes_nothing_and_undo_restores(tmp_path_factory, first: list, more: list,
                                                                 turns: bool) -> None:
    data_dir = tmp_path_factory.mktemp("prop") / "tree"
    with KeywordTree(data_dir, durability="none", worker=False) as tree:
        opts = CommitOptions(keep_turns=turns)
        tree.commit_session(first, session_id="s", scope="user:p", options=opts)
        kids, iids = known_ids(tree)
        before = snapshot(tree, kids, iids)
        result = tree.commit_session(first + more, session_id="s", scope="user:p", options=opts)
        frozen = log_bytes(data_dir)
        again = tree.commit_session(first + more, session_id="s", scope="user:p", options=opts)
        assert again.op_id is None and log_bytes(data_dir) == frozen
        if more:
            assert result.op_id is not None
            tree.undo(result.op_id)
            assert restorable(snapshot(tree, kids, iids)) == restorable(before)
        else:
            assert result.op_id is None


def test_the_callers_metadata_goes_on_every_memory_in_the_same_operation(tmp_path: Path) -> None:
    """CommitOptions.metadata: on each memory written (under user_metadata), the session's
    turns untouched, one operation."""
    with KeywordTree(tmp_path / "tree", durability="none", worker=False) as tree:
        before = len(tree.history())
        result = tree.commit_session([{"role": "user", "content": "I love green tea. I live in Leeds."}],
                                     session_id="s", scope="user:alice",
                                     options=CommitOptions(metadata={"source": "chat"}))
        assert len(tree.history()) == before + 1
        written = [d.info_id for d in result.decisions if d.action != "skip" and d.info_id]
        assert written
        assert all(tree.get_info(iid).metadata["user_metadata"] == {"source": "chat"} for iid in written)
        turns = [info for info in tree.get_infos_of_keyword(result.session_keyword_id) if "turn" in info.metadata]
        assert turns and all("user_metadata" not in info.metadata for info in turns)
        with pytest.raises(InvalidInputError, match="metadata"):
            tree.commit_session([{"role": "user", "content": "I love tea."}], session_id="t", scope="user:alice",
                                options=CommitOptions(metadata={"bad": object()}))


def test_a_commit_resolves_its_scope_and_branches_once_however_many_memories(
        tree: KeywordTree, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 28: one commit_session looked its scope up 18 times and its branches 29 times,
    # again for every memory it weighed.
    from kwtree.memory import commit as memory_commit
    from kwtree.memory import session_commit

    lookups = {"scope": 0, "branch": 0}

    def counting(module: Any, name: str, what: str) -> None:
        real = getattr(module, name)

        def wrapper(*args: Any) -> Any:
            lookups[what] += 1
            return real(*args)

        monkeypatch.setattr(module, name, wrapper)

    counting(session_commit, "scope_keyword", "scope")
    counting(memory_commit, "scope_keyword", "scope")
    counting(session_commit, "find_branch", "branch")
    counting(memory_commit, "find_branch", "branch")
    counted = []
    for session, many in (("first", 1), ("few", 2), ("many", 8)):  # (the first makes the scope's branches)
        candidates = [memory("preferences", f"topic {session} {n}", f"I like thing {n} of {session}", source=0)
                      for n in range(many)]
        lookups.update(scope=0, branch=0)
        messages = [{"role": "user", "content": "a few things I like"}]
        tree.commit_session(messages, session_id=session, scope="user:ann", options=options(*candidates))
        counted.append(dict(lookups))
    assert counted[1] == counted[2]


@pytest.mark.parametrize("calls", [{"name\ud800": "x"}, [{"arguments": "\udfff"}], {1: "non-string key"},
                                   [{"big": 2**70}]])
def test_tool_calls_that_cannot_be_stored_are_refused_naming_them(tmp_path: Path, calls: Any) -> None:
    """A tool call's record (kept as the turn's text when it has none) that has no JSON form
    (a lone surrogate, a key that is no string, an integer over 64 bits) is InvalidInputError
    naming messages[i].tool_calls, with nothing written (found by the hostile-input fuzz: a
    TypeError from the encoder, under the writer lock)."""
    with KeywordTree(tmp_path / "t", worker=False) as tree:
        before = log_bytes(tmp_path / "t")
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": calls}]
        with pytest.raises(InvalidInputError, match=r"messages\[1\]\.tool_calls"):
            tree.after_turn(messages, "s1", "user:ann")
        assert log_bytes(tmp_path / "t") == before
