"""The agent seen through KeywordTree: search, auto-placement and auto-linking driven by a
scripted StubLLMClient (decisions picked by candidate name, never by a known idx), and the
offline navigator's behaviour with no client. The descend loop's own mechanics (multi-target
actions, fallbacks, the candidate list, the property test) are in test_descend_loop.py."""

from __future__ import annotations

import re

import pytest

from kwtree import ROOT_ID, InvalidInputError, Keyword, KeywordTree, Link, RelationType
from kwtree.agent import StubLLMClient
from kwtree.models import SearchStatus

MISSING = {"action": "missing", "reason": "scripted"}
#: The tree most tests start from (names are unique, so tests address keywords by name).
LANGS = {
    "Programming": {"Languages": {"Python": {}, "Go": {}}, "Tools": {"Git": {}}},
    "Animals": {"Dog": {}, "Cat": {}},
}


def grow(tree: KeywordTree, outline: dict, parent_id: str = ROOT_ID) -> dict[str, Keyword]:
    """Create a nested ``{name: {children}}`` outline under explicit parents (so no agent is
    asked); returns the keywords by name."""
    made: dict[str, Keyword] = {}
    for name, children in outline.items():
        keyword = tree.create_keyword(name, parent_id=parent_id)
        made[name] = keyword
        made.update(grow(tree, children, keyword.id))
    return made


def all_keyword_ids(tree: KeywordTree) -> set[str]:
    """Every live keyword id reachable from the root (root excluded)."""
    found: set[str] = set()
    stack = [ROOT_ID]
    while stack:
        for child in tree.get_children(stack.pop()):
            found.add(child.id)
            stack.append(child.id)
    return found


def choose(action: str, *names: str, **extra: object):
    """A scripted decision that names candidates by name (or by path, "A > B"): it looks
    their idx up in the request document, as an LLM would. A name shown other than once
    raises, which the loop turns into agent_failure (and the test's asserts then fail)."""

    def decide(document: dict) -> dict:
        idxs = []
        for name in names:
            hits = [c["idx"] for c in document["candidates"] if name in (c["name"], c["path"])]
            if len(hits) != 1:
                raise LookupError(f"{name!r} is shown {len(hits)} times in round {document['round']}")
            idxs.extend(hits)
        decision = {"action": action, **extra}
        if len(idxs) == 1:
            decision["idx"] = idxs[0]
        else:
            decision["idxs"] = idxs
        return decision

    return decide


@pytest.fixture
def open_tree(tmp_path):
    """Opens trees in tmp_path (with a StubLLMClient of the given decisions, or offline
    when decisions is None) and closes them all at the end."""
    opened: list[KeywordTree] = []

    def make(decisions=None, name="tree", **options):
        stub = None if decisions is None else StubLLMClient(decisions)
        tree = KeywordTree(tmp_path / name, durability="none", llm_client=stub, **options)
        opened.append(tree)
        return tree, stub

    yield make
    for tree in opened:
        tree.close()


# --- the tree and exact lookup -------------------------------------------------------------


def test_new_tree_has_only_the_root(tree):
    root = tree.get_keyword(ROOT_ID)
    assert (root.name, root.parent_id, root.level) == ("root", None, 0)
    assert tree.get_children(ROOT_ID) == []
    assert [op.kind for op in tree.history()] == ["init"]


def test_reopened_tree_gives_the_same_search_answers(tmp_path):
    queries = ["python", "PYTHON", "Pythn", "Rust programming language", "Git"]

    def answers(tree):
        found = []
        for query in queries:
            result = tree.search(query)
            found.append((
                result.status,
                result.node.id if result.node else None,
                [k.id for k in result.path],
                result.suggested_parent_id,
                result.suggested_name,
            ))
        return found

    with KeywordTree(tmp_path / "t", durability="none") as tree:
        grow(tree, LANGS)
        before = answers(tree)
    with KeywordTree(tmp_path / "t", durability="none") as tree:
        assert answers(tree) == before
    assert [status for status, *_ in before] == (
        [SearchStatus.MATCHED] * 3 + [SearchStatus.NOT_FOUND, SearchStatus.MATCHED])
    # root > Programming > Languages > Python
    assert before[0][2] == before[1][2] == before[2][2] and len(before[0][2]) == 4


def test_exact_hit_after_normalisation_asks_no_llm(open_tree):
    tree, stub = open_tree([MISSING])
    k = grow(tree, LANGS)
    for query in ["python", " PYTHON ", "Py-thon", "ｐｙｔｈｏｎ"]:
        result = tree.search(query)
        assert result.status is SearchStatus.MATCHED and result.node.id == k["Python"].id
        assert [p.name for p in result.path] == ["root", "Programming", "Languages", "Python"]
        assert (result.rounds, result.trace) == (0, [])
    assert stub.requests == [] and tree.agent_stats()["calls"] == 0


def test_alias_hit(open_tree):
    tree, stub = open_tree([MISSING])
    k = grow(tree, LANGS)
    tree.add_alias(k["Python"].id, "py3")
    result = tree.search("PY3")
    assert result.status is SearchStatus.MATCHED and result.node.id == k["Python"].id
    assert [p.id for p in result.path] == [ROOT_ID, k["Programming"].id, k["Languages"].id, k["Python"].id]
    assert stub.requests == []


def test_same_name_under_two_parents_is_ambiguous(open_tree):
    tree, stub = open_tree([MISSING])
    k = grow(tree, {"Snakes": {}, "Languages": {}})
    snake = tree.create_keyword("Python", parent_id=k["Snakes"].id)
    language = tree.create_keyword("python", parent_id=k["Languages"].id)
    result = tree.search("Python")
    assert result.status is SearchStatus.AMBIGUOUS
    assert {c.id for c in result.candidates} == {snake.id, language.id}
    assert result.node is None and stub.requests == []


def test_llm_expand_query_false_makes_no_call(open_tree):
    tree, stub = open_tree([choose("match", "Python")])
    grow(tree, LANGS)
    result = tree.search("snake language", llm_expand_query=False)
    assert result.status is SearchStatus.NOT_FOUND and result.reason == "exact_miss_llm_disabled"
    assert stub.requests == [] and stub.remaining == 1
    assert tree.search("python", llm_expand_query=False).status is SearchStatus.MATCHED


@pytest.mark.parametrize(
    ("query", "flag"),
    [("", True), ("   \n", True), (None, True), (42, True), (b"python", True), ("python", "yes"), ("python", 1),
     ("x", None)],
)
def test_bad_search_input_raises_before_any_call(open_tree, query, flag):
    tree, stub = open_tree([MISSING])
    grow(tree, LANGS)
    with pytest.raises(InvalidInputError):
        tree.search(query, llm_expand_query=flag)
    assert stub.requests == [] and tree.agent_stats()["descents"] == 0


# --- search through the stub ---------------------------------------------------------------


def test_missing_on_first_round_suggests_root(open_tree):
    tree, stub = open_tree([{"action": "missing", "suggest_name": "Rust", "reason": "not here"}])
    grow(tree, LANGS)
    result = tree.search("the rust language")
    assert result.status is SearchStatus.NOT_FOUND
    assert (result.suggested_parent_id, result.suggested_name, result.reason) == (ROOT_ID, "Rust", "not here")
    (request,) = stub.requests
    assert (request["intent"], request["query"], request["round"], request["current_path"]) == (
        "search", "the rust language", 1, [],
    )
    assert "description" not in request
    assert {c["name"] for c in request["candidates"]} == {
        "Programming", "Languages", "Python", "Go", "Tools", "Git", "Animals", "Dog", "Cat"}


@pytest.mark.parametrize("suggest_name", [None, "", "   ", 7])
def test_missing_after_jump_suggests_the_jumped_node_and_the_query(open_tree, suggest_name):
    answer = dict(MISSING) if suggest_name is None else {**MISSING, "suggest_name": suggest_name}
    tree, stub = open_tree([choose("jump", "Languages"), answer])
    k = grow(tree, LANGS)
    result = tree.search("Rust")
    assert result.status is SearchStatus.NOT_FOUND
    assert (result.suggested_parent_id, result.suggested_name) == (k["Languages"].id, "Rust")
    assert stub.requests[1]["current_path"] == ["Programming", "Languages"]
    assert [c["name"] for c in stub.requests[1]["candidates"]] == ["Python", "Go"]
    assert result.rounds == 2


def test_jump_then_match_puts_the_intermediate_node_on_the_path(open_tree):
    tree, stub = open_tree([choose("jump", "Programming"), choose("match", "Go")])
    k = grow(tree, LANGS)
    result = tree.search("golang")
    assert result.status is SearchStatus.MATCHED and result.node.id == k["Go"].id
    assert [p.name for p in result.path] == ["root", "Programming", "Languages", "Go"]
    assert stub.requests[1]["current_path"] == ["Programming"]
    assert [c["name"] for c in stub.requests[1]["candidates"]] == ["Languages", "Tools", "Python", "Go", "Git"]
    assert [entry["round"] for entry in result.trace] == [1, 2] and result.trace[1]["answer"]["action"] == "match"


def test_stub_exception_is_agent_failure(open_tree):
    tree, stub = open_tree([RuntimeError("service unavailable")])
    grow(tree, LANGS)
    result = tree.search("golang")
    assert result.status is SearchStatus.NOT_FOUND
    assert (result.reason, result.suggested_parent_id, result.suggested_name) == ("agent_failure", ROOT_ID, "golang")
    assert result.trace[-1] == {"fallback": "agent_failure", "detail": "RuntimeError: service unavailable"}
    assert len(stub.requests) == 1


def test_always_jumping_stub_times_out_after_max_rounds(open_tree):
    tree, stub = open_tree([{"action": "jump", "idx": 0}] * 10, descend_max_rounds=3)
    chain = grow(tree, {"L1": {"L2": {"L3": {"L4": {"L5": {}}}}}})
    result = tree.search("deep")
    assert result.status is SearchStatus.NOT_FOUND and result.reason == "agent_timeout"
    assert len(stub.requests) == 3 and stub.remaining == 7
    assert [r["current_path"] for r in stub.requests] == [[], ["L1"], ["L1", "L2"]]
    assert result.suggested_parent_id == chain["L3"].id  # where the last jump led
    assert result.trace[-1]["fallback"] == "agent_timeout"


# --- MRU -----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["exact", "loop"])
def test_second_search_lists_the_last_match_first(open_tree, how):
    first = [] if how == "exact" else [choose("jump", "Languages"), choose("match", "Python")]
    tree, stub = open_tree([*first, MISSING])
    grow(tree, LANGS)
    assert tree.search("python" if how == "exact" else "snake language").node.name == "Python"
    assert tree.agent_stats()["mru_size"] == 3  # Python and its path, root excluded
    tree.search("something else")
    names = [c["name"] for c in stub.requests[-1]["candidates"]]
    assert names[:3] == ["Python", "Languages", "Programming"]  # most recent first
    assert names.index("Python") < min(names.index(child.name) for child in tree.get_children(ROOT_ID))
    assert [c["idx"] for c in stub.requests[-1]["candidates"]] == list(range(len(names)))


def test_mru_holds_at_most_its_capacity(open_tree):
    tree, stub = open_tree([MISSING], mru_capacity=2)
    grow(tree, LANGS)
    tree.search("Dog")
    tree.search("Python")
    assert tree.agent_stats()["mru_size"] == 2
    tree.search("zzz")
    assert [c["name"] for c in stub.requests[0]["candidates"]][:2] == ["Python", "Languages"]


def test_move_and_delete_evict_from_mru(open_tree):
    tree, stub = open_tree([MISSING, MISSING])
    k = grow(tree, LANGS)
    tree.search("Python")
    assert tree.agent_stats()["mru_size"] == 3
    tree.move_keyword(k["Python"].id, k["Animals"].id)
    assert tree.agent_stats()["mru_size"] == 2
    tree.search("zzz")
    assert [c["name"] for c in stub.requests[-1]["candidates"]][:2] == ["Languages", "Programming"]
    tree.delete_keyword(k["Languages"].id, cascade=True)
    assert tree.agent_stats()["mru_size"] == 1
    tree.search("zzz")
    names = [c["name"] for c in stub.requests[-1]["candidates"]]
    assert names[0] == "Programming" and "Languages" not in names and "Go" not in names


# --- placement -------------------------------------------------------------------------------


def test_explicit_parent_never_asks_the_agent(open_tree):
    tree, stub = open_tree([choose("match", "Animals")])
    k = grow(tree, LANGS)
    rust = tree.create_keyword("Rust", parent_id=k["Languages"].id, description="a systems language")
    assert rust.parent_id == k["Languages"].id
    assert tree.create_keyword("Misc", llm_auto_place=False).parent_id == ROOT_ID
    assert stub.requests == [] and stub.remaining == 1
    assert tree.history(rust.id)[0].audit is None


def test_auto_place_jump_then_match_puts_keyword_under_target(open_tree):
    tree, stub = open_tree([choose("jump", "Programming"), choose("match", "Languages")])
    k = grow(tree, LANGS)
    rust = tree.create_keyword("Rust", description="a systems programming language")
    assert rust.parent_id == k["Languages"].id
    assert [p.name for p in tree.get_path(rust.id)] == ["root", "Programming", "Languages", "Rust"]
    first, second = stub.requests
    assert (first["intent"], first["query"], first["description"]) == (
        "suggest_parent", "Rust", "a systems programming language")
    assert (second["round"], second["current_path"]) == (2, ["Programming"])


@pytest.mark.parametrize(
    ("decisions", "parent"),
    [
        ([choose("jump", "Programming"), MISSING], "Programming"),  # missing: under the current path
        ([MISSING], ROOT_ID),
        ([choose("ambiguous", "Languages", "Tools")], ROOT_ID),
        ([choose("match", "Languages", "Animals")], ROOT_ID),  # several matches: ambiguous
        ([choose("jump", "Git")], "Git"),  # a leaf: nothing below, missing under it
    ],
)
def test_auto_place_outcomes(open_tree, decisions, parent):
    tree, _ = open_tree(decisions)
    k = grow(tree, LANGS)
    keyword = tree.create_keyword("Rust")
    assert keyword.parent_id == (k[parent].id if parent in k else parent)


def test_auto_place_audit_is_in_history_and_survives_reopen(open_tree, tmp_path):
    tree, stub = open_tree([choose("jump", "Programming"), choose("match", "Languages", reason="languages live here")])
    k = grow(tree, LANGS)
    rust = tree.create_keyword("Rust", description="a systems programming language")
    op = tree.history(rust.id)[0]
    assert op.kind == "create_keyword"
    agent = op.audit["agent"]
    assert (agent["intent"], agent["query"], agent["navigator"], agent["prompt"]) == (
        "suggest_parent", "Rust", "stub", "descend-1")
    assert [r["round"] for r in agent["rounds"]] == [1, 2]
    assert [r["request"] for r in agent["rounds"]] == stub.requests
    assert agent["rounds"][0]["answer"]["action"] == "jump"
    assert agent["rounds"][1]["answer"] == {"action": "match", "idx": 0, "reason": "languages live here"}
    assert stub.requests[1]["candidates"][0]["name"] == "Languages"
    assert agent["outcome"] == {
        "status": "matched", "keyword_ids": [k["Languages"].id], "suggested_parent_id": None,
        "suggested_name": None, "reason": "languages live here",
    }
    tree.close()
    reopened, _ = open_tree(name="tree")
    assert reopened.history(rust.id)[0].audit["agent"] == agent


@pytest.mark.parametrize(
    ("decisions", "parent", "reason"),
    [
        ([RuntimeError("llm down")], ROOT_ID, "agent_failure"),
        (["not a decision"], ROOT_ID, "agent_failure"),
        ([{"action": "match", "idx": 99}], ROOT_ID, "invalid_jump"),
        ([choose("jump", "Programming"), ValueError("bad json")], "Programming", "agent_failure"),
    ],
)
def test_failed_auto_place_still_creates_the_keyword(open_tree, decisions, parent, reason):
    decisions = [(lambda doc, value=d: value) if isinstance(d, str) else d for d in decisions]
    tree, _ = open_tree(decisions)
    k = grow(tree, LANGS)
    rust = tree.create_keyword("Rust")
    assert rust.parent_id == (k[parent].id if parent in k else parent)
    agent = tree.history(rust.id)[0].audit["agent"]
    assert agent["rounds"][-1]["fallback"] == reason
    assert agent["outcome"]["status"] == "missing" and agent["outcome"]["reason"] == reason
    assert agent["outcome"]["suggested_parent_id"] == rust.parent_id
    assert tree.agent_stats()["fallbacks"] == {reason: 1}


# --- infos -----------------------------------------------------------------------------------


def _links(tree, info_id):
    """{keyword name: (relation, created_by)} of the info's links, from its create operation."""
    op = tree.history(info_id)[0]
    return {
        tree.get_keyword(c.after.keyword_id).name: (c.after.relation, c.after.created_by)
        for c in op.changes
        if type(c.after) is Link
    }


def test_explicit_info_link_is_primary(open_tree):
    tree, stub = open_tree([MISSING])
    k = grow(tree, LANGS)
    info = tree.create_info("list comprehensions are neat", keyword_ids=[k["Python"].id])
    assert tree.get_keywords_of_info(info.id) == [(tree.get_keyword(k["Python"].id), RelationType.PRIMARY)]
    assert _links(tree, info.id) == {"Python": (RelationType.PRIMARY, "user")}
    assert stub.requests == []


def test_relation_filter_example_vs_related(open_tree):
    tree, _ = open_tree()
    k = grow(tree, LANGS)
    py = k["Python"].id
    example = tree.create_info("print('hello')")
    related = tree.create_info("the GIL limits threads")
    primary = tree.create_info("Python is a language", keyword_ids=[py])
    tree.link_info(example.id, py, relation=RelationType.EXAMPLE)
    tree.link_info(related.id, py, relation="related")
    assert [i.id for i in tree.get_infos_of_keyword(py, relation=RelationType.EXAMPLE)] == [example.id]
    assert [i.id for i in tree.get_infos_of_keyword(py, relation=RelationType.RELATED)] == [related.id]
    assert [i.id for i in tree.get_infos_of_keyword(py, relation="primary")] == [primary.id]
    assert [i.id for i in tree.get_infos_of_keyword(py)] == [primary.id, example.id, related.id]
    assert tree.search("python").infos == tree.get_infos_of_keyword(py)


def test_auto_link_primary_to_match_related_to_named(open_tree):
    tree, stub = open_tree([choose("jump", "Programming"), choose("match", "Languages")])
    k = grow(tree, LANGS)
    text = "Go and Python both ship with a formatter; Go's is stricter."
    info = tree.create_info(text, keyword_ids=[k["Git"].id], auto_link=True)
    assert _links(tree, info.id) == {
        "Git": (RelationType.PRIMARY, "user"),
        "Languages": (RelationType.PRIMARY, "agent"),
        "Go": (RelationType.RELATED, "agent"),
        "Python": (RelationType.RELATED, "agent"),
    }
    assert [i.id for i in tree.get_infos_of_keyword(k["Go"].id, relation=RelationType.RELATED)] == [info.id]
    assert stub.requests[0]["intent"] == "search" and stub.requests[0]["query"] == text


def test_auto_link_audit_is_in_history(open_tree):
    tree, stub = open_tree([MISSING])
    k = grow(tree, LANGS)
    info = tree.create_info("My dog chased the cat", auto_link=True)
    agent = tree.history(info.id)[0].audit["agent"]
    assert (agent["intent"], agent["query"], agent["navigator"]) == ("search", "My dog chased the cat", "stub")
    assert [r["request"] for r in agent["rounds"]] == stub.requests
    assert agent["outcome"]["status"] == "missing"
    assert agent["links"] == [[k["Dog"].id, "primary"], [k["Cat"].id, "related"]]
    assert _links(tree, info.id) == {"Dog": (RelationType.PRIMARY, "agent"), "Cat": (RelationType.RELATED, "agent")}


def test_plain_create_info_asks_no_agent(open_tree):
    tree, stub = open_tree([MISSING])
    grow(tree, LANGS)
    info = tree.create_info("Python and Go")
    assert tree.get_keywords_of_info(info.id) == [] and stub.requests == []
    assert tree.history(info.id)[0].audit is None


# --- stats and prompts -----------------------------------------------------------------------


def test_agent_stats_count_calls_rounds_and_failures(open_tree):
    tree, stub = open_tree([
        MISSING,
        RuntimeError("down"),
        choose("jump", "Programming"), choose("match", "Go"),
        {"action": "jump", "idx": 99},
    ])
    grow(tree, LANGS)
    for query in ["a", "b", "c", "d", "python"]:
        tree.search(query)
    stats = tree.agent_stats()
    assert {key: stats[key] for key in ("descents", "calls", "rounds", "failures")} == {
        "descents": 4, "calls": 5, "rounds": 5, "failures": 2,
    }
    assert stats["fallbacks"] == {"agent_failure": 1, "invalid_jump": 1}
    assert stats["outcomes"] == {"missing": 3, "matched": 1}
    assert (stats["navigator"], stats["usage"], stats["mru_size"]) == ("stub", {}, 4)  # Go's path, then Python
    assert len(stub.requests) == 5


def test_prompts_carry_no_keyword_ids(open_tree):
    tree, stub = open_tree([
        choose("jump", "Programming"), choose("match", "Python"),  # search
        choose("jump", "Languages", "Tools"), MISSING,  # search, multi jump
        choose("jump", "Animals"), choose("match", "Dog"),  # placement
        choose("match", "Cat"),  # auto link
    ])
    grow(tree, LANGS)
    tree.search("snake language")
    tree.search("svn")
    tree.create_keyword("Puppy", description="a young dog")
    tree.create_info("cats purr", auto_link=True)
    ids = all_keyword_ids(tree)
    assert len(stub.conversations) == 7 and len(ids) == 10
    for messages in stub.conversations:
        for message in messages:
            assert not any(kid in message["content"] for kid in ids)
            assert not re.search(r"[0-9a-f]{32}", message["content"])


# --- the offline navigator ---------------------------------------------------------------------


def test_offline_typo_finds_a_deep_node(open_tree):
    tree, _ = open_tree()
    k = grow(tree, LANGS)
    for typo, name in [("Pyton", "Python"), ("Languges", "Languages"), ("Gitt", "Git")]:
        result = tree.search(typo)
        assert result.status is SearchStatus.MATCHED and result.node.id == k[name].id, typo
        assert result.path[-1].id == k[name].id and result.rounds >= 1


def test_offline_miss_suggests_a_sensible_parent(open_tree):
    tree, _ = open_tree()
    k = grow(tree, LANGS)
    result = tree.search("Rust programming language")
    assert result.status is SearchStatus.NOT_FOUND
    assert result.suggested_parent_id == k["Languages"].id
    assert result.suggested_name == "Rust programming language"
    unrelated = tree.search("quantum chromodynamics")
    assert (unrelated.status, unrelated.suggested_parent_id) == (SearchStatus.NOT_FOUND, ROOT_ID)


def test_offline_places_a_systems_language_under_languages(open_tree):
    tree, _ = open_tree()
    k = grow(tree, LANGS)
    rust = tree.create_keyword("Rust", description="a systems programming language")
    assert rust.parent_id == k["Languages"].id


def test_offline_places_into_a_deep_node(open_tree):
    tree, _ = open_tree()
    k = grow(tree, LANGS)
    assert tree.create_keyword("Haskell", description="a functional language").parent_id == k["Languages"].id
    assert tree.create_keyword("Wolf", description="a wild animal related to the dog").parent_id == k["Animals"].id


def test_offline_places_an_unrelated_word_under_root(open_tree):
    tree, _ = open_tree()
    grow(tree, LANGS)
    volcano = tree.create_keyword("Volcano", description="a mountain that erupts lava")
    assert volcano.parent_id == ROOT_ID
    agent = tree.history(volcano.id)[0].audit["agent"]
    assert agent["navigator"] == "offline" and agent["outcome"]["status"] == "missing"


def test_offline_stats_report_no_tokens(open_tree):
    tree, _ = open_tree()
    grow(tree, LANGS)
    tree.search("Pyton")
    stats = tree.agent_stats()
    assert (stats["navigator"], stats["usage"]) == ("offline", {})
    assert stats["calls"] == stats["rounds"] >= 1 and stats["failures"] == 0


def test_offline_navigator_is_deterministic(open_tree):
    def run(name):
        tree, _ = open_tree(name=name)
        grow(tree, LANGS)
        found = []
        for query in ["Pyton", "Rust programming language", "a young cat", "Gitt"]:
            result = tree.search(query)
            names = [p.name for p in result.path]
            parent = tree.get_keyword(result.suggested_parent_id).name if result.suggested_parent_id else None
            found.append((result.status, names, parent, result.reason, result.trace))
        placed = tree.create_keyword("Rust", description="a systems programming language")
        found.append(tree.get_keyword(placed.parent_id).name)
        return found

    assert run("one") == run("two")
