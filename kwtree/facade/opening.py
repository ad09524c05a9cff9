"""What ``KeywordTree``'s constructor reads from two of its arguments: the past an ``as_of``
view shows and the log store ``log`` names (or the one the directory recorded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kwtree.engine.events import Bound, is_op_id
from kwtree.errors import InvalidInputError
from kwtree.validate import finite_number, shown

__all__ = ["clean_as_of", "log_store"]


def clean_as_of(as_of: object) -> Bound | None:
    """The view ``as_of`` asks for (an op id or epoch seconds), or None; InvalidInputError."""
    if as_of is None:
        return None
    if isinstance(as_of, str):
        if not is_op_id(as_of):
            raise InvalidInputError(f"as_of must be an op id (32 lowercase hex digits) or a timestamp, "
                                    f"got {shown(as_of)}")
        return Bound(op_id=as_of)
    timestamp = finite_number(as_of) if type(as_of) in (int, float) else None
    if timestamp is None:
        raise InvalidInputError(f"as_of must be an op id string or a finite epoch timestamp, got {shown(as_of)}")
    return Bound(timestamp=timestamp)


def log_store(log: object, data_path: Path) -> dict[str, Any]:
    """The Engine's arguments for ``log``: a PostgreSQL log, or the one ``data_path``
    recorded when ``log`` is None (else nothing: the JSONL log in the directory)."""
    from kwtree.stores import postgres  # the module is small; psycopg is imported when a store opens

    known = postgres.recorded(data_path) if data_path.is_dir() else None
    if log is None:
        if known is None:
            return {}
        log = known
    if not isinstance(log, str) or not postgres.is_postgres_url(log):
        raise InvalidInputError(f"log must be None (the JSONL log in data_dir) or a postgresql:// URL, "
                                f"got {shown(log)}")
    _, tree, schema = postgres.split_url(log)  # InvalidInputError naming log
    if known is not None and postgres.split_url(known)[1:] != (tree, schema):
        raise InvalidInputError(f"log names the tree {tree!r} (schema {schema!r}), but data_dir {data_path} holds the "
                                f"caches of {postgres.redacted(known)}: open another directory for another log")
    if known is None and any((data_path / "log").glob("*.jsonl")):
        raise InvalidInputError(f"data_dir {data_path} keeps its own log (in log/), so log cannot name another: "
                                "open a new directory for the PostgreSQL log")
    return {"log_store": postgres.opener(log), "caches_only": True}
