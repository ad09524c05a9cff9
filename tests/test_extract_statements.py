"""Durable first-person facts (kwtree.memory.statements through kwtree.memory.extract): every
fact a user states becomes its own memory, single-valued facts carry their attribute, another
person's facts stay theirs, small talk gives nothing, and what the extractor passes over is
told (kwtree.memory.candidates.Extraction, CommitResult.passed_over)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kwtree import CommitOptions, KeywordTree
from kwtree.memory.candidates import (
    ASPECTS,
    ATTRIBUTES,
    USER_SUBJECT,
    Candidate,
    ExtractContext,
    Extraction,
)
from kwtree.memory.extract import MAX_CANDIDATES_PER_MESSAGE, extract_offline
from kwtree.normalize import tokenize
from kwtree.retrieval.smalltalk import PHRASES, small_talk

SESSION = 1_683_554_160.0  # 2023-05-08


def run(*texts: str, role: str = "user") -> Extraction:
    return extract_offline([{"role": role, "content": text} for text in texts], ExtractContext("s", 0, SESSION))


def facts_of(found: Sequence[Candidate]) -> list[tuple[str, str, str]]:
    """(category, attribute or aspect, value) of each candidate that states a durable fact."""
    told = []
    for candidate in found:
        facts = candidate.facts or {}
        about = facts.get("attribute") or facts.get("aspect")
        if about:
            told.append((candidate.category, str(about), str(facts.get("value"))))
    return told


def attribute(found: Sequence[Candidate], name: str) -> list[str]:
    return [str((c.facts or {})["value"]) for c in found
            if c.category == "profile" and (c.facts or {}).get("attribute") == name]


# --- the sessions of the brief -------------------------------------------------------------------

PRIYA_1 = [
    {"role": "user", "content": "Hi, I'm Priya. I work as a nurse in Boston."},
    {"role": "assistant", "content": "Nice to meet you, Priya! How can I help?"},
    {"role": "user", "content": "I live in Boston and I work as a nurse."},
    {"role": "user", "content": "I'm vegetarian and allergic to peanuts."},
    {"role": "user", "content": "We just adopted a dog named Biscuit."},
]
PRIYA_2 = [
    {"role": "user", "content": "I quit the hospital and started as a product manager at Stripe."},
    {"role": "user", "content": "Since moving to Denver I bike everywhere."},
]
MEM0_QUICKSTART = [
    {"role": "user", "content": "I'm planning to watch a movie tonight. Any recommendations?"},
    {"role": "assistant", "content": "How about thriller movies? They can be quite engaging."},
    {"role": "user", "content": "I'm not a big fan of thriller movies but I love sci-fi movies."},
    {"role": "assistant", "content": "Got it! I'll avoid thriller recommendations and suggest sci-fi movies in the "
                                     "future."},
]


def test_the_priya_session_gives_each_durable_fact_its_attribute_or_aspect() -> None:
    first = extract_offline(PRIYA_1, ExtractContext("s1", 0, SESSION))
    assert attribute(first, "name") == ["Priya"]
    assert attribute(first, "home") == ["Boston"] and attribute(first, "job") == ["nurse"]
    assert attribute(first, "diet") == ["vegetarian"]
    assert ("profile", "allergy", "peanuts") in facts_of(first)
    assert ("profile", "pet", "a dog named Biscuit") in facts_of(first)
    assert [c for c in first if 1 in c.sources] == []  # the assistant's pleasantry: nothing
    assert all((c.facts or {}).get("subject") == USER_SUBJECT for c in first if c.category == "profile")
    second = extract_offline(PRIYA_1 + PRIYA_2, ExtractContext("s1", len(PRIYA_1), SESSION))
    assert attribute(second, "job") == ["product manager"]
    assert attribute(second, "employer") == ["none", "Stripe"]  # left the hospital, then joined Stripe
    assert attribute(second, "home") == ["Denver"]


def test_a_job_change_and_a_move_supersede_the_profile_when_committed(tree: KeywordTree) -> None:
    first = tree.commit_session(PRIYA_1, session_id="s1", scope="user:priya")
    assert first.created > 0
    second = tree.commit_session(PRIYA_2, session_id="s2", scope="user:priya")
    superseded = {d.key: d.previous for d in second.decisions if d.action == "supersede"}
    assert superseded.keys() >= {"job", "home"}
    assert "nurse" in str(superseded["job"]) and "Boston" in str(superseded["home"])


def test_the_mem0_quickstart_gives_the_plan_the_dislike_and_the_like() -> None:
    found = run(*(m["content"] for m in MEM0_QUICKSTART[::2]))
    assert ("events", "plan", "watch a movie tonight") in facts_of(found)
    preferences = {(c.key, (c.facts or {}).get("polarity")) for c in found if c.category == "preferences"}
    assert preferences == {("thriller movies", "dislike"), ("sci-fi movies", "like")}
    assert len(found) >= 3


def test_the_mem0_quickstart_commits_three_memories(tree: KeywordTree) -> None:
    result = tree.commit_session(MEM0_QUICKSTART, session_id="mem0", scope="user:alex")
    written = [d for d in result.decisions if d.action in ("create", "append")]
    assert len(written) >= 3
    assert {d.category for d in written} >= {"events", "preferences"}


# --- each rule ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "name", "value"), [
    ("I'm vegetarian", "diet", "vegetarian"),
    ("i went vegan last year", "diet", "vegan"),
    ("I'm no longer vegan.", "diet", "no longer vegan"),
    ("I've been doing keto since March", "diet", "keto"),
    ("Since moving to Lisbon I cook more.", "home", "Lisbon"),
    ("first week at the new place in Oslo", "home", "Oslo"),
    ("olly and i got a flat in Brunswick, he is still jetlagged", "home", "Brunswick"),
    ("we bought a house in Leeds last year", "home", "Leeds"),
    ("We relocated to Austin in the spring.", "home", "Austin"),
    ("my new boss at Figma is great", "employer", "Figma"),
    ("I joined Spotify as a data analyst.", "employer", "Spotify"),
    ("I joined Spotify as a data analyst.", "job", "data analyst"),
    ("I got promoted to senior editor.", "job", "senior editor"),
    ("im a trainer at equinox", "employer", "equinox"),
    ("I got laid off last week.", "employer", "none"),
    ("I'm retired now.", "job", "retired"),
    ("I'm a student at MIT.", "school", "MIT"),
    ("we broke up", "relationship", "single"),
    ("My wife and I went to Rome.", "relationship", "married"),
    ("We got engaged!", "relationship", "engaged"),
    ("The divorce was finalized in May.", "relationship", "divorced"),
    ("I'm 41 years old", "age", "41"),
    ("I'm originally from Porto.", "origin", "Porto"),
])
def test_single_valued_facts_carry_their_attribute_and_value(text: str, name: str, value: str) -> None:
    assert name in ATTRIBUTES
    assert value in attribute(run(text), name)


@pytest.mark.parametrize(("text", "category", "aspect", "value"), [
    ("I'm allergic to peanuts", "profile", "allergy", "peanuts"),
    ("I have a severe shellfish allergy.", "profile", "allergy", "shellfish"),
    ("I have asthma, so no running in pollen season.", "profile", "health", "asthma"),
    ("I was diagnosed with celiac disease.", "profile", "health", "celiac disease"),
    ("I'm lactose intolerant", "profile", "health", "lactose intolerant"),
    ("We rescued two cats last month.", "profile", "pet", "two cats"),
    ("I have two kids.", "profile", "family", "two kids"),
    ("I always use uv", "preferences", "tool", "uv"),
    ("I switched from VS Code to neovim.", "preferences", "tool", "neovim"),
    ("I'm thinking of moving to Lisbon.", "events", "plan", "moving to Lisbon"),
    ("I'm going to run a marathon in the fall.", "events", "plan", "run a marathon"),
])
def test_multi_valued_facts_are_memories_without_an_attribute(text: str, category: str, aspect: str,
                                                              value: str) -> None:
    found = run(text)
    assert aspect in ASPECTS
    assert (category, aspect, value) in facts_of(found), found
    assert all((c.facts or {}).get("attribute") is None for c in found if (c.facts or {}).get("aspect"))


def test_a_planned_move_is_no_home() -> None:
    assert attribute(run("I'm thinking of moving to Lisbon.", "We're moving to Berlin next spring."), "home") == []


@pytest.mark.parametrize(("text", "polarity", "topic"), [
    ("not a big fan of thriller movies", "dislike", "thriller movies"),
    ("I'm not really into jazz.", "dislike", "jazz"),
    ("I don't like cilantro.", "dislike", "cilantro"),
    ("Honestly, can't stand reality TV.", "dislike", "reality TV"),
    ("I'm obsessed with sourdough.", "like", "sourdough"),
])
def test_likes_and_dislikes_are_preferences(text: str, polarity: str, topic: str) -> None:
    found = [c for c in run(text) if c.category == "preferences"]
    assert [(c.key, (c.facts or {})["polarity"]) for c in found] == [(topic, polarity)]


# --- one memory per fact --------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "contents"), [
    ("I live in Boston and I work as a nurse.", ["I live in Boston", "I work as a nurse."]),
    ("I'm vegetarian and allergic to peanuts.", ["I'm vegetarian", "I'm allergic to peanuts."]),
    ("I quit the hospital and started as a product manager at Stripe.",
     ["I quit the hospital", "I started as a product manager at Stripe."]),
    ("I'm not a big fan of thriller movies but I love sci-fi movies.",
     ["I'm not a big fan of thriller movies", "I love sci-fi movies."]),
    ("I live in Leeds; I have two kids.", ["I live in Leeds", "I have two kids."]),
])
def test_a_compound_sentence_gives_one_candidate_per_fact_each_with_its_clause(text: str,
                                                                              contents: list[str]) -> None:
    found = [c for c in run(text) if c.category in ("profile", "preferences")]
    assert sorted({c.content for c in found}) == sorted(contents)
    assert all(c.sources == (0,) for c in found)


@pytest.mark.parametrize("text", ["I love hiking and swimming.", "My wife and I went to Rome.",
                                  "I went to a support group yesterday and it was powerful.",
                                  "Tom and I met at work."])
def test_what_is_no_second_clause_stays_with_its_sentence(text: str) -> None:
    assert {c.content for c in run(text)} == {text}


def test_compound_contents_never_look_like_duplicates_when_committed(tree: KeywordTree) -> None:
    result = tree.commit_session([{"role": "user", "content": "I live in Boston and I work as a nurse."}],
                                 session_id="s", scope="user:p")
    assert {d.key for d in result.decisions if d.action == "create"} >= {"home", "job"}
    assert not [d for d in result.decisions if d.action == "skip"]


# --- other people -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "subject", "about", "value"), [
    ("my sister lives in Denver", "sister", "attribute", "Denver"),
    ("My sister Anika works at Google in Zurich.", "Anika", "attribute", "Google"),
    ("my boss Tom loves golf", "Tom", "aspect", "golf"),
    ("My brother is a vegan chef.", "brother", "attribute", "vegan chef"),
])
def test_another_persons_facts_are_theirs_not_the_users(text: str, subject: str, about: str, value: str) -> None:
    found = run(text)
    assert [c for c in found if c.category == "profile"] == []
    # (a name the sentence mentions is filed as theirs too: the sentence is about them)
    theirs = [c for c in found if (c.facts or {}).get("subject") == subject and c.key == subject]
    assert len(theirs) == 1 and theirs[0].category == "entities"
    assert all((c.facts or {}).get("subject") != USER_SUBJECT for c in found)
    assert about in (theirs[0].facts or {}) and (theirs[0].facts or {})["value"] == value


def test_a_named_speakers_facts_name_that_speaker() -> None:
    found = extract_offline([{"role": "Caroline", "content": "I'm vegan and I live in Leeds."}],
                            ExtractContext("s", 0, SESSION))
    profile = [c for c in found if c.category == "profile"]
    assert {c.key for c in profile} == {"Caroline diet", "Caroline home"}
    assert {(c.facts or {})["subject"] for c in profile} == {"Caroline"}


# --- small talk -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "reason"), [
    ("Hi!", "greeting"), ("Hello there, Priya.", "greeting"), ("Thanks so much!", "thanks"),
    ("Nice to meet you, Priya! How can I help?", "pleasantry"), ("You're welcome", "pleasantry"),
    ("Got it!", "acknowledgement"), ("ok thanks", "acknowledgement"), ("/clear", "client command"),
    ("/compact", "client command"), ("/help", "client command"),
    ("<command-name>/clear</command-name>\n<command-message>clear</command-message>\n<command-args></command-args>",
     "client command"),
    ("<local-command-stdout></local-command-stdout>", "client command"),
])
def test_small_talk_says_why(text: str, reason: str) -> None:
    assert small_talk(text) == reason


@pytest.mark.parametrize("text", ["Hi! I just moved to Denver", "Hi, I'm Priya.", "Thanks for the recipe.",
                                  "Got it! I'll avoid thriller recommendations.", "", "Priya!",
                                  "I'm vegetarian", "/clear the cache then rebuild everything for me please now"])
def test_what_states_something_is_no_small_talk(text: str) -> None:
    assert small_talk(text) is None


_FACTS = st.sampled_from(["I live in Denver.", "I'm allergic to peanuts.", "I work as a nurse.", "I'm vegan.",
                          "My name is Ann.", "We adopted a cat.", "I love jazz.", "I always use uv."])
_CHATTER = st.sampled_from([phrase for phrases in PHRASES.values() for phrase in phrases])


@given(_CHATTER, _FACTS, st.sampled_from([" ", "! ", ", ", ". "]), st.booleans())
def test_small_talk_never_flags_a_text_that_states_a_fact(chatter: str, fact: str, joint: str, first: bool) -> None:
    text = f"{chatter}{joint}{fact}" if first else f"{fact}{joint}{chatter}"
    assert run(fact) and small_talk(text) is None


def test_a_small_talk_message_gives_no_memory_and_its_turn_says_so(tree: KeywordTree) -> None:
    messages = [{"role": "user", "content": "Good night! See you tomorrow."},
                {"role": "user", "content": "/clear"},
                {"role": "user", "content": "I'm vegan."}]
    result = tree.commit_session(messages, session_id="s", scope="user:p",
                                 options=CommitOptions(session_time="2023-05-08"))  # "tomorrow" is a date
    assert [d.key for d in result.decisions] == ["diet"]
    turns = [i for i in tree.get_infos_of_keyword(str(result.session_keyword_id)) if "turn" in i.metadata]
    assert [t.metadata.get("small_talk") for t in turns] == ["pleasantry", "client command", None]
    assert [(p.index, p.reason) for p in result.passed_over] == [(0, "small talk (pleasantry)")]


# --- what is passed over is told --------------------------------------------------------------------

def test_folded_and_capped_candidates_are_passed_over_with_their_reason() -> None:
    found = run("I love hiking.", "I love hiking.")
    assert len(found) == 1 and found[0].sources == (0, 1)
    assert [(p.index, p.category, p.reason) for p in found.passed_over] == [
        (1, "preferences", "the same memory as an earlier candidate: sources joined")]
    same = run("My wife called.", "My wife and I cooked.")
    assert attribute(same, "relationship") == ["married"]
    assert any(p.reason.startswith("the same relationship (married)") for p in same.passed_over)
    names = " ".join(f"I met Name{chr(65 + i)}{chr(65 + j)}." for i in range(5) for j in range(5))
    capped = run(names)
    assert len(capped) == MAX_CANDIDATES_PER_MESSAGE
    assert len(capped.passed_over) == 25 - MAX_CANDIDATES_PER_MESSAGE
    assert all("MAX_CANDIDATES_PER_MESSAGE" in p.reason for p in capped.passed_over)


def test_the_commit_result_and_its_audit_tell_what_was_passed_over(tree: KeywordTree) -> None:
    messages = [{"role": "user", "content": "I love hiking."}, {"role": "user", "content": "I love hiking."}]
    result = tree.commit_session(messages, session_id="s", scope="user:p")
    assert [(p.index, p.text) for p in result.passed_over] == [(1, "I love hiking.")]
    audit = tree.history()[-1].audit["commit_session"]
    assert audit["passed_over"][0]["reason"] == "the same memory as an earlier candidate: sources joined"
    plain = tree.commit_session(messages, session_id="t", scope="user:p",
                                options=CommitOptions(extractor=lambda m, c: list(extract_offline(m, c))))
    assert plain.passed_over == ()  # a custom extractor returning a plain list still works


# --- properties -------------------------------------------------------------------------------------

_WORDS = st.sampled_from(["I", "I'm", "we", "my", "and", "but", "not", "a", "fan", "of", "live", "in", "Denver",
                          "work", "as", "nurse", "at", "Stripe", "vegan", "allergic", "to", "peanuts", "sister",
                          "moved", "since", "moving", "love", "hate", "use", "uv", "quit", "started", "the", ",",
                          ";", ".", "!", "?", "wife", "dog", "named", "Biscuit", "planning", "going", "\u2019m"])


@given(st.lists(_WORDS, max_size=30), st.sampled_from(["user", "assistant", "Caroline"]))
def test_the_extractor_never_raises_and_every_content_is_drawn_from_its_message(words: list[str], role: str) -> None:
    text = " ".join(words)
    found = extract_offline([{"role": role, "content": text}], ExtractContext("s", 0, SESSION))
    said = set(tokenize(text))
    for candidate in found:
        assert set(tokenize(candidate.content)) <= said, candidate
        assert candidate.sources == (0,)
    for passed in found.passed_over:
        assert passed.index == 0

