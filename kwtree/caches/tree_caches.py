"""The caches of one open tree (``TreeCaches``): the full-text index, the vector store, and the
embedding worker (the outbox of embedding work that fills the vector store, with the thread that
drains it: ``kwtree.caches.embedding_worker``). All live under
``<data_dir>/cache/`` (the outbox is ``<data_dir>/outbox.jsonl``) and all can be deleted: they are
rebuilt from the log.

- **Full text** is a projection of the log with a lock of its own (``kwtree.caches.fulltext_projection``):
  writes note what they changed; a search first brings the index up to the tree's state, never waiting for
  the log's writer lock. ``TreeCaches.fulltext`` is it.
- **Vectors** (``kwtree.caches.vector_projection``, ``TreeCaches.vectors``) are eventually consistent:
  every committed text enqueues its embedding in the outbox of the embedding worker
  (``TreeCaches.worker``); its thread (or ``kwtree worker``) embeds in batches; the scan at open
  enqueues every live entity whose current text has no vector (only those written after the store's
  recorded position, when its files are as that position found them), so a lost outbox row costs
  nothing. Recall uses what is embedded; a vector of an older text is never returned. A tree that
  may not write (``read_only``, ``as_of``) embeds nothing and queues nothing: it opens the vector
  store and the outbox read-only, searches what writers embedded (a graph it has to build stays in
  memory) and, in ``wait_indexed``, waits for other processes' workers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from kwtree.caches.embed import Embedder
from kwtree.caches.embedding_worker import EmbeddingWorker
from kwtree.caches.fulltext_projection import FullTextProjection, Hits
from kwtree.caches.texts import EntityKey
from kwtree.caches.vector_projection import Newer, VectorProjection
from kwtree.engine.state import State
from kwtree.errors import ReadOnlyError
from kwtree.models import ROOT_ID, Info, Keyword, Operation
from kwtree.progress import ProgressCallback
from kwtree.stores.directory import CACHE_DIR, OUTBOX_NAME
from kwtree.stores.files import PRIVATE_FILE_MODE

__all__ = ["TreeCaches"]

log = logging.getLogger("kwtree.cache")

T = TypeVar("T")
Reader = Callable[[Callable[[State], T]], T]


class TreeCaches:
    """The caches of one open tree: its full-text index (``fulltext``), its vector store
    (``vectors``) and the embedding worker that fills it (``worker``)."""

    def __init__(
        self,
        data_dir: Path,
        embedder: Embedder,
        read: Reader[Any],
        *,
        writes: bool,
        worker: bool,
        embed_async: bool,
        lock_timeout: float = 10.0,
        try_catch_up: Callable[[], int | None] | None = None,
        newer: Newer | None = None,
        write_vectors: bool | None = None,
        file_mode: int = PRIVATE_FILE_MODE,
        progress: ProgressCallback | None = None,
    ) -> None:
        """``writes``: whether this tree writes the shared caches (the full-text index waits
        at most ``lock_timeout`` for its lock; ``try_catch_up`` is ``Engine.try_catch_up``,
        ``newer`` ``Engine.try_newer_versions``).
        ``write_vectors``: whether this tree embeds, writes the vector store and queues work
        in the outbox; by default, when it ``writes``. ``kwtree worker`` reads the tree
        read-only but writes vectors. ``progress`` is told how the work a caller waits for
        goes (indexing full text, embedding in ``wait_indexed``; never the worker thread's
        background rounds)."""
        self._read = read
        self._progress = progress
        self._writes = writes
        self._write_vectors = writes if write_vectors is None else write_vectors
        self._embed_async = embed_async
        self._cache = data_dir / CACHE_DIR
        #: The full-text index, a projection of the log with a lock of its own.
        self.fulltext = FullTextProjection(self._cache, read, writes=writes, lock_timeout=lock_timeout,
                                           try_catch_up=try_catch_up, file_mode=file_mode, progress=progress)
        #: The vector store of the embedder's model, a projection of the log with a position.
        self.vectors = VectorProjection(self._cache, embedder, read, writes=self._write_vectors, file_mode=file_mode,
                                        newer=newer)
        #: The outbox of embedding work and the thread that drains it into ``vectors``.
        self.worker = EmbeddingWorker(data_dir / OUTBOX_NAME, self.vectors, read, self.embed, writes=writes,
                                      write_vectors=self._write_vectors, thread=worker, creating=self.fulltext.locked,
                                      file_mode=file_mode, progress=progress)

    def _recover_vanished_vectors(self) -> None:
        """If the vector store's directory was deleted under this tree, queue every text again
        (embedding them here when writes embed inline), so recall does not wait for the next
        open to see vectors again (``VectorProjection.vanished``)."""
        if not self.vectors.vanished():
            return
        self.worker.repair()
        if not self._embed_async and not self.worker.runs_thread:
            self.worker.wait_indexed()

    # --- writes ------------------------------------------------------------------------------

    def note(self, op: Operation, state: State) -> None:
        """Record what a committed operation changed (call after it was applied). No I/O:
        the write path stays as fast as the log; the worker thread queues the embeddings
        (a crash before it does loses nothing: the repair scan of the next open finds them),
        unless ``embed_async=False``, which embeds here."""
        touched: list[EntityKey] = []
        written: list[EntityKey] = []
        for change in op.changes:
            after = change.after
            if type(after) is Info:
                written.append(("info", after.id))
            elif type(after) is Keyword and after.id != ROOT_ID:
                written.append(("keyword", after.id))
                if state.children.get(after.id):  # its descendants' paths may have changed
                    touched.extend(("keyword", kid) for kid in state.subtree(after.id))
        self.fulltext.note([*written, *touched])
        if self._embed_async:
            self.worker.written(written)
            return
        try:
            work = self.vectors.unembedded(state, written)
            self.embed([(kind, entity_id, digest) for kind, entity_id, digest, _ in work])
        except Exception:  # the write is committed; the repair scan embeds it later
            log.exception("embedding inline after operation %s failed; the text is embedded later", op.op_id)

    def embed(self, items: list[tuple[str, str, str]]) -> dict[str, str | None]:
        """``VectorProjection.embed``, once a store deleted under this tree is made again."""
        self._recover_vanished_vectors()  # (may embed everything again itself)
        return self.vectors.embed(items)

    def reload_vectors(self, *, rebuild: bool = False) -> int:
        """Read the vector store again from its files (damage done under this tree is seen:
        a store whose meta.json is damaged is emptied, rows after a damaged key line or past
        the end of vectors.f32 are dropped), or with ``rebuild`` delete this model's vectors;
        then queue every live text that has no vector; returns how many were queued
        (``KeywordTree.repair``, ``KeywordTree.reindex``). Raises ReadOnlyError in a tree
        that does not write vectors."""
        self.vectors.reload(rebuild=rebuild)
        return self.worker.repair()

    def erase(self, entity_ids: set[str]) -> tuple[int, int]:
        """Purge what the caches hold of these (forgotten) entities: the full-text index's
        files are removed (tantivy keeps a deleted document's terms until a merge it cannot
        be asked for; the next search rebuilds the index from the state), their vector rows
        are erased in every model's store (``kwtree.stores.vector_erase``) and their outbox
        items dropped. Under the tree's write locks. Returns (vector rows erased, outbox
        items dropped). Raises ReadOnlyError in a tree that does not write."""
        if not self._writes or not self._write_vectors:
            raise ReadOnlyError("a tree that may not write cannot erase its caches")
        self.fulltext.reset()
        erased = self.vectors.erase(entity_ids)
        return erased, self.worker.discard(entity_ids)

    # --- reads -------------------------------------------------------------------------------

    @property
    def model(self) -> str:
        """The embedder's model name (the vectors this tree searches)."""
        return self.vectors.model

    def vector_hits(self, query: str, kind: str, k: int, within: Collection[str] | None = None) -> Hits:
        """``VectorProjection.hits``, once a store deleted under this tree is made again."""
        self._recover_vanished_vectors()
        return self.vectors.hits(query, kind, k, within)

    # --- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the worker, commit what the full-text index still lacks, persist the vectors
        and their graph (``VectorProjection.persist``); drop a private full-text index."""
        self.worker.close()
        self.fulltext.close()
        if self._write_vectors and self.vectors.exists():
            try:
                self.vectors.persist()  # readers (every CLI read) load the graph, not build it
                if not self.worker.backlog():
                    self.vectors.advance()  # the next open hashes only what is written after
            except Exception as exc:  # noqa: BLE001 -- a cache: the next writer saves it
                log.warning("could not save the vector graph on close: %s", exc)
        for closing in (self.vectors.close, self.worker.release):
            with contextlib.suppress(Exception):
                closing()
