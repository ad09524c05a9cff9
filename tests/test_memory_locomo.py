"""The LoCoMo memory benchmark's pieces, and the extraction fix its measurement led to: an
event's routing key is never a lone word (a bare verb such as "did", or a speaker's label),
which recall would otherwise lift for every question holding that word."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kwtree import CommitOptions, KeywordTree
from kwtree.errors import NotFoundError
from kwtree.memory.candidates import ExtractContext
from kwtree.memory.extract import extract_offline
from kwtree.models import Hit

BENCH = Path(__file__).resolve().parent.parent / "bench"
SESSION = datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()


def events(text: str, role: str = "user") -> list[str]:
    found = extract_offline([{"role": role, "content": text}], ExtractContext("s1", 0, SESSION))
    return [c.key for c in found if c.category == "events"]


def test_an_event_stated_with_a_bare_verb_is_keyed_by_its_sentence_not_the_verb() -> None:
    keys = events("Guess what I did this week!")
    assert keys and all(len(key.split()) >= 2 for key in keys), keys
    assert "did" not in keys


def test_an_event_after_a_speakers_label_is_not_keyed_by_the_label() -> None:
    keys = events("Ann: Last weekend our city held a pride parade!")
    assert keys == ["Last weekend our city held"]


def test_an_event_with_a_phrase_keeps_its_phrase_as_key() -> None:
    assert events("I went to a support group yesterday and it was powerful.") == ["went to a support group"]


def test_a_question_with_a_common_word_does_not_lift_an_unrelated_event(tmp_path: Path) -> None:
    """The defect the LoCoMo measurement showed: events keyed "did" and "Ann" were named by
    every question holding those words and ranked above the turn that answers it."""
    lines = [("Ann", "Last weekend our city held a pride parade!"), ("Bob", "Wow, how was it?"),
             ("Ann", "Guess what I did this week?"), ("Bob", "Tell me!"),
             ("Ann", "My sister moved to Oslo in 2019, so I visited her.")]
    with KeywordTree(tmp_path / "t", durability="none") as tree:
        tree.commit_session([{"role": who, "content": f"{who}: {text}"} for who, text in lines], session_id="s1",
                            scope="user:ann", options=CommitOptions(session_time=SESSION))
        tree.wait_indexed()
        hits = tree.recall("Where did Ann's sister move?", k=3, scope="user:ann", min_score=0)
        assert "Oslo" in hits[0].info.content, [hit.info.content for hit in hits]
        keys = {hit.info.metadata.get("key") for hit in tree.recall("pride parade week", k=20, scope="user:ann",
                                                                        min_score=0)}
        assert "did" not in keys and "Ann" not in keys


def _bench() -> object:
    sys.path.insert(0, str(BENCH))
    try:
        import locomo_memory
    finally:
        sys.path.remove(str(BENCH))
    return locomo_memory


def test_a_memory_hit_stands_for_its_source_turns_and_a_summary_for_none(tmp_path: Path) -> None:
    bench = _bench()
    with KeywordTree(tmp_path / "t", durability="none") as tree:
        result = tree.commit_session([{"role": "Ann", "content": "Ann: I went to a pottery class yesterday."},
                                      {"role": "Bob", "content": "Bob: Nice pottery!"}], session_id="c-s1",
                                     scope="user:c", options=CommitOptions(session_time=SESSION))
        dia = {("c-s1", 0): "D1:1", ("c-s1", 1): "D1:2"}
        turns = bench.Turns(tree, dia)  # type: ignore[attr-defined]
        kinds: dict[str, set[tuple[str, ...]]] = {}
        for entity_id in result.created_ids:
            try:
                info = tree.get_info(entity_id)
            except NotFoundError:
                continue  # a keyword
            hit = Hit(info, 1.0, 1.0, 0.0)
            kind = "turn" if "turn" in info.metadata else "memory" if "sources" in info.metadata else "summary"
            kinds.setdefault(kind, set()).add(turns.of_hit(hit))
            if kind == "memory":
                assert turns.of_hit(hit, memories=False) == ()
        assert kinds["turn"] == {("D1:1",), ("D1:2",)}
        assert ("D1:1",) in kinds["memory"]
        assert kinds["summary"] == {()}
    assert bench.scores([("D1:1",), (), ("D1:2", "D1:3")], ["D1:2", "D1:9"]) == {5: 0.5, 10: 0.5, 25: 0.5}  # type: ignore[attr-defined]


def test_the_locomo_memory_benchmark_runs_on_one_conversation(tmp_path: Path) -> None:
    bench = _bench()
    if not bench.locomo.DATA.exists():  # type: ignore[attr-defined]
        pytest.skip("LoCoMo data not found")
    result = bench.run(work=tmp_path, conversations=1)  # type: ignore[attr-defined]
    assert result["questions"] > 0 and set(result["recall"]) == {"raw", "memory", "memory_turns_only"}
    assert result["recall"]["memory"]["all"]["R@25"] >= result["recall"]["memory_turns_only"]["all"]["R@25"]
    assert "paper: DRAGON" in bench.markdown(result)  # type: ignore[attr-defined]
    assert list(tmp_path.iterdir()) == []
