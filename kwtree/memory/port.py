"""What agent memory needs of the tree beneath it: the port :class:`kwtree.memory.layer.AgentMemory`
declares and the facade implements (``kwtree.facade.memory_port.TreePort``).

Agent memory reads the State, commits operations through a decider, asks the caches for the
texts nearest a candidate memory, walks the tree to place a new keyword, and recalls memories
for a prompt block. It reaches the engine, the caches and the descend loop only through these
calls, so the layer can be read, tested and replaced without the facade's other facets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from kwtree.agent.clients import LLMClient
from kwtree.agent.descend import Descent
from kwtree.agent.navigation import Navigator
from kwtree.engine.state import State
from kwtree.limits import Limits
from kwtree.models import Change, Hit, Operation
from kwtree.writes import Stamp

__all__ = ["Hits", "MemoryPort"]

T = TypeVar("T")
Hits = list[tuple[str, float]]  # (info id, score), best first


class MemoryPort(Protocol):
    """The tree as agent memory sees it."""

    @property
    def limits(self) -> Limits:
        """The tree's size limits."""

    @property
    def actor(self) -> str:
        """Who the tree's operations are recorded as written by."""

    @property
    def llm_client(self) -> LLMClient | None:
        """The tree's LLM client (None: the tree works offline)."""

    @property
    def refuses_fallbacks(self) -> bool:
        """Whether the tree was opened with ``on_agent_failure="raise"``: a step the LLM or the
        agent fails raises AgentError instead of falling back."""

    @property
    def writable(self) -> bool:
        """Whether the tree may write (not ``read_only``, not ``as_of``)."""

    def check_open(self) -> None:
        """ClosedError once the tree is closed."""

    def check_writable(self) -> None:
        """ClosedError once closed; ReadOnlyError for a tree that may not write."""

    def read(self, read: Callable[[State], T]) -> T:
        """``read`` applied to the current state under the state lock."""

    def commit(self, kind: str, decide: Callable[[State, Stamp], list[Change]],
               audit: Mapping[str, Any] | None = None) -> Operation | None:
        """Decide, write durably and apply one operation; None when there was nothing to write.
        ``decide`` may be asked more than once (on a newer state): it must not keep what it
        decided before."""

    def text_hits(self, text: str, k: int, most_unindexed: int) -> tuple[Hits, frozenset[str]]:
        """The ``k`` infos BM25 ranks nearest ``text`` over what the full-text index holds, and
        the ids of infos written since it last caught up (at most ``most_unindexed``; else it
        catches up first and none is returned), which the caller judges itself."""

    def vector_hits(self, text: str, k: int) -> Hits:
        """The ``k`` infos whose vectors are nearest ``text``'s."""

    def walk(self, key: str, about: str, within: Sequence[str], navigator: Navigator | None) -> Descent:
        """The descend loop's walk that places a new keyword named ``key`` (described by
        ``about``) inside the subtrees of ``within``; ``navigator`` instead of the tree's own
        (None: the tree's). Never raises for what the navigator does: failures are fallbacks."""

    def recall(self, query: str, k: int, scope: list[str], min_score: float,
               provenance: list[str] | None) -> list[Hit]:
        """``KeywordTree.recall(query, k=k, scope=scope, min_score=min_score,
        provenance=provenance)``."""
