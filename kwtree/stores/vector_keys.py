"""The keys of a vector store's rows as keys.jsonl holds them (``kwtree.stores.vectors``):
``KeyRows`` keeps the bytes of the file's whole key lines, as read, and where each line ends,
and parses the line of a row only when that row is asked for.

Why not parse every line at open: a reader's first search needs the keys of its top-k rows
only, and parsing 100,000 lines into Python objects (the keys, their checks, the set of keys)
took about 0.25 s of a tree's open and first query (bench/peers.py's workload), most of it
the garbage collector walking the tree's State as those objects piled up.

Taking lines still tells key lines from others before any row counts, as parsing did: one
regular-expression pass accepts the lines in the form every writer writes them
(``["<id>","<hash>","<check>"]``, or a format-1 ``["<id>","<hash>"]``, whose strings need no
escape and whose check is 8 ASCII bytes) once the bytes are UTF-8, and any other line is
parsed alone (``vector_files.parse_keys``); the first that is no key line ends the rows, with
the same warning. Only ``has``, ``every_key`` and ``known`` (a writer's dedup and outbox, a search
``among`` given ids) parse every line, once, and keep what they parsed.

orjson writes a string that needs no escape byte for byte as it is in such a line, so the
digest of plain rows (``vector_graph.rows_digest``, which hnsw.json records) is computed from
the bytes here, and a saved graph is loaded without parsing a line either.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import orjson

from kwtree.stores.vector_files import parse_keys
from kwtree.stores.vector_graph import rows_digest

__all__ = ["KeyRows"]

_TEXT = rb'[^"\\\x00-\x1f]*+'  # a JSON string's body that needs no escape (UTF-8 checked apart)
_CHECK = rb"[ !#-\[\]-~]{8}"  # 8 printable ASCII bytes, neither quote nor backslash
_PLAIN = re.compile(rb'(?:\["' + _TEXT + rb'","' + _TEXT + rb'","' + _CHECK + rb'"\]\n)*+')
_PLAIN_V1 = re.compile(rb'(?:\["' + _TEXT + rb'","' + _TEXT + rb'"\]\n)*+')  # store format 1: no check
_NEWLINE = 0x0A
# A plain line ends with ',"<check>"]': the check is its 10th to 3rd last bytes, and without
# those 12 bytes and a closing ']' the line is its key as orjson writes one.
_TAIL = 12


class KeyRows:
    """The rows of one vector store as the whole key lines it took from keys.jsonl, in order;
    row n is line n. Not thread-safe (the store's mutex guards it)."""

    def __init__(self) -> None:
        self._data = bytearray()  # the lines taken, each ending with "\n": keys.jsonl's first bytes
        self._ends = np.empty(0, dtype=np.int64)  # where line n's "\n" is; room beyond len(self)
        self._rows = 0
        self._plain = 0  # rows [0, _plain) are plain lines with a check (module docstring)
        self._keys: list[tuple[str, str]] | None = None  # every row's key and check, once parsed
        self._checks: list[str | None] | None = None
        self._known: set[tuple[str, str]] | None = None

    def __len__(self) -> int:
        return self._rows

    @property
    def size(self) -> int:
        """How many bytes of keys.jsonl the rows taken hold."""
        return len(self._data)

    @property
    def data(self) -> bytes:
        """A copy of the bytes of the lines taken."""
        return bytes(self._data)

    def take(self, data: bytes, limit: int) -> int:
        """Take the whole key lines at the start of ``data`` (keys.jsonl's bytes after those
        taken), at most ``limit``, up to the first line that is not a key line (with a
        warning); returns how many were taken."""
        ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE)[:limit]
        if not len(ends):
            return 0
        size = int(ends[-1]) + 1
        try:
            str(memoryview(data)[:size], "utf-8")
        except UnicodeDecodeError as exc:  # the line holding it is no key line: parsed alone, refused
            text_end = data.rfind(b"\n", 0, exc.start) + 1
        else:
            text_end = size
        end, plain_end = _key_lines_end(data, size, text_end)
        ends = ends[: np.searchsorted(ends, end)]
        if not len(ends):
            return 0
        base, start, count = len(self._data), self._rows, len(ends)
        if self._plain == start:
            self._plain += int(np.searchsorted(ends, plain_end))
        self._data += memoryview(data)[:end]
        if start + count > len(self._ends):
            grown = np.empty(max(start + count, 2 * len(self._ends)), dtype=np.int64)
            grown[:start] = self._ends[:start]
            self._ends = grown
        self._ends[start : start + count] = ends + base
        self._rows += count
        if self._keys is not None and self._checks is not None:
            keys, checks = parse_keys(data[:end].split(b"\n")[:-1])
            self._keys += keys
            self._checks += checks
            if self._known is not None:
                self._known.update(keys)
        return count

    def _line(self, row: int) -> bytes:
        start = int(self._ends[row - 1]) + 1 if row else 0
        return bytes(self._data[start : int(self._ends[row])])

    def key(self, row: int) -> tuple[str, str]:
        """Row ``row``'s (entity id, content hash)."""
        if self._keys is not None:
            return self._keys[row]
        value = orjson.loads(self._line(row))
        return value[0], value[1]

    def check(self, row: int) -> str | None:
        """The check row ``row``'s line records of its vector (None in a line of format 1)."""
        if row < self._plain:
            end = int(self._ends[row])
            return self._data[end - _TAIL + 2 : end - 2].decode("ascii")
        value = orjson.loads(self._line(row))
        return value[2] if len(value) == 3 else None

    def every_key(self) -> list[tuple[str, str]]:
        """Every row's key, in row order (parsed once, then kept; do not change the list)."""
        return self._parsed()[0]

    def has(self, key: tuple[str, str]) -> bool:
        if self._known is None:
            self._known = set(self.every_key())
        return key in self._known

    def known(self) -> set[tuple[str, str]]:
        """A copy of every row's key."""
        return set(self._known) if self._known is not None else set(self.every_key())

    def _parsed(self) -> tuple[list[tuple[str, str]], list[str | None]]:
        if self._keys is None or self._checks is None:
            # Every line taken is a key line: parse_keys reads them all.
            self._keys, self._checks = parse_keys(bytes(self._data).split(b"\n")[:-1])
        return self._keys, self._checks

    def digest(self, rows: int) -> int:
        """``vector_graph.rows_digest`` of the first ``rows`` rows."""
        if not 0 < rows <= self._plain:
            return rows_digest(*self._parsed(), rows)
        ends = self._ends[:rows]
        # (A copy: a view would stop self._data from growing while it lives.)
        data = np.frombuffer(bytes(self._data[: int(ends[-1]) + 1]), dtype=np.uint8)
        tails = ends[:, None] - np.arange(_TAIL, 0, -1)  # each line's ',"<check>"]'
        checks = data[tails[:, 1:]]  # '"<check>"]' each, the ']' to become the ',' between them
        checks[:, -1] = ord(",")
        keep = np.ones(len(data), dtype=bool)
        keep[tails[:, :-1].ravel()] = False  # what stays of a line is its key (the ']' stays)
        keys = data[keep]
        keys[keys == _NEWLINE] = ord(",")
        return zlib.crc32(b"[" + checks.tobytes()[:-1] + b"]", zlib.crc32(b"[" + keys.tobytes()[:-1] + b"]"))

    def replace(self, row: int, line: bytes) -> bool:
        """Take ``line`` as row ``row``'s line now (one erased in place: ``vector_erase``);
        False, changing nothing, if it is not a key line as long as the one it replaces."""
        if len(line) != len(self._line(row)) or b"\n" in line:
            return False
        found, checks = parse_keys([line])
        if not found:
            return False
        end = int(self._ends[row])
        self._data[end - len(line) : end] = line
        if row < self._plain and _PLAIN.fullmatch(line + b"\n") is None:
            self._plain = row
        if self._keys is not None and self._checks is not None:
            self._keys[row], self._checks[row] = found[0], checks[0]
        self._known = None  # (its old key may be another row's too: counted again when asked)
        return True


def _key_lines_end(data: bytes, size: int, text_end: int) -> tuple[int, int]:
    """Where the key lines at the start of ``data[:size]`` (whole lines, UTF-8 up to
    ``text_end``) end, and where the plain lines with a check at its start end."""
    pos = plain_end = _run_end(_PLAIN, data, 0, text_end)
    while pos < size:
        end = _run_end(_PLAIN_V1, data, pos, text_end)
        if end == pos:  # neither form: parse the line alone
            end = data.index(b"\n", pos) + 1
            if not parse_keys([data[pos : end - 1]])[0]:
                return pos, plain_end
        pos = _run_end(_PLAIN, data, end, text_end)
    return pos, plain_end


def _run_end(lines: re.Pattern[bytes], data: bytes, pos: int, end: int) -> int:
    """Where the lines from ``pos`` that ``lines`` matches end, before ``end`` (``pos`` if none)."""
    found = lines.match(data, pos, end)
    return found.end() if found is not None else pos
