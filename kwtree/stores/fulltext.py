"""Full-text search over infos and keywords: a tantivy index that is only a cache.

Tokenisation is ours (``kwtree.normalize.terms``: casefolded words, stop words dropped,
English words stemmed, CJK runs as character pairs, and in documents as single characters
too, so a one-character query finds them). The
terms are indexed space-joined under tantivy's built-in ``whitespace`` tokenizer (splits on
ASCII whitespace, changes nothing), so no tokenizer must be registered per ``Index``. Each
term carries its kind's prefix (``i:``/``k:``): a query is a plain disjunction of term
queries, which tantivy answers with block-max WAND, and document frequencies are per kind
(a ``kind`` filter clause was 4x slower at p50 on 100k docs). Queries are never parsed.

``directory`` holds ``index/`` (tantivy's files) and ``meta.json`` (``{"format": 2,
"watermark": <op id or null>, "ops": <the op count of the state at the watermark, or null>}``),
written and fsynced after each tantivy commit: a crash in between leaves an older watermark,
and re-feeding idempotent upserts and deletes is harmless. The watermark never claims more
than the index holds. The op count tells states with the same last op id apart: a git merge
adds operations below it (an older meta.json without it reads as None: unknown). With no ``directory`` the
index lives in memory only (tantivy's RAM directory): a read-only tree's private index, which
leaves no file behind whatever happens to its process.

An index is opened only if every file of the segments its ``index/meta.json`` lists matches
the CRC-32 in its footer (``checksum_problems``): tantivy writes the checksums but does not
read them, and a flipped byte in the postings or the document store can leave an index that
opens and answers, wrongly. One pass over the index's files per process (tantivy never
changes a segment file once written, so a file checked once is not read again); a mismatch
is handled as any damage: the index is rebuilt (or, read-only, searched as missing).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Collection, Hashable
from pathlib import Path
from typing import cast

import orjson
import tantivy

from kwtree.errors import (
    ClosedError,
    InvalidInputError,
    ReadOnlyError,
    StorageError,
    disk_full_error,
    storage_error,
)
from kwtree.normalize import terms
from kwtree.stores.files import PRIVATE_FILE_MODE, low_on_space, make_dir, remove_cache_dir, write_atomically

__all__ = ["FORMAT", "KINDS", "FullTextIndex", "checksum_problems", "is_index_failure", "is_panic"]

FORMAT = 2
#: Document kinds, and the prefix their terms carry in the ``text`` field.
KINDS = {"info": "i:", "keyword": "k:"}
_HEAP_BYTES = 64_000_000  # a budget tantivy allocates as it goes, not up front
_log = logging.getLogger("kwtree.cache")
_FOOTER_MAGIC = struct.pack("<I", 1337)
_FOOTER_TAIL = 8  # the footer's length and the magic number


def is_panic(exc: BaseException) -> bool:
    """True for a Rust panic inside tantivy (pyo3's PanicException, a BaseException that no
    module exports): what some damaged index files cause instead of an error."""
    return type(exc).__name__ == "PanicException"


#: What a deleted or damaged tantivy index raises (besides a Rust panic, see is_index_failure).
_INDEX_FAILURES: tuple[type[BaseException], ...] = (StorageError, ValueError, OSError)


def is_index_failure(exc: BaseException) -> bool:
    """True for an error a damaged or deleted index causes: a StorageError, ValueError or
    OSError, or a Rust panic inside tantivy (``is_panic``)."""
    return isinstance(exc, _INDEX_FAILURES) or is_panic(exc)


def checksum_problems(index_dir: Path, checked: set[tuple[str, int]] | None = None) -> list[str]:
    """Files of the live segments of the tantivy index in ``index_dir`` whose data does not
    match the CRC-32 in their footer (tantivy writes ``<data><footer JSON with "crc"><u32
    footer length><u32 1337>``; a file without that footer is not judged, so another tantivy
    layout only loses this check), one sentence each. ``checked`` holds (name, size) of files
    that matched before: they are not read again, and the files that match are added."""
    try:
        meta = orjson.loads((index_dir / "meta.json").read_bytes())
        segments = [str(entry["segment_id"]).replace("-", "") for entry in meta["segments"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"its index/meta.json is unreadable ({exc})"]
    problems = []
    for path in sorted(index_dir.iterdir()):
        if path.name.split(".")[0] not in segments:
            continue
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue  # merged away meanwhile by a writer
        if checked is not None and (path.name, len(data)) in checked:
            continue
        if len(data) < _FOOTER_TAIL or data[-4:] != _FOOTER_MAGIC:
            continue
        (length,) = struct.unpack("<I", data[-8:-4])
        try:
            crc = orjson.loads(data[-_FOOTER_TAIL - length:-_FOOTER_TAIL])["crc"]
        except (ValueError, KeyError, TypeError):
            problems.append(f"the footer of index/{path.name} is damaged")
            continue
        if zlib.crc32(data[:-_FOOTER_TAIL - length]) != crc:
            problems.append(f"index/{path.name} does not match its checksum")
        elif checked is not None:
            checked.add((path.name, len(data)))
    return problems


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("kind", tokenizer_name="raw", index_option="basic")  # count()
    # "<kind>:<id>" so delete-by-term can never touch a document of the other kind.
    builder.add_text_field("key", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("text", tokenizer_name="whitespace", index_option="freq")
    return builder.build()


def _stored_key(searcher: tantivy.Searcher, address: tantivy.DocAddress) -> str:
    """The "<kind>:<id>" of the document at ``address``; every document is added with one."""
    return cast(str, searcher.doc(address).get_first("key"))


def _count(result: tantivy.SearchResult) -> int:
    """The number of matches of a search made with ``count=True``."""
    return int(result.count)  # type: ignore[attr-defined]  # tantivy 0.27's stub omits SearchResult.count


class FullTextIndex:
    """BM25 search over ``info`` and ``keyword`` documents kept under ``directory``, or in
    memory when ``directory`` is None.

    Opening never fails on a bad cache: a writable index that is missing, corrupt or of
    another format is deleted and recreated empty (``rebuilt`` is then True and the caller
    must feed every document again). ``writable=False`` never writes (writes raise
    :class:`ReadOnlyError`): a missing or unreadable index searches as empty with
    ``available`` False, and ``refresh()`` moves to the latest commit. An index in memory
    starts empty (``rebuilt``), is always writable, writes no file and is gone with
    ``close()`` or its process; its watermark is kept in memory.

    Tantivy's writer lock is held only from the first buffered write to the next commit
    (or close). If another process holds it then, the write raises :class:`StorageError`
    and buffers nothing; the tree avoids that by writing and committing under its own
    writer lock. All methods are thread-safe.
    """

    def __init__(self, directory: Path | None, writable: bool = True, file_mode: int = PRIVATE_FILE_MODE) -> None:
        """``file_mode``: of the files it writes itself; its directories get the matching
        directory mode, which keeps the files tantivy writes (with the umask's mode) from
        other users."""
        self._dir = None if directory is None else Path(directory)
        self._file_mode = file_mode
        self._writable = writable or directory is None
        self._lock = threading.RLock()
        self._schema = _schema()
        self._writer: tantivy.IndexWriter | None = None
        self._index: tantivy.Index | None = None
        self._searcher: tantivy.Searcher | None = None
        # count() per kind, for the searcher it was counted on (a commit or reload replaces it)
        self._counted: tuple[tantivy.Searcher, dict[Hashable, int]] | None = None
        self._last_among: tuple[Collection[str], str, tantivy.Query] | None = None
        self._watermark: str | None = None
        self._ops: int | None = None
        self._dirty = False
        self._closed = False
        self._checked: set[tuple[str, int]] = set()  # segment files whose checksum matched
        self._rebuilt = not self._load() and self._writable
        if self._rebuilt:
            self._create()

    @property
    def rebuilt(self) -> bool:
        """True if opening found no usable index and created an empty one: feed everything."""
        return self._rebuilt

    @property
    def directory(self) -> Path | None:
        """Where its files are; None for an index in memory."""
        return self._dir

    @property
    def _where(self) -> str:
        """Where it is, for messages."""
        return "memory" if self._dir is None else str(self._dir)

    @property
    def available(self) -> bool:
        """False only in read-only mode when no readable index was found."""
        return self._index is not None

    @property
    def watermark(self) -> str | None:
        """The op id recorded by the last commit (every op up to it is in the index)."""
        return self._watermark

    @property
    def ops(self) -> int | None:
        """The op count of the state the last commit recorded with the watermark (None:
        unknown, as in an index written before it was recorded)."""
        return self._ops

    @property
    def dirty(self) -> bool:
        """True if upserts, deletes or a clear wait for a commit."""
        return self._dirty

    def _load(self) -> bool:
        if self._dir is None:
            return False  # in memory: nothing to load
        meta_path = self._dir / "meta.json"
        if not meta_path.exists() and not (self._dir / "index").exists():
            _log.debug("no full-text index in %s", self._dir)
            return False
        try:
            meta = orjson.loads(meta_path.read_bytes())
            if meta.get("format") != FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, expected {FORMAT}")
            watermark = meta.get("watermark")
            if watermark is not None and not isinstance(watermark, str):
                raise ValueError(f"watermark {watermark!r} is not a string")
            ops = meta.get("ops")
            if type(ops) is not int or ops < 0:
                ops = None  # unknown (an older meta.json, or a garbled one): matches no state
            problems = checksum_problems(self._dir / "index", self._checked)
            if problems:
                raise ValueError("; ".join(problems[:3]))
            self._open_index(tantivy.Index.open(str(self._dir / "index")))
        except BaseException as exc:
            if not (isinstance(exc, (OSError, ValueError, AttributeError)) or is_panic(exc)):
                raise
            if self._writable:
                _log.warning("full-text index in %s is unusable (%s); rebuilding it empty", self._dir, exc)
            elif os.access(self._dir, os.W_OK):
                _log.warning("full-text index in %s is unusable (%s); not searching it", self._dir, exc)
            else:
                # On a read-only file system (or directory) every reader lands here: tantivy must
                # create its lock file to open an index. Not damage, and nothing a reader can
                # mend: the tree searches an index it builds in memory instead.
                _log.debug("full-text index in %s cannot be opened here (%s); not searching it", self._dir, exc)
            self._index = self._searcher = self._watermark = self._ops = None
            return False
        self._watermark, self._ops = watermark, ops
        return True

    def _open_index(self, index: tantivy.Index) -> None:
        index.config_reader(reload_policy="Manual")  # the searcher moves with the watermark
        index.reload()
        self._searcher = index.searcher()
        self._index = index

    def _create(self) -> None:
        self._watermark = self._ops = None
        if self._dir is None:
            self._open_index(tantivy.Index(self._schema))  # no path: tantivy's RAM directory
            return
        try:
            # meta.json goes first and comes last: a process killed between leaves a folder
            # that is no index, never one whose meta.json stands for a broken one.
            remove_cache_dir(self._dir)
            path = self._dir / "index"
            path.unlink(missing_ok=True)  # a file or a link in its place
            make_dir(path, self._file_mode, parents=True)
            self._open_index(tantivy.Index(self._schema, path=str(path)))
            self._write_meta(None, None)
        except (OSError, ValueError) as exc:
            what = f"cannot create the full-text index in {self._dir}"
            if isinstance(exc, ValueError) and low_on_space(self._dir):
                raise disk_full_error(what, self._dir, f"tantivy: {exc}") from exc
            raise storage_error(what, exc, self._dir) from exc

    def _write_meta(self, watermark: str | None, ops: int | None) -> None:
        if self._dir is None:
            return  # in memory: the watermark is the attribute the caller sets
        write_atomically(self._dir / "meta.json", orjson.dumps({"format": FORMAT, "watermark": watermark, "ops": ops}),
                         self._file_mode)

    def _writer_failed(self, exc: BaseException, what: str = "a full-text update") -> StorageError:
        """Give up the writer after ``exc`` (a killed tantivy writer keeps its lock until it
        is consumed: the next write takes a new one), drop what it buffered, and return the
        error to raise: DiskFullError when little space is left (tantivy names no errno)."""
        writer, self._writer = self._writer, None
        self._dirty = False
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.wait_merging_threads()  # consumes it, even a killed one: frees the lock
        what = f"{what} in {self._where} failed"
        if self._dir is not None and not isinstance(exc, OSError) and low_on_space(self._dir):
            return disk_full_error(what, self._dir, f"tantivy: {exc}")
        return storage_error(what, exc, self._dir)

    def _check_writable(self) -> None:
        if self._closed:
            raise ClosedError("the full-text index was closed")
        if not self._writable:
            raise ReadOnlyError("this full-text index was opened with writable=False")

    def _writer_for_update(self) -> tantivy.IndexWriter:
        self._check_writable()
        if self._writer is None:
            assert self._index is not None  # a writable index always has one
            try:
                self._writer = self._index.writer(heap_size=_HEAP_BYTES, num_threads=1)
            except ValueError as exc:
                raise StorageError(
                    f"cannot write the full-text index in {self._where}: {exc}; another process "
                    "holds its writer, so retry once that process has committed"
                ) from exc
        return self._writer

    @staticmethod
    def _prefix(kind: str) -> str:
        try:
            return KINDS[kind]
        except (KeyError, TypeError):
            raise InvalidInputError(f"kind must be one of {sorted(KINDS)}, got {kind!r}") from None

    @classmethod
    def _key(cls, kind: str, entity_id: str) -> str:
        cls._prefix(kind)
        if not isinstance(entity_id, str) or not entity_id:
            raise InvalidInputError(f"entity_id must be a non-empty str, got {entity_id!r}")
        return f"{kind}:{entity_id}"

    def _among(self, kind: str, entity_ids: Collection[str]) -> tantivy.Query:
        """A query matching the documents of ``entity_ids`` (of ``kind``), scoring nothing (the
        last one is kept: a read asks it of the same ids several times)."""
        kept = self._last_among
        if kept is not None and kept[0] is entity_ids and kept[1] == kind:
            return kept[2]
        keys = [self._key(kind, entity_id) for entity_id in entity_ids]
        query = tantivy.Query.const_score_query(tantivy.Query.term_set_query(self._schema, "key", keys), 0.0)
        self._last_among = (entity_ids, kind, query)
        return query

    def upsert(self, kind: str, entity_id: str, text: str) -> None:
        """Buffer ``text`` as the document of (``kind``, ``entity_id``), replacing any."""
        key = self._key(kind, entity_id)
        prefix = KINDS[kind]
        doc = tantivy.Document()
        doc.add_text("kind", kind)
        doc.add_text("key", key)
        doc.add_text("text", " ".join(prefix + term for term in terms(text, cjk_singles=True)))
        with self._lock:
            writer = self._writer_for_update()
            try:
                writer.delete_documents_by_term("key", key)  # spares documents added after it
                writer.add_document(doc)
            except (ValueError, RuntimeError) as exc:
                raise self._writer_failed(exc) from exc
            self._dirty = True

    def delete(self, kind: str, entity_id: str) -> None:
        """Buffer the removal of (``kind``, ``entity_id``); a missing document is no error."""
        key = self._key(kind, entity_id)
        with self._lock:
            writer = self._writer_for_update()
            try:
                writer.delete_documents_by_term("key", key)
            except (ValueError, RuntimeError) as exc:
                raise self._writer_failed(exc) from exc
            self._dirty = True

    def clear(self) -> None:
        """Buffer the removal of every document and forget the watermark (for rebuilds)."""
        with self._lock:
            writer = self._writer_for_update()
            try:  # meta first: a crash must not leave an old watermark over an emptied index
                self._write_meta(None, None)
            except OSError as exc:
                raise storage_error(f"cannot write the meta.json of {self._where}", exc, self._dir) from exc
            self._watermark = self._ops = None
            writer.delete_all_documents()
            self._dirty = True

    def commit(self, watermark: str | None, ops: int | None = None) -> None:
        """Make buffered changes durable and searchable, record ``watermark`` and ``ops`` (the
        op count of the state at the watermark; None: unknown), and release tantivy's writer
        lock (so another process can write next).

        When it returns, a search sees every change made before the call and a reopen
        reports ``watermark`` and ``ops``. On :class:`StorageError` (:class:`DiskFullError` when the disk
        is full) the buffered changes are dropped (some may have reached the index) and the
        watermark stays where it was.
        """
        if watermark is not None and not isinstance(watermark, str):
            raise InvalidInputError(f"watermark must be an op id or None, got {watermark!r}")
        if ops is not None and (type(ops) is not int or ops < 0):
            raise InvalidInputError(f"ops must be an operation count or None, got {ops!r}")
        with self._lock:
            self._check_writable()
            index = self._index
            assert index is not None  # a writable index always has one
            writer, self._writer = self._writer, None
            self._dirty = False
            try:
                if writer is not None:
                    writer.commit()
                    # Waiting lets the merges this commit started finish: a dropped writer
                    # abandons them, and segments would pile up over many small commits.
                    writer.wait_merging_threads()  # consumes the writer, frees the lock
                self._write_meta(watermark, ops)
                index.reload()
            except (OSError, ValueError) as exc:
                if writer is not None:
                    self._writer = writer
                raise self._writer_failed(exc, "full-text commit") from exc
            self._searcher = index.searcher()
            self._watermark, self._ops = watermark, ops

    def refresh(self) -> None:
        """Move to what the process that committed it last left: in read-only mode, and in
        a writable one with no change buffered (several processes take turns writing one
        index, each under a lock of its caller's). An index on disk whose watermark has not
        moved is left as it is; one deleted meanwhile is created again, empty (``rebuilt``)."""
        with self._lock:
            if self._closed or self._dir is None:
                return
            if not self._writable:
                self._load()  # meta before index: the watermark may lag, never lead
                return
            if self._dirty or self._writer is not None:
                return
            try:
                meta = orjson.loads((self._dir / "meta.json").read_bytes())
                recorded = (meta.get("watermark", False), meta.get("ops"))
            except (OSError, ValueError, AttributeError):
                recorded = None
            # (The op count too: after a git merge another process commits the same watermark
            # with the merged operations added below it.)
            if recorded == (self._watermark, self._ops) and self._index is not None:
                return
            if not self._load():
                self._rebuilt = True
                self._create()

    def _current_searcher(self) -> tantivy.Searcher | None:
        with self._lock:
            if self._closed:
                raise ClosedError("the full-text index was closed")
            if self._dirty:
                # Lazy commit: many writes cost one commit. It keeps the last watermark and
                # its op count (a crash re-feeds more, never less); call commit(op_id, ops)
                # to advance them.
                self.commit(self._watermark, self._ops)
            return self._searcher

    def search(self, query: str, kind: str, k: int = 10,
               within: Collection[str] | None = None) -> list[tuple[str, float]]:
        """The ``k`` best (entity id, BM25 score) of ``kind`` for any term of ``query``;
        with ``within``, only among those entity ids.

        Commits pending changes first, so a search sees every earlier write. Any text is
        a valid query; one with no terms (empty, only stop words) returns ``[]``.
        """
        prefix = self._prefix(kind)
        if type(k) is not int:
            raise InvalidInputError(f"k must be an int, got {k!r}")
        words = list(dict.fromkeys(terms(query)))  # a repeated word is not worth more
        searcher = self._current_searcher()
        if searcher is None or not words or k <= 0 or (within is not None and not within):  # tantivy panics on 0
            return []
        terms_query = tantivy.Query.boolean_query([
            (tantivy.Occur.Should,
             tantivy.Query.term_query(self._schema, "text", prefix + word, index_option="freq"))
            for word in words
        ])
        if within is not None:
            terms_query = tantivy.Query.boolean_query([(tantivy.Occur.Must, terms_query),
                                                       (tantivy.Occur.Must, self._among(kind, within))])
        hits = searcher.search(terms_query, k, count=False).hits
        cut = len(kind) + 1
        return [(_stored_key(searcher, address)[cut:], score) for score, address in hits]

    def count(self, kind: str) -> int:
        """The number of documents of ``kind`` (pending changes are committed first). Counting
        reads every document of the kind, so the count is kept until the next commit."""
        self._prefix(kind)
        searcher = self._current_searcher()
        if searcher is None:
            return 0
        return self._kept_count(searcher, kind, lambda: tantivy.Query.term_query(self._schema, "kind", kind))

    def _kept_count(self, searcher: tantivy.Searcher, key: Hashable, query: Callable[[], tantivy.Query]) -> int:
        """How many documents ``query()`` matches in ``searcher``, counted once per ``key``
        until the next commit."""
        with self._lock:
            if self._counted is None or self._counted[0] is not searcher:
                self._counted = (searcher, {})
            counts = self._counted[1]
            found = counts.get(key)
        if found is None:
            found = _count(searcher.search(query(), 1, count=True))
            with self._lock:
                counts[key] = found
        return found

    def all_keys(self, kind: str) -> list[str]:
        """The stored key of every live document of ``kind``."""
        self._prefix(kind)
        searcher = self._current_searcher()
        if searcher is None:
            return []
        query = tantivy.Query.term_query(self._schema, "kind", kind)
        found = _count(searcher.search(query, 1, count=True))
        if not found:
            return []
        hits = searcher.search(query, found).hits
        return [_stored_key(searcher, address) for _, address in hits]

    def matching(self, kind: str, words: list[str], entity_id: str | None = None,
                 within: Collection[str] | None = None) -> int:
        """How many live documents of ``kind`` (only ``entity_id``'s, if given; only those of
        the entity ids ``within``, if given) hold every term of ``words`` (already-normalised
        terms, as ``normalize.terms`` gives them)."""
        prefix = self._prefix(kind)
        searcher = self._current_searcher()
        if searcher is None or (within is not None and not within):
            return 0
        must, term = tantivy.Occur.Must, tantivy.Query.term_query

        def query() -> tantivy.Query:
            clauses = [(must, term(self._schema, "kind", kind))]
            if entity_id is not None:
                clauses.append((must, term(self._schema, "key", self._key(kind, entity_id))))
            if within is not None:
                clauses.append((must, self._among(kind, within)))
            clauses += [(must, term(self._schema, "text", prefix + word)) for word in words]
            return tantivy.Query.boolean_query(clauses)

        if within is not None and not isinstance(within, frozenset):  # (only a frozenset is a key)
            return _count(searcher.search(query(), 1, count=True))
        return self._kept_count(searcher, (kind, tuple(words), entity_id, within), query)

    def close(self) -> None:
        """Commit pending changes (keeping the watermark) and release everything."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._dirty:
                    self.commit(self._watermark, self._ops)
            finally:
                self._closed = True
                self._writer = self._searcher = self._index = None  # drops tantivy's lock

