"""Property tests of the DESIGN §4 invariants over random operation sequences.

* ``KwtreeMachine`` (a hypothesis state machine) drives every public write with valid and
  invalid arguments and checks, as it goes:
  - failed calls change nothing (log bytes and every public read), no-op writes write nothing;
  - §4.1 reopen: a fresh read-only tree answers every public read the same way;
  - §4.5 time travel: ``as_of=<op id>`` and ``as_of=<timestamp>`` give the recorded states;
  - §4.6 undo: undoing the newest operation restores the state before it (bookkeeping and
    arrival order aside), undo of an operation a later one overwrote refuses with exactly
    those conflicts, and a (forced) undo puts back every before-image (it may refuse only a
    restore that would be inconsistent);
  - §4.2 atomicity: a copy of the log truncated at a drawn byte offset opens as exactly the
    recorded state after the longest prefix of whole operations;
  - structure: the live tree is acyclic, everything live is reachable from the root, levels
    and paths agree.
* Focused properties: ``normalize_name`` against a reference implementation; merged
  histories (DESIGN §3 / §4.3, Kleppmann rules) replay to one state whatever the order of
  the merged operations; truncation followed by a new write; regression tests for two undo
  bugs the machine found (both fixed).

Every directory is real (``tempfile``), every tree a real KeywordTree with durability="none".
"""

from __future__ import annotations

import dataclasses
import shutil
import string
import tempfile
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import THOROUGH, copy_tree_dir, log_bytes, snapshot
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kwtree import (
    ROOT_ID,
    CycleError,
    DuplicateKeywordError,
    HasChildrenError,
    Info,
    InvalidInputError,
    Keyword,
    KeywordTree,
    KwtreeError,
    Link,
    NotFoundError,
    Operation,
    ReadOnlyError,
    Relation,
    RelationType,
    UndoConflictError,
    VersionConflictError,
)
from kwtree.engine import checkpoint
from kwtree.normalize import normalize_name
from kwtree.testing import (
    ACTIONS,
    NAMES,
    UNKNOWN_ID,
    LoggedOperation,
    Step,
    apply_step,
    assert_merge_converges,
    assert_replay_equivalent,
    assert_tree_shape,
    log_operations,
    write_log,
)

# --- vocabulary -------------------------------------------------------------------------------

#: NAMES (kwtree.testing) collide after normalisation; these are refused.
BAD_NAMES = ["", "   ", "...", "a\tb"]


def rarely(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``good``, sometimes (1 in 6) ``bad``: enough valid calls to grow a real tree."""
    return st.one_of(good, good, good, good, good, bad)


NAME = rarely(st.sampled_from(NAMES), st.sampled_from(BAD_NAMES))
DESCRIPTION = rarely(st.sampled_from(["", "a description", "北京 notes"]), st.just(None))
METADATA = rarely(
    st.none() | st.dictionaries(st.sampled_from(["k", "n"]),
                                st.one_of(st.integers(-2, 2), st.sampled_from(["x", ""]), st.booleans()), max_size=2),
    st.sampled_from([{"bad": float("nan")}, {1: "not a string key"}, ["not", "a", "dict"]]),
)
CONTENT = rarely(st.sampled_from(["a memory", "北京 memo", "C++ tip"]), st.sampled_from(["", "   ", None]))
SOURCE = st.sampled_from(["", "chat", "doc"])
REL_TYPE = rarely(st.sampled_from(["related_to", "part_of", " see_also "]), st.sampled_from(["", "  ", None]))
INFO_RELATION = rarely(st.sampled_from([*RelationType, "example", "source"]), st.just("bogus"))
WEIGHT = rarely(st.sampled_from([1.0, 0.5, 2]), st.sampled_from([float("nan"), True, "1"]))

#: a malformed op id; well-formed op ids before and after every operation (UNKNOWN_ID, an id no
#: entity has, comes from kwtree.testing)
NOT_AN_OP = "not-an-op-id"
EARLY_OP = "0" * 32  # a well-formed op id before every operation
LATE_OP = "f" * 32  # a well-formed op id after every operation


# --- reading the public state -----------------------------------------------------------------


def _error(call: Callable[..., Any], *args: Any) -> KwtreeError | None:
    try:
        call(*args)
    except KwtreeError as exc:
        return exc
    return None


def is_live_keyword(tree: KeywordTree, kid: str) -> bool:
    err = _error(tree.get_keyword, kid)
    assert err is None or isinstance(err, (NotFoundError, InvalidInputError)), err  # unknown / malformed id
    return err is None


def is_live_info(tree: KeywordTree, iid: str) -> bool:
    err = _error(tree.get_info, iid)
    assert err is None or isinstance(err, (NotFoundError, InvalidInputError)), err
    return err is None


def live_keyword_ids(tree: KeywordTree) -> list[str]:
    """Live keywords reachable from the root, breadth first, children in arrival order: an
    order that does not depend on the random ids, so hypothesis can replay its choices."""
    found, queue = [ROOT_ID], [ROOT_ID]
    while queue:
        for child in tree.get_children(queue.pop(0)):
            found.append(child.id)
            queue.append(child.id)
    return found


def subtree_ids(tree: KeywordTree, kid: str) -> list[str]:
    if not is_live_keyword(tree, kid):
        return []
    found, stack = [kid], [kid]
    while stack:
        for child in tree.get_children(stack.pop()):
            found.append(child.id)
            stack.append(child.id)
    return found


def _normal_entity(value: Any) -> Any:
    if isinstance(value, tuple) and value and value[0] == "error":
        return value[:2]  # the error type; the message names op ids (bookkeeping)
    if isinstance(value, (Keyword, Info)):
        return dataclasses.replace(value, version=0, op_id="", updated_at=0.0)
    return value


def normalise(snap: dict[str, Any]) -> dict[str, Any]:
    """A snapshot without bookkeeping: versions, op ids and update times of entities, the
    last op id, the operation count, error messages, and arrival order (undo re-appends a
    restored child, link or name at the end of its list)."""
    out: dict[str, Any] = {"keywords": {}, "infos": {}, "names": {}}
    for kid, entry in snap["keywords"].items():
        new = {}
        for key, value in entry.items():
            if key == "keyword":
                new[key] = _normal_entity(value)
            elif key == "relations":
                new[key] = sorted(rel[:5] for rel in value)  # drop the version
            elif key == "path":
                new[key] = value
            else:
                new[key] = sorted(value)
        out["keywords"][kid] = new
    for iid, entry in snap["infos"].items():
        out["infos"][iid] = {k: (_normal_entity(v) if k == "info" else sorted(v)) for k, v in entry.items()}
    out["names"] = {name: sorted(ids) for name, ids in snap["names"].items()}
    out["metrics"] = {k: v for k, v in snap["metrics"].items() if k != "operations"}
    return out


# --- undo expectations, from before-images and public reads -----------------------------------


def _first_changes(op: Operation) -> dict[str, Any]:
    first: dict[str, Any] = {}
    for change in op.changes:
        first.setdefault(change.key, change)
    return first


def _live_image(entity: Any) -> bool:
    return entity is not None and not entity.deleted


def check_restored(tree: KeywordTree, op: Operation) -> None:
    """Every entity ``op`` wrote is in its before-image state, as far as public reads show."""
    for key, change in _first_changes(op).items():
        after, before = change.after, change.before
        if type(after) is Keyword:
            if not _live_image(before):
                assert not is_live_keyword(tree, after.id), f"{key} should not be live after the undo"
                continue
            now = tree.get_keyword(after.id)
            for field in ("name", "aliases", "parent_id", "description", "created_at"):
                assert getattr(now, field) == getattr(before, field), (
                    key, field, getattr(now, field), getattr(before, field))
            assert dict(now.metadata) == dict(before.metadata), key
        elif type(after) is Info:
            if not _live_image(before):
                assert not is_live_info(tree, after.id), f"{key} should not be live after the undo"
                continue
            now_info = tree.get_info(after.id)
            for field in ("content", "source", "created_at"):
                assert getattr(now_info, field) == getattr(before, field), (key, field)
            assert dict(now_info.metadata) == dict(before.metadata), key
        elif type(after) is Link:
            if not (is_live_info(tree, after.info_id) and is_live_keyword(tree, after.keyword_id)):
                continue  # a link with a dead end is inert: nothing to see
            linked = {k.id: rel for k, rel in tree.get_keywords_of_info(after.info_id)}
            if _live_image(before):
                assert linked.get(after.keyword_id) is before.relation, (key, linked.get(after.keyword_id))
            else:
                assert after.keyword_id not in linked, f"link {key} should not be live after the undo"
        else:
            assert type(after) is Relation
            if not (is_live_keyword(tree, after.from_id) and is_live_keyword(tree, after.to_id)):
                continue
            found = [
                r for r in tree.get_relations(after.from_id, type=after.type)
                if r.to_id == after.to_id and r.type == after.type
            ]
            if _live_image(before):
                assert [(r.weight, r.reason) for r in found] == [(before.weight, before.reason)], key
            else:
                assert found == [], f"relation {key} should not be live after the undo"


def undo_may_be_inconsistent(tree: KeywordTree, op: Operation) -> bool:
    """True if putting back every before-image of ``op`` over the current state could leave
    an inconsistent tree (the root deleted, a deleted keyword keeping live children, a live
    keyword under a dead parent or in a cycle, a live link or relation with a dead end).
    Over-approximates: undo may only refuse when this is True."""
    first = _first_changes(op)
    kw_target = {c.after.id: c.before for c in first.values() if type(c.after) is Keyword}
    info_target = {c.after.id: c.before for c in first.values() if type(c.after) is Info}

    def live_after(kid: str) -> bool:
        return _live_image(kw_target[kid]) if kid in kw_target else is_live_keyword(tree, kid)

    def info_live_after(iid: str) -> bool:
        return _live_image(info_target[iid]) if iid in info_target else is_live_info(tree, iid)

    def parent_after(kid: str) -> str | None:
        if kid in kw_target:
            return kw_target[kid].parent_id
        return tree.get_keyword(kid).parent_id

    for kid, target in kw_target.items():
        if not _live_image(target):
            if kid == ROOT_ID:
                return True
            children = tree.get_children(kid) if is_live_keyword(tree, kid) else []
            if any(live_after(c.id) and parent_after(c.id) == kid for c in children):
                return True
        elif kid != ROOT_ID:
            seen, current = {kid}, target.parent_id
            while current is not None:
                if current in seen or not live_after(current):
                    return True
                seen.add(current)
                current = parent_after(current)
    for change in first.values():
        target = change.before
        if not _live_image(target):
            continue
        if type(target) is Link and not (info_live_after(target.info_id) and live_after(target.keyword_id)):
            return True
        if type(target) is Relation and not (live_after(target.from_id) and live_after(target.to_id)):
            return True
    return False


def touches_any(later: Operation, op: Operation) -> bool:
    """True if ``later`` wrote an entity ``op`` wrote, or a link, relation or child keyword
    attached to a keyword or info ``op`` wrote."""
    ids = {c.after.id for c in op.changes if type(c.after) in (Keyword, Info)}
    keys = set(op.entity_ids)
    for change in later.changes:
        e = change.after
        if change.key in keys:
            return True
        if type(e) is Link and (e.info_id in ids or e.keyword_id in ids):
            return True
        if type(e) is Relation and (e.from_id in ids or e.to_id in ids):
            return True
        if type(e) is Keyword and e.parent_id in ids:
            return True
    return False


# --- the log as operations --------------------------------------------------------------------


def split_operations(data: bytes) -> list[tuple[str, bytes, int]]:
    """(op id, rows, end offset) of each whole operation of a log: an operation ends at a
    row carrying an ``end`` key."""
    ops, pending, pos = [], [], 0
    for line in data.splitlines(keepends=True):
        pos += len(line)
        if not line.endswith(b"\n"):
            break  # a torn last line
        row = orjson.loads(line)
        pending.append(line)
        if "end" in row:
            ops.append((row["op"], b"".join(pending), pos))
            pending = []
    return ops


def row_ends(data: bytes) -> list[int]:
    """The offset after every row (line) of a log: between rows of one operation a cut leaves
    whole rows but a partial operation, the case atomicity is about."""
    ends, pos = [], 0
    for line in data.splitlines(keepends=True):
        pos += len(line)
        ends.append(pos)
    return ends


def truncate_log_copy(source: Path, target: Path, offset: int) -> Path:
    """Copy a data directory and cut its log (the segments in name order, as one byte
    stream) at ``offset``: the segment holding the offset is truncated, later ones removed."""
    copy_tree_dir(source, target)
    pos = 0
    for segment in sorted((target / "log").glob("*.jsonl")):
        size = segment.stat().st_size
        if pos + size <= offset:
            pass
        elif pos <= offset:
            with open(segment, "r+b") as fh:
                fh.truncate(offset - pos)
        else:
            segment.unlink()
        pos += size
    return target


# --- the state machine ------------------------------------------------------------------------


@dataclasses.dataclass
class Record:
    op_id: str
    kind: str
    timestamp: float
    snap: dict[str, Any]
    keyword_ids: tuple[str, ...]
    info_ids: tuple[str, ...]
    log_end: int


class KwtreeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="kwtree-props-"))
        self.dir = self.base / "tree"
        self.tree: KeywordTree | None = None
        self.open_options: dict[str, Any] = {}
        self.keyword_ids: list[str] = []  # every keyword id ever returned, creation order
        self.info_ids: list[str] = []
        self.records: dict[str, Record] = {}
        self.order: list[str] = []  # op ids in commit order
        self.copies = 0

    # --- bookkeeping ---------------------------------------------------------------------

    def log_option(self) -> dict[str, Any]:
        """Where the tree keeps its log (a subclass names a PostgreSQL log): the directory."""
        return {}

    @property
    def t(self) -> KeywordTree:
        assert self.tree is not None
        return self.tree

    def snap(self) -> dict[str, Any]:
        return snapshot(self.t, self.keyword_ids, self.info_ids)

    def record(self, expected_kind: str) -> Record:
        (op,) = self.t.history(limit=1)
        assert op.op_id == self.t.last_op_id
        assert op.kind == expected_kind
        if self.order:
            assert op.op_id > self.order[-1], "operation ids must grow"
            assert op.timestamp >= self.records[self.order[-1]].timestamp
        rec = Record(
            op.op_id, op.kind, op.timestamp, self.snap(), tuple(self.keyword_ids), tuple(self.info_ids),
            len(log_bytes(self.dir)),
        )
        self.records[op.op_id] = rec
        self.order.append(op.op_id)
        return rec

    def attempt(self, call: Callable[..., Any], *args: Any, register: Callable[[Any], None] | None = None,
                **kwargs: Any) -> tuple[bool, Any]:
        """Call a public write. A KwtreeError must leave the log and every read unchanged;
        a call that writes nothing must not change them either; a write is recorded."""
        before_log, before_snap, before_last = log_bytes(self.dir), self.snap(), self.t.last_op_id
        try:
            result = call(*args, **kwargs)
        except KwtreeError as exc:
            note(f"{call.__name__} raised {type(exc).__name__}: {exc}")
            assert log_bytes(self.dir) == before_log, f"failed {call.__name__} changed the log"
            assert self.t.last_op_id == before_last
            assert self.snap() == before_snap, f"failed {call.__name__} changed the state"
            return False, exc
        if register is not None:
            register(result)
        if self.t.last_op_id == before_last:
            assert log_bytes(self.dir) == before_log, f"{call.__name__} wrote without an operation"
            assert self.snap() == before_snap, f"{call.__name__} changed the state without an operation"
        else:
            self.record(call.__name__)
        return True, result

    # --- drawing arguments ---------------------------------------------------------------

    def draw_keyword(self, data: st.DataObject, label: str, *extra: str) -> str:
        """Mostly a live keyword other than the root; sometimes the root, a deleted, an
        unknown or a malformed id; or one of ``extra`` (e.g. a descendant, for cycles)."""
        live = live_keyword_ids(self.t)[1:]
        every = [*self.keyword_ids, ROOT_ID, UNKNOWN_ID, ""]
        choices = [st.sampled_from(live)] * 4 if live else []
        choices.append(st.sampled_from(every))
        if extra:
            choices.extend([st.sampled_from(list(extra))] * 2)
        return data.draw(st.one_of(*choices), label=label)

    def draw_info(self, data: st.DataObject, label: str) -> str:
        live = [iid for iid in self.info_ids if is_live_info(self.t, iid)]
        every = [*self.info_ids, UNKNOWN_ID]
        choices = [st.sampled_from(live)] * 4 if live else []
        choices.append(st.sampled_from(every))
        return data.draw(st.one_of(*choices), label=label)

    def current_version(self, kid: str) -> int:
        return self.t.get_keyword(kid).version if is_live_keyword(self.t, kid) else 1

    def add_keywords(self, keywords: Iterable[Keyword]) -> None:
        self.keyword_ids.extend(k.id for k in keywords)

    def add_infos(self, infos: Iterable[Info]) -> None:
        self.info_ids.extend(i.id for i in infos)

    # --- setup ---------------------------------------------------------------------------

    @initialize(
        small_segments=st.booleans(),
        shape=st.lists(st.tuples(st.sampled_from(NAMES), st.integers(0, 99)), min_size=3, max_size=10),
        infos=st.lists(st.lists(st.integers(0, 99), max_size=3), min_size=1, max_size=4),
        relations=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99)), max_size=3),
    )
    def open_tree(self, small_segments, shape, infos, relations) -> None:
        """A new directory, seeded with a random tree of keywords, infos and relations (every
        seed write goes through ``attempt`` too), so that every example has something to work
        on whichever rules hypothesis enables for it."""
        # 4096-byte segments make the log rotate every few operations.
        self.open_options = {"durability": "none", "segment_bytes": 4096 if small_segments else None,
                             **self.log_option()}
        self.tree = KeywordTree(self.dir, **self.open_options)
        self.record("init")
        for name, where in shape:
            live = live_keyword_ids(self.t)
            self.attempt(self.t.create_keyword, name, live[where % len(live)],
                         register=lambda k: self.add_keywords([k]))
        for links in infos:
            live = live_keyword_ids(self.t)
            kids = [live[i % len(live)] for i in links]
            self.attempt(self.t.create_info, "seed memo", "", kids, register=lambda i: self.add_infos([i]))
        for a, b in relations:
            live = live_keyword_ids(self.t)[1:]
            self.attempt(self.t.relate, live[a % len(live)], live[b % len(live)])

    # --- keyword writes ------------------------------------------------------------------

    @rule(data=st.data(), name=NAME, aliases=st.none() | st.lists(NAME, max_size=2),
          description=DESCRIPTION, metadata=METADATA)
    def create_keyword(self, data, name, aliases, description, metadata) -> None:
        parent = data.draw(st.one_of(st.none(), st.just("k")), label="parent?")
        parent = None if parent is None else self.draw_keyword(data, "parent_id")
        siblings = []
        if is_live_keyword(self.t, parent or ROOT_ID):
            siblings = self.t.get_children(parent or ROOT_ID)
        ok, result = self.attempt(
            self.t.create_keyword, name, parent, aliases, description, metadata,
            register=lambda k: self.add_keywords([k]), llm_auto_place=False,
        )
        key = normalize_name(name.strip())
        clash = [s.id for s in siblings if normalize_name(s.name) == key]
        if ok:
            assert key and not clash
            new = self.t.get_keyword(result.id)
            assert new.name == name.strip() and new.parent_id == (parent or ROOT_ID)
            assert result.id in [k.id for k in self.t.find_keywords(name)]
        elif isinstance(result, DuplicateKeywordError):
            assert result.existing_id in clash

    @rule(name=NAME, description=DESCRIPTION)
    def create_keyword_auto_placed(self, name, description) -> None:
        """The agent picks the parent: wherever it lands, it is a live keyword with no
        sibling of the same name, and the decision is in the operation's audit."""
        ok, result = self.attempt(
            self.t.create_keyword, name, description=description, register=lambda k: self.add_keywords([k])
        )
        if ok:
            new = self.t.get_keyword(result.id)
            key = normalize_name(name.strip())
            assert [s.id for s in self.t.get_children(new.parent_id) if normalize_name(s.name) == key] == [new.id]
            (op,) = self.t.history(result.id)
            assert op.audit is not None and op.audit["agent"]["intent"] == "suggest_parent"
        else:
            assert isinstance(result, (InvalidInputError, DuplicateKeywordError)), result

    @rule(data=st.data(), fields=rarely(st.sets(st.sampled_from(["name", "aliases", "description", "metadata"]),
                                                 min_size=1, max_size=3),
                                         st.sampled_from([set(), {"parent_id"}, {"name", "parent_id"}])),
          name=NAME, aliases=st.lists(NAME, max_size=2), description=DESCRIPTION, metadata=METADATA,
          version_delta=rarely(st.just(0), st.sampled_from([-1, 1, "as text"])))
    def update_keyword(self, data, fields, name, aliases, description, metadata, version_delta) -> None:
        kid = self.draw_keyword(data, "keyword_id")
        current = self.current_version(kid)
        version = str(current) if version_delta == "as text" else current + version_delta
        values = {"name": name, "aliases": aliases, "description": description, "metadata": metadata,
                  "parent_id": ROOT_ID}
        patch = {field: values[field] for field in sorted(fields)}
        ok, result = self.attempt(self.t.update_keyword, kid, patch, version)
        if ok:
            assert version_delta == 0 and "parent_id" not in patch
            now = self.t.get_keyword(kid)
            assert now.version == current + 1
            if "name" in patch:
                assert now.name == name.strip()
            if "description" in patch:
                assert now.description == description
        elif isinstance(result, VersionConflictError):
            assert version_delta in (-1, 1) and result.actual == current

    @rule(data=st.data(), alias=NAME)
    def add_alias(self, data, alias) -> None:
        kid = self.draw_keyword(data, "keyword_id")
        ok, result = self.attempt(self.t.add_alias, kid, alias)
        if ok:
            keys = {normalize_name(a) for a in result.aliases} | {normalize_name(result.name)}
            assert normalize_name(alias.strip()) in keys

    @rule(data=st.data(), alias=NAME)
    def remove_alias(self, data, alias) -> None:
        kid = self.draw_keyword(data, "keyword_id")
        if is_live_keyword(self.t, kid) and self.t.get_keyword(kid).aliases:
            alias = data.draw(st.sampled_from([alias, *self.t.get_keyword(kid).aliases]), label="alias")
        ok, result = self.attempt(self.t.remove_alias, kid, alias)
        if ok:
            assert normalize_name(alias.strip()) not in {normalize_name(a) for a in result.aliases}

    @rule(data=st.data())
    def move_keyword(self, data) -> None:
        kid = self.draw_keyword(data, "keyword_id")
        inside = subtree_ids(self.t, kid)  # moving under any of these is a cycle
        target = self.draw_keyword(data, "new_parent_id", *inside)
        ok, result = self.attempt(self.t.move_keyword, kid, target)
        if ok:
            assert target not in inside
            assert self.t.get_keyword(kid).parent_id == target
        elif kid not in (ROOT_ID,) and target in inside:
            assert isinstance(result, CycleError), result

    @rule(data=st.data())
    def merge_keywords(self, data) -> None:
        src = self.draw_keyword(data, "src_id")
        inside = subtree_ids(self.t, src)
        others = [kid for kid in live_keyword_ids(self.t)[1:] if kid != src]
        dst = data.draw(st.sampled_from(others), label="dst_id") if others and data.draw(st.booleans()) \
            else self.draw_keyword(data, "dst_id", *inside)
        src_name = self.t.get_keyword(src).name if is_live_keyword(self.t, src) else None
        ok, result = self.attempt(self.t.merge_keywords, src, dst)
        if ok:
            assert dst not in inside and not is_live_keyword(self.t, src)
            merged = self.t.get_keyword(dst)
            assert merged == result
            keys = {normalize_name(a) for a in merged.aliases} | {normalize_name(merged.name)}
            assert normalize_name(src_name) in keys
        elif src not in (ROOT_ID, dst) and dst != ROOT_ID and dst in inside:
            assert isinstance(result, CycleError), result

    @rule(data=st.data(), cascade=st.booleans(),
          policy=rarely(st.sampled_from(["reattach", "delete", "keep"]), st.just("bogus")))
    def delete_keyword(self, data, cascade, policy) -> None:
        kid = self.draw_keyword(data, "keyword_id")
        doomed = subtree_ids(self.t, kid)
        ok, result = self.attempt(self.t.delete_keyword, kid, cascade, policy)
        if ok:
            assert cascade or len(doomed) == 1
            assert not any(is_live_keyword(self.t, d) for d in doomed)
            assert isinstance(result, Operation) and result.op_id == self.t.last_op_id
        elif len(doomed) > 1 and not cascade and kid != ROOT_ID and policy != "bogus":
            assert isinstance(result, HasChildrenError), result

    @rule(data=st.data(), count=st.integers(0, 3))
    def batch_create_keywords(self, data, count) -> None:
        specs, refs = [], []
        for _ in range(count):
            spec: dict[str, Any] = {"name": data.draw(NAME, label="name")}
            how = data.draw(st.sampled_from(["root", "parent_id", "parent_ref", "parent_ref"]), label="parent")
            if how == "parent_id":
                spec["parent_id"] = self.draw_keyword(data, "parent_id")
            elif how == "parent_ref":
                spec["parent_ref"] = data.draw(st.sampled_from([*refs, "missing"]), label="parent_ref")
            if data.draw(st.booleans(), label="has ref"):
                spec["ref"] = data.draw(st.sampled_from(["r1", "r2", "r3"]), label="ref")
                refs.append(spec["ref"])
            if data.draw(st.booleans(), label="has aliases"):
                spec["aliases"] = data.draw(st.lists(NAME, max_size=2), label="aliases")
            if data.draw(st.integers(0, 19), label="odd field") == 0:
                spec["parent"] = ROOT_ID  # not a spec field
            specs.append(spec)
        ok, result = self.attempt(self.t.batch_create_keywords, specs, register=self.add_keywords)
        if ok:
            assert len(result) == count
            by_ref = {}
            for spec, made in zip(specs, result, strict=True):
                now = self.t.get_keyword(made.id)
                assert now.name == spec["name"].strip()
                if "parent_ref" in spec:
                    assert now.parent_id == by_ref[spec["parent_ref"]]
                else:
                    assert now.parent_id == spec.get("parent_id", ROOT_ID)
                if "ref" in spec:
                    by_ref[spec["ref"]] = made.id

    # --- info, link and relation writes --------------------------------------------------

    @rule(data=st.data(), content=CONTENT, source=SOURCE, metadata=METADATA, linked=st.integers(-1, 3))
    def create_info(self, data, content, source, metadata, linked) -> None:
        keyword_ids = None if linked < 0 else [self.draw_keyword(data, "keyword_id") for _ in range(linked)]
        ok, result = self.attempt(self.t.create_info, content, source, keyword_ids, metadata,
                                  register=lambda i: self.add_infos([i]))
        if ok:
            assert self.t.get_info(result.id).content == content
            got = self.t.get_keywords_of_info(result.id)
            assert [k.id for k, _ in got] == list(dict.fromkeys(keyword_ids or []))
            assert all(rel is RelationType.PRIMARY for _, rel in got)

    @rule(data=st.data(),
          fields=rarely(st.sets(st.sampled_from(["content", "source", "metadata"]), min_size=1, max_size=3),
                        st.sampled_from([set(), {"keyword_ids"}, {"content", "keyword_ids"}])),
          content=CONTENT, source=SOURCE, metadata=METADATA,
          version_delta=rarely(st.sampled_from([None, 0]), st.sampled_from([1, -1])))
    def update_info(self, data, fields, content, source, metadata, version_delta) -> None:
        iid = self.draw_info(data, "info_id")
        current = self.t.get_info(iid).version if is_live_info(self.t, iid) else 1
        version = None if version_delta is None else current + version_delta
        values = {"content": content, "source": source, "metadata": metadata, "keyword_ids": []}
        patch = {field: values[field] for field in sorted(fields)}
        ok, result = self.attempt(self.t.update_info, iid, patch, version)
        if ok:
            assert version_delta in (None, 0) and "keyword_ids" not in patch
            now = self.t.get_info(iid)
            assert now.version == current + 1
            if "content" in patch:
                assert now.content == content
        elif isinstance(result, VersionConflictError):
            assert version_delta in (-1, 1)

    @rule(data=st.data())
    def delete_info(self, data) -> None:
        iid = self.draw_info(data, "info_id")
        ok, _ = self.attempt(self.t.delete_info, iid)
        if ok:
            assert not is_live_info(self.t, iid)

    @rule(data=st.data(), count=st.integers(0, 3))
    def batch_create_infos(self, data, count) -> None:
        specs = []
        for _ in range(count):
            spec: dict[str, Any] = {"content": data.draw(CONTENT, label="content")}
            if data.draw(st.booleans(), label="has keywords"):
                spec["keyword_ids"] = [self.draw_keyword(data, "keyword_id")
                                       for _ in range(data.draw(st.integers(0, 2)))]
            if data.draw(st.booleans(), label="has source"):
                spec["source"] = data.draw(SOURCE, label="source")
            if data.draw(st.integers(0, 19), label="odd field") == 0:
                spec["keywords"] = []  # not a spec field
            specs.append(spec)
        ok, result = self.attempt(self.t.batch_create_infos, specs, register=self.add_infos)
        if ok:
            assert [self.t.get_info(i.id).content for i in result] == [s["content"] for s in specs]

    @rule(data=st.data(), relation=INFO_RELATION, created_by=rarely(st.sampled_from(["user", "agent"]), st.just("")))
    def link_info(self, data, relation, created_by) -> None:
        iid = self.draw_info(data, "info_id")
        kid = self.draw_keyword(data, "keyword_id")
        ok, _ = self.attempt(self.t.link_info, iid, kid, relation, created_by)
        if ok:
            linked = {k.id: rel for k, rel in self.t.get_keywords_of_info(iid)}
            assert linked[kid] is RelationType(relation)
            assert iid in [i.id for i in self.t.get_infos_of_keyword(kid, relation, 0, 10_000)]

    @rule(data=st.data())
    def unlink_info(self, data) -> None:
        iid = self.draw_info(data, "info_id")
        linked = [k.id for k, _ in self.t.get_keywords_of_info(iid)] if is_live_info(self.t, iid) else []
        kid = data.draw(st.sampled_from(linked), label="keyword_id") if linked and data.draw(st.booleans()) \
            else self.draw_keyword(data, "keyword_id")
        ok, result = self.attempt(self.t.unlink_info, iid, kid)
        if ok:
            assert kid in linked
            assert kid not in [k.id for k, _ in self.t.get_keywords_of_info(iid)]
        elif is_live_info(self.t, iid) and is_live_keyword(self.t, kid):
            assert kid not in linked and isinstance(result, NotFoundError), result

    @rule(data=st.data(), type_=REL_TYPE, weight=WEIGHT, reason=st.sampled_from(["", "because"]),
          to_self=rarely(st.just(False), st.just(True)))
    def relate(self, data, type_, weight, reason, to_self) -> None:
        src = self.draw_keyword(data, "from_id")
        dst = src if to_self else self.draw_keyword(data, "to_id")
        ok, result = self.attempt(self.t.relate, src, dst, type_, weight, reason)
        if ok:
            assert src != dst
            found = [r for r in self.t.get_relations(src) if r.to_id == dst and r.type == type_.strip()]
            assert [(r.weight, r.reason) for r in found] == [(float(weight), reason)]
            assert result == found[0]

    @rule(data=st.data(), type_=st.none() | REL_TYPE)
    def unrelate(self, data, type_) -> None:
        src = self.draw_keyword(data, "from_id")
        out = [r.to_id for r in self.t.get_relations(src)] if is_live_keyword(self.t, src) else []
        dst = data.draw(st.sampled_from(out), label="to_id") if out and data.draw(st.booleans()) \
            else self.draw_keyword(data, "to_id")
        ok, _ = self.attempt(self.t.unrelate, src, dst, type_)
        if ok:
            left = [r for r in self.t.get_relations(src) if r.to_id == dst]
            if type_ is None:
                assert left == []
            else:
                assert type_.strip() not in [r.type for r in left]

    # --- undo --------------------------------------------------------------------------------

    @precondition(lambda self: len(self.order) >= 2)
    @rule()
    def undo_latest(self) -> None:
        """§4.6: undo of the newest operation gives the state before it."""
        target, previous = self.order[-1], self.order[-2]
        (op,) = self.t.history(limit=1)
        assert op.op_id == target
        ok, result = self.attempt(self.t.undo, target)
        assert ok, f"undo of the newest operation ({op.kind}) must succeed, got {result!r}"
        check_restored(self.t, op)
        with KeywordTree(self.dir, as_of=previous) as then:
            before = snapshot(then, self.keyword_ids, self.info_ids)
        assert normalise(self.snap()) == normalise(before)

    @precondition(lambda self: len(self.order) >= 1)
    @rule(data=st.data(), force=st.booleans(), then_force=st.booleans())
    def undo_any(self, data, force, then_force) -> None:
        """§4.6: undo refuses exactly when a later operation wrote one of the entities, and
        a (forced) undo puts back every before-image."""
        history = self.t.history()
        # Favour operations whose keywords or infos later operations wrote, linked, related
        # or put children under: where undo conflicts, retires dependents or is refused.
        entangled = [op.op_id for op in history
                     if any(later.op_id > op.op_id and touches_any(later, op) for later in history)]
        choices = [st.sampled_from(self.order), st.sampled_from([EARLY_OP, LATE_OP, NOT_AN_OP])]
        if entangled:
            choices += [st.sampled_from(entangled)] * 2
        op_id = data.draw(st.one_of(*choices), label="op_id")
        if op_id not in self.records:
            ok, result = self.attempt(self.t.undo, op_id, force)
            assert not ok
            assert isinstance(result, InvalidInputError if op_id == NOT_AN_OP else NotFoundError), result
            return
        op = next(o for o in history if o.op_id == op_id)
        keys = set(op.entity_ids)
        later_writes: dict[str, str] = {}
        for later in history:
            if later.op_id > op_id:
                for key in set(later.entity_ids) & keys:
                    later_writes[key] = max(later_writes.get(key, ""), later.op_id)
        ok, result = self.attempt(self.t.undo, op_id, force)
        if later_writes and not force:
            assert not ok and isinstance(result, UndoConflictError), result
            assert result.op_id == op_id and result.conflicts == later_writes
            if not then_force:
                return
            ok, result = self.attempt(self.t.undo, op_id, True)
        if not ok:
            # The only refusal left: the restored state would be inconsistent.
            assert type(result) is InvalidInputError, result
            assert undo_may_be_inconsistent(self.t, op), f"undo refused a consistent restore: {result}"
            return
        check_restored(self.t, op)
        if result is not None:
            assert result.kind == "undo" and dict(result.audit or {}) == {"undo_of": op_id}

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def tree_is_a_tree(self) -> None:
        if self.tree is not None:
            assert_tree_shape(self.t, self.keyword_ids, self.info_ids)

    def check_reopen(self) -> None:
        assert_replay_equivalent(self.t, self.keyword_ids, self.info_ids)
        assert [op.op_id for op in self.t.history()] == self.order
        with KeywordTree(self.dir, read_only=True) as again, pytest.raises(ReadOnlyError):
            again.create_keyword("never")

    @rule()
    def reopen(self) -> None:
        """§4.1: a fresh tree on the directory answers every read the same way."""
        self.check_reopen()

    @rule()
    def checkpoint_then_reopen(self) -> None:
        """§4.1 with a state checkpoint: written now, a fresh open starts from it (and later
        opens from it and the operations written after it; a cut copy of the log, a view,
        a compaction or an undo must not be misled by it)."""
        saved = checkpoint.MIN_LOG_BYTES, checkpoint.REFRESH_FRACTION
        checkpoint.MIN_LOG_BYTES, checkpoint.REFRESH_FRACTION = 1, 0.0
        try:
            with self.t._engine.exclusive():
                self.t._engine.save_checkpoint()
        finally:
            checkpoint.MIN_LOG_BYTES, checkpoint.REFRESH_FRACTION = saved
        self.check_reopen()

    @rule()
    def writer_reopens_from_its_checkpoint(self) -> None:
        """§4.1 for a writer that opened from a state checkpoint: it closes (writing one), opens
        again from it, and every rule after this one reads and writes a state whose entities and
        indexes are made as they are first read (kwtree.engine.lazy_rows)."""
        saved = checkpoint.MIN_LOG_BYTES, checkpoint.REFRESH_FRACTION
        checkpoint.MIN_LOG_BYTES, checkpoint.REFRESH_FRACTION = 1, 0.0
        try:
            self.t.close()
        finally:
            checkpoint.MIN_LOG_BYTES, checkpoint.REFRESH_FRACTION = saved
        self.tree = None
        self.tree = KeywordTree(self.dir, **self.open_options)
        if not self.log_option():  # (a PostgreSQL log has no checkpoint)
            assert self.t._engine._checkpointed > 0
        self.check_reopen()

    def check_as_of(self, op_id: str) -> None:
        rec = self.records[op_id]
        with KeywordTree(self.dir, as_of=op_id) as then:
            assert snapshot(then, rec.keyword_ids, rec.info_ids) == rec.snap, f"as_of={op_id} ({rec.kind})"
        # By time: the view holds every operation stamped at or before that time (a later
        # operation can share the timestamp).
        same_time = [o for o in self.order if self.records[o].timestamp <= rec.timestamp][-1]
        expected = self.records[same_time]
        with KeywordTree(self.dir, as_of=rec.timestamp) as then:
            assert snapshot(then, expected.keyword_ids, expected.info_ids) == expected.snap, f"as_of={rec.timestamp}"

    @rule(data=st.data())
    def time_travel(self, data) -> None:
        """§4.5: a view as of a recorded operation (or its time) shows the recorded state."""
        self.check_as_of(data.draw(st.sampled_from(self.order), label="as_of"))

    def check_truncated(self, offset: int) -> None:
        data = log_bytes(self.dir)
        ends = [end for _, _, end in split_operations(data)]
        assert ends == [self.records[o].log_end for o in self.order], "op boundaries differ from the recorded ones"
        complete = sum(1 for end in ends if end <= offset)
        self.copies += 1
        cut = truncate_log_copy(self.dir, self.base / f"cut{self.copies}", offset)
        try:
            with KeywordTree(cut, read_only=True) as view:
                if complete == 0:
                    assert view.last_op_id is None
                    assert isinstance(_error(view.get_keyword, ROOT_ID), NotFoundError)
                else:
                    rec = self.records[self.order[complete - 1]]
                    assert view.last_op_id == rec.op_id
                    assert snapshot(view, rec.keyword_ids, rec.info_ids) == rec.snap, f"cut at {offset}"
        finally:
            shutil.rmtree(cut, ignore_errors=True)

    @rule(pick=st.integers(0, 2**32), delta=st.sampled_from([-1, 0, 0, 1]),
          where=st.sampled_from(["operation end", "row end", "any byte"]))
    def truncated_log(self, pick, delta, where) -> None:
        """§4.2: the log cut at any byte opens as the state after some whole operations."""
        data = log_bytes(self.dir)
        if where == "operation end":
            end = self.records[self.order[pick % len(self.order)]].log_end
            offset = min(max(end + delta, 0), len(data))
        elif where == "row end":
            ends = row_ends(data)
            offset = ends[pick % len(ends)]
        else:
            offset = pick % (len(data) + 1)
        self.check_truncated(offset)

    def teardown(self) -> None:
        try:
            if self.tree is not None:
                self.check_reopen()
                step = max(1, len(self.order) // 12)
                for op_id in {*self.order[::step], self.order[-1]}:
                    self.check_as_of(op_id)
                self.check_log_cuts()
        finally:
            if self.tree is not None:
                self.tree.close()
            shutil.rmtree(self.base, ignore_errors=True)

    def check_log_cuts(self) -> None:
        """The log cut at the ends of its first, middle and last operations and inside some."""
        ends = [self.records[o].log_end for o in self.order]
        op_ends = set(ends)
        inside = [end for end in row_ends(log_bytes(self.dir)) if end not in op_ends]  # mid-operation
        for offset in {0, ends[0] - 1, ends[0], ends[-1] - 1, ends[len(ends) // 2] + 1, *inside[-3:]}:
            self.check_truncated(max(offset, 0))


TestKwtreeMachine = pytest.mark.slow(KwtreeMachine.TestCase)
# 200 steps per run under the thorough profile; 120 by default keep the suite's time (45 s at 200).
TestKwtreeMachine.settings = settings(stateful_step_count=200 if THOROUGH else 120)


def undo_newest_restores_previous_state(tree: KeywordTree, keyword_ids: list[str], info_ids: list[str]) -> None:
    """§4.6 for the newest operation: undo succeeds and gives the state before it."""
    previous, newest = tree.history(limit=2)
    tree.undo(newest.op_id)
    with KeywordTree(tree.data_dir, as_of=previous.op_id) as then:
        expected = normalise(snapshot(then, keyword_ids, info_ids))
    assert normalise(snapshot(tree, keyword_ids, info_ids)) == expected


@pytest.mark.parametrize("dependent", ["relation to the keyword", "link to the keyword", "link of the info"])
def test_undo_of_a_creation_with_later_dependents_keeps_undo_working(tree, dependent) -> None:
    """Regression (found by the state machine, fixed meanwhile in commit cc14775): undoing
    the creation of ``b`` (or of an info) while a later relation/link ends at it used to
    leave that relation/link live with a deleted end, and after undoing the relation/link
    too, undoing that newest undo was refused (InvalidInputError "... would join a keyword
    that is no longer live")."""
    a = tree.create_keyword("a")
    b = tree.create_keyword("b")
    create_b = tree.last_op_id
    info = tree.create_info("memo")
    create_info = tree.last_op_id
    if dependent == "relation to the keyword":
        tree.relate(a.id, b.id)
    else:
        tree.link_info(info.id, b.id)
    depends = tree.last_op_id
    ids = ([a.id, b.id], [info.id])
    tree.undo(create_info if dependent == "link of the info" else create_b)
    assert tree.get_relations(a.id) == [] and tree.get_infos_of_keyword(a.id) == []
    undo_newest_restores_previous_state(tree, *ids)  # b (or the info) and its relation/link are back
    undo_newest_restores_previous_state(tree, *ids)  # and gone again
    before = tree.last_op_id
    tree.undo(depends, force=True)  # nothing left to do if the undo above retired it
    if tree.last_op_id != before:
        undo_newest_restores_previous_state(tree, *ids)
    assert_tree_shape(tree, ids[0], ids[1])


def test_forced_undo_restores_a_parent_revived_by_the_same_undo(tree) -> None:
    """§4.6: ``undo(op, force=True)`` puts every entity ``op`` touched back to its
    before-image. Here the merge's before-images are ``b`` live under ``p`` and ``p`` live;
    ``p`` was deleted afterwards (by a forced undo of its creation), so the undo of the merge
    must revive both, ``p`` before ``b`` (a regression test: reversing the merge's rows
    revived ``b`` first, under a dead parent, so replay put it under the root)."""
    p = tree.create_keyword("p")
    create_p = tree.last_op_id
    b = tree.create_keyword("b")
    tree.move_keyword(b.id, p.id)
    tree.merge_keywords(b.id, p.id)
    (merge,) = tree.history(limit=1)
    tree.undo(create_p, force=True)  # p had no live child left, so it can go
    assert undo_may_be_inconsistent(tree, merge) is False
    tree.undo(merge.op_id, force=True)
    check_restored(tree, merge)
    assert [k.id for k in tree.get_path(b.id)] == [ROOT_ID, p.id, b.id]


# --- normalize_name -----------------------------------------------------------------------------


def reference_normalize(text: str) -> str:
    """DESIGN §2, literally: NFKC, casefold, NFKC, then drop categories P*, Z* and C*."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return "".join(ch for ch in folded if unicodedata.category(ch)[0] not in "PZC")


TRICKY = ["ß", "ẞ", "İ", "ǅ", "ﬃ", "Ⅸ", "㍱", "ｶﾞ", "ΐ", "\u0345", "Ｐｙ", "北 京", "\u200b", "\u00a0", "é", "e\u0301"]


@given(st.one_of(st.text(), st.lists(st.sampled_from(TRICKY) | st.text(max_size=2)).map("".join)))
def test_normalize_name_matches_reference(text: str) -> None:
    assert normalize_name(text) == reference_normalize(text)


@given(st.one_of(st.text(st.characters(max_codepoint=127)), st.text(string.ascii_letters + string.digits, min_size=1)))
def test_normalize_name_ascii_fast_paths_match_reference(text: str) -> None:
    assert normalize_name(text) == reference_normalize(text)


# --- merged histories (DESIGN §3 last bullet, §4.3) -------------------------------------------

FORK_STEP = st.tuples(st.sampled_from("AB"), st.sampled_from(ACTIONS),
                      st.integers(0, 63), st.integers(0, 63), st.integers(0, 63))


def build_base(path: Path) -> tuple[list[str], list[str]]:
    """root ─ a ─ b ─ c, root ─ d ─ e; two infos, two relations. Ids in creation order."""
    with KeywordTree(path, durability="none") as tree:
        a = tree.create_keyword("a")
        b = tree.create_keyword("b", a.id)
        c = tree.create_keyword("c", b.id)
        d = tree.create_keyword("d")
        e = tree.create_keyword("e", d.id)
        i1 = tree.create_info("m1", keyword_ids=[b.id, d.id])
        i2 = tree.create_info("m2", keyword_ids=[c.id])
        tree.relate(a.id, d.id)
        tree.relate(c.id, e.id, "part_of")
    return [ROOT_ID, a.id, b.id, c.id, d.id, e.id], [i1.id, i2.id]


def apply_fork_step(tree: KeywordTree, kids: list[str], iids: list[str], action: str, x: int, y: int, z: int) -> None:
    """One write on a fork (kwtree.testing.apply_step); invalid ones simply fail (and write nothing)."""
    apply_step(tree, Step(action, x, y, z), kids, iids)


def write_merged(target: Path, manifest_from: Path, ops: list[tuple[str, bytes, int]]) -> Path:
    """A data directory whose log is one segment holding ``ops`` (as split_operations gives
    them) in the given order."""
    return write_log(target, manifest_from, [LoggedOperation(op_id, rows) for op_id, rows, _ in ops])


#: Steps every merged history contains (indices 1..5 are a, b, c, d, e of the base):
#: moves that form a cycle when combined, a parent deleted in one fork while the other adds a
#: child under it, and edits of the same keyword in both forks.
CONFLICTS = [
    ("A", "move", 1, 4, 0),  # a under d ...
    ("B", "move", 4, 1, 0),  # ... and d under a
    ("A", "delete", 2, 0, 1),  # b (with c) deleted ...
    ("B", "create", 2, 0, 8),  # ... while a child is created under b
    ("B", "create", 3, 0, 9),  # ... and under c
    ("A", "rename", 5, 0, 10),  # e renamed in both
    ("B", "rename", 5, 0, 11),
    ("B", "describe", 4, 0, 3),
]


def split_by_fork(fork_a: Path, fork_b: Path, base_ids: set[str]):
    ops_a, ops_b = log_operations(fork_a), log_operations(fork_b)
    shared_b = [op for op in ops_b if op.op_id in base_ids]
    assert shared_b == [op for op in ops_a if op.op_id in base_ids]  # identical copies
    return ops_a, [op for op in ops_b if op.op_id not in base_ids], shared_b


@pytest.mark.slow
@given(random_steps=st.lists(FORK_STEP, max_size=30), data=st.data(), duplicate_shared=st.booleans())
def test_merged_histories_replay_to_one_state(random_steps, data, duplicate_shared) -> None:
    """kwtree.testing.assert_merge_converges over random forks that always include CONFLICTS:
    op-id order, A then B, B then A and shuffles replay to one state, a tree."""
    base = Path(tempfile.mkdtemp(prefix="kwtree-merge-"))
    try:
        kids, iids = build_base(base / "base")
        forks = {name: copy_tree_dir(base / "base", base / name) for name in "AB"}
        known = {name: (list(kids), list(iids)) for name in "AB"}
        steps = data.draw(st.permutations(CONFLICTS + random_steps), label="steps")
        trees = {name: KeywordTree(path, durability="none") for name, path in forks.items()}
        try:
            for fork, action, x, y, z in steps:  # interleaved, so op ids of A and B interleave
                apply_fork_step(trees[fork], *known[fork], action, x, y, z)
        finally:
            for tree in trees.values():
                tree.close()
        assert_merge_converges(forks["A"], forks["B"], shuffles=3, duplicates=duplicate_shared,
                               rng=data.draw(st.randoms(use_true_random=False), label="shuffles"))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@given(data=st.data(), duplicate_shared=st.booleans())
def test_merge_rules_cycle_rehome_last_writer_wins(data, duplicate_shared) -> None:
    """The Kleppmann rules with exact outcomes: of two moves that together form a cycle the
    later (by op id) is skipped; a child added under a keyword the other fork deleted lives
    under the root; links and relations to the deleted keyword are inert; edits of one
    keyword resolve to the later write, an update after a delete included."""
    base = Path(tempfile.mkdtemp(prefix="kwtree-rules-"))
    try:
        with KeywordTree(base / "base", durability="none") as tree:
            x, y, p, q, k, gone = (tree.create_keyword(n) for n in ("x", "y", "p", "q", "k", "gone"))
            info = tree.create_info("memo", keyword_ids=[q.id])
        base_ids = {op.op_id for op in log_operations(base / "base")}
        fork_a, fork_b = copy_tree_dir(base / "base", base / "A"), copy_tree_dir(base / "base", base / "B")
        with KeywordTree(fork_a, durability="none") as a, KeywordTree(fork_b, durability="none") as b:
            move_a = a.move_keyword(x.id, y.id).op_id  # x under y
            move_b = b.move_keyword(y.id, x.id).op_id  # y under x
            a.delete_keyword(p.id)
            child = b.create_keyword("child", p.id)
            b.link_info(info.id, p.id)
            b.relate(q.id, p.id)
            name_a = a.update_keyword(k.id, {"name": "k-a"}, k.version).op_id
            name_b = b.update_keyword(k.id, {"name": "k-b"}, k.version).op_id
            deleted_gone = a.delete_keyword(gone.id).op_id
            revived_gone = b.update_keyword(gone.id, {"description": "still here"}, gone.version).op_id
        ops_a, new_b, shared_b = split_by_fork(fork_a, fork_b, base_ids)
        union = ops_a + new_b + (shared_b if duplicate_shared else [])
        merged = write_log(base / "merged", fork_a, data.draw(st.permutations(union), label="order"))
        with KeywordTree(merged, read_only=True) as view:
            kids = [ROOT_ID, x.id, y.id, p.id, q.id, k.id, gone.id, child.id]
            assert_tree_shape(view, kids, [info.id])
            if move_a < move_b:  # the later move would close a cycle: skipped
                assert (view.get_keyword(x.id).parent_id, view.get_keyword(y.id).parent_id) == (y.id, ROOT_ID)
            else:
                assert (view.get_keyword(x.id).parent_id, view.get_keyword(y.id).parent_id) == (ROOT_ID, x.id)
            assert not is_live_keyword(view, p.id)
            assert [kw.id for kw in view.get_path(child.id)] == [ROOT_ID, child.id]
            assert [kw.id for kw, _ in view.get_keywords_of_info(info.id)] == [q.id]
            assert view.get_relations(q.id) == []
            assert view.get_keyword(k.id).name == ("k-b" if name_b > name_a else "k-a")
            assert view.get_keyword(k.id).version == 3  # effective version: writes applied
            if revived_gone > deleted_gone:
                assert view.get_keyword(gone.id).description == "still here"
            else:
                assert not is_live_keyword(view, gone.id)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- atomicity, then a new write ------------------------------------------------------------


@given(steps=st.lists(FORK_STEP.map(lambda s: s[1:]), min_size=1, max_size=16), small_segments=st.booleans(),
       cut=st.floats(0, 1), at_row_end=st.booleans(), write_after=st.booleans())
def test_truncated_log_opens_as_a_prefix_of_whole_operations(steps, small_segments, cut, at_row_end,
                                                             write_after) -> None:
    """§4.2 over random operation sequences: a log cut at a uniformly drawn byte opens as the
    state after the whole operations before the cut; a writer opening it drops the torn tail
    and its next operation follows that prefix."""
    base = Path(tempfile.mkdtemp(prefix="kwtree-cut-"))
    try:
        directory = base / "tree"
        states: list[tuple[dict[str, Any], list[str], list[str]]] = []
        with KeywordTree(directory, durability="none", segment_bytes=4096 if small_segments else None) as tree:
            kids, iids = [ROOT_ID], []
            states.append((snapshot(tree), [], []))
            for action, x, y, z in steps:
                before = tree.last_op_id
                apply_fork_step(tree, kids, iids, action, x, y, z)
                if tree.last_op_id != before:
                    states.append((snapshot(tree, kids, iids), list(kids), list(iids)))
        data = log_bytes(directory)
        ends = [end for _, _, end in split_operations(data)]
        assert len(ends) == len(states)
        if at_row_end:  # a whole number of rows, possibly in the middle of an operation
            rows = row_ends(data)
            offset = rows[min(int(cut * len(rows)), len(rows) - 1)]
        else:
            offset = round(cut * len(data))
        complete = sum(1 for end in ends if end <= offset)
        cut_dir = truncate_log_copy(directory, base / "cut", offset)
        with KeywordTree(cut_dir, read_only=True) as view:
            if complete == 0:
                assert view.last_op_id is None
            else:
                snap, skids, siids = states[complete - 1]
                assert snapshot(view, skids, siids) == snap
        if write_after and complete:
            with KeywordTree(cut_dir, durability="none") as writer:
                extra = writer.create_keyword("after the cut")
            snap, skids, siids = states[complete - 1]
            with KeywordTree(cut_dir, read_only=True) as view:
                assert [op.op_id for op in view.history()][:-1] == (
                    [op_id for op_id, _, _ in split_operations(data)][:complete])
                assert view.get_keyword(extra.id).parent_id == ROOT_ID
                with KeywordTree(cut_dir, as_of=view.history()[-2].op_id) as then:
                    assert snapshot(then, skids, siids) == snap
    finally:
        shutil.rmtree(base, ignore_errors=True)
