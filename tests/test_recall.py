"""Recall, context and the embedding outbox through the public API (DESIGN.md §5, §6).

Real directories, the real tantivy index and hnswlib vector store, the default HashEmbedder
(or a small subclass of it); no mocks. The only waits are ``wait_indexed(LIMIT)``, a worker
waiting out a dead worker's 0.5 s lease, and bounded waits on a child process; nothing
asserts on elapsed time.

- Full text: English words (plural and singular), Chinese and Japanese substrings, and
  read-your-writes for create, update, delete and keyword deletion.
- Filters (``under``, ``relation``), bad arguments (nothing written), and the tree boost.
- Vectors: nothing before indexing, inline embedding, a paraphrase found by vectors alone,
  an updated text's old vector never used, another embedder's vectors kept apart.
- ``context``: the budget, the grouping by keyword path, dedupe, most relevant group first.
- The outbox: a worker process SIGKILLed while it holds its leases, dead letters and retry.
- The CLI: ``recall``, ``context``, ``worker --once`` and ``outbox``.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers import log_bytes
from hypothesis import given
from hypothesis import strategies as st

from kwtree import (
    ROOT_ID,
    InvalidInputError,
    KeywordTree,
    NotFoundError,
    RelationType,
)
from kwtree.caches.embed import HashEmbedder, embed_queries
from kwtree.caches.outbox import Outbox, run_worker
from kwtree.cli.main import main
from kwtree.cli.worker import serve_outbox
from kwtree.memory_schema import INFO_ABSTRACT
from kwtree.models import Hit, info_text
from kwtree.retrieval import recall as recall_module
from kwtree.retrieval.context import estimate_tokens
from kwtree.retrieval.fence import FENCE_CLOSE, FENCE_OPEN, NOTE, memory_line
from kwtree.retrieval.recall import RecallWeights

LIMIT = 30.0  # seconds a wait_indexed may take before the test fails
HANG = 60  # seconds before a stuck child process is reported as a failure


@pytest.fixture
def mem(tree_dir: Path):
    """A tree whose embeddings wait in the outbox (no worker thread: wait_indexed drains it)."""
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    yield tree
    tree.close()


@pytest.fixture
def inline(tree_dir: Path):
    """A tree that embeds each text as it is written (vectors are there when a write returns)."""
    tree = KeywordTree(tree_dir, durability="none", worker=False, embed_async=False)
    yield tree
    tree.close()


def ids(hits: Sequence[Hit]) -> list[str]:
    return [hit.info.id for hit in hits]


def cosine(query: str, text: str, embedder: HashEmbedder | None = None) -> float:
    """The cosine the vector retriever should report for ``text`` against ``query``."""
    embedder = embedder or HashEmbedder()
    return float(embed_queries(embedder, [query])[0] @ embedder.embed([text])[0])


TOPICS = {
    "cats": "Cats purr when they are content and sleep most of the afternoon",
    "rust": "The Rust compiler rejects programs with dangling references",
    "garden": "The gardener planted tomato seedlings in raised beds",
    "bread": "Sourdough bread needs a lively starter and a long proof",
    "jazz": "She practised saxophone scales before the jazz session",
}


# --- full text: English, plurals, CJK ---------------------------------------------------------


@pytest.mark.parametrize(("query", "topic"), [
    ("compiler references", "rust"),
    ("sourdough starter", "bread"),
    ("saxophone", "jazz"),
    ("sleeping cats afternoon", "cats"),
    ("raised beds", "garden"),
])
def test_words_find_their_info_first_in_bm25(mem: KeywordTree, query: str, topic: str) -> None:
    made = {name: mem.create_info(text) for name, text in TOPICS.items()}
    hits = mem.recall(query, mode="bm25")
    assert hits and hits[0].info == made[topic]
    assert [hit.text_rank for hit in hits] == list(range(1, len(hits) + 1))
    assert all(hit.bm25 is not None and hit.bm25 > 0 and hit.vector is None for hit in hits)
    assert hits == sorted(hits, key=lambda hit: -hit.score)


@pytest.mark.parametrize(("text", "query"), [
    ("I adopted two cats", "cat"),
    ("A cat sleeps", "cats"),
    ("Berries are ripe in June", "berry"),
    ("Pack the box", "boxes"),
    ("The compilers disagree", "compiler"),
])
def test_plural_and_singular_find_each_other(mem: KeywordTree, text: str, query: str) -> None:
    info = mem.create_info(text)
    mem.create_info("Nothing about that here")
    assert ids(mem.recall(query, mode="bm25")) == [info.id]


@pytest.mark.parametrize(("text", "query"), [
    ("She painted the sunrise", "painting"),
    ("We are adopting a puppy", "adoption"),
    ("He runs every morning", "running"),
    ("The organizers met", "organized"),
])
def test_inflections_find_each_other_by_their_stem(mem: KeywordTree, text: str, query: str) -> None:
    info = mem.create_info(text)
    mem.create_info("Nothing about that here")
    assert ids(mem.recall(query, mode="bm25")) == [info.id]


def test_pronouns_and_auxiliaries_are_not_evidence(mem: KeywordTree) -> None:
    mem.create_info("She did say they had it")  # nothing but stop words
    assert mem.recall("what did she have", mode="bm25") == []
    may = mem.create_info("The lease ends in May")  # a month, not an auxiliary
    assert ids(mem.recall("may", mode="bm25")) == [may.id]


def test_words_that_appear_nowhere_find_nothing_in_bm25(mem: KeywordTree) -> None:
    for text in TOPICS.values():
        mem.create_info(text)
    assert mem.recall("volcano eruption", mode="bm25") == []
    assert mem.recall("the and of", mode="bm25") == []  # only stop words: no terms at all


@pytest.mark.parametrize(("query", "expected"), [
    ("北京", "我在北京大学读书"),
    ("大学", "我在北京大学读书"),
    ("北京大学", "我在北京大学读书"),
    ("東京", "東京タワーに行った"),
    ("タワー", "東京タワーに行った"),
])
def test_chinese_and_japanese_are_found_by_substrings(mem: KeywordTree, query: str, expected: str) -> None:
    made = {text: mem.create_info(text)
            for text in ("我在北京大学读书", "東京タワーに行った", "I read at a university")}
    assert ids(mem.recall(query, mode="bm25")) == [made[expected].id]


@pytest.mark.parametrize("query", ["上海", "大阪の天気", "南京路", "图书馆"])
def test_unrelated_cjk_text_finds_nothing(mem: KeywordTree, query: str) -> None:
    mem.create_info("我在北京大学读书")
    mem.create_info("東京タワーに行った")
    assert mem.recall(query, mode="bm25") == []


# --- read your writes -------------------------------------------------------------------------


def test_a_new_info_is_recalled_as_soon_as_the_write_returns(mem: KeywordTree) -> None:
    made = []
    for text in TOPICS.values():
        made.append(mem.create_info(text))
        assert mem.recall(text, k=1, mode="bm25")[0].info == made[-1]
        assert mem.recall(text, k=1, mode="hybrid")[0].info == made[-1]
    assert {hit.info.id for hit in mem.recall("the", k=50, mode="bm25")} == set()  # a stop word: no terms
    assert len(mem.recall(" ".join(TOPICS.values()), k=50, mode="bm25")) == len(made)


def test_update_changes_which_words_match_and_delete_removes(mem: KeywordTree) -> None:
    other = mem.create_info("Lunch on Monday with the design team")
    info = mem.create_info("The review meeting is on Monday")
    assert set(ids(mem.recall("monday", mode="bm25"))) == {info.id, other.id}
    mem.update_info(info.id, {"content": "The review meeting moved to Friday"})
    assert ids(mem.recall("monday", mode="bm25")) == [other.id]
    [hit] = mem.recall("friday", mode="bm25")
    assert hit.info.id == info.id and hit.info.content == "The review meeting moved to Friday"
    assert hit.info.version == 2
    mem.delete_info(info.id)
    assert mem.recall("friday", mode="bm25") == []
    assert mem.recall("friday", mode="hybrid") == []
    assert ids(mem.recall("monday", mode="bm25")) == [other.id]


def test_source_is_not_searched_but_is_kept_on_the_hit(mem: KeywordTree) -> None:
    info = mem.create_info("Invoices are retried three times", source="billing-handbook")
    [hit] = mem.recall("invoices", mode="bm25")
    assert hit.info == info and hit.info.source == "billing-handbook"


@pytest.mark.parametrize("policy", ["reattach", "delete", "keep"])
def test_deleting_a_keyword_removes_its_links_from_recall(mem: KeywordTree, policy: str) -> None:
    pets = mem.create_keyword("Pets", ROOT_ID)
    cats = mem.create_keyword("Cats", pets.id)
    info = mem.create_info("Whiskers twitch while dreaming", keyword_ids=[cats.id])
    [hit] = mem.recall("whiskers", mode="bm25")
    assert [(k.keyword.id, [p.id for p in k.path]) for k in hit.keywords] == [(cats.id, [ROOT_ID, pets.id, cats.id])]

    mem.delete_keyword(cats.id, info_policy=policy)
    hits = mem.recall("whiskers", mode="bm25")
    if policy == "delete":
        assert hits == [] and mem.recall("whiskers dreaming", mode="hybrid") == []
        return
    [hit] = hits
    assert hit.info.id == info.id
    linked = [(k.keyword.id, [p.id for p in k.path]) for k in hit.keywords]
    if policy == "reattach":
        assert linked == [(pets.id, [ROOT_ID, pets.id])]
        assert ids(mem.recall("whiskers", under=pets.id, mode="bm25")) == [info.id]
    else:
        assert linked == []
        assert mem.recall("whiskers", under=pets.id, mode="bm25") == []
    with pytest.raises(NotFoundError):
        mem.recall("whiskers", under=cats.id)


def test_unlink_and_relink_change_the_filters_at_once(mem: KeywordTree) -> None:
    a = mem.create_keyword("Alpha", ROOT_ID)
    b = mem.create_keyword("Beta", ROOT_ID)
    info = mem.create_info("Shared note about gliders", keyword_ids=[a.id])
    assert ids(mem.recall("gliders", under=a.id)) == [info.id]
    mem.unlink_info(info.id, a.id)
    assert mem.recall("gliders", under=a.id) == []
    mem.link_info(info.id, b.id, RelationType.RELATED)
    assert ids(mem.recall("gliders", under=b.id, relation="related")) == [info.id]
    mem.link_info(info.id, b.id, RelationType.EXAMPLE)  # relinking changes the type
    assert mem.recall("gliders", under=b.id, relation="related") == []
    assert ids(mem.recall("gliders", under=b.id, relation=RelationType.EXAMPLE)) == [info.id]


# --- filters and bad arguments ---------------------------------------------------------------


@pytest.fixture
def branches(mem: KeywordTree) -> dict[str, str]:
    """Animals (Cats, Dogs) and Food (Fruit); every info mentions "notes"."""
    animals = mem.create_keyword("Animals", ROOT_ID)
    cats = mem.create_keyword("Cats", animals.id)
    dogs = mem.create_keyword("Dogs", animals.id)
    food = mem.create_keyword("Food", ROOT_ID)
    fruit = mem.create_keyword("Fruit", food.id)
    made = {
        "cat_example": mem.create_info("notes: a tabby cat naps", keyword_ids=[cats.id]),
        "dog_related": mem.create_info("notes: a beagle dog howls"),
        "fruit_example": mem.create_info("notes: a ripe mango"),
        "fruit_primary": mem.create_info("notes: apples keep in a cellar", keyword_ids=[fruit.id]),
        "animal_primary": mem.create_info("notes: animals need water", keyword_ids=[animals.id]),
        "loose": mem.create_info("notes: nothing filed here"),
    }
    mem.link_info(made["cat_example"].id, cats.id, RelationType.EXAMPLE)
    mem.link_info(made["dog_related"].id, dogs.id, RelationType.RELATED)
    mem.link_info(made["fruit_example"].id, fruit.id, RelationType.EXAMPLE)
    return {"animals": animals.id, "cats": cats.id, "dogs": dogs.id, "food": food.id, "fruit": fruit.id,
            **{name: info.id for name, info in made.items()}}


@pytest.mark.parametrize(("under", "relation", "expected"), [
    (None, None, {"cat_example", "dog_related", "fruit_example", "fruit_primary", "animal_primary", "loose"}),
    ("animals", None, {"cat_example", "dog_related", "animal_primary"}),
    ("cats", None, {"cat_example"}),
    ("food", None, {"fruit_example", "fruit_primary"}),
    (None, RelationType.EXAMPLE, {"cat_example", "fruit_example"}),
    (None, "related", {"dog_related"}),
    (None, RelationType.PRIMARY, {"fruit_primary", "animal_primary"}),
    ("animals", RelationType.EXAMPLE, {"cat_example"}),
    ("food", RelationType.EXAMPLE, {"fruit_example"}),
    ("dogs", RelationType.EXAMPLE, set()),
    ("food", RelationType.RELATED, set()),
    (ROOT_ID, None, {"cat_example", "dog_related", "fruit_example", "fruit_primary", "animal_primary"}),
])
@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_under_and_relation_filters(mem: KeywordTree, branches: dict[str, str], under: str | None,
                                    relation: RelationType | str | None, expected: set[str], mode: str) -> None:
    scope = branches.get(under, under) if under is not None else None
    hits = mem.recall("notes", k=50, under=scope, relation=relation, mode=mode)
    assert set(ids(hits)) == {branches[name] for name in expected}
    assert len(hits) == len(set(ids(hits)))


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"under": "0123456789abcdef0123456789abcdef"}, NotFoundError),
    ({"mode": "fuzzy"}, InvalidInputError),
    ({"mode": "BM25"}, InvalidInputError),
    ({"k": 0}, InvalidInputError),
    ({"k": -3}, InvalidInputError),
    ({"k": 1.5}, InvalidInputError),
    ({"k": True}, InvalidInputError),
    ({"relation": "cousin"}, InvalidInputError),
    ({"query": ""}, InvalidInputError),
    ({"query": "   \n"}, InvalidInputError),
    ({"query": None}, InvalidInputError),
    ({"query": b"bytes"}, InvalidInputError),
])
def test_bad_recall_arguments_raise_and_write_nothing(mem: KeywordTree, tree_dir: Path, kwargs: dict,
                                                      error: type) -> None:
    mem.create_info("notes worth keeping")
    mem.outbox_status()  # writes queue their embeddings lazily; this puts them in the file
    args = {"query": "notes", **kwargs}
    log_before = log_bytes(tree_dir)
    outbox_before = (tree_dir / "outbox.jsonl").read_bytes()
    with pytest.raises(error):
        mem.recall(args.pop("query"), **args)
    assert log_bytes(tree_dir) == log_before
    assert (tree_dir / "outbox.jsonl").read_bytes() == outbox_before
    assert mem.recall("notes", mode="bm25")  # the tree still works


@pytest.mark.parametrize(("query", "budget"), [("", 100), ("notes", 0), ("notes", -1), ("notes", 2.5)])
def test_bad_context_arguments_raise_and_write_nothing(mem: KeywordTree, tree_dir: Path, query: str,
                                                       budget: object) -> None:
    mem.create_info("notes worth keeping")
    before = log_bytes(tree_dir)
    with pytest.raises(InvalidInputError):
        mem.context(query, max_tokens=budget)  # type: ignore[arg-type]
    assert log_bytes(tree_dir) == before


def test_a_deleted_keyword_is_not_a_scope(mem: KeywordTree) -> None:
    gone = mem.create_keyword("Gone", ROOT_ID)
    mem.delete_keyword(gone.id)
    with pytest.raises(NotFoundError):
        mem.recall("anything", under=gone.id)


# --- the tree boost ---------------------------------------------------------------------------


@pytest.mark.parametrize("named_as", ["python", "Python", "py", "PY"])
@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_an_info_linked_to_a_named_keyword_ranks_above_an_equal_unlinked_one(
        mem: KeywordTree, named_as: str, mode: str) -> None:
    languages = mem.create_keyword("Languages", ROOT_ID)
    python = mem.create_keyword("Python", languages.id, aliases=["py"])
    unlinked = mem.create_info("Tips on packaging tools")
    linked = mem.create_info("Tips on packaging tools", keyword_ids=[python.id])
    assert mem.wait_indexed(LIMIT)
    hits = mem.recall(f"{named_as} packaging tips", mode=mode)
    assert ids(hits)[:2] == [linked.id, unlinked.id]
    top, second = hits[0], hits[1]
    assert top.bm25 == pytest.approx(second.bm25)  # the texts match equally well
    assert top.keyword_score > 0 and second.keyword_score == 0
    assert top.score > second.score
    [link] = top.keywords
    assert link.keyword.id == python.id and link.relation is RelationType.PRIMARY
    assert [k.id for k in link.path] == [ROOT_ID, languages.id, python.id]
    assert second.keywords == []


def test_infos_of_a_named_keyword_join_even_without_matching_words(mem: KeywordTree) -> None:
    coffee = mem.create_keyword("Coffee", ROOT_ID)
    info = mem.create_info("Grind beans just before brewing", keyword_ids=[coffee.id])
    mem.create_info("Tea leaves unfurl in hot water")
    hits = mem.recall("what do I know about coffee", mode="bm25")
    assert ids(hits) == [info.id]
    assert hits[0].bm25 is None and hits[0].keyword_score > 0


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_the_best_match_under_the_named_keyword_comes_first(inline: KeywordTree, mode: str) -> None:
    cats = inline.create_keyword("Cats", ROOT_ID)
    dogs = inline.create_keyword("Dogs", ROOT_ID)
    best = inline.create_info("Cats purr when they are content", keyword_ids=[cats.id])
    inline.create_info("Cats sleep sixteen hours a day", keyword_ids=[cats.id])
    inline.create_info("Kittens chase string", keyword_ids=[cats.id])
    other = inline.create_info("Dogs wag their tails, and cats flick theirs when annoyed", keyword_ids=[dogs.id])
    hits = {hit.info.id: hit for hit in inline.recall("cats purr", mode=mode)}
    assert hits[best.id].text_rank == 1 and hits[other.id].text_rank == 3  # the text matches
    assert hits[best.id].keyword_score > 0  # Cats is named
    assert hits[best.id].score > hits[other.id].score


def test_a_descendant_of_a_named_keyword_is_lifted_too(mem: KeywordTree) -> None:
    python = mem.create_keyword("Python", ROOT_ID)
    poetry = mem.create_keyword("Poetry", python.id)
    unlinked = mem.create_info("Lock files pin versions")
    below = mem.create_info("Lock files pin versions", keyword_ids=[poetry.id])
    hits = mem.recall("python lock files", mode="bm25")
    assert ids(hits)[:2] == [below.id, unlinked.id]
    assert hits[0].keyword_score > 0 and [k.keyword.id for k in hits[0].keywords] == [poetry.id]
    assert [k.id for k in hits[0].keywords[0].path] == [ROOT_ID, python.id, poetry.id]


# --- threads: the infos linked before and after a hit ------------------------------------------

CHAT = [
    "Where did you go on holiday last spring?",
    "To Lisbon: we rode the old trams every day",  # the answer shares no word with the question
    "I have never seen the ocean",
    "The bakery on our street closed down",
]


def chat(tree: KeywordTree, name: str = "session 1") -> list[str]:
    session = tree.create_keyword(name, ROOT_ID, llm_auto_place=False)
    return [tree.create_info(turn, keyword_ids=[session.id]).id for turn in CHAT]


def test_the_reply_to_a_question_joins_through_its_thread(mem: KeywordTree) -> None:
    turns = chat(mem)
    hits = mem.recall("where did you go on holiday", mode="bm25")
    assert ids(hits) == turns[:2]  # not turns[2]: the answer beside it matched nothing itself
    question, answer = hits
    assert question.thread == 0 and question.info_score == pytest.approx(1.0)
    # the question asks ("?"): its reply gains RecallWeights.reply of its score, not thread's
    assert answer.bm25 is None and answer.thread == pytest.approx(0.6) == answer.info_score


def test_the_turn_after_a_statement_gains_the_thread_share(tmp_path: Path) -> None:
    tree = KeywordTree(tmp_path / "t", durability="none", worker=False,
                       recall_weights=RecallWeights(thread=0.3, reply=0.9))
    session = tree.create_keyword("session 1", ROOT_ID, llm_auto_place=False)
    said = ["We went on holiday last spring.", "To Lisbon: we rode the old trams every day",
            "Where did you stay on holiday?", "A small flat by the river"]
    turns = [tree.create_info(turn, keyword_ids=[session.id]).id for turn in said]
    threads = {hit.info.id: hit.thread for hit in tree.recall("holiday", mode="bm25", min_score=0)}
    own = {hit.info.id: hit.info_score - hit.thread for hit in tree.recall("holiday", mode="bm25", min_score=0)}
    tree.close()
    assert threads[turns[1]] == pytest.approx(0.3 * (own[turns[0]] + own[turns[2]]))  # after a statement
    assert threads[turns[3]] == pytest.approx(0.9 * own[turns[2]])  # the reply to a question


@pytest.mark.parametrize("bad", [{"a": 1.5}, {"a": -0.1}, {"thread": -0.3}, {"reply": -1}, {"vector": float("nan")},
                                 {"bm25": float("inf")}, {"feedback": "0.5"}, {"thread": True}])
def test_recall_weights_are_checked(bad: dict) -> None:
    name = next(iter(bad))
    with pytest.raises(InvalidInputError, match=f"RecallWeights.{name} must be"):
        RecallWeights(**bad)


def test_thread_zero_turns_neighbours_off(tmp_path: Path) -> None:
    tree = KeywordTree(tmp_path / "t", durability="none", worker=False, recall_weights=RecallWeights(thread=0))
    turns = chat(tree)
    hits = tree.recall("where did you go on holiday", mode="bm25")
    tree.close()
    assert ids(hits) == turns[:1] and hits[0].thread == 0


def test_a_thread_is_the_most_specific_keyword(mem: KeywordTree) -> None:
    speaker = mem.create_keyword("Alice", ROOT_ID, llm_auto_place=False)
    sessions = [mem.create_keyword(f"session {n}", ROOT_ID, llm_auto_place=False) for n in (1, 2)]
    made: dict[tuple[int, int], str] = {}
    for turn in range(3):  # interleaved: Alice's own list alternates between the sessions
        for n, session in enumerate(sessions):
            text = "Where did you go on holiday?" if (n, turn) == (0, 0) else f"small talk number {n} {turn}"
            made[n, turn] = mem.create_info(text, keyword_ids=[session.id, speaker.id]).id
    threads = {hit.info.id: hit.thread for hit in mem.recall("holiday", mode="bm25")}
    assert threads[made[0, 1]] > 0  # the next turn of session 1
    assert threads.get(made[1, 0], 0.0) == 0  # next in Alice's list, but another session


def test_a_thread_is_a_sequence_of_one_kind(mem: KeywordTree) -> None:
    """A session's summary leads its infos: it is not the previous turn of its first turn
    (else a "?" among its open questions made that turn a reply to it)."""
    session = mem.create_keyword("session 1", ROOT_ID, llm_auto_place=False)
    summary = mem.create_info("Topics: holiday. Open questions: where did you go on holiday?",
                              keyword_ids=[session.id], metadata={"kind": "session_summary"})
    turns = [mem.create_info(turn, keyword_ids=[session.id]).id for turn in CHAT]
    hits = {hit.info.id: hit for hit in mem.recall("where did you go on holiday", mode="bm25", min_score=0)}
    assert hits[summary.id].thread == 0 and hits[turns[0]].thread == 0  # neither is the other's neighbour
    assert hits[turns[1]].thread == pytest.approx(0.6 * hits[turns[0]].info_score)  # the turns' thread holds


def test_a_keyword_above_the_thread_limit_is_no_thread(mem: KeywordTree, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recall_module, "THREAD_LIMIT", len(CHAT) - 1)
    chat(mem)
    assert all(hit.thread == 0 for hit in mem.recall("where did you go on holiday", mode="bm25"))


def test_neighbours_are_live(mem: KeywordTree) -> None:
    turns = chat(mem)
    mem.delete_info(turns[1])
    hits = {hit.info.id: hit for hit in mem.recall("where did you go on holiday", mode="bm25")}
    assert turns[1] not in hits and hits[turns[2]].thread > 0  # the next live turn


def test_neighbours_pass_the_relation_filter(mem: KeywordTree) -> None:
    session = mem.create_keyword("session 1", ROOT_ID, llm_auto_place=False)
    question = mem.create_info(CHAT[0], keyword_ids=[session.id])
    aside = mem.create_info(CHAT[1])
    mem.link_info(aside.id, session.id, RelationType.RELATED)
    answer = mem.create_info(CHAT[2], keyword_ids=[session.id])
    assert ids(mem.recall("holiday", mode="bm25"))[:2] == [question.id, aside.id]
    hits = mem.recall("holiday", mode="bm25", relation="primary")
    assert ids(hits) == [question.id]  # the neighbour is filtered out; the next one is no neighbour
    assert answer.id not in ids(hits)


# --- vectors ----------------------------------------------------------------------------------


def test_vector_recall_before_indexing_is_empty_and_never_raises(mem: KeywordTree) -> None:
    first = mem.create_info("Cats purr when content")
    assert mem.recall("cats purring", mode="vector") == []
    hybrid = mem.recall("cats purr", mode="hybrid")
    assert ids(hybrid) == [first.id] and hybrid[0].vector is None and hybrid[0].bm25 is not None
    assert mem.outbox_status()["pending"] == 1

    assert mem.wait_indexed(LIMIT)
    assert mem.outbox_status()["pending"] == 0
    second = mem.create_info("Cats nap in the sun")
    hits = mem.recall("cats", k=10, mode="vector")
    assert ids(hits) == [first.id]  # only what is embedded; the new one is not there yet
    assert mem.wait_indexed(LIMIT)
    assert set(ids(mem.recall("cats", k=10, mode="vector"))) == {first.id, second.id}


def test_hybrid_after_indexing_uses_both_retrievers(mem: KeywordTree) -> None:
    made = {name: mem.create_info(text) for name, text in TOPICS.items()}
    assert mem.wait_indexed(LIMIT)
    hits = mem.recall("sourdough starter proof", mode="hybrid")
    top = hits[0]
    assert top.info == made["bread"]
    assert top.bm25 is not None and top.vector is not None
    assert top.text_rank == 1 and top.vector_rank == 1
    assert top.info_score == pytest.approx(1.0) and top.score == pytest.approx(0.5)
    assert top.vector == pytest.approx(cosine("sourdough starter proof", TOPICS["bread"]), abs=1e-5)


def test_vector_mode_finds_a_paraphrase_that_shares_no_word(mem: KeywordTree) -> None:
    made = {name: mem.create_info(text) for name, text in TOPICS.items()}
    assert mem.wait_indexed(LIMIT)
    query = "plantation seedbed"  # "planted", "seedlings", "beds": n-grams, not stems
    assert made["garden"].id not in ids(mem.recall(query, mode="bm25"))
    hits = mem.recall(query, mode="vector")
    assert hits[0].info == made["garden"]
    assert hits[0].vector == pytest.approx(cosine(query, TOPICS["garden"]), abs=1e-5)
    assert all(hits[0].vector > hit.vector for hit in hits[1:])


def test_inline_embedding_makes_vectors_available_at_once(inline: KeywordTree, tree_dir: Path) -> None:
    info = inline.create_info("Saxophone reeds wear out")
    [hit] = inline.recall("saxophone reeds", mode="vector")
    assert hit.info == info and hit.vector == pytest.approx(cosine("saxophone reeds", info.content), abs=1e-5)
    status = inline.outbox_status()
    assert (status["pending"], status["leased"], status["failed"], status["dead"]) == (0, 0, 0, 0)


@pytest.mark.parametrize("embed_async", [True, False])
def test_the_vector_of_an_old_text_is_never_returned(tree_dir: Path, embed_async: bool) -> None:
    old, new = "Quantum chromodynamics lecture notes", "Grocery list: eggs, milk and bread"
    with KeywordTree(tree_dir, durability="none", worker=False, embed_async=embed_async) as tree:
        info = tree.create_info(old)
        assert tree.wait_indexed(LIMIT)
        assert tree.recall(old, mode="vector")[0].vector == pytest.approx(1.0, abs=1e-5)
        tree.update_info(info.id, {"content": new})
        if embed_async:  # the new text is not embedded yet, and the old vector must not stand in
            assert tree.recall(old, mode="vector") == []
        assert tree.wait_indexed(LIMIT)
        for hit in tree.recall(old, mode="vector"):
            assert hit.info.content == new
            assert hit.vector == pytest.approx(cosine(old, new), abs=1e-5)
        assert tree.recall(new, mode="vector")[0].vector == pytest.approx(1.0, abs=1e-5)
        tree.delete_info(info.id)
        assert tree.recall(new, mode="vector") == []


def test_a_different_embedder_keeps_its_vectors_apart(tree_dir: Path) -> None:
    small = HashEmbedder(dim=256)
    with KeywordTree(tree_dir, durability="none", worker=False, embed_async=False) as tree:
        apple = tree.create_info("Apple orchards need cross-pollination")
    with KeywordTree(tree_dir, durability="none", worker=False, embed_async=False, embedder=small) as tree:
        assert ids(tree.recall("orchards", mode="bm25")) == [apple.id]
        pear = tree.create_info("Pear trees flower early")
        hits = tree.recall("pear trees", mode="vector")
        assert hits[0].info == pear
        assert hits[0].vector == pytest.approx(cosine("pear trees", pear.content, small), abs=1e-5)
    stores = sorted((tree_dir / "cache" / "vectors").iterdir())
    metas = sorted((orjson.loads((s / "meta.json").read_bytes())["model"],
                    orjson.loads((s / "meta.json").read_bytes())["dim"]) for s in stores)
    assert metas == [("kwtree-hash-v2-256", 256), ("kwtree-hash-v2-512", 512)]
    with KeywordTree(tree_dir, read_only=True) as tree:  # the tree switched: it records the small one
        assert tree.embedder.model == small.model
    with KeywordTree(tree_dir, durability="none", worker=False, embed_async=False, embedder=HashEmbedder()) as tree:
        hits = tree.recall(apple.content, mode="vector")  # switching back re-uses the stored vectors
        assert hits[0].info == apple and hits[0].vector == pytest.approx(1.0, abs=1e-5)


# --- context ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory):
    """A tree of Animals (Cats, Dogs) and Food (Fruit) with English and CJK memories."""
    tree = KeywordTree(tmp_path_factory.mktemp("library") / "tree", durability="none",
                       worker=False, embed_async=False)
    animals = tree.create_keyword("Animals", ROOT_ID)
    cats = tree.create_keyword("Cats", animals.id)
    dogs = tree.create_keyword("Dogs", animals.id)
    fruit = tree.create_keyword("Fruit", tree.create_keyword("Food", ROOT_ID).id)
    for text, keyword, source in [
        ("Cats purr when they are content", cats, "vet"),
        ("Cats  purr when they are CONTENT", cats, ""),  # the same text: shown once
        ("Cats sleep sixteen hours a day", cats, ""),
        ("A cat's whiskers sense air currents around obstacles in the dark", cats, "book"),
        ("Dogs wag their tails when happy, and cats flick theirs when annoyed", dogs, ""),
        ("Dogs need daily walks", dogs, ""),
        ("Mangoes ripen after picking", fruit, "market"),
        ("猫は一日中寝ている", cats, ""),
        ("我家的猫喜欢吃鱼", cats, ""),
    ]:
        tree.create_info(text, source=source, keyword_ids=[keyword.id])
    tree.create_info("Cats were revered in ancient Egypt")  # filed under no keyword
    yield tree
    tree.close()


CATS, DOGS, FRUIT = '## "Animals" › "Cats"', '## "Animals" › "Dogs"', '## "Food" › "Fruit"'


def sections(text: str) -> list[tuple[str, list[str]]]:
    """A context block's sections in order, each a heading and its memory lines (the fence checked)."""
    lines = text.split("\n")
    assert lines[:2] == [FENCE_OPEN, NOTE] and lines[-1] == FENCE_CLOSE
    found: list[tuple[str, list[str]]] = []
    for line in lines[2:-1]:
        if line.startswith("## "):
            found.append((line, []))
        else:
            found[-1][1].append(line)
    return found


def test_context_groups_under_keyword_paths_and_shows_each_text_once(library: KeywordTree) -> None:
    found = sections(library.context("cats purr", max_tokens=1500))
    headings = [heading for heading, _ in found]
    assert len(headings) == len(set(headings))  # one heading per keyword path
    assert {CATS, DOGS, "## (no keyword)"} <= set(headings)
    lines = [line for _, members in found for line in members]
    assert all(line.startswith("- [api, ") for line in lines)  # who said it: the application
    assert sum(" ".join(line.split()).casefold().endswith('] "cats purr when they are content"')
               for line in lines) == 1  # two spellings of one text, shown once
    by_heading = dict(found)
    assert any(line.endswith(', from "book"] "A cat\'s whiskers sense air currents around obstacles in the dark"')
               for line in by_heading[CATS])
    assert any(line.endswith('] "Dogs wag their tails when happy, and cats flick theirs when annoyed"')
               for line in by_heading[DOGS])
    assert any(line.endswith('] "Cats were revered in ancient Egypt"') for line in by_heading["## (no keyword)"])


@pytest.mark.parametrize(("query", "heading"), [
    ("mangoes ripen", FRUIT),
    ("dogs daily walks", DOGS),
    ("whiskers air currents", CATS),
    ("ancient egypt", "## (no keyword)"),
])
def test_context_leads_with_the_group_of_the_best_hit(library: KeywordTree, query: str, heading: str) -> None:
    top = library.recall(query, k=1)[0]
    first_heading, first_lines = sections(library.context(query, max_tokens=1500))[0]
    assert (first_heading, first_lines[0]) == (heading, memory_line(top.info))


@pytest.mark.parametrize(("query", "expected"), [("猫喜欢吃鱼", '] "我家的猫喜欢吃鱼"'),
                                                 ("一日中寝ている", '] "猫は一日中寝ている"')])
def test_context_for_a_cjk_query_leads_with_its_memory(library: KeywordTree, query: str, expected: str) -> None:
    first_heading, first_lines = sections(library.context(query, max_tokens=1500))[0]
    assert first_heading == CATS and first_lines[0].endswith(expected)


def test_a_one_character_cjk_word_is_found_by_full_text(mem: KeywordTree) -> None:
    cat = mem.create_info("我家的猫喜欢吃鱼")
    mem.create_info("今天下雨")
    assert ids(mem.recall("猫", mode="bm25")) == [cat.id]
    mem.create_info("吃饭和鱼")  # both characters of 吃鱼, but not the pair: a longer query matches by pairs
    assert ids(mem.recall("吃鱼", mode="bm25")) == [cat.id]


def test_a_one_character_cjk_name_is_named_only_on_its_own(mem: KeywordTree) -> None:
    cat = mem.create_keyword("猫", ROOT_ID, llm_auto_place=False)
    mem.create_keyword("中", ROOT_ID, llm_auto_place=False)
    kept = mem.create_info("它很可爱", keyword_ids=[cat.id])
    assert mem.recall("猫", mode="bm25")[0].info == kept  # the query names the keyword
    assert all(hit.keyword_score == 0 for hit in mem.recall("中国", mode="bm25"))


@given(budget=st.integers(1, 300), query=st.sampled_from(["cats purr", "dogs walks", "猫", "mango", "whiskers dark"]))
def test_context_never_exceeds_its_budget(library: KeywordTree, budget: int, query: str) -> None:
    text = library.context(query, max_tokens=budget)
    assert estimate_tokens(text) <= budget
    full = library.context(query, max_tokens=100_000)
    kept = [line for line in text.splitlines() if line.startswith("- ")]
    everything = [line for line in full.splitlines() if line.startswith("- ")]
    assert set(kept) <= set(everything)
    for _, members in sections(text) if text else []:  # a heading is never printed without a line
        assert members


@pytest.mark.parametrize("budget", [1, 2, 5])
def test_a_tiny_budget_gives_nothing_rather_than_too_much(library: KeywordTree, budget: int) -> None:
    text = library.context("cats purr", max_tokens=budget)
    assert estimate_tokens(text) <= budget
    assert text == ""  # not even the fence fits


def test_context_of_a_tree_without_infos_is_empty(mem: KeywordTree) -> None:
    mem.create_keyword("Empty", ROOT_ID)
    assert mem.context("anything at all") == ""


def test_context_of_an_unrelated_query_is_empty(inline: KeywordTree) -> None:
    inline.create_info("東京タワーに行った")
    assert inline.recall("quantum chromodynamics") == []  # no shared term, a negative cosine
    assert inline.context("quantum chromodynamics") == ""


# --- the outbox: a crashed worker process, dead letters ----------------------------------------

BLOCKING_WORKER = """
import sys
from pathlib import Path
from kwtree.caches.embed import HashEmbedder
from kwtree.cli.worker import serve_outbox

class BlockingEmbedder(HashEmbedder):
    # Announces its batch, then waits for a line the parent never sends: it is killed here,
    # holding the lease of every item of the batch.
    def embed(self, texts):
        print("embedding", len(texts), flush=True)
        sys.stdin.readline()
        return super().embed(texts)

serve_outbox(Path(sys.argv[1]), BlockingEmbedder(), once=True, lease_seconds=float(sys.argv[2]))
"""


def outbox_rows(tree_dir: Path) -> list[dict]:
    return [orjson.loads(line) for line in (tree_dir / "outbox.jsonl").read_bytes().splitlines() if line.strip()]


def _kill_a_worker_holding_leases(tree_dir: Path, infos: list, lease_seconds: float) -> None:
    """Start a ``kwtree worker`` process with ``lease_seconds`` leases and SIGKILL it inside
    ``embed()``: it holds the lease of every item of ``infos`` and has done none."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(BLOCKING_WORKER), str(tree_dir),
                             str(lease_seconds)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], HANG)
        assert ready, f"the worker process said nothing for {HANG} s"
        line = proc.stdout.readline()
        assert line == f"embedding {len(infos)}\n", line or proc.stderr.read()
        claims = [row for row in outbox_rows(tree_dir) if row["r"] == "claim"]
        assert {row["item"].split("/")[1] for row in claims} == {info.id for info in infos}
        assert len({row["worker"] for row in claims}) == 1
        proc.send_signal(signal.SIGKILL)  # inside embed(): every lease is held, nothing is done
        assert proc.wait(HANG) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(HANG)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            pipe.close()


def _assert_all_embedded(mem: KeywordTree, infos: list) -> None:
    status = mem.outbox_status()
    assert (status["pending"], status["leased"], status["failed"], status["dead"]) == (0, 0, 0, 0)
    assert status["done"] == len(infos) and status["dead_items"] == []
    for info in infos:
        top = mem.recall(info.content, k=1, mode="vector")[0]
        assert top.info == info and top.vector == pytest.approx(1.0, abs=1e-5)


def test_a_worker_process_killed_while_holding_leases_loses_nothing(mem: KeywordTree, tree_dir: Path) -> None:
    infos = [mem.create_info(text) for text in TOPICS.values()]
    assert mem.outbox_status()["pending"] == len(infos)
    _kill_a_worker_holding_leases(tree_dir, infos, 0.5)
    status = mem.outbox_status()
    assert status["done"] == 0 and status["pending"] + status["leased"] == len(infos)
    assert mem.recall("saxophone", mode="vector") == []

    # A second worker takes the work over once the dead worker's leases run out.
    assert serve_outbox(tree_dir, HashEmbedder(), once=True, lease_seconds=0.5) == len(infos)
    _assert_all_embedded(mem, infos)


def test_the_leases_of_a_killed_worker_are_taken_over_at_once_not_when_they_end(
        mem: KeywordTree, tree_dir: Path) -> None:
    """A worker killed an hour before its leases end: the next worker need not wait the hour,
    no process has its pid any more (``kwtree.caches.workers``)."""
    infos = [mem.create_info(text) for text in TOPICS.values()]
    _kill_a_worker_holding_leases(tree_dir, infos, 3600.0)
    status = mem.outbox_status()
    assert (status["pending"], status["leased"]) == (len(infos), 0)  # claimable now
    assert serve_outbox(tree_dir, HashEmbedder(), once=True) == len(infos)
    _assert_all_embedded(mem, infos)


def test_the_leases_of_a_closed_tree_are_taken_over_at_once_when_the_outbox_lost_its_done_rows(
        tree_dir: Path) -> None:
    """A damaged outbox that lost the done rows after a closed tree's claims, and a vector
    file lost with it: the claims look like leases for another minute, but the tree that
    held them (in this very process) is closed, so the next open embeds the texts again at
    once (CI saw a ``wait_indexed(30)`` time out on this)."""
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        infos = [tree.create_info(text) for text in TOPICS.values()]
        assert tree.wait_indexed(HANG)
    rows = (tree_dir / "outbox.jsonl").read_bytes().splitlines(keepends=True)
    kept = [row for row in rows if orjson.loads(row)["r"] != "done"]
    assert len(kept) < len(rows)
    (tree_dir / "outbox.jsonl").write_bytes(b"".join(kept))
    for vectors in (tree_dir / "cache" / "vectors").glob("*/vectors.f32"):
        vectors.unlink()
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        status = tree.outbox_status()
        assert status["leased"] == 0 and status["pending"] == len(infos), status
        assert tree.wait_indexed(HANG)
        _assert_all_embedded(tree, infos)


class PoisonEmbedder(HashEmbedder):
    """Refuses any batch with a text containing POISON (as a remote model might refuse one
    input); ``refused`` is set at the first refusal."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if any("POISON" in text for text in texts):
            self.refused.set()
            raise RuntimeError("the model refused a POISON text")
        return super().embed(texts)


def test_dead_letters_are_listed_and_retry_dead_requeues_them(mem: KeywordTree, tree_dir: Path) -> None:
    # max_attempts is not a KeywordTree or serve_outbox option: drive the tree's outbox file
    # with an Outbox of two attempts and no backoff, and embed with the poisoned model.
    bad = mem.create_info("POISON pill in the text")
    mem.outbox_status()  # writes queue their embeddings lazily; this puts them in the file
    box = Outbox(tree_dir / "outbox.jsonl", max_attempts=2, backoff=0.0)
    embedder = PoisonEmbedder()
    stop = threading.Event()

    def process(items):
        embedder.embed([mem.get_info(item.id).content for item in items])
        return {item.key: None for item in items}

    try:
        run_worker(box, "poisoned", process, stop=stop, on_idle=stop.set)
    finally:
        box.close()
    status = mem.outbox_status()
    assert (status["dead"], status["pending"], status["failed"], status["done"]) == (1, 0, 0, 0)
    [dead] = status["dead_items"]
    assert dead["id"] == bad.id and dead["kind"] == "info" and dead["attempt"] == 2
    assert dead["model"] == HashEmbedder().model
    assert "RuntimeError" in dead["error"] and "POISON" in dead["error"]
    assert mem.wait_indexed(0)  # a dead item is no longer waited for

    assert mem.retry_dead() == 1
    status = mem.outbox_status()
    assert (status["dead"], status["pending"], status["dead_items"]) == (0, 1, [])
    assert mem.retry_dead() == 0
    assert serve_outbox(tree_dir, HashEmbedder(), once=True) == 1  # a healthy model takes it
    assert mem.recall(bad.content, mode="vector")[0].info == bad
    assert mem.outbox_status()["done"] == 1


def test_a_poisoned_text_does_not_fail_the_healthy_texts_of_its_batch(mem: KeywordTree, tree_dir: Path) -> None:
    healthy = mem.create_info("Healthy text about sourdough")
    mem.create_info("POISON pill in the text")
    embedder = PoisonEmbedder()
    serve_outbox(tree_dir, embedder, stop=embedder.refused)  # one batch of both, then it stops
    assert embedder.refused.is_set()
    assert mem.outbox_status()["failed"] == 1  # only the poisoned text
    assert ids(mem.recall(healthy.content, k=1, mode="vector")) == [healthy.id]


# --- the command line ---------------------------------------------------------------------------


@pytest.fixture
def kw(capsys):
    """Run ``kwtree ARGS`` in-process; check the exit code, return (stdout, stderr)."""

    def run(*argv: object, code: int = 0) -> tuple[str, str]:
        rc = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert rc == code, f"kwtree {argv} exited {rc}, expected {code}\nstdout: {out}\nstderr: {err}"
        return out, err

    return run


def test_cli_worker_recall_context_and_outbox(tree_dir: Path, kw) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        fruit = tree.create_keyword("Fruit", tree.create_keyword("Food", ROOT_ID).id)
        apples = tree.create_info("Apples ripen in autumn", source="almanac", keyword_ids=[fruit.id])
        trains = tree.create_info("Trains leave at noon")
        queued = tree.outbox_status()["pending"]
    assert queued == 4  # two infos and two keywords

    out, _ = kw("worker", tree_dir, "--once", "--lease", "5")
    assert out == f"embedded {queued} item(s)\n"
    status = json.loads(kw("outbox", tree_dir, "--durability", "none", "--json")[0])
    assert (status["pending"], status["leased"], status["failed"], status["dead"]) == (0, 0, 0, 0)
    assert status["dead_items"] == []

    out, _ = kw("recall", tree_dir, "apples autumn")
    first = out.splitlines()[0].split("\t")
    assert first[0] == apples.id and first[2] == "Apples ripen in autumn" and first[3] == "[Food › Fruit]"
    hits = json.loads(kw("recall", tree_dir, "apples", "--mode", "vector", "--k", "1", "--json")[0])
    assert [hit["info"]["id"] for hit in hits] == [apples.id]
    assert hits[0]["vector"] == pytest.approx(cosine("apples", apples.content), abs=1e-5)
    assert hits[0]["keywords"][0]["keyword"]["id"] == fruit.id
    hits = json.loads(kw("recall", tree_dir, "noon", "--mode", "bm25", "--json")[0])
    assert [hit["info"]["id"] for hit in hits] == [trains.id]
    hits = json.loads(kw("recall", tree_dir, "apples", "--under", fruit.id, "--relation", "example", "--json")[0])
    assert hits == []

    out, _ = kw("context", tree_dir, "apples", "--max-tokens", "60")
    assert out == "\n".join([FENCE_OPEN, NOTE, '## "Food" › "Fruit"', memory_line(apples), FENCE_CLOSE]) + "\n"
    assert memory_line(apples).endswith(', from "almanac"] "Apples ripen in autumn"')
    assert estimate_tokens(out.rstrip("\n")) <= 60

    _, err = kw("recall", tree_dir, "   ", code=1)
    assert err.startswith("error: ") and "query" in err
    kw("recall", tree_dir, "apples", "--mode", "fuzzy", code=2)
    _, err = kw("recall", tree_dir, "apples", "--under", "0123456789abcdef0123456789abcdef", code=1)
    assert err.startswith("error: ")
    _, err = kw("context", tree_dir, "apples", "--max-tokens", "0", code=1)
    assert err.startswith("error: ")


def test_cli_outbox_lists_dead_items_and_retry_dead_requeues_them(tree_dir: Path, kw) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        bad = tree.create_info("POISON again")
    box = Outbox(tree_dir / "outbox.jsonl", max_attempts=1, backoff=0.0)
    try:
        [item] = box.claim("tester", 10)
        box.failed("tester", [item], "RuntimeError: refused")
    finally:
        box.close()
    # The outbox command opens a writable tree, whose worker thread may take the retried
    # item at once: compare counts that do not depend on it.
    status = json.loads(kw("outbox", tree_dir, "--durability", "none", "--json")[0])
    assert status["dead"] == 1 and status["dead_items"][0]["id"] == bad.id
    assert status["dead_items"][0]["error"] == "RuntimeError: refused"
    status = json.loads(kw("outbox", tree_dir, "--durability", "none", "--retry-dead", "--json")[0])
    assert status["dead"] == 0 and status["dead_items"] == []
    assert status["pending"] + status["leased"] + status["done"] == 1
    out, _ = kw("outbox", tree_dir, "--durability", "none")
    assert "dead" in out


# --- an info's abstract: searched with its content ------------------------------------------------


def test_an_infos_abstract_is_searched_with_its_content(mem: KeywordTree) -> None:
    """The memory pipeline keeps a memory's words verbatim ("I won last week") and says who
    and when in its abstract: a question naming the person or the date finds it there."""
    memory = mem.create_info("Last week I won my second tournament!",
                             metadata={INFO_ABSTRACT: "Nate won his second tournament (2022-05-08)."})
    bare = mem.create_info("Nate likes turtles", metadata={INFO_ABSTRACT: 7})  # not a string: not read
    other = mem.create_info("Joanna won a writing prize")
    assert ids(mem.recall("Nate tournament", mode="bm25"))[:1] == [memory.id]  # "Nate" only in the abstract
    assert ids(mem.recall("turtles", mode="bm25")) == [bare.id]
    assert ids(mem.recall("tournament 2022")) == [memory.id]  # the floor reads the abstract too
    assert ids(mem.recall("2022", mode="bm25")) == [memory.id]
    assert other.id not in ids(mem.recall("Nate tournament"))
    assert info_text(mem.get_info(memory.id)) == "Last week I won my second tournament!\n" \
                                                  "Nate won his second tournament (2022-05-08)."
    mem.update_info(memory.id, {"metadata": {INFO_ABSTRACT: "Nate won again."}})
    assert ids(mem.recall("2022", mode="bm25")) == []  # the index follows the new abstract
    assert not [f for f in mem.verify().findings if "fulltext" in f.code]
