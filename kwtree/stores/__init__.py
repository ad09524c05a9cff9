"""Everything that holds bytes: the log-store protocol the engine reads and writes the log
through (``logstore``) and its JSONL implementation (``segments``, over the segment files of
``eventlog``, the writer lock of ``lock`` and the atomic swap of ``logswap``), the manifest,
the outbox file, the tantivy and hnswlib stores (and the in-place erasure of vectors),
snapshot archives, file modes and the helpers that write files atomically. It imports only
the ground floor (errors, models, normalize, validate, limits, progress, memory_schema, heap) and
the events codec, never anything above."""
