"""The facade: ``KeywordTree``, the public object, and its facets (the agent's writes, recall
and search, the whole-directory operations, forget), all built on ``core.TreeCore``; agent
memory (``kwtree.memory.layer.AgentMemory``) is composed in as ``tree.memory`` over the port
``memory_port.TreePort``, and the tree's methods of the same names delegate to it. They reach
the directory, the log, the locks and the State only through the public methods of the
``kwtree.engine.engine.Engine`` the tree holds, and load the optional whole-directory
operations (``kwtree.ops``, the snapshot archive code) on first use. It may import every
package below it; only the CLI, ``kwtree.testing`` (which checks users' trees) and
``kwtree/__init__.py`` import it."""
