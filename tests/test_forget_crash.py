"""forget killed by SIGKILL: a real writer process dies at each step of a forget — after the
forget operation is durable, in the middle of writing the new log generation, after it is
written but before the swap, after the swap, while the caches are purged — and at random
moments. Each time the directory holds either the old log or the new one (both valid, with
the forgotten entities already gone from the live view once the forget operation was
written); verify's only error is ``forget-unfinished`` while the old log still holds the
text, and running forget again — or only opening the tree for writing — finishes the job:
no byte under the directory holds the text.

To stop the child at an exact step, the child script (this file, run as a program) wraps
the module function that begins that step so that it first prints ``P <step>`` and waits;
the parent SIGKILLs it there. The code that runs is kwtree's own; only the pause is added.
"""

from __future__ import annotations

import random
import select
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from test_forget import abstracted_secret, holders, live_view, secret_tree

import kwtree
from kwtree import KeywordTree
from kwtree.cli.main import main

HERE = Path(__file__)
#: step -> (module, function, pause before or after it, at its n-th call)
STEPS = {
    "committed": ("kwtree.ops.erasure", "erase_log", "before", 1),
    "rewriting": ("kwtree.stores.logswap", "write_segment", "after", 1),  # in log.compacting/, mid-rewrite
    "written": ("kwtree.stores.logswap", "swap_in", "before", 1),
    "swapped": ("kwtree.stores.logswap", "swap_in", "after", 1),
    "purging": ("kwtree.caches.vector_projection", "erase_vectors", "before", 1),
}
#: The steps of a forget whose log rewrite finds a live abstract quoting an older text: the
#: second forget operation is being decided, then it is durable and the rewrite runs again.
QUOTING_STEPS = {
    "deciding-second": ("kwtree.facade.forget_calls", "revise_survivors", "before", 1),
    "second-committed": ("kwtree.ops.erasure", "erase_log", "before", 2),
}
#: Steps after which the log is the new one.
NEW_LOG = {"swapped", "purging"}
#: Moments inside the purge and rebuild of the full-text index, each the first file-system
#: change of that kind under ``cache/fulltext``: the child stops right after it.
FULLTEXT_MOMENTS = {
    "fulltext-removing": ("unlink", "/fulltext/index/"),  # a file of tantivy's, mid-removal
    "fulltext-folder": ("mkdir", "/fulltext/index"),  # the rebuilt index's folder exists
    "fulltext-meta": ("replace", "/fulltext/"),  # kwtree's meta.json is written
}


def _pause_at_fulltext_moment(step: str) -> None:
    """Wrap os's file-system calls so that the child prints ``P <step>`` and waits after the
    first call of the moment's kind whose path matches (rmtree passes names relative to a
    directory descriptor; /proc names the directory)."""
    import os

    kind, where = FULLTEXT_MOMENTS[step]
    real = getattr(os, kind)

    def paused(path: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(path, *args, **kwargs)
        dir_fd = kwargs.get("dir_fd") or kwargs.get("src_dir_fd")
        full = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path) if dir_fd is not None else str(path)
        if where in full:
            print("P", step, flush=True)
            sys.stdin.readline()  # killed here
        return result

    setattr(os, kind, paused)


def _child(directory: str, step: str, kind: str, target: str) -> None:
    import importlib

    if step in STEPS or step in QUOTING_STEPS:
        module_name, name, when, nth = {**STEPS, **QUOTING_STEPS}[step]
        module = importlib.import_module(module_name)
        real = getattr(module, name)
        calls = [0]

        def paused(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if when == "before" and calls[0] == nth:
                print("P", step, flush=True)
                sys.stdin.readline()  # killed here
            result = real(*args, **kwargs)
            if when == "after" and calls[0] == nth:
                print("P", step, flush=True)
                sys.stdin.readline()
            return result

        setattr(module, name, paused)
    tree = KeywordTree(directory, worker=False)
    if step in FULLTEXT_MOMENTS:
        _pause_at_fulltext_moment(step)
    print("B", flush=True)
    if kind == "scope":
        tree.forget(scope=target)
    else:
        tree.forget(target)
    tree.close()
    print("done", flush=True)
    sys.stdin.readline()  # the parent kills a child that finished too


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], dict[str, Any]]:
    """A tree full of SECRET, and the live view a finished forget of alice's scope leaves."""
    base = tmp_path_factory.mktemp("forget") / "base"
    tree, ids = secret_tree(base)
    tree.close()
    reference = shutil.copytree(base, base.parent / "reference")
    done = KeywordTree(reference, worker=False)
    done.forget(scope="user:alice")
    expected = live_view(done)
    done.close()
    return base, ids, expected


def _kill_at(children: Any, directory: Path, step: str, kind: str, target: str) -> None:
    """Run a forget of ``target`` (``kind``) in a child on ``directory`` and SIGKILL it at ``step``."""
    child = children(str(HERE), directory, step, kind, target)
    child.expect("B")
    child.expect(f"P {step}")
    child.kill()


def _verifies(directory: Path, *, unfinished: bool | None) -> None:
    """verify finds no error but ``forget-unfinished``, and that one exactly when the log's
    erasure did not finish (``unfinished``; None: either)."""
    report = kwtree.verify_directory(directory)
    codes = {finding.code for finding in report.errors}
    assert codes <= {"forget-unfinished"}, report.to_text()
    assert unfinished is None or bool(codes) == unfinished, report.to_text()


def _after_the_kill(directory: Path, expected: dict[str, Any], kind: str, target: str) -> None:
    """A killed forget left a valid directory; forget again finishes the erasure."""
    _verifies(directory, unfinished=None)
    again = KeywordTree(directory, worker=False)
    done = again.forget(scope=target) if kind == "scope" else again.forget(target)
    assert done.already_forgotten_by is not None or done.op_id is not None
    assert live_view(again) == expected
    again.close()
    assert holders(directory) == []
    assert kwtree.verify_directory(directory).ok


@pytest.mark.parametrize("kind", ["scope", "keyword"])
@pytest.mark.parametrize("step", list(STEPS))
def test_a_forget_killed_at_each_step_leaves_a_valid_log_and_a_rerun_finishes(
        prepared: tuple[Path, dict[str, str], dict[str, Any]], tmp_path: Path, children, step: str,
        kind: str) -> None:
    base, ids, expected = prepared
    directory = shutil.copytree(base, tmp_path / "tree")
    # Alice's scope holds one keyword: forgetting the scope keyword by id erases the same.
    target = "user:alice" if kind == "scope" else ids["alice"]
    _kill_at(children, directory, step, kind, target)
    _verifies(directory, unfinished=step not in NEW_LOG)
    view = KeywordTree(directory, read_only=True)
    assert live_view(view) == expected  # the forget operation was durable before every step
    assert view.history()[-1].kind == "forget"
    view.close()
    in_log = any("/log/" in path for path in holders(directory))
    assert in_log == (step not in NEW_LOG), f"after {step} the log should be the {'new' if in_log else 'old'} one"
    _after_the_kill(directory, expected, kind, target)


@pytest.mark.parametrize(("step", "how"), [("committed", "open"), ("rewriting", "open"),
                                           ("rewriting", "kwtree repair")])
def test_the_next_writable_open_finishes_an_erasure_a_kill_interrupted(
        prepared: tuple[Path, dict[str, str], dict[str, Any]], tmp_path: Path, children, step: str, how: str) -> None:
    """The forget operation is durable, the text is still in the log and nobody was told:
    verify names the operation, a read-only open changes nothing, and the next writable open
    alone finishes the erasure (log, quarantine, caches, outbox); so does ``kwtree repair``."""
    base, _, expected = prepared
    directory = shutil.copytree(base, tmp_path / "tree")
    _kill_at(children, directory, step, "scope", "user:alice")
    with KeywordTree(directory, read_only=True) as view:
        forget_op = view.history()[-1]
        assert forget_op.kind == "forget" and live_view(view) == expected
    found = [f for f in kwtree.verify_directory(directory).errors if f.code == "forget-unfinished"]
    assert len(found) == 1 and forget_op.op_id in found[0].message, found
    assert any("/log/" in path for path in holders(directory))
    if how == "open":
        with KeywordTree(directory, worker=False) as tree:  # nothing but an open
            assert live_view(tree) == expected
    else:
        assert main(["repair", str(directory)]) == 0
    assert holders(directory) == []
    assert kwtree.verify_directory(directory).ok


@pytest.mark.parametrize("step", list(FULLTEXT_MOMENTS))
def test_a_forget_killed_while_it_rebuilds_the_fulltext_index_leaves_a_valid_directory(
        prepared: tuple[Path, dict[str, str], dict[str, Any]], tmp_path: Path, children, step: str) -> None:
    """The full-text index is removed and created so that a kill at any moment leaves it
    whole or absent, never an index that verify (and a reader) finds broken."""
    base, _, expected = prepared
    directory = shutil.copytree(base, tmp_path / "tree")
    _kill_at(children, directory, step, "scope", "user:alice")
    _verifies(directory, unfinished=False)
    _after_the_kill(directory, expected, "scope", "user:alice")


@pytest.mark.parametrize("seed", range(3))
def test_a_forget_killed_at_a_random_moment_is_finished_by_a_rerun(
        prepared: tuple[Path, dict[str, str], dict[str, Any]], tmp_path: Path, children, seed: int) -> None:
    base, _, expected = prepared
    directory = shutil.copytree(base, tmp_path / "tree")
    original = KeywordTree(base, read_only=True)
    before = live_view(original)
    original.close()
    child = children(str(HERE), directory, "none", "scope", "user:alice")
    child.expect("B")
    # Kill the child when its next line arrives or after a random wait, whichever is first.
    select.select([child.proc.stdout], [], [], random.Random(seed).uniform(0.0, 0.15))
    child.kill()
    _verifies(directory, unfinished=None)
    view = KeywordTree(directory, read_only=True)
    assert live_view(view) in (before, expected)  # the forget operation happened whole or not at all
    committed = view.history()[-1].kind == "forget"
    view.close()
    if not committed:
        assert any("/log/" in path for path in holders(directory))
    _after_the_kill(directory, expected, "scope", "user:alice")


@pytest.mark.parametrize("step", list(QUOTING_STEPS))
def test_a_forget_killed_around_its_second_operation_is_finished_by_a_rerun(tmp_path: Path, children,
                                                                             step: str) -> None:
    directory = tmp_path / "tree"
    tree, ids = abstracted_secret(directory)
    tree.update_info(ids["info"], {"content": "Alice orders a flat white every morning."})
    elsewhere = tree.create_keyword("Elsewhere", parent_id=kwtree.ROOT_ID, llm_auto_place=False)
    tree.link_info(ids["info"], elsewhere.id)
    tree.unlink_info(ids["info"], ids["drinks"])  # Drinks' live abstract quotes the older text
    tree.close()
    _kill_at(children, directory, step, "info", ids["info"])
    _verifies(directory, unfinished=True)
    again = KeywordTree(directory, worker=False)
    report = again.forget(ids["info"])
    assert report.already_forgotten_by is not None
    assert "kwtree:abstract" not in again.get_keyword(ids["drinks"]).metadata
    again.close()
    assert holders(directory) == []
    assert kwtree.verify_directory(directory).ok


if __name__ == "__main__":
    _child(*sys.argv[1:5])
