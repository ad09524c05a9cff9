"""The facade: ``KeywordTree``, the public object, and its facets (the agent's writes, recall
and search, the whole-directory operations). The facets reach the log, the locks and the
State through the tree's write path only. It may import every package below it; only the CLI
and ``kwtree/__init__.py`` import it."""
