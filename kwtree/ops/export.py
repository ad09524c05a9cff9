"""Export a tree as JSON or Markdown, and rebuild a tree from a JSON export.

The JSON export is versioned and keeps every live entity with the fields that define it::

    {"kwtree_export": 1, "exported_at": <epoch s>, "last_op_id": <op id of the source>,
     "keywords":  [{"id", "name", "aliases", "parent_id", "description", "metadata",
                    "created_at", "updated_at"}, ...],       # root first, parents before children
     "infos":     [{"id", "content", "source", "provenance", "metadata", "created_at", "updated_at"}, ...],
     "links":     [{"info_id", "keyword_id", "relation", "created_by", "created_at"}, ...],
     "relations": [{"from_id", "to_id", "type", "weight", "reason", "created_at"}, ...]}

Order is data, as the tree keeps it: siblings are listed in their children order; links in an
order that reproduces both the infos of every keyword and the keywords of every info; relations
both the outgoing and the incoming relations of every keyword. (``find_keywords`` orders by
creation time, which is exported, so the name index needs no order of its own.) Deleted
entities, and links and relations with a deleted end, are left out. Versions and op ids are
bookkeeping of the source log and are not exported.

``import_changes`` rebuilds the tree as ONE operation (kind ``"import"``): the root's fields if
they differ, the keywords in placement order, then infos, links and relations in file order.
``read_export`` checks the whole file first, so a bad file raises before anything is written.
An info keeps the ``provenance`` its entry gives; one without (an export made before kwtree
recorded provenance) is imported as ``"import"``.

The Markdown export is an outline for people (``_write_markdown`` says what it looks like);
it cannot be imported. Both writers stream to a temporary file that replaces ``path`` when it is
complete, so a reader never sees half an export.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import orjson

from kwtree.engine.events import Stamp
from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, NotFoundError, StorageError, storage_error
from kwtree.models import ROOT_ID, Change, Info, Keyword, Link, Relation, RelationType
from kwtree.ops.compaction import live_entities
from kwtree.progress import ProgressCallback, Ticker
from kwtree.stores.directory import KWTREE_ENTRIES
from kwtree.stores.eventlog import LOG_DIR
from kwtree.stores.files import PRIVATE_FILE_MODE, fsync_directory, write_atomically
from kwtree.stores.lock import LOCK_NAME
from kwtree.stores.manifest import MANIFEST_NAME
from kwtree.validate import (
    check_parent,
    clean_label,
    clean_metadata,
    clean_name_key,
    clean_path,
    clean_provenance,
    clean_relation_type,
    clean_text,
    clean_weight,
)

__all__ = [
    "EXPORT_FORMATS",
    "EXPORT_VERSION",
    "ExportData",
    "ImportPlan",
    "collect",
    "discard_import_target",
    "escape_markdown",
    "import_changes",
    "prepare_import_target",
    "read_export",
    "write_export",
]

EXPORT_VERSION = 1
EXPORT_FORMATS = ("json", "markdown")
T = TypeVar("T")


# --- collecting a consistent view ---------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class ExportData:
    """The live tree in export order (entities are shared with the state: never changed)."""

    keywords: list[Keyword]  # root first, parents before children, siblings in their order
    infos: list[Info]
    links: list[Link]
    relations: list[Relation]
    last_op_id: str | None


def collect(state: State) -> ExportData:
    """The live entities of ``state`` in export order (the order a compacted log holds them,
    whose replay rebuilds every list order of the state). O(entities); call it under the
    state lock, then write outside it (entities are never changed once stored)."""
    found: dict[type, list[Any]] = {Keyword: [], Info: [], Link: [], Relation: []}
    for entity in live_entities(state):
        found[type(entity)].append(entity)
    return ExportData(found[Keyword], found[Info], found[Link], found[Relation], state.last_op_id)


# --- writing ------------------------------------------------------------------------------------


def write_export(data: ExportData, path: str | os.PathLike[str], format: str, source: str,
                 file_mode: int = PRIVATE_FILE_MODE, progress: ProgressCallback | None = None) -> dict[str, Any]:
    """Write ``data`` to ``path`` as ``format``, atomically, as a file of mode ``file_mode``
    (the tree's: an export holds every memory); returns what was written. ``progress`` is
    told how many entities (JSON) or keywords (Markdown) are written.

    ``path`` is replaced only when the export is complete and synced (StorageError if the disk
    refuses it, DiskFullError when it is full; ``path`` is then unchanged and no temporary
    file is left)."""
    target = _export_target(path)
    exported_at = time.time()
    write = _write_json if format == "json" else _write_markdown
    total = (len(data.keywords) + len(data.infos) + len(data.links) + len(data.relations) if format == "json"
             else len(data.keywords) - 1)

    def body(out: IO[bytes]) -> None:
        write(data, out, exported_at, source, tick)

    with Ticker(progress, "exporting", total, "entities" if format == "json" else "keywords") as tick:
        _write_atomically(target, body, file_mode)
    return {
        "path": str(target),
        "format": format,
        "keywords": len(data.keywords) - 1,
        "infos": len(data.infos),
        "links": len(data.links),
        "relations": len(data.relations),
        "last_op_id": data.last_op_id,
    }


def _export_target(path: object) -> Path:
    target = clean_path(path, "path")
    if target.is_dir():
        raise InvalidInputError(f"path {target} is a directory; give the path of the file to write")
    check_parent(target, f"path {target}")
    return target


def _write_atomically(path: Path, write: Callable[[IO[bytes]], None], file_mode: int) -> None:
    try:
        write_atomically(path, write, file_mode)
    except OSError as exc:  # (write_atomically removed its temporary file)
        raise storage_error(f"could not write the export {path} ({path} is unchanged)", exc, path,
                            instead="export to another disk") from exc
    try:
        fsync_directory(path.parent)
    except OSError as exc:
        raise StorageError(f"{path} was written, but syncing its directory failed: {exc.strerror or exc}") from None


def _keyword_json(k: Keyword) -> dict[str, Any]:
    return {"id": k.id, "name": k.name, "aliases": list(k.aliases), "parent_id": k.parent_id,
            "description": k.description, "metadata": dict(k.metadata), "created_at": k.created_at,
            "updated_at": k.updated_at}


def _info_json(i: Info) -> dict[str, Any]:
    return {"id": i.id, "content": i.content, "source": i.source, "provenance": i.provenance,
            "metadata": dict(i.metadata),
            "created_at": i.created_at, "updated_at": i.updated_at}


def _link_json(link: Link) -> dict[str, Any]:
    return {"info_id": link.info_id, "keyword_id": link.keyword_id, "relation": link.relation.value,
            "created_by": link.created_by, "created_at": link.created_at}


def _relation_json(r: Relation) -> dict[str, Any]:
    return {"from_id": r.from_id, "to_id": r.to_id, "type": r.type, "weight": r.weight, "reason": r.reason,
            "created_at": r.created_at}


def _write_json(data: ExportData, out: IO[bytes], exported_at: float, source: str, tick: Ticker) -> None:
    # One entity per line, written as it is encoded: no giant string, and diffs stay readable.
    header = {"kwtree_export": EXPORT_VERSION, "exported_at": exported_at, "last_op_id": data.last_op_id}
    out.write(orjson.dumps(header)[:-1])
    sections: list[tuple[str, Sequence[Any], Callable[[Any], Any]]] = [
        ("keywords", data.keywords, _keyword_json), ("infos", data.infos, _info_json),
        ("links", data.links, _link_json), ("relations", data.relations, _relation_json)]
    dumps = orjson.dumps
    for name, items, encode in sections:
        out.write(b',\n"' + name.encode() + b'":[')
        separator = b"\n"
        for item in items:
            out.write(separator + dumps(encode(item)))
            separator = b",\n"
            tick.add()
        out.write(b"\n]" if items else b"]")
    out.write(b"\n}\n")


# --- Markdown -----------------------------------------------------------------------------------

_INLINE = str.maketrans({ch: "\\" + ch for ch in "\\`*_[]<>|~&"})
_LINE_START = re.compile(r"^([ \t]*)([#+\-=]|\d+(?=[.)]))", re.M)


def escape_markdown(text: str) -> str:
    """``text`` with the characters Markdown would read as markup backslash-escaped (emphasis,
    code, links, HTML, tables, and headings, list markers and rules at the start of a line)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_INLINE)

    def mark(match: re.Match[str]) -> str:
        lead, token = match.group(1), match.group(2)
        return f"{lead}{token}\\" if token[0].isdigit() else f"{lead}\\{token}"

    return _LINE_START.sub(mark, text)


def _item(indent: int, text: str) -> bytes:
    """A bullet at ``indent`` spaces; further lines of ``text`` continue it (indented under it)."""
    first, *rest = text.split("\n")
    pad = " " * (indent + 2)
    lines = [" " * indent + "- " + first, *((pad + line) if line.strip() else "" for line in rest)]
    return ("\n".join(lines) + "\n").encode()


def _write_markdown(data: ExportData, out: IO[bytes], exported_at: float, source: str, tick: Ticker) -> None:
    """An outline: keywords are bold bullets nested as in the tree (aliases in parentheses,
    description after a dash); under each, its infos as plain bullets in link order, then its
    child keywords. An info linked to several keywords is listed in full under each, with
    *also under:* naming the other keywords' paths. Then the relations, then the infos linked
    to no keyword. Metadata and times are only in the JSON export."""
    keywords = {k.id: k for k in data.keywords}
    children: dict[str | None, list[Keyword]] = {}  # (None never occurs: the root comes first)
    for keyword in data.keywords[1:]:
        children.setdefault(keyword.parent_id, []).append(keyword)
    links_of: dict[str, list[Link]] = {}
    keywords_of: dict[str, list[str]] = {}
    for link in data.links:
        links_of.setdefault(link.keyword_id, []).append(link)
        keywords_of.setdefault(link.info_id, []).append(link.keyword_id)
    infos = {info.id: info for info in data.infos}
    paths: dict[str, str] = {ROOT_ID: escape_markdown(keywords[ROOT_ID].name)}

    def path(kid: str) -> str:
        """"A › B › C" without the root (the root's own name for the root); iterative, so a
        tree of any depth works, and memoised along the way."""
        chain: list[str] = []
        node = kid
        while node not in paths:
            chain.append(node)
            parent = keywords[node].parent_id
            assert parent is not None  # only the root has none, and it is in paths
            node = parent
        found = paths[node]
        prefix = "" if node == ROOT_ID else found + " › "
        for node in reversed(chain):
            found = paths[node] = prefix + escape_markdown(keywords[node].name)
            prefix = found + " › "
        return found

    def info_items(kid: str, indent: int) -> Iterable[bytes]:
        for link in links_of.get(kid, ()):
            info = infos[link.info_id]
            notes = [] if link.relation is RelationType.PRIMARY else [link.relation.value]
            if info.source:
                notes.append("source: " + escape_markdown(info.source))
            others = [path(other) for other in keywords_of[info.id] if other != kid]
            if others:
                notes.append("also under: " + "; ".join(others))
            yield _item(indent, escape_markdown(info.content) + (f" — *{' · '.join(notes)}*" if notes else ""))

    when = datetime.fromtimestamp(exported_at, UTC).isoformat(timespec="seconds")
    out.write(
        f"# kwtree export\n\nExported from {escape_markdown(source)} at {when} (last operation "
        f"{data.last_op_id}): {len(data.keywords) - 1} keywords, {len(data.infos)} infos, {len(data.links)} links, "
        f"{len(data.relations)} relations.\n\n"
        "Keywords are **bold** bullets, with their aliases in parentheses and their description after a dash. "
        "The plain bullets just under a keyword are the infos linked to it, in link order, before its child "
        "keywords; an info linked to several keywords is listed in full under each of them, with *also under:* "
        "naming the others, and a link relation other than primary and the info's source are noted the same "
        "way. Metadata and times are kept only in the JSON export.\n\n## Tree\n\n".encode()
    )
    out.writelines(info_items(ROOT_ID, 0))
    stack = [(keyword, 0) for keyword in reversed(children.get(ROOT_ID, ()))]
    while stack:
        keyword, indent = stack.pop()
        text = f"**{escape_markdown(keyword.name)}**"
        if keyword.aliases:
            text += f" ({', '.join(escape_markdown(alias) for alias in keyword.aliases)})"
        if keyword.description:
            text += f" — {escape_markdown(keyword.description)}"
        out.write(_item(indent, text))
        out.writelines(info_items(keyword.id, indent + 2))
        tick.add()
        stack.extend((child, indent + 2) for child in reversed(children.get(keyword.id, ())))
    if data.relations:
        out.write(b"\n## Relations\n\n")
        for rel in data.relations:
            text = f"**{path(rel.from_id)}** → **{path(rel.to_id)}**: {escape_markdown(rel.type)}"
            if rel.weight != 1.0:
                text += f" (weight {rel.weight:g})"
            if rel.reason:
                text += f" — {escape_markdown(rel.reason)}"
            out.write(_item(0, text))
    unlinked = [info for info in data.infos if info.id not in keywords_of]
    if unlinked:
        out.write(b"\n## Infos linked to no keyword\n\n")
        for info in unlinked:
            note = f" — *source: {escape_markdown(info.source)}*" if info.source else ""
            out.write(_item(0, escape_markdown(info.content) + note))


# --- reading and checking an export -------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class ImportPlan:
    """A checked export: each entity as a dict of its fields, keywords in placement order."""

    root: dict[str, Any] | None  # the root's fields, when the file has the root
    keywords: list[dict[str, Any]]  # parents before children, siblings in file order
    infos: list[dict[str, Any]]
    links: list[dict[str, Any]]
    relations: list[dict[str, Any]]
    audit: dict[str, Any]


_TOP_FIELDS = frozenset({"kwtree_export", "exported_at", "last_op_id", "keywords", "infos", "links", "relations"})
_KEYWORD_FIELDS = frozenset({"id", "name", "aliases", "parent_id", "description", "metadata",
                             "created_at", "updated_at"})
_INFO_FIELDS = frozenset({"id", "content", "source", "provenance", "metadata", "created_at", "updated_at"})
#: The provenance of an imported info whose entry does not say (an export older than provenance).
IMPORT_PROVENANCE = "import"
_LINK_FIELDS = frozenset({"info_id", "keyword_id", "relation", "created_by", "created_at"})
_RELATION_FIELDS = frozenset({"from_id", "to_id", "type", "weight", "reason", "created_at"})
_MAX_ID = 200
_RELATIONS = {member.value: member for member in RelationType}


class _Bad(Exception):
    """A problem in the file. Messages raised while checking one entry start with the field
    (".name: ...") and get the entry's JSON path put in front by ``_each``; read_export turns
    them into InvalidInputError."""


def _each(items: list[Any], section: str, check: Callable[[Any], Any], tick: Ticker) -> list[Any]:
    """``check`` applied to every entry of ``$.section`` (paths are built only for an error)."""
    out = []
    for index, item in enumerate(items):
        try:
            out.append(check(item))
        except _Bad as exc:
            raise _Bad(f"$.{section}[{index}]{exc}") from None
        tick.add()
    return out


def _entry(item: object, allowed: frozenset[str], required: tuple[str, ...]) -> dict[str, Any]:
    if type(item) is not dict:
        raise _Bad(f" must be an object, got {_json_type(item)}")
    if not allowed.issuperset(item):
        unknown = sorted(set(item) - allowed)
        raise _Bad(f" has unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    for name in required:
        if name not in item:
            raise _Bad(f" has no {name!r}")
    return item


def _json_type(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _check(field: str, clean: Callable[..., T], *args: Any, **options: Any) -> T:
    try:
        return clean(*args, **options)
    except InvalidInputError as exc:
        raise _Bad(f".{field}: {exc}") from None


def _id(value: object, field: str) -> str:
    if type(value) is not str or not value:
        raise _Bad(f".{field} must be a non-empty id string, got {value!r}")
    # isprintable() is False for every whitespace character but the ASCII space.
    if len(value) > _MAX_ID or not value.isprintable() or " " in value or "/" in value:
        raise _Bad(f".{field} {value!r} is not an id: at most {_MAX_ID} printable characters, no spaces or '/'")
    return value


def _label(value: object, field: str) -> str:
    if type(value) is str and value and value.isprintable() and value.strip() == value:
        return value  # the common case, without clean_label's work
    return _check(field, clean_label, value, field)


def _time(value: object, field: str) -> float | None:
    if value is None:
        return None
    if (type(value) is not int and type(value) is not float) or not math.isfinite(value):
        raise _Bad(f".{field} must be a finite number of epoch seconds, got {value!r}")
    return float(value)


def _list(doc: dict[str, Any], name: str, required: bool = False) -> list[Any]:
    if name not in doc:
        if required:
            raise _Bad(f"$ has no {name!r} list")
        return []
    found = doc[name]
    if type(found) is not list:
        raise _Bad(f"$.{name} must be a list, got {_json_type(found)}")
    return found


def read_export(path: str | os.PathLike[str], progress: ProgressCallback | None = None) -> ImportPlan:
    """Read and check a JSON export; InvalidInputError names the JSON path of the first
    problem (a file that is missing or unreadable raises NotFoundError). ``progress`` is told
    how many entries are checked."""
    clean_path(path, "path")
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise NotFoundError(f"cannot read the export {path}: {exc.strerror or exc}") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"{path} is not JSON ({exc}); give a file written by export(format='json')") from None
    try:
        sections = [doc.get(name) for name in ("keywords", "infos", "links", "relations")] if type(doc) is dict else []
        with Ticker(progress, "checking the import", sum(len(entries) for entries in sections if type(entries) is list),
                    "entries") as tick:
            return _plan(doc, str(Path(path).resolve()), tick)
    except _Bad as exc:
        raise InvalidInputError(f"{path}: {exc}; fix it and import again (nothing was written)") from None


def _plan(doc: object, source: str, tick: Ticker) -> ImportPlan:
    if type(doc) is not dict or "kwtree_export" not in doc:
        raise _Bad("$ is not a kwtree export: it must be an object with \"kwtree_export\": 1")
    if doc["kwtree_export"] != EXPORT_VERSION or type(doc["kwtree_export"]) is not int:
        raise _Bad(f"$.kwtree_export is {doc['kwtree_export']!r}; this version of kwtree reads format {EXPORT_VERSION}")
    audit: dict[str, Any] = {"file": source}
    try:
        _entry(doc, _TOP_FIELDS, ())
        if doc.get("exported_at") is not None:
            audit["exported_at"] = _time(doc["exported_at"], "exported_at")
        if doc.get("last_op_id") is not None:
            audit["source_last_op_id"] = _label(doc["last_op_id"], "last_op_id")
    except _Bad as exc:
        raise _Bad(f"${exc}") from None
    root, keywords = _keywords(_list(doc, "keywords", required=True), tick)
    keyword_ids = {ROOT_ID, *(k["id"] for k in keywords)}
    infos = _each(_list(doc, "infos"), "infos", _Infos(keyword_ids), tick)
    links = _each(_list(doc, "links"), "links", _Links({i["id"] for i in infos}, keyword_ids), tick)
    relations = _each(_list(doc, "relations"), "relations", _Relations(keyword_ids), tick)
    return ImportPlan(root, keywords, infos, links, relations, {"import": audit})


def _keywords(items: list[Any], tick: Ticker) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    specs = _each(items, "keywords", _keyword, tick)
    root: dict[str, Any] | None = None
    found: dict[str, dict[str, Any]] = {}
    for index, spec in enumerate(specs):
        spec["index"] = index
        kid = spec["id"]
        if kid in found or (kid == ROOT_ID and root is not None):
            raise _Bad(f"$.keywords[{index}].id {kid!r} is listed twice")
        if kid == ROOT_ID:
            root = spec
        else:
            found[kid] = spec
    for spec in found.values():
        if spec["parent_id"] != ROOT_ID and spec["parent_id"] not in found:
            raise _Bad(f"$.keywords[{spec['index']}].parent_id: no keyword in the file has id {spec['parent_id']!r}")
    return root, _placement_order(found)


def _keyword(item: object) -> dict[str, Any]:
    entry = _entry(item, _KEYWORD_FIELDS, ("id", "name"))
    kid = _id(entry["id"], "id")
    if kid == ROOT_ID:
        name = _check("name", clean_text, entry["name"], "name", allow_empty=False)
        if entry.get("parent_id") is not None:
            raise _Bad(".parent_id must be null: the root has no parent")
        parent = None
    else:
        name = _check("name", clean_name_key, entry["name"])[0]
        parent = entry.get("parent_id", ROOT_ID)
        if parent is None:
            raise _Bad(".parent_id is null, but only the root has no parent; give the parent's id (or 'root')")
        parent = _id(parent, "parent_id")
    aliases = entry.get("aliases") or []
    if type(aliases) is not list:
        raise _Bad(f".aliases must be a list of names, got {_json_type(aliases)}")
    return {
        "id": kid,
        "name": name,
        "aliases": tuple(_check(f"aliases[{i}]", clean_name_key, a, "alias")[0] for i, a in enumerate(aliases)),
        "parent_id": parent,
        "description": _check("description", clean_text, entry.get("description", ""), "description", allow_empty=True),
        "metadata": _check("metadata", clean_metadata, entry.get("metadata")),
        "created_at": _time(entry.get("created_at"), "created_at"),
        "updated_at": _time(entry.get("updated_at"), "updated_at"),
    }


def _placement_order(found: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The keywords with every parent before its children and siblings in file order (the file
    order itself when it already is so); a keyword that never gets placed is on a cycle."""
    placed = {ROOT_ID}
    order: list[dict[str, Any]] = []
    waiting: dict[str, list[dict[str, Any]]] = {}
    for spec in found.values():
        if spec["parent_id"] not in placed:
            waiting.setdefault(spec["parent_id"], []).append(spec)
            continue
        stack = [spec]
        while stack:
            current = stack.pop()
            order.append(current)
            placed.add(current["id"])
            stack.extend(reversed(waiting.pop(current["id"], ())))
    if waiting:
        start = next(iter(waiting.values()))[0]
        cycle, node = [start["id"]], start["parent_id"]
        while node not in cycle:
            cycle.append(node)
            node = found[node]["parent_id"]
        loop = cycle[cycle.index(node):] + [node]
        raise _Bad(f"$.keywords[{found[node]['index']}].parent_id: the keywords {' → '.join(loop)} are each "
                   f"other's parents (a cycle that never reaches the root)")
    return order


class _Infos:
    """Checks one info entry (ids unique among infos and keywords)."""

    def __init__(self, keyword_ids: set[str]) -> None:
        self.keyword_ids = keyword_ids
        self.seen: set[str] = set()

    def __call__(self, item: object) -> dict[str, Any]:
        entry = _entry(item, _INFO_FIELDS, ("id", "content"))
        iid = _id(entry["id"], "id")
        if iid in self.seen:
            raise _Bad(f".id {iid!r} is listed twice")
        if iid in self.keyword_ids:
            raise _Bad(f".id {iid!r} is also a keyword's id; ids must be unique")
        self.seen.add(iid)
        return {
            "id": iid,
            "content": _check("content", clean_text, entry["content"], "content", allow_empty=False),
            "source": _check("source", clean_text, entry.get("source", ""), "source", allow_empty=True),
            "provenance": _check("provenance", clean_provenance, entry.get("provenance", IMPORT_PROVENANCE)),
            "metadata": _check("metadata", clean_metadata, entry.get("metadata")),
            "created_at": _time(entry.get("created_at"), "created_at"),
            "updated_at": _time(entry.get("updated_at"), "updated_at"),
        }


class _Links:
    """Checks one link entry (known ends, one link per pair)."""

    def __init__(self, info_ids: set[str], keyword_ids: set[str]) -> None:
        self.info_ids, self.keyword_ids = info_ids, keyword_ids
        self.seen: set[tuple[str, str]] = set()

    def __call__(self, item: object) -> dict[str, Any]:
        entry = _entry(item, _LINK_FIELDS, ("info_id", "keyword_id"))
        iid, kid = _id(entry["info_id"], "info_id"), _id(entry["keyword_id"], "keyword_id")
        if iid not in self.info_ids:
            raise _Bad(f".info_id: no info in the file has id {iid!r}")
        if kid not in self.keyword_ids:
            raise _Bad(f".keyword_id: no keyword in the file has id {kid!r}")
        if (iid, kid) in self.seen:
            raise _Bad(f": info {iid!r} is linked to keyword {kid!r} twice")
        self.seen.add((iid, kid))
        relation = entry.get("relation", "primary")
        return {
            "info_id": iid,
            "keyword_id": kid,
            "relation": (type(relation) is str and _RELATIONS.get(relation))
            or _check("relation", clean_relation_type, relation),
            "created_by": _label(entry.get("created_by", "user"), "created_by"),
            "created_at": _time(entry.get("created_at"), "created_at"),
        }


class _Relations:
    """Checks one relation entry (known ends, not a keyword to itself, one per type)."""

    def __init__(self, keyword_ids: set[str]) -> None:
        self.keyword_ids = keyword_ids
        self.seen: set[tuple[str, str, str]] = set()

    def __call__(self, item: object) -> dict[str, Any]:
        entry = _entry(item, _RELATION_FIELDS, ("from_id", "to_id"))
        src, dst = _id(entry["from_id"], "from_id"), _id(entry["to_id"], "to_id")
        for field, kid in (("from_id", src), ("to_id", dst)):
            if kid not in self.keyword_ids:
                raise _Bad(f".{field}: no keyword in the file has id {kid!r}")
        if src == dst:
            raise _Bad(": a keyword cannot be related to itself (from_id == to_id)")
        kind = _label(entry.get("type", "related_to"), "type")
        if (src, dst, kind) in self.seen:
            raise _Bad(f": the {kind!r} relation from {src!r} to {dst!r} is listed twice")
        self.seen.add((src, dst, kind))
        return {
            "from_id": src,
            "to_id": dst,
            "type": kind,
            "weight": _check("weight", clean_weight, entry.get("weight", 1.0)),
            "reason": _check("reason", clean_text, entry.get("reason", ""), "reason", allow_empty=True),
            "created_at": _time(entry.get("created_at"), "created_at"),
        }


# --- rebuilding -------------------------------------------------------------------------------


def import_changes(plan: ImportPlan, state: State, stamp: Stamp) -> list[Change]:
    """The rows that rebuild ``plan`` in ``state``, which must hold only the root: the root's
    new fields (when they differ), keywords, infos, links, relations. Times missing from the
    file become the operation's time."""
    if len(state.keywords) != 1 or state.infos or state.links or state.relations:
        raise InvalidInputError("the tree to import into is not empty; import into a new or empty directory")
    ts, op_id = stamp.timestamp, stamp.op_id
    changes: list[Change] = []
    root = state.keywords[ROOT_ID]
    if plan.root is not None:
        spec = plan.root
        created = spec["created_at"] if spec["created_at"] is not None else root.created_at
        new_root = Keyword(ROOT_ID, spec["name"], spec["aliases"], None, spec["description"], spec["metadata"],
                           root.version + 1, created, _updated(spec, created), False, op_id)
        fields = ("name", "aliases", "description", "created_at", "updated_at")
        if (any(getattr(new_root, f) != getattr(root, f) for f in fields)
                or dict(new_root.metadata) != dict(root.metadata)):
            changes.append(Change(new_root, root))
    for spec in plan.keywords:
        created = spec["created_at"] if spec["created_at"] is not None else ts
        keyword = Keyword(spec["id"], spec["name"], spec["aliases"], spec["parent_id"], spec["description"],
                          spec["metadata"], 1, created, _updated(spec, created), False, op_id)
        changes.append(Change(keyword, None))
    for spec in plan.infos:
        created = spec["created_at"] if spec["created_at"] is not None else ts
        info = Info(spec["id"], spec["content"], spec["source"], spec["metadata"], 1, created,
                    _updated(spec, created), False, op_id, spec["provenance"])
        changes.append(Change(info, None))
    for spec in plan.links:
        created = spec["created_at"] if spec["created_at"] is not None else ts
        changes.append(Change(Link(spec["info_id"], spec["keyword_id"], spec["relation"], spec["created_by"],
                                   created, False, 1, op_id), None))
    for spec in plan.relations:
        created = spec["created_at"] if spec["created_at"] is not None else ts
        changes.append(Change(Relation(spec["from_id"], spec["to_id"], spec["type"], spec["weight"], spec["reason"],
                                       created, False, 1, op_id), None))
    return changes


def _updated(spec: Mapping[str, Any], created: float) -> float:
    return spec["updated_at"] if spec["updated_at"] is not None else created


# --- the target directory -------------------------------------------------------------------------


def _only_kwtree_entries(target: Path) -> bool:
    """Whether everything in ``target`` is what creating or opening a tree makes (what an
    import killed before its own operation leaves)."""
    return all(name in KWTREE_ENTRIES or name in (LOCK_NAME, LOG_DIR) or name.startswith(f".{MANIFEST_NAME}.")
               for name in os.listdir(target))


def prepare_import_target(data_dir: object) -> bool:
    """Check that ``data_dir`` is a new or empty directory, or a tree an interrupted import
    left (the caller checks that it holds nothing but its ``init``); True if it does not exist yet."""
    if not isinstance(data_dir, (str, os.PathLike)) or not os.fspath(data_dir):
        raise InvalidInputError(f"data_dir must be a directory path (str or os.PathLike), got {data_dir!r}")
    target = Path(data_dir)
    if not target.exists():
        return True
    if not target.is_dir():
        raise InvalidInputError(f"data_dir {target} is a file; import into a new or empty directory")
    if any(target.iterdir()) and not _only_kwtree_entries(target):
        raise InvalidInputError(f"data_dir {target} is not empty; import into a new or empty directory")
    return False


def discard_import_target(data_dir: str | os.PathLike[str], was_new: bool) -> None:
    """Remove what a failed import created in ``data_dir`` (the directory too if it was new)."""
    target = Path(data_dir)
    if was_new:
        shutil.rmtree(target, ignore_errors=True)
        return
    if target.is_dir():
        for entry in target.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
