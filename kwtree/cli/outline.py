"""Loading a keyword outline file: a readable JSON description of keywords, memories and
relations, for seeding a tree (the quickstart's ``data/quickstart.json`` is one).

The file is an object with up to three lists::

    {"keywords":  [{"ref": "py", "name": "Python", "parent": "prog", "aliases": ["py3"],
                    "description": "..."}, ...],
     "infos":     [{"content": "...", "source": "...", "keywords": ["py", ...]}, ...],
     "relations": [{"from": "py", "to": "js", "type": "see_also", "weight": 0.5}, ...]}

``parent`` names the ``ref`` of an earlier keyword (absent: under the root), and infos and
relations name keywords by ``ref``. Each list becomes ONE batch operation (relations one
operation each), so a bad file fails before anything is written to the tree, or at the
boundary between the keyword, info and relation batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kwtree.errors import InvalidInputError
from kwtree.facade.tree import KeywordTree

__all__ = ["LoadedOutline", "load_outline", "read_outline"]

_KEYWORD_FIELDS = {"ref", "name", "parent", "aliases", "description", "metadata"}


@dataclass(frozen=True, slots=True)
class LoadedOutline:
    """What ``load_outline`` created: keyword ids by ref, and the counts."""

    keyword_ids: dict[str, str]
    infos: int
    relations: int


def read_outline(path: str | Path) -> dict[str, Any]:
    """Parse and check the shape of an outline file (InvalidInputError says what is wrong)."""
    try:
        outline = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise InvalidInputError(f"cannot read outline {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"outline {path} is not valid JSON: {exc}") from None
    if type(outline) is not dict or not set(outline) <= {"keywords", "infos", "relations"}:
        raise InvalidInputError(f"outline {path} must be an object with 'keywords', 'infos' and/or 'relations'")
    for section in ("keywords", "infos", "relations"):
        if type(outline.get(section, [])) is not list:
            raise InvalidInputError(f"outline {path}: {section!r} must be a list")
    return outline


def load_outline(tree: KeywordTree, path: str | Path) -> LoadedOutline:
    """Add the outline at ``path`` under the tree's root; returns the new ids by ref."""
    outline = read_outline(path)
    specs = []
    for index, item in enumerate(outline.get("keywords", [])):
        if type(item) is not dict or not set(item) <= _KEYWORD_FIELDS or "ref" not in item:
            raise InvalidInputError(
                f"outline keywords[{index}] must be an object with 'ref', 'name' and optionally "
                f"'parent', 'aliases', 'description', 'metadata'"
            )
        spec = {key: value for key, value in item.items() if key != "parent"}
        if "parent" in item:
            spec["parent_ref"] = item["parent"]
        specs.append(spec)
    created = tree.batch_create_keywords(specs)
    ids = {spec["ref"]: keyword.id for spec, keyword in zip(specs, created, strict=True)}

    def resolve(ref: object, where: str) -> str:
        if ref not in ids:
            raise InvalidInputError(f"outline {where}: {ref!r} is not the ref of a keyword in this outline")
        return ids[ref]

    info_specs = []
    for index, item in enumerate(outline.get("infos", [])):
        if type(item) is not dict or "content" not in item:
            raise InvalidInputError(f"outline infos[{index}] must be an object with 'content'")
        refs = item.get("keywords", [])
        if type(refs) is not list:
            raise InvalidInputError(f"outline infos[{index}].keywords must be a list of refs")
        info_specs.append(
            {
                "content": item["content"],
                "source": item.get("source", ""),
                "metadata": item.get("metadata"),
                "keyword_ids": [resolve(ref, f"infos[{index}].keywords") for ref in refs],
            }
        )
    tree.batch_create_infos(info_specs)
    relations = outline.get("relations", [])
    for index, item in enumerate(relations):
        if type(item) is not dict or "from" not in item or "to" not in item:
            raise InvalidInputError(f"outline relations[{index}] must be an object with 'from' and 'to'")
        tree.relate(
            resolve(item["from"], f"relations[{index}].from"),
            resolve(item["to"], f"relations[{index}].to"),
            item.get("type", "related_to"),
            item.get("weight", 1.0),
            item.get("reason", ""),
        )
    return LoadedOutline(ids, len(info_specs), len(relations))
