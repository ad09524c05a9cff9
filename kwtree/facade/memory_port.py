"""The tree as agent memory sees it: :class:`TreePort`, the facade's side of
:class:`kwtree.memory.port.MemoryPort`. ``KeywordTree`` composes ``AgentMemory(TreePort(...))``
as ``tree.memory``; the port hands the layer the engine's reads and write path, the caches'
nearest texts, the descend loop's walk and recall, and nothing else.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from kwtree.agent.clients import LLMClient
from kwtree.agent.descend import Descent
from kwtree.agent.navigation import Navigator
from kwtree.engine.state import State
from kwtree.facade.core import TreeCore
from kwtree.limits import Limits
from kwtree.memory.layer import AgentMemory
from kwtree.memory.port import Hits
from kwtree.models import Change, Hit, Operation
from kwtree.writes import Stamp

__all__ = ["Recall", "TreePort", "memory_call"]

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
#: ``KeywordTree.recall`` as the port calls it: query, k, scope, min_score, provenance.
Recall = Callable[[str, int, list[str], float, "list[str] | None"], list[Hit]]


class TreePort:
    """:class:`kwtree.memory.port.MemoryPort` over one open tree (its caches are looked up at
    each call: ``restore`` and ``reindex`` open new ones)."""

    def __init__(self, tree: TreeCore, recall: Recall) -> None:
        self._tree = tree
        self._recall = recall

    @property
    def limits(self) -> Limits:
        return self._tree._limits

    @property
    def actor(self) -> str:
        return self._tree._actor

    @property
    def llm_client(self) -> LLMClient | None:
        return self._tree._llm_client

    @property
    def refuses_fallbacks(self) -> bool:
        return self._tree._on_agent_failure == "raise"

    @property
    def writable(self) -> bool:
        return self._tree._engine.writable

    def check_open(self) -> None:
        self._tree._check_open()

    def check_writable(self) -> None:
        self._tree._check_writable()

    def read(self, read: Callable[[State], T]) -> T:
        return self._tree._read(read)

    def commit(self, kind: str, decide: Callable[[State, Stamp], list[Change]],
               audit: Mapping[str, Any] | None = None) -> Operation | None:
        return self._tree._commit(kind, decide, audit)

    def text_hits(self, text: str, k: int, most_unindexed: int) -> tuple[Hits, frozenset[str]]:
        return self._tree._caches.fulltext.indexed_text_hits(text, "info", k, most_unindexed)

    def vector_hits(self, text: str, k: int) -> Hits:
        return self._tree._caches.vector_hits(text, "info", k)

    def walk(self, key: str, about: str, within: Sequence[str], navigator: Navigator | None) -> Descent:
        return self._tree._agent.descend(self._tree._read, key, "suggest_parent", about, within=within,
                                         navigator=navigator)

    def recall(self, query: str, k: int, scope: list[str], min_score: float,
               provenance: list[str] | None) -> list[Hit]:
        return self._recall(query, k, scope, min_score, provenance)


def memory_call(method: Callable[Concatenate[AgentMemory, P], R]) -> Callable[Concatenate[Any, P], R]:
    """A KeywordTree method that calls ``method`` of the tree's agent memory (``tree.memory``),
    with its signature and docstring."""

    @functools.wraps(method)
    def call(tree: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(tree.memory, *args, **kwargs)

    return call
