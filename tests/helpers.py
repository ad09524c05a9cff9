"""Test helpers: a snapshot of every public read, and small tree builders."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kwtree import KeywordTree, KwtreeError, RelationType


def _read(call, *args: Any) -> Any:
    """The value of a public read, or the error type and message it raised."""
    try:
        return call(*args)
    except KwtreeError as exc:
        return ("error", type(exc).__name__, str(exc))


def snapshot(tree: KeywordTree, keyword_ids: Iterable[str] = (), info_ids: Iterable[str] = ()) -> dict[str, Any]:
    """Every public read of ``tree`` about the given ids, plus everything reachable from the
    root, as plain values that compare with ==. Two trees with equal snapshots answer every
    public read about those entities the same way."""
    kids = {"root"}
    kids.update(keyword_ids)
    stack = ["root"]
    while stack:  # everything reachable from the root
        for child in tree.get_children(stack.pop()):
            kids.add(child.id)
            stack.append(child.id)
    iids = set(info_ids)
    for kid in list(kids):
        for info in _read(tree.get_infos_of_keyword, kid, None, 0, 10_000) or []:
            if not isinstance(info, str):
                iids.add(info.id)
    snap: dict[str, Any] = {"keywords": {}, "infos": {}, "names": {}}
    names: set[str] = set()
    for kid in sorted(kids):
        keyword = _read(tree.get_keyword, kid)
        entry: dict[str, Any] = {"keyword": keyword}
        if not isinstance(keyword, tuple):
            names.add(keyword.name)
            names.update(keyword.aliases)
            entry["children"] = [k.id for k in tree.get_children(kid)]
            entry["path"] = [k.id for k in tree.get_path(kid)]
            entry["infos"] = [i.id for i in tree.get_infos_of_keyword(kid, None, 0, 10_000)]
            for relation in RelationType:
                entry[f"infos_{relation.value}"] = [i.id for i in tree.get_infos_of_keyword(kid, relation, 0, 10_000)]
            entry["relations"] = sorted(
                (r.from_id, r.to_id, r.type, r.weight, r.reason, r.version) for r in tree.get_relations(kid, direction="both")
            )
        snap["keywords"][kid] = entry
    for iid in sorted(iids):
        info = _read(tree.get_info, iid)
        entry = {"info": info}
        if not isinstance(info, tuple):
            entry["keywords"] = [(k.id, r.value) for k, r in tree.get_keywords_of_info(iid)]
        snap["infos"][iid] = entry
    for name in sorted(names):
        snap["names"][name] = [k.id for k in tree.find_keywords(name)]
    metrics = tree.tree_metrics()
    snap["metrics"] = {k: v for k, v in metrics.items() if k not in ("log_bytes", "log_segments")}
    snap["last_op_id"] = tree.last_op_id
    return snap


def copy_tree_dir(source: Path, target: Path) -> Path:
    """Copy a data directory (log, manifest) without its lock file."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("lock"))
    return target


def dir_bytes(directory: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and directory (None) under ``directory``: equal before and
    after something means it created, changed and removed nothing there."""
    return {str(path.relative_to(directory)): None if path.is_dir() else path.read_bytes()
            for path in sorted(directory.rglob("*"))}


def log_bytes(data_dir: Path) -> bytes:
    """The concatenated log segments of a directory, padding included."""
    return b"".join(p.read_bytes() for p in sorted((data_dir / "log").glob("*.jsonl")))


def child_line(proc: subprocess.Popen[str], hang: float) -> str:
    """The next line a child process prints (without its newline); an AssertionError with
    its exit code and stderr if it exits first."""
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        proc.wait(hang)
        raise AssertionError(f"child exited ({proc.returncode}) early: {proc.stderr.read()}")  # type: ignore[union-attr]
    return line.rstrip("\n")
