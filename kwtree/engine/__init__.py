"""The engine: the events codec (operations as JSONL rows, op ids, the clock), the State and
the one reducer that applies an operation to it, replay of a log into a State, the follower
that tails what other writers appended, history and references, and the ``Engine``
(``engine.py``) that owns an open directory and its write path. It may import the ground
floor (errors, models, normalize, validate, limits, progress, memory_schema) and
``kwtree.stores``; nothing above."""
