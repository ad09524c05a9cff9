"""Scopes in reads: recall, context, search and history never return anything outside the
scopes they are given, whatever names, words, links, moves, merges and undos try to leak."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kwtree import KeywordTree
from kwtree.errors import InvalidInputError, KwtreeError, NotFoundError
from kwtree.memory_schema import SCOPE_KEY
from kwtree.models import ROOT_ID, Info, Keyword, Link, Operation, Relation, SearchStatus


def make_scope(tree: KeywordTree, path: str, parent: str = ROOT_ID) -> Keyword:
    return tree.create_keyword(path.rsplit("/", 1)[-1], parent, metadata={SCOPE_KEY: path})


def subtree(tree: KeywordTree, top: str) -> set[str]:
    """Ids of the live keywords under ``top`` (itself included), through public reads."""
    found, stack = set(), [top]
    while stack:
        node = stack.pop()
        found.add(node)
        stack.extend(child.id for child in tree.get_children(node))
    return found


def linked(tree: KeywordTree, info_id: str) -> set[str]:
    return {keyword.id for keyword, _ in tree.get_keywords_of_info(info_id)}


class World:
    """Alice and Bob, each with a ``Coffee`` keyword under ``preferences``, the same words in
    their memories, one info linked into both, and a plain keyword named ``user:alice``."""

    def __init__(self, tree: KeywordTree) -> None:
        self.tree = tree
        self.alice = make_scope(tree, "user:alice")
        self.bob = make_scope(tree, "user:bob")
        self.a_prefs = tree.create_keyword("preferences", self.alice.id, metadata={"branch": "preferences"})
        self.b_prefs = tree.create_keyword("preferences", self.bob.id, metadata={"branch": "preferences"})
        self.a_coffee = tree.create_keyword("Coffee", self.a_prefs.id)
        self.b_coffee = tree.create_keyword("Coffee", self.b_prefs.id)
        self.a_info = tree.create_info("Prefers oat milk in the morning coffee", keyword_ids=[self.a_coffee.id])
        self.b_info = tree.create_info("Prefers whole milk in the morning coffee", keyword_ids=[self.b_coffee.id])
        self.shared = tree.create_info("The office coffee machine makes espresso with milk",
                                       keyword_ids=[self.a_coffee.id, self.b_coffee.id])
        people = tree.create_keyword("People", ROOT_ID)
        self.impostor = tree.create_keyword("user:alice", people.id)  # a name, not a scope marker
        self.fake = tree.create_info("Alice's coffee secret: milk from the impostor keyword",
                                     keyword_ids=[self.impostor.id])
        self.b_tea = tree.create_keyword("Green tea", self.b_prefs.id)
        tree.create_info("Bob brews green tea in the afternoon", keyword_ids=[self.b_tea.id])


@pytest.fixture
def world(tree_dir: Path):
    tree = KeywordTree(tree_dir, durability="none", worker=False, embed_async=False)
    yield World(tree)
    tree.close()


def test_the_same_words_in_two_scopes_are_recalled_only_in_their_own(world: World) -> None:
    tree = world.tree
    everything = {hit.info.id for hit in tree.recall("milk coffee", min_score=0)}
    assert {world.a_info.id, world.b_info.id, world.shared.id, world.fake.id} <= everything
    for scope, own, other in (("user:alice", world.a_info, world.b_info), ("user:bob", world.b_info, world.a_info)):
        hits = tree.recall("milk coffee", scope=scope, min_score=0)
        ids = {hit.info.id for hit in hits}
        assert own.id in ids and world.shared.id in ids
        assert other.id not in ids and world.fake.id not in ids
        holder = world.alice if scope == "user:alice" else world.bob
        inside = subtree(tree, holder.id)
        for hit in hits:
            assert linked(tree, hit.info.id) & inside
            assert hit.keywords and {link.keyword.id for link in hit.keywords} <= inside


def test_an_info_in_two_scopes_shows_each_scope_only_its_keywords(world: World) -> None:
    tree = world.tree
    [mine] = [hit for hit in tree.recall("espresso machine", scope="user:alice") if hit.info.id == world.shared.id]
    assert [link.keyword.id for link in mine.keywords] == [world.a_coffee.id]
    [theirs] = [hit for hit in tree.recall("espresso machine", scope="user:bob") if hit.info.id == world.shared.id]
    assert [link.keyword.id for link in theirs.keywords] == [world.b_coffee.id]
    [both] = [hit for hit in tree.recall("espresso machine", scope=["user:alice", "user:bob"])
              if hit.info.id == world.shared.id]
    assert {link.keyword.id for link in both.keywords} == {world.a_coffee.id, world.b_coffee.id}


def test_a_keyword_named_like_a_scope_is_not_the_scope(world: World) -> None:
    tree = world.tree
    hits = tree.recall("Alice's coffee secret impostor keyword", scope="user:alice", min_score=0)
    assert world.fake.id not in {hit.info.id for hit in hits}
    assert world.fake.id in {hit.info.id for hit in tree.recall("Alice's coffee secret impostor keyword")}
    assert "impostor" not in tree.context("coffee secret impostor", scope="user:alice", min_score=0)


def test_context_in_a_scope_holds_none_of_the_other_scope(world: World) -> None:
    tree = world.tree
    text = tree.context("milk coffee tea", scope="user:alice", min_score=0)
    assert "oat milk" in text
    assert "whole milk" not in text and "green tea" not in text and "impostor" not in text
    assert "whole milk" in tree.context("milk coffee tea", scope="user:bob", min_score=0)


def test_search_finds_only_keywords_inside(world: World) -> None:
    tree = world.tree
    assert tree.search("Coffee", llm_expand_query=False).status is SearchStatus.AMBIGUOUS
    found = tree.search("Coffee", llm_expand_query=False, scope="user:alice")
    assert found.status is SearchStatus.MATCHED and found.node is not None and found.node.id == world.a_coffee.id
    assert {info.id for info in found.infos} == {world.a_info.id, world.shared.id}
    assert tree.search("Green tea", llm_expand_query=False).status is SearchStatus.MATCHED
    miss = tree.search("Green tea", llm_expand_query=False, scope="user:alice")
    assert miss.status is SearchStatus.NOT_FOUND and miss.suggested_parent_id == world.alice.id
    walked = tree.search("Gren tea", scope="user:alice")  # a typo: the offline navigator walks
    assert walked.status is SearchStatus.NOT_FOUND
    assert walked.suggested_parent_id in subtree(tree, world.alice.id)
    shown = str(walked.trace)
    assert world.b_tea.id not in shown and "Green tea" not in shown
    assert tree.search("Gren tea", scope="user:bob").node == tree.get_keyword(world.b_tea.id)


def test_a_scope_that_does_not_exist_yet_holds_nothing(world: World) -> None:
    tree = world.tree
    assert tree.recall("milk coffee", scope="user:carol", min_score=0) == []
    assert tree.context("milk coffee", scope="user:carol", min_score=0) == ""
    result = tree.search("Coffee", scope="user:carol")
    assert result.status is SearchStatus.NOT_FOUND and result.reason == "no_scope"
    assert result.suggested_parent_id is None and result.trace == []
    assert tree.history(scope="user:carol") == []
    assert tree.recall("milk coffee", scope=["user:carol", "user:bob"], min_score=0)  # the existing one counts
    assert tree.recall("milk coffee", scope="user:alice/run:1", min_score=0) == []  # nested, absent


@pytest.mark.parametrize("bad", ["", "alice", "User:alice", "user:", "user: alice", "user:a//run:1", "user:a\n",
                                 5, [], ["user:a", 3], {"user": "a"}, b"user:a"])
def test_a_malformed_scope_is_refused_naming_scope(world: World, bad: object) -> None:
    tree = world.tree
    before = tree.history()
    for call in (lambda: tree.recall("coffee", scope=bad), lambda: tree.context("coffee", scope=bad),
                 lambda: tree.search("coffee", scope=bad), lambda: tree.history(scope=bad)):
        with pytest.raises(InvalidInputError, match="scope"):
            call()
    assert tree.history() == before


def test_a_nested_scope_is_inside_its_parent_scope(world: World) -> None:
    tree = world.tree
    run = make_scope(tree, "user:alice/run:42", world.alice.id)
    note = tree.create_info("During run 42 the coffee milk frother broke", keyword_ids=[run.id])
    assert note.id in {hit.info.id for hit in tree.recall("frother broke", scope="user:alice")}
    assert [hit.info.id for hit in tree.recall("frother broke", scope="user:alice/run:42")] == [note.id]
    assert note.id not in {hit.info.id for hit in tree.recall("frother broke", scope="user:bob", min_score=0)}


def _op(tree: KeywordTree) -> Operation:
    return tree.history(limit=1)[0]


def test_a_keyword_moved_across_scopes_follows_its_new_scope(world: World) -> None:
    tree = world.tree
    tree.move_keyword(world.a_coffee.id, world.bob.id)
    moved = _op(tree)
    assert world.a_info.id not in {hit.info.id for hit in tree.recall("oat milk", scope="user:alice", min_score=0)}
    assert world.a_info.id in {hit.info.id for hit in tree.recall("oat milk", scope="user:bob")}
    assert tree.search("Coffee", llm_expand_query=False, scope="user:alice").status is SearchStatus.NOT_FOUND
    # The move wrote inside both scopes (it left one and entered the other): both histories show it.
    assert moved.op_id in [op.op_id for op in tree.history(scope="user:alice")]
    assert moved.op_id in [op.op_id for op in tree.history(scope="user:bob")]
    # Undo brings it back, and that undo too is in both histories.
    tree.undo(moved.op_id)
    undone = _op(tree)
    assert world.a_info.id in {hit.info.id for hit in tree.recall("oat milk", scope="user:alice")}
    assert world.a_info.id not in {hit.info.id for hit in tree.recall("oat milk", scope="user:bob", min_score=0)}
    assert undone.op_id in [op.op_id for op in tree.history(scope="user:alice")]
    assert undone.op_id in [op.op_id for op in tree.history(scope="user:bob")]


def test_a_merge_across_scopes_shows_each_scope_only_its_side(world: World) -> None:
    tree = world.tree
    tree.merge_keywords(world.a_coffee.id, world.b_coffee.id)
    merge = _op(tree)
    assert world.a_info.id not in {hit.info.id for hit in tree.recall("oat milk", scope="user:alice", min_score=0)}
    assert world.a_info.id in {hit.info.id for hit in tree.recall("oat milk", scope="user:bob")}
    [alice_side] = [op for op in tree.history(scope="user:alice") if op.op_id == merge.op_id]
    [bob_side] = [op for op in tree.history(scope="user:bob") if op.op_id == merge.op_id]
    a_keys = {change.key for change in alice_side.changes}
    b_keys = {change.key for change in bob_side.changes}
    assert world.a_coffee.id in a_keys and world.a_coffee.id not in b_keys  # the source's tombstone
    assert world.b_coffee.id in b_keys and world.b_coffee.id not in a_keys  # the target gains aliases
    assert len(alice_side.changes) + len(bob_side.changes) >= len(merge.changes)
    assert alice_side.audit is None or len(alice_side.changes) == len(merge.changes)
    tree.undo(merge.op_id)
    assert world.a_info.id in {hit.info.id for hit in tree.recall("oat milk", scope="user:alice")}


def test_relations_across_scopes_leak_nothing(world: World) -> None:
    tree = world.tree
    tree.relate(world.a_coffee.id, world.b_tea.id, "related_to")
    across = _op(tree)
    tree.relate(world.a_coffee.id, world.a_prefs.id, "part_of")
    within = _op(tree)
    alice_ops = [op.op_id for op in tree.history(scope="user:alice")]
    assert within.op_id in alice_ops and across.op_id not in alice_ops
    assert "green tea" not in tree.context("coffee related tea", scope="user:alice", min_score=0).casefold()
    assert tree.search("Green tea", llm_expand_query=False, scope="user:alice").status is SearchStatus.NOT_FOUND


def test_history_in_a_scope_holds_only_its_changes(world: World) -> None:
    tree = world.tree
    alice = subtree(tree, world.alice.id)
    ops = tree.history(scope="user:alice")
    assert ops and ops[0].changes[0].key == world.alice.id  # the scope keyword's creation comes first
    for op in ops:
        for change in op.changes:
            entity = change.after
            if isinstance(entity, Keyword):
                assert entity.id in alice
            elif isinstance(entity, Link):
                assert entity.keyword_id in alice
            elif isinstance(entity, Info):
                assert linked(tree, entity.id) & alice
    keys = {change.key for op in ops for change in op.changes}
    assert world.b_info.id not in keys and world.fake.id not in keys and world.impostor.id not in keys
    assert tree.history(scope="user:alice", limit=2) == ops[-2:]
    assert tree.history(world.shared.id, scope="user:bob")  # an entity's history inside a scope


# --- the property: random trees, two scopes, random writes -----------------------------------

WORDS = ["milk", "coffee", "tea", "garden", "piano", "river", "alice", "bob"]
STEP = st.one_of(
    st.tuples(st.just("keyword"), st.integers(0, 99), st.sampled_from(WORDS)),
    st.tuples(st.just("info"), st.lists(st.integers(0, 99), min_size=1, max_size=2),
              st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
    st.tuples(st.just("move"), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("merge"), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("link"), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("relate"), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("undo"), st.integers(0, 99), st.just(0)),
)


def _live(tree: KeywordTree, keyword_id: str) -> bool:
    try:
        tree.get_keyword(keyword_id)
    except NotFoundError:
        return False
    return True


def _inside_at(tree: KeywordTree, holder: str) -> tuple[set[str], dict[str, set[str]]]:
    """The keywords inside the scope now (none once its keyword is gone, merged away or
    deleted), and each live info's linked keywords."""
    keywords = subtree(tree, holder) if _live(tree, holder) else set()
    infos = {}
    for kid in subtree(tree, ROOT_ID):
        for info in tree.get_infos_of_keyword(kid, size=1000):
            infos.setdefault(info.id, set()).add(kid)
    return keywords, infos


def _step(tree: KeywordTree, step: tuple, keywords: list[str], infos: list[str], ops: list[str]) -> None:
    kind, first, second = step
    pick = lambda pool, n: pool[n % len(pool)]  # noqa: E731
    if kind == "keyword":
        keywords.append(tree.create_keyword(f"{second} {len(keywords)}", pick(keywords, first)).id)
    elif kind == "info":
        infos.append(tree.create_info(" ".join(second), keyword_ids=[pick(keywords, n) for n in first]).id)
    elif kind == "move":
        tree.move_keyword(pick(keywords, first), pick(keywords, second))
    elif kind == "merge":
        tree.merge_keywords(pick(keywords, first), pick(keywords, second))
    elif kind == "link" and infos:
        tree.link_info(pick(infos, first), pick(keywords, second))
    elif kind == "relate":
        tree.relate(pick(keywords, first), pick(keywords, second))
    elif kind == "undo" and ops:
        tree.undo(pick(ops, first))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=12))
@example(steps=[("undo", 2, 0), ("undo", 33, 0), ("undo", 1, 0)])  # the last undo left no keyword
def test_every_scoped_read_touches_only_what_is_inside_then(tmp_path: Path, steps: list[tuple]) -> None:
    directory = tmp_path / f"t{len(list(tmp_path.iterdir()))}"
    with KeywordTree(directory, durability="none", worker=False, embed_async=False) as tree:
        alice, bob = make_scope(tree, "user:alice"), make_scope(tree, "user:bob")
        keywords = [alice.id, bob.id, tree.create_keyword("shared", ROOT_ID).id]
        infos: list[str] = []
        ops: list[str] = [op.op_id for op in tree.history()]
        moments = {op: _inside_at(tree, alice.id) for op in ops}  # after each op
        for step in steps:
            was = _inside_at(tree, alice.id)
            try:
                _step(tree, step, keywords, infos, ops)
            except KwtreeError:
                continue
            latest = _op(tree).op_id
            if latest not in moments:  # (recorded before a stop: history() lists this operation too)
                ops.append(latest)
                moments[latest] = _inside_at(tree, alice.id)
                moments[latest + "-before"] = was
            keywords[:] = [kid for kid in keywords if _live(tree, kid)]
            if not keywords:
                break
        inside, links = _inside_at(tree, alice.id)
        for query in ("milk coffee", "tea garden piano", "alice bob river"):
            for hit in tree.recall(query, scope="user:alice", min_score=0):
                assert links.get(hit.info.id, set()) & inside
                assert {link.keyword.id for link in hit.keywords} <= inside
            text = tree.context(query, scope="user:alice", min_score=0)
            for info_id, kids in links.items():
                if not kids & inside:
                    content = tree.get_info(info_id).content
                    assert f"- {content}\n" not in text + "\n" or any(
                        tree.get_info(other).content == content for other, ok in links.items() if ok & inside)
        for word in WORDS:
            for name in {keyword.name for keyword in (tree.get_keyword(kid) for kid in keywords)
                         if keyword.name.startswith(word)}:
                found = tree.search(name, llm_expand_query=False, scope="user:alice")
                assert found.node is None or found.node.id in inside
                assert all(candidate.id in inside for candidate in found.candidates)
        first = ops[0]
        for op in tree.history(scope="user:alice"):
            after = moments[op.op_id]
            before = moments.get(op.op_id + "-before", moments[first] if op.op_id != first else (set(), {}))
            seen = before[0] | after[0]
            for change in op.changes:
                entity = change.after
                if isinstance(entity, Keyword):
                    assert entity.id in seen
                elif isinstance(entity, Link):
                    assert entity.keyword_id in seen
                elif isinstance(entity, Info):
                    assert (before[1].get(entity.id, set()) & before[0]) or (after[1].get(entity.id, set()) & after[0])
                elif isinstance(entity, Relation):
                    assert entity.from_id in seen and entity.to_id in seen


def test_a_commit_never_changes_a_memory_another_scope_also_holds(tmp_path: Path) -> None:
    """A review found a commit into alice's scope superseding and merging into memories that an
    admin had also filed in bob's: bob saw them change."""
    with KeywordTree(tmp_path / "memory", durability="none") as tree:
        bob = tree.create_keyword("user:bob", "root", metadata={"scope": "user:bob"})
        first = tree.commit_session([{"role": "user", "content": "My name is Alice Smith. I prefer green tea."}],
                                    session_id="s1", scope="user:alice")
        shared = [d.info_id for d in first.decisions if d.info_id is not None]
        for info_id in shared:
            tree.link_info(info_id, bob.id)
        held = {info_id: tree.get_info(info_id).content for info_id in shared}
        second = tree.commit_session([{"role": "user", "content": "My name is Alice Jones. I prefer black tea."}],
                                     session_id="s2", scope="user:alice")
        assert {info_id: tree.get_info(info_id).content for info_id in shared} == held
        assert not any(d.action in ("merge", "supersede") for d in second.decisions)
        alone = tree.commit_session([{"role": "user", "content": "My name is Alice Brown."}], session_id="s3",
                                    scope="user:alice")
        assert [d.action for d in alone.decisions if d.category == "profile"] == ["supersede"]  # hers alone



def test_scope_keyword_finds_the_marked_keyword_only(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "memory", durability="none") as tree:
        plain = tree.create_keyword("user:alice", "root")  # a name, not a scope
        assert tree.scope_keyword("user:alice") is None
        tree.commit_session([{"role": "user", "content": "I love tea."}], session_id="s", scope="user:bob/run:1")
        run = tree.scope_keyword("user:bob/run:1")
        assert run is not None and run.metadata[SCOPE_KEY] == "user:bob/run:1" and run.id != plain.id
        assert tree.scope_keyword("user:bob").id == run.parent_id
        with pytest.raises(InvalidInputError, match="scope"):
            tree.scope_keyword("alice")
