"""``kwtree.Memory``: the calls and result shapes of mem0's ``Memory`` over a KeywordTree.

A mem0 user switches in two lines (``from kwtree import Memory`` / ``m = Memory("./memory")``)
and keeps calling ``add``, ``search``, ``get``, ``get_all``, ``update``, ``delete``,
``delete_all`` and ``history``, with mem0's dicts back (``{"results": [{"id", "memory",
"event", ...}]}``, items with ``hash``, ``metadata``, ``score``, ``created_at``,
``updated_at``, ``user_id`` / ``agent_id`` / ``run_id``). What mem0 lacks is added: ``undo``,
``as_of`` (a read-only view of the past) and ``forget`` (erasure, not a soft delete).

Whose memories: ``add``'s ids name a scope path, ``user:<user_id>/agent:<agent_id>/run:<run_id>``
with only the ids given, in that fixed order. A read (``get_all``, ``search``, ``delete_all``)
takes any combination of ids as mem0 does, as a filter: it sees every memory whose scope holds
all the ids given. ``user_id="alice"`` sees alice's memories of every agent and run;
``run_id="42"`` sees every memory added with run id 42, whoever's it is; ``user_id="alice",
run_id="42"`` those of alice's run 42, with or without an agent id. At least one id is
required, as in mem0.

Where: ``Memory()`` without a path opens the default directory, ``$KWTREE_HOME`` if set, else
``$XDG_DATA_HOME/kwtree/memory`` (``~/.local/share/kwtree/memory``); ``Memory.from_config``
takes mem0's config dict (``CONFIG_KEYS``). ``add`` returns once what it stored is embedded
(``embed_async=False`` unless given), so ``search`` finds it by meaning at once, as mem0's does.

What is a memory here: what ``commit_session`` extracted and what ``add(infer=False)`` stored,
never the archived turns and session summaries (``KeywordTree.memories``). The rest of the
tree is one attribute away: ``Memory.tree``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwtree.agent.llm_env import llm_from_env
from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.facade.mem0_config import read_config
from kwtree.facade.tree import KeywordTree, check_options
from kwtree.memory.candidates import Candidate, ExtractContext, Message
from kwtree.memory.commit import CommitOptions, CommitResult
from kwtree.memory.filters import check_filters, matches
from kwtree.memory.messages import clean_messages, digest, turn_text
from kwtree.memory.policies import POLICIES, Policy
from kwtree.memory.when import parse_time
from kwtree.memory_schema import CATEGORY, CONFIDENCE, HAPPENED_AT, ROUTING_KEY, USER_METADATA
from kwtree.models import Hit, Info, Operation
from kwtree.retrieval import relevance
from kwtree.retrieval.scopes import MAX_SCOPES
from kwtree.validate import check_unicode, clean_flag, clean_id, clean_int, clean_metadata, clean_text, shown

if TYPE_CHECKING:
    from kwtree.agent.clients import LLMClient
    from kwtree.caches.embed import Embedder
    from kwtree.ops.erasure import ForgetReport

__all__ = ["EVENTS", "ID_KINDS", "VERBATIM", "Memory", "default_directory", "verbatim_options"]

#: The scope kind of each id, in the order a scope path holds them.
ID_KINDS = (("user_id", "user"), ("agent_id", "agent"), ("run_id", "run"))
#: The category (and branch) of the memories ``add(infer=False)`` stores: held by the branch,
#: appended, never merged.
VERBATIM = "memories"
#: mem0's event for each commit decision.
EVENTS = {"create": "ADD", "append": "ADD", "merge": "UPDATE", "supersede": "UPDATE", "skip": "NONE"}
#: kwtree's own memory fields shown in an item's ``metadata``, with ``provenance`` (who said it:
#: ``filters={"provenance": "user"}``); the caller's keys win.
_SHOWN_FIELDS = (CATEGORY, ROUTING_KEY, CONFIDENCE, HAPPENED_AT)
_VERBATIM_POLICIES = {**POLICIES, VERBATIM: Policy(VERBATIM, "branch", "append")}


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def scope_path(user_id: object = None, agent_id: object = None, run_id: object = None) -> str:
    """The scope the ids name (see the module's docstring); InvalidInputError naming the id
    that is malformed, or all three when none is given."""
    parts = []
    for (field, kind), value in zip(ID_KINDS, (user_id, agent_id, run_id), strict=True):
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip() or value != value.strip() or "/" in value \
                or any(ord(ch) < 32 or ord(ch) == 127 for ch in value) or len(value) > 200:
            raise InvalidInputError(f"{field} must be a non-empty id without '/', control characters or surrounding "
                                    f"spaces (at most 200 characters), got {shown(value)}")
        check_unicode(value, field)
        parts.append(f"{kind}:{value}")
    if not parts:
        raise InvalidInputError("at least one of user_id, agent_id or run_id must be given: they say whose "
                                "memories these are (as in mem0)")
    return "/".join(parts)


def ids_of(scope: str) -> dict[str, str]:
    """The mem0 ids a scope path holds: ``"user:alice/run:42"`` -> user_id and run_id."""
    found: dict[str, str] = {}
    for part in scope.split("/"):
        kind, _, name = part.partition(":")
        for field, known in ID_KINDS:
            if kind == known:
                found[field] = name
    return found


def _verbatim(messages: Sequence[Message], context: ExtractContext) -> list[Candidate]:
    """Each new message as it was said (system messages left out): the extractor of
    ``add(infer=False)``."""
    found = []
    for index in range(context.first_new, len(messages)):
        message = messages[index]
        text = turn_text(message).strip()
        if text and message["role"] != "system":
            found.append(Candidate(VERBATIM, VERBATIM, text[:200], text, 1.0, (index,),
                                   parse_time(message.get("ts"), f"messages[{index}].ts")))
    return found


def verbatim_options(metadata: Mapping[str, Any] | None = None, provenance: str | None = None) -> CommitOptions:
    """The options of a commit that stores each new message (system messages aside) as one
    memory, word for word, under the scope's ``memories`` branch, keeping neither the turns nor
    a session summary (the session's keyword stays, so the same messages are stored once): what
    ``add(infer=False)`` and the agents' ``remember`` tool write. ``provenance`` as
    ``CommitOptions.provenance`` (None: each message's role says who said it)."""
    return CommitOptions(keep_turns=False, keep_summary=False, extractor=_verbatim, policies=_VERBATIM_POLICIES,
                         metadata=metadata, provenance=provenance)


def default_directory() -> Path:
    """Where ``Memory()`` keeps its tree when given no path: ``$KWTREE_HOME`` if set, else
    ``$XDG_DATA_HOME/kwtree/memory``, ``XDG_DATA_HOME`` defaulting to ``~/.local/share`` (the
    XDG base directory rule for a program's data)."""
    home = os.environ.get("KWTREE_HOME")
    if home:
        return Path(home)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "kwtree" / "memory"


def _covers(scope: str, wanted: Mapping[str, str]) -> bool:
    held = ids_of(scope)
    return all(held.get(field) == value for field, value in wanted.items())


class Memory:
    """mem0's ``Memory`` calls over a KeywordTree in ``path`` (created when new; None: the
    default directory, ``default_directory()``), which it owns:
    ``close()`` (or a ``with`` block) releases it. ``llm`` (a kwtree LLMClient) makes extraction,
    dedup and placement use the model; without it, the model ``KWTREE_LLM`` names does
    (``kwtree.agent.llm_env.llm_from_env``, the setting the ``kwtree`` command, ``kwtree mcp``
    and the hooks read; unset or "offline": none); ``embedder`` embeds for vector search; ``options`` are
    KeywordTree's (``durability``, ``as_of``, ``read_only`` ...; another name, ``data_dir`` or
    ``llm_client`` raises InvalidInputError). Every call checks its arguments first:
    InvalidInputError names the field and nothing is written."""

    def __init__(self, path: str | os.PathLike[str] | None = None, llm: LLMClient | None = None,
                 embedder: Embedder | None = None, **options: Any) -> None:
        check_options(options, "Memory", {"data_dir": "path", "llm_client": "llm"})
        path = default_directory() if path is None else path
        options = {"embed_async": False, **options}  # add returns with its memories searchable by meaning
        self._path, self._llm, self._embedder, self._options = path, llm, embedder, options
        self._client = llm if llm is not None else llm_from_env()
        #: The KeywordTree underneath, for every call mem0 does not have.
        self.tree = KeywordTree(path, llm_client=self._client, embedder=embedder, **options)

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Release the directory (harmless twice)."""
        self.tree.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory({self.tree!r})"

    @property
    def llm(self) -> LLMClient | None:
        """The LLM client extraction, dedup and placement ask (None: the offline rules)."""
        return self._client

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Memory:
        """A Memory from mem0's config dict, with the keys that map to kwtree (``CONFIG_KEYS``,
        ``kwtree.facade.mem0_config``): the directory (``vector_store.config.path`` or
        ``path``), the LLM (``llm``: OpenAI-compatible providers and Anthropic) and the
        embedder (``embedder``: kwtree's own). Any other key, provider or setting raises
        InvalidInputError naming it (``graph_store``, ``vector_store.provider`` ...)."""
        path, llm, embedder = read_config(config)
        return cls(path, llm, embedder)

    def reset(self) -> None:
        """Erase every memory, as mem0's ``reset`` empties its store: each scope is forgotten
        (``KeywordTree.forget(scope=...)``: its memories and archived sessions leave the log,
        the indexes and later snapshots). The Memory stays open and usable."""
        for scope in self.tree.memory.scopes():
            if "/" not in scope:  # a top-level scope takes the ones nested in it along
                self.tree.forget(scope=scope)

    # --- mem0's calls -----------------------------------------------------------------------

    def add(self, messages: str | Mapping[str, Any] | Sequence[Mapping[str, Any]], *, user_id: str | None = None,
            agent_id: str | None = None, run_id: str | None = None, metadata: Mapping[str, Any] | None = None,
            infer: bool = True) -> dict[str, Any]:
        """Remember a text (a user message), a message or a list of messages: ``{"results":
        [{"id", "memory", "event"}, ...], "op_ids": [...]}``. ``event`` is "ADD" (a new memory),
        "UPDATE" (merged into or superseding a held one; ``previous_memory`` says what it
        was) or "NONE" (already held: the id of the memory that holds it).

        With ``infer`` (the default), ``commit_session`` extracts the memories (offline rules,
        or the model when ``llm`` was given), archives the messages as a session and dedups
        against the scope; without it, each message (system messages aside) is stored as
        it was, one memory each. The session's id is ``add-`` (``verbatim-`` without infer)
        plus a digest of the messages: adding the same messages again writes nothing. Each
        add is its own session (mem0 callers send only the new messages); for one growing
        conversation use ``KeywordTree.after_turn``. ``metadata`` goes on every memory the
        add wrote (shown in ``metadata``, matched by ``filters``), in the same operation.
        ``op_ids`` are the operations written (one, or none when nothing was new):
        ``undo(result["op_ids"])``. When the LLM failed a step of the commit (``llm`` down,
        overloaded or too slow), the step is done offline and the messages are added all the
        same, and ``fallbacks`` lists each such step as ``{"step", "error", "instead"}``
        (``CommitResult.fallbacks``; the key is absent when nothing fell back); a Memory opened
        with ``on_agent_failure="raise"`` raises AgentError instead and adds nothing."""
        scope = scope_path(user_id, agent_id, run_id)
        if isinstance(messages, str):
            messages = [{"role": "user", "content": clean_text(messages, "messages", allow_empty=False)}]
        elif isinstance(messages, Mapping):
            messages = [messages]
        cleaned = clean_messages(messages)
        extra = dict(clean_metadata(metadata)) if metadata is not None else None
        options = CommitOptions(metadata=extra) if clean_flag(infer, "infer") else verbatim_options(extra)
        session_id = f"{'add' if infer else 'verbatim'}-{digest(cleaned)[:16]}"
        result = self.tree.memory.commit_session(cleaned, session_id=session_id, scope=scope, options=options)
        op_ids = [result.op_id] if result.op_id is not None else []
        added: dict[str, Any] = {"results": self._events(result), "op_ids": op_ids}
        if result.fallbacks:
            added["fallbacks"] = [dataclasses.asdict(fallback) for fallback in result.fallbacks]
        return added

    def search(self, query: str, *, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, limit: int = 100, filters: Mapping[str, Any] | None = None,
               threshold: float | None = None, include_superseded: bool = False) -> dict[str, Any]:
        """The scope's memories most relevant to ``query``, best first: ``{"results": [item,
        ...]}``, each item as ``get`` gives it plus ``score`` (recall's ranking score) and
        ``relevance`` (recall's relevance, in [0, 1]). ``threshold`` keeps the items whose
        relevance reaches it (it is recall's ``min_score``; default: recall's calibrated
        floor); ``filters`` (mem0's grammar, ``kwtree.memory.filters``) keeps the items whose
        ``metadata`` and ids match. Archived turns are never results. A fact the user has since
        changed ranks below current ones unless ``include_superseded`` (the history on
        purpose: mem0's ``latest_only=False``)."""
        scopes = self._scopes(user_id, agent_id, run_id)
        limit = clean_int(limit, "limit", 1, 1000)
        checked = check_filters(filters) if filters is not None else None
        floor = relevance.MIN_SCORE
        if threshold is not None:
            if type(threshold) not in (int, float) or not 0 <= threshold <= 1:
                raise InvalidInputError(f"threshold must be a number from 0 to 1, got {shown(threshold)}")
            floor = float(threshold)
        hits = self._recall(query, min(1000, max(50, limit * 5)), scopes, floor, include_superseded)
        found = []
        for hit in hits:
            item = self._item_of(hit.info, hit)
            if item is None or (threshold is not None and hit.relevance < floor):
                continue
            if checked is None or matches(checked, {**item["metadata"], **ids_of(self._scope_of(hit.info))}):
                found.append(item)
            if len(found) == limit:
                break
        return {"results": found}

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """The memory as mem0 shows it (``id``, ``memory``, ``hash``, ``metadata``,
        ``created_at``, ``updated_at`` (None before any update), and the ids of its scope), or
        None when ``memory_id`` is no live memory (as mem0)."""
        clean_id(memory_id, "memory_id")
        try:
            info = self.tree.get_info(memory_id)
        except NotFoundError:
            return None
        return self._item_of(info)

    def get_all(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                filters: Mapping[str, Any] | None = None, limit: int = 100) -> dict[str, Any]:
        """The scope's memories, oldest first, at most ``limit``: ``{"results": [item, ...]}``;
        ``filters`` as for ``search``."""
        scopes = self._scopes(user_id, agent_id, run_id)
        limit = clean_int(limit, "limit", 1, 1_000_000)
        checked = check_filters(filters) if filters is not None else None
        found: list[dict[str, Any]] = []
        for info in self._memories(scopes):
            item = self._item_of(info)
            if item is None:
                continue
            if checked is None or matches(checked, {**item["metadata"], **ids_of(self._scope_of(info))}):
                found.append(item)
            if len(found) == limit:
                break
        return {"results": found}

    def update(self, memory_id: str, data: str) -> dict[str, str]:
        """Replace the memory's text (the old text stays in ``history``);
        ``{"message": "Memory updated successfully!"}``. NotFoundError when ``memory_id`` is no
        live memory."""
        text = clean_text(data, "data", allow_empty=False)
        self._require(memory_id)
        self.tree.update_info(memory_id, {"content": text})
        return {"message": "Memory updated successfully!"}

    def delete(self, memory_id: str) -> dict[str, str]:
        """Delete the memory as mem0 does: it leaves every read, its text stays in ``history``
        (``undo`` brings it back; ``forget`` erases it). ``{"message": "Memory deleted
        successfully!"}``; NotFoundError when ``memory_id`` is no live memory."""
        self._require(memory_id)
        self.tree.delete_info(memory_id)
        return {"message": "Memory deleted successfully!"}

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None) -> dict[str, str]:
        """Erase every scope whose memories the ids select (see the module's docstring), its
        memories, archived sessions and nested scopes, with ``KeywordTree.forget(scope=...)``:
        the text is gone from the log, the indexes and later snapshots, not only hidden (no
        such scope: nothing to do). ``{"message": "Memories deleted successfully!"}``."""
        for scope in self._scopes(user_id, agent_id, run_id):
            with contextlib.suppress(NotFoundError):  # a scope never written to: nothing to erase
                self.tree.forget(scope=scope)
        return {"message": "Memories deleted successfully!"}

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """How the memory's text changed, oldest first, in mem0's shape: ``id`` (the
        operation), ``memory_id``, ``old_memory``, ``new_memory``, ``event`` ("ADD",
        "UPDATE", "DELETE"), ``created_at`` (the memory's), ``updated_at`` (the change's; None
        for ADD), ``is_deleted``, ``actor_id``, ``role`` (None). Changes of metadata only
        are not listed. Empty for an unknown id."""
        clean_id(memory_id, "memory_id")
        entries = []
        for op in self.tree.history(memory_id):
            for change in op.changes:
                after, before = change.after, change.before
                if type(after) is not Info or after.id != memory_id:
                    continue
                if before is not None and isinstance(before, Info) and before.content == after.content \
                        and before.deleted == after.deleted:
                    continue
                old = before.content if isinstance(before, Info) and not before.deleted else None
                event = ("ADD" if before is None or (isinstance(before, Info) and before.deleted and not after.deleted)
                         else "DELETE" if after.deleted else "UPDATE")
                entries.append({"id": op.op_id, "memory_id": memory_id, "old_memory": old,
                                "new_memory": None if after.deleted else after.content, "event": event,
                                "created_at": _iso(after.created_at),
                                "updated_at": None if event == "ADD" else _iso(op.timestamp),
                                "is_deleted": after.deleted, "actor_id": op.actor, "role": None})
        return entries

    # --- what mem0 lacks --------------------------------------------------------------------

    def undo(self, op_id: str | Sequence[str]) -> list[Operation]:
        """Undo an operation, or several (``add``'s ``op_ids``) as ONE operation, all or nothing
        (``KeywordTree.undo``); returns the undo operation written (none when everything already
        was as before). UndoConflictError when an operation outside the list wrote the same
        memories later; InvalidInputError, with nothing undone, when ``op_id`` or one of its
        items is no operation id."""
        undone = self.tree.undo(op_id)
        return [] if undone is None else [undone]

    def as_of(self, time_or_op: str | float) -> Memory:
        """A read-only Memory of the same directory as it was at ``time_or_op`` (an op id or
        epoch seconds); its writes raise ReadOnlyError. Close it when done."""
        return Memory(self._path, self._llm, self._embedder, **{**self._options, "as_of": time_or_op})

    def forget(self, memory_id: str) -> ForgetReport:
        """Erase the memory: ``KeywordTree.forget(memory_id)`` (its text leaves the log, the
        indexes and later snapshots; ``delete`` only hides it)."""
        self._require(memory_id)
        return self.tree.forget(memory_id)

    # --- whose memories -----------------------------------------------------------------------

    def _scopes(self, user_id: object, agent_id: object, run_id: object) -> list[str]:
        """The scopes a read with these ids sees (the outermost of those holding every id given;
        the ones nested in them come along), checked as ``scope_path`` checks them."""
        path = scope_path(user_id, agent_id, run_id)
        wanted = ids_of(path)
        fields = [field for field, _ in ID_KINDS]
        if list(wanted) == fields[:len(wanted)]:  # user, user+agent, user+agent+run: one scope holds them all
            return [path]
        found: list[str] = []
        for scope in self.tree.memory.scopes():  # each before the scopes nested in it
            if _covers(scope, wanted) and not any(scope.startswith(f"{kept}/") for kept in found):
                found.append(scope)
        return found

    def _memories(self, scopes: list[str]) -> list[Info]:
        found: dict[str, Info] = {}
        for start in range(0, len(scopes), MAX_SCOPES):
            found.update((info.id, info) for info in self.tree.memory.memories(scopes[start:start + MAX_SCOPES]))
        return sorted(found.values(), key=lambda info: (info.created_at, info.id))

    def _recall(self, query: str, k: int, scopes: list[str], floor: float, include_superseded: bool) -> list[Hit]:
        if not scopes:
            clean_text(query, "query", allow_empty=False)
            return []
        hits: list[Hit] = []
        for start in range(0, len(scopes), MAX_SCOPES):
            hits += self.tree.recall(query, k=k, scope=scopes[start:start + MAX_SCOPES], min_score=floor,
                                     include_superseded=include_superseded)
        return sorted(hits, key=lambda hit: -hit.score)[:k] if len(scopes) > MAX_SCOPES else hits

    # --- the shapes ---------------------------------------------------------------------------

    def _scope_of(self, info: Info) -> str:
        scope = self.tree.memory.memory_scope(info.id)
        return scope or ""

    def _require(self, memory_id: object) -> None:
        clean_id(memory_id, "memory_id")
        if self.tree.memory.memory_scope(memory_id) is None:  # type: ignore[arg-type]
            raise NotFoundError(f"no memory {memory_id} (an unknown or deleted id, or an archived turn); "
                                f"get_all() lists the memories")

    def _item_of(self, info: Info, hit: Hit | None = None) -> dict[str, Any] | None:
        scope = self.tree.memory.memory_scope(info.id)
        if scope is None:
            return None
        shown_meta = {key: info.metadata[key] for key in _SHOWN_FIELDS if key in info.metadata}
        shown_meta["provenance"] = info.provenance
        user_meta = info.metadata.get(USER_METADATA)
        if isinstance(user_meta, Mapping):
            shown_meta.update(user_meta)
        item: dict[str, Any] = {"id": info.id, "memory": info.content,
                                "hash": hashlib.md5(info.content.encode(), usedforsecurity=False).hexdigest(),
                                "metadata": shown_meta}
        if hit is not None:
            item["score"] = hit.score
            item["relevance"] = hit.relevance
        item["created_at"] = _iso(info.created_at)
        item["updated_at"] = _iso(info.updated_at) if info.version > 1 else None
        item.update(ids_of(scope))
        return item

    def _events(self, result: CommitResult) -> list[dict[str, Any]]:
        entries: dict[tuple[str, str], dict[str, Any]] = {}
        for decision in result.decisions:
            if decision.info_id is None:
                continue
            event = EVENTS[decision.action]
            if event == "NONE" and any(iid == decision.info_id for iid, _ in entries):
                continue  # written by this add already
            entry: dict[str, Any] = {"id": decision.info_id,
                                     "memory": self.tree.get_info(decision.info_id).content, "event": event}
            if event == "UPDATE" and decision.previous is not None:
                entry.setdefault("previous_memory", decision.previous)
            entries.setdefault((decision.info_id, event), entry)
        return list(entries.values())
