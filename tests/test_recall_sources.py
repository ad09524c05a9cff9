"""A memory stands for the turns it came from: recall spends no second place on the same
evidence (kwtree.retrieval.sources)."""

from __future__ import annotations

from pathlib import Path

from kwtree import CommitOptions, KeywordTree
from kwtree.errors import NotFoundError
from kwtree.memory_schema import SOURCES
from kwtree.models import Hit, Info
from kwtree.retrieval.sources import collapse


def _infos(tree: KeywordTree, ids: tuple[str, ...]) -> list[Info]:
    found = []
    for entity_id in ids:
        try:
            found.append(tree.get_info(entity_id))
        except NotFoundError:
            continue  # a keyword
    return found


def test_a_memory_and_its_source_turn_take_one_place_between_them(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "t", durability="none") as tree:
        result = tree.commit_session([{"role": "user", "content": "I went to a pottery class yesterday."},
                                      {"role": "assistant", "content": "How was the pottery?"},
                                      {"role": "user", "content": "My sister Ann lives in Oslo."}],
                                     session_id="s1", scope="user:bo", options=CommitOptions(session_time=1683554160.0))
        tree.wait_indexed()
        made = _infos(tree, result.created_ids)
        turn = next(info for info in made if info.metadata.get("turn") == 0)
        memory = next(info for info in made if turn.id in info.metadata.get(SOURCES, ()))
        ids = [hit.info.id for hit in tree.recall("pottery class", k=10, scope="user:bo", min_score=0)]
        assert (turn.id in ids) != (memory.id in ids), ids
        # the other turns still come: the places freed go to other evidence
        assert len(ids) >= 3


def test_collapse_keeps_what_adds_evidence_and_stops_at_k(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "t", durability="none") as tree:
        t1, t2 = tree.create_info("kiwi one"), tree.create_info("kiwi two")
        both = tree.create_info("kiwi both", metadata={SOURCES: [t1.id, t2.id]})
        only_first = tree.create_info("kiwi first", metadata={SOURCES: [t1.id]})
        empty = tree.create_info("kiwi empty", metadata={SOURCES: []})
        hits = {info.id: Hit(tree.get_info(info.id), 1.0, 1.0, 0.0) for info in (t1, t2, both, only_first, empty)}
        order = [hits[i] for i in (t1.id, only_first.id, both.id, t2.id, empty.id)]
        kept = [hit.info.id for hit in collapse(order, 10)]
        # the best memory drawn from t1 (only_first) takes t1's place; both adds t2, so t2
        # itself then adds nothing; a memory with no sources stands for itself
        assert kept == [only_first.id, both.id, empty.id]
        assert [hit.info.id for hit in collapse(order, 2)] == [only_first.id, both.id]
        reordered = [hits[i] for i in (both.id, t1.id, t2.id, only_first.id)]
        assert [hit.info.id for hit in collapse(reordered, 10)] == [both.id]


def test_a_tree_without_sources_ranks_as_before(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "t", durability="none") as tree:
        for number in range(30):
            tree.create_info(f"note {number} about the garden and the roses")
        hits = tree.recall("garden roses", k=10, min_score=0)
        assert len(hits) == 10
        assert collapse(hits, 10) == hits
