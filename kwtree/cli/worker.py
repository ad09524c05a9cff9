"""``kwtree worker``: an embedding worker process that drains a tree's outbox."""

from __future__ import annotations

import threading
from pathlib import Path

from kwtree.caches.embed import Embedder, tree_embedder
from kwtree.caches.outbox import Item, Outbox, run_worker
from kwtree.caches.tree_caches import TreeCaches
from kwtree.caches.workers import new_worker_id, retire_worker
from kwtree.engine.engine import Engine
from kwtree.progress import ProgressCallback, Ticker, check_progress
from kwtree.stores.directory import OUTBOX_NAME, open_error

__all__ = ["serve_outbox"]


def serve_outbox(
    data_dir: Path,
    embedder: Embedder | None = None,
    *,
    once: bool = False,
    stop: threading.Event | None = None,
    lease_seconds: float = 60.0,
    progress: ProgressCallback | None = None,
) -> int:
    """Run an embedding worker for the tree in ``data_dir`` in this process (``kwtree
    worker``): claim outbox items, embed their current text, store the vectors. Runs until
    ``stop`` is set, or with ``once`` until the outbox is empty. Returns the items processed.
    Several workers may run at once; leases (``lease_seconds`` long) keep them from embedding
    the same item twice, and an item whose worker died is taken over when its lease ends.
    ``embedder`` defaults to the tree's own (the one its manifest records: ``KeywordTree``).
    ``progress`` is told how many texts this worker embedded out of the outbox's backlog."""
    stop = stop or threading.Event()
    tick = Ticker(check_progress(progress), "embedding", None, "texts")
    processed = 0
    try:
        engine = Engine(Path(data_dir), writable=False)
    except OSError as exc:
        raise open_error(Path(data_dir), exc) from exc
    try:
        if embedder is None:
            embedder = tree_embedder(engine.recorded_embedder, None, new=False)[0]
        # The worker never writes the log, but it does write the vector store and the outbox,
        # which a read-only tree's own caches never do.
        caches = TreeCaches(Path(data_dir), embedder, engine.read, writes=False, worker=False,
                          embed_async=True, write_vectors=True, file_mode=engine.file_mode)
        outbox = Outbox(Path(data_dir) / OUTBOX_NAME, lease_seconds=lease_seconds, file_mode=engine.file_mode)
        worker = new_worker_id()

        def process(items: list[Item]) -> dict[str, str | None]:
            nonlocal processed
            engine.catch_up()  # the texts may have been written after this process last looked
            result = caches.embed([(item.kind, item.id, item.hash) for item in items])
            processed += len(items)
            tick.remaining(outbox.backlog() - len(items))  # (these are still open until recorded)
            return {item.key: result[f"{item.id}/{item.hash}"] for item in items}

        def start() -> None:
            caches.worker.repair(full=False)
            tick.remaining(outbox.backlog())
            tick.start()

        def idle() -> None:
            engine.catch_up()
            if outbox.backlog():
                return
            if caches.vectors.unsaved:  # a backlog is done: save the graph, record the position
                caches.vectors.persist()
                caches.vectors.advance()
            if once:
                stop.set()
                tick.finish()

        try:
            # The repair scan first: a lost outbox row costs nothing, what has no vector is
            # queued again. (A full disk makes the worker wait and retry, not exit.)
            run_worker(outbox, worker, process, stop=stop, on_idle=idle, on_start=start)
        finally:
            retire_worker(worker)
            outbox.close()
            caches.close()
    finally:
        engine.close()
    return processed
