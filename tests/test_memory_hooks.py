"""The lifecycle hooks: ``bootstrap`` and ``assemble`` never exceed their budget (a property
over random budgets and memories), keep the order profile → preferences → recalled →
summary, show each text once, give "" on an empty scope; ``after_turn`` commits only what is
new; ``memories`` leaves the archived sessions out."""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import pytest
from helpers import log_bytes
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_helpers import doc_examples, fixed, memory, options, prints_its_comments

from kwtree import CommitOptions, ExtractContext, InvalidInputError, KeywordTree
from kwtree.memory.layer import HEADINGS
from kwtree.retrieval.context import estimate_tokens
from kwtree.retrieval.fence import FENCE_CLOSE, FENCE_OPEN, NOTE

CHAT = [{"role": "user", "content": "I live in Paris and I love green tea."},
        {"role": "assistant", "content": "Noted. Shall I order the jasmine tea for Friday?"}]


def _seed(tree: KeywordTree, scope: str = "user:alice") -> None:
    tree.commit_session(CHAT, session_id="s1", scope=scope, options=options(
        memory("profile", "home", "Alice lives in Paris.", attribute="home"),
        memory("preferences", "green tea", "Alice loves green tea."),
        memory("events", "tea order", "Alice ordered jasmine tea for Friday.", source=1)))


def _headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("## ")]


def test_assemble_orders_profile_preferences_recalled_summary(tree: KeywordTree) -> None:
    _seed(tree)
    text = tree.assemble("jasmine tea order", "user:alice")
    assert _headings(text) == [HEADINGS["profile"], HEADINGS["preferences"], HEADINGS["recalled"],
                               HEADINGS["summary"]]
    recalled = text.split(HEADINGS["recalled"])[1].split(HEADINGS["summary"])[0]
    assert '] "Alice ordered jasmine tea for Friday."' in recalled
    summary = text.split(HEADINGS["summary"])[1]
    assert ', open questions] ["Shall I order the jasmine tea for Friday?"]' in summary
    assert ', session] "s1"' in summary and ", topics] [" in summary


def test_assemble_shows_each_text_once(tree: KeywordTree) -> None:
    _seed(tree)
    text = tree.assemble("Alice lives in Paris, green tea", "user:alice", 2000)
    assert text.count("Alice lives in Paris.") == 1 and text.count("Alice loves green tea.") == 1
    assert tree.recall("Alice lives in Paris, green tea", scope="user:alice")  # recalled, yet not repeated


def test_bootstrap_gives_the_profile_preferences_and_what_is_open(tree: KeywordTree) -> None:
    _seed(tree)
    text = tree.bootstrap("user:alice")
    assert _headings(text) == [HEADINGS["profile"], HEADINGS["preferences"], HEADINGS["summary"]]
    assert '- [user, ' in text and '] "Alice lives in Paris."' in text and "Shall I order the jasmine tea" in text
    assert "jasmine tea for Friday." not in text.split(HEADINGS["summary"])[0]  # no recalled events


def test_the_latest_session_is_the_one_shown(tree: KeywordTree) -> None:
    _seed(tree)
    tree.commit_session([{"role": "user", "content": "What about the museum on Sunday?"}], session_id="s2",
                        scope="user:alice", options=options())
    text = tree.bootstrap("user:alice")
    assert ', session] "s2"' in text and "What about the museum on Sunday?" in text and '"s1"' not in text


def test_an_empty_or_unknown_scope_gives_an_empty_block(tree: KeywordTree) -> None:
    assert tree.bootstrap("user:nobody") == "" and tree.assemble("tea", "user:nobody") == ""
    _seed(tree, "user:bob")
    assert tree.bootstrap("user:alice") == "" and tree.assemble("green tea", "user:alice") == ""
    assert "green tea" in tree.assemble("green tea", "user:bob")


def test_a_tiny_budget_leaves_out_what_does_not_fit(tree: KeywordTree) -> None:
    _seed(tree)
    frame = estimate_tokens("\n".join([FENCE_OPEN, NOTE, FENCE_CLOSE]))  # what the fence and its note cost
    assert tree.assemble("jasmine tea", "user:alice", max_tokens=frame + 3) == ""  # no memory fits: no block
    small = tree.assemble("jasmine tea", "user:alice", max_tokens=frame + 20)
    assert small and estimate_tokens(small) <= frame + 20
    assert small.split("\n")[:3] == [FENCE_OPEN, NOTE, HEADINGS["profile"]] and small.endswith(FENCE_CLOSE)


_WORDS = st.text(alphabet="abcdefghij klmnop", min_size=1, max_size=80).filter(lambda t: t.strip())


@settings(max_examples=15)
@given(budget=st.integers(1, 160), texts=st.lists(st.tuples(st.sampled_from(["profile", "preferences", "events"]),
                                                             _WORDS), min_size=1, max_size=8),
       query=_WORDS)
def test_blocks_never_exceed_their_budget(budget: int, texts: list[tuple[str, str]], query: str) -> None:
    with tempfile.TemporaryDirectory() as directory, \
            KeywordTree(Path(directory) / "t", durability="none", worker=False) as tree:
        candidates = [memory(category, f"k{i}", text) for i, (category, text) in enumerate(texts)]
        tree.commit_session([{"role": "user", "content": query}], session_id="s", scope="user:a",
                            options=options(*candidates))
        for text in (tree.assemble(query, "user:a", budget, min_score=0), tree.bootstrap("user:a", budget)):
            assert estimate_tokens(text) <= budget
            lines = text.splitlines()
            assert not lines or (lines[:2] == [FENCE_OPEN, NOTE] and lines[2].startswith("## ")
                                 and lines[-1] == FENCE_CLOSE)
            shown = [line for line in lines if line.startswith("- ")]
            assert len(shown) == len(set(shown))  # each text once


def test_after_turn_commits_only_the_new_messages(tree: KeywordTree) -> None:
    seen: list[ExtractContext] = []
    opts = CommitOptions(extractor=fixed(seen=seen))
    first = tree.commit_session(CHAT, session_id="run", scope="user:alice", options=opts)
    more = [*CHAT, {"role": "user", "content": "Yes, order it."}, {"role": "assistant", "content": "Done."}]
    second = tree.after_turn(more, "run", "user:alice")
    assert (first.first_new, first.seen, second.first_new, second.seen) == (0, 2, 2, 4)
    assert second.op_id is not None and tree.history()[-1].op_id == second.op_id
    frozen = log_bytes(tree.data_dir)
    final = tree.end_session(more, "run", "user:alice")
    assert final.op_id is None and final.seen == 4 and log_bytes(tree.data_dir) == frozen
    assert [c.first_new for c in seen] == [0]


def fulltext_watermark(tree: KeywordTree) -> str | None:
    """The operation the full-text index on disk was last committed at."""
    return orjson.loads((tree.data_dir / "cache" / "fulltext" / "meta.json").read_bytes())["watermark"]


def test_after_turn_finds_a_duplicate_the_full_text_index_has_not_committed(tree: KeywordTree) -> None:
    tree.after_turn([{"role": "user", "content": "I love green tea with honey."}], "s1", "user:ann")
    tree.recall("tea", scope="user:ann")  # the index holds everything so far
    indexed = fulltext_watermark(tree)
    chat = [{"role": "user", "content": "I really enjoy hiking in the Alps."}]
    first = tree.after_turn(chat, "s2", "user:ann")
    chat += [{"role": "assistant", "content": "Nice!"}, {"role": "user", "content": "I enjoy hiking in the Alps."}]
    second = tree.after_turn(chat, "s2", "user:ann")
    # Neither call committed the full-text index, yet the repeat was found among the unindexed.
    assert fulltext_watermark(tree) == indexed and tree.last_op_id != indexed
    hiking = next(d for d in first.decisions if d.category == "preferences")
    (again,) = [d for d in second.decisions if d.category == "preferences"]
    assert again.action == "skip" and again.info_id == hiking.info_id
    assert tree.recall("hiking Alps", scope="user:ann")  # a search brings the index up to date
    assert fulltext_watermark(tree) == tree.last_op_id


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from([
    "I love green tea.", "I love green tea with honey.", "I enjoy hiking in the Alps.", "I went to Rome with Bob.",
    "I usually run every morning.", "I love jazz.", "We visited Rome with Bob yesterday.", "I hate mornings."]),
    min_size=1, max_size=8))
def test_decisions_are_the_same_whether_the_index_is_up_to_date_or_not(texts: list[str]) -> None:
    """The prefilter over a lagging index plus the unindexed memories decides as one over an
    index brought up to date before every turn."""
    decided = []
    for search_first in (False, True):
        with tempfile.TemporaryDirectory() as directory, KeywordTree(directory, durability="none") as tree:
            chat: list[dict[str, str]] = []
            actions = []
            for text in texts:
                if search_first:
                    tree.search("anything")
                chat.append({"role": "user", "content": text})
                result = tree.after_turn(chat, "s", "user:ann")
                actions += [(d.category, d.key, d.action) for d in result.decisions]
            decided.append(actions)
    assert decided[0] == decided[1]


def test_memories_leave_the_archived_sessions_out(tree: KeywordTree) -> None:
    _seed(tree)
    contents = [info.content for info in tree.memories("user:alice")]
    assert sorted(contents) == ["Alice lives in Paris.", "Alice loves green tea.",
                                "Alice ordered jasmine tea for Friday."]
    (session,) = tree.find_keywords("s1")
    turns = [info for info in tree.get_infos_of_keyword(session.id) if "role" in info.metadata]
    assert [turn.metadata["role"] for turn in turns] == ["user", "assistant"]
    assert tree.memory_scope(tree.memories("user:alice")[0].id) == "user:alice"
    assert all(tree.memory_scope(turn.id) is None for turn in turns)
    recalled = tree.recall("Shall I order the jasmine tea", scope="user:alice", min_score=0)
    assert recalled[0].info.content == "Alice ordered jasmine tea for Friday."  # in its source turn's place
    assert tree.memories(["user:nobody"]) == []


@pytest.mark.parametrize(("call", "named"), [
    (lambda t: t.bootstrap(None), "scope must name whose memories"),
    (lambda t: t.bootstrap("alice"), "scope 'alice'"),
    (lambda t: t.assemble("tea", "user:alice", 0), "max_tokens"),
    (lambda t: t.assemble("", "user:alice"), "query"),
    (lambda t: t.memories(None), "scope must name whose memories"),
    (lambda t: t.memory_scope(""), "info_id"),
    (lambda t: t.after_turn([{"role": "user"}], "s", "user:alice"), "messages[0].content"),
])
def test_bad_input_names_the_field_and_writes_nothing(tree: KeywordTree, call, named: str) -> None:
    _seed(tree)
    frozen = log_bytes(tree.data_dir)
    with pytest.raises(InvalidInputError) as caught:
        call(tree)
    assert named in str(caught.value)
    assert log_bytes(tree.data_dir) == frozen


def test_the_docs_examples_print_what_the_docs_say(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/agent-memory.md (## From mem0, ## Lifecycle hooks): each python block, run in a new
    directory, prints its trailing ``# `` comment lines."""
    monkeypatch.chdir(tmp_path)
    blocks = doc_examples("From mem0", "Lifecycle hooks")
    assert len(blocks) == 2
    for block in blocks:
        assert prints_its_comments(block, lambda: capsys.readouterr().out)
