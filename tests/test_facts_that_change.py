"""Facts that change, second round (issue 26): one clause stating two facts keeps both, so a
later value of either supersedes it; the common ways of telling a job, an employer, a home or
self-employment are read; and a correction ("scratch that, it's the 1st of April") supersedes
the statement it corrects, which stays, marked, for history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from memory_helpers import scope_part, session_turns

from kwtree import CommitOptions, KeywordTree
from kwtree.memory.candidates import ExtractContext
from kwtree.memory.extract import _states, extract_offline
from kwtree.memory.statements import clauses, statements
from kwtree.memory_schema import SUBJECT, SUPERSEDED_BY

SESSION = 1_683_554_160.0  # 2023-05-08


def _open(path: Path) -> KeywordTree:
    return KeywordTree(path, durability="none", embed_async=False)


def _said(tree: KeywordTree, session_id: str, text: str, day: str) -> None:
    tree.commit_session([{"role": "user", "content": text}], session_id=session_id, scope="user:kenji",
                        options=CommitOptions(session_time=day))


def _memories(tree: KeywordTree, attribute: str) -> list[tuple[str, bool]]:
    """(value, superseded) of the scope's memories of ``attribute``, oldest first."""
    return [(str(info.metadata.get("value")), bool(info.metadata.get(SUPERSEDED_BY)))
            for info in tree.memories("user:kenji") if info.metadata.get("attribute") == attribute]


def _turns(tree: KeywordTree, scope: str) -> dict[int, Any]:
    return {info.metadata["turn"]: info for info in session_turns(tree, scope_part(tree, scope, "sessions", "s1").id)}


def test_one_clause_s_job_and_employer_are_both_kept_and_a_new_employer_supersedes_the_old(tmp_path: Path) -> None:
    with _open(tmp_path / "t") as tree:
        _said(tree, "s1", "Hello. I'm a backend engineer at Rakuten, living in a share house in Shinjuku.",
              "2022-04-03")
        assert _memories(tree, "job") == [("backend engineer", False)]
        assert _memories(tree, "employer") == [("Rakuten", False)]
        _said(tree, "s2", "Update: I joined Mercari this month, payments team.", "2023-01-15")
        assert _memories(tree, "employer") == [("Rakuten", True), ("Mercari", False)]
        hits = tree.recall("which company does he work for?", scope="user:kenji", min_score=0, k=3)
        assert "Mercari" in hits[0].info.content


@pytest.mark.parametrize(("text", "expected"), [
    ("i'm a line cook at odd duck and my feet are destroyed", {"job": "line cook", "employer": "odd duck"}),
    ("context: i'm a backend dev at Shopify (checkout team)", {"job": "backend dev", "employer": "Shopify"}),
    ("I'm an architect (senior associate at Bates Morrow)", {"job": "architect"}),
    ("i took a dispatcher job at buckeye freight here in town", {"job": "dispatcher", "employer": "buckeye freight"}),
    ("I took a job as a nurse at St Mary's", {"job": "nurse", "employer": "St Mary's"}),
    ("I teach third grade at Lincoln Elementary", {"job": "teacher", "employer": "Lincoln Elementary"}),
    ("so now I am full freelance", {"employer": "self-employed"}),
    ("i've left monzo and gone contracting", {"employer": "self-employed"}),
    ("I went freelance last spring", {"employer": "self-employed"}),
    ("i left ubisoft in december and founded Fern & Flint, which is me and my laptop", {"employer": "Fern & Flint"}),
    ("i moved into an apartment on state st with two friends", {"home": "state st"}),
    ("we closed on a house in Evanston, three blocks from the lake", {"home": "Evanston"}),
    ("i bought a house in grove city with a fenced yard", {"home": "grove city"}),
    ("Now we live in small flat in Neukölln", {"home": "Neukölln"}),
    ("I live in a studio apartment in Fishtown", {"home": "Fishtown"}),
])
def test_the_common_ways_of_telling_a_job_an_employer_or_a_home_are_read(text: str, expected: dict[str, str]) -> None:
    found = extract_offline([{"role": "user", "content": text}], ExtractContext("s", 0, SESSION))
    told = {str(c.facts["attribute"]): str(c.facts["value"]) for c in found
            if c.category == "profile" and (c.facts or {}).get("attribute") in ("job", "employer", "home")}
    assert told == expected


@pytest.mark.parametrize(("sentence", "expected"), [
    ("i left ubisoft in december and founded Fern & Flint, which is me",
     ["i left ubisoft in december", "i founded Fern & Flint, which is me"]),
    # a piece that leads with its own first-person word is its own clause, never "i my boyfriend ..."
    ("i'm in ann arbor for my phd, and my boyfriend Leo is in são paulo",
     ["i'm in ann arbor for my phd", "my boyfriend Leo is in são paulo"]),
])
def test_a_clause_borrows_the_subject_before_it_only_when_it_has_none(sentence: str, expected: list[str]) -> None:
    assert clauses(sentence, _states) == expected


@pytest.mark.parametrize("text", [
    "I'm a huge fan of the Mets",
    "I'm a member at the climbing gym",
    "I do yoga at the gym on Tuesdays",
    "I bought a house plant in Ikea",
    "I live in VS Code all day",
])
def test_what_only_looks_like_a_job_or_a_home_is_not_one(text: str) -> None:
    assert [s for s in statements(text) if s.about in ("job", "employer", "home")] == []


def _session(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i, text in enumerate(texts)]


CORRECTED = _session(
    "DA approved!! Builder locked in and he starts on site Tuesday the 5th of July.",
    "Great news! Do you want a checklist for the first week?",
    "Correction on the date: the builder just messaged, it's Thursday the 7th, not Tuesday the 5th. Typical.",
)


def test_a_correction_is_a_memory_that_names_the_statement_it_corrects() -> None:
    found = extract_offline(CORRECTED, ExtractContext("s", 0, SESSION))
    corrections = [c for c in found if (c.facts or {}).get("corrects_turn") is not None]
    assert len(corrections) == 1
    assert corrections[0].sources == (2,) and corrections[0].facts["corrects_turn"] == 0
    assert "Tuesday the 5th" in corrections[0].facts["corrects"]


@pytest.mark.parametrize("texts", [
    # "actually" that corrects nothing said before, and a correction of nothing in this session
    _session("I love hiking in the Alps.", "Nice!", "Actually, I also love swimming."),
    _session("Correction: it's Thursday, not Tuesday."),
    # a marker word that does not lead its sentence takes nothing back
    _session("My essay on the French revolution is due Friday.", "Good luck!",
             "I need a correction pass on my essay on the French revolution before Friday."),
    _session("My mom wants to plan the trip to Rome.", "Nice!", "I meant to ask: should my mom book the Rome trip?"),
    _session("Spider-Man has always been a favorite of mine.", "Same!",
             "Spider-Man is the best - I mean, who doesn't love Peter Parker? A favorite of mine forever."),
])
def test_no_correction_without_an_earlier_statement_it_corrects(texts: list[dict[str, str]]) -> None:
    found = extract_offline(texts, ExtractContext("s", 0, SESSION))
    assert not [c for c in found if (c.facts or {}).get("corrects_turn") is not None]


def test_a_correction_supersedes_the_statement_and_wins_recall(tmp_path: Path) -> None:
    with _open(tmp_path / "t") as tree:
        result = tree.commit_session(CORRECTED, session_id="s1", scope="user:ana",
                                     options=CommitOptions(session_time="2022-06-20"))
        assert any(d.action == "supersede" for d in result.decisions)
        turns = _turns(tree, "user:ana")
        assert turns[0].metadata.get(SUPERSEDED_BY) and not turns[2].metadata.get(SUPERSEDED_BY)
        hits = tree.recall("what day did the builder start on site?", scope="user:ana", min_score=0, k=3)
        assert "Thursday the 7th" in hits[0].info.content
        history = tree.recall("what day did the builder start on site?", scope="user:ana", min_score=0, k=10,
                              include_superseded=True)
        assert any("Tuesday the 5th" in hit.info.content for hit in history)


def test_a_correction_of_one_detail_leaves_the_rest_of_the_message_current(tmp_path: Path) -> None:
    chat = _session("news: amy and i are moving in together! we've gone for a two-bed in Headingley, Leeds. "
                    "lease starts 1st March",
                    "Congratulations!",
                    "oh scratch that, the lease starts on the 1st of April not March, amy just read the contract.")
    with _open(tmp_path / "t") as tree:
        tree.commit_session(chat, session_id="s1", scope="user:sam",
                            options=CommitOptions(session_time="2023-02-01"))
        turns = _turns(tree, "user:sam")
        assert not turns[0].metadata.get(SUPERSEDED_BY)  # Leeds is still where he lives
        marked = [info.content for info in tree.memories("user:sam") if info.metadata.get(SUPERSEDED_BY)]
        assert marked and all("March" in text for text in marked)


# --- the time a question asks about ---------------------------------------------------------------


def _two_jobs(tree: KeywordTree) -> None:
    """Two statements that match a question's words alike (the older, shorter one a little better)."""
    keep = CommitOptions(extractor=lambda messages, context: [], session_time="2021-03-01")
    tree.commit_session([{"role": "user", "content": "I coach clients at Equinox."}],
                        session_id="s1", scope="user:dre", options=keep)
    newer = "I coach clients at Forge ATL, my own small studio with forty members."
    tree.commit_session([{"role": "user", "content": newer}], session_id="s2", scope="user:dre",
                        options=CommitOptions(extractor=lambda messages, context: [], session_time="2023-06-01"))


@pytest.mark.parametrize(("question", "first"), [
    ("where does he coach clients these days?", "Forge ATL"),
    ("where is he coaching clients now?", "Forge ATL"),
    ("is he still coaching clients?", "Forge ATL"),
])
def test_a_question_about_now_puts_the_newer_of_two_statements_first(
        tmp_path: Path, question: str, first: str) -> None:
    with _open(tmp_path / "t") as tree:
        _two_jobs(tree)
        plain = tree.recall(question.replace(" these days", "").replace(" now", "").replace(" still", ""),
                            scope="user:dre", min_score=0, k=2)
        assert "Equinox" in plain[0].info.content  # without a time asked about, the words decide
        hits = tree.recall(question, scope="user:dre", min_score=0, k=2)
        assert first in hits[0].info.content


def test_a_question_about_before_does_not_demote_the_superseded_value(tmp_path: Path) -> None:
    with _open(tmp_path / "t") as tree:
        _said(tree, "s1", "I live in Toronto.", "2022-01-10")
        _said(tree, "s2", "Since moving to Lisbon I eat pastries daily.", "2023-09-20")
        hits = tree.recall("which city did she live in before?", scope="user:kenji", min_score=0, k=3)
        assert "Toronto" in hits[0].info.content
        hits = tree.recall("which city does she live in now?", scope="user:kenji", min_score=0, k=3)
        assert "Lisbon" in hits[0].info.content


# --- another person's news -------------------------------------------------------------------------


def test_a_turn_about_another_person_ranks_below_the_user_s_own_fact(tmp_path: Path) -> None:
    chat = _session("I ran my first half marathon in Valencia this spring, 1:58.",
                    "Congratulations!",
                    "Also my colleague Jonas is training for the Berlin marathon. He runs every single morning.")
    with _open(tmp_path / "t") as tree:
        tree.commit_session(chat, session_id="s1", scope="user:mia", options=CommitOptions(session_time="2023-05-01"))
        turns = _turns(tree, "user:mia")
        assert turns[2].metadata.get(SUBJECT) == "colleague Jonas" and not turns[0].metadata.get(SUBJECT)
        assert all(info.metadata.get(SUBJECT) == "colleague Jonas" for info in tree.memories("user:mia")
                   if "Jonas" in info.content)
        hits = tree.recall("has she run a marathon?", scope="user:mia", min_score=0, k=3)
        assert "Valencia" in hits[0].info.content
        hits = tree.recall("is Jonas running a marathon?", scope="user:mia", min_score=0, k=3)
        assert "Jonas" in hits[0].info.content  # a question that names him asks about him


def test_a_candidate_whose_key_names_nothing_is_passed_over_not_committed(tmp_path: Path) -> None:
    # LoCoMo: "I'm passionate about - I'm loving it." once gave a preference keyed "-", and the
    # whole commit_session raised InvalidInputError on the extractor's own candidate
    chat = [{"role": "Nate", "content": "I'm able to make a living at something I'm passionate about - I'm loving it."}]
    found = extract_offline(chat, ExtractContext("s", 0, SESSION))
    assert all(c.key.strip("-–— ") for c in found)
    with _open(tmp_path / "t") as tree:
        result = tree.commit_session(chat, session_id="s1", scope="user:nate")
        assert result.op_id is not None
