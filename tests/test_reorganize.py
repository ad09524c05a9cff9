"""reorganize() proposes, apply_reorganize_plan() applies as one undoable operation."""

from __future__ import annotations

import copy

import pytest
from helpers import log_bytes, snapshot

from kwtree import (
    ROOT_ID,
    CycleError,
    DuplicateKeywordError,
    InvalidInputError,
    KeywordTree,
    NotFoundError,
)
from kwtree.agent import StubLLMClient
from kwtree.agent.reorganize import MAX_CHILDREN

BREEDS = ["afghan hound", "basset hound", "blood hound", "otter hound", "grey hound", "beagle", "boxer",
          "bulldog", "chihuahua", "dachshund", "great dane", "poodle", "pug", "whippet"]


@pytest.fixture
def messy(tmp_path) -> tuple[KeywordTree, dict[str, str]]:
    """Duplicates (Language / Languages), a misplaced keyword (Rust under Dogs, its text
    naming Programming languages) and a crowded parent (Dogs, with five hounds)."""
    tree = KeywordTree(tmp_path / "tree", durability="none")
    ids = {}
    for name in ("Dogs", "Programming languages", "Language", "Languages"):
        ids[name] = tree.create_keyword(name, llm_auto_place=False).id
    for name in ("Python", "Go"):
        ids[name] = tree.create_keyword(name, ids["Programming languages"], description="a programming language").id
    for name in BREEDS:
        ids[name] = tree.create_keyword(name, ids["Dogs"]).id
    ids["Rust"] = tree.create_keyword("Rust", ids["Dogs"], description="a systems programming language").id
    info = tree.create_info("Languages are hard", keyword_ids=[ids["Languages"]])
    ids["info"] = info.id
    return tree, ids


def shape(tree: KeywordTree) -> dict:
    """What undo must restore: every live keyword's name, parent, aliases and description,
    and every live link (versions and op ids move on)."""
    keywords = {}
    stack = [ROOT_ID]
    while stack:
        keyword = tree.get_keyword(stack.pop())
        keywords[keyword.id] = (keyword.name, keyword.parent_id, keyword.aliases, keyword.description)
        stack.extend(child.id for child in tree.get_children(keyword.id))
    links = {(info.id, kid): relation for kid in keywords for info in tree.get_infos_of_keyword(kid)
             for k, relation in tree.get_keywords_of_info(info.id) if k.id == kid}
    return {"keywords": keywords, "links": links}


def steps_by_op(plan: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for step in plan["steps"]:
        found.setdefault(step["op"], []).append(step)
    return found


def test_the_offline_plan_merges_duplicates_moves_misplaced_and_groups_crowds(messy):
    tree, ids = messy
    before = log_bytes(tree.data_dir)
    plan = tree.reorganize()
    assert log_bytes(tree.data_dir) == before  # planning writes nothing
    assert plan["planner"] == "offline" and plan["scope_id"] == ROOT_ID and plan["based_on"] == tree.last_op_id
    steps = steps_by_op(plan)
    (merge,) = steps["merge"]
    assert {merge["src_id"], merge["dst_id"]} == {ids["Language"], ids["Languages"]}
    assert merge["dst_id"] == ids["Languages"]  # the one with a linked info is kept
    (move,) = steps["move"]
    assert (move["keyword_id"], move["new_parent_id"]) == (ids["Rust"], ids["Programming languages"])
    (group,) = steps["group"]
    assert group["parent_id"] == ids["Dogs"] and group["name"] == "hound"
    assert set(group["member_ids"]) == {ids[n] for n in BREEDS if n.endswith("hound")}
    assert all(step["reason"] for step in plan["steps"])


def test_applying_a_plan_is_one_operation_that_undo_reverses(messy):
    tree, ids = messy
    before = shape(tree)
    op = tree.apply_reorganize_plan(tree.reorganize())
    assert op is not None and op.kind == "reorganize" and len(tree.history()) and tree.history()[-1].op_id == op.op_id
    hound = [k for k in tree.get_children(ids["Dogs"]) if k.name == "hound"]
    assert len(hound) == 1 and len(tree.get_children(hound[0].id)) == 5
    assert tree.get_keyword(ids["Rust"]).parent_id == ids["Programming languages"]
    with pytest.raises(NotFoundError):
        tree.get_keyword(ids["Language"])
    assert "Language" in tree.get_keyword(ids["Languages"]).aliases
    assert len(tree.get_children(ids["Dogs"])) <= MAX_CHILDREN
    assert op.audit["reorganize"]["planner"] == "offline" and len(op.audit["reorganize"]["steps"]) == 3
    after = snapshot(tree)
    tree.close()
    with KeywordTree(tree.data_dir, durability="none") as reopened:
        assert snapshot(reopened) == after
        reopened.undo(op.op_id)
        assert shape(reopened) == before


def test_a_later_step_sees_what_earlier_steps_did(messy):
    tree, ids = messy
    plan = {"steps": [
        {"op": "group", "parent_id": ids["Dogs"], "name": "toy dogs", "member_ids": [ids["pug"], ids["chihuahua"]]},
        {"op": "move", "keyword_id": ids["Go"], "new_parent_id": ids["Dogs"]},
        {"op": "move", "keyword_id": ids["Go"], "new_parent_id": ids["Programming languages"]},
        {"op": "merge", "src_id": ids["poodle"], "dst_id": ids["pug"]},
    ]}
    op = tree.apply_reorganize_plan(plan)
    toy = next(k for k in tree.get_children(ids["Dogs"]) if k.name == "toy dogs")
    assert {k.id for k in tree.get_children(toy.id)} == {ids["pug"], ids["chihuahua"]}
    assert tree.get_keyword(ids["Go"]).parent_id == ids["Programming languages"]
    assert "poodle" in tree.get_keyword(ids["pug"]).aliases
    keys = [change.key for change in op.changes]
    assert len(keys) == len(set(keys))  # one row per entity: first before-image, last state


@pytest.mark.parametrize(
    ("make_plan", "error", "message"),
    [
        (lambda ids: {"steps": []}, InvalidInputError, "empty"),
        (lambda ids: [], InvalidInputError, "dict"),
        (lambda ids: {"steps": [{"op": "rename"}]}, InvalidInputError, "steps[0]: op must be one of"),
        (lambda ids: {"steps": [{"op": "move", "keyword_id": ids["Go"]}]}, InvalidInputError, "missing new_parent_id"),
        (lambda ids: {"steps": [{"op": "move", "keyword_id": ids["Go"], "new_parent_id": ids["Dogs"], "x": 1}]},
         InvalidInputError, "unknown field(s) x"),
        (lambda ids: {"steps": [{"op": "move", "keyword_id": ids["Go"], "new_parent_id": "f" * 32}]},
         NotFoundError, "steps[0] (move)"),
        (lambda ids: {"steps": [{"op": "move", "keyword_id": ids["Programming languages"],
                                 "new_parent_id": ids["Go"]}]},
         CycleError, "steps[0] (move)"),
        (lambda ids: {"steps": [
            {"op": "move", "keyword_id": ids["Go"], "new_parent_id": ids["Dogs"]},
            {"op": "merge", "src_id": ids["Dogs"], "dst_id": ids["Go"]}]}, CycleError, "steps[1] (merge)"),
        (lambda ids: {"steps": [{"op": "group", "parent_id": ids["Dogs"], "name": "pug",
                                 "member_ids": [ids["boxer"]]}]},
         DuplicateKeywordError, "steps[0] (group)"),
        (lambda ids: {"steps": [{"op": "group", "parent_id": ids["Dogs"], "name": "g", "member_ids": [ids["Go"]]}]},
         InvalidInputError, "not a live child"),
        (lambda ids: {"steps": [{"op": "group", "parent_id": ids["Dogs"], "name": "g", "member_ids": []}]},
         InvalidInputError, "member_ids"),
    ],
)
def test_a_bad_step_fails_the_whole_plan_and_writes_nothing(messy, make_plan, error, message):
    tree, ids = messy
    plan = make_plan(ids)
    if isinstance(plan, dict) and len(plan.get("steps", ())) == 1:
        # a good first step must not survive a bad second one
        plan = {"steps": [{"op": "move", "keyword_id": ids["Rust"], "new_parent_id": ids["Programming languages"]},
                          *plan["steps"]]}
        message = message.replace("steps[0]", "steps[1]")
    before_log, before = log_bytes(tree.data_dir), snapshot(tree)
    if plan == {"steps": []}:
        assert tree.apply_reorganize_plan(plan) is None
    else:
        with pytest.raises(error, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            tree.apply_reorganize_plan(plan)
    assert log_bytes(tree.data_dir) == before_log and snapshot(tree) == before


def test_a_scoped_plan_stays_inside_its_subtree(messy):
    tree, ids = messy
    plan = tree.reorganize(ids["Dogs"])
    assert plan["scope_id"] == ids["Dogs"]
    inside = {ids["Dogs"], *[k.id for k in tree.get_children(ids["Dogs"])]}
    for step in plan["steps"]:
        touched = [v for k, v in step.items() if k.endswith("_id")] + step.get("member_ids", [])
        assert set(touched) <= inside, step
    with pytest.raises(NotFoundError):
        tree.reorganize("f" * 32)


def test_an_llm_drafts_the_plan_from_an_outline_without_ids(messy):
    tree, ids = messy

    def draft(document):
        names = {row["name"]: row["idx"] for row in document["outline"]}
        return {"steps": [
            {"op": "move", "idx": names["Rust"], "target_idx": names["Programming languages"], "reason": "a language"},
            {"op": "merge", "idx": names["Language"], "target_idx": 999, "reason": "bad idx"},
        ]}

    stub = StubLLMClient([draft])
    llm_tree = KeywordTree(tmp_dir := tree.data_dir, durability="none", llm_client=stub)
    tree.close()
    plan = llm_tree.reorganize()
    assert plan["planner"] == "stub"
    assert plan["steps"] == [{"op": "move", "keyword_id": ids["Rust"], "new_parent_id": ids["Programming languages"],
                              "reason": "a language"}]
    assert len(plan["dropped"]) == 1 and "idx" in plan["dropped"][0]["why"]
    text = str(stub.conversations)
    assert not any(kid in text for kid in ids.values())
    op = llm_tree.apply_reorganize_plan(copy.deepcopy(plan))
    assert llm_tree.get_keyword(ids["Rust"]).parent_id == ids["Programming languages"]
    recorded = op.audit["reorganize"]  # the LLM's request and its dropped steps stay with the operation
    assert recorded["planner"] == "stub" and recorded["request"] == stub.requests[0]
    assert recorded["dropped"] == plan["dropped"]
    llm_tree.close()
    # A failing client falls back to the offline planner and says why.
    with KeywordTree(tmp_dir, durability="none", llm_client=StubLLMClient([RuntimeError("down")])) as failing:
        fallback = failing.reorganize()
        assert fallback["planner"] == "offline" and "RuntimeError: down" in fallback["llm_error"]
