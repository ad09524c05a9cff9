"""Whole-directory operations: compaction, export and import, git integration, verify and
repair, format upgrade and tree metrics. Each works on a directory or a State, not on an open
tree's privates; it may import the ground floor, the engine, ``kwtree.stores`` and (verify,
for its fulltext check) the caches."""
