"""The descend loop's mechanics, driven through KeywordTree by a scripted StubLLMClient:
multi-target actions, fallbacks, the round limit, the candidate list and the MRU's share of
it, and a property test with random trees and random (often wrong) answers."""

from __future__ import annotations

import re
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_agent import LANGS, MISSING, choose, grow

from kwtree import ROOT_ID, KeywordTree, KwtreeError, normalize_name
from kwtree.agent import StubLLMClient
from kwtree.models import SearchStatus


@pytest.fixture
def open_tree(tmp_path):
    """Opens trees in tmp_path with a StubLLMClient of the given decisions; closes them."""
    opened: list[KeywordTree] = []

    def make(decisions=(), name="tree", **options):
        stub = StubLLMClient(decisions)
        tree = KeywordTree(tmp_path / name, durability="none", llm_client=stub, **options)
        opened.append(tree)
        return tree, stub

    yield make
    for tree in opened:
        tree.close()


def _names(request: dict) -> list[str]:
    return [c["name"] for c in request["candidates"]]


# --- multi-target actions ------------------------------------------------------------------


def test_jump_to_several_continues_from_their_children_at_the_common_ancestor(open_tree):
    tree, stub = open_tree([choose("jump", "Languages", "Tools"), MISSING])
    k = grow(tree, LANGS)
    result = tree.search("svn")
    second = stub.requests[1]
    assert second["current_path"] == ["Programming"]
    assert _names(second) == ["Python", "Go", "Git"]
    assert [c["idx"] for c in second["candidates"]] == [0, 1, 2]
    assert result.status is SearchStatus.NOT_FOUND and result.suggested_parent_id == k["Programming"].id


def test_jump_to_several_across_the_root_is_at_the_root(open_tree):
    tree, stub = open_tree([choose("jump", "Languages", "Animals"), choose("match", "Cat")])
    k = grow(tree, LANGS)
    result = tree.search("kitty")
    assert stub.requests[1]["current_path"] == []
    assert _names(stub.requests[1]) == ["Python", "Go", "Dog", "Cat"]
    assert result.status is SearchStatus.MATCHED and result.node.id == k["Cat"].id


def test_jump_to_a_node_and_its_descendant_is_at_the_node(open_tree):
    tree, stub = open_tree([choose("jump", "Programming", "Languages"), MISSING])
    grow(tree, LANGS)
    tree.search("svn")
    assert stub.requests[1]["current_path"] == ["Programming"]
    assert _names(stub.requests[1]) == ["Languages", "Tools", "Python", "Go", "Git"]


def test_jump_to_a_leaf_and_a_parent_continues_from_the_parent(open_tree):
    tree, stub = open_tree([choose("jump", "Git", "Animals"), MISSING])
    grow(tree, LANGS)
    tree.search("svn")
    assert (stub.requests[1]["current_path"], _names(stub.requests[1])) == (["Animals"], ["Dog", "Cat"])


def test_match_several_is_ambiguous(open_tree):
    tree, _ = open_tree([choose("match", "Python", "Go", reason="both fit")])
    k = grow(tree, LANGS)
    result = tree.search("a language")
    assert result.status is SearchStatus.AMBIGUOUS and result.reason == "both fit"
    assert [c.id for c in result.candidates] == [k["Python"].id, k["Go"].id]
    assert tree.agent_stats()["mru_size"] == 0  # only a match is remembered


def test_match_the_same_idx_twice_is_one_match(open_tree):
    tree, _ = open_tree([lambda doc: {"action": "match", "idxs": [_names(doc).index("Go")] * 2}])
    k = grow(tree, LANGS)
    result = tree.search("golang")
    assert result.status is SearchStatus.MATCHED and result.node.id == k["Go"].id


def test_ambiguous_names_its_candidates(open_tree):
    tree, _ = open_tree([choose("ambiguous", "Dog", "Cat")])
    k = grow(tree, LANGS)
    result = tree.search("pet")
    assert result.status is SearchStatus.AMBIGUOUS
    assert {c.id for c in result.candidates} == {k["Dog"].id, k["Cat"].id}


def test_jump_to_several_leaves_is_ambiguous(open_tree):
    tree, stub = open_tree([choose("jump", "Python", "Git", "Dog"), MISSING])
    k = grow(tree, LANGS)
    result = tree.search("something")
    assert result.status is SearchStatus.AMBIGUOUS
    assert [c.id for c in result.candidates] == [k["Python"].id, k["Git"].id, k["Dog"].id]
    assert len(stub.requests) == 1 and stub.remaining == 1


def test_jump_to_a_single_leaf_ends_missing_under_it(open_tree):
    tree, stub = open_tree([choose("jump", "Git"), choose("match", "Dog")])
    k = grow(tree, LANGS)
    result = tree.search("git submodules")
    assert result.status is SearchStatus.NOT_FOUND and result.reason == "no_candidates"
    assert (result.suggested_parent_id, result.suggested_name) == (k["Git"].id, "git submodules")
    assert len(stub.requests) == 1 and stub.remaining == 1
    assert tree.agent_stats()["failures"] == 0


# --- fallbacks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        {"action": "match", "idx": 99},
        {"action": "jump", "idx": 9},
        {"action": "match", "idx": -1},
        {"action": "ambiguous", "idxs": [0, 9]},
        {"action": "jump", "idxs": [1, 2, 100]},
    ],
)
def test_out_of_range_idx_is_invalid_jump(open_tree, answer):
    tree, stub = open_tree([answer])
    grow(tree, LANGS)
    result = tree.search("something")
    assert len(stub.requests[0]["candidates"]) == 9
    assert (result.status, result.reason, result.suggested_parent_id) == (
        SearchStatus.NOT_FOUND, "invalid_jump", ROOT_ID)
    assert tree.agent_stats()["fallbacks"] == {"invalid_jump": 1}


def test_invalid_idx_after_a_jump_suggests_the_jumped_node(open_tree):
    tree, _ = open_tree([choose("jump", "Animals"), {"action": "match", "idx": 2}])
    k = grow(tree, LANGS)
    result = tree.search("bird")
    assert (result.reason, result.suggested_parent_id) == ("invalid_jump", k["Animals"].id)


def _raise(document):
    raise KeyError("no such field")


@pytest.mark.parametrize(
    "answer",
    [
        "match 1",  # not a dict
        None,
        [{"action": "match", "idx": 0}],
        {"action": "select", "idx": 0},  # unknown action
        {"idx": 0},  # no action
        {"action": "MATCH", "idx": 0},
        {"action": "match", "idx": "0"},  # idx as a string
        {"action": "match"},  # no idx
        {"action": "jump", "idx": None},
        {"action": "match", "idxs": []},
        {"action": "match", "idx": True},
        {"action": "match", "idx": 0.0},
        {"action": "match", "idxs": [0, "1"]},
        _raise,  # the client raised
    ],
    ids=repr,
)
def test_bad_answers_are_agent_failure(open_tree, answer):
    decision = answer if callable(answer) else (lambda doc, answer=answer: answer)
    tree, stub = open_tree([decision])
    grow(tree, LANGS)
    result = tree.search("something")
    assert (result.status, result.reason, result.suggested_parent_id, result.suggested_name) == (
        SearchStatus.NOT_FOUND, "agent_failure", ROOT_ID, "something",
    )
    assert result.trace[-1]["fallback"] == "agent_failure" and result.trace[-1]["detail"]
    stats = tree.agent_stats()
    assert (stats["calls"], stats["failures"], stats["fallbacks"]) == (1, 1, {"agent_failure": 1})
    assert len(stub.requests) == 1


@pytest.mark.parametrize("max_rounds", [1, 2, 4])
def test_round_limit(open_tree, max_rounds):
    tree, stub = open_tree([{"action": "jump", "idx": 0}] * 8, descend_max_rounds=max_rounds)
    grow(tree, {"L1": {"L2": {"L3": {"L4": {"L5": {"L6": {}}}}}}})
    result = tree.search("deep")
    assert result.reason == "agent_timeout" and len(stub.requests) == max_rounds
    assert [r["round"] for r in stub.requests] == list(range(1, max_rounds + 1))
    assert tree.get_keyword(result.suggested_parent_id).name == f"L{max_rounds}"
    assert tree.agent_stats()["fallbacks"] == {"agent_timeout": 1}


def test_a_match_on_the_last_allowed_round_is_no_timeout(open_tree):
    tree, _ = open_tree([choose("jump", "Programming"), choose("match", "Git")], descend_max_rounds=2)
    k = grow(tree, LANGS)
    result = tree.search("version control")
    assert result.status is SearchStatus.MATCHED and result.node.id == k["Git"].id
    assert tree.agent_stats()["failures"] == 0


def test_result_rounds_count_only_rounds_that_ran(open_tree):
    tree, stub = open_tree([RuntimeError("down")] + [{"action": "jump", "idx": 0}] * 3, descend_max_rounds=3)
    grow(tree, {"L1": {"L2": {"L3": {"L4": {}}}}})
    failed = tree.search("a")
    assert failed.rounds == 1 == len(stub.requests)
    timed_out = tree.search("b")
    assert timed_out.rounds == 3 == len(stub.requests) - 1


# --- answers the audit cannot store --------------------------------------------------------


def test_a_huge_idx_is_invalid_jump_in_search(open_tree):
    tree, _ = open_tree([{"action": "jump", "idx": 2**70}])
    grow(tree, LANGS)
    result = tree.search("something")
    assert (result.status, result.reason) == (SearchStatus.NOT_FOUND, "invalid_jump")


@pytest.mark.parametrize("write", ["create_keyword", "create_info"])
@pytest.mark.parametrize(
    "answer",
    [{"action": "jump", "idx": 2**70, "reason": "r"}, {"action": "missing", "reason": "caf\ud800"}],
    ids=["huge-idx", "lone-surrogate"],
)
def test_an_unencodable_answer_does_not_break_a_write(open_tree, write, answer):
    tree, _ = open_tree([answer])
    grow(tree, LANGS)
    if write == "create_keyword":
        entity = tree.create_keyword("Rust")
        assert entity.parent_id == ROOT_ID
    else:
        entity = tree.create_info("rust is fast", auto_link=True)
    assert tree.history(entity.id)[0].audit["agent"]["outcome"]["status"] == "missing"


# --- input checks before the agent is asked -------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda tree: tree.create_keyword("Rust", aliases="rs"),
        lambda tree: tree.create_keyword("Rust", metadata=["not", "a", "dict"]),
        lambda tree: tree.create_info("rust is fast", source=5, auto_link=True),
        lambda tree: tree.create_info("rust is fast", keyword_ids=["no-such-keyword"], auto_link=True),
    ],
    ids=["aliases", "metadata", "source", "keyword_ids"],
)
def test_bad_write_arguments_fail_before_any_llm_call(open_tree, call):
    tree, stub = open_tree([MISSING])
    grow(tree, LANGS)
    with pytest.raises(KwtreeError):
        call(tree)
    assert stub.requests == []


def test_a_bad_name_fails_before_any_llm_call(open_tree):
    tree, stub = open_tree([MISSING])
    for name in ["", "   ", None, 5]:
        with pytest.raises(KwtreeError):
            tree.create_keyword(name)
    with pytest.raises(KwtreeError):
        tree.create_info("   ", auto_link=True)
    assert stub.requests == []


def test_bad_auto_place_flag_is_rejected_with_a_parent(open_tree):
    tree, _ = open_tree()
    with pytest.raises(KwtreeError):
        tree.create_keyword("Rust", parent_id=ROOT_ID, llm_auto_place="yes")


# --- the candidate list ----------------------------------------------------------------------


def test_candidates_are_capped_at_max_candidates(open_tree):
    tree, stub = open_tree([lambda doc: {"action": "jump", "idx": _names(doc).index("Big")}, MISSING])
    big = tree.create_keyword("Big", parent_id=ROOT_ID)
    tree.batch_create_keywords([{"name": f"topic {i}", "parent_id": ROOT_ID} for i in range(79)])
    tree.batch_create_keywords([{"name": f"item {i}", "parent_id": big.id} for i in range(80)])
    tree.search("something")
    for request in stub.requests:
        assert [c["idx"] for c in request["candidates"]] == list(range(50))
    assert _names(stub.requests[0]) == ["Big", *(f"topic {i}" for i in range(49))]
    assert _names(stub.requests[1]) == [f"item {i}" for i in range(50)]


def test_a_level_that_does_not_fit_keeps_the_relevant_node(open_tree):
    tree, stub = open_tree([MISSING], max_candidates=50)
    specs = [{"name": f"topic {i}", "parent_id": ROOT_ID} for i in range(80)]
    specs[77]["description"] = "all about marsupials"
    tree.batch_create_keywords(specs)
    tree.search("marsupial")
    assert _names(stub.requests[0]) == [*(f"topic {i}" for i in range(49)), "topic 77"]


def test_mru_entries_take_at_most_half_the_list(open_tree):
    tree, stub = open_tree([MISSING], max_candidates=4)
    grow(tree, LANGS)
    tree.search("python")  # MRU: Python, Languages, Programming
    tree.search("zzz")
    assert _names(stub.requests[0]) == ["Python", "Languages", "Programming", "Animals"]


# --- property: whatever the LLM answers, search and placement stay sound ----------------------

WORDS = ["Python", "python!", "Go", "Rust", "Dog", "Cat", "Tools", "Languages", "Snake"]
INDEX = st.integers(-3, 30) | st.integers(2**40, 2**62)
ANSWER = st.one_of(
    st.fixed_dictionaries(
        {"action": st.sampled_from(["jump", "match", "missing", "ambiguous", "jump", "match", "pick"])},
        optional={
            "idx": INDEX | st.sampled_from(["0", None, 1.0, True]),
            "idxs": st.lists(INDEX, max_size=4),
            "suggest_name": st.text("ab ", max_size=6) | st.integers(0, 3),
            "reason": st.text("xyz ", max_size=6),
        },
    ),
    st.builds(RuntimeError, st.text("err", max_size=3)),
    st.sampled_from([None, "match", 3, [], {}]).map(lambda value: lambda document: value),
)


@st.composite
def outlines(draw) -> list[dict]:
    """Batch specs of a random tree of up to 14 keywords, names unique among siblings."""
    specs: list[dict] = []
    taken: set[tuple[int, str]] = set()
    for index in range(draw(st.integers(0, 14))):
        parent = draw(st.integers(-1, index - 1))
        name = draw(st.sampled_from(WORDS))
        if (parent, normalize_name(name)) in taken:
            name = f"{name} {index}"
        taken.add((parent, normalize_name(name)))
        spec = {"name": name, "ref": str(index)}
        if parent >= 0:
            spec["parent_ref"] = str(parent)
        specs.append(spec)
    return specs


@given(
    specs=outlines(),
    answers=st.lists(ANSWER, max_size=12),
    queries=st.lists(st.sampled_from([*WORDS, "zzz", "a snake language", "!!!"]), min_size=1, max_size=4),
    rounds=st.integers(1, 4),
)
def test_search_and_placement_are_sound_whatever_the_llm_answers(specs, answers, queries, rounds):
    stub = StubLLMClient(answers)
    with tempfile.TemporaryDirectory() as directory, KeywordTree(
        directory, durability="none", llm_client=stub, descend_max_rounds=rounds, max_candidates=8
    ) as tree:
        tree.batch_create_keywords(specs)
        for number, query in enumerate(queries):
            result = tree.search(query)
            assert result.status in (SearchStatus.MATCHED, SearchStatus.AMBIGUOUS, SearchStatus.NOT_FOUND)
            if result.status is SearchStatus.MATCHED:
                assert tree.get_keyword(result.node.id) == result.node
                assert [k.id for k in tree.get_path(result.node.id)] == [k.id for k in result.path]
            elif result.status is SearchStatus.AMBIGUOUS:
                assert result.candidates and all(tree.get_keyword(c.id) == c for c in result.candidates)
            else:
                assert tree.get_keyword(result.suggested_parent_id)
                assert result.suggested_name and result.reason
            placed = tree.create_keyword(f"new keyword {number}")
            assert tree.get_keyword(placed.parent_id)
        ids = {c.after.id for op in tree.history() for c in op.changes}
        for request in stub.requests:
            text = repr(request)
            assert not any(kid in text for kid in ids if kid != ROOT_ID)
            assert not re.search(r"[0-9a-f]{32}", text)
            assert len(request["candidates"]) <= 8 and request["round"] <= rounds
