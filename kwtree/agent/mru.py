"""The MRU cache: keywords the agent matched recently, offered first as entry points."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["MRUCache"]


class MRUCache:
    """At most ``capacity`` keyword ids, most recently touched first. In memory only;
    safe to share between threads."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def touch(self, ids: Iterable[str]) -> None:
        """Mark ``ids`` as just used; the first id given ends up the most recent."""
        with self._lock:
            for kid in reversed(list(ids)):
                self._ids[kid] = None
                self._ids.move_to_end(kid, last=False)
            while len(self._ids) > self.capacity:
                self._ids.popitem(last=True)

    def evict(self, ids: Iterable[str]) -> None:
        with self._lock:
            for kid in ids:
                self._ids.pop(kid, None)

    def snapshot(self) -> list[str]:
        """The ids, most recent first."""
        with self._lock:
            return list(self._ids)

    def __len__(self) -> int:
        return len(self._ids)
