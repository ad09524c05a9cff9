"""forget and the trees that may not write: read-only trees and ``as_of`` views search a
private full-text index of their own whenever the shared one does not reflect their state.
After a ``forget`` no file kwtree made anywhere answers a query for the forgotten text (even
one a reader killed by SIGKILL could have left), and a live reader that catches up with the
forget answers exactly as a reader opened after it. Real processes, real SIGKILL, real tantivy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kwtree import KeywordTree
from kwtree.stores.fulltext import FullTextIndex

WORD = "zanzibarquux"  # the forgotten text's rarest word
SECRET = f"Alice orders a {WORD} ristretto at nine"


def tantivy_indexes(root: Path) -> list[Path]:
    """Every kwtree full-text index directory (``meta.json`` beside ``index/``) under ``root``."""
    return sorted(meta.parent for meta in root.rglob("meta.json") if (meta.parent / "index").is_dir())


def writer_with_a_secret(tree_dir: Path) -> tuple[KeywordTree, str, str]:
    """An open writer holding SECRET and a kept info sharing its word, whose shared full-text
    index does not reflect its state (it never searched): a reader must index privately."""
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    secret = tree.create_info(SECRET)
    kept = tree.create_info(f"Bob likes {WORD} tea")
    tree.batch_create_infos([{"content": f"memory number {n} about the weather"} for n in range(20)])
    return tree, secret.id, kept.id


READER = """
    import os, sys
    os.environ["TMPDIR"] = sys.argv[2]  # where a private index would go
    from kwtree import KeywordTree
    view = sys.argv[3]
    tree = KeywordTree(sys.argv[1], read_only=True) if view == "read_only" else KeywordTree(sys.argv[1], as_of=view)
    print("found", sorted(hit.info.id for hit in tree.recall(sys.argv[4])), flush=True)
    sys.stdin.readline()
"""


@pytest.mark.parametrize("view", ["read_only", "as_of"])
def test_a_reader_killed_by_sigkill_leaves_no_index_that_finds_forgotten_text(
        tree_dir: Path, tmp_path: Path, children, view: str) -> None:
    tree, secret, kept = writer_with_a_secret(tree_dir)
    temp = tmp_path / "temp"
    temp.mkdir()
    reader = children(READER, tree_dir, temp, view if view == "read_only" else tree.last_op_id, WORD)
    assert reader.readline() == f"found {sorted([secret, kept])}"
    reader.kill()
    report = tree.forget(secret)  # another process than the reader's
    assert secret in report.infos
    open_trees = next(far for far in report.unreachable if far.what == "open trees")
    assert "private full-text index" in open_trees.how and "none of them keeps it on disk" in open_trees.how
    for directory in tantivy_indexes(temp):
        index = FullTextIndex(directory, writable=False)
        assert secret not in [entity_id for entity_id, _ in index.search(WORD, "info", 10)], directory
        index.close()
    assert sorted(temp.rglob("*")) == []  # nothing kwtree made is left in the temporary directory
    tree.close()


LIVE_READER = """
    import sys
    from kwtree import KeywordTree

    def found(tree):
        return sorted((hit.info.id, hit.bm25) for hit in tree.recall(sys.argv[2], mode="bm25"))

    tree = KeywordTree(sys.argv[1], read_only=True)
    print("before", found(tree), flush=True)
    sys.stdin.readline()
    tree.refresh()
    print("refreshed", found(tree), flush=True)
    fresh = KeywordTree(sys.argv[1], read_only=True)
    print("fresh", found(fresh), flush=True)
"""


def test_a_live_reader_that_catches_up_with_a_forget_answers_as_one_opened_after_it(
        tree_dir: Path, children) -> None:
    tree, secret, kept = writer_with_a_secret(tree_dir)
    reader = children(LIVE_READER, tree_dir, WORD)
    assert {entity_id for entity_id, _ in eval(reader.expect("before ")[7:])} == {secret, kept}
    tree.forget(secret)
    reader.send("go")
    refreshed = eval(reader.expect("refreshed ")[10:])
    fresh = eval(reader.expect("fresh ")[6:])
    assert [entity_id for entity_id, _ in refreshed] == [kept]
    # The same scores too: a forgotten document left in the reader's index (deleted, not yet
    # merged away) would still count in the word's document frequency, i.e. still be there.
    assert refreshed == fresh
    reader.finish()
    tree.close()
