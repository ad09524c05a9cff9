"""The vector store of the tree's embedder model as a projection of the log: it records the
position it reflects and, at the next open, looks only at what was written after it.

- **Embedding** (``embed``) stores the vector of each entity's current text; a vector of an
  older text is never returned by a search (``hits`` accepts a row only while its content
  hash is the entity's current one).
- **The scan** (``missing``) lists every live entity whose current text has no vector: the work
  a lost outbox row or a deleted cache left undone. It records a **position** when it found
  nothing missing, and so does ``advance`` once a backlog is embedded: ``position.json`` holds
  the last op id of the state, the stamps of the row files (``VectorStore.checked_stamp``: every
  row sound, the files exactly what this store read and wrote) and a check; ``versions.u64`` the
  versions of the entities written up to that op (``kwtree.caches.texts.versions_upto``;
  ``advance`` adds the versions written since the last position to those recorded there, each of
  them embedded when it was current). A later scan whose files still have those stamps trusts
  their rows (no vector is read) and hashes only the entities written after the position — all
  of them when a version at or below it is not among the recorded ones (a git merge puts the
  other branch's operations below it; a branch switch brings older versions back). Any change to
  the files this store did not make (damage, a forget's erasure, another writer's rows), or a
  position that fails its check, means a full scan with every row checked
  (``VectorStore.mend``). A position is only ever claimed for a state whose every live text had
  its vector, so a lost outbox item is never hidden by it: its entity was written after the
  position.
- **A tree that may not write** (``read_only``, ``as_of``) opens the store read-only,
  searches what writers embedded and scans nothing.
- **Queries** are embedded once: ``hits`` takes the query's vector from ``queries``
  (``kwtree.caches.query_vectors``, the last 1,024 queries' vectors), which ``erase`` empties.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import zlib
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson

from kwtree.caches.embed import Embedder, content_hash, embed_documents
from kwtree.caches.query_vectors import QueryVectors
from kwtree.caches.texts import EntityKey, entity_text, text_of, versions_hold, versions_upto, written_after
from kwtree.engine.state import State
from kwtree.errors import LockTimeoutError, ReadOnlyError, StorageError
from kwtree.models import Info, Keyword
from kwtree.stores.files import PRIVATE_FILE_MODE, remove_cache_dir, write_atomically
from kwtree.stores.vector_erase import erase_vectors, vector_directories
from kwtree.stores.vector_files import FileStamp, model_directory, read_json
from kwtree.stores.vectors import VectorStore

__all__ = ["POSITION_FILE", "VERSIONS_FILE", "Hits", "VectorProjection", "WorkItem"]

log = logging.getLogger("kwtree.cache")

T = TypeVar("T")
Reader = Callable[[Callable[[State], T]], T]
Hits = list[tuple[str, float]]  # (entity id, similarity), best first
WorkItem = tuple[str, str, str, str]  # (kind, id, content hash, model): an outbox item
POSITION_FILE = "position.json"
VERSIONS_FILE = "versions.u64"  # the position's versions (``texts.versions_upto``), raw little-endian uint64
#: Most entries the content-hash cache holds (~150 B each); beyond, hashes are computed each time.
_DIGEST_CACHE_LIMIT = 200_000
_SCAN_CHUNK = 500  # entities hashed per hold of the state lock by the scan
Stamps = tuple[FileStamp, FileStamp]
#: A recorded position: the op id, the row files' stamps, the versions written up to it.
Position = tuple[str, Stamps, np.ndarray]
#: The newest versions of some entities among the operations the state has not read (None: ask again).
Newer = Callable[[Collection[str]], Mapping[str, Info | Keyword] | None]
#: How many times ``embed`` asks ``newer`` while this process writes (10 ms apart).
_NEWER_TRIES = 100


class VectorProjection:
    """The vector store of one open tree, for its embedder's model (module docstring)."""

    def __init__(self, cache: Path, embedder: Embedder, read: Reader[Any], *, writes: bool,
                 file_mode: int = PRIVATE_FILE_MODE, newer: Newer | None = None) -> None:
        """``writes``: whether this tree embeds and writes the store (else it only searches it).
        ``newer`` (``Engine.try_newer_versions``) tells the versions the log holds beyond the
        state: an item may name a text another process wrote since this tree last read the
        log, which the state alone would pass for obsolete."""
        self._cache = cache
        self._newer = newer
        self.embedder = embedder
        self.model = embedder.model
        self._read = read
        self.writes = writes
        self._file_mode = file_mode
        self.directory = cache / "vectors" / model_directory(self.model)
        # Opened on first use: opening is not free, and a large store must not hold up a text search.
        self._store: VectorStore | None = None
        self._open_lock = threading.Lock()
        self._embedding = threading.Lock()  # held from reading texts to storing their vectors
        # (kind, id) -> (entity version, content hash of its text or None): a version is never
        # changed once stored, so its hash is computed once. Only touched under the state lock.
        self._digests: dict[EntityKey, tuple[object, str | None]] = {}
        #: The position up to which every live text is known to have its vector (None: unknown),
        #: and whether this tree's scan ran (then every row is checked, or trusted).
        self._base: Position | None = None
        self._scanned = False
        self._scanning = threading.Lock()  # one scan or advance at a time (the worker, a search's recovery)
        self.unsaved = False  # vectors were added since the graph was last persisted
        #: The vectors of the queries ``hits`` was asked lately: a repeated query is not embedded again.
        self.queries = QueryVectors()

    @property
    def store(self) -> VectorStore:
        with self._open_lock:
            if self._store is None:
                self._store = VectorStore(self.directory, self.model, self.embedder.dim,
                                          writable=self.writes, file_mode=self._file_mode)
            return self._store

    def exists(self) -> bool:
        """Whether a store of this model was ever made here (or is open)."""
        return self._store is not None or self.directory.exists()

    def vanished(self) -> bool:
        """True if the store's directory was deleted under this tree (``cache/`` is only a
        cache) and this tree writes it: the store is dropped, and the caller queues every
        text again. A tree that may not write only lets the store go (it finds vectors again
        once a writer made them)."""
        with self._open_lock:
            store = self._store
            if store is None or store.directory.exists():
                return False
            store.discard()
            self._store = None
            self._base, self._scanned = None, False
            if not self.writes:
                log.info("the vector cache %s was deleted; vector recall finds nothing until a writer embeds again",
                         store.directory)
                return False
            log.warning("the vector cache %s was deleted under this tree; embedding everything again", store.directory)
            return True

    # --- texts and their hashes ----------------------------------------------------------------

    def digest(self, state: State, kind: str, entity_id: str) -> str | None:
        """The content hash of the entity's current text (None if it is not live), computed
        once per entity version. Call where the state cannot change under it (the state lock, or
        the write path)."""
        entity = (state.infos if kind == "info" else state.keywords).get(entity_id)
        if entity is None:
            return None
        key = (kind, entity_id)
        known = self._digests.get(key)
        if known is not None and known[0] is entity:
            return known[1]
        text = entity_text(state, kind, entity_id)
        digest = None if text is None else content_hash(self.model, text)
        if len(self._digests) < _DIGEST_CACHE_LIMIT or key in self._digests:
            self._digests[key] = (entity, digest)
        return digest

    def unembedded(self, state: State, keys: Collection[EntityKey]) -> list[WorkItem]:
        """Outbox items for the entities among ``keys`` whose current text has no vector."""
        work = []
        for kind, entity_id in dict.fromkeys(keys):
            digest = self.digest(state, kind, entity_id)
            if digest is not None and not self.store.has(entity_id, digest):
                work.append((kind, entity_id, digest, self.model))
        return work

    # --- writing -----------------------------------------------------------------------------

    def embed(self, items: list[tuple[str, str, str]]) -> dict[str, str | None]:
        """Embed the current text of each (kind, id, hash) that is still current; returns
        {id/hash: None, or the error}. Obsolete items count as done. If the embedder refuses
        the batch, each text is tried alone, so one bad text fails only itself. A store that
        cannot be written (StorageError, e.g. DiskFullError; LockTimeoutError) is no text's
        fault: that error is raised."""
        with self._embedding:  # ``erase`` waits for it: the text it read may be one forget erases
            texts, keys, unsure = [], [], []
            for kind, entity_id, digest in items:
                text = self._read(functools.partial(entity_text, kind=kind, entity_id=entity_id))
                if text is None or content_hash(self.model, text) != digest:
                    unsure.append((entity_id, digest))  # obsolete, or written after the state read the log
                elif not self.store.has(entity_id, digest):
                    texts.append(text)
                    keys.append((entity_id, digest))
            later = self._later_texts({entity_id for entity_id, _ in unsure}) if unsure else {}
            for entity_id, digest in unsure:
                text = later.get(entity_id)
                if (text is not None and content_hash(self.model, text) == digest
                        and not self.store.has(entity_id, digest)):
                    texts.append(text)
                    keys.append((entity_id, digest))
            result: dict[str, str | None] = {f"{entity_id}/{digest}": None for _, entity_id, digest in items}
            if not texts:
                return result
            self.unsaved = True
            try:
                self.store.add(keys, embed_documents(self.embedder, texts))
            except (StorageError, LockTimeoutError):
                raise  # the store's disk or lock, not the texts: the worker tries again later
            except Exception:  # noqa: BLE001 -- find the text that fails, keep the others
                for key, text in zip(keys, texts, strict=True):
                    try:
                        self.store.add([key], embed_documents(self.embedder, [text]))
                    except (StorageError, LockTimeoutError):
                        raise
                    except Exception as exc:  # noqa: BLE001 -- recorded for the outbox
                        result[f"{key[0]}/{key[1]}"] = f"{type(exc).__name__}: {exc}"
            return result

    def _later_texts(self, entity_ids: set[str]) -> dict[str, str]:
        """The texts the log holds for ``entity_ids`` beyond the state (``newer``), asked again
        while this process writes (a few ms); past ~1 s, none: the items are judged by the state
        (one it misses is queued again by the next open's repair scan)."""
        if self._newer is None:
            return {}
        for _ in range(_NEWER_TRIES):
            found = self._newer(entity_ids)
            if found is not None:
                return {entity_id: text for entity_id, entity in found.items()
                        if (text := text_of(entity)) is not None}
            time.sleep(0.01)
        return {}

    def persist(self) -> None:
        """Save the hnswlib graph if the saved one lags by more than VectorStore.persist
        allows (building it here if none is in memory), so that a read-only open (a CLI
        read) never builds what this writer could have saved."""
        self.unsaved = False
        try:
            self.store.persist()
        except BaseException:
            self.unsaved = True
            raise

    # --- the scan and the position -------------------------------------------------------------

    def missing(self, *, full: bool = False) -> list[WorkItem]:
        """Every live entity whose current text has no vector, as outbox items; records the
        position when there is none (module docstring). Without ``full``, a store whose
        files are as the recorded position stamped them is trusted and only the entities
        written after it are hashed; otherwise (and with ``full``) rows whose vector fails
        its check are erased first (``VectorStore.mend``: a pass over every vector, the price
        of never searching a garbled one) and every live entity is hashed. Raises
        ReadOnlyError in a tree that does not write."""
        if not self.writes:
            raise ReadOnlyError("a tree that may not write queues no embedding work")
        with self._scanning:
            recorded = None if full else self._recorded()
            trusted = recorded is not None and self.store.trust(recorded[1])
            if not trusted:
                for _, done in self.store.mend(graph=False):  # (a saved graph is checked when it is loaded)
                    log.warning("vector cache %s: %s", self.directory, done)
            since = recorded if trusted else None
            self._base, self._scanned = since, True
            at, todo, work = self._unstored_since(since, check_versions=True)
            if not work and (since is None or at != since[0]):  # (a position still current stays as it is)
                self._record(at, since, todo)
            return work

    def advance(self) -> None:
        """Once the work a scan found is embedded: record the state's position if every live
        text written after the last recorded one (every live text, when none was) has its
        vector. Hashes only what the scan has not (digests are kept), and records the versions
        written since beside the recorded ones (the next open's scan checks them all); nothing
        when this tree has not scanned since it opened, or nothing was written since."""
        if not self._scanned or not self.writes:
            return
        with self._scanning:
            base = self._base
            if base is not None and self._read(lambda state: state.last_op_id) == base[0]:
                return
            at, todo, work = self._unstored_since(base, check_versions=False)
            if not work and (base is None or at != base[0]):
                self._record(at, base, todo)

    def _unstored_since(self, since: Position | None, *,
                        check_versions: bool) -> tuple[str | None, list[EntityKey] | None, list[WorkItem]]:
        """The state's position, the entities looked at (None: every one), and outbox items
        for the live entities among them whose text has no vector: those
        written after ``since``, or all of them when ``since`` is None (or, with
        ``check_versions``, when versions at or below it came in since). The state lock is
        held per chunk, so reads and writes need not wait for the whole pass (an entity
        written meanwhile is queued by its write, and is after the position returned)."""

        def keys(state: State) -> tuple[str | None, list[EntityKey] | None]:
            at = state.last_op_id
            if (since is None or at is None or since[0] > at
                    or (check_versions and not versions_hold(state, since[0], since[2]))):
                return at, None
            return at, sorted(written_after(state, since[0]))

        at, looked_at = self._read(keys)
        todo = looked_at if looked_at is not None else self._read(
            lambda state: [("info", entity_id) for entity_id in state.infos] + [
                ("keyword", entity_id) for entity_id in state.keywords])
        work: list[WorkItem] = []
        for start in range(0, len(todo), _SCAN_CHUNK):
            work += self._read(functools.partial(self.unembedded, keys=todo[start : start + _SCAN_CHUNK]))
            time.sleep(0)  # let waiting threads (a search, a write) take the interpreter first
        return at, looked_at, work

    def _record(self, at: str | None, base: Position | None, looked_at: list[EntityKey] | None) -> None:
        """Record ``at`` as the store's position (the caller found every live text written
        up to it embedded: those after ``base``, the entities ``looked_at``, or every one when
        that is None), with the stamps of files whose rows are all sound and the versions
        written up to it (``base``'s and those of ``looked_at``); nothing when the store
        cannot vouch for its files."""
        stamps = self.store.checked_stamp() if at is not None else None
        if at is None or stamps is None:
            return
        if base is None or looked_at is None:
            versions = self._read(lambda state: versions_upto(state, at))
        else:
            versions = np.union1d(base[2], self._read(lambda state: versions_upto(state, at, looked_at)))
        files = [list(stamp) if stamp is not None else None for stamp in stamps]
        check = zlib.crc32(orjson.dumps([at, files]), zlib.crc32(versions.tobytes()))
        try:  # the versions first: a position.json never names versions it does not find
            write_atomically(self.directory / VERSIONS_FILE, versions.tobytes(), self._file_mode)
            write_atomically(self.directory / POSITION_FILE,
                             orjson.dumps({"op": at, "files": files, "check": check}), self._file_mode)
        except OSError as exc:  # a cache: the next scan is a full one
            log.debug("could not record the vector cache's position: %s", exc)
            return
        self._base = (at, stamps, versions)

    def _recorded(self) -> Position | None:
        """The position ``position.json`` and ``versions.u64`` record, or None if they are
        missing, do not match, or are not what it wrote."""
        found = read_json(self.directory / POSITION_FILE)
        if found is None:
            return None
        op, files = found.get("op"), found.get("files")
        if (not isinstance(op, str) or not isinstance(files, list) or len(files) != 2
                or not all(isinstance(stamp, list) and len(stamp) == 5 and all(type(n) is int for n in stamp)
                           for stamp in files)):
            return None
        try:
            raw = (self.directory / VERSIONS_FILE).read_bytes()
        except OSError:
            return None
        if len(raw) % 8 or found.get("check") != zlib.crc32(orjson.dumps([op, files]), zlib.crc32(raw)):
            return None
        return op, (tuple(files[0]), tuple(files[1])), np.frombuffer(raw, dtype="<u8")

    # --- rebuilding and erasing ----------------------------------------------------------------

    def reload(self, *, rebuild: bool = False) -> None:
        """Read the store again from its files (damage done under this tree is seen), or with
        ``rebuild`` delete this model's vectors. Raises ReadOnlyError in a tree that does not
        write."""
        if not self.writes:
            raise ReadOnlyError("a tree that may not write queues no embedding work")
        with self._scanning, self._embedding, self._open_lock:  # (no embedding appends to the files meanwhile)
            store, self._store = self._store, None
            self._base, self._scanned = None, False
            if store is not None:
                store.discard()  # its rows in memory may be gone from disk: never save them
            if rebuild:
                remove_cache_dir(self.directory)

    def erase(self, entity_ids: set[str]) -> int:
        """Erase the vector rows of these (forgotten) entities in every model's store;
        returns how many rows went. Raises ReadOnlyError in a tree that does not write."""
        if not self.writes:
            raise ReadOnlyError("a tree that may not write cannot erase its caches")
        with self._scanning, self._embedding, self._open_lock:
            store, self._store = self._store, None
            self._base, self._scanned = None, False
            if store is not None:
                store.discard()  # its graph in memory holds the vectors: never save it
            # (Under the lock: an embedding that read a forgotten text before the forget
            # operation must not append its vector after the rows were erased.)
            erased = sum(erase_vectors(path, entity_ids) for path in vector_directories(self._cache / "vectors"))

        def forget_digests(state: State) -> None:
            for key in [key for key in self._digests if key[1] in entity_ids]:
                del self._digests[key]

        self._read(forget_digests)
        self.queries.clear()  # a query may have quoted a forgotten text (query_vectors' docstring)
        return erased

    # --- reads ---------------------------------------------------------------------------------

    def hits(self, query: str, kind: str, k: int, within: Collection[str] | None = None) -> Hits:
        """Entities of ``kind`` (among ``within``, if given) whose text's vector is nearest the
        query's (embedded once: ``queries``)."""
        if not self.exists():
            return []  # nothing was ever embedded with this model here
        store = self.store
        store.refresh()
        if not len(store):
            return []
        vector = self.queries.vector(self.embedder, query)
        if not np.any(vector):
            return []

        def current(state: State) -> Callable[[str, str], bool]:
            def accept(entity_id: str, digest: str) -> bool:
                return self.digest(state, kind, entity_id) == digest

            return accept

        accept = self._read(current)
        store.warm_up()  # a first search builds the graph: not while holding the state
        found = self._read(lambda state: store.search(vector, k, accept, within))
        # A text pointing away from the query is no evidence for it; ties in id order.
        return sorted(((entity_id, sim) for entity_id, sim in found if sim > 0), key=lambda hit: (-hit[1], hit[0]))

    def close(self) -> None:
        """Release the store (its graph is persisted by the caller first, see persist)."""
        with self._open_lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()
