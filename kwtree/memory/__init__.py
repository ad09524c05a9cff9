"""Agent memory, one layer: ``layer.AgentMemory`` (every tree's ``tree.memory``) commits
conversations as memories, reads them by scope, builds prompt blocks and abstracts, and
reaches the tree only through the port it declares (``port.MemoryPort``). Extraction of candidate memories from a
session's messages (rule-based offline, one structured LLM call per chunk when a model is
given), the time a fact happened, the write policy of each memory category (a data table),
deduplication against what the tree already holds, what a commit does when its LLM fails,
and the decider that writes a whole session as one operation. It may import the ground
floor, the engine's State and codec, the write deciders, retrieval (scopes, lookup) and the
agent (LLM clients, the descend loop); the facade implements the port over the engine and the
caches, and never the other way round."""
