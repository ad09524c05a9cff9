"""The caches: the projections of the log that a tree derives (the tantivy full-text index,
the hnswlib vector store), the embedders, the outbox the embedding worker drains, and
``TreeCaches``, which holds them for one open tree.
Everything here can be rebuilt from the log. It may import the ground floor, the engine and
``kwtree.stores``; not retrieval, the agent, ops, the facade or the CLI."""
