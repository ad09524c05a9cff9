"""The caches: the coordinator that keeps the derived indexes (tantivy full text, hnswlib
vectors) in step with the State, the embedders, and the outbox the embedding worker drains.
Everything here can be rebuilt from the log. It may import the ground floor, the engine and
``kwtree.stores``; not retrieval, the agent, ops, the facade or the CLI."""
