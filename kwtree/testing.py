"""Test your own code against kwtree's invariants: checkers, hypothesis strategies, a state machine.

kwtree's own suite uses exactly these (tests/test_properties.py, tests/test_cache_invariant.py,
tests/test_git.py, tests/test_crash_matrix.py); docs/testing.md shows a test file to copy.

Checkers (each raises ``AssertionError`` naming the first read that differs):

* ``assert_replay_equivalent(tree)`` — DESIGN §4.1: a fresh open of the directory answers every
  public read (``public_reads``) and ``history()`` the same as ``tree``.
* ``assert_caches_rebuildable(tree)`` — §4.4: a copy of the directory without ``cache/`` and a
  copy with it, both drained with ``wait_indexed()``, give identical reads, ``search`` results
  and recall (the infos each mode finds, their vector similarities; with ``exact=True`` also
  every rank and score, and ``context``). With ``damages``, so do copies whose cache files
  (``cache_files``) were deleted, emptied, truncated or garbled (``damage_cache_file``), one
  or several at once: a cache is never silently wrong.
* ``assert_merge_converges(fork_a, fork_b)`` — §4.3: the union of two forks' logs replays to
  one state in op-id order, in either file order, with the shared operations twice, and in
  shuffled orders; that state is a tree (``assert_tree_shape``).
* ``assert_tree_shape(tree)`` — the live keywords form one tree under the root (no cycle,
  paths and levels agree), links and relations with a dead end are never returned, and
  ``tree_metrics()`` counts what the reads show.

Strategies: ``cache_damages(files)`` (damage to one or two of a tree's cache files), ``names()``,
``infos()`` (specs for ``create_info`` / ``batch_create_infos``),
``operations()`` (one ``Step`` of any public write, valid or not) and ``operation_sequences()``;
``apply_step`` plays a step on a tree. ``KwtreeStateMachine`` is a hypothesis
``RuleBasedStateMachine`` that plays steps, reopens, and checks the tree's shape; subclass it
and add rules for your code.

hypothesis is not a dependency of kwtree itself: install ``kwtree[testing]``.
"""

from __future__ import annotations

import hashlib
import math
import random
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import orjson

try:
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "kwtree.testing needs hypothesis, which kwtree installs only with its testing extra: "
        "pip install 'kwtree[testing]'"
    ) from exc

from kwtree.errors import InvalidInputError, KwtreeError, NotFoundError
from kwtree.facade.tree import KeywordTree
from kwtree.models import ROOT_ID, Info, Keyword, RelationType
from kwtree.normalize import normalize_name

__all__ = [
    "ACTIONS",
    "CACHE_DAMAGES",
    "NAMES",
    "UNKNOWN_ID",
    "WORDS",
    "KwtreeStateMachine",
    "LoggedOperation",
    "Step",
    "apply_step",
    "assert_caches_rebuildable",
    "assert_merge_converges",
    "assert_replay_equivalent",
    "assert_tree_shape",
    "cache_damages",
    "cache_files",
    "contents",
    "damage_cache_file",
    "infos",
    "known_ids",
    "log_operations",
    "merge_orders",
    "names",
    "operation_sequences",
    "operations",
    "public_reads",
    "reads_digest",
    "write_log",
]

#: Recall modes compared by ``assert_caches_rebuildable``.
RECALL_MODES = ("bm25", "vector", "hybrid")
#: Tolerance for comparing float scores of two indexes built differently.
SCORE_TOLERANCE = 1e-4
#: At most this many default queries: keyword names and the first words of infos.
DEFAULT_QUERY_LIMIT = 24
#: How ``damage_cache_file`` can damage a file.
CACHE_DAMAGES = ("delete", "empty", "truncate", "garble")
#: Bytes that "garble" flips (every bit of them, XOR 0xA5) in the middle of a file: a JSON file
#: stops parsing, a binary one changes where its data is.
GARBLE_BYTES = 16
#: Files of a tree's caches that hold no data (locks), left out by ``cache_files``.
_LOCK_FILES = ("lock", ".tantivy-*.lock")
#: Enough to return every hit of a test-sized tree.
RECALL_ALL = 1000
PAGE_ALL = 10_000


# --- public reads ---------------------------------------------------------------------------------


def _read(call: Callable[..., Any], *args: Any) -> Any:
    """The value of a public read, or the error type and message it raised."""
    try:
        return call(*args)
    except KwtreeError as exc:
        return ("error", type(exc).__name__, str(exc))


def public_reads(tree: KeywordTree, keyword_ids: Iterable[str] = (), info_ids: Iterable[str] = ()) -> dict[str, Any]:
    """Every public read of ``tree`` about the given ids, plus everything reachable from the
    root, as plain values that compare with ==. Two trees with equal reads answer every
    public read about those entities the same way (an unknown or deleted id: the same error)."""
    kids = {ROOT_ID}
    kids.update(keyword_ids)
    stack = [ROOT_ID]
    while stack:  # everything reachable from the root
        for child in _read(tree.get_children, stack.pop()) or []:
            if isinstance(child, Keyword):
                kids.add(child.id)
                stack.append(child.id)
    iids = set(info_ids)
    for kid in kids:
        for info in _read(tree.get_infos_of_keyword, kid, None, 0, PAGE_ALL) or []:
            if isinstance(info, Info):
                iids.add(info.id)
    reads: dict[str, Any] = {"keywords": {}, "infos": {}, "names": {}}
    names: set[str] = set()
    for kid in sorted(kids):
        keyword = _read(tree.get_keyword, kid)
        entry: dict[str, Any] = {"keyword": keyword}
        if isinstance(keyword, Keyword):
            names.add(keyword.name)
            names.update(keyword.aliases)
            entry["children"] = [k.id for k in tree.get_children(kid)]
            entry["path"] = [k.id for k in tree.get_path(kid)]
            entry["infos"] = [i.id for i in tree.get_infos_of_keyword(kid, None, 0, PAGE_ALL)]
            for relation in RelationType:
                entry[f"infos_{relation.value}"] = [i.id for i in tree.get_infos_of_keyword(kid, relation, 0, PAGE_ALL)]
            entry["relations"] = sorted(
                (r.from_id, r.to_id, r.type, r.weight, r.reason, r.version)
                for r in tree.get_relations(kid, direction="both")
            )
        reads["keywords"][kid] = entry
    for iid in sorted(iids):
        info = _read(tree.get_info, iid)
        entry = {"info": info}
        if isinstance(info, Info):
            entry["keywords"] = [(k.id, r.value) for k, r in tree.get_keywords_of_info(iid)]
        reads["infos"][iid] = entry
    for name in sorted(names):
        reads["names"][name] = [k.id for k in tree.find_keywords(name)]
    metrics = tree.tree_metrics()
    reads["metrics"] = {k: v for k, v in metrics.items() if k not in ("log_bytes", "log_segments")}
    reads["last_op_id"] = tree.last_op_id
    return reads


def known_ids(tree: KeywordTree) -> tuple[list[str], list[str]]:
    """(keyword ids, info ids) of every keyword and info the operations ``tree`` reflects
    ever wrote, live or not, in the order they first appear (the root first)."""
    keywords: dict[str, None] = {ROOT_ID: None}
    infos: dict[str, None] = {}
    for op in tree.history():
        for change in op.changes:
            if type(change.after) is Keyword:
                keywords[change.after.id] = None
            elif type(change.after) is Info:
                infos[change.after.id] = None
    return list(keywords), list(infos)


def reads_digest(tree: KeywordTree) -> str:
    """A short fingerprint of ``public_reads`` over ``known_ids`` and of the op ids of
    ``history()``: equal digests, equal answers. Cheap to store (e.g. by a child process
    that is about to be killed) and to compare later with an ``as_of`` view."""
    kids, iids = known_ids(tree)
    ops = [op.op_id for op in tree.history()]
    return hashlib.sha256(repr((public_reads(tree, kids, iids), ops)).encode()).hexdigest()[:32]


def _first_difference(got: Any, expected: Any, where: str = "") -> str | None:
    """The path of the first place ``got`` and ``expected`` differ, with both values."""
    if isinstance(got, dict) and isinstance(expected, dict):
        for key in sorted(set(got) | set(expected), key=str):
            if key not in got or key not in expected:
                return f"{where}[{key!r}]: only in {'the expected' if key in expected else 'the checked'} answer"
            found = _first_difference(got[key], expected[key], f"{where}[{key!r}]")
            if found:
                return found
        return None
    if got != expected:
        return f"{where}: {got!r} != expected {expected!r}"
    return None


def _assert_same(what: str, got: Any, expected: Any) -> None:
    difference = _first_difference(got, expected)
    if difference is not None:
        raise AssertionError(f"{what} differ at {difference}")


def _ids(tree: KeywordTree, keyword_ids: Iterable[str] | None,
         info_ids: Iterable[str] | None) -> tuple[list[str], list[str]]:
    kids, iids = known_ids(tree)
    return list(dict.fromkeys([*kids, *(keyword_ids or ())])), list(dict.fromkeys([*iids, *(info_ids or ())]))


# --- checkers -------------------------------------------------------------------------------------


def assert_replay_equivalent(tree: KeywordTree, keyword_ids: Iterable[str] | None = None,
                             info_ids: Iterable[str] | None = None, **open_options: Any) -> None:
    """DESIGN §4.1: a fresh read-only ``KeywordTree`` on ``tree``'s directory answers every
    public read the same as ``tree`` — about every keyword and info its history wrote plus
    ``keyword_ids`` / ``info_ids`` (e.g. ids that were never created) — and lists the same
    operations in ``history()``. ``tree`` is a current tree (writable or read-only, not an
    ``as_of`` view) with no write in flight; ``open_options`` go to the fresh open (e.g. the
    ``embedder``)."""
    kids, iids = _ids(tree, keyword_ids, info_ids)
    expected = public_reads(tree, kids, iids)
    expected_ops = [op.op_id for op in tree.history()]
    with KeywordTree(tree.data_dir, read_only=True, **open_options) as again:
        _assert_same("public reads after a fresh open", public_reads(again, kids, iids), expected)
        _assert_same("history() after a fresh open", [op.op_id for op in again.history()], expected_ops)


def _is_live(call: Callable[[str], Any], entity_id: str) -> bool:
    try:
        call(entity_id)
    except (NotFoundError, InvalidInputError):  # unknown, deleted or malformed id
        return False
    return True


def assert_tree_shape(tree: KeywordTree, keyword_ids: Iterable[str] | None = None,
                      info_ids: Iterable[str] | None = None) -> None:
    """The live keywords form one tree rooted at the root: no cycle, every live keyword
    reachable, ``parent_id`` / ``level`` / ``get_path`` consistent; links and relations with a
    deleted end are never returned, a deleted keyword's reads raise NotFoundError; and
    ``tree_metrics()`` counts exactly what the reads show. Checks every keyword and info
    ``tree``'s history wrote, plus the given ids."""
    kids, iids = _ids(tree, keyword_ids, info_ids)
    root = tree.get_keyword(ROOT_ID)
    assert root.parent_id is None and root.level == 0 and not root.deleted, root
    seen: dict[str, list[str]] = {ROOT_ID: [ROOT_ID]}
    stack = [ROOT_ID]
    while stack:
        node = stack.pop()
        for child in tree.get_children(node):
            assert child.id not in seen, f"keyword {child.id} reached twice: a cycle or a shared child"
            assert not child.deleted and child.parent_id == node, (child.id, child.parent_id, node)
            path_ids = [*seen[node], child.id]
            seen[child.id] = path_ids
            assert [k.id for k in tree.get_path(child.id)] == path_ids, (
                f"get_path({child.id}) disagrees with get_children")
            assert child.level == len(path_ids) - 1, (child.id, child.level, path_ids)
            stack.append(child.id)
    live = {kid for kid in kids if _is_live(tree.get_keyword, kid)}
    unreachable = live - set(seen)
    assert not unreachable, f"live keywords not reachable from the root: {sorted(unreachable)}"
    live_infos = [iid for iid in iids if _is_live(tree.get_info, iid)]
    links = unlinked = 0
    for iid in live_infos:
        linked = tree.get_keywords_of_info(iid)
        dead = [k.id for k, _ in linked if k.id not in seen or k.deleted]
        assert not dead, f"info {iid} is linked to keywords that are not live: {dead}"
        links += len(linked)
        unlinked += not linked
    relations = set()
    for kid in seen:
        for rel in tree.get_relations(kid, direction="both"):
            assert rel.from_id in seen and rel.to_id in seen, f"a relation with a dead end was returned: {rel}"
            relations.add((rel.from_id, rel.to_id, rel.type))
        shown = [i.id for i in tree.get_infos_of_keyword(kid, None, 0, PAGE_ALL)]
        assert set(shown) <= set(live_infos), f"keyword {kid} lists infos that are not live"
    for kid in set(kids) - live:
        for read in (tree.get_infos_of_keyword, tree.get_relations, tree.get_children):
            try:
                read(kid)
            except (NotFoundError, InvalidInputError):
                continue
            raise AssertionError(f"{read.__name__}({kid!r}) of a keyword that is not live did not raise NotFoundError")
    metrics = tree.tree_metrics()
    counted = {"keywords": len(seen) - 1, "infos": len(live_infos), "links": links,
               "relations": len(relations), "infos_without_link": unlinked,
               "depth_max": max((len(p) - 1 for p in seen.values()), default=0)}
    _assert_same("tree_metrics()", {k: metrics[k] for k in counted}, counted)


def cache_files(data_dir: str | Path) -> list[str]:
    """Every file of the caches of the tree in ``data_dir`` (relative paths, sorted): the
    full-text index and the vector stores under ``cache/``, and ``outbox.jsonl``. Lock files,
    which hold no data, are left out."""
    directory = Path(data_dir)
    found = [path for path in (directory / "cache").rglob("*") if path.is_file()]
    found += [path for path in [directory / "outbox.jsonl"] if path.is_file()]
    return sorted(str(path.relative_to(directory)) for path in found
                  if not any(path.match(pattern) for pattern in _LOCK_FILES))


def damage_cache_file(data_dir: str | Path, name: str, how: str) -> None:
    """Damage the file ``name`` (as ``cache_files`` lists it) of the tree in ``data_dir``:
    ``how`` is "delete", "empty", "truncate" (its first half is kept) or "garble" (the
    ``GARBLE_BYTES`` in its middle are flipped). Raises ValueError for another ``how``."""
    path = Path(data_dir) / name
    if how == "delete":
        path.unlink()
        return
    data = path.read_bytes()
    if how == "empty":
        data = b""
    elif how == "truncate":
        data = data[: len(data) // 2]
    elif how == "garble":
        start = max(0, len(data) // 2 - GARBLE_BYTES // 2)
        middle = bytes(byte ^ 0xA5 for byte in data[start : start + GARBLE_BYTES])
        data = data[:start] + middle + data[start + GARBLE_BYTES :]
    else:
        raise ValueError(f"how must be one of {CACHE_DAMAGES}, not {how!r}")
    path.write_bytes(data)


def cache_damages(files: Sequence[str], max_files: int = 2) -> st.SearchStrategy[list[tuple[str, str]]]:
    """Damage to 1 to ``max_files`` distinct files among ``files`` (e.g. ``cache_files(dir)``),
    each with one of ``CACHE_DAMAGES``: a plan for ``assert_caches_rebuildable(damages=[...])``."""
    return st.lists(st.tuples(st.sampled_from(list(files)), st.sampled_from(CACHE_DAMAGES)),
                    min_size=1, max_size=max_files, unique_by=lambda damage: damage[0])


def _copy_directory(source: Path, target: Path, *, caches: bool) -> Path:
    # (Nor the temporary files of atomic replacements: the tree's worker may be recording one.)
    ignored = ["lock", ".*.tmp"] if caches else ["lock", ".*.tmp", "cache", "outbox.jsonl", "outbox.lock"]
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*ignored))
    return target


def _default_queries(reads: dict[str, Any]) -> list[str]:
    queries: list[str] = []
    for entry in reads["keywords"].values():
        if isinstance(entry["keyword"], Keyword) and entry["keyword"].id != ROOT_ID:
            queries.append(entry["keyword"].name)
    for entry in reads["infos"].values():
        if isinstance(entry["info"], Info):
            queries.append(" ".join(entry["info"].content.split()[:3]))
    queries = [q for q in dict.fromkeys(queries) if q.strip()]
    return [*queries[:DEFAULT_QUERY_LIMIT], "zzz nothing matches this"]


def _recall_view(tree: KeywordTree, query: str, mode: str, exact: bool) -> Any:
    hits = tree.recall(query, k=RECALL_ALL, mode=mode)
    for hit in hits:  # a hit is the info as it is now, with its current links
        assert hit.info == tree.get_info(hit.info.id), f"recall({query!r}, mode={mode!r}) returned a stale info"
    if exact:
        return [(h.info.id, h.text_rank, h.vector_rank, [k.keyword.id for k in h.keywords],
                 [round(x, 4) if x is not None else None for x in (h.score, h.bm25, h.vector)]) for h in hits]
    if mode == "bm25":  # which infos the text matches; tantivy's statistics may differ (see docs/testing.md)
        return sorted(h.info.id for h in hits if h.bm25 is not None)
    if mode == "vector":
        return {h.info.id: h.vector for h in hits}
    return sorted(h.info.id for h in hits)


def _assert_close(what: str, got: Any, expected: Any) -> None:
    if isinstance(expected, dict) and isinstance(got, dict) and set(got) == set(expected):
        for key, value in expected.items():
            other = got[key]
            both = value is not None and other is not None
            if (both and not math.isclose(other, value, abs_tol=SCORE_TOLERANCE)) or (not both and other != value):
                raise AssertionError(f"{what} differ for {key}: {other!r} != expected {value!r}")
        return
    _assert_same(what, got, expected)


def _assert_answers_alike(label: str, copy: KeywordTree, kept: KeywordTree, queries: Sequence[str] | None,
                          modes: Sequence[str], exact: bool) -> None:
    """``copy`` (described by ``label``) gives ``kept``'s public reads, searches and recall."""
    kids, iids = known_ids(kept)
    expected = public_reads(kept, kids, iids)
    _assert_same(f"public reads {label}", public_reads(copy, kids, iids), expected)
    for query in queries if queries is not None else _default_queries(expected):
        _assert_same(f"search({query!r}) {label}", copy.search(query), kept.search(query))
        for mode in modes:
            _assert_close(f"recall({query!r}, mode={mode!r}) {label}",
                          _recall_view(copy, query, mode, exact), _recall_view(kept, query, mode, exact))
        if exact:
            _assert_same(f"context({query!r}) {label}", copy.context(query), kept.context(query))


def _drained(tree: KeywordTree, who: str, timeout: float) -> KeywordTree:
    if not tree.wait_indexed(timeout):
        raise AssertionError(f"{who} did not finish embedding within {timeout} s "
                             f"(outbox: {tree.outbox_status()})")
    return tree


def assert_caches_rebuildable(tree: KeywordTree, queries: Sequence[str] | None = None, *, exact: bool = False,
                              modes: Sequence[str] = RECALL_MODES, timeout: float = 60.0,
                              damages: Sequence[Sequence[tuple[str, str]]] = (), **open_options: Any) -> None:
    """DESIGN §4.4, indexes are caches: a copy of ``tree``'s directory without its caches
    (``cache/``: the full-text and vector indexes, the checkpoint; the outbox) answers like a
    copy with them. ``tree`` is drained first (``wait_indexed(timeout)``), then copied; both
    copies are opened writable (so their embedding worker runs) and drained likewise;
    then they must give the same public reads, the same ``search(query)`` for every query,
    and per recall mode the same infos: bm25 the same infos matching the text, vector the same
    infos with the same similarity, hybrid the same infos. ``exact=True`` also compares every
    rank and score and ``context(query)``. ``queries`` default to keyword names and the first
    words of each info; ``modes`` are the recall modes compared.

    ``damages``: plans of damage to the caches, each a list of (file, how) pairs as
    ``cache_files`` and ``damage_cache_file`` take them (``cache_damages`` draws plans). Each
    plan is done to one more copy with the caches, which must then answer like the copy whose
    caches are intact: a damaged cache is rebuilt or worked around, never searched as it is.

    The copies live in a temporary directory, removed at the end: the tree's own files are
    never touched. Call it with no write in flight; ``open_options`` go to every open (e.g. the
    ``embedder`` the tree uses)."""
    options = {"durability": "none", **open_options}
    # The tree's own worker first: a copy taken while it holds leases on the outbox's items
    # would wait them out (a worker serving another directory never finishes them).
    _drained(tree, "the tree", timeout)
    work = Path(tempfile.mkdtemp(prefix="kwtree-caches-"))
    try:
        kept_dir = _copy_directory(tree.data_dir, work / "kept", caches=True)
        rebuilt_dir = _copy_directory(tree.data_dir, work / "rebuilt", caches=False)
        with KeywordTree(kept_dir, **options) as kept:
            _drained(kept, "the copy with its caches", timeout)
        copies = [("without caches", rebuilt_dir)]
        for n, plan in enumerate(damages):
            damaged_dir = _copy_directory(kept_dir, work / f"damaged-{n}", caches=True)
            for name, how in plan:
                damage_cache_file(damaged_dir, name, how)
            what = ", ".join(f"{name} {how}" for name, how in plan)
            copies.append((f"with damaged caches ({what})", damaged_dir))
        for label, directory in copies:
            # A fresh open of the intact copy for each: searches change what a tree's MRU offers first.
            with KeywordTree(kept_dir, **options) as kept, KeywordTree(directory, **options) as copy:
                _assert_answers_alike(label, _drained(copy, f"the copy {label}", timeout), kept, queries, modes, exact)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- merged logs ----------------------------------------------------------------------------------


class LoggedOperation(NamedTuple):
    """One whole operation of a log: its op id and its rows (bytes, newlines included)."""

    op_id: str
    rows: bytes


def log_operations(data_dir: str | Path) -> list[LoggedOperation]:
    """The whole operations of a directory's log, in file order (segments in name order;
    preallocated padding and a torn tail left out). An operation ends at a row with ``end``."""
    found: list[LoggedOperation] = []
    for segment in sorted((Path(data_dir) / "log").glob("*.jsonl")):
        pending: list[bytes] = []
        for line in segment.read_bytes().split(b"\0", 1)[0].splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # a torn last line
            row = orjson.loads(line)
            pending.append(line)
            if "end" in row:
                found.append(LoggedOperation(row["op"], b"".join(pending)))
                pending = []
    return found


def write_log(target: Path, manifest_from: Path, ops: Sequence[LoggedOperation]) -> Path:
    """A new data directory whose log is one segment holding ``ops`` in the given order."""
    (target / "log").mkdir(parents=True)
    shutil.copyfile(manifest_from / "manifest.json", target / "manifest.json")
    name = min(op.op_id for op in ops)
    (target / "log" / f"{name}.jsonl").write_bytes(b"".join(op.rows for op in ops))
    return target


def _directory(fork: KeywordTree | str | Path) -> Path:
    return fork.data_dir if isinstance(fork, KeywordTree) else Path(fork)


def merge_orders(ops_a: list[LoggedOperation], ops_b: list[LoggedOperation], shuffles: int,
                 rng: random.Random, duplicates: bool) -> dict[str, list[LoggedOperation]]:
    """The line orders a merge of two forks' logs may take: op-id order, A then B and B then A
    (the operations both forks share twice when ``duplicates``), and ``shuffles`` shuffles."""
    shared = {op.op_id for op in ops_a} & {op.op_id for op in ops_b}
    rows_a = {op.op_id: op.rows for op in ops_a}
    for op in ops_b:
        if op.op_id in shared and rows_a[op.op_id] != op.rows:
            raise AssertionError(f"operation {op.op_id} has other rows in the two forks: not forks of one log")
    new_b = [op for op in ops_b if op.op_id not in shared]
    once = ops_a + new_b
    union = ops_a + (ops_b if duplicates else new_b)
    orders = {"op-id order": sorted(once), "A then B": union,
              "B then A": (ops_b if duplicates else new_b) + ops_a}
    for n in range(shuffles):
        shuffled = list(union)
        rng.shuffle(shuffled)
        orders[f"shuffle {n}"] = shuffled
    return orders


def assert_merge_converges(fork_a: KeywordTree | str | Path, fork_b: KeywordTree | str | Path, *,
                           shuffles: int = 3, rng: random.Random | None = None, duplicates: bool = True) -> None:
    """DESIGN §4.3: two forks of one log (copies of a directory, each written on its own), merged
    by taking the union of their operations in any line order, replay to one deterministic
    state: the op-id order, A then B, B then A and ``shuffles`` random orders (from ``rng``)
    all give equal public reads about every keyword and info either fork wrote, the last op id
    is the newest of both, and the state passes ``assert_tree_shape`` (no cycle, nothing live
    unreachable, dead-ended links inert). With ``duplicates`` the operations both forks share
    appear twice, as a plain concatenation of the files gives them. Forks given as open trees
    are read from their directories (close them first for durability="full" trees, or let
    them be: padding is skipped)."""
    dir_a, dir_b = _directory(fork_a), _directory(fork_b)
    ops_a, ops_b = log_operations(dir_a), log_operations(dir_b)
    orders = merge_orders(ops_a, ops_b, shuffles, rng or random.Random(0), duplicates)
    newest = max(op.op_id for op in ops_a + ops_b)
    work = Path(tempfile.mkdtemp(prefix="kwtree-merge-"))
    try:
        first: tuple[str, dict[str, Any]] | None = None
        ids: tuple[list[str], list[str]] | None = None
        for n, (label, ops) in enumerate(orders.items()):
            with KeywordTree(write_log(work / f"merged-{n}", dir_a, ops), read_only=True) as view:
                if ids is None:
                    ids = known_ids(view)
                try:
                    assert_tree_shape(view, *ids)
                except AssertionError as exc:
                    raise AssertionError(f"merged in {label}: {exc}") from exc
                assert view.last_op_id == newest, f"merged in {label}: last_op_id {view.last_op_id} != {newest}"
                reads = public_reads(view, *ids)
            if first is None:
                first = (label, reads)
            else:
                _assert_same(f"the merge in {label} and in {first[0]}: public reads", reads, first[1])
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- strategies -----------------------------------------------------------------------------------

#: Names that collide after normalisation (case, full width, punctuation, spaces, ß/ss,
#: ligatures, roman numerals) next to names that must stay distinct ("C++", "C#").
NAMES = [
    "Py", "py", "Ｐｙ", "p-y", "P y", "北京", "北 京", "北京。", "Go", "go!", "Straße", "STRASSE",
    "ﬁ", "fi", "C++", "C#", "Ⅸ", "ix",
]
#: Words infos are made of: English, Chinese, Japanese, so that full text and vectors both see
#: matches and misses.
WORDS = ["cats", "purr", "python", "packaging", "tips", "coffee", "beans", "jazz", "rust", "borrow",
         "北京", "大学", "東京", "タワー", "memo", "notes"]


def names() -> st.SearchStrategy[str]:
    """Valid keyword names: mostly from ``NAMES`` (which collide after normalisation, so
    duplicate-name refusals happen), otherwise short runs of letters and digits."""
    plain = st.text(st.characters(categories=("Lu", "Ll", "Lo", "Nd")), min_size=1, max_size=12)
    return st.one_of(st.sampled_from(NAMES), plain.filter(lambda s: normalize_name(s) != ""))


def contents() -> st.SearchStrategy[str]:
    """Info texts: one to eight words of ``WORDS``."""
    return st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)


def infos() -> st.SearchStrategy[dict[str, Any]]:
    """Specs of infos, as ``create_info(**spec)`` and ``batch_create_infos([spec, ...])`` take
    them: content, source and (sometimes) metadata."""
    metadata = st.dictionaries(st.sampled_from(["k", "n"]), st.one_of(st.integers(-2, 2), st.sampled_from(["x", ""])),
                               max_size=2)
    return st.fixed_dictionaries({"content": contents(), "source": st.sampled_from(["", "chat", "doc"])},
                                 optional={"metadata": metadata})


class Step(NamedTuple):
    """One public write to play with ``apply_step``: ``action`` names it; ``x``, ``y``, ``z``
    pick its targets (modulo the known ids) and its values. Steps whose targets are gone or
    invalid make the call raise a KwtreeError, which ``apply_step`` expects."""

    action: str
    x: int
    y: int
    z: int


#: Every action a Step may name: each public write of KeywordTree, and undo.
ACTIONS = ("create", "move", "delete", "rename", "describe", "merge", "info", "link", "unlink",
           "relate", "unrelate", "delete_info", "update_info", "undo", "alias", "unalias",
           "batch_keywords", "batch_infos")


def operations(actions: Sequence[str] = ACTIONS) -> st.SearchStrategy[Step]:
    """One ``Step`` naming one of ``actions``."""
    pick = st.integers(0, 63)
    return st.builds(Step, st.sampled_from(list(actions)), pick, pick, pick)


def operation_sequences(min_size: int = 0, max_size: int = 30,
                        actions: Sequence[str] = ACTIONS) -> st.SearchStrategy[list[Step]]:
    """Lists of ``Step``s to play one after another with ``apply_step``."""
    return st.lists(operations(actions), min_size=min_size, max_size=max_size)


#: An id no entity has: a step that picks from an empty list targets it (and is refused).
UNKNOWN_ID = "0123456789abcdef0123456789abcdef"


def apply_step(tree: KeywordTree, step: Step, keyword_ids: list[str], info_ids: list[str]) -> bool:
    """Play ``step`` on ``tree``; new keyword and info ids are appended to ``keyword_ids`` /
    ``info_ids`` (the lists the step's indexes pick from; put ROOT_ID in ``keyword_ids``).
    Returns False if kwtree refused the call (a KwtreeError: it wrote nothing), True if it ran."""
    action, x, y, z = step

    def pick(seq: list[str], i: int) -> str:
        return seq[i % len(seq)] if seq else UNKNOWN_ID

    name = NAMES[z % len(NAMES)]
    try:
        if action == "create":
            keyword_ids.append(tree.create_keyword(name, pick(keyword_ids, x)).id)
        elif action == "move":
            tree.move_keyword(pick(keyword_ids, x), pick(keyword_ids, y))
        elif action == "delete":
            tree.delete_keyword(pick(keyword_ids, x), cascade=True, info_policy=("reattach", "delete", "keep")[z % 3])
        elif action in ("rename", "describe"):
            k = tree.get_keyword(pick(keyword_ids, x))
            patch = {"name": name} if action == "rename" else {"description": f"d{z}"}
            tree.update_keyword(k.id, patch, k.version)
        elif action == "merge":
            tree.merge_keywords(pick(keyword_ids, x), pick(keyword_ids, y))
        elif action == "info":
            note = tree.create_info(f"note {WORDS[z % len(WORDS)]} {z}", keyword_ids=[pick(keyword_ids, x)])
            info_ids.append(note.id)
        elif action == "link":
            tree.link_info(pick(info_ids, x), pick(keyword_ids, y), list(RelationType)[z % 4])
        elif action == "unlink":
            tree.unlink_info(pick(info_ids, x), pick(keyword_ids, y))
        elif action == "relate":
            tree.relate(pick(keyword_ids, x), pick(keyword_ids, y), ("related_to", "part_of")[z % 2],
                        weight=1.0 + z % 3)
        elif action == "unrelate":
            tree.unrelate(pick(keyword_ids, x), pick(keyword_ids, y))
        elif action == "delete_info":
            tree.delete_info(pick(info_ids, x))
        elif action == "update_info":
            tree.update_info(pick(info_ids, x), {"content": f"edited {WORDS[z % len(WORDS)]} {z}"})
        elif action == "alias":
            tree.add_alias(pick(keyword_ids, x), name)
        elif action == "unalias":
            keyword = tree.get_keyword(pick(keyword_ids, x))
            tree.remove_alias(keyword.id, keyword.aliases[z % len(keyword.aliases)] if keyword.aliases else name)
        elif action == "batch_keywords":
            keyword_ids.extend(k.id for k in tree.batch_create_keywords([
                {"name": name, "parent_id": pick(keyword_ids, x), "ref": "head"},
                {"name": NAMES[(z + 1) % len(NAMES)], "parent_ref": "head"}]))
        elif action == "batch_infos":
            info_ids.extend(i.id for i in tree.batch_create_infos([
                {"content": f"batch {WORDS[(z + n) % len(WORDS)]}", "keyword_ids": [pick(keyword_ids, x)]}
                for n in range(2)]))
        elif action == "undo":
            last = tree.last_op_id
            if last is None:
                return False
            tree.undo(last)
        else:
            raise ValueError(f"unknown action {action!r}; one of {ACTIONS}")
    except KwtreeError:
        return False
    return True


# --- the state machine ----------------------------------------------------------------------------


class KwtreeStateMachine(RuleBasedStateMachine):
    """A hypothesis state machine over one real tree in a temporary directory.

    Rules: ``write`` plays a drawn ``Step`` (valid or refused), ``reopen`` checks
    ``assert_replay_equivalent``; the invariant checks ``assert_tree_shape`` after every step;
    teardown checks the reopen once more, closes the tree and removes the directory. Subclass
    it, add ``@rule`` methods that call your code on ``self.tree`` (append ids you create to
    ``self.keyword_ids`` / ``self.info_ids``), and set ``open_options`` (passed to
    KeywordTree, e.g. an ``embedder``). Run it with ``TestMine = MyMachine.TestCase``."""

    open_options: ClassVar[dict[str, Any]] = {"durability": "none"}

    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="kwtree-machine-"))
        self.tree = KeywordTree(self.base / "tree", **self.open_options)
        self.keyword_ids: list[str] = [ROOT_ID]
        self.info_ids: list[str] = []

    @rule(step=operations())
    def write(self, step: Step) -> None:
        apply_step(self.tree, step, self.keyword_ids, self.info_ids)

    @rule()
    def reopen(self) -> None:
        assert_replay_equivalent(self.tree, self.keyword_ids, self.info_ids)

    @invariant()
    def is_a_tree(self) -> None:
        assert_tree_shape(self.tree, self.keyword_ids, self.info_ids)

    def teardown(self) -> None:
        try:
            assert_replay_equivalent(self.tree, self.keyword_ids, self.info_ids)
        finally:
            self.tree.close()
            shutil.rmtree(self.base, ignore_errors=True)
