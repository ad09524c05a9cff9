"""How the State holds what it replays: one object where many entities need the same value
(issue 29, item 4: memory per entity). The objects are shared, never copied, so the reads
are those of a State that held its own copies; these tests pin the sharing itself."""

from __future__ import annotations

from pathlib import Path

from kwtree import KeywordTree
from kwtree.engine.engine import Engine


def test_infos_linked_to_one_keyword_alone_share_its_tuple_after_reopen(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        topic, other = tree.batch_create_keywords([{"name": "topic"}, {"name": "other"}])
        first, second, both = tree.batch_create_infos(
            [{"content": "one", "keyword_ids": [topic.id]}, {"content": "two", "keyword_ids": [topic.id]},
             {"content": "three", "keyword_ids": [topic.id, other.id]}])
        tree.unlink_info(both.id, other.id)
        tree.link_info(first.id, other.id)
        tree.unlink_info(first.id, other.id)
        linked = {info.id: [k.id for k, _ in tree.get_keywords_of_info(info.id)] for info in (first, second, both)}
    assert linked == {first.id: [topic.id], second.id: [topic.id], both.id: [topic.id]}

    state = Engine(tree_dir, writable=False).state
    held = [state.keywords_by_info[info.id] for info in (first, second, both)]
    assert held == [(topic.id,)] * 3
    assert held[0] is held[1] is held[2] is state.solo_links[topic.id]
    assert held[0][0] is state.keywords[topic.id].id


def test_a_link_holds_its_info_and_keyword_objects_own_id_and_time(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        topic = tree.create_keyword("topic", llm_auto_place=False)
        info = tree.create_info("text", keyword_ids=[topic.id])

    state = Engine(tree_dir, writable=False).state
    link = state.links[(info.id, topic.id)]
    stored = state.infos[info.id]
    assert link.info_id is stored.id and link.keyword_id is state.keywords[topic.id].id
    assert link.created_at is stored.created_at and link.op_id is stored.op_id


def test_the_entities_of_one_batch_hold_one_time_object(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        made = tree.batch_create_keywords([{"name": f"k{i}"} for i in range(3)])
        infos = tree.batch_create_infos([{"content": f"text {i}", "keyword_ids": [made[0].id]} for i in range(3)])

    state = Engine(tree_dir, writable=False).state
    keywords = [state.keywords[k.id] for k in made]
    stored = [state.infos[i.id] for i in infos]
    assert [k.created_at for k in keywords] == [k.created_at for k in made]  # (values as written)
    assert keywords[0].created_at is keywords[1].created_at is keywords[2].created_at is keywords[2].updated_at
    assert stored[0].created_at is stored[1].created_at is stored[2].created_at is stored[2].updated_at
