"""``State.fork()``: a copy to try operations on, independent of its base both ways (DESIGN
§4: the deciders that compose steps on a fork, such as ``commit_session``, must never change
the tree's state, and the state must never change a fork under its decider)."""

from __future__ import annotations

import io
import pickle
import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwtree import KeywordTree, NotFoundError
from kwtree.engine import checkpoint
from kwtree.engine.lazy_rows import LazyRows
from kwtree.engine.state import State, apply
from kwtree.memory_schema import ABSTRACT_KEY
from kwtree.models import FORGOTTEN_BY, ROOT_ID, Operation, is_forgotten


def _workload(path: Path, seed: int, steps: int) -> KeywordTree:
    """A tree written by random calls that touch every index a fork shares with its base:
    names shared by several keywords, aliases, moves, deletions that re-home children,
    merges, links and unlinks, relations and their removal."""
    rng = random.Random(seed)
    tree = KeywordTree(path, worker=False, durability="none")
    keywords: list[str] = []
    infos: list[str] = []

    def live(ids: list[str], getter: Any) -> list[str]:
        found = []
        for i in ids:
            try:
                getter(i)
            except NotFoundError:  # (deleted)
                continue
            found.append(i)
        return found

    for _ in range(steps):
        alive = live(keywords, tree.get_keyword)
        action = rng.choice(["create", "create", "info", "info", "move", "delete", "merge", "alias", "link",
                             "unlink", "relate", "unrelate", "delete_info", "rename", "forget", "abstracts"]
                            if alive else ["create"])
        try:
            if action == "create":
                parent = rng.choice([None, *alive]) if alive else None
                keywords.append(tree.create_keyword(rng.choice(["Tea", "Jazz", "Rust", "Oslo", "Ana"]) + rng.choice(
                    ["", " x", str(rng.randrange(4))]), parent_id=parent, llm_auto_place=False).id)
            elif action == "info":
                infos.append(tree.create_info(f"memory {rng.random()}", keyword_ids=rng.sample(alive, min(len(alive),
                                                                                                          2))).id)
            elif action == "move":
                tree.move_keyword(rng.choice(alive), rng.choice([ROOT_ID, *alive]))
            elif action == "delete":
                tree.delete_keyword(rng.choice(alive), cascade=rng.random() < 0.5,
                                    info_policy=rng.choice(["reattach", "delete", "keep"]))
            elif action == "merge" and len(alive) > 1:
                tree.merge_keywords(*rng.sample(alive, 2))
            elif action == "alias":
                tree.add_alias(rng.choice(alive), rng.choice(["Tea", "Jazz", "Chai", "Bop"]))
            elif action == "rename":
                kid = rng.choice(alive)
                tree.update_keyword(kid, {"name": rng.choice(["Tea", "Oslo", "Lisbon"])},
                                    version=tree.get_keyword(kid).version)
            elif action in ("link", "unlink", "delete_info") and live(infos, tree.get_info):
                iid = rng.choice(live(infos, tree.get_info))
                if action == "link":
                    tree.link_info(iid, rng.choice(alive), rng.choice(["primary", "related"]))
                elif action == "unlink":
                    tree.unlink_info(iid, rng.choice(alive))
                else:
                    tree.delete_info(iid)
            elif action == "relate" and len(alive) > 1:
                tree.relate(*rng.sample(alive, 2), rng.choice(["see_also", "part_of"]), rng.random())
            elif action == "unrelate" and len(alive) > 1:
                tree.unrelate(*rng.sample(alive, 2))
            elif action == "abstracts":
                built = [item for item in tree.abstracts() if item.built]
                if built and rng.random() < 0.5:
                    tree.undo(built[0].op_id)  # (a first abstract undone: the keyword holds none again)
            elif action == "forget":
                tree.forget(rng.choice([*live(infos, tree.get_info), *alive]))  # (a keyword: its subtree)
        except Exception:  # noqa: BLE001 -- refused calls (a cycle, a duplicate name, no link) write nothing
            pass
    return tree


def _picture(state: State) -> dict[str, Any]:
    """Everything a state holds, containers and their order included."""
    def plain(mapping: dict[Any, Any]) -> list[Any]:
        return [(key, list(value) if type(value) is list else dict(value) if type(value) is dict else value)
                for key, value in mapping.items()]

    return {
        "keywords": list(state.keywords.items()), "infos": list(state.infos.items()),
        "links": list(state.links.items()), "relations": list(state.relations.items()),
        "names": plain(state.names), "children": plain(state.children),
        "infos_by_keyword": plain(state.infos_by_keyword), "keywords_by_info": list(state.keywords_by_info.items()),
        "rel_out": plain(state.rel_out), "rel_in": plain(state.rel_in),
        "forgotten": list(state.forgotten.items()), "abstracted": list(state.abstracted),
        "counters": (state.op_count, state.last_op_id, state.last_timestamp),
    }


def _abstracted_scan(state: State) -> set[str]:
    """What ``State.abstracted`` stands for, read from every keyword."""
    return {kid for kid, keyword in state.keywords.items() if ABSTRACT_KEY in keyword.metadata}


def _forgotten_scan(state: State) -> dict[tuple[str, str], str]:
    """What ``State.forgotten`` stands for, read from every entity."""
    return {(kind, entity.id): str(entity.metadata[FORGOTTEN_BY]) for kind, entities in (
        ("keyword", state.keywords), ("info", state.infos)) for entity in entities.values() if is_forgotten(entity)}


def _replayed(ops: list[Operation]) -> State:
    state = State()
    for op in ops:
        apply(state, op)
    return state


def _checkpointed(state: State) -> State:
    """``state`` written to a state checkpoint's bytes and loaded back from them."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.dispatch_table = checkpoint._reducers()
    pickler.dump(checkpoint._snapshot(state))
    buffer.seek(0)
    loaded = checkpoint._state_of(checkpoint._Unpickler(buffer).load())
    assert type(loaded.keywords) is LazyRows
    return loaded


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), cut=st.floats(0.2, 0.8), sides=st.lists(st.booleans(), min_size=80,
                                                                                  max_size=80),
       loaded=st.booleans())
def test_a_fork_and_its_base_never_change_each_other(tmp_path_factory: Any, seed: int, cut: float,
                                                      sides: list[bool], loaded: bool) -> None:
    """Operations applied to a fork, its base or a fork of the fork show in that one only;
    also when the base was loaded from a state checkpoint (``loaded``), whose entities and
    indexes are made as they are first read."""
    path = tmp_path_factory.mktemp("fork")
    with _workload(path / "t", seed, 90) as tree:
        history = tree.history

        def fresh() -> list[Operation]:  # (read again: apply() stores the entities it is given)
            return history()

        ops = fresh()
        start = max(1, int(len(ops) * cut))
        base = _replayed(fresh()[:start])
        if loaded:
            base = _checkpointed(base)
        fork = base.fork()
        grandchild = None
        to_base, to_fork = [], []
        for index, (op, side) in enumerate(zip(fresh()[start:], sides, strict=False)):
            (to_base if side else to_fork).append(index)
            apply(base if side else fork, op)
            if grandchild is None and index == 5:
                grandchild = fork.fork()  # a fork of a fork, taken mid-way
                grand_ops = list(to_fork)
        later = fresh()[start:]
        for state in (base, fork, grandchild):
            if state is not None:
                assert state.forgotten == _forgotten_scan(state)
                assert set(state.abstracted) == _abstracted_scan(state)
        assert _picture(base) == _picture(_replayed(fresh()[:start] + [later[i] for i in to_base]))
        assert _picture(fork) == _picture(_replayed(fresh()[:start] + [later[i] for i in to_fork]))
        if grandchild is not None:
            assert _picture(grandchild) == _picture(_replayed(fresh()[:start] + [later[i] for i in grand_ops]))
