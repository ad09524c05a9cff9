"""Names and paths wherever ids are taken (issue 27): ``KeywordTree.resolve`` reads an id, a
name, an alias or a path; the CLI's keyword arguments and the tools' take any of them; a name
several keywords share is refused with their paths, an unknown one with the closest names, and
a scoped read never resolves to a keyword outside its scope."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kwtree import InvalidInputError, KeywordTree, NotFoundError
from kwtree.integrations.toolbox import ToolBox


def _build(path: Path) -> dict[str, Any]:
    with KeywordTree(path, durability="none") as tree:
        work = tree.create_keyword("Work", "root", llm_auto_place=False)
        tools = tree.create_keyword("Tools", work.id)
        python = tree.create_keyword("Python", tools.id, aliases=["py"])
        home = tree.create_keyword("Home", "root", llm_auto_place=False)
        home_python = tree.create_keyword("Python", home.id)  # the pet snake
        cicd = tree.create_keyword("CI/CD", work.id)
        go = tree.create_keyword("Go", work.id)
        alice = tree.create_keyword("user:alice", "root", metadata={"scope": "user:alice"})
        tea = tree.create_keyword("Tea", alice.id)
        bob = tree.create_keyword("user:bob", "root", metadata={"scope": "user:bob"})
        coffee = tree.create_keyword("Coffee", bob.id)
        return {"work": work.id, "tools": tools.id, "python": python.id, "home_python": home_python.id,
                "cicd": cicd.id, "go": go.id, "tea": tea.id, "coffee": coffee.id}


@pytest.fixture
def built(tmp_path: Path) -> tuple[KeywordTree, dict[str, Any]]:
    ids = _build(tmp_path / "m")
    with KeywordTree(tmp_path / "m", durability="none") as tree:
        yield tree, ids


def test_an_id_a_name_an_alias_or_a_path_name_one_keyword(built: tuple[KeywordTree, dict[str, Any]]) -> None:
    tree, ids = built
    assert tree.resolve(ids["python"]) == ids["python"] and tree.resolve("root") == "root"
    assert tree.resolve("tools") == ids["tools"] and tree.resolve("PY") == ids["python"]
    for path in ("Work/Tools/Python", "Work › Tools › Python", "Tools/Python", "root/Work/Tools/py", "Home/python"):
        assert tree.resolve(path) == (ids["home_python"] if path.startswith("Home") else ids["python"]), path
    assert tree.resolve("CI/CD") == ids["cicd"]  # a name holding the separator is found whole


def test_a_shared_name_is_refused_with_each_path_and_an_unknown_one_with_the_closest(
        built: tuple[KeywordTree, dict[str, Any]]) -> None:
    tree, _ = built
    with pytest.raises(InvalidInputError, match=r"names 2 keywords: Work › Tools › Python \(\w+\); Home › Python"):
        tree.resolve("Python")
    with pytest.raises(NotFoundError, match=r"new_parent: .*'Pythn'.*did you mean 'Python'"):
        tree.resolve("Pythn", field="new_parent")
    with pytest.raises(NotFoundError, match="or path 'Work/Garden/Python'; did you mean 'Python'"):
        tree.resolve("Work/Garden/Python")  # the path's last name is suggested
    with pytest.raises(NotFoundError, match="kwtree find"):
        tree.resolve("Zzqx")
    with pytest.raises(InvalidInputError, match="keyword_id"):
        tree.resolve("  ")


def test_a_scoped_resolve_never_reaches_outside_its_scope(built: tuple[KeywordTree, dict[str, Any]]) -> None:
    tree, ids = built
    assert tree.resolve("Tea", scope="user:alice") == ids["tea"]
    for ref in ("Coffee", ids["coffee"], "user:bob/Coffee"):
        with pytest.raises(NotFoundError) as refused:
            tree.resolve(ref, scope="user:alice")
        assert "Coffee" not in str(refused.value).replace(ref, "")  # no suggestion from bob's side
    box = ToolBox(tree, scope="user:alice")
    assert box.call("tree", {"keyword_id": "Tea"}).is_error is False
    assert box.call("tree", {"keyword_id": "Coffee"}).text.startswith("NotFoundError")
    filed = box.run("create_info", {"content": "Alice drinks sencha.", "keyword_ids": ["Tea"]})
    assert [keyword["id"] for keyword in filed["filed_under"]] == [ids["tea"]]
    assert box.call("create_info", {"content": "x", "keyword_ids": ["Coffee"]}).is_error


def _kwtree(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kwtree", *argv], capture_output=True, text=True, check=False)


def test_the_cli_takes_names_and_paths_wherever_it_takes_a_keyword(tmp_path: Path) -> None:
    ids = _build(tmp_path / "m")
    where = str(tmp_path / "m")
    got = _kwtree("get", where, "Tools")
    assert got.returncode == 0 and ids["tools"] in got.stdout, got.stderr
    added = _kwtree("add-info", where, "Uses uv for environments.", "--keyword", "Work/Tools/Python")
    assert added.returncode == 0, added.stderr
    listed = _kwtree("infos", where, "py")
    assert listed.returncode == 0 and "Uses uv for environments." in listed.stdout
    moved = _kwtree("move", where, "Go", "Tools")
    assert moved.returncode == 0, moved.stderr
    assert _kwtree("path", where, "Work/Tools/Go").stdout.strip() == "root › Work › Tools › Go"
    shown = _kwtree("tree", where, "--root", "Work")
    assert shown.returncode == 0 and "Home" not in shown.stdout and "Tools" in shown.stdout
    ambiguous = _kwtree("get", where, "Python")
    assert ambiguous.returncode == 1
    assert "Work › Tools › Python" in ambiguous.stderr and "Home › Python" in ambiguous.stderr
    unknown = _kwtree("move", where, "Go", "Tols")
    assert unknown.returncode == 1 and "new_parent" in unknown.stderr and "'Tools'" in unknown.stderr


def test_arguments_that_take_a_keyword_or_a_memory_take_a_memory_id_or_a_name(
        built: tuple[KeywordTree, dict[str, Any]]) -> None:
    tree, ids = built
    info = tree.create_info("Prefers sencha.", keyword_ids=[ids["tea"]])
    assert tree.resolve(info.id, memories=True) == info.id and tree.resolve("Tea", memories=True) == ids["tea"]
    link = f"{info.id}/{ids['tea']}"
    assert tree.resolve(link, memories=True) == link  # a link key, not a path of names
    assert tree.resolve("CI/CD", memories=True) == ids["cicd"]
    with pytest.raises(NotFoundError, match="id: no keyword"):
        tree.resolve(info.id, field="id")  # without memories, a memory id is no keyword
    box = ToolBox(tree, scope="user:alice")
    shown = box.run("show", {"id": "Tea"})
    assert shown["keyword"]["id"] == ids["tea"] and shown["memories"][0]["text"] == "Prefers sencha."
    assert box.run("show", {"id": info.id})["memory"]["text"] == "Prefers sencha."
    assert box.run("history", {"entity_id": "Tea"})["operations"]
    assert box.call("history", {"entity_id": "Coffee"}).text.startswith("NotFoundError")  # bob's, outside
    assert box.call("show", {"id": "Coffee"}).text.startswith("NotFoundError")
    herbal = box.run("create_keyword", {"name": "Herbal", "parent_id": "Tea"})["keyword"]["id"]
    related = box.run("relate", {"from_id": "Tea", "to_id": "Tea/Herbal", "type": "includes"})
    assert (related["from"]["id"], related["to"]["id"]) == (ids["tea"], herbal)
    assert box.call("relate", {"from_id": "Tea", "to_id": "Coffee"}).is_error
    assert box.run("forget", {"id": "Tea/Herbal"})["keywords_erased"] == 1
    assert box.call("forget", {"id": "Coffee"}).text.startswith("NotFoundError")


def test_the_cli_history_and_forget_take_a_keyword_by_name(tmp_path: Path) -> None:
    ids = _build(tmp_path / "m")
    where = str(tmp_path / "m")
    history = _kwtree("history", where, "--entity", "Work/Tools/Python")
    assert history.returncode == 0 and history.stdout.count("\n") == 1, history.stderr
    forgot = _kwtree("forget", where, "Go")
    assert forgot.returncode == 0 and f"erased keyword\t{ids['go']}" in forgot.stdout, forgot.stderr
