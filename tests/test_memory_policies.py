"""The write policies of commit_session (a data table), deduplication with its reasons, the LLM's
verdicts (scripted) and the placement of new keywords inside the category's branch."""

from __future__ import annotations

import pytest
from helpers import log_bytes
from memory_helpers import memory, options, scope_part

from kwtree import (
    AgentError,
    DedupThresholds,
    KeywordTree,
    Policy,
    StubLLMClient,
)
from kwtree.memory.candidates import CATEGORIES
from kwtree.memory.policies import POLICIES
from kwtree.memory_schema import SUPERSEDED_BY

CHAT = [{"role": "user", "content": f"message {i}"} for i in range(12)]


def commit(tree: KeywordTree, upto: int, *candidates, scope: str = "user:alice", **more):
    return tree.commit_session(CHAT[:upto], session_id="s", scope=scope, options=options(*candidates, **more))


def test_every_category_has_a_policy() -> None:
    assert set(POLICIES) == set(CATEGORIES)


def test_a_contradicted_profile_fact_is_superseded_and_the_old_one_stays_in_history(tree: KeywordTree) -> None:
    first = commit(tree, 1, memory("profile", "location", "Alice lives in Paris.", attribute="location"))
    old_id = first.decisions[0].info_id
    same = commit(tree, 2, memory("profile", "location", "Alice lives in Paris.", source=1, attribute="location"))
    assert [d.action for d in same.decisions] == ["skip"] and same.decisions[0].info_id == old_id
    moved = commit(tree, 3, memory("profile", "location", "Alice lives in Berlin.", source=2, attribute="location"))
    decision = moved.decisions[0]
    new_id = decision.info_id
    assert (decision.action, decision.previous) == ("supersede", "Alice lives in Paris.") and new_id != old_id
    assert "marked superseded" in decision.reason and moved.superseded == 1
    old = tree.get_info(old_id)  # kept live, with what replaced it and until when it held
    assert old.content == "Alice lives in Paris." and old.metadata[SUPERSEDED_BY] == new_id
    assert tree.get_info(new_id).content == "Alice lives in Berlin."
    versions = [c.after.metadata.get(SUPERSEDED_BY) for op in tree.history(old_id) for c in op.changes
                if c.key == old_id]
    assert versions == [None, new_id]  # never silently dropped: the marking is an operation too
    audit = tree.history()[-1].audit["commit_session"]["decisions"][0]
    assert audit["action"] == "supersede" and audit["previous"] == "Alice lives in Paris."
    assert audit["content"] == "Alice lives in Berlin."  # what was superseded by what
    assert audit["info_id"] == new_id
    profile = scope_part(tree, "user:alice", "profile")  # one keyword per scope holds the profile
    assert [i.id for i in tree.get_infos_of_keyword(profile.id)] == [old_id, new_id]
    assert tree.get_children(profile.id) == []
    again = commit(tree, 4, memory("profile", "location", "Alice lives in Berlin.", source=3, attribute="location"))
    assert [d.action for d in again.decisions] == ["skip"]  # the current value, held


def test_preferences_aggregate_under_one_keyword_per_key(tree: KeywordTree) -> None:
    result = commit(tree, 1,
                    memory("preferences", "tea", "Alice likes green tea."),
                    memory("preferences", "tea", "Alice likes green tea."),
                    memory("preferences", "tea", "Alice likes green tea with honey."),
                    memory("preferences", "tea", "Alice never drinks black tea at night."))
    assert [d.action for d in result.decisions] == ["create", "skip", "merge", "create"]
    skip, merge = result.decisions[1], result.decisions[2]
    assert "skip threshold" in skip.reason and skip.info_id == result.decisions[0].info_id
    assert "merge threshold" in merge.reason and merge.info_id == result.decisions[0].info_id
    assert (result.created, result.skipped, result.merged) == (2, 1, 1)
    tea = scope_part(tree, "user:alice", "preferences", "tea")
    assert tea.metadata == {"category": "preferences", "key": "tea"}
    contents = [i.content for i in tree.get_infos_of_keyword(tea.id)]
    assert contents == ["Alice likes green tea.\nAlice likes green tea with honey.",
                        "Alice never drinks black tea at night."]
    again = commit(tree, 2, memory("preferences", "Tea", "Alice likes green tea with honey.", source=1))
    assert [d.action for d in again.decisions] == ["skip"]  # the key's keyword is reused (by its name)
    assert len(tree.get_children(scope_part(tree, "user:alice", "preferences").id)) == 1


def test_events_are_append_only(tree: KeywordTree) -> None:
    first = commit(tree, 1, memory("events", "trip", "Alice flew to Rome on May 8."))
    second = commit(tree, 2, memory("events", "trip", "Alice flew to Rome on May 8 again."),
                    memory("events", "trip", "Alice flew to Rome on May 8."))
    assert [d.action for d in second.decisions] == ["append", "skip"]
    assert second.appended == 1 and "exact repeat" in second.decisions[1].reason
    trip = scope_part(tree, "user:alice", "events", "trip")
    infos = tree.get_infos_of_keyword(trip.id)
    assert [i.content for i in infos] == ["Alice flew to Rome on May 8.", "Alice flew to Rome on May 8 again."]
    assert infos[0].version == 1 and infos[0].id == first.decisions[0].info_id  # never overwritten


def test_a_changed_job_said_in_a_later_session_supersedes_the_old_one_offline(tree: KeywordTree) -> None:
    tree.commit_session([{"role": "user", "content": "I work as a nurse."}], session_id="s1", scope="user:ann")
    later = tree.commit_session([{"role": "user", "content": "Big news: I now work as a teacher."}],
                                session_id="s2", scope="user:ann")
    (decision,) = [d for d in later.decisions if d.category == "profile"]
    assert decision.action == "supersede" and decision.previous == "I work as a nurse."
    profile = scope_part(tree, "user:ann", "profile")
    held = {i.content: i for i in tree.get_infos_of_keyword(profile.id)}
    assert sorted(held) == ["Big news: I now work as a teacher.", "I work as a nurse."]
    assert held["I work as a nurse."].metadata[SUPERSEDED_BY] == decision.info_id
    assert not held["Big news: I now work as a teacher."].metadata.get(SUPERSEDED_BY)
    marked = tree.history(held["I work as a nurse."].id)  # written by the first commit, marked by the second
    assert [op.kind for op in marked] == ["commit_session", "commit_session"]


def test_a_memory_is_filed_under_the_names_it_mentions_not_copied(tree: KeywordTree) -> None:
    trip = memory("events", "trip", "Alice flew to Rome with Bob on May 8.", entities=["Rome", "Bob"])
    first = commit(tree, 1, trip)
    event = first.decisions[0].info_id
    assert [d.action for d in first.decisions] == ["append"] and first.created == 0 and first.appended == 1
    for name in ("Rome", "Bob"):  # one memory, three keywords: the event's and each name's
        holder = scope_part(tree, "user:alice", "entities", name)
        assert holder.metadata == {"category": "entities", "key": name}
        assert [i.id for i in tree.get_infos_of_keyword(holder.id)] == [event]
    # Bob's own memories aggregate among themselves: never merged into the event filed there.
    second = commit(tree, 2, memory("entities", "Bob", "Alice flew to Rome with Bob on May 8 again.", source=1))
    assert [d.action for d in second.decisions] == ["create"]
    assert tree.get_info(event).content == "Alice flew to Rome with Bob on May 8." and tree.get_info(event).version == 1
    bob = scope_part(tree, "user:alice", "entities", "Bob")
    assert len(tree.get_infos_of_keyword(bob.id)) == 2


def test_skill_statistics_add_up_across_commits(tree: KeywordTree) -> None:
    runs = [("success", 1.5), ("failure", 0.5), ("success", None), ("success", 2.0)]
    skills = [memory("skills", "search_flights", f"search_flights: lesson {n}", source=n, outcome=o,
                     **({"duration": d} if d is not None else {})) for n, (o, d) in enumerate(runs)]
    commit(tree, 2, *skills[:2])
    result = commit(tree, 4, *skills[2:])
    tool = scope_part(tree, "user:alice", "skills", "search_flights")
    stats = tool.metadata
    assert (stats["calls"], stats["successes"], stats["failures"]) == (4, 3, 1)
    assert stats["successes"] + stats["failures"] == stats["calls"]
    assert stats["duration_total"] == 4.0 and stats["timed_calls"] == 3
    assert stats["duration_mean"] == pytest.approx(4.0 / 3)
    (guide,) = tree.get_infos_of_keyword(tool.id)
    assert guide.metadata["guide"] is True
    assert guide.content.splitlines() == [f"search_flights: lesson {n}" for n in range(4)]
    assert [d.action for d in result.decisions] == ["merge", "merge"]
    repeat = commit(tree, 5, memory("skills", "search_flights", "search_flights: lesson 0", source=4,
                                    outcome="success"))
    assert repeat.decisions[0].action == "skip" and "statistics counted" in repeat.decisions[0].reason
    assert tree.get_keyword(tool.id).metadata["calls"] == 5


def test_a_new_category_is_a_row_of_data(tree: KeywordTree) -> None:
    policies = {**POLICIES, "goals": Policy("goals", "key", "aggregate")}
    result = commit(tree, 1, memory("goals", "marathon", "Alice trains for the Berlin marathon."),
                    memory("goals", "marathon", "Alice trains for the Berlin marathon."), policies=policies)
    assert [d.action for d in result.decisions] == ["create", "skip"]
    goals = scope_part(tree, "user:alice", "goals")
    assert goals.metadata == {"branch": "goals"}
    assert [k.name for k in tree.get_children(goals.id)] == ["marathon"]
    appended = commit(tree, 2, memory("goals", "marathon", "Alice trains for the Berlin marathon.", source=1),
                      policies={**POLICIES, "goals": Policy("goals", "key", "append")})
    assert [d.action for d in appended.decisions] == ["skip"]  # an exact repeat, append or not
    with pytest.raises(ValueError, match="holder"):
        Policy("goals", "nowhere", "aggregate")
    with pytest.raises(ValueError, match="sessions"):
        Policy("sessions", "key", "append")


def test_thresholds_decide_skip_merge_and_create(tree: KeywordTree) -> None:
    strict = DedupThresholds(skip=1.0, merge=1.0)
    result = commit(tree, 1, memory("entities", "bob", "Bob is Alice's brother."),
                    memory("entities", "bob", "Bob is Alice's younger brother."), thresholds=strict)
    assert [d.action for d in result.decisions] == ["create", "create"]
    assert "< merge threshold 1.0" in result.decisions[1].reason
    with pytest.raises(ValueError, match="merge <= skip"):
        DedupThresholds(skip=0.5, merge=0.8)


def test_the_prefilter_finds_memories_of_the_scope_only(tree: KeywordTree) -> None:
    commit(tree, 1, memory("preferences", "drinks", "Likes green tea with honey."), scope="user:bob")
    result = commit(tree, 1, memory("preferences", "tea", "Likes green tea with honey."))
    assert [d.action for d in result.decisions] == ["create"]  # bob's identical memory is not alice's
    # within the scope, the prefilter finds a memory under another key of the same branch
    more = commit(tree, 2, memory("preferences", "honey", "Likes green tea with honey.", source=1))
    assert [d.action for d in more.decisions] == ["skip"]
    assert more.decisions[0].info_id == result.decisions[0].info_id


def test_new_keywords_are_placed_inside_the_category_branch(tree: KeywordTree) -> None:
    commit(tree, 1, memory("entities", "people", "Alice knows many people."))
    people = scope_part(tree, "user:alice", "entities", "people")
    branch = scope_part(tree, "user:alice", "entities")
    tree.create_keyword("Rome", llm_auto_place=False)  # outside the scope: never a parent
    result = commit(tree, 2, memory("entities", "Rome", "Alice visited Rome.", source=1))
    rome = tree.get_keyword(result.decisions[0].keyword_id)
    assert branch.id in [k.id for k in tree.get_path(rome.id)] and rome.id != people.id
    placement = tree.history()[-1].audit["commit_session"]["placements"][0]
    assert placement["key"] == "Rome" and placement["agent"]["intent"] == "suggest_parent"


# --- the LLM (scripted) ----------------------------------------------------------------------------


def _dedup_answer(action: str, existing: int | None = 0, reason: str = "scripted") -> object:
    def answer(document: dict) -> dict:
        assert document["task"] == "deduplicate"
        return {"decisions": [{"item": item["item"], "action": action, "existing": existing, "reason": reason}
                              for item in document["items"]]}
    return answer


def test_the_llm_judges_a_batch_of_candidates_in_one_call(tree_dir) -> None:
    with KeywordTree(tree_dir, durability="none") as tree:
        commit(tree, 1, memory("preferences", "tea", "Alice likes green tea."))
    stub = StubLLMClient([_dedup_answer("skip", reason="same preference")])
    with KeywordTree(tree_dir, durability="none", llm_client=stub) as tree:
        result = commit(tree, 2, memory("preferences", "tea", "Alice enjoys green tea.", source=1),
                        memory("preferences", "tea", "Alice is fond of green tea.", source=1))
        assert [(d.action, d.reason) for d in result.decisions] == [("skip", "same preference")] * 2
        assert len(stub.requests) == 1 and len(stub.requests[0]["items"]) == 2
        audit = tree.history()[-1].audit["commit_session"]["dedup"]
        assert audit["judge"] == "llm" and audit["calls"][0]["answer"]["decisions"][0]["action"] == "skip"


def test_an_unusable_llm_verdict_falls_back_to_the_thresholds(tree_dir) -> None:
    with KeywordTree(tree_dir, durability="none") as tree:
        commit(tree, 1, memory("preferences", "tea", "Alice likes green tea."))
    stub = StubLLMClient([{"decisions": [{"item": 0, "action": "skip", "existing": 7, "reason": "?"}]}])
    with KeywordTree(tree_dir, durability="none", llm_client=stub) as tree:
        result = commit(tree, 2, memory("preferences", "tea", "Alice likes green tea.", source=1))
        assert result.decisions[0].action == "skip" and "skip threshold" in result.decisions[0].reason


def test_a_failing_llm_raises_on_a_strict_tree_and_writes_nothing(tree_dir) -> None:
    with KeywordTree(tree_dir, durability="none") as tree:
        commit(tree, 1, memory("preferences", "tea", "Alice likes green tea."))
    frozen = log_bytes(tree_dir)
    stub = StubLLMClient([RuntimeError("overloaded")])
    with (KeywordTree(tree_dir, durability="none", llm_client=stub, on_agent_failure="raise") as tree,
          pytest.raises(AgentError, match="overloaded")):
        commit(tree, 2, memory("preferences", "tea", "Alice likes green tea.", source=1))
    assert log_bytes(tree_dir) == frozen


def test_a_target_deleted_while_the_llm_judged_is_rechecked_in_the_decider(tree_dir) -> None:
    with KeywordTree(tree_dir, durability="none") as tree:
        first = commit(tree, 1, memory("preferences", "tea", "Alice likes green tea."))
    target = first.decisions[0].info_id

    def delete_then_skip(document: dict) -> dict:
        with KeywordTree(tree_dir, durability="none", worker=False) as other:  # another writer, meanwhile
            other.delete_info(target)
        return _dedup_answer("skip")(document)  # type: ignore[operator]

    with KeywordTree(tree_dir, durability="none", llm_client=StubLLMClient([delete_then_skip])) as tree:
        result = commit(tree, 2, memory("preferences", "tea", "Alice likes green tea.", source=1))
    decision = result.decisions[0]
    assert decision.action == "create" and f"target {target} was deleted meanwhile" in decision.reason


def test_a_parent_deleted_after_placement_falls_back_to_the_branch(tree_dir) -> None:
    with KeywordTree(tree_dir, durability="none") as tree:
        commit(tree, 1, memory("preferences", "drinks", "Alice likes green tea with honey."))
        drinks = scope_part(tree, "user:alice", "preferences", "drinks").id
        branch = scope_part(tree, "user:alice", "preferences").id
        tree.create_keyword("Beverages", llm_auto_place=False)  # outside the scope: never shown

    def match_drinks(document: dict) -> dict:
        assert document["candidates"] and all(  # the walk shows the branch's keywords only
            c["path"].startswith("user:alice > preferences > ") for c in document["candidates"])
        idx = next(c["idx"] for c in document["candidates"] if c["name"] == "drinks")
        return {"action": "match", "idx": idx, "reason": "tea is a drink"}

    def delete_then_create(document: dict) -> dict:
        with KeywordTree(tree_dir, durability="none", worker=False) as other:
            other.delete_keyword(drinks, info_policy="keep")
        return _dedup_answer("create", None)(document)  # type: ignore[operator]

    stub = StubLLMClient([match_drinks, delete_then_create])
    with KeywordTree(tree_dir, durability="none", llm_client=stub) as tree:
        result = commit(tree, 2, memory("preferences", "tea", "Alice likes green tea with honey a lot.", source=1))
        tea = tree.get_keyword(result.decisions[0].keyword_id)
        assert tea.parent_id == branch
        placement = tree.history()[-1].audit["commit_session"]["placements"][0]
        assert "no longer inside the branch" in placement["parent_fallback"]
        assert placement["agent"]["outcome"]["keyword_ids"] == [drinks]

