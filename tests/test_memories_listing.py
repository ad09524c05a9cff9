"""Listing memories by what they are (issue 27): ``KeywordTree.list_memories`` and ``kwtree
memories`` filter a scope's memories (or every scope's) by category, keyword, when they
happened and were recorded, metadata and text, and page them saying how many remain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kwtree import CommitOptions, InvalidInputError, KeywordTree, NotFoundError


def _tree(path: Path) -> KeywordTree:
    tree = KeywordTree(path, durability="none", embed_async=False)
    said = [("user:ana", "s1", "2022-03-01", "I live in Boston and I work as a nurse."),
            ("user:ana", "s2", "2023-06-01", "I moved to Denver. I'm vegetarian."),
            ("user:bo", "s1", "2023-07-01", "I live in Oslo. I love green tea.")]
    for scope, session, day, text in said:
        tree.commit_session([{"role": "user", "content": text}], session_id=session, scope=scope,
                            options=CommitOptions(session_time=day))
    return tree


def _texts(page: object) -> list[str]:
    return [listed.info.content for listed in page.memories]  # type: ignore[attr-defined]


@pytest.fixture
def tree(tmp_path: Path) -> KeywordTree:
    with _tree(tmp_path / "m") as opened:
        yield opened


def test_every_filter_keeps_only_what_it_names(tree: KeywordTree) -> None:
    everything = tree.list_memories(limit=1000)
    assert {listed.scope for listed in everything.memories} == {"user:ana", "user:bo"}
    assert everything.total == len(everything.memories) and everything.remaining == 0
    ana = tree.list_memories("user:ana", limit=1000)
    assert {listed.scope for listed in ana.memories} == {"user:ana"} and ana.total < everything.total
    homes = tree.list_memories("user:ana", where={"key": "home"})
    assert _texts(homes) == ["I live in Boston", "I moved to Denver."]
    assert _texts(tree.list_memories("user:ana", where={"key": "home"}, include_superseded=False)) == [
        "I moved to Denver."]
    assert _texts(tree.list_memories("user:ana", where={"key": "home"}, newest_first=True)) == [
        "I moved to Denver.", "I live in Boston"]
    assert all(listed.info.metadata["category"] == "profile"
               for listed in tree.list_memories(category="profile", limit=1000).memories)
    assert _texts(tree.list_memories(text="GREEN TEA")) == ["I love green tea."]
    in_2023 = tree.list_memories("user:ana", since="2023-01-01", until="2023-12-31", limit=1000)
    assert in_2023.total > 0 and all("Denver" in text or "vegetarian" in text for text in _texts(in_2023))
    assert tree.list_memories(recorded_until="2000-01-01").total == 0
    assert tree.list_memories(recorded_since="2000-01-01", limit=1000).total == everything.total
    bo = tree.scope_keyword("user:bo")
    assert bo is not None
    under_bo = tree.list_memories(under=bo.id, limit=1000)
    assert under_bo.total > 0 and {listed.scope for listed in under_bo.memories} == {"user:bo"}


def test_pages_say_how_many_remain(tree: KeywordTree) -> None:
    total = tree.list_memories(limit=1000).total
    first, second = tree.list_memories(limit=2), tree.list_memories(offset=2, limit=2)
    assert (first.total, first.offset, first.remaining) == (total, 0, total - 2)
    assert (second.offset, second.remaining) == (2, max(0, total - 4))
    assert not {m.info.id for m in first.memories} & {m.info.id for m in second.memories}
    assert tree.list_memories(offset=total).memories == []


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"scope": "alice"}, "scope"), ({"category": ""}, "category"), ({"under": 3}, "under"),
    ({"since": "yesterday-ish"}, "since"), ({"recorded_until": "soon"}, "recorded_until"),
    ({"recorded_since": "2024-01-02", "recorded_until": "2024-01-01"}, "recorded_since"),
    ({"where": {"key": {"like": "x"}}}, "where"), ({"text": "  "}, "text"),
    ({"include_superseded": "no"}, "include_superseded"), ({"offset": -1}, "offset"), ({"limit": 0}, "limit"),
])
def test_a_bad_argument_is_refused_by_name(tree: KeywordTree, kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInputError, match=field):
        tree.list_memories(**kwargs)  # type: ignore[arg-type]


def test_an_unknown_keyword_to_list_under_is_not_found(tree: KeywordTree) -> None:
    with pytest.raises(NotFoundError, match="under"):
        tree.list_memories(under="0" * 32)


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kwtree", "memories", *argv], capture_output=True, text=True,
                          check=False)


def test_kwtree_memories_lists_filters_counts_and_pages(tmp_path: Path) -> None:
    _tree(tmp_path / "m").close()
    where = str(tmp_path / "m")
    listed = _cli(where, "--scope", "user:ana", "--where", '{"key": "home"}')
    assert listed.returncode == 0, listed.stderr
    rows = [row.split("\t") for row in listed.stdout.splitlines()]
    assert [(row[1], row[2], row[3], row[-1]) for row in rows] == [
        ("2022-03-01", "user:ana", "profile/home", "I live in Boston"),
        ("2023-06-01", "user:ana", "profile/home", "I moved to Denver.")]
    assert rows[0][4] == "superseded" and len(rows[1]) == 5
    assert listed.stderr == ""  # all of them shown: nothing to say
    total = int(_cli(where, "--count").stdout)
    paged = _cli(where, "--size", "2", "--page", "1")
    assert len(paged.stdout.splitlines()) == 2
    assert paged.stderr.strip() == f"memories 3-4 of {total}; {total - 4} more: --page 2"
    as_json = json.loads(_cli(where, "--size", "1", "--json", "--current").stdout)
    assert as_json["remaining"] == as_json["total"] - 1 and len(as_json["memories"]) == 1
    bad = _cli(where, "--where", "[1]")
    assert bad.returncode == 1 and "--where must be a JSON object" in bad.stderr
