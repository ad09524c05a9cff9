"""Whole-directory operations: compaction, forget's rewrite of the log, restoring a snapshot, export and import, git
integration, verify and repair, format upgrade and tree metrics. Each works on a directory or a
State, not on an open tree's privates (an open tree that restores itself lends the restore its
``vacate`` and ``reopen``, see ``restore.Occupant``); it may import the ground floor, the engine,
``kwtree.stores``, the write deciders (import and repair decide the operations they append)
and (verify, for its fulltext check) the caches."""
