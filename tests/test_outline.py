"""Loading an outline (``KeywordTree.load_outline``, ``kwtree load``): all of it is one
operation, so a file that is wrong anywhere writes nothing, and the whole load undoes at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from kwtree import InvalidInputError, KeywordTree
from kwtree.cli.outline import load_outline, read_outline
from kwtree.models import ROOT_ID

GOOD: dict[str, Any] = {
    "keywords": [{"ref": "t", "name": "Tools"}, {"ref": "py", "name": "Python", "parent": "t", "aliases": ["py3"]},
                 {"ref": "js", "name": "JavaScript", "parent": "t"}],
    "infos": [{"content": "uses uv", "source": "notes", "keywords": ["py"]},
              {"content": "node 22 at work", "keywords": ["js", "t"]}],
    "relations": [{"from": "py", "to": "js", "type": "see_also", "weight": 0.5, "reason": "both scripting"}],
}


def _log_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((path / "log").glob("*.jsonl")))


def _variant(section: str, index: int, **fields: Any) -> dict[str, Any]:
    outline = orjson.loads(orjson.dumps(GOOD))
    outline[section][index].update(fields)
    return outline


def test_a_load_is_one_operation(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "t", worker=False) as tree:
        before = tree.history()
        loaded = tree.load_outline(GOOD)
        (op,) = tree.history()[len(before):]
        assert op.kind == "load_outline" and loaded.op_id == op.op_id
        assert (loaded.infos, loaded.relations) == (2, 1) and set(loaded.keyword_ids) == {"t", "py", "js"}
        ids = loaded.keyword_ids
        assert tree.get_keyword(ids["py"]).parent_id == ids["t"] and tree.get_keyword(ids["py"]).aliases == ("py3",)
        node = next(info for info in tree.get_infos_of_keyword(ids["t"]))
        assert node.content == "node 22 at work"
        assert {k.id for k, _ in tree.get_keywords_of_info(node.id)} == {ids["js"], ids["t"]}
        (rel,) = tree.get_relations(ids["py"])
        assert (rel.to_id, rel.type, rel.weight, rel.reason) == (ids["js"], "see_also", 0.5, "both scripting")
        tree.undo(op.op_id)  # one undo takes the whole load back
        assert [k.name for k in tree.get_children(ROOT_ID)] == []
    with KeywordTree(tmp_path / "t", worker=False) as tree:  # and the log replays to the same
        assert [k.name for k in tree.get_children(ROOT_ID)] == []


@pytest.mark.parametrize(("outline", "error", "says"), [
    # the keywords are fine; a later section is not: before, the keywords were written anyway
    (_variant("infos", 1, content=""), InvalidInputError, "infos[1].content must not be empty"),
    (_variant("infos", 0, keywords=["nope"]), InvalidInputError, "infos[0].keywords: 'nope' is not the ref"),
    (_variant("relations", 0, to="py"), InvalidInputError, "relations[0]: a keyword cannot be related to itself"),
    (_variant("relations", 0, weight="heavy"), InvalidInputError, "relations[0]"),
    ({**GOOD, "relations": [*GOOD["relations"], {"from": "t", "to": "ghost"}]}, InvalidInputError,
     "relations[1].to: 'ghost' is not the ref"),
    (_variant("keywords", 2, name=""), InvalidInputError, "keywords[2]: name must not be empty"),
    (_variant("keywords", 1, parent="js"), InvalidInputError, "keywords[1].parent: 'js' is not the ref of an earlier"),
    (_variant("infos", 0, sourse="typo"), InvalidInputError, "infos[0] has unknown field(s) sourse"),
    # (review: the parent's message said "keywordskeywords[1]"; a null ref lost its keyword's id)
    (_variant("keywords", 0, parent=None), InvalidInputError, "keywords[0].parent: None is not the ref"),
    (_variant("keywords", 2, ref=None), InvalidInputError, "keywords[2].ref must be a non-empty string"),
])
def test_a_bad_outline_writes_nothing(tmp_path: Path, outline: dict[str, Any], error: type[Exception],
                                      says: str) -> None:
    with KeywordTree(tmp_path / "t", worker=False) as tree:
        tree.create_keyword("Kept", llm_auto_place=False)
        log = _log_bytes(tmp_path / "t")
        with pytest.raises(error) as raised:
            tree.load_outline(outline)
        assert str(raised.value).startswith(says)  # (the item first, once)
        assert _log_bytes(tmp_path / "t") == log
        assert [k.name for k in tree.get_children(ROOT_ID)] == ["Kept"]


def test_relations_to_existing_keywords_and_repeats(tmp_path: Path) -> None:
    """A relation given twice is written once with the last weight (as two ``relate`` calls
    would leave it); an outline without keywords adds infos and nothing else."""
    twice = {**GOOD, "relations": [*GOOD["relations"], {**GOOD["relations"][0], "weight": 0.9}]}
    with KeywordTree(tmp_path / "t", worker=False) as tree:
        loaded = tree.load_outline(twice)
        (rel,) = tree.get_relations(loaded.keyword_ids["py"])
        assert (rel.weight, rel.version, loaded.relations) == (0.9, 1, 1)  # (what it wrote: one relation)
        alone = tree.load_outline({"infos": [{"content": "no keywords"}]})
        assert (alone.keyword_ids, alone.infos, alone.relations) == ({}, 1, 0)
        assert tree.load_outline({}) == type(alone)({}, 0, 0, None)  # (nothing to write)


def test_load_outline_takes_only_an_outline(tmp_path: Path) -> None:
    with KeywordTree(tmp_path / "t", worker=False) as tree:
        for bad, says in (([1, 2], "must be an object"), ({"kw": []}, "'keywords', 'infos' and/or 'relations'"),
                          ({"infos": {}}, "'infos' must be a list"), ({"keywords": [["t"]]}, "keywords[0] must be")):
            with pytest.raises(InvalidInputError) as raised:
                tree.load_outline(bad)  # type: ignore[arg-type]
            assert says in str(raised.value)


def test_the_cli_loader_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "outline.json"
    path.write_bytes(orjson.dumps(_variant("infos", 1, content="")))
    with KeywordTree(tmp_path / "t", worker=False) as tree:
        with pytest.raises(InvalidInputError, match=r"outline .*infos\[1\]\.content"):
            load_outline(tree, path)
        assert tree.get_children(ROOT_ID) == []
        path.write_bytes(orjson.dumps(GOOD))
        assert read_outline(path) == GOOD
        assert load_outline(tree, path).relations == 1
