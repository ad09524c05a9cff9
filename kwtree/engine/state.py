"""The in-memory materialised state and the reducer that folds operations into it.

``apply_rows`` is the only way state changes, for replay (which hands it the rows it
decoded) and for live writes (``apply(state, op)``) alike: there is no second table, so a
reopened tree always matches the instance that wrote the log (DESIGN §4.1). It is
deterministic: the result depends only on the state and the operation (no clock, no I/O,
no randomness), and it never raises on a decoded operation, whatever history produced it.

Merged histories are resolved here (DESIGN §3, Kleppmann et al. 2021): a row whose parent
would make a keyword its own ancestor keeps the keyword's current parent, and a live
keyword whose parent is missing or deleted lives under the root. Both are logged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kwtree.memory_schema import ABSTRACT_KEY
from kwtree.models import FORGOTTEN_BY, NOTE, ROOT_ID, Entity, Info, Keyword, Link, Note, Operation, Relation
from kwtree.normalize import normalize_name

__all__ = ["State", "apply", "apply_rows", "name_keys"]

log = logging.getLogger("kwtree.engine.replay")

LinkKey = tuple[str, str]  # (info_id, keyword_id)
RelationKey = tuple[str, str, str]  # (from_id, to_id, type)


def name_keys(keyword: Keyword) -> set[str]:
    """The normalised lookup keys of a keyword's name and aliases (empty keys dropped)."""
    keys = {normalize_name(keyword.name)}
    keys.update(normalize_name(alias) for alias in keyword.aliases)
    keys.discard("")
    return keys


class State:
    """Entities by key plus the derived indexes. Tombstones stay in the entity maps (their
    version count continues if written again); the indexes hold live entities only, and only
    links and relations whose ends were written before them (one naming an id never written
    is damage, kept in ``links`` / ``relations`` for verify: see kwtree.engine.references)."""

    __slots__ = (
        "_own",
        "abstracted",
        "children",
        "forgotten",
        "infos",
        "infos_by_keyword",
        "keyword_journal",
        "keywords",
        "keywords_by_info",
        "last_op_id",
        "last_timestamp",
        "links",
        "names",
        "op_count",
        "rel_in",
        "rel_out",
        "relations",
        "shared_time",
        "solo_links",
    )

    def __init__(self) -> None:
        self.keywords: dict[str, Keyword] = {}
        self.infos: dict[str, Info] = {}
        self.links: dict[LinkKey, Link] = {}
        self.relations: dict[RelationKey, Relation] = {}
        #: normalised name or alias -> id of the live keyword (a list when several share it)
        self.names: dict[str, str | list[str]] = {}
        #: parent id -> live child ids, in the order they arrived under that parent
        self.children: dict[str, list[str]] = {}
        #: keyword id -> {info id: live link}, in link order
        self.infos_by_keyword: dict[str, dict[str, Link]] = {}
        #: info id -> keyword ids it has a live link to. An info linked to one keyword holds
        #: that keyword's one tuple in ``solo_links`` (most infos: 48 bytes less each)
        self.keywords_by_info: dict[str, tuple[str, ...]] = {}
        #: keyword id -> the tuple of just that id, shared by the infos linked to it alone
        self.solo_links: dict[str, tuple[str]] = {}
        self.rel_out: dict[str, dict[tuple[str, str], Relation]] = {}
        self.rel_in: dict[str, dict[tuple[str, str], Relation]] = {}
        #: ("keyword" or "info", id) -> the forget operation whose tombstone that entity's
        #: current version is (``kwtree.writes.forget``): which forget came last, without a
        #: look at every entity
        self.forgotten: dict[tuple[str, str], str] = {}
        #: ids of the keywords whose current version holds a stored abstract
        #: (``ABSTRACT_KEY`` in its metadata; deleted ones too): what recall's signposts read,
        #: without a look at every keyword
        self.abstracted: dict[str, None] = {}
        self.op_count = 0
        self.last_op_id: str | None = None
        self.last_timestamp = 0.0
        #: the created_at of the keyword or info stored last: the next one that has the same time
        #: (the rows of one operation do) holds this float object, not an equal one of its own
        self.shared_time = 0.0
        #: ids of keywords written since a consumer (the agent's text index) last took the
        #: list; None until a consumer asks for it, so replay pays nothing for it
        self.keyword_journal: list[str] | None = None
        #: None while this state shares none of its index containers (the lists and dicts
        #: in ``names``, ``children``, ``infos_by_keyword``, ``rel_out``, ``rel_in``) with a
        #: fork; else the ids of those it made since, which it may change in place (it copies
        #: any other before changing it: ``_mine``)
        self._own: set[int] | None = None

    def fork(self) -> State:
        """An independent copy to try operations on: what is applied to either later never
        shows in the other. Entities are shared (they are never changed in place once
        stored), and so are the index containers until one of the two changes one: it copies
        that one first (copy on write), so a fork costs one copy of each map, not of every
        list and dict in them (a deep copy took 0.85 s at a million keywords)."""
        copy = State()  # (``copy()``, not ``dict()``: a map loaded from the checkpoint stays lazy)
        copy.keywords = self.keywords.copy()
        copy.infos = self.infos.copy()
        copy.links = self.links.copy()
        copy.relations = self.relations.copy()
        copy.names = self.names.copy()
        copy.children = self.children.copy()
        copy.infos_by_keyword = self.infos_by_keyword.copy()
        copy.keywords_by_info = self.keywords_by_info.copy()  # (tuples: shared)
        copy.solo_links = self.solo_links.copy()
        copy.rel_out = self.rel_out.copy()
        copy.rel_in = self.rel_in.copy()
        copy.forgotten = self.forgotten.copy()
        copy.abstracted = self.abstracted.copy()
        self._own, copy._own = set(), set()  # (both share every container now)
        copy.op_count = self.op_count
        copy.last_op_id = self.last_op_id
        copy.last_timestamp = self.last_timestamp
        copy.shared_time = self.shared_time
        return copy

    def _mine(self, table: dict[Any, Any], key: Any, container: Any) -> Any:
        """``container`` (``table[key]``, a list or dict of an index) as one this state may
        change in place: a copy, stored in its place, when it may be shared with a fork."""
        own = self._own
        if own is None or id(container) in own:
            return container
        container = container.copy()
        table[key] = container
        own.add(id(container))
        return container

    # --- queries the reducer and the commands share ---------------------------------------

    def live_keyword(self, keyword_id: str) -> Keyword | None:
        keyword = self.keywords.get(keyword_id)
        return None if keyword is None or keyword.deleted else keyword

    def live_info(self, info_id: str) -> Info | None:
        info = self.infos.get(info_id)
        return None if info is None or info.deleted else info

    def is_descendant(self, node_id: str, ancestor_id: str) -> bool:
        """True if ``ancestor_id`` is ``node_id`` or one of its ancestors."""
        keywords = self.keywords
        current: str | None = node_id
        while current is not None:
            if current == ancestor_id:
                return True
            current = keywords[current].parent_id
        return False

    def ancestry(self, keyword_id: str) -> list[str]:
        """Ids from the root down to ``keyword_id`` (root first)."""
        keywords = self.keywords
        path: list[str] = []
        node: str | None = keyword_id
        while node is not None:
            path.append(node)
            node = keywords[node].parent_id
        path.reverse()
        return path

    def subtree(self, keyword_id: str) -> Iterator[str]:
        """Ids of the live subtree under ``keyword_id`` (itself first), depth first."""
        stack = [keyword_id]
        children = self.children
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(children.get(node, ())))

    def lookup_names(self, key: str) -> list[str]:
        """Ids of the live keywords answering to ``key``, oldest first (by creation time, then
        id: an order that replay and compaction cannot change)."""
        found = self.names.get(key)
        if found is None:
            return []
        if type(found) is str:
            return [found]
        keywords = self.keywords
        return sorted(found, key=lambda kid: (keywords[kid].created_at, kid))

    # --- keyword reducer -------------------------------------------------------------------

    def put_keyword(self, k: Keyword) -> None:
        shared = self.shared_time  # (as put_info: inline, this runs for every keyword row)
        if k.created_at == shared:
            if k.updated_at == shared:
                k.updated_at = shared
            k.created_at = shared
        else:
            self.shared_time = k.created_at
        keywords = self.keywords
        kid = k.id
        journal = self.keyword_journal
        if journal is not None:
            journal.append(kid)
        old: Keyword | None = keywords.setdefault(kid, k)  # one probe both finds an old version and stores k
        if old is k:
            old = None
            if not k.deleted and k.aliases == () and kid != ROOT_ID:
                # Fast path for the commonest row (a new keyword without aliases under a live
                # parent); the general path below gives the same result, only slower.
                parent = keywords.get(k.parent_id)  # type: ignore[arg-type]
                if parent is not None and not parent.deleted and parent is not k:
                    self._add_fresh(k, parent)
                    if ABSTRACT_KEY in k.metadata:
                        self.abstracted[kid] = None
                    return
        if old is not None:
            k.version = old.version + 1
        if kid == ROOT_ID:
            # The root is structural: always live, never anyone's child, not in the name index.
            k.parent_id, k.level, k.deleted = None, 0, False
            keywords[kid] = k
            return
        was_live = old is not None and not old.deleted
        if not k.deleted:
            parent = self._effective_parent(k, old, was_live)
            k.parent_id = parent.id
            k.level = parent.level + 1
        elif old is not None:
            k.level = old.level
        keywords[kid] = k  # (already there for a new id; replaces the old version otherwise)
        if k.deleted or self.forgotten:
            self._note_forgotten("keyword", k)
        if ABSTRACT_KEY in k.metadata:
            self.abstracted[kid] = None
        elif self.abstracted:
            self.abstracted.pop(kid, None)

        moved = was_live and (k.deleted or old.parent_id != k.parent_id)  # type: ignore[union-attr]
        if moved:
            pid = old.parent_id  # type: ignore[union-attr]
            self._mine(self.children, pid, self.children[pid]).remove(kid)  # type: ignore[index]
        if not k.deleted and (not was_live or moved):
            siblings = self.children.get(k.parent_id)  # type: ignore[arg-type]
            if siblings is None:
                self.children[k.parent_id] = [kid]  # type: ignore[index]
            else:
                self._mine(self.children, k.parent_id, siblings).append(kid)

        if was_live and (k.deleted or old.name != k.name or old.aliases != k.aliases):  # type: ignore[union-attr]
            for key in name_keys(old):  # type: ignore[arg-type]
                self._unindex_name(key, kid)
            if not k.deleted:
                self._index_names(k)
        elif not was_live and not k.deleted:
            self._index_names(k)

        if was_live and k.deleted:
            self._rehome_children(kid)
        elif moved and old.level != k.level:  # type: ignore[union-attr]
            self._relevel(kid)

    def _add_fresh(self, k: Keyword, parent: Keyword) -> None:
        """Index a new keyword without aliases under a live parent (already stored)."""
        kid = k.id
        k.parent_id = parent.id  # share the parent's id string
        k.level = parent.level + 1
        siblings = self.children.get(parent.id)
        if siblings is None:
            self.children[parent.id] = [kid]
        elif self._own is None:  # (inline: this runs for every new keyword a replay meets)
            siblings.append(kid)
        else:
            self._mine(self.children, parent.id, siblings).append(kid)
        key = normalize_name(k.name)
        if key:
            if key == k.name:
                key = k.name  # share the name string
            found = self.names.get(key)
            if found is None:
                self.names[key] = kid
            elif isinstance(found, str):
                self.names[key] = [found, kid]
            else:
                self._mine(self.names, key, found).append(kid)

    def _effective_parent(self, k: Keyword, old: Keyword | None, was_live: bool) -> Keyword:
        keywords = self.keywords
        parent = keywords.get(k.parent_id) if k.parent_id is not None else None
        if parent is None or parent.deleted or parent is k:
            if k.parent_id is not None:
                log.info("keyword %s: parent %s is missing or deleted; it lives under root",
                         k.id, k.parent_id)
            return keywords[ROOT_ID]
        if was_live and old.parent_id != parent.id and self.is_descendant(parent.id, k.id):  # type: ignore[union-attr]
            log.info("keyword %s: move under %s would form a cycle; move skipped", k.id, parent.id)
            return keywords[old.parent_id]  # type: ignore[union-attr,index]
        # A keyword that was deleted has no live descendants (they were re-homed when it
        # was deleted), so reviving it anywhere cannot form a cycle.
        return parent

    def _rehome_children(self, kid: str) -> None:
        orphans = self.children.pop(kid, None)
        if not orphans:
            return
        log.info("keyword %s deleted with live children %s; they move under root", kid, orphans)
        keywords = self.keywords
        root_children = self._mine(self.children, ROOT_ID, self.children.setdefault(ROOT_ID, []))
        for child_id in orphans:
            keywords[child_id] = dataclasses.replace(keywords[child_id], parent_id=ROOT_ID, level=1)
            root_children.append(child_id)
            self._relevel(child_id)

    def _relevel(self, kid: str) -> None:
        """Give the subtree under ``kid`` the levels its new position implies."""
        keywords = self.keywords
        children = self.children
        stack = [kid]
        while stack:
            node = stack.pop()
            level = keywords[node].level + 1
            for child_id in children.get(node, ()):
                child = keywords[child_id]
                if child.level != level:
                    keywords[child_id] = dataclasses.replace(child, level=level)
                stack.append(child_id)

    def _index_names(self, k: Keyword) -> None:
        names = self.names
        kid = k.id
        for key in name_keys(k):
            found = names.get(key)
            if found is None:
                names[key] = kid
            elif isinstance(found, str):
                if found != kid:
                    names[key] = [found, kid]
            elif kid not in found:
                self._mine(names, key, found).append(kid)

    def _unindex_name(self, key: str, kid: str) -> None:
        names = self.names
        found = names.get(key)
        if found == kid:
            del names[key]
        elif type(found) is list and kid in found:
            found = self._mine(names, key, found)
            found.remove(kid)
            if len(found) == 1:
                names[key] = found[0]

    # --- info, link and relation reducers --------------------------------------------------

    def put_info(self, info: Info) -> None:
        # An info written at the time of the entity stored before it (the rows of one
        # operation) holds that one's float: 32 bytes less per row of a batch.
        shared = self.shared_time
        if info.created_at == shared:
            if info.updated_at == shared:
                info.updated_at = shared
            info.created_at = shared
        else:
            self.shared_time = info.created_at
        old = self.infos.get(info.id)
        if old is not None:
            info.version = old.version + 1
        self.infos[info.id] = info
        if info.deleted or self.forgotten:
            self._note_forgotten("info", info)

    def _note_forgotten(self, kind: str, entity: Keyword | Info) -> None:
        """Keep ``forgotten`` in step with the version of ``entity`` just stored."""
        if entity.deleted and FORGOTTEN_BY in entity.metadata:
            self.forgotten[kind, entity.id] = str(entity.metadata[FORGOTTEN_BY])
        else:
            self.forgotten.pop((kind, entity.id), None)

    def put_link(self, link: Link) -> None:
        # The link holds its info's and keyword's own id strings, not equal copies (decoded
        # rows bring their own): a link costs no more strings than it has fields of its own.
        info, keyword = self.infos.get(link.info_id), self.keywords.get(link.keyword_id)
        if info is not None:
            link.info_id = info.id
            if link.created_at == info.created_at:  # (written by one operation: one float)
                link.created_at = info.created_at
        if keyword is not None:
            link.keyword_id = keyword.id
        key = (link.info_id, link.keyword_id)
        old = self.links.get(key)
        if old is not None:
            link.version = old.version + 1
        self.links[key] = link
        by_keyword = self.infos_by_keyword.get(link.keyword_id)
        indexed = by_keyword is not None and link.info_id in by_keyword
        if link.deleted or info is None or keyword is None:
            # A tombstone leaves the indexes; so does a link naming an info or keyword that
            # was never written (a damaged id, a lost segment): it is kept, inert, for verify.
            if indexed:
                by_keyword = self._mine(self.infos_by_keyword, link.keyword_id, by_keyword)
                del by_keyword[link.info_id]
                if not by_keyword:
                    del self.infos_by_keyword[link.keyword_id]
                by_info = tuple(kid for kid in self.keywords_by_info[link.info_id] if kid != link.keyword_id)
                if len(by_info) > 1:
                    self.keywords_by_info[link.info_id] = by_info
                elif by_info:
                    self.keywords_by_info[link.info_id] = self._solo(by_info[0])
                else:
                    del self.keywords_by_info[link.info_id]
        else:
            if by_keyword is None:
                self.infos_by_keyword[link.keyword_id] = {link.info_id: link}
            elif self._own is None:  # (inline: this runs for every link row)
                by_keyword[link.info_id] = link
            else:
                self._mine(self.infos_by_keyword, link.keyword_id, by_keyword)[link.info_id] = link
            if not indexed:
                held = self.keywords_by_info.get(link.info_id)
                if held is None:  # (inline: this runs for every link row)
                    held = self.solo_links.get(link.keyword_id) or self._solo(link.keyword_id)
                else:
                    held = (*held, link.keyword_id)
                self.keywords_by_info[link.info_id] = held

    def _solo(self, keyword_id: str) -> tuple[str]:
        """The one ``(keyword_id,)`` tuple every info linked to that keyword alone holds."""
        solo = self.solo_links.get(keyword_id)
        if solo is None:
            solo = self.solo_links[keyword_id] = (keyword_id,)
        return solo

    def put_relation(self, rel: Relation) -> None:
        key = (rel.from_id, rel.to_id, rel.type)
        old = self.relations.get(key)
        if old is not None:
            rel.version = old.version + 1
        self.relations[key] = rel
        out_key, in_key = (rel.to_id, rel.type), (rel.from_id, rel.type)
        if rel.deleted or rel.from_id not in self.keywords or rel.to_id not in self.keywords:
            # (a relation naming a keyword that was never written stays out, as links do)
            self._drop(self.rel_out, rel.from_id, out_key)
            self._drop(self.rel_in, rel.to_id, in_key)
        else:
            self._file(self.rel_out, rel.from_id, out_key, rel)
            self._file(self.rel_in, rel.to_id, in_key, rel)

    def _file(self, index: dict[str, dict[tuple[str, str], Relation]], node: str, key: tuple[str, str],
              rel: Relation) -> None:
        bucket = index.get(node)
        if bucket is None:
            index[node] = {key: rel}
        else:
            self._mine(index, node, bucket)[key] = rel

    def _drop(self, index: dict[str, dict[tuple[str, str], Relation]], node: str, key: tuple[str, str]) -> None:
        bucket = index.get(node)
        if bucket is None or key not in bucket:
            return  # it was not indexed (not live, or naming nothing)
        bucket = self._mine(index, node, bucket)
        del bucket[key]
        if not bucket:
            del index[node]


def _put_note(state: State, note: Note) -> None:
    """A note changes no entity (and ``apply_rows`` counts no operation for it)."""


PUT: dict[type[Entity | Note], Callable[[State, Any], None]] = {
    Keyword: State.put_keyword,
    Info: State.put_info,
    Link: State.put_link,
    Relation: State.put_relation,
    Note: _put_note,
}


def apply_rows(state: State, op_id: str, timestamp: float, entities: Iterable[Entity | Note]) -> None:
    """The reducer: fold one complete operation, given as its decoded rows, into ``state``
    (entities get their replayed version, level and effective parent set before they are
    stored). Replay calls it with the rows it decoded, without building an ``Operation``.

    A note (format 3, ``kwtree.models.Note``) changes nothing: not even ``op_count``,
    ``last_op_id`` or ``last_timestamp``, so a rewriter that records one (compaction, forget,
    repair) leaves every public read as it was.

    ``last_timestamp`` is the newest timestamp folded in, not the last one: a log merged from
    two writers may hold a later op id with an earlier timestamp (two writers in one
    millisecond), and the op clock takes this value as the floor of the next timestamp."""
    put = PUT
    entity: Entity | Note | None = None
    for entity in entities:
        put[type(entity)](state, entity)
    if entity is NOTE:
        return  # a note (its one row) says something about the log: no entity, no version of the state
    state.op_count += 1
    state.last_op_id = op_id
    if timestamp > state.last_timestamp:
        state.last_timestamp = timestamp


def apply(state: State, op: Operation) -> None:
    """Fold one complete operation into ``state`` (``apply_rows`` of its changes)."""
    apply_rows(state, op.op_id, op.timestamp, [change.after for change in op.changes])
