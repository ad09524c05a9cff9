"""An outline: a readable description of keywords, infos and relations for seeding a tree
(the quickstart's ``data/quickstart.json`` is one), written as ONE operation.

An outline is an object with up to three lists::

    {"keywords":  [{"ref": "py", "name": "Python", "parent": "prog", "aliases": ["py3"],
                    "description": "...", "metadata": {...}}, ...],
     "infos":     [{"content": "...", "source": "...", "metadata": {...}, "keywords": ["py", ...]}, ...],
     "relations": [{"from": "py", "to": "js", "type": "see_also", "weight": 0.5, "reason": "..."}, ...]}

``parent`` names the ``ref`` of an earlier keyword (absent: under the root); infos and
relations name the outline's keywords by ``ref``. The keywords are checked as
``batch_create_keywords`` checks its specs, the infos as ``batch_create_infos`` and each
relation as ``relate`` (a relation given twice keeps its last weight and reason), on a fork
of the state that holds the new keywords; every error names the item it is about
(``infos[3].content ...``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, KwtreeError
from kwtree.models import Change, Info, Keyword, Operation, Relation
from kwtree.validate import shown
from kwtree.writes import Stamp, name_in_message
from kwtree.writes.infos import batch_create_infos, relate
from kwtree.writes.keywords import batch_create_keywords
from kwtree.writes.reorganize import coalesce, put_changes

__all__ = ["OUTLINE_SECTIONS", "LoadedOutline", "check_outline", "load_outline", "loaded"]

OUTLINE_SECTIONS = ("keywords", "infos", "relations")
_KEYWORD_FIELDS = frozenset({"ref", "name", "parent", "aliases", "description", "metadata"})
_INFO_FIELDS = frozenset({"content", "source", "metadata", "keywords"})
_RELATION_FIELDS = frozenset({"from", "to", "type", "weight", "reason"})
#: Each section's fields, and those it needs.
_SECTIONS = (("keywords", _KEYWORD_FIELDS, ("ref", "name")), ("infos", _INFO_FIELDS, ("content",)),
             ("relations", _RELATION_FIELDS, ("from", "to")))


@dataclass(frozen=True, slots=True)
class LoadedOutline:
    """What a load wrote: the new keywords' ids by ref, how many infos and relations, and the
    operation that wrote them (``undo`` takes it back; None when there was nothing to write)."""

    keyword_ids: dict[str, str]
    infos: int
    relations: int
    op_id: str | None = None


def check_outline(outline: object) -> Mapping[str, list[Any]]:
    """``outline`` if it has an outline's shape (an object of lists of objects with the
    fields their section allows); InvalidInputError naming what is wrong otherwise."""
    if not isinstance(outline, Mapping) or not set(outline) <= set(OUTLINE_SECTIONS):
        raise InvalidInputError("an outline must be an object with 'keywords', 'infos' and/or 'relations'")
    for section, fields, needed in _SECTIONS:
        items = outline.get(section, [])
        if type(items) is not list:
            raise InvalidInputError(f"{section!r} must be a list")
        for index, item in enumerate(items):
            if type(item) is not dict or not all(field in item for field in needed):
                raise InvalidInputError(f"{section}[{index}] must be an object with {' and '.join(map(repr, needed))}")
            if not fields.issuperset(item):
                unknown = sorted(str(key) for key in item if key not in fields)
                raise InvalidInputError(f"{section}[{index}] has unknown field(s) {', '.join(unknown)}; "
                                        f"allowed: {', '.join(sorted(fields))}")
    return outline


def _keyword_specs(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs, refs = [], set()
    for index, item in enumerate(items):
        if type(item["ref"]) is not str or not item["ref"]:
            raise InvalidInputError(f"keywords[{index}].ref must be a non-empty string, got {shown(item['ref'])}")
        spec = {key: value for key, value in item.items() if key != "parent"}
        if "parent" in item:
            if type(item["parent"]) is not str or item["parent"] not in refs:
                raise InvalidInputError(f"keywords[{index}].parent: {item['parent']!r} is not the ref of an "
                                        f"earlier keyword of this outline")
            spec["parent_ref"] = item["parent"]
        refs.add(item["ref"])
        specs.append(spec)
    return specs


def _resolve(ids: Mapping[str, str], ref: object, where: str) -> str:
    if type(ref) is not str or ref not in ids:
        raise InvalidInputError(f"{where}: {ref!r} is not the ref of a keyword in this outline")
    return ids[ref]


def _renamed(exc: KwtreeError, section: str) -> KwtreeError:
    """``exc`` of a batch decider, its ``specs[i]`` named as the outline's ``section[i]``."""
    name_in_message(exc, section, instead_of="specs")
    return exc


def load_outline(state: State, stamp: Stamp, sections: Mapping[str, list[Any]]) -> list[Change]:
    """The keywords, infos (with their links) and relations of an outline that passed
    ``check_outline``, in that order."""
    specs = _keyword_specs(sections.get("keywords", []))  # (its errors name the outline's items already)
    try:
        keyword_changes = batch_create_keywords(state, stamp, specs)
    except KwtreeError as exc:
        raise _renamed(exc, "keywords") from None
    ids = {item["ref"]: keyword.id for item, keyword in zip(sections.get("keywords", []), _keywords(keyword_changes),
                                                             strict=True)}
    infos, relations = sections.get("infos", []), sections.get("relations", [])
    if not infos and not relations:
        return keyword_changes
    fork = state.fork()  # (the infos' links and the relations name the new keywords)
    put_changes(fork, keyword_changes)
    specs = []
    for index, item in enumerate(infos):
        refs = item.get("keywords", [])
        if type(refs) is not list:
            raise InvalidInputError(f"infos[{index}].keywords must be a list of refs")
        spec = {key: value for key, value in item.items() if key != "keywords"}
        spec["keyword_ids"] = [_resolve(ids, ref, f"infos[{index}].keywords") for ref in refs]
        specs.append(spec)
    try:
        info_changes = batch_create_infos(fork, stamp, specs)
    except KwtreeError as exc:
        raise _renamed(exc, "infos") from None
    relation_changes: list[Change] = []
    for index, item in enumerate(relations):
        where = f"relations[{index}]"
        source, target = _resolve(ids, item["from"], f"{where}.from"), _resolve(ids, item["to"], f"{where}.to")
        try:
            made = relate(fork, stamp, source, target, item.get("type", "related_to"), item.get("weight", 1.0),
                          item.get("reason", ""))
        except KwtreeError as exc:
            name_in_message(exc, f"{where}: ")
            raise
        put_changes(fork, made)
        relation_changes.extend(made)
    return [*keyword_changes, *info_changes, *coalesce(relation_changes)]


def _keywords(changes: Sequence[Change]) -> list[Keyword]:
    return [change.after for change in changes if type(change.after) is Keyword]


def loaded(op: Operation | None, outline: Mapping[str, list[Any]]) -> LoadedOutline:
    """What ``load_outline``'s committed operation ``op`` (None: nothing written) of ``outline``
    wrote: the new keywords by ref, and how many infos and relations (a relation given twice, or
    as it already was, counts as what was written)."""
    changes = () if op is None else op.changes
    refs = [item["ref"] for item in outline.get("keywords", [])]
    return LoadedOutline(dict(zip(refs, (keyword.id for keyword in _keywords(changes)), strict=True)),
                         sum(type(change.after) is Info for change in changes),
                         sum(type(change.after) is Relation for change in changes), None if op is None else op.op_id)
