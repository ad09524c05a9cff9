"""Export (JSON and Markdown) and import_json: real trees, real files, real CLI runs.

* Round trip: a tree built by a varied sequence of writes, exported and imported into a new
  directory, answers every public read (tests/helpers.snapshot, plus the order of relations)
  as the source does — versions and op ids aside — live and after a reopen, and its
  history is ``init`` + one ``import``. A hypothesis property does the same for random writes.
* Malformed files each raise InvalidInputError naming the JSON path, and create nothing.
* The Markdown outline puts every live keyword and info where the tree has it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import snapshot
from hypothesis import given
from hypothesis import strategies as st

from kwtree import (
    ROOT_ID,
    Info,
    InvalidInputError,
    Keyword,
    KeywordTree,
    KwtreeError,
    NotFoundError,
    RelationType,
)
from kwtree.cli.main import main as cli_main
from kwtree.ops.export import escape_markdown


def open_tree(path: Path, **options: Any) -> KeywordTree:
    return KeywordTree(path, durability="none", worker=False, **options)


def bookkeeping_free(snap: dict[str, Any]) -> dict[str, Any]:
    """A snapshot without what an import makes anew: versions and op ids of entities, the
    last op id and the operation count. Order, times and every other field stay."""

    def entity(value: Any) -> Any:
        if isinstance(value, (Keyword, Info)):
            return dataclasses.replace(value, version=0, op_id="")
        return value

    out = {"keywords": {}, "infos": {}, "names": snap["names"]}
    for kid, entry in snap["keywords"].items():
        out["keywords"][kid] = {key: (entity(value) if key == "keyword" else
                                      [rel[:5] for rel in value] if key == "relations" else value)
                                for key, value in entry.items()}
    for iid, entry in snap["infos"].items():
        out["infos"][iid] = {key: entity(value) for key, value in entry.items()}
    out["metrics"] = {k: v for k, v in snap["metrics"].items() if k != "operations"}
    return out


def ordered_reads(tree: KeywordTree) -> dict[str, Any]:
    """What the snapshot sorts away: each keyword's relations in the order get_relations gives."""
    found: dict[str, Any] = {}
    stack = [ROOT_ID]
    while stack:
        kid = stack.pop()
        found[kid] = [
            [(r.from_id, r.to_id, r.type, r.weight, r.reason, r.created_at)
             for r in tree.get_relations(kid, direction=d)]
            for d in ("out", "in")
        ]
        stack.extend(child.id for child in tree.get_children(kid))
    return found


def assert_equivalent(source: KeywordTree, copy: KeywordTree, info_ids: Sequence[str] = ()) -> None:
    """``copy`` answers every read as ``source`` (infos linked to no keyword: those of ``info_ids``)."""
    live = [iid for iid in info_ids if _live_info(source, iid)]
    assert bookkeeping_free(snapshot(copy, (), live)) == bookkeeping_free(snapshot(source, (), live))
    assert ordered_reads(copy) == ordered_reads(source)


def _live_info(tree: KeywordTree, iid: str) -> bool:
    try:
        tree.get_info(iid)
    except NotFoundError:
        return False
    return True


def build_varied(tree: KeywordTree) -> dict[str, Any]:
    """A tree written by every kind of write, with deletions, moves, relinks and renames, so
    that arrival orders differ from creation orders."""
    make = lambda name, parent=ROOT_ID, **kw: tree.create_keyword(name, parent, llm_auto_place=False, **kw)  # noqa: E731
    prog = make("Programming", aliases=["Coding"], description="all *code* _here_\n# not a heading",
                metadata={"lang": ["en", "中文"], "n": 3, "nested": {"ok": True, "none": None}})
    py = make("Python", prog.id, aliases=["py", "蛇"])
    go = make("Go", prog.id, aliases=["golang"])
    rust = make("Rust", prog.id)
    beijing = make("北京", description="首都 — capital")
    tools = make("Tools")
    editors = make("Editors", tools.id)
    doomed = make("Doomed", tools.id)
    make("Doomed child", doomed.id)
    emoji = make("Émoji 😀", aliases=["emoji"])
    # An alias shared by keywords in several places (find_keywords lists them oldest first).
    tree.add_alias(editors.id, "shared")
    tree.add_alias(go.id, "shared")
    tree.add_alias(beijing.id, "shared")
    tree.add_alias(editors.id, "ed")
    tree.update_keyword(rust.id, {"name": "Rust lang", "metadata": {"safe": True}}, 1)
    tree.move_keyword(go.id, ROOT_ID)
    tree.move_keyword(editors.id, prog.id)
    tree.move_keyword(editors.id, tools.id)  # back at the end of Tools' children
    i1 = tree.create_info("Use uv for envs.\n\n    indented code\n1. not a list", "chat", [py.id, tools.id],
                          metadata={"k": 1})
    i2 = tree.create_info("北京 memo: 烤鸭 <b>bold</b> & [link](x)", "", [beijing.id])
    i3 = tree.create_info("goroutines", "doc", [go.id, py.id])
    i4 = tree.create_info("will be deleted", "", [py.id])
    i5 = tree.create_info("on the doomed keyword", "", [doomed.id])
    i6 = tree.create_info("unlinked memo", "notes")
    i7 = tree.create_info("on the root itself", "", [ROOT_ID])
    tree.link_info(i2.id, py.id, RelationType.RELATED, created_by="agent")
    tree.link_info(i1.id, go.id, "example")
    tree.unlink_info(i1.id, py.id)
    tree.link_info(i1.id, py.id, "source")  # relinked: now after i3 and i2 under Python
    tree.link_info(i3.id, go.id, "related")  # relation changed in place: keeps its position
    tree.update_info(i3.id, {"content": "goroutines and channels", "metadata": {"v": 2}})
    tree.delete_info(i4.id)
    tree.relate(py.id, go.id, "see_also", 0.5, "both compiled? no")
    tree.relate(go.id, py.id)
    tree.relate(beijing.id, py.id, "part_of", 2.0)
    tree.relate(rust.id, go.id)
    tree.relate(doomed.id, py.id)
    tree.relate(py.id, rust.id)
    tree.unrelate(go.id, py.id)
    tree.relate(go.id, py.id, "related_to", 0.25)  # re-added: now last
    tree.delete_keyword(doomed.id, cascade=True, info_policy="reattach")  # i5 reattached to Tools
    tree.merge_keywords(emoji.id, beijing.id)
    tree.update_keyword(ROOT_ID, {"description": "my memory", "metadata": {"owner": "me"}}, 1)
    return {"info_ids": [i1.id, i2.id, i3.id, i4.id, i5.id, i6.id, i7.id], "py": py.id, "go": go.id}


@pytest.fixture
def varied(tmp_path: Path):
    tree = open_tree(tmp_path / "source")
    made = build_varied(tree)
    yield tree, made
    tree.close()


# --- round trip ---------------------------------------------------------------------------------


def test_json_round_trip_answers_every_read_the_same_as_one_import_operation(varied, tmp_path):
    source, made = varied
    report = source.export(tmp_path / "export.json")
    assert report == {"path": str(tmp_path / "export.json"), "format": "json", "keywords": 7, "infos": 6,
                      "links": 9, "relations": 5, "last_op_id": source.last_op_id}
    copy = KeywordTree.import_json(tmp_path / "export.json", tmp_path / "copy", durability="none", worker=False)
    try:
        assert_equivalent(source, copy, made["info_ids"])
        assert copy.get_keyword(ROOT_ID).metadata == {"owner": "me"}
        assert [k.id for k in copy.find_keywords("shared")] == [k.id for k in source.find_keywords("shared")]
        history = copy.history()
        assert [op.kind for op in history] == ["init", "import"]
        assert history[1].audit["import"]["source_last_op_id"] == source.last_op_id
    finally:
        copy.close()
    with KeywordTree(tmp_path / "copy", read_only=True) as reopened:  # the log alone gives the same
        assert_equivalent(source, reopened, made["info_ids"])


def test_export_leaves_out_deleted_entities_and_dead_links(varied, tmp_path):
    source, made = varied
    source.export(tmp_path / "export.json")
    doc = orjson.loads((tmp_path / "export.json").read_bytes())
    assert doc["kwtree_export"] == 1 and doc["last_op_id"] == source.last_op_id
    names = [k["name"] for k in doc["keywords"]]
    assert "Doomed" not in names and "Doomed child" not in names and "Émoji 😀" not in names  # deleted, merged
    assert "Émoji 😀" in next(k for k in doc["keywords"] if k["name"] == "北京")["aliases"]
    assert made["info_ids"][3] not in (tmp_path / "export.json").read_text()  # the deleted info, with its links
    assert doc["keywords"][0]["id"] == ROOT_ID
    seen = {ROOT_ID}
    for keyword in doc["keywords"][1:]:  # parents before children
        assert keyword["parent_id"] in seen
        seen.add(keyword["id"])


def test_durable_import_of_an_export_of_an_import_is_the_same_again(varied, tmp_path):
    source, made = varied
    source.export(tmp_path / "one.json")
    with KeywordTree.import_json(tmp_path / "one.json", tmp_path / "copy", worker=False) as copy:  # durability full
        copy.export(tmp_path / "two.json")
    one = orjson.loads((tmp_path / "one.json").read_bytes())
    two = orjson.loads((tmp_path / "two.json").read_bytes())
    for doc in (one, two):
        del doc["exported_at"], doc["last_op_id"]
    assert one == two


def test_export_of_an_as_of_view_is_the_tree_as_it_was(tmp_path):
    with open_tree(tmp_path / "source") as tree:
        kept = tree.create_keyword("kept", ROOT_ID, llm_auto_place=False)
        then = tree.last_op_id
        tree.create_keyword("later", ROOT_ID, llm_auto_place=False)
        tree.update_keyword(kept.id, {"name": "renamed"}, 1)
    with KeywordTree(tmp_path / "source", as_of=then) as past:
        past.export(tmp_path / "past.json")
        with KeywordTree.import_json(tmp_path / "past.json", tmp_path / "copy", durability="none",
                                     worker=False) as copy:
            assert_equivalent(past, copy)
            assert [k.name for k in copy.get_children(ROOT_ID)] == ["kept"]


def test_a_hand_written_file_needs_only_ids_names_and_contents(tmp_path):
    doc = {
        "kwtree_export": 1,
        "keywords": [  # a child before its parent; siblings keep file order
            {"id": "b1", "name": "B one", "parent_id": "b"},
            {"id": "a", "name": "A"},
            {"id": "b", "name": "B", "aliases": ["bee"]},
            {"id": "b2", "name": "B two", "parent_id": "b"},
            {"id": "a1", "name": "A one", "parent_id": "a"},
        ],
        "infos": [{"id": "i1", "content": "hello"}],
        "links": [{"info_id": "i1", "keyword_id": "b2"},
                  {"info_id": "i1", "keyword_id": "root", "relation": "related"}],
        "relations": [{"from_id": "a", "to_id": "b"}],
    }
    (tmp_path / "hand.json").write_bytes(orjson.dumps(doc))
    with KeywordTree.import_json(tmp_path / "hand.json", tmp_path / "copy", durability="none", worker=False) as tree:
        assert [k.id for k in tree.get_children(ROOT_ID)] == ["a", "b"]
        assert [k.id for k in tree.get_children("b")] == ["b1", "b2"]
        assert [k.id for k in tree.find_keywords("bee")] == ["b"]
        assert [(k.id, r) for k, r in tree.get_keywords_of_info("i1")] == [("b2", RelationType.PRIMARY),
                                                                             (ROOT_ID, RelationType.RELATED)]
        relation = tree.get_relations("a")[0]
        assert (relation.to_id, relation.type, relation.weight) == ("b", "related_to", 1.0)
        info = tree.get_info("i1")
        assert info.created_at == info.updated_at == tree.history()[-1].timestamp  # missing times: the import's


# --- a property over random writes --------------------------------------------------------------

NAMES = ["Py", "py3", "Go", "北京", "Straße", "strasse", "C++", "x_y", "*star*"]
STEP = st.tuples(
    st.sampled_from(["keyword", "keyword", "info", "info", "link", "link", "unlink", "unlink", "move", "move",
                     "delete", "delete_info", "alias", "rename", "relate", "relate", "unrelate"]),
    st.integers(0, 50), st.integers(0, 50), st.integers(0, len(NAMES) - 1),
)


def apply_steps(tree: KeywordTree, steps: list[tuple[str, int, int, int]]) -> list[str]:
    """Seed a small tree, then run the drawn writes (an invalid one — duplicate name, cycle,
    root ... — changes nothing); returns the ids of the infos created."""
    a_, b_ = (tree.create_keyword(name, ROOT_ID, llm_auto_place=False).id for name in ("A", "B"))
    seeds = [a_, b_, *(tree.create_keyword(name, parent, llm_auto_place=False).id
                       for name, parent in (("A1", a_), ("A2", a_), ("B1", b_)))]
    info_ids = [tree.create_info(f"seed {i}", "", [seeds[i], seeds[(i + 2) % 5]]).id for i in range(5)]
    for kind, a, b, n in steps:
        keywords = [ROOT_ID, *_all_keywords(tree)]
        infos = [iid for iid in info_ids if _live_info(tree, iid)]
        pick, other = keywords[a % len(keywords)], keywords[b % len(keywords)]
        info = infos[a % len(infos)] if infos else None
        try:
            if kind == "keyword":
                tree.create_keyword(f"{NAMES[n]}{a % 3 or ''}", pick, llm_auto_place=False)
            elif kind == "info":
                info_ids.append(tree.create_info(f"memo {len(info_ids)} {NAMES[n]}", "", [pick, other]).id)
            elif kind == "link" and info:
                tree.link_info(info, other, list(RelationType)[n % 4])
            elif kind == "unlink" and info:
                tree.unlink_info(info, other)
            elif kind == "move":
                tree.move_keyword(pick, other)
            elif kind == "delete":
                tree.delete_keyword(pick, cascade=bool(n % 2), info_policy=["reattach", "delete", "keep"][b % 3])
            elif kind == "delete_info" and info:
                tree.delete_info(info)
            elif kind == "alias":
                tree.add_alias(pick, NAMES[n])
            elif kind == "rename":
                tree.update_keyword(pick, {"name": NAMES[n]}, tree.get_keyword(pick).version)
            elif kind == "relate":
                tree.relate(pick, other, ["related_to", "part_of"][n % 2], 1.0 + n)
            elif kind == "unrelate":
                tree.unrelate(pick, other)
        except KwtreeError:
            pass
    return info_ids


@given(steps=st.lists(STEP, min_size=10, max_size=40))
def test_property_round_trip_of_random_writes(tmp_path_factory, steps):
    base = tmp_path_factory.mktemp("prop")
    with open_tree(base / "source") as tree:
        info_ids = apply_steps(tree, steps)
        tree.export(base / "export.json")
        with KeywordTree.import_json(base / "export.json", base / "copy", durability="none", worker=False) as copy:
            assert_equivalent(tree, copy, info_ids)
            assert [op.kind for op in copy.history()] == ["init", "import"]


def _all_keywords(tree: KeywordTree) -> list[str]:
    found, queue = [], [ROOT_ID]
    while queue:
        for child in tree.get_children(queue.pop(0)):
            found.append(child.id)
            queue.append(child.id)
    return found


# --- malformed files ----------------------------------------------------------------------------


def _valid() -> dict[str, Any]:
    return {
        "kwtree_export": 1, "exported_at": 1.0, "last_op_id": "0" * 32,
        "keywords": [{"id": "root", "name": "root", "parent_id": None},
                     {"id": "k1", "name": "One", "parent_id": "root"},
                     {"id": "k2", "name": "Two", "parent_id": "k1"}],
        "infos": [{"id": "i1", "content": "text"}],
        "links": [{"info_id": "i1", "keyword_id": "k1", "relation": "primary"}],
        "relations": [{"from_id": "k1", "to_id": "k2", "type": "see_also", "weight": 0.5}],
    }


def _set(path: str, value: Any) -> Any:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = doc
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if value is _DELETE:
            del target[int(last) if last.isdigit() else last]
        elif last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
    return change


_DELETE = object()


def _append(section: str, value: Any) -> Any:
    return lambda doc: doc[section].append(value)

MALFORMED = [
    (_set("kwtree_export", 2), "$.kwtree_export is 2; this version of kwtree reads format 1"),
    (_set("kwtree_export", _DELETE), "is not a kwtree export"),
    (_set("extra", 1), "$ has unknown field(s) extra"),
    (_set("keywords", {"a": 1}), "$.keywords must be a list, got an object"),
    (_set("keywords", _DELETE), "$ has no 'keywords' list"),
    (_set("keywords.1", "k1"), "$.keywords[1] must be an object, got a string"),
    (_set("keywords.1.name", _DELETE), "$.keywords[1] has no 'name'"),
    (_set("keywords.1.name", "  "), "$.keywords[1].name: name must not be empty"),
    (_set("keywords.1.name", "a\tb"), "$.keywords[1].name: name 'a\\tb' contains a control character"),
    (_set("keywords.1.colour", "red"), "$.keywords[1] has unknown field(s) colour"),
    (_set("keywords.2.id", "k1"), "$.keywords[2].id 'k1' is listed twice"),
    (_set("keywords.2.id", "has space"), "$.keywords[2].id 'has space' is not an id"),
    (_set("keywords.2.parent_id", "nope"), "$.keywords[2].parent_id: no keyword in the file has id 'nope'"),
    (_set("keywords.1.parent_id", None), "$.keywords[1].parent_id is null, but only the root has no parent"),
    (_set("keywords.1.parent_id", "k2"), "the keywords k1 → k2 → k1 are each other's parents"),
    (_set("keywords.1.aliases", "one"), "$.keywords[1].aliases must be a list of names, got a string"),
    (_set("keywords.1.aliases", ["ok", ""]), "$.keywords[1].aliases[1]: alias must not be empty"),
    (_set("keywords.1.metadata", [1]), "$.keywords[1].metadata: metadata must be a dict, got list"),
    (_set("keywords.1.created_at", "yesterday"), "$.keywords[1].created_at must be a finite number"),
    (_set("keywords.0.parent_id", "k1"), "$.keywords[0].parent_id must be null: the root has no parent"),
    (_set("infos.0.content", ""), "$.infos[0].content: content must not be empty"),
    (_set("infos.0.id", "k1"), "$.infos[0].id 'k1' is also a keyword's id"),
    (_set("infos.0.source", 3), "$.infos[0].source: source must be a string, got int"),
    (_set("infos", [{"id": "i1", "content": "a"}, {"id": "i1", "content": "b"}]), "$.infos[1].id 'i1' is listed twice"),
    (_set("links.0.info_id", "i9"), "$.links[0].info_id: no info in the file has id 'i9'"),
    (_set("links.0.keyword_id", "k9"), "$.links[0].keyword_id: no keyword in the file has id 'k9'"),
    (_set("links.0.relation", "bogus"), "$.links[0].relation: relation must be a RelationType"),
    (_append("links", {"info_id": "i1", "keyword_id": "k1"}), "$.links[1]: info 'i1' is linked to keyword 'k1' twice"),
    (_set("relations.0.to_id", "k1"), "$.relations[0]: a keyword cannot be related to itself"),
    (_set("relations.0.from_id", "gone"), "$.relations[0].from_id: no keyword in the file has id 'gone'"),
    (_set("relations.0.weight", "1"), "$.relations[0].weight: weight must be a finite number"),
    (_set("relations.0.type", " "), "$.relations[0].type: type must not be empty"),
    (_append("relations", {"from_id": "k1", "to_id": "k2", "type": "see_also"}),
     "$.relations[1]: the 'see_also' relation from 'k1' to 'k2' is listed twice"),
]


@pytest.mark.parametrize("change, message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_a_malformed_export_raises_with_its_json_path_and_creates_nothing(tmp_path, change, message):
    doc = _valid()
    change(doc)
    path = tmp_path / "bad.json"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(InvalidInputError) as raised:
        KeywordTree.import_json(path, tmp_path / "target", durability="none", worker=False)
    assert message in str(raised.value) and str(path) in str(raised.value)
    assert not (tmp_path / "target").exists()


def test_the_valid_base_document_imports(tmp_path):
    (tmp_path / "ok.json").write_bytes(orjson.dumps(_valid()))
    with KeywordTree.import_json(tmp_path / "ok.json", tmp_path / "target", durability="none", worker=False) as tree:
        assert [k.name for k in tree.get_path("k2")] == ["root", "One", "Two"]


@pytest.mark.parametrize("body, message", [
    (b"{not json", "is not JSON"),
    (b"[1, 2]", "is not a kwtree export"),
    (b"", "is not JSON"),
])
def test_a_file_that_is_not_an_export_raises(tmp_path, body, message):
    (tmp_path / "bad.json").write_bytes(body)
    with pytest.raises(InvalidInputError, match=message):
        KeywordTree.import_json(tmp_path / "bad.json", tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_import_needs_an_existing_file_and_a_new_or_empty_directory(varied, tmp_path):
    source, _ = varied
    source.export(tmp_path / "export.json")
    with pytest.raises(NotFoundError, match="cannot read the export"):
        KeywordTree.import_json(tmp_path / "missing.json", tmp_path / "target")
    with pytest.raises(InvalidInputError, match="is not empty"):
        KeywordTree.import_json(tmp_path / "export.json", tmp_path / "source")
    before = sorted(p.name for p in (tmp_path / "source" / "log").iterdir())
    assert source.refresh() == 0 and sorted(p.name for p in (tmp_path / "source" / "log").iterdir()) == before
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InvalidInputError, match="is a file"):
        KeywordTree.import_json(tmp_path / "export.json", tmp_path / "afile")
    with pytest.raises(NotFoundError):  # a read-only tree cannot be created: nothing is left behind
        KeywordTree.import_json(tmp_path / "export.json", tmp_path / "target", read_only=True)
    assert not (tmp_path / "target").exists()
    (tmp_path / "empty").mkdir()
    with KeywordTree.import_json(tmp_path / "export.json", tmp_path / "empty", durability="none", worker=False) as copy:
        assert_equivalent(source, copy)


def test_export_checks_its_arguments_and_replaces_the_file_whole(tree, tmp_path):
    with pytest.raises(InvalidInputError, match="format must be one of 'json', 'markdown'"):
        tree.export(tmp_path / "x.json", "yaml")
    with pytest.raises(InvalidInputError, match="is a directory"):
        tree.export(tmp_path)
    with pytest.raises(NotFoundError, match="does not exist"):
        tree.export(tmp_path / "no" / "x.json")
    with pytest.raises(InvalidInputError, match="must be a file path"):
        tree.export(3)  # type: ignore[arg-type]
    (tmp_path / "x.json").write_text("old")
    tree.export(tmp_path / "x.json")
    assert orjson.loads((tmp_path / "x.json").read_bytes())["kwtree_export"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree", "x.json"]  # no temporary file left


# --- Markdown ---------------------------------------------------------------------------------


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text, flags=re.S)


def parse_outline(markdown: str) -> tuple[dict[tuple[str, ...], dict[str, list[str]]], list[str]]:
    """The Tree section as {keyword path: {"infos": [(content, notes)], "children": [names]}}."""
    section = markdown.split("\n## Tree\n\n", 1)[1].split("\n## ", 1)[0]
    items: list[list[Any]] = []
    for line in section.rstrip("\n").split("\n"):
        bullet = re.match(r"^( *)- (.*)$", line)
        if bullet:
            items.append([len(bullet.group(1)), bullet.group(2)])
        else:
            items[-1][1] += "\n" + line[items[-1][0] + 2:]
    outline: dict[tuple[str, ...], dict[str, list[Any]]] = {(): {"infos": [], "children": []}}
    stack: list[tuple[int, tuple[str, ...]]] = [(-2, ())]
    for indent, text in items:
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        keyword = re.match(r"\*\*((?:\\.|[^\\*])*)\*\*", text)
        if keyword:
            name = _unescape(keyword.group(1))
            path = (*parent, name)
            outline[parent]["children"].append(name)
            outline[path] = {"infos": [], "children": []}
            stack.append((indent, path))
        else:
            content, _, notes = text.partition(" — *")
            outline[parent]["infos"].append((_unescape(content), notes.rstrip("*")))
    return outline, section.split("\n")


def test_markdown_outline_shows_every_keyword_and_info_where_the_tree_has_them(varied, tmp_path):
    source, made = varied
    report = source.export(tmp_path / "tree.md", format="markdown")
    assert report["format"] == "markdown" and report["infos"] == 6
    markdown = (tmp_path / "tree.md").read_text(encoding="utf-8")
    outline, _ = parse_outline(markdown)
    expected: dict[tuple[str, ...], dict[str, list[Any]]] = {}
    queue: list[tuple[str, tuple[str, ...]]] = [(ROOT_ID, ())]
    while queue:
        kid, path = queue.pop(0)
        children = source.get_children(kid)
        expected[path] = {
            "infos": [info.content for info in source.get_infos_of_keyword(kid, size=10_000)],
            "children": [child.name for child in children],
        }
        queue.extend((child.id, (*path, child.name)) for child in children)
    assert {path: {"infos": [c for c, _ in entry["infos"]], "children": entry["children"]}
            for path, entry in outline.items()} == expected
    python = outline[("Programming", "Python")]["infos"]
    notes = dict(python)
    assert notes["北京 memo: 烤鸭 <b>bold</b> & [link](x)"] == "related · also under: 北京"
    assert notes["Use uv for envs.\n\n    indented code\n1. not a list"] == (
        "source · source: chat · also under: Tools; Go")
    assert ("4. " not in markdown and "1\\. not a list" in markdown
            and "\\<b\\>bold\\</b\\> \\& \\[link\\](x)" in markdown)
    assert "- **Programming** (Coding) — all \\*code\\* \\_here\\_\n  \\# not a heading\n" in markdown
    relations = markdown.split("\n## Relations\n\n", 1)[1].split("\n## ", 1)[0].strip().split("\n")
    assert len(relations) == 5
    assert "- **Programming › Python** → **Go**: see\\_also (weight 0.5) — both compiled? no" in relations
    unlinked = markdown.split("\n## Infos linked to no keyword\n\n", 1)[1]
    assert unlinked == "- unlinked memo — *source: notes*\n"
    assert outline[()]["infos"] == [("on the root itself", "")]


@pytest.mark.parametrize("text, escaped", [
    ("plain 北京 text", "plain 北京 text"),
    ("*a* _b_ `c` [d](e) <f> a|b ~g~ &amp; \\",
     "\\*a\\* \\_b\\_ \\`c\\` \\[d\\](e) \\<f\\> a\\|b \\~g\\~ \\&amp; \\\\"),
    ("# h\n- item\n+ item\n2) x\n10. y\n===\n  - z", "\\# h\n\\- item\n\\+ item\n2\\) x\n10\\. y\n\\===\n  \\- z"),
    ("C++ and a - b and 3.5", "C++ and a - b and 3.5"),
    ("line\r\nbreak\rhere", "line\nbreak\nhere"),
])
def test_escape_markdown(text, escaped):
    assert escape_markdown(text) == escaped
    assert _unescape(escaped) == text.replace("\r\n", "\n").replace("\r", "\n")


# --- the command line ---------------------------------------------------------------------------


def test_cli_export_and_import(varied, tmp_path, capsys):
    source, made = varied
    source.close()
    assert cli_main(["export", str(tmp_path / "source"), str(tmp_path / "out.json")]) == 0
    assert "exported 7 keywords, 6 infos, 9 links and 5 relations" in capsys.readouterr().out
    assert cli_main(["export", str(tmp_path / "source"), str(tmp_path / "out.md"), "--format", "markdown"]) == 0
    assert (tmp_path / "out.md").read_text(encoding="utf-8").startswith("# kwtree export\n")
    capsys.readouterr()
    assert cli_main(["import", str(tmp_path / "out.json"), str(tmp_path / "copy"), "--durability", "none"]) == 0
    assert "imported 7 keywords, 6 infos, 9 links and 5 relations" in capsys.readouterr().out
    with KeywordTree(tmp_path / "source", read_only=True) as src, \
            KeywordTree(tmp_path / "copy", read_only=True) as copy:
        assert_equivalent(src, copy, made["info_ids"])
    assert cli_main(["import", str(tmp_path / "out.json"), str(tmp_path / "copy")]) == 1
    assert "is not empty" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"kwtree_export": 1, "keywords": [{"id": "a"}]}')
    assert cli_main(["import", str(tmp_path / "bad.json"), str(tmp_path / "other")]) == 1
    assert "$.keywords[0] has no 'name'" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()
