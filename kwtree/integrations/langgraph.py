"""``KwtreeStore``: LangGraph's long-term memory store (``langgraph.store.base.BaseStore``) over a
KeywordTree, so a LangGraph agent's ``store.put`` / ``store.search`` land in kwtree's log, with
its history, undo, snapshots and hybrid recall (``pip install 'kwtree[langgraph]'``).

- **Namespaces are keywords.** The store lives in one scope (``scope``, default
  ``"agent:langgraph"``: its memories, ``forget(scope=...)`` erases them); a namespace
  ``("users", "alice", "memories")`` is the chain of keywords ``users › alice › memories`` under
  the scope's keyword, each keyword carrying its exact label (``NAMESPACE_LABEL``), so labels
  that differ only in case stay apart.
- **Values are memories.** An item is one info linked to its namespace's keyword: its metadata
  holds the key and the value (``ITEM_KEY``, ``ITEM_VALUE``); its content is the text the store
  searches, the value's strings (those at ``index["fields"]`` when the store is given an
  ``index``, LangGraph's setting; ``"$"`` the whole value), so recall's full-text and vector
  search find it. ``put`` of an existing key updates the info (the old value stays in
  ``history``); ``delete`` (``put`` of None) deletes it (hidden, undoable; ``forget`` erases).
  Each write is an operation of its own.
- **Search** with ``query`` is kwtree's hybrid recall inside the namespace's subtree (no floor:
  the best ``limit`` come back, as LangGraph's stores do), each ``SearchItem.score`` recall's
  score; without ``query`` the items in tree order (each namespace's in the order they were
  first put). ``filter`` keeps the items whose value matches, with LangGraph's grammar (a value,
  or ``{"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte": x}``; dicts match nested fields).
- **list_namespaces** lists the namespaces items were ever put in (``NAMESPACE_WRITTEN``), as
  LangGraph's in-memory store does, with ``prefix`` / ``suffix`` (``"*"`` a wildcard label),
  ``max_depth``, ``limit`` and ``offset``. No TTL (``supports_ttl`` is False).
``abatch`` runs ``batch`` in a worker thread: the tree is thread-safe and its writes are short.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.models import Info, Keyword
from kwtree.normalize import normalize_name
from kwtree.retrieval.scopes import clean_scope, scope_specs
from kwtree.validate import clean_metadata

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree

__all__ = ["ITEM_KEY", "ITEM_VALUE", "NAMESPACE_LABEL", "NAMESPACE_WRITTEN", "KwtreeStore"]

#: Keyword metadata: the namespace label a keyword stands for.
NAMESPACE_LABEL = "langgraph_namespace"
#: Keyword metadata: items were put in this namespace (list_namespaces lists it).
NAMESPACE_WRITTEN = "langgraph_written"
#: Info metadata: the item's key and value.
ITEM_KEY = "langgraph_key"
ITEM_VALUE = "langgraph_value"
_OPERATORS = {"$eq": lambda a, b: a == b, "$ne": lambda a, b: a != b, "$gt": lambda a, b: a > b,
              "$gte": lambda a, b: a >= b, "$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)


def _at(value: Mapping[str, Any], path: str) -> Any:
    found: Any = value
    for part in path.split("."):
        found = found.get(part) if isinstance(found, Mapping) else None
    return found


def _matches(value: Any, condition: Any) -> bool:
    """LangGraph's filter grammar (its in-memory store's reading of it)."""
    if isinstance(condition, Mapping):
        if any(str(key).startswith("$") for key in condition):
            try:
                return all(_OPERATORS[op](value, want) for op, want in condition.items())
            except KeyError as exc:
                raise InvalidInputError(f"filter: unknown operator {exc.args[0]!r}; use one of "
                                        f"{', '.join(_OPERATORS)}") from None
            except TypeError:
                return False
        return isinstance(value, Mapping) and all(_matches(value.get(k), v) for k, v in condition.items())
    if isinstance(condition, (list, tuple)):
        return isinstance(value, (list, tuple)) and len(value) == len(condition) and all(
            _matches(have, want) for have, want in zip(value, condition, strict=True))
    return bool(value == condition)


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path, strict=False) if condition.match_type == "prefix" else zip(
        reversed(namespace), reversed(path), strict=False)
    return all(want == "*" or have == want for have, want in pairs)


class KwtreeStore(BaseStore):
    """LangGraph's ``BaseStore`` over ``tree`` (which the caller opens and closes), inside scope
    ``scope``; ``index`` (LangGraph's ``{"fields": [...]}``; its ``embed`` and ``dims`` are the
    tree's embedder's business) says which parts of a value are searched. See the module's
    docstring."""

    supports_ttl = False

    def __init__(self, tree: KeywordTree, *, scope: str = "agent:langgraph",
                 index: Mapping[str, Any] | None = None) -> None:
        self.tree = tree
        self.scope = clean_scope(scope)
        fields = (index or {}).get("fields", ["$"])
        if not isinstance(fields, list) or not all(isinstance(field, str) and field for field in fields):
            raise InvalidInputError(f"index.fields must be a list of paths such as ['text'], got {fields!r}")
        self.fields: list[str] = fields
        # Item key -> memory id, per namespace keyword, as of the tree's last operation: a get
        # looks one entry up instead of reading every item of its namespace; any operation
        # the tree applies (a write here or elsewhere, a refresh) drops them all.
        self._keys: dict[str, dict[str, str]] = {}
        self._keys_at: str | None = None
        self._keys_lock = threading.Lock()

    # --- LangGraph's entry points ------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Each op in order, its result at its place (LangGraph's contract)."""
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op.namespace, op.key))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise InvalidInputError(f"ops: {type(op).__name__} is no LangGraph store operation")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread."""
        return await asyncio.to_thread(self.batch, list(ops))

    # --- the operations ----------------------------------------------------------------------

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        keyword = self._namespace(namespace)
        info = self._item_info(keyword, key) if keyword is not None else None
        return None if info is None else self._item(info, namespace)

    def _put(self, op: PutOp) -> None:
        namespace, key = tuple(op.namespace), op.key
        _check_namespace(namespace)
        if not isinstance(key, str) or not key:
            raise InvalidInputError(f"key must be a non-empty string, got {key!r}")
        if op.ttl is not None:
            raise InvalidInputError("ttl: KwtreeStore keeps items until deleted (supports_ttl is False)")
        keyword = self._namespace(namespace)
        held = self._item_info(keyword, key) if keyword is not None else None
        if op.value is None:
            if held is not None:
                self.tree.delete_info(held.id)
            return
        if not isinstance(op.value, Mapping):
            raise InvalidInputError(f"value must be a dict (or None to delete), got {type(op.value).__name__}")
        value = dict(op.value)
        metadata = clean_metadata({ITEM_KEY: key, ITEM_VALUE: value})  # checked before any keyword is made
        content = self._text(key, value)
        if held is not None:
            self.tree.update_info(held.id, {"content": content, "metadata": metadata})
            return
        if keyword is None:
            keyword = self._create_namespace(namespace)
        elif not keyword.metadata.get(NAMESPACE_WRITTEN):  # was only on the way to a deeper one
            keyword = self.tree.update_keyword(keyword.id, {"metadata": {**keyword.metadata, NAMESPACE_WRITTEN: True}},
                                               keyword.version)
        self.tree.create_info(content, keyword_ids=[keyword.id], metadata=metadata)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        top = self._namespace(prefix) if prefix else self.tree.memory.scope_keyword(self.scope)
        if top is None or op.limit <= 0:
            return []
        found: list[tuple[Info, float | None]] = []
        if op.query:
            wanted = op.offset + op.limit
            k = min(1000, max(wanted * 4, 50))
            for hit in self.tree.recall(op.query, k=k, scope=self.scope, under=top.id, min_score=0):
                if ITEM_KEY in hit.info.metadata:
                    found.append((hit.info, hit.score))
        else:
            found = [(info, None) for info in self._infos_under(top)]
        kept = [(info, score) for info, score in found
                if not op.filter or all(_matches(info.metadata[ITEM_VALUE].get(field), condition)
                                        for field, condition in op.filter.items())]
        page = kept[op.offset:op.offset + op.limit]
        return [self._search_item(info, score) for info, score in page]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        scope_kw = self.tree.memory.scope_keyword(self.scope)
        if scope_kw is None:
            return []
        namespaces = [namespace for namespace, keyword in self._walk(scope_kw.id, ())
                      if keyword.metadata.get(NAMESPACE_WRITTEN)]
        if op.match_conditions:
            namespaces = [ns for ns in namespaces if all(_namespace_matches(c, ns) for c in op.match_conditions)]
        if op.max_depth is not None:
            namespaces = list({ns[:op.max_depth] for ns in namespaces})
        return sorted(namespaces)[op.offset:op.offset + op.limit]

    # --- namespaces and items ----------------------------------------------------------------

    def _walk(self, keyword_id: str, above: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Keyword]]:
        """Every namespace keyword under ``keyword_id`` (depth first, in the order they arrived)."""
        for child in self.tree.get_children(keyword_id):
            label = child.metadata.get(NAMESPACE_LABEL)
            if isinstance(label, str):
                yield (*above, label), child
                yield from self._walk(child.id, (*above, label))

    def _namespace(self, namespace: tuple[str, ...]) -> Keyword | None:
        keyword = self.tree.memory.scope_keyword(self.scope)
        for label in namespace:
            if keyword is None:
                return None
            keyword = next((child for child in self.tree.get_children(keyword.id)
                            if child.metadata.get(NAMESPACE_LABEL) == label), None)
        return keyword

    def _create_namespace(self, namespace: tuple[str, ...]) -> Keyword:
        """The namespace's keywords, those missing created in one operation."""
        specs, parent = scope_specs(self.scope, self.tree.scope_keyword)
        for depth, label in enumerate(namespace):
            found = None
            if "parent_id" in parent:
                found = next((child for child in self.tree.get_children(parent["parent_id"])
                              if child.metadata.get(NAMESPACE_LABEL) == label), None)
            if found is not None:
                parent = {"parent_id": found.id}
                continue
            taken = {normalize_name(child.name) for child in self.tree.get_children(parent["parent_id"])} \
                if "parent_id" in parent else set()
            name, twin = label, 1
            while normalize_name(name) in taken:  # "Alice" beside "alice": a name of its own, the label kept
                twin += 1
                name = f"{label} ({twin})"
            ref = f"namespace:{depth}"
            written = {NAMESPACE_WRITTEN: True} if depth == len(namespace) - 1 else {}
            specs.append({"name": name, "metadata": {NAMESPACE_LABEL: label, **written}, "ref": ref, **parent})
            parent = {"parent_ref": ref}
        if not specs:
            found_kw = self._namespace(namespace)
            assert found_kw is not None
            return found_kw
        return self.tree.batch_create_keywords(specs)[-1]

    def _item_info(self, keyword: Keyword, key: str) -> Info | None:
        with self._keys_lock:
            at = self.tree.last_op_id  # (read first: the items read next are at least as new)
            if at != self._keys_at:
                self._keys, self._keys_at = {}, at
            keys = self._keys.get(keyword.id)
            if keys is None:
                keys = self._keys[keyword.id] = {}
                for info in self._infos_of(keyword.id):
                    keys.setdefault(info.metadata[ITEM_KEY], info.id)  # the first, in link order
        info_id = keys.get(key)
        try:
            return None if info_id is None else self.tree.get_info(info_id)
        except NotFoundError:  # deleted by another thread since: read the namespace again
            with self._keys_lock:
                self._keys.pop(keyword.id, None)
            return self._item_info(keyword, key)

    def _infos_of(self, keyword_id: str) -> list[Info]:
        found, page = [], 0
        while batch := self.tree.get_infos_of_keyword(keyword_id, page=page, size=1000):
            found += [info for info in batch if ITEM_KEY in info.metadata]
            page += 1
        return found

    def _infos_under(self, top: Keyword) -> list[Info]:
        found = self._infos_of(top.id)
        for _, keyword in self._walk(top.id, ()):
            found += self._infos_of(keyword.id)
        return found

    def _namespace_of(self, info: Info) -> tuple[str, ...]:
        for keyword, _ in self.tree.get_keywords_of_info(info.id):
            if isinstance(keyword.metadata.get(NAMESPACE_LABEL), str):
                labels = (node.metadata.get(NAMESPACE_LABEL) for node in self.tree.get_path(keyword.id))
                return tuple(label for label in labels if isinstance(label, str))
        return ()

    def _text(self, key: str, value: Mapping[str, Any]) -> str:
        parts = [text for field in self.fields
                 for text in _strings(value if field == "$" else _at(value, field))]
        return "\n".join(parts) if any(part.strip() for part in parts) else key

    def _item(self, info: Info, namespace: tuple[str, ...]) -> Item:
        return Item(value=dict(info.metadata[ITEM_VALUE]), key=str(info.metadata[ITEM_KEY]), namespace=namespace,
                    created_at=datetime.fromtimestamp(info.created_at, UTC),
                    updated_at=datetime.fromtimestamp(info.updated_at, UTC))

    def _search_item(self, info: Info, score: float | None) -> SearchItem:
        item = self._item(info, self._namespace_of(info))
        return SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, score)


def _check_namespace(namespace: tuple[str, ...]) -> None:
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label:
            raise InvalidNamespaceError(f"Namespace labels must be non-empty strings without periods: {namespace!r}")
