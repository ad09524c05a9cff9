"""``LazyRows`` (kwtree.engine.lazy_rows) is a dict whose checkpointed values are made on
first read: under any sequence of dict calls it answers as the plain dict it stands for,
iteration order included, and a copy is independent of its original both ways."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kwtree.engine.lazy_rows import LazyRows, Rows, sorted_rows

_KEYS = st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "zz", ""])
_VALUES = st.integers(0, 50)

#: Calls on one key (the values made on first read are what they exercise) ...
_POINT_CALLS = st.one_of(
    st.tuples(st.just("get"), _KEYS),
    st.tuples(st.just("get_default"), _KEYS, _VALUES),
    st.tuples(st.just("getitem"), _KEYS),
    st.tuples(st.just("contains"), _KEYS),
    st.tuples(st.just("len")),
    st.tuples(st.just("bool")),
    st.tuples(st.just("set"), _KEYS, _VALUES),
    st.tuples(st.just("setdefault"), _KEYS, _VALUES),
    st.tuples(st.just("del"), _KEYS),
    st.tuples(st.just("pop"), _KEYS),
    st.tuples(st.just("pop_default"), _KEYS, _VALUES),
    st.tuples(st.just("update"), st.dictionaries(_KEYS, _VALUES, max_size=3)),
    st.tuples(st.just("copy")),
    st.tuples(st.just("original"), _KEYS),
)
#: ... and calls on the whole map, which make every value still to be made (rarer: after
#: one, the map is a plain dict)
_WHOLE_CALLS = st.one_of(
    st.tuples(st.just("items")),
    st.tuples(st.just("keys")),
    st.tuples(st.just("values")),
    st.tuples(st.just("iter")),
    st.tuples(st.just("reversed")),
    st.tuples(st.just("eq")),
    st.tuples(st.just("popitem")),
    st.tuples(st.just("clear")),
    st.tuples(st.just("dict")),
    st.tuples(st.just("repr")),
)


def lazy(start: dict[str, list[int]], made: list[int]) -> LazyRows[str, list[int]]:
    """``start`` as a LazyRows whose values are made from columns (``made`` counts the rows
    made). Values are lists, so a value made twice would show as two objects."""
    keys = list(start)
    column = list(start.values())

    def make(row: int) -> list[int]:
        made.append(row)
        return list(column[row])

    def make_many(rows: list[int]) -> list[list[int]]:
        assert rows == sorted(set(rows))  # (the rows still pending, in their order, each once)
        return [make(row) for row in rows]

    return LazyRows(Rows(keys, sorted_rows(keys)), make, make_many)


def _call(target: dict[str, Any], call: tuple[Any, ...]) -> Any:
    name, *args = call
    try:
        if name == "get":
            return target.get(args[0])
        if name == "get_default":
            return target.get(args[0], [args[1]])
        if name == "getitem":
            return target[args[0]]
        if name == "contains":
            return args[0] in target
        if name == "len":
            return len(target)
        if name == "bool":
            return bool(target)
        if name == "set":
            target[args[0]] = [args[1]]
            return None
        if name == "setdefault":
            return target.setdefault(args[0], [args[1]])
        if name == "del":
            del target[args[0]]
            return None
        if name == "pop":
            return target.pop(args[0])
        if name == "pop_default":
            return target.pop(args[0], [args[1]])
        if name == "items":
            return list(target.items())
        if name == "keys":
            return list(target.keys())
        if name == "values":
            return list(target.values())
        if name == "iter":
            return list(target)
        if name == "reversed":
            return list(reversed(target))
        if name == "update":
            target.update({key: [value] for key, value in args[0].items()})
            return None
        if name == "popitem":
            return target.popitem()
        if name == "clear":
            target.clear()
            return None
        if name == "dict":
            return list(dict(target).items())
        if name == "repr":
            return repr(target)
    except KeyError as exc:
        return ("KeyError", exc.args)
    raise AssertionError(name)


@settings(max_examples=1000)  # (a millisecond each: the default profile's 25 would miss orders)
@given(st.dictionaries(_KEYS, st.lists(_VALUES, max_size=2), max_size=7),
       st.lists(st.one_of(*[_POINT_CALLS] * 8, _WHOLE_CALLS), max_size=30))
def test_lazy_rows_answers_as_the_dict_it_stands_for(start: dict[str, list[int]], calls: list[Any]) -> None:
    made: list[int] = []
    pairs: list[tuple[dict[str, Any], LazyRows[str, Any]]] = [({key: list(value) for key, value in start.items()},
                                                                lazy(start, made))]
    replaced: list[set[str]] = [set()]  # (each pair's keys whose value is not start's any more)
    for call in calls:
        if call[0] == "copy":
            model, subject = pairs[-1]
            pairs.append((model.copy(), subject.copy()))
            replaced.append(set(replaced[-1]))
            continue
        if call[0] == "original":
            for (_, subject), gone in zip(pairs, replaced, strict=True):
                key = call[1]
                found = subject.original(key, lambda: ["fresh"])
                if key in start and key not in gone:
                    assert found == start[key] and found is subject[key]
                else:
                    assert found == ["fresh"]
            continue
        for (model, _), gone in zip(pairs, replaced, strict=True):
            if call[0] in ("set", "del", "pop") or (call[0] == "pop_default" and call[1] in model):
                gone.add(call[1])
            elif call[0] == "update":
                gone.update(call[1])
            elif call[0] == "clear":
                gone.update(start)
            elif call[0] == "popitem" and model:
                gone.add(next(reversed(model)))
        if call[0] == "eq":
            for model, subject in pairs:
                assert subject == model and model == subject and not (subject != model)  # noqa: SIM202 (__ne__ too)
            continue
        for model, subject in pairs:
            assert _call(subject, call) == _call(model, call), call
    for model, subject in pairs:
        assert type(subject.copy()) is LazyRows
        assert list(subject.items()) == list(model.items())
        assert subject == model
    assert len(made) == len(set(made)) or len(pairs) > 1  # (one map makes a row's value once)


def test_a_value_is_made_once_and_only_when_read() -> None:
    made: list[int] = []
    rows = lazy({"x": [1], "y": [2], "z": [3]}, made)
    assert len(rows) == 3 and "y" in rows and made == []
    first = rows["y"]
    assert rows.get("y") is first and rows["y"] is first and made == [1]
    assert rows.get("nope") is None and "nope" not in rows and made == [1]
    assert list(rows) == ["x", "y", "z"] and rows["y"] is first and sorted(made) == [0, 1, 2]


def test_threads_reading_one_key_get_one_value() -> None:
    made: list[int] = []
    keys = [f"k{i}" for i in range(2000)]
    rows = lazy({key: [i] for i, key in enumerate(keys)}, made)
    seen: list[list[Any]] = [[], [], [], []]

    def read(out: list[Any]) -> None:
        for key in keys:
            out.append(rows[key] if key in rows else None)  # noqa: SIM401 (__contains__, then __missing__)

    threads = [threading.Thread(target=read, args=(out,)) for out in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for out in seen[1:]:
        assert all(a is b for a, b in zip(out, seen[0], strict=True))
    assert sorted(made) == list(range(2000))


def test_a_key_deleted_and_set_again_goes_last_as_in_a_dict() -> None:
    for read_first in (False, True):
        rows = lazy({"x": [1], "y": [2], "z": [3]}, [])
        if read_first:
            assert rows["x"] == [1]
        del rows["x"]
        rows["x"] = [4]
        rows["y"] = [5]  # (set while still pending: keeps its place)
        assert list(rows.items()) == [("y", [5]), ("z", [3]), ("x", [4])]


def test_original_is_the_row_s_value_while_the_map_holds_it() -> None:
    rows = lazy({"x": [1], "y": [2], "z": [3]}, [])
    fresh = [0]
    x = rows.original("x", lambda: fresh)  # (pending: made now, and kept)
    assert x == [1] and rows["x"] is x
    assert rows["y"] == [2] and rows.original("y", lambda: fresh) is rows["y"]  # (made by a read)
    rows["y"] = [5]  # (set after it was made)
    rows["z"] = [6]  # (set while pending)
    del rows["x"]
    assert rows.original("y", lambda: fresh) is fresh and rows.original("z", lambda: fresh) is fresh
    assert rows.original("x", lambda: fresh) is fresh and rows.original("new", lambda: fresh) is fresh
    rows["x"] = [7]
    assert list(rows) == ["y", "z", "x"]  # (every value made now: the map still knows which are rows')
    assert rows.original("y", lambda: fresh) is fresh and rows.original("x", lambda: fresh) is fresh
    kept = lazy({"x": [1], "y": [2]}, [])
    assert list(kept.values()) == [[1], [2]] and kept.original("y", lambda: fresh) is kept["y"]


def test_a_whole_map_read_interrupted_midway_loses_nothing() -> None:
    """A Ctrl-C (or MemoryError) while the rest of the values are made leaves the map as it
    was: a key set since the open and a value read before are still there (found by review:
    the fill emptied the map first, and a checkpoint written at close kept the loss)."""
    made: list[int] = []
    rows = lazy({f"k{i}": [i] for i in range(10)}, made)
    first = rows["k9"]
    rows["new"] = [99]
    calls = [0]
    make_many = rows._make_many

    def interrupted(pending: list[int]) -> Any:
        for value in make_many(pending):
            calls[0] += 1
            if calls[0] == 4:
                raise KeyboardInterrupt
            yield value

    rows._make_many = interrupted
    with pytest.raises(KeyboardInterrupt):
        list(rows.items())
    assert rows.get("new") == [99] and rows.get("k9") is first and len(rows) == 11
    rows._make_many = make_many
    assert list(rows) == [*(f"k{i}" for i in range(10)), "new"] and rows["k9"] is first
