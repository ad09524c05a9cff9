"""Everything that holds bytes: the event log's segments, the manifest, the writer lock, the
outbox file, the tantivy and hnswlib stores, snapshot archives, file modes and the helpers that
write files atomically. It imports only the ground floor (errors, models, normalize, validate,
limits) and the events codec, never anything above."""
