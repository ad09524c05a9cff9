"""What every facet of KeywordTree shares: the engine, the caches, the agent and the limits,
and the few steps each public method is made of (check the tree is open, read the state,
commit an operation).

The facets (``kwtree.facade.agent_calls``, ``.recall_calls``, ``.maintenance``, ``.forget_calls``) and
``KeywordTree`` itself derive from :class:`TreeCore`, and agent memory's port
(``.memory_port``) holds one; they reach the directory, the log and the State only through the
:class:`kwtree.engine.engine.Engine` it holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from kwtree.agent.clients import LLMClient
from kwtree.agent.descend import DescendLoop
from kwtree.caches.embed import Embedder
from kwtree.caches.tree_caches import TreeCaches
from kwtree.engine.engine import Decide, Engine
from kwtree.engine.state import State
from kwtree.limits import Limits
from kwtree.models import Keyword, Operation
from kwtree.progress import ProgressCallback
from kwtree.stores.lock import LOCK_NAME, WriterLock

__all__ = ["TreeCore"]

T = TypeVar("T")
#: Operations after which the MRU cache forgets the keywords they wrote.
_MRU_EVICTING = frozenset({"move_keyword", "merge_keywords", "delete_keyword", "reorganize", "undo"})


class TreeCore:
    """The parts of one open KeywordTree (set up by ``KeywordTree.__init__``)."""

    _engine: Engine
    _caches: TreeCaches
    #: The caches' embedder, whether they run a worker thread, whether writes embed later.
    _index_options: tuple[Embedder, bool, bool]
    _agent: DescendLoop
    #: The LLM the agent and agent memory ask (None: offline), and what a failed step does
    #: (``KeywordTree(on_agent_failure=...)``: "fallback" or "raise").
    _llm_client: LLMClient | None
    _on_agent_failure: str
    _limits: Limits
    _actor: str
    #: Told how the long work of this tree's calls goes (``KeywordTree(progress=...)``).
    _progress: ProgressCallback | None

    @property
    def file_mode(self) -> int:
        """The mode of the files this tree creates (its manifest's; ``0o600`` by default)."""
        return self._engine.file_mode

    def _check_open(self) -> None:
        """ClosedError once the tree is closed."""
        self._engine.check_open()

    def _check_writable(self) -> None:
        """ClosedError once closed; ReadOnlyError for ``read_only`` and ``as_of`` trees."""
        self._engine.check_writable()

    def _read(self, read: Callable[[State], T]) -> T:
        """``read`` applied to the current state under the state lock."""
        return self._engine.read(read)

    def _commit(self, kind: str, decide: Decide, audit: Mapping[str, Any] | None = None) -> Operation | None:
        """Decide, write durably and apply one operation (``Engine.commit``); None when there
        was nothing to write. The agent's MRU cache forgets the keywords a move, merge, delete,
        reorganisation or undo wrote."""
        op = self._engine.commit(kind, decide, audit)
        if op is not None and kind in _MRU_EVICTING:
            self._agent.forget(c.after.id for c in op.changes if type(c.after) is Keyword)
        return op

    def _open_caches(self) -> TreeCaches:
        """The caches of the engine's directory, as this tree's options want them."""
        embedder, worker, embed_async = self._index_options
        engine = self._engine
        return TreeCaches(engine.directory, embedder, engine.read, writes=engine.writable, worker=worker,
                       embed_async=embed_async, lock_timeout=engine.lock_timeout, try_catch_up=engine.try_catch_up,
                       newer=engine.try_newer_versions,
                       file_mode=engine.file_mode, progress=self._progress)

    def _caches_locked(self) -> AbstractContextManager[State]:
        """The locks under which this process writes its directory's caches. With the log in
        the directory, the engine's writer locks, with what other processes appended applied
        first: every process that opens it shares its caches, as the log, so they are only
        ever written from the log's latest state (a tree that had not read another writer's
        operations would take the index they fed for one ahead of the log and rebuild it at
        its own, older state). With the log elsewhere (PostgreSQL), the directory holds this
        process's caches only: the write mutex and the directory's own lock file, so that
        another machine holding the tree's lock (a compaction) never holds up a search here.
        ClosedError, ReadOnlyError, LockTimeoutError, CorruptLogError."""
        engine = self._engine
        return _directory_locked(engine) if engine.caches_only else engine.writing()

    def _note_commit(self, op: Operation, state: State) -> None:
        """The engine's commit listener: the caches note what to index."""
        self._caches.note(op, state)


@contextlib.contextmanager
def _directory_locked(engine: Engine) -> Iterator[State]:
    """The engine's write mutex, then the lock file of its directory."""
    engine.check_writable()
    with engine.exclusive() as state:
        lock = WriterLock(engine.directory / LOCK_NAME, engine.lock_timeout, file_mode=engine.file_mode)
        try:
            with lock:
                yield state
        finally:
            lock.close()
