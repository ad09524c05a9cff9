"""A map whose values are made on first read: how a State loaded from its checkpoint holds
what it has not been asked for yet (``kwtree.engine.checkpoint``).

Opening a million-row tree made a million entity objects and filled dicts of a million keys
before anything read one: 0.6 s of constructors, 0.2 s a dict, and the garbage collector's
walk of them after; most opens read a few. A ``LazyRows`` starts as an empty dict plus the
checkpoint's keys, sorted, with their rows: reading a key finds its row by binary search and
makes its value from the checkpoint's columns, once; from then on it is an ordinary entry.
It answers every call of a dict as the dict it stands for would, iteration order included
(tests/test_lazy_rows.py holds it to that against a plain dict). Code that reads a dict's C
structure directly sees only the values made so far: ``json`` and ``orjson`` serialising it,
``dict``'s methods called unbound (``dict.get(rows, key)``); kwtree does neither with a
State's maps.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from kwtree.heap import collector_paused

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_keys, dict_values

__all__ = ["LazyRows", "Rows", "sorted_rows"]

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_ABSENT: Any = object()


class Rows(Generic[K]):
    """The keys a checkpoint holds: ``keys[row]`` in the order the dict had them, and the
    rows in the order of their keys (``by_key``), for finding a key's row by bisection.
    Read-only once made, so every copy of a map shares it."""

    __slots__ = ("by_key", "keys")

    def __init__(self, keys: Sequence[K], by_key: Sequence[int]) -> None:
        self.keys = keys
        self.by_key = by_key

    def __len__(self) -> int:
        return len(self.keys)

    def row(self, key: Any) -> int:
        """The row of ``key``; -1 when the checkpoint has no such key."""
        keys, by_key = self.keys, self.by_key
        try:
            at = bisect.bisect_left(by_key, key, key=keys.__getitem__)
        except TypeError:  # (a key of another type than the checkpoint's: not one of them)
            return -1
        if at < len(by_key) and keys[by_key[at]] == key:
            return by_key[at]
        return -1


class _Every(Generic[K]):
    """Every key of ``rows``, as a set of them answers ``in`` and ``len`` (by bisection): what
    a map has taken once every value was made."""

    __slots__ = ("rows",)

    def __init__(self, rows: Rows[K]) -> None:
        self.rows = rows

    def __contains__(self, key: object) -> bool:
        return self.rows.row(key) >= 0

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, key: K) -> None:
        """(Every key is in already.)"""


def sorted_rows(keys: Sequence[Any]) -> list[int]:
    """The rows of ``keys`` in the order of their keys (``Rows.by_key``)."""
    return sorted(range(len(keys)), key=keys.__getitem__)


def _made_all(row: Any) -> Any:
    raise AssertionError(f"row {row} asked of a map whose every value was made")


class LazyRows(dict[K, V]):
    """``dict`` of K -> V that starts with the keys of ``rows``, each of whose value is
    ``make(row)``, made when the key is first read. ``taken`` holds the checkpoint's keys
    that are pending no longer (made, set, or deleted); ``moved`` those of them deleted since,
    which lose their place as they would in a dict."""

    __slots__ = ("_lock", "_make", "_make_many", "_moved", "_replaced", "_rows", "_taken")

    def __init__(self, rows: Rows[K], make: Callable[[int], V],
                 make_many: Callable[[list[int]], Iterable[V]] | None = None) -> None:
        """``make_many(rows)``, when given, makes the values of many rows at once (in their
        order), as a call that needs the whole map does."""
        super().__init__()
        self._rows = rows
        self._make = make
        self._make_many = make_many if make_many is not None else (lambda rows: map(make, rows))
        self._taken: set[K] | _Every[K] = set()
        self._moved: set[K] = set()
        #: the checkpoint's keys whose value is not their row's any more (set, or deleted);
        #: kept once every value is made, for ``original``
        self._replaced: set[K] = set()
        self._lock = threading.Lock()  # (a reader never sees a key neither pending nor made)

    def _pending_row(self, key: Any) -> int:
        """The row of ``key`` while its value is still to be made; else -1."""
        if len(self._taken) == len(self._rows) or key in self._taken:
            return -1
        return self._rows.row(key)

    # --- reading one key ---------------------------------------------------------------------

    def __missing__(self, key: K) -> V:
        with self._lock:
            found = dict.get(self, key, _ABSENT)
            if found is not _ABSENT:  # (made by another thread meanwhile)
                return found  # type: ignore[no-any-return]
            row = self._pending_row(key)
            if row < 0:
                raise KeyError(key)
            value = self._make(row)
            dict.__setitem__(self, key, value)
            self._taken.add(key)
            return value

    @overload
    def get(self, key: K, default: None = None, /) -> V | None: ...
    @overload
    def get(self, key: K, default: V | D, /) -> V | D: ...

    def get(self, key: K, default: Any = None, /) -> Any:
        found = dict.get(self, key, _ABSENT)
        if found is not _ABSENT:
            return found
        try:
            return self.__missing__(key)
        except KeyError:
            return default

    def original(self, key: K, made: Callable[[], V]) -> V:
        """The value the checkpoint's row gives ``key``: this map's own object while it holds
        that one (made from the row, and neither set nor deleted since; made now if still
        pending), else ``made()``, from a caller that makes it from the row itself."""
        with self._lock:
            pending = False
            if key in self._taken:
                if key not in self._replaced:
                    found = dict.get(self, key, _ABSENT)  # (never __missing__: the lock is held)
                    if found is not _ABSENT:
                        return found  # type: ignore[no-any-return]
            else:
                pending = self._pending_row(key) >= 0
        return self[key] if pending else made()  # (self[key]: __missing__ takes the lock itself)

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        with self._lock:
            return dict.__contains__(self, key) or self._pending_row(key) >= 0

    def __len__(self) -> int:
        with self._lock:
            return dict.__len__(self) + len(self._rows) - len(self._taken)

    def __bool__(self) -> bool:
        return len(self) > 0

    # --- writing ------------------------------------------------------------------------------

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            if key in self._taken:
                self._replaced.add(key)
            elif self._pending_row(key) >= 0:
                self._taken.add(key)
                self._replaced.add(key)
            dict.__setitem__(self, key, value)

    def setdefault(self, key: K, default: V = None, /) -> V:  # type: ignore[assignment]
        found = self.get(key, _ABSENT)
        if found is not _ABSENT:
            return found  # type: ignore[no-any-return]
        self[key] = default
        return default

    def __delitem__(self, key: K) -> None:
        self.pop(key)

    @overload
    def pop(self, key: K, /) -> V: ...
    @overload
    def pop(self, key: K, default: V | D, /) -> V | D: ...

    def pop(self, key: K, *default: Any) -> Any:
        with self._lock:
            if dict.__contains__(self, key):
                if key in self._taken:
                    self._moved.add(key)
                    self._replaced.add(key)
                return dict.pop(self, key)
            row = self._pending_row(key)
            if row < 0:
                return dict.pop(self, key, *default)  # (KeyError, or the default)
            self._taken.add(key)
            self._moved.add(key)
            self._replaced.add(key)
            return self._make(row)

    def popitem(self) -> tuple[K, V]:
        self._fill()
        return dict.popitem(self)

    def clear(self) -> None:
        with self._lock:
            every = set(self._rows.keys)
            if type(self._taken) is not _Every:
                self._taken, self._moved = every, set(every)
            self._replaced |= every
            dict.clear(self)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> LazyRows[K, V]:  # type: ignore[override]
        self.update(other)
        return self

    # --- the whole map ------------------------------------------------------------------------

    def _fill(self) -> None:
        """Make every pending value, and put every key where a dict would have it."""
        if type(self._taken) is _Every:
            return
        with self._lock, collector_paused():  # (as the open it stands for: objects without cycles)
            rows, taken, moved = self._rows, self._taken, self._moved
            if type(taken) is _Every:
                return
            # The whole map is made apart, then put in place in one step: an exception on the
            # way (a Ctrl-C, MemoryError) leaves the map as it was.
            made = dict(dict.items(self))
            whole: dict[K, V] = {}
            pending = [row for row, key in enumerate(rows.keys) if key not in taken]
            values = iter(self._make_many(pending) if pending else ())
            for key in rows.keys:  # (the checkpoint's keys, in their order)
                if key in moved:
                    continue  # (deleted since: gone, or set again later, in its new place)
                whole[key] = made.pop(key) if key in taken else next(values)
            whole.update(made)  # (keys set since, in their order)
            try:
                dict.clear(self)
            finally:
                dict.update(self, whole)
            # (the keys stay, for ``original``; the other columns stay with the copies that
            # still read them, not with this map)
            self._taken, self._moved = _Every(rows), set()
            self._make = self._make_many = _made_all

    def __iter__(self) -> Iterator[K]:
        self._fill()
        return dict.__iter__(self)

    def __reversed__(self) -> Iterator[K]:
        self._fill()
        return dict.__reversed__(self)

    def keys(self) -> dict_keys[K, V]:
        self._fill()
        return dict.keys(self)

    def values(self) -> dict_values[K, V]:
        self._fill()
        return dict.values(self)

    def items(self) -> dict_items[K, V]:
        self._fill()
        return dict.items(self)

    def copy(self) -> LazyRows[K, V]:
        """An independent map with the same entries (a value made later in either is made
        in that one only)."""
        with self._lock:
            twin: LazyRows[K, V] = LazyRows(self._rows, self._make, self._make_many)
            taken = self._taken
            twin._taken = taken if isinstance(taken, _Every) else set(taken)
            twin._moved, twin._replaced = set(self._moved), set(self._replaced)
            dict.update(twin, dict.items(self))
        return twin

    def __eq__(self, other: object) -> bool:
        self._fill()
        if isinstance(other, LazyRows):
            other._fill()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def __or__(self, other: Any) -> dict[K, V]:  # type: ignore[override]
        merged = dict(self.items())
        merged.update(other)
        return merged

    def __ror__(self, other: Any) -> dict[K, V]:  # type: ignore[override]
        merged = dict(other)
        merged.update(self.items())
        return merged

    def __repr__(self) -> str:
        self._fill()
        return dict.__repr__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self.items()),))

    @classmethod
    def fromkeys(cls, iterable: Iterable[Any], value: Any = None) -> Any:
        return dict.fromkeys(iterable, value)
