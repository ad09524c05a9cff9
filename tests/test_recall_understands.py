"""Recall that answers what people ask (issue 26): scoped reads search inside their scopes,
hits come in score order, rankings do not depend on ids or index layout, the retrievers'
agreement is kept, the assistant's replies and small talk rank below the user's facts, and a
changed fact beats the value it replaced (which stays, marked, for history)."""

from __future__ import annotations

from pathlib import Path

from memory_helpers import memory, options

from kwtree import KeywordTree
from kwtree.memory.commit import CommitOptions
from kwtree.memory_schema import SUPERSEDED_BY, VALID_UNTIL


def _open(path: Path) -> KeywordTree:
    return KeywordTree(path, durability="none", embed_async=False)


def test_a_scoped_recall_finds_its_scope_s_memory_among_many_other_scopes(tmp_path: Path) -> None:
    with _open(tmp_path / "t") as tree:
        for user in range(40):  # every other user says more about dogs than ours does
            chat = [{"role": "user", "content": f"my dog {name} loves the dog park, dogs are great"}
                    for name in ("Rex", "Fido", "Max")]
            tree.commit_session(chat, session_id=f"s{user}", scope=f"user:u{user}")
        tree.commit_session([{"role": "user", "content": "We adopted a dog last spring."}], session_id="mine",
                            scope="user:me")
        hits = tree.recall("dog", scope="user:me", min_score=0, mode="bm25")
        assert hits and "We adopted a dog last spring." in hits[0].info.content


def _build(path: Path) -> list[list[tuple[str, float]]]:
    with _open(path) as tree:
        for text in ("cats purr on warm mats", "cats purr on warm mats", "a dog barks at cats", "coffee and cats"):
            tree.create_info(text)
        changed = tree.create_info("cats everywhere in the house")
        for text in ("dogs everywhere", "cats again in the house", "cats purr"):  # rewrites leave deleted documents
            tree.update_info(changed.id, {"content": text})
        return [[(hit.info.content, round(hit.score, 9)) for hit in tree.recall(query, min_score=0)]
                for query in ("cats purr", "house cats", "warm mats dog")]


def test_two_builds_of_the_same_memory_rank_alike(tmp_path: Path) -> None:
    assert _build(tmp_path / "one") == _build(tmp_path / "two")


def test_hits_come_in_score_order_when_a_memory_takes_its_turn_s_place(tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "Shall I order the jasmine tea for Friday?"},
            {"role": "assistant", "content": "Yes, order the jasmine tea."}]
    with _open(tmp_path / "t") as tree:
        tree.commit_session(chat, session_id="s1", scope="user:a", options=options(
            memory("preferences", "green tea", "Alice loves green tea."),
            memory("events", "tea order", "Alice ordered jasmine tea for Friday.", source=1)))
        for query in ("Shall I order the jasmine tea", "green tea", "Friday"):
            scores = [hit.score for hit in tree.recall(query, scope="user:a", min_score=0)]
            assert scores == sorted(scores, reverse=True), query


def test_the_user_s_fact_outranks_the_assistant_s_reply_and_small_talk(tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "Hi, I'm Priya."},
            {"role": "assistant", "content": "Nice to meet you, Priya! How can I help?"},
            {"role": "user", "content": "I live in Boston with my dog."},
            {"role": "assistant", "content": "Boston is lovely, Priya. Where in Boston do you live?"}]
    with _open(tmp_path / "t") as tree:
        tree.commit_session(chat, session_id="s1", scope="user:priya", options=CommitOptions(extractor=lambda m, c: []))
        hits = tree.recall("Where does Priya live in Boston?", scope="user:priya", min_score=0)
        assert hits[0].info.content == "I live in Boston with my dog."


def _priya(tree: KeywordTree) -> None:
    tree.commit_session([{"role": "user", "content": "I live in Boston."}], session_id="s1", scope="user:priya",
                        options=options(memory("profile", "home", "I live in Boston.", attribute="home",
                                               value="Boston"), session_time="2023-01-10"))
    tree.commit_session([{"role": "user", "content": "Since moving to Denver I bike to work."}], session_id="s2",
                        scope="user:priya",
                        options=options(memory("profile", "home", "Since moving to Denver I bike to work.",
                                               attribute="home", value="Denver"), session_time="2024-05-02"))


def test_a_changed_fact_beats_the_old_value_which_stays_marked_for_history(tmp_path: Path) -> None:
    with _open(tmp_path / "t") as tree:
        _priya(tree)
        boston = [info for info in tree.memories("user:priya") if "Boston" in info.content]
        assert boston and all(info.metadata.get(SUPERSEDED_BY) for info in boston)  # kept, marked
        assert all(isinstance(info.metadata.get(VALID_UNTIL), float) for info in boston)
        (session,) = tree.find_keywords("s1")
        old_turn = [info for info in tree.get_infos_of_keyword(session.id) if info.metadata.get("turn") is not None]
        assert old_turn and all(info.metadata.get(SUPERSEDED_BY) for info in old_turn)  # the turn it came from too
        first = tree.recall("where does she live, boston or denver?", scope="user:priya", min_score=0)[0]
        assert "Denver" in first.info.content
        history = tree.recall("where does she live, boston or denver?", scope="user:priya", min_score=0,
                              include_superseded=True)
        assert any("Boston" in hit.info.content for hit in history)
        block = tree.assemble("where does she live, boston or denver?", "user:priya", 2000)
        boston_lines = [line for line in block.splitlines() if "Boston" in line]
        assert boston_lines and all("superseded, earlier value until 2024-05-02" in line for line in boston_lines)
        assert any("Denver" in line and "superseded" not in line for line in block.splitlines())


def test_a_value_older_than_the_held_one_is_kept_as_the_earlier_one(tmp_path: Path) -> None:
    with _open(tmp_path / "t") as tree:
        tree.commit_session([{"role": "user", "content": "I live in Denver."}], session_id="s2", scope="user:p",
                            options=options(memory("profile", "home", "I live in Denver.", attribute="home",
                                                   value="Denver"), session_time="2024-05-02"))
        result = tree.commit_session([{"role": "user", "content": "I lived in Boston."}], session_id="s1",
                                     scope="user:p", options=options(memory(
                                         "profile", "home", "I lived in Boston.", attribute="home", value="Boston"),
                                         session_time="2023-01-10"))
        assert [d.action for d in result.decisions] == ["supersede"]
        held = {info.content: info for info in tree.memories("user:p")}
        assert held["I lived in Boston."].metadata.get(SUPERSEDED_BY) == held["I live in Denver."].id
        assert not held["I live in Denver."].metadata.get(SUPERSEDED_BY)


def test_a_question_about_the_user_as_a_whole_returns_the_profile_and_key_facts(tmp_path: Path) -> None:
    with _open(tmp_path / "t") as tree:
        _priya(tree)
        tree.commit_session([{"role": "user", "content": "I love hiking."}], session_id="s3", scope="user:priya",
                            options=options(memory("preferences", "hiking", "I love hiking.")))
        for question in ("What do you know about me?", "tell me about Priya", "who am I?",
                         "so what have you learned about me so far?"):
            contents = [hit.info.content for hit in tree.recall(question, scope="user:priya")]
            assert contents[:2] == ["Since moving to Denver I bike to work.", "I love hiking."], question
            assert "I live in Boston." not in contents  # a superseded value is no key fact
        assert tree.recall("what do you know about my diet?", scope="user:priya") == []  # a topic, not a person


def test_first_and_third_person_questions_find_the_same_fact(tmp_path: Path) -> None:
    with _open(tmp_path / "t") as tree:
        tree.commit_session([{"role": "user", "content": "I work as a nurse at the general hospital."}],
                            session_id="s1", scope="user:priya", options=CommitOptions(extractor=lambda m, c: []))
        for question in ("Where do I work?", "Where does Priya work?", "where does priya's work happen"):
            hits = tree.recall(question, scope="user:priya")
            assert hits and hits[0].info.content.startswith("I work as a nurse"), question


def test_another_person_s_fact_is_not_the_user_s(tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "My sister Anika works at a big tech company, Google."},
            {"role": "user", "content": "I work at Figma as a designer."}]
    with _open(tmp_path / "t") as tree:
        result = tree.commit_session(chat, session_id="s1", scope="user:priya",
                                     options=CommitOptions(keep_turns=False))
        profile = [d for d in result.decisions if d.category == "profile"]
        assert profile and all("Anika" not in d.content for d in profile)  # never the user's own
        first = tree.recall("which big tech company does she work at?", scope="user:priya", min_score=0)[0]
        assert first.info.content == "I work at Figma as a designer."
        asked = tree.recall("where does her sister work?", scope="user:priya", min_score=0)[0]
        assert "Anika" in asked.info.content  # named, the sister's fact is the answer


PRIYA = [
    ("2023-01-10", [{"role": "user", "content": "Hi, I'm Priya. I work as a nurse in Boston."},
                    {"role": "assistant", "content": "Nice to meet you, Priya! How can I help?"},
                    {"role": "user", "content": "I live in Boston and I work as a nurse, so my shifts are long. "
                                                "I'm vegetarian and allergic to peanuts."},
                    {"role": "assistant", "content": "Got it. I'll keep meal ideas vegetarian and peanut-free."}]),
    ("2023-06-01", [{"role": "user", "content": "We just adopted a dog named Biscuit!"},
                    {"role": "assistant", "content": "Congratulations! What breed is Biscuit?"}]),
    ("2024-05-02", [{"role": "user", "content": "Big news: I quit the hospital and started as a product manager "
                                                "at Stripe."},
                    {"role": "assistant", "content": "That's a big change, congratulations!"},
                    {"role": "user", "content": "Since moving to Denver I bike everywhere."},
                    {"role": "assistant", "content": "Denver is great for biking."}]),
]


def test_priya_s_current_facts_come_first_offline(tmp_path: Path) -> None:
    """The issue's three-session chat, through the offline pipeline and the hash embedder."""
    with _open(tmp_path / "t") as tree:
        for number, (day, chat) in enumerate(PRIYA, 1):
            tree.commit_session(chat, session_id=f"s{number}", scope="user:priya",
                                options=CommitOptions(session_time=day))
        expected = {"Where does Priya live?": "Denver", "Where does she live?": "Denver",
                    "Where do I live?": "Denver", "What does Priya do for work?": "Stripe",
                    "where does she work?": "Stripe", "What can't she eat?": "vegetarian",
                    "Does she have a pet?": "dog", "Do I have a pet?": "dog"}
        for question, answer in expected.items():
            hits = tree.recall(question, scope="user:priya")
            assert hits and answer in hits[0].info.content, (question, [h.info.content for h in hits[:3]])
        overview = [hit.info.content for hit in tree.recall("What do you know about me?", scope="user:priya")]
        assert overview and not any("Boston" in text for text in overview)
        block = tree.assemble("where does she live?", "user:priya", 2000)
        assert all("superseded" in line for line in block.splitlines() if "Boston" in line and line.startswith("- "))


def test_the_readme_s_recall_finds_a_camel_case_identifier_by_its_words(tmp_path: Path) -> None:
    with _open(tmp_path / "t") as tree:
        python = tree.create_keyword("Python", tree.create_keyword("Tools").id, aliases=["py"])
        note = tree.create_info("Prefers asyncio.TaskGroup over gather()", keyword_ids=[python.id])
        assert [hit.info.id for hit in tree.recall("asyncio task groups", k=5)] == [note.id]
        assert [hit.info.id for hit in tree.recall("TaskGroup", k=5)] == [note.id]
