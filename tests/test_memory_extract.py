"""The offline extractor's rules (kwtree.memory.extract), one behaviour per test, and the
structural facts it keeps on the LoCoMo dev sessions."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from memory_helpers import doc_examples, prints_its_comments

from kwtree.agent.clients import StubLLMClient
from kwtree.errors import InvalidInputError
from kwtree.memory.candidates import ABOUT, CATEGORIES, ENTITIES_KEY, Candidate, ExtractContext
from kwtree.memory.extract import (
    CONFIDENCE,
    MAX_CANDIDATES_PER_CALL,
    MAX_CANDIDATES_PER_MESSAGE,
    default_extractor,
    extract_offline,
)
from kwtree.memory.llm_extract import LLMExtractor
from kwtree.memory.when import DAY, parse_time
from kwtree.normalize import tokenize

SESSION = datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()  # a Monday
LOCOMO = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo_dev.json"


def run(messages: Sequence[Any], first_new: int = 0,
        session_time: float | None = SESSION) -> list[Candidate]:
    return extract_offline(messages, ExtractContext("s1", first_new, session_time))


def user(text: str, **more: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **more}


def led(about: str, abstract: str) -> str:
    """A fact's abstract as the extractor writes it: led by what it is about (``ABOUT``)."""
    lead = f"{about.capitalize()} ({ABOUT[about]})" if about in ABOUT else about.capitalize()
    return f"{lead}: {abstract}"


def of(candidates: list[Candidate], category: str) -> list[Candidate]:
    return [c for c in candidates if c.category == category]


def only(candidates: list[Candidate], category: str) -> Candidate:
    found = of(candidates, category)
    assert len(found) == 1, found
    return found[0]


# --- profile -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "attribute", "value", "abstract"), [
    ("I am a nurse.", "job", "nurse", "The user works as a nurse."),
    ("Well, I'm an engineer at a bank.", "job", "engineer", "The user works as an engineer."),
    ("I work as a software developer, mostly backend.", "job", "software developer",
     "The user works as a software developer."),
    ("I work at Acme Corp.", "employer", "Acme Corp", "The user works at Acme Corp."),
    ("I'm 34 years old.", "age", "34", "The user is 34 years old."),
    ("My name is Ann Lee.", "name", "Ann Lee", "The user's name is Ann Lee."),
    ("I live in Berlin with my wife.", "home", "Berlin", "The user lives in Berlin."),
    ("I\u2019m from Sweden.", "origin", "Sweden", "The user is from Sweden."),
    ("I now work as a teacher.", "job", "teacher", "The user works as a teacher."),
    ("I currently live in Oslo.", "home", "Oslo", "The user lives in Oslo."),
    ("I'm now a nurse.", "job", "nurse", "The user works as a nurse."),
])
def test_self_descriptions_are_profile_facts(text: str, attribute: str, value: str, abstract: str) -> None:
    found = [c for c in of(run([user(text)]), "profile") if c.key == attribute]
    assert len(found) == 1, found
    fact = found[0]
    assert fact.facts is not None and fact.facts["attribute"] == attribute and fact.facts["value"] == value
    assert fact.abstract == led(attribute, abstract)
    assert fact.content == text and fact.sources == (0,)
    assert 0 <= fact.confidence <= 1


def test_one_sentence_can_state_several_profile_facts_each_with_its_own_clause() -> None:
    found = of(run([user("I'm a nurse and I live in Leeds.")]), "profile")
    assert [(c.key, c.abstract, c.content) for c in found] == [
        ("job", led("job", "The user works as a nurse."), "I'm a nurse"),
        ("home", led("home", "The user lives in Leeds."), "I live in Leeds.")]


@pytest.mark.parametrize("text", ["I'm a bit tired.", "I'm 5 minutes late.", "I am a huge fan of jazz.",
                                  "I'm at 80% battery."])
def test_what_only_looks_like_a_self_description_is_not_profile(text: str) -> None:
    assert of(run([user(text)]), "profile") == []


def test_the_assistant_describing_itself_is_not_the_users_profile() -> None:
    found = run([{"role": "assistant", "content": "I am an AI assistant. I live in the cloud. I love helping."},
                 {"role": "system", "content": "I am a system prompt. My name is Root."}])
    assert of(found, "profile") == [] and of(found, "preferences") == [] and of(found, "entities") == []


def test_a_transcript_label_naming_the_speaker_is_not_repeated_in_the_abstract() -> None:
    found = run([{"role": "Caroline", "content": "Caroline: I went to a support group yesterday."}])
    assert only(found, "events").abstract == "Caroline went to a support group yesterday (2023-05-07)."
    assert only(found, "events").content == "Caroline: I went to a support group yesterday."  # verbatim


def test_a_named_speakers_facts_are_about_that_speaker() -> None:
    found = run([{"role": "Caroline", "content": "I'm a counselor. I love painting."},
                 {"role": "Melanie", "content": "I am a teacher."}])
    jobs = of(found, "profile")
    assert [(c.key, c.abstract) for c in jobs] == [("Caroline job", led("job", "Caroline works as a counselor.")),
                                                   ("Melanie job", led("job", "Melanie works as a teacher."))]
    preference = only(found, "preferences")
    assert preference.abstract == "Caroline likes painting." and preference.facts is not None
    assert preference.facts["subject"] == "Caroline"


# --- preferences ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "key", "polarity"), [
    ("I love hiking in the Alps.", "hiking", "like"),
    ("I really enjoy cooking Thai food.", "cooking Thai food", "like"),
    ("I prefer tea over coffee.", "tea over coffee", "like"),
    ("I hate early meetings.", "early meetings", "dislike"),
    ("Honestly I can't stand loud music.", "loud music", "dislike"),
    ("I'm into pottery these days.", "pottery these days", "like"),
])
def test_stated_preferences_keyed_by_topic(text: str, key: str, polarity: str) -> None:
    preference = only(run([user(text)]), "preferences")
    assert preference.key == key
    assert preference.facts is not None and preference.facts["polarity"] == polarity
    assert preference.confidence == CONFIDENCE["preference.stated"]
    assert preference.abstract == f"The user {'dislikes' if polarity == 'dislike' else 'likes'} {key}."


@pytest.mark.parametrize("text", ["I love it!", "I love that you asked.", "I'd love to come.", "I love how it looks."])
def test_pronouns_and_wishes_are_no_preferences(text: str) -> None:
    assert of(run([user(text)]), "preferences") == []


def test_a_favorite_is_a_preference_keyed_by_what() -> None:
    favorite = only(run([user("My favorite band is Radiohead.")]), "preferences")
    assert (favorite.key, favorite.abstract) == ("band", "The user's favorite band is Radiohead.")
    assert favorite.confidence == CONFIDENCE["preference.favorite"]


# --- events and time -----------------------------------------------------------------------------

def test_a_dated_sentence_is_an_event_at_the_time_it_states() -> None:
    event = only(run([user("I went to a support group yesterday and it was powerful.")]), "events")
    assert event.happened_at == datetime(2023, 5, 7, tzinfo=UTC).timestamp()
    assert event.abstract == "The user went to a support group yesterday and it was powerful (2023-05-07)."
    assert event.key == "went to a support group"
    assert event.confidence == CONFIDENCE["event.dated"]


def test_relative_dates_use_the_messages_ts_before_the_session_date() -> None:
    ts = datetime(2023, 6, 10, 9, tzinfo=UTC).timestamp()  # a Saturday
    event = only(run([user("I baked bread last Friday.", ts=ts)]), "events")
    assert event.happened_at == datetime(2023, 6, 9, tzinfo=UTC).timestamp()


def test_an_undated_past_action_happens_at_the_messages_time_else_the_sessions() -> None:
    ts = "2023-06-01T10:00:00Z"
    found = run([user("I adopted a puppy.", ts=ts), user("We visited the museum.")])
    first, second = of(found, "events")
    assert first.happened_at == parse_time(ts) and first.confidence == CONFIDENCE["event.past"]
    assert second.happened_at == SESSION
    assert run([user("I adopted a puppy.")], session_time=None)[0].happened_at is None


def test_present_tense_chat_is_no_event() -> None:
    assert of(run([user("I think so. What do you mean?"), user("I have no idea.")]), "events") == []


# --- entities ------------------------------------------------------------------------------------

def test_my_relation_name_is_an_entity_with_its_relation() -> None:
    found = run([user("Yesterday my sister Ann called, and my dog Max barked.")])
    entities = {c.key: c for c in of(found, "entities")}
    assert entities["Ann"].abstract == "Ann is the user's sister."
    assert entities["Max"].facts is not None and entities["Max"].facts["kind"] == "animal"
    assert entities["Ann"].confidence == CONFIDENCE["entity.related"]


def test_capitalised_names_inside_a_sentence_are_entities_but_not_its_first_word() -> None:
    found = run([user("Paris was lovely. Say hello to Bob Smith at the Louvre for me.")])
    keys = {c.key for c in of(found, "entities")}
    assert keys == {"Bob Smith", "Louvre"}
    assert all(c.confidence == CONFIDENCE["entity.named"] for c in of(found, "entities"))
    assert all(ENTITIES_KEY not in (c.facts or {}) for c in found)


def test_the_names_an_event_mentions_are_its_facts_not_a_second_memory() -> None:
    found = run([user("We met Bob Smith at the Louvre on Friday. I love jazz with Nina Simone.")])
    event, preference = only(found, "events"), only(found, "preferences")
    assert event.facts is not None and event.facts[ENTITIES_KEY] == ["Bob Smith", "Louvre"]
    assert preference.facts is not None and preference.facts[ENTITIES_KEY] == ["Nina Simone"]
    assert of(found, "entities") == []  # no "The user mentioned Bob Smith." holding the same words
    related = run([user("I went to Leeds with my sister Ann yesterday.")])
    assert only(related, "entities").abstract == "Ann is the user's sister."  # a relation says more
    assert only(related, "events").facts[ENTITIES_KEY] == ["Leeds", "Ann"]  # type: ignore[index]


def test_the_conversations_own_speakers_are_no_entities() -> None:
    found = run([{"role": "Caroline", "content": "Hey Melanie! I met Jolene today."},
                 {"role": "Melanie", "content": "Wow, Caroline! Tell me more."}])
    assert of(found, "entities") == []
    assert only(found, "events").facts[ENTITIES_KEY] == ["Jolene"]  # type: ignore[index]
    found = run([{"role": "Caroline", "content": "I met Jolene and Melanie today."},
                 {"role": "Melanie", "content": "Say hi to Jolene and Caroline."}])
    assert only(found, "events").facts[ENTITIES_KEY] == ["Jolene"]  # type: ignore[index]
    assert {c.key for c in of(found, "entities")} == {"Jolene"}


@pytest.mark.parametrize("text", ["Thanks, Mel!", "Wow, Mel, you're amazing!", "Totally agree, Mel.",
                                  "Hey Mel!", "Who supports you, Mel?", "Oh hey Mel, how are you?",
                                  "Ann: Thank you, Bob Smith!"])
def test_a_name_spoken_to_the_listener_is_no_entity(text: str) -> None:
    """"Thanks, Mel!" says nothing about Mel: a conversation full of them filed every
    greeting under one entity keyword that every question naming the listener then found."""
    found = run([user(text)])
    assert of(found, "entities") == [] and all(ENTITIES_KEY not in (c.facts or {}) for c in found)


def test_an_events_key_leaves_out_the_greeting_that_opens_it() -> None:
    """The key names the event's keyword: "Hey John, this week's been" put the listener's
    name in it, so every question naming John matched that keyword (and, through its path,
    each event placed under it)."""
    found = run([{"role": "Tim", "content": "Hey John, this week's been really busy for me."},
                 {"role": "Tim", "content": "Thanks, Mel! Yesterday was a long day at work."}])
    keys = [c.key for c in of(found, "events")]
    assert keys == ["this week's been really busy", "Yesterday was a long day"]


def test_a_question_names_no_entity() -> None:
    found = run([user("Where in England was it? Was it near Leeds?"), user("Did you see Bob Smith there?")])
    assert of(found, "entities") == []


@pytest.mark.parametrize(("text", "names"), [("I went hiking with Mel.", ["Mel"]),
                                              ("I visited Paris, France.", ["Paris", "France"]),
                                              ("We went to the park, Bob and I.", ["Bob"]),
                                              ("I met Bob yesterday, Ann.", ["Bob"])])
def test_a_name_spoken_of_stays_beside_one_spoken_to(text: str, names: list[str]) -> None:
    found = run([user(text)])
    mentioned = [name for c in found for name in (c.facts or {}).get(ENTITIES_KEY, [])]
    assert (mentioned or [c.key for c in of(found, "entities")]) == names


# --- patterns, cases, skills ------------------------------------------------------------------------

def test_habits_are_patterns() -> None:
    found = run([user("I usually run in the morning."), user("Every Sunday, I call my mom.")])
    first, second = of(found, "patterns")
    assert (first.key, first.abstract) == ("run in the morning", "The user usually runs in the morning.")
    assert first.facts is not None and first.facts["frequency"] == "usually"
    assert second.key == "call my mom" and second.facts is not None and second.facts["frequency"] == "every sunday"


def test_a_problem_and_its_solution_are_a_case_from_either_side() -> None:
    found = run([user("The build kept failing on CI. I fixed it by pinning numpy."),
                 {"role": "assistant", "content": "The import broke. What worked was a clean venv."}])
    first, second = of(found, "cases")
    assert first.content == "The build kept failing on CI. I fixed it by pinning numpy."
    assert first.facts is not None and first.facts["problem"] == "The build kept failing on CI."
    assert second.sources == (1,) and "clean venv" in second.content


def test_tool_results_in_anthropic_blocks_are_skills_keyed_by_tool() -> None:
    messages = [
        {"role": "assistant", "content": [{"type": "text", "text": "Let me search."},
                                          {"type": "tool_use", "id": "t1", "name": "web_search", "input": {"q": "x"}},
                                          {"type": "tool_use", "id": "t2", "name": "read_file", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "3 results", "duration": 1.5},
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "no such file"}],
             "is_error": True}]},
        {"role": "tool", "name": "calculator", "content": "42", "duration_s": 0.01},
        {"role": "tool", "tool_call_id": "c9", "content": "Traceback: ValueError"},
    ]
    skills = of(run(messages), "skills")
    assert [(c.key, c.facts["outcome"] if c.facts else None, c.facts["duration"] if c.facts else None)
            for c in skills] == [("web_search", "success", 1.5), ("read_file", "failure", None),
                                 ("calculator", "success", 0.01), ("unknown tool", "failure", None)]
    assert [c.sources for c in skills] == [(1,), (1,), (2,), (3,)]
    assert skills[0].abstract == "A call to the tool web_search succeeded in 1.5 s."
    assert all(c.confidence == CONFIDENCE["skill"] for c in skills)
    # Tool results are not the user's speech: "3 results" makes no profile or event.
    assert {c.category for c in run(messages)} == {"skills"}


def test_openai_tool_calls_name_their_results() -> None:
    messages = [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {"name": "lookup"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "found it"}]
    assert [(c.key, c.sources) for c in of(run(messages), "skills")] == [("lookup", (1,))]


def test_identical_tool_outcomes_are_all_kept() -> None:
    call = {"role": "tool", "name": "ping", "content": "ok"}
    assert len(of(run([call, call, call]), "skills")) == 3


# --- the call: first_new, dedup, bounds, bad input ----------------------------------------------------

def test_only_messages_from_first_new_are_read() -> None:
    messages = [user("I am a nurse."), user("I love hiking."),
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
                user("I live in Oslo.")]
    found = run(messages, first_new=3)
    assert [(c.category, c.key) for c in found] == [("skills", "search"), ("profile", "home"), ("entities", "Oslo")]
    assert all(min(c.sources) >= 3 for c in found)
    assert run(messages, first_new=len(messages)) == []


def test_duplicates_in_one_call_merge_their_sources() -> None:
    found = run([user("I love hiking."), {"role": "assistant", "content": "Nice!"}, user("I love hiking.")])
    preference = only(found, "preferences")
    assert preference.sources == (0, 2)


def test_an_entity_mentioned_twice_is_one_candidate_with_both_sentences() -> None:
    found = run([user("That was Bob at noon."), user("Say hi to Bob again.")])
    bob = [c for c in of(found, "entities") if c.key == "Bob"]
    assert len(bob) == 1 and bob[0].sources == (0, 1)
    assert bob[0].content == "That was Bob at noon.\nSay hi to Bob again."


def test_candidates_are_capped_per_message_and_per_call() -> None:
    names = " ".join(f"I met Name{chr(65 + i)}{chr(65 + j)}." for i in range(5) for j in range(5))
    assert len(run([user(names)])) == MAX_CANDIDATES_PER_MESSAGE
    many = [user(f"I met Person{i} and Friend{i} at Place{i}.") for i in range(MAX_CANDIDATES_PER_CALL)]
    assert len(run(many)) == MAX_CANDIDATES_PER_CALL


def test_every_category_and_confidence_is_valid() -> None:
    found = run([user("I am a nurse. I love hiking. My sister Ann lives in Rome. I usually swim. "
                      "I went to Paris last week. It crashed. I fixed it by rebooting."),
                 {"role": "tool", "name": "t", "content": "ok"}])
    assert {c.category for c in found} == set(CATEGORIES)
    assert all(c.confidence in CONFIDENCE.values() for c in found)


@pytest.mark.parametrize(("messages", "first_new", "field"), [
    ("I am a nurse", 0, "messages"),
    ([{"content": "hi"}], 0, r"messages\[0\]\.role"),
    ([user("hi"), {"role": "user", "content": 42}], 0, r"messages\[1\]\.content"),
    ([user("hi"), user("hi", ts="last tuesday")], 0, r"messages\[1\]\.ts"),
    ([user("hi")], 2, "first_new"),
    ([user("hi")], -1, "first_new"),
    (["hi"], 0, r"messages\[0\]"),
])
def test_bad_input_names_the_field_and_changes_nothing(messages: Any, first_new: int, field: str) -> None:
    before = copy.deepcopy(messages)
    with pytest.raises(InvalidInputError, match=field):
        run(messages, first_new=first_new)
    assert messages == before


@pytest.mark.parametrize("session_time", ["1:56 pm on 8 May, 2023", float("nan"), True])
def test_a_bad_session_time_is_refused(session_time: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"context\.session_time"):
        run([user("I went home yesterday.")], session_time=session_time)


def test_known_roles_are_read_in_any_case() -> None:
    found = run([{"role": "User", "content": "I am a nurse."}, {"role": "Assistant", "content": "I am an AI."}])
    assert [(c.key, c.abstract) for c in of(found, "profile")] == [("job", led("job", "The user works as a nurse."))]


def test_default_extractor_is_offline_without_a_model() -> None:
    assert default_extractor(None) is extract_offline
    assert isinstance(default_extractor(StubLLMClient()), LLMExtractor)


# --- LoCoMo: structural facts, not a quality number ---------------------------------------------------

def locomo_sessions() -> list[tuple[list[dict[str, Any]], float, float, float]]:
    """(messages, session time, the conversation's first and last session times)."""
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} not found (LoCoMo lives in ../shared/data/)")
    sessions = []
    for sample in json.loads(LOCOMO.read_text()):
        conversation = sample["conversation"]
        numbers = [n for n in range(1, 100) if f"session_{n}" in conversation]
        times = [parse_time(conversation[f"session_{n}_date_time"]) or 0.0 for n in numbers]
        for n, when in zip(numbers, times, strict=True):
            messages = [{"role": turn["speaker"], "content": turn["text"]} for turn in conversation[f"session_{n}"]]
            sessions.append((messages, when, min(times), max(times)))
    return sessions


def test_locomo_candidates_point_at_their_words_and_dates() -> None:
    sessions = locomo_sessions()
    total = 0
    for messages, when, first, last in sessions:
        found = run(messages, session_time=when)
        total += len(found)
        for candidate in found:
            assert candidate.category in CATEGORIES and 0 <= candidate.confidence <= 1
            said = {word for i in candidate.sources for word in tokenize(str(messages[i]["content"]))}
            assert set(tokenize(candidate.content)) <= said, (candidate, [messages[i] for i in candidate.sources])
            assert candidate.happened_at is not None
            dated = candidate.happened_at != when
            if not dated:
                continue
            # A date a sentence states: near the conversation (a "last year" or "in 2019" can reach back),
            # never after its last session by more than a year (plans), never in another era.
            assert first - 20 * 366 * DAY <= candidate.happened_at <= last + 366 * DAY, candidate
    assert total > len(sessions)  # the rules find something in most sessions


def test_the_extraction_bench_runs_and_reports_every_category() -> None:
    """bench/extract.py end to end on one round (it measures nothing here)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "extract.py"
    spec = importlib.util.spec_from_file_location("bench_extract", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.run(rounds=1)
    if "skipped" in result:
        pytest.skip(result["skipped"])
    assert len(result["extract_ms"]) == len(result["terms_ms"]) == result["sessions"] > 0
    assert set(result["candidates"]) == set(CATEGORIES) and sum(result["candidates"].values()) > 0
    table = bench.markdown(result)
    assert "`extract_offline`" in table and "| profile |" in table


def test_the_docs_examples_print_what_the_docs_say(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/agent-memory.md (## Extraction, ## Time): each python block, run, prints its
    trailing ``# `` comment lines."""
    blocks = doc_examples("Extraction", "Time")
    assert len(blocks) == 2
    for block in blocks:
        assert prints_its_comments(block, lambda: capsys.readouterr().out)


def test_a_question_is_no_event() -> None:
    """A question asks about a time; it tells nothing that happened."""
    messages = [{"role": "user", "content": "What should I drink tonight? Did you go to Paris yesterday?"}]
    found = extract_offline(messages, ExtractContext("s", 0, 1_700_000_000.0))
    assert [c for c in found if c.category == "events"] == []
    told = extract_offline([{"role": "user", "content": "I went to Paris yesterday."}],
                           ExtractContext("s", 0, 1_700_000_000.0))
    assert [c.category for c in told].count("events") == 1
