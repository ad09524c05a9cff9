"""Hostile input to every public call of KeywordTree, its constructor (``as_of`` included),
``import_json``, ``Limits``, ``kwtree.Memory`` and the package's functions: each call either
succeeds or raises a KwtreeError, and a call that raises leaves the log bytes and every public
read (``helpers.snapshot``) exactly as they were.

The methods and their parameters are read from KeywordTree and Memory themselves, so a new
public method or parameter without a strategy here fails
``test_every_public_method_has_a_fuzz_strategy`` (``..._memory_method_...``). Besides the
random draws, every parameter of every method is given each of ``BREAKOUT`` (issue 25, B21:
the values that escaped as TypeError, OverflowError, UnicodeEncodeError and RecursionError).
Each argument is drawn from a plausible strategy (live, deleted and unknown ids of a small
tree, names, texts, JSON) or a hostile one: wrong types, None, huge integers, NaN and
infinities, lone surrogates, NUL and control characters, deep nesting, values over the size
limits. Paths are drawn only inside the test's temporary directory.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import THOROUGH, log_bytes, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

import kwtree
from kwtree import KeywordTree, KwtreeError, Limits, Memory, RelationType
from kwtree.agent.clients import StubLLMClient
from kwtree.caches.embed import HashEmbedder
from kwtree.memory.filters import LOGICAL, OPERATORS
from kwtree.retrieval.recall import RecallWeights

UNKNOWN_ID = "f" * 32
UNKNOWN_OP = "0" * 32
DEFAULT = Limits()

# --- hostile values -------------------------------------------------------------------------

_SPECIAL = ["\ud800", "\udfff", "\0", "\n", "\t", "\r", "\x1b", "\x7f", "\u2028", "\ufeff", "\u0301",
            "北", "😀", " ", "/"]
TEXT = st.lists(st.one_of(st.characters(), st.sampled_from(_SPECIAL)), max_size=12).map("".join)
#: Text a caller could mean (no lone surrogates; control characters still come up).
WORDS = st.text(max_size=12)


def _nested(depth: int, kind: type) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value} if kind is dict else [value]
    return value


# Built once: a few megabytes each would be slow to draw example by example.
OVERSIZED = (
    "x" * (DEFAULT.content_bytes + 1),
    "名" * (DEFAULT.name_bytes // 3 + 1),
    "q" * (DEFAULT.query_bytes + 1),
    "y" * (DEFAULT.label_bytes + 1),
)
DEEP = tuple(_nested(depth, kind) for depth in (64, 65, 300, 900, 5000) for kind in (dict, list))
#: An int beyond the float range: float() and math.isfinite raise OverflowError on it.
HUGE = 10**400
#: One of each kind of value that once escaped as an error that was not a KwtreeError, given
#: to every parameter by test_every_parameter_refuses_what_once_broke_out.
BREAKOUT = {"huge int": HUGE, "lone surrogate": "a\ud800b", "5000-deep dict": _nested(5000, dict),
            "5000-deep list": _nested(5000, list)}


class Opaque:
    """An object that is nothing kwtree knows."""


SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**40, HUGE, -HUGE, -1, 0]),
    st.floats(),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0]),
    st.binary(max_size=6),
    TEXT,
    st.builds(Opaque),
    st.just(frozenset({1, 2})),
)
HOSTILE = st.one_of(
    st.recursive(
        SCALAR,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.tuples(inner, inner),
            st.dictionaries(st.one_of(TEXT, st.integers(), st.none()), inner, max_size=3),
        ),
        max_leaves=6,
    ),
    # By index: hypothesis shows a sampled_from's values in its own reprs, and megabytes slow
    # them down, 5,000 levels break them.
    st.integers(0, len(OVERSIZED) - 1).map(OVERSIZED.__getitem__),
    st.integers(0, len(DEEP) - 1).map(DEEP.__getitem__),
)
#: Hostile values that may be passed where a path is expected: never an absolute path.
PATH_HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.binary(max_size=4), st.builds(Opaque),
    st.sampled_from(["", "\0", "a\0b", "x\ud800y", "n" * 300, "."]),
)
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=6,
)


# --- a small tree to aim at -----------------------------------------------------------------


@dataclasses.dataclass
class World:
    directory: Path
    scratch: Path  # where output paths are drawn (and the working directory)
    keywords: list[str]
    infos: list[str]
    gone_keyword: str
    gone_info: str
    op_ids: list[str]
    snapshot_file: str
    export_file: str
    tree: KeywordTree

    def current(self) -> KeywordTree:
        """The tree, reopened if a fuzzed ``close`` closed it."""
        if "closed" in repr(self.tree):
            self.tree = open_tree(self.directory)
        return self.tree


def open_tree(directory: Path, **options: Any) -> KeywordTree:
    return KeywordTree(directory, durability="none", worker=False, **options)


def build_world(tmp_path: Path) -> World:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    tree = open_tree(tmp_path / "tree")
    a = tree.create_keyword("Alpha", aliases=["A1"], metadata={"m": [1, 2]}, llm_auto_place=False)
    b = tree.create_keyword("Beta", a.id, description="the second", llm_auto_place=False)
    c = tree.create_keyword("Gamma", llm_auto_place=False)
    gone = tree.create_keyword("Gone", llm_auto_place=False)
    tree.delete_keyword(gone.id)
    first = tree.create_info("first memo about alpha", source="chat", keyword_ids=[a.id])
    second = tree.create_info("second memo", keyword_ids=[b.id, c.id], metadata={"k": "v"})
    dead = tree.create_info("dead memo")
    tree.delete_info(dead.id)
    tree.relate(a.id, b.id, "see_also", reason="why")
    snap = tree.snapshot(tmp_path / "world.kwsnap")
    export = tree.export(tmp_path / "world.json")["path"]
    op_ids = [op.op_id for op in tree.history()]
    return World(tree.data_dir, scratch, [a.id, b.id, c.id], [first.id, second.id], gone.id, dead.id, op_ids,
                 snap, export, tree)


def _output_path(world: World) -> st.SearchStrategy[Any]:
    """A path to write to: inside the scratch directory, in a missing directory, the scratch
    directory itself, or a hostile value."""
    name = TEXT.map(lambda text: text.replace("/", "_").replace("..", "_") or "empty")
    return st.one_of(
        name.map(lambda n: str(world.scratch / n)),
        name.map(lambda n: world.scratch / "missing" / n),
        st.just(str(world.scratch)),
        PATH_HOSTILE,
    )


def _garbage_file(world: World) -> str:
    path = world.scratch.parent / "garbage.bin"
    if not path.exists():
        path.write_bytes(b"\0not an archive\xff")
    return str(path)


def plausible(world: World) -> dict[str, st.SearchStrategy[Any]]:
    """Strategies for the parameters of KeywordTree's methods, by parameter name."""
    kw = st.sampled_from([*world.keywords, "root", world.gone_keyword, UNKNOWN_ID])
    info = st.sampled_from([*world.infos, world.gone_info, UNKNOWN_ID])
    name = st.one_of(st.sampled_from(["Alpha", "beta", "Delta", "A1", "新しい", "C++"]), WORDS)
    text = st.one_of(st.sampled_from(["a memo about alpha", "", "  "]), WORDS)
    metadata = st.one_of(st.none(), st.dictionaries(WORDS, JSON, max_size=3))
    patch_value = st.one_of(text, metadata, st.lists(name, max_size=2))
    relation = st.sampled_from([*RelationType, *(r.value for r in RelationType), "PRIMARY", "bogus"])
    step = st.fixed_dictionaries(
        {"op": st.sampled_from(["merge", "move", "group", "bogus"])},
        optional={"src_id": kw, "dst_id": kw, "keyword_id": kw, "new_parent_id": kw, "parent_id": kw,
                  "name": name, "member_ids": st.lists(kw, max_size=2), "reason": text, "description": text},
    )
    return {
        "keyword_id": kw, "new_parent_id": kw, "src_id": kw, "dst_id": kw, "from_id": kw, "to_id": kw,
        "parent_id": st.one_of(st.none(), kw), "scope_id": st.one_of(st.none(), kw),
        "under": st.one_of(st.none(), kw), "info_id": info, "entity_id": st.one_of(st.none(), kw, info),
        "keyword_ids": st.one_of(st.none(), st.lists(st.one_of(kw, info), max_size=3)),
        "name": name, "alias": name, "query": text, "content": text, "source": text, "description": text,
        "reason": text, "created_by": name, "type": st.one_of(st.none(), name),
        "aliases": st.one_of(st.none(), st.lists(name, max_size=3)), "metadata": metadata,
        "patch": st.dictionaries(st.sampled_from(["name", "aliases", "description", "metadata", "content",
                                                  "source", "parent_id"]), patch_value, max_size=3),
        "version": st.one_of(st.none(), st.integers(0, 4)), "relation": st.one_of(st.none(), relation),
        "weight": st.floats(), "cascade": st.booleans(), "force": st.booleans(), "auto_link": st.booleans(),
        "llm_auto_place": st.booleans(), "llm_expand_query": st.booleans(), "keep_history": st.booleans(),
        "info_policy": st.sampled_from(["reattach", "delete", "keep", "other"]),
        "direction": st.sampled_from(["out", "in", "both", "up"]),
        "mode": st.sampled_from(["hybrid", "bm25", "vector", "magic"]),
        "format": st.sampled_from(["json", "markdown", "xml"]),
        "page": st.integers(-1, 3), "size": st.integers(0, 20), "k": st.integers(0, 20),
        "limit": st.one_of(st.none(), st.integers(-1, 5)), "max_tokens": st.integers(0, 3000),
        "timeout": st.one_of(st.none(), st.floats(0, 5)),
        "op_id": st.one_of(st.sampled_from([*world.op_ids, UNKNOWN_OP]),
                           st.lists(st.sampled_from([*world.op_ids, UNKNOWN_OP]), max_size=3)),
        "plan": st.fixed_dictionaries(
            {"steps": st.lists(st.one_of(step, HOSTILE), max_size=3)},
            optional={"planner": st.one_of(text, HOSTILE), "request": HOSTILE, "dropped": HOSTILE,
                      "llm_error": HOSTILE},
        ),
        "path": _output_path(world),
        "scope": st.one_of(st.none(), st.sampled_from(["user:alice", "user:nobody/run:1", "User:x", "user:", "", "a"]),
                           st.lists(st.sampled_from(["user:alice", "agent:coder", "bad"]), max_size=3)),
        "min_score": st.one_of(st.floats(), st.sampled_from([0, 0.35, 1, "0.5", True])),
        "since": st.one_of(st.none(), st.floats(), st.datetimes(),
                           st.sampled_from(["2024-05-01", "2024-05-01T10:00:00+02:00", "yesterday", "2024-13-01"])),
        "until": st.one_of(st.none(), st.floats(), st.datetimes(), st.sampled_from(["2024-05-01", "soon"])),
        "provenance": st.one_of(st.none(), st.sampled_from([*kwtree.PROVENANCES, "admin", "USER", ""]),
                                st.lists(st.sampled_from(["user", "tool", "root", 3]), max_size=3), HOSTILE),
        "include_superseded": st.one_of(st.booleans(), HOSTILE),
    }


def _keyword_specs(world: World) -> st.SearchStrategy[Any]:
    by_name = plausible(world)
    spec = st.fixed_dictionaries(
        {"name": by_name["name"]},
        optional={"aliases": by_name["aliases"], "description": by_name["description"],
                  "metadata": by_name["metadata"], "parent_id": by_name["parent_id"],
                  "parent_ref": st.sampled_from(["r1", "r2"]), "ref": st.sampled_from(["r1", "r2"]),
                  "bogus": st.just(1)},
    )
    return st.lists(st.one_of(spec, HOSTILE), max_size=3)


def _info_specs(world: World) -> st.SearchStrategy[Any]:
    by_name = plausible(world)
    spec = st.fixed_dictionaries(
        {"content": by_name["content"]},
        optional={"source": by_name["source"], "metadata": by_name["metadata"],
                  "keyword_ids": by_name["keyword_ids"], "provenance": by_name["provenance"], "bogus": st.just(1)},
    )
    return st.lists(st.one_of(spec, HOSTILE), max_size=3)


def _outlines(world: World) -> st.SearchStrategy[Any]:
    """Outlines (``load_outline``): keywords with refs and parents, infos and relations naming
    refs (some that no keyword has), each item sometimes hostile or with a field outlines lack."""
    by_name = plausible(world)
    ref = st.one_of(st.sampled_from(["r1", "r2", "r3"]), HOSTILE)
    keyword = st.fixed_dictionaries(
        {"ref": ref, "name": by_name["name"]},
        optional={"parent": ref, "aliases": by_name["aliases"], "description": by_name["description"],
                  "metadata": by_name["metadata"], "bogus": st.just(1)})
    info = st.fixed_dictionaries(
        {"content": by_name["content"]},
        optional={"source": by_name["source"], "metadata": by_name["metadata"],
                  "keywords": st.one_of(st.lists(ref, max_size=2), HOSTILE), "bogus": st.just(1)})
    relation = st.fixed_dictionaries(
        {"from": ref, "to": ref},
        optional={"type": by_name["type"], "weight": by_name["weight"], "reason": by_name["reason"]})
    return st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={
        "keywords": st.lists(st.one_of(keyword, HOSTILE), max_size=3),
        "infos": st.lists(st.one_of(info, HOSTILE), max_size=3),
        "relations": st.lists(st.one_of(relation, HOSTILE), max_size=2),
        "bogus": st.just([])}))


def _patch(world: World, fields: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """A patch of some of ``fields`` (sometimes with a field that is not one of them)."""
    by_name = plausible(world)
    return st.fixed_dictionaries({}, optional={**{field: by_name[field] for field in fields},
                                               "parent_id": by_name["parent_id"]})


def _snapshot_files(world: World) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from([world.snapshot_file, _garbage_file(world), str(world.scratch / "missing.kwsnap"),
                         str(world.scratch)]),
        PATH_HOSTILE,
    )


#: JSON texts nested too deep for orjson (and Python's json) to write.
DEEP_JSON = tuple(opening * depth + "1" + closing * depth
                  for depth in (64, 65, 300, 3000) for opening, closing in (('{"a":', "}"), ("[", "]")))


def _export_files(world: World) -> st.SearchStrategy[Any]:
    """The world's export, or an export with one field replaced by hostile JSON, or not JSON."""
    value = st.one_of(JSON.map(json.dumps), st.sampled_from(DEEP_JSON))
    doc = st.builds(_damaged_export, st.just(world), st.integers(0, 10_000), value)
    return st.one_of(st.just(world.export_file), doc, st.just(_garbage_file(world)), PATH_HOSTILE)


def _damaged_export(world: World, where: int, value: str) -> str:
    """A copy of the world's export with the field number ``where`` (counting every field of
    every entry) replaced by the JSON text ``value``."""
    doc = json.loads(Path(world.export_file).read_text("utf-8"))
    fields = [(entry, key) for section in ("keywords", "infos", "links", "relations") for entry in doc[section]
              for key in entry]
    entry, key = fields[where % len(fields)]
    entry[key] = "__FUZZED__"
    path = world.scratch.parent / f"damaged-{where}.json"
    path.write_text(json.dumps(doc).replace('"__FUZZED__"', value, 1), "utf-8")
    return str(path)


def _broken_progress(report: object) -> None:
    raise RuntimeError("a display that fails")


#: A progress callback: none, one that keeps the reports, one that raises (warned about, ignored).
PROGRESS = st.sampled_from([None, [].append, _broken_progress])


def constructor_strategies(world: World) -> dict[str, st.SearchStrategy[Any]]:
    """Strategies for KeywordTree's constructor arguments, by parameter name."""
    base = world.scratch.parent
    fresh = TEXT.map(lambda text: str(base / "new" / (text.replace("/", "_").replace("..", "_") or "empty")))
    return {
        "data_dir": st.one_of(
            fresh, st.just(str(world.directory)), st.just(world.export_file),
            st.just(world.export_file + "/under-a-file"), st.just(str(base / ("n" * 300))), PATH_HOSTILE,
        ),
        "durability": st.sampled_from(["full", "none", "fast"]),
        "actor": st.one_of(st.just("agent-1"), TEXT),
        "as_of": st.one_of(st.none(), st.sampled_from([*world.op_ids, UNKNOWN_OP]), st.floats(), st.integers(),
                           st.sampled_from([HUGE, -HUGE, 2**63]), TEXT),
        "read_only": st.booleans(),
        "lock_timeout": st.floats(0, 2),
        "segment_bytes": st.one_of(st.none(), st.integers()),
        "llm_client": st.one_of(st.none(), st.builds(StubLLMClient)),
        "mru_capacity": st.integers(-1, 300),
        "max_candidates": st.integers(-1, 60),
        "descend_max_rounds": st.integers(-1, 8),
        "embedder": st.one_of(st.none(), st.builds(HashEmbedder, st.sampled_from([16, 64]))),
        "worker": st.booleans(),
        "embed_async": st.booleans(),
        "recall_weights": st.one_of(st.none(), st.builds(RecallWeights)),
        "limits": st.one_of(st.none(), st.builds(Limits), st.builds(Limits, content_bytes=st.integers(1, 100))),
        "progress": PROGRESS,
        # Options of other branches of issue 13 (used once KeywordTree takes them).
        "on_agent_failure": st.sampled_from(["fallback", "raise", "ignore"]),
        "file_mode": st.one_of(st.none(), st.sampled_from([0o600, 0o640, 0o660, 0o666, 0o644, 0o700, 0o400])),
        # A reachable PostgreSQL log is tests/test_postgres_tree.py's; here the URLs refused unopened.
        "log": st.one_of(st.none(), st.sampled_from(["mysql://h/db", "postgresql://h/db?schema=a-b",
                                                     "postgresql://h/db?tree=", "/var/data", ""])),
        "follow": st.one_of(st.booleans(), st.sampled_from([0, 1, "yes", None])),
    }


def _messages(world: World) -> st.SearchStrategy[Any]:
    message = st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "assistant", "tool"]), WORDS),
         "content": st.one_of(st.sampled_from(["my name is Alpha", "I love tea.", ""]), WORDS, st.none())},
        optional={"ts": st.one_of(st.floats(), st.sampled_from(["2023-05-08", "bogus"]), HOSTILE),
                  "tool_calls": JSON, "name": WORDS, "duration": st.floats()},
    )
    return st.lists(st.one_of(message, HOSTILE), max_size=4)


def _heads() -> st.SearchStrategy[Any]:
    """Recorded heads: a digest (no operation has it), one in capitals, and hostile values."""
    return st.one_of(st.none(), st.sampled_from(["0" * 64, "F" * 64, " " + "a" * 64, "a" * 63]), TEXT, HOSTILE)


def _commit_options(world: World) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), HOSTILE, st.builds(
        kwtree.CommitOptions, keep_turns=st.booleans(), dry_run=st.booleans(),
        dedup=st.sampled_from(["auto", "offline", "llm", "x"]), prefilter_k=st.integers(-1, 10),
        session_time=st.one_of(st.none(), st.floats(), TEXT),
        provenance=st.one_of(st.none(), st.sampled_from(["user", "tool", "boss"]), HOSTILE)))


#: Every public name of KeywordTree -> overrides of the by-name strategies for its parameters.
#: A name missing here fails test_every_public_method_has_a_fuzz_strategy.
FUZZED: dict[str, Any] = {
    **{name: {} for name in (
        "add_alias", "agent_stats", "apply_reorganize_plan", "close", "compact", "context", "create_info",
        "create_keyword", "data_dir", "delete_info", "delete_keyword", "export", "find_keywords", "get_children",
        "file_mode", "get_info", "get_infos_of_keyword", "get_keyword", "get_keywords_of_info", "get_path",
        "embedder", "get_relations",
        "history", "last_op_id", "link_info", "merge_keywords", "move_keyword", "outbox_status", "recall",
        "refresh", "relate", "remove_alias", "reorganize", "repair", "retry_dead", "search", "snapshot",
        "tree_metrics", "undo", "unlink_info", "unrelate", "update_info", "update_keyword", "verify",
        "wait_indexed",
    )},
    "update_keyword": {"patch": lambda world: _patch(world, ("name", "aliases", "description", "metadata"))},
    "abstracts": {"rebuild": lambda world: st.one_of(st.booleans(), HOSTILE)},
    "update_info": {"patch": lambda world: _patch(world, ("content", "source", "metadata", "provenance"))},
    "batch_create_keywords": {"specs": _keyword_specs},
    "batch_create_infos": {"specs": _info_specs},
    "load_outline": {"outline": _outlines},
    "snapshot": {"path": lambda world: st.one_of(st.none(), _output_path(world))},
    "verify": {"head": lambda world: _heads()},
    "forget": {"scope": lambda world: st.one_of(st.none(), st.sampled_from(["user:alice", "user:nobody", "alice", ""]),
                                                TEXT)},
    "restore": {"snapshot": _snapshot_files},
    "import_json": {"path": _export_files, "data_dir": lambda world: constructor_strategies(world)["data_dir"],
                    "options": None},  # options: drawn from the constructor's strategies
    "commit_session": {"messages": _messages, "session_id": lambda world: st.one_of(
                           st.sampled_from(["s1", "S 1", "Alpha"]), WORDS),
                       "scope": lambda world: st.one_of(st.none(), st.sampled_from(
                           ["user:alice", "user:alice/run:1", "agent:x", "bad", "user:", "Alpha"]), TEXT),
                       "options": _commit_options},
    # issue 15: the lifecycle hooks and the reads under kwtree.Memory
    **{name: {} for name in ("assemble", "bootstrap", "memories", "memory_scope", "scope_keyword", "scopes")},
    # issue 27: a keyword by its name or path; listing memories by what they are
    "resolve": {"ref": lambda world: st.one_of(st.sampled_from([*world.keywords, "root", "Alpha", "Alpha/Beta",
                                                                 "root › Alpha", "", "  ", "/"]), TEXT),
                "field": lambda world: st.sampled_from(["keyword_id", "parent_id"]),
                "memories": lambda world: st.booleans()},
    "reindex": {"vectors": lambda world: st.booleans()},
    "list_memories": {
        "category": lambda world: st.one_of(st.none(), st.sampled_from(["profile", "preferences", ""]), TEXT),
        "recorded_since": lambda world: plausible(world)["since"],
        "recorded_until": lambda world: plausible(world)["until"],
        "where": lambda world: st.one_of(st.none(), FILTERS),
        "text": lambda world: st.one_of(st.none(), st.sampled_from(["tea", "", "  "]), TEXT),
        "newest_first": lambda world: st.one_of(st.booleans(), HOSTILE),
        "offset": lambda world: st.one_of(st.integers(-2, 5), HOSTILE),
    },
    **{name: {"messages": _messages, "session_id": lambda world: st.one_of(st.sampled_from(["s1", "Alpha"]), WORDS)}
       for name in ("after_turn", "end_session")},
    "batch_update_infos": {"patches": lambda world: st.one_of(HOSTILE, st.dictionaries(
        st.one_of(st.sampled_from([*world.infos, world.gone_info, UNKNOWN_ID]), TEXT, st.integers()),
        _patch(world, ("content", "source", "metadata", "provenance")), max_size=3))},
}

PUBLIC = sorted(name for name in dir(KeywordTree) if not name.startswith("_"))
#: Calls per public method: the profile's under thorough; 12 by default (25 took 27 s of the suite).
FUZZ_EXAMPLES = settings().max_examples if THOROUGH else 12


def _parameters(name: str, owner: type = KeywordTree) -> list[inspect.Parameter]:
    member = inspect.getattr_static(owner, name)
    if isinstance(member, property):
        return []
    return [p for p in inspect.signature(getattr(owner, name)).parameters.values() if p.name != "self"]


def _strategy(world: World, method: str, parameter: str) -> st.SearchStrategy[Any] | None:
    override = FUZZED.get(method, {}).get(parameter)
    if override is not None:
        return override(world)  # type: ignore[no-any-return]
    return plausible(world).get(parameter)


def test_every_public_method_has_a_fuzz_strategy(tmp_path):
    world = build_world(tmp_path)
    try:
        missing = [name for name in PUBLIC if name not in FUZZED]
        assert not missing, f"public methods without a fuzz strategy: {missing}; add them to FUZZED"
        lacking = [
            f"{name}({p.name})" for name in PUBLIC for p in _parameters(name)
            if p.kind is not p.VAR_KEYWORD and _strategy(world, name, p.name) is None
        ]
        assert not lacking, f"parameters without a fuzz strategy: {lacking}"
        ctor = [p.name for p in inspect.signature(KeywordTree).parameters.values()]
        lacking_ctor = sorted(set(ctor) - set(constructor_strategies(world)))
        assert not lacking_ctor, f"constructor parameters without a fuzz strategy: {lacking_ctor}"
        limits = [f.name for f in dataclasses.fields(Limits)]
        assert limits, "Limits has fields to fuzz"
    finally:
        world.current().close()


def _draw_arguments(data: Any, world: Any, name: str, owner: type = KeywordTree,
                    strategy_of: Callable[[str], st.SearchStrategy[Any] | None] | None = None,
                    ) -> tuple[list[Any], dict[str, Any]]:
    """Arguments for one call of ``owner.name``: each plausible (``strategy_of`` a parameter;
    by default KeywordTree's), except those of a drawn set (none, one, or any) that are
    hostile; a parameter with a default is sometimes left out."""
    parameters = _parameters(name, owner)
    if strategy_of is None:
        strategy_of = functools.partial(_strategy, world, name)
    names = [p.name for p in parameters if p.kind is not p.VAR_KEYWORD]
    choice = st.sampled_from(names) if names else st.nothing()
    hostile = data.draw(st.one_of(st.just(set()), st.sets(choice, min_size=1, max_size=1), st.sets(choice)),
                        label="hostile parameters")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in parameters:
        if p.kind is p.VAR_KEYWORD:
            kwargs.update(_draw_options(data, world))
            continue
        if p.default is not p.empty and p.name not in hostile and data.draw(st.booleans(), label=f"{p.name} left out"):
            continue
        if p.name in hostile:
            strategy = PATH_HOSTILE if "path" in p.name or p.name in ("snapshot", "data_dir") else HOSTILE
        else:
            strategy = strategy_of(p.name)
        assert strategy is not None
        value = data.draw(strategy, label=p.name)
        if p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = value
        else:
            args.append(value)
    return args, kwargs


def _draw_options(data: Any, world: World) -> dict[str, Any]:
    """Constructor options for import_json (sometimes an unknown or a hostile one)."""
    strategies = constructor_strategies(world)
    names = data.draw(st.lists(st.sampled_from([*strategies, "bogus"]), max_size=3, unique=True), label="options")
    options = {"durability": "none", "worker": False}
    for option in names:
        if option != "data_dir":
            options[option] = data.draw(st.one_of(strategies.get(option, HOSTILE), HOSTILE), label=option)
    return options


def _call(world: World, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if name == "import_json":
        return KeywordTree.import_json(*args, **kwargs)
    member = getattr(world.current(), name)
    if isinstance(inspect.getattr_static(KeywordTree, name), property):
        return member
    return member(*args, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("name", PUBLIC)
def test_hostile_arguments_raise_kwtree_errors_and_change_nothing(name, tmp_path, monkeypatch):
    world = build_world(tmp_path)
    monkeypatch.chdir(world.scratch)  # a relative path argument lands here

    @settings(max_examples=FUZZ_EXAMPLES)
    @given(data=st.data())
    def run(data: Any) -> None:
        tree = world.current()
        args, kwargs = _draw_arguments(data, world, name)
        before_log, before = log_bytes(world.directory), snapshot(tree)
        target = args[1] if name == "import_json" and len(args) > 1 else None
        existed = _exists(target)
        try:
            result = _call(world, name, args, kwargs)
        except KwtreeError:
            assert log_bytes(world.directory) == before_log, f"{name} raised but changed the log"
            assert snapshot(world.current()) == before, f"{name} raised but changed what reads return"
            if target is not None and not existed:
                assert not _exists(target), f"a failed import_json left {target!r} behind"
            return
        if isinstance(result, KeywordTree):  # import_json
            result.close()

    try:
        run()
    finally:
        world.current().close()


def _exists(target: Any) -> bool:
    try:
        return isinstance(target, (str, os.PathLike)) and os.path.lexists(target)
    except ValueError:  # a NUL byte
        return False


def draw_arguments(data: Any, parameters: list[inspect.Parameter], strategies: dict[str, Any],
                   path_names: tuple[str, ...]) -> dict[str, Any]:
    """Keyword arguments for ``parameters``, each drawn from its strategy or from the hostile
    values (those for paths where its name is in ``path_names``); one with a default is
    sometimes left out."""
    kwargs: dict[str, Any] = {}
    for p in parameters:
        if p.default is not p.empty and data.draw(st.booleans(), label=f"{p.name} left out"):
            continue
        hostile = PATH_HOSTILE if p.name in path_names else HOSTILE
        kwargs[p.name] = data.draw(st.one_of(strategies[p.name], hostile), label=p.name)
    return kwargs


@pytest.mark.slow
def test_hostile_constructor_arguments_raise_kwtree_errors(tmp_path, monkeypatch):
    world = build_world(tmp_path)
    world.tree.close()
    monkeypatch.chdir(world.scratch)
    strategies = constructor_strategies(world)
    parameters = list(inspect.signature(KeywordTree).parameters.values())

    @given(data=st.data())
    def run(data: Any) -> None:
        kwargs = draw_arguments(data, parameters, strategies, ("data_dir",))
        before_log = log_bytes(world.directory)
        target = kwargs.get("data_dir")
        existed = _exists(target)
        try:
            tree = KeywordTree(**kwargs)
        except KwtreeError:
            assert log_bytes(world.directory) == before_log
            if not existed:
                assert not _exists(target), f"a failed open left {target!r} behind"
            return
        tree.close()

    run()


@given(values=st.dictionaries(st.sampled_from([f.name for f in dataclasses.fields(Limits)]),
                              st.one_of(st.integers(-2, 2**70), HOSTILE), max_size=3))
def test_hostile_limits_raise_kwtree_errors(values):
    try:
        limits = Limits(**values)
    except KwtreeError:
        return
    assert all(type(getattr(limits, key)) is int and getattr(limits, key) >= 1 for key in values)


# --- the package's public functions -------------------------------------------------------

#: Every public function of the kwtree package -> its parameters' strategies (world -> {name: strategy}).
FUNCTIONS: dict[str, Any] = {
    "normalize_name": lambda world: {"text": WORDS},
    "llm_from_env": lambda world: {},  # reads KWTREE_LLM (unset here: offline)
    "verify_directory": lambda world: {"path": st.sampled_from([str(world.directory), str(world.scratch)]),
                                       "head": _heads()},
    "repair_directory": lambda world: {"path": st.sampled_from([str(world.directory), str(world.scratch)]),
                                       "lock_timeout": st.floats(0, 1)},
    "restore": lambda world: {"snapshot": _snapshot_files(world),
                              "data_dir": st.sampled_from([str(world.scratch / "restored"), str(world.directory)]),
                              "lock_timeout": st.floats(0, 1), "progress": PROGRESS},
}
PUBLIC_FUNCTIONS = sorted(name for name in kwtree.__all__ if inspect.isfunction(getattr(kwtree, name)))


def test_every_public_function_has_a_fuzz_strategy(tmp_path):
    world = build_world(tmp_path)
    world.tree.close()
    assert sorted(FUNCTIONS) == PUBLIC_FUNCTIONS, "add a strategy to FUNCTIONS for each public function"
    for name in PUBLIC_FUNCTIONS:
        parameters = inspect.signature(getattr(kwtree, name)).parameters
        assert sorted(parameters) == sorted(FUNCTIONS[name](world)), f"{name}'s parameters and strategies differ"


@pytest.mark.slow
@pytest.mark.parametrize("name", PUBLIC_FUNCTIONS)
def test_hostile_arguments_to_public_functions_raise_kwtree_errors(name, tmp_path, monkeypatch):
    world = build_world(tmp_path)
    world.tree.close()
    monkeypatch.chdir(world.scratch)
    function = getattr(kwtree, name)
    strategies = FUNCTIONS[name](world)
    parameters = list(inspect.signature(function).parameters.values())

    @given(data=st.data())
    def run(data: Any) -> None:
        kwargs = draw_arguments(data, parameters, strategies, ("path", "snapshot", "data_dir"))
        before_log = log_bytes(world.directory)
        try:
            function(**kwargs)
        except KwtreeError:
            assert log_bytes(world.directory) == before_log

    run()


# --- kwtree.Memory --------------------------------------------------------------------------------


@dataclasses.dataclass
class MemoryWorld:
    directory: Path
    memory_ids: list[str]  # live memories
    gone_id: str  # a deleted memory
    op_ids: list[str]
    memory: Memory

    def current(self) -> Memory:
        """The Memory, reopened if a fuzzed ``close`` closed it."""
        if "closed" in repr(self.memory):
            self.memory = open_memory(self.directory)
        return self.memory


def open_memory(directory: Path) -> Memory:
    return Memory(directory, durability="none", worker=False)


def build_memory_world(tmp_path: Path) -> MemoryWorld:
    memory = open_memory(tmp_path / "memory")
    tea = memory.add("I love green tea.", user_id="alice", infer=False)["results"][0]["id"]
    dog = memory.add([{"role": "user", "content": "My dog is called Rex."}], user_id="alice", agent_id="coder",
                     metadata={"topic": "pets"}, infer=False)["results"][0]["id"]
    gone = memory.add("A note for later.", user_id="bob", infer=False)["results"][0]["id"]
    memory.update(tea, "I love green tea with honey.")
    memory.delete(gone)
    op_ids = [op.op_id for op in memory.tree.history()]
    return MemoryWorld(memory.tree.data_dir, [tea, dog], gone, op_ids, memory)


#: A filter in mem0's grammar (kwtree.memory.filters): fields, "*", operators, AND / OR / NOT.
_CONDITION = st.one_of(JSON, st.just("*"),
                       st.dictionaries(st.sampled_from([*OPERATORS, "bogus"]), st.one_of(JSON, HOSTILE),
                                       min_size=1, max_size=2))
FILTERS = st.recursive(
    st.dictionaries(st.one_of(st.sampled_from(["topic", "category", "user_id", *LOGICAL]), TEXT), _CONDITION,
                    max_size=2),
    lambda inner: st.one_of(st.builds(lambda key, parts: {key: parts}, st.sampled_from(["AND", "OR", "NOT"]),
                                      st.lists(inner, max_size=2)),
                            st.builds(lambda part: {"NOT": part}, inner)),
    max_leaves=4,
)


def memory_plausible(world: MemoryWorld) -> dict[str, st.SearchStrategy[Any]]:
    """Strategies for the parameters of Memory's methods, by parameter name."""
    whose = st.one_of(st.none(), st.sampled_from(["alice", "bob", "coder", "42", "User A", "a/b"]), WORDS)
    text = st.one_of(st.sampled_from(["green tea", "I love jazz.", ""]), WORDS)
    op_id = st.sampled_from([*world.op_ids, UNKNOWN_OP])
    message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": text})
    return {
        "messages": st.one_of(text, message, _messages(None)),  # type: ignore[arg-type]  # (it needs no world)
        "user_id": whose, "agent_id": whose, "run_id": whose,
        "metadata": st.one_of(st.none(), st.dictionaries(WORDS, JSON, max_size=3)),
        "infer": st.booleans(), "query": text, "data": text,
        "limit": st.integers(-1, 200),
        "filters": st.one_of(st.none(), FILTERS),
        "threshold": st.one_of(st.none(), st.floats(), st.sampled_from([0, 0.35, 1, HUGE, "0.5"])),
        "include_superseded": st.one_of(st.booleans(), st.sampled_from([None, 1, "yes"])),
        "memory_id": st.sampled_from([*world.memory_ids, world.gone_id, UNKNOWN_ID]),
        "op_id": st.one_of(op_id, st.lists(op_id, max_size=3), st.tuples(op_id)),
        "time_or_op": st.one_of(op_id, st.floats(), st.integers(), st.sampled_from([HUGE, -HUGE])),
    }


#: Every public method of Memory -> overrides of the by-name strategies for its parameters.
#: A name missing here fails test_every_public_memory_method_has_a_fuzz_strategy.
MEMORY_FUZZED: dict[str, dict[str, Any]] = {
    **{name: {} for name in ("add", "as_of", "close", "delete", "delete_all", "forget", "get", "get_all", "history",
                             "llm", "reset", "search", "undo", "update")},
    # mem0's config dicts: one that maps (a new directory beside the world's), and ones refused by name
    "from_config": {"config": lambda world: st.one_of(HOSTILE, st.sampled_from([
        {"vector_store": {"provider": "kwtree", "config": {"path": str(world.directory.parent / "from-config")}},
         "embedder": {"provider": "kwtree", "config": {"model": "hash"}}},
        {"graph_store": {}}, {"vector_store": {"provider": "qdrant"}}, {"vector_store": {"config": {"host": "h"}}},
        {"llm": {"provider": "gemini"}}, {"llm": {"config": {"model": "x"}}}, {"embedder": {"provider": "openai"}},
        {"embedder": {"config": {"model": "bogus"}}}, {"version": ""}, {"path": ""}, {"llm": []}]),
        st.dictionaries(WORDS, JSON, max_size=2))},
}
MEMORY_PUBLIC = sorted(name for name in dir(Memory) if not name.startswith("_"))


def _memory_strategy(world: MemoryWorld, method: str, parameter: str) -> st.SearchStrategy[Any] | None:
    override = MEMORY_FUZZED.get(method, {}).get(parameter)
    if override is not None:
        return override(world)  # type: ignore[no-any-return]
    return memory_plausible(world).get(parameter)


def test_every_public_memory_method_has_a_fuzz_strategy(tmp_path):
    world = build_memory_world(tmp_path)
    try:
        missing = [name for name in MEMORY_PUBLIC if name not in MEMORY_FUZZED]
        assert not missing, f"public Memory methods without a fuzz strategy: {missing}; add them to MEMORY_FUZZED"
        lacking = [f"{name}({p.name})" for name in MEMORY_PUBLIC for p in _parameters(name, Memory)
                   if p.kind is not p.VAR_KEYWORD and _memory_strategy(world, name, p.name) is None]
        assert not lacking, f"Memory parameters without a fuzz strategy: {lacking}"
        ctor = [p.name for p in inspect.signature(Memory).parameters.values() if p.kind is not p.VAR_KEYWORD]
        assert ctor == ["path", "llm", "embedder"], "a new Memory constructor parameter needs a strategy below"
    finally:
        world.current().close()


def _call_memory(world: MemoryWorld, name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    member = getattr(world.current(), name)
    if isinstance(inspect.getattr_static(Memory, name), property):
        return
    result = member(*args, **kwargs)
    if isinstance(result, Memory):  # as_of: a view to close
        result.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", MEMORY_PUBLIC)
def test_hostile_arguments_to_memory_raise_kwtree_errors_and_change_nothing(name, tmp_path):
    world = build_memory_world(tmp_path)

    @given(data=st.data())
    def run(data: Any) -> None:
        memory = world.current()
        args, kwargs = _draw_arguments(data, world, name, Memory, functools.partial(_memory_strategy, world, name))
        before_log, before = log_bytes(world.directory), snapshot(memory.tree)
        try:
            _call_memory(world, name, args, kwargs)
        except KwtreeError:
            assert log_bytes(world.directory) == before_log, f"Memory.{name} raised but changed the log"
            assert snapshot(world.current().tree) == before, f"Memory.{name} raised but changed what reads return"

    try:
        run()
    finally:
        world.current().close()


@pytest.mark.slow
def test_hostile_memory_constructor_arguments_raise_kwtree_errors(tmp_path, monkeypatch):
    """Memory(path, llm, embedder, **options): the options are KeywordTree's (``as_of`` ...)."""
    world = build_world(tmp_path)
    world.tree.close()
    monkeypatch.chdir(world.scratch)
    strategies = constructor_strategies(world)

    @given(data=st.data())
    def run(data: Any) -> None:
        path = data.draw(st.one_of(strategies["data_dir"], PATH_HOSTILE), label="path")
        llm = data.draw(st.one_of(strategies["llm_client"], HOSTILE), label="llm")
        embedder = data.draw(st.one_of(strategies["embedder"], HOSTILE), label="embedder")
        # (An ``embedder`` option beside the argument is Python's TypeError, before kwtree runs.)
        options = {key: value for key, value in _draw_options(data, world).items() if key != "embedder"}
        before_log, existed = log_bytes(world.directory), _exists(path)
        try:
            memory = Memory(path, llm, embedder, **options)
        except KwtreeError:
            assert log_bytes(world.directory) == before_log
            if not existed:
                assert not _exists(path), f"a failed Memory() left {path!r} behind"
            return
        memory.close()

    run()


# --- the values that once broke out, at every parameter ------------------------------------------


def _breakout_calls(data: Any, world: Any, owner: type, name: str,
                    strategy_of: Callable[[str], st.SearchStrategy[Any] | None]) -> list[tuple[str, dict[str, Any]]]:
    """One call of ``owner.name`` per (parameter, BREAKOUT value): that parameter gets the value,
    the others without a default a plausible draw."""
    parameters = [p for p in _parameters(name, owner) if p.kind is not p.VAR_KEYWORD]
    calls = []
    for target in parameters:
        for label, value in BREAKOUT.items():
            kwargs = {}
            for p in parameters:
                if p.name == target.name:
                    kwargs[p.name] = value
                elif p.default is p.empty:
                    strategy = strategy_of(p.name)
                    assert strategy is not None
                    kwargs[p.name] = data.draw(strategy, label=p.name)
            calls.append((f"{name}({target.name}={label})", kwargs))
    return calls


@pytest.mark.slow
@pytest.mark.parametrize(("owner", "name"), [
    *((KeywordTree, name) for name in PUBLIC if name != "import_json"),
    *((Memory, name) for name in MEMORY_PUBLIC),
])
def test_every_parameter_refuses_what_once_broke_out(owner, name, tmp_path, monkeypatch):
    """Issue 25, B21: an int beyond the float range, a lone surrogate and a value nested 5,000
    deep, given to each parameter of each public method, succeed or raise a KwtreeError that
    changed nothing; never OverflowError, UnicodeEncodeError, RecursionError or TypeError."""
    if owner is Memory:
        world: Any = build_memory_world(tmp_path)
        strategy_of = functools.partial(_memory_strategy, world, name)
    else:
        world = build_world(tmp_path)
        monkeypatch.chdir(world.scratch)
        strategy_of = functools.partial(_strategy, world, name)

    @settings(max_examples=1, derandomize=True)
    @given(data=st.data())
    def run(data: Any) -> None:
        for call, kwargs in _breakout_calls(data, world, owner, name, strategy_of):
            target = world.current()
            tree = target.tree if owner is Memory else target
            before_log, before = log_bytes(world.directory), snapshot(tree)
            try:
                result = getattr(target, name)(**kwargs)
            except KwtreeError:
                assert log_bytes(world.directory) == before_log, f"{call} raised but changed the log"
                assert snapshot(tree) == before, f"{call} raised but changed what reads return"
            else:
                if isinstance(result, Memory):
                    result.close()

    try:
        run()
    finally:
        world.current().close()
