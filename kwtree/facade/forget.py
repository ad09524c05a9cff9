"""KeywordTree's ``forget``: erase an info, a keyword with its subtree, or a scope — from the
live tree, the log itself, the caches and the outbox (docs/agent-memory.md, "Forget").

Three steps, each safe to interrupt: (a) an ordinary ``forget`` operation deletes the
entities (decided by ``kwtree.writes.forget``; from then on no process that refreshes sees
them); (b) under the writer lock, the log is rewritten as a new generation in which every
row of every entity a forget operation erased holds its tombstone (``kwtree.ops.forget``,
through the swap compaction uses); (c) the caches are purged. A rerun finds what a crash
left undone: (b) and (c) always cover every entity the log's forget operations erased.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, NotFoundError
from kwtree.facade.core import TreeCore
from kwtree.models import Change
from kwtree.normalize import normalize_name
from kwtree.retrieval.scopes import clean_scope, scope_keyword
from kwtree.validate import clean_id
from kwtree.writes import Stamp
from kwtree.writes.abstracts import quotes
from kwtree.writes.forget import FORGET_KIND, ForgetPlan, forget_entity, forget_subtree, revise_survivors

if TYPE_CHECKING:
    from kwtree.ops.forget import ForgetReport

__all__ = ["ForgetMethods"]


class ForgetMethods(TreeCore):
    """``forget`` (a base class of KeywordTree)."""

    def forget(self, entity_id: str | None = None, *, scope: str | None = None) -> ForgetReport:
        """Erase an info (``entity_id``), a keyword with its whole subtree (``entity_id``), or
        a scope's subtree (``scope="user:alice"``): exactly one of the two.

        Erased are an info's content, source and metadata; a keyword's name, aliases,
        description and metadata, for every keyword under it (live, or deleted while under
        it), with the infos linked only inside it; infos also linked outside are kept and
        lose their links inside (``report.kept``). Relations touching an erased keyword are
        deleted and lose their reason. First a ``forget`` operation deletes them (the live
        view drops them at once; ``history()`` shows it); then every row of them in the log —
        every version, every earlier operation — is rewritten to a tombstone (empty text,
        metadata ``{"forgotten_by": <op id>}``; ids, versions, op ids and the order of
        operations stay) in a new generation swapped in atomically; then the full-text
        index, the vectors and the outbox are purged. Later snapshots and exports hold none
        of it. A crash at any point leaves a valid log, old or new: call ``forget`` again
        with the same target to finish (a target forgotten already is not an error; the call
        finishes the erasure and says so). ``undo`` of a forget operation is refused.

        Returns a :class:`kwtree.ForgetReport`: what was erased and kept, and what kwtree
        cannot reach (older snapshots, git history, exports, copies) with how to purge it.
        Raises InvalidInputError (not exactly one target, a bad id or scope, the root),
        NotFoundError (no such entity or scope; nothing is written), ReadOnlyError,
        LockTimeoutError, StorageError.
        """
        from kwtree.ops import forget as forgetting

        self._check_writable()
        if (entity_id is None) == (scope is None):
            raise InvalidInputError("forget takes exactly one target: forget(entity_id) for an info or a keyword "
                                    "(with its subtree), or forget(scope='user:alice') for a scope")
        started = time.perf_counter()
        path = None if scope is None else clean_scope(scope)
        if entity_id is not None:
            clean_id(entity_id, "entity_id")
        plans = [ForgetPlan()]

        def decide(state: State, stamp: Stamp) -> list[Change]:
            plan = plans[0] = ForgetPlan()
            if path is None:
                return forget_entity(state, stamp, entity_id, plan)
            keyword = scope_keyword(state, path)
            if keyword is None:
                raise NotFoundError(f"scope: no scope {path!r} in {self._engine.directory}; nothing was forgotten")
            return forget_subtree(state, stamp, keyword.id, plan)

        audit: dict[str, Any] = ({"forget": {"entity_id": entity_id}} if path is None
                                 else {"forget": {"scope_sha256": forgetting.scope_digest(path)}})
        try:
            op = self._commit(FORGET_KIND, decide, audit)
            plan = plans[0]
        except NotFoundError:
            plan = ForgetPlan()
            plan.already = None if path is None else self._scope_forgotten_by(forgetting.scope_digest(path))
            if plan.already is None:
                raise
            op = None
        engine = self._engine
        with engine.writing() as state:
            erasure = forgetting.erase_log(engine, state)
        if erasure.quoting:  # a live keyword holds an older erased text (its abstract, an alias): drop it first
            erased_names = {normalize_name(text) for text in erasure.needles}
            names = dict.fromkeys(erasure.carriers, erased_names)
            self._commit(FORGET_KIND, lambda state, stamp: revise_survivors(
                state, stamp, plan, lambda keyword, stored: quotes(stored, erasure.needles), names,
                only=erasure.quoting), audit)
        with engine.writing() as state:
            if erasure.quoting:
                erasure = forgetting.erase_log(engine, state)
            removed = forgetting.purge_quarantine(engine.directory, erasure)
            vectors, outbox = self._indexes.erase(erasure.entity_ids)
        self._agent.forget(plan.keywords)
        return forgetting.ForgetReport(
            target=f"scope {path}" if path is not None else str(entity_id),
            op_id=None if op is None else op.op_id, already_forgotten_by=plan.already,
            infos=tuple(plan.infos), keywords=tuple(plan.keywords), links=plan.links, relations=plan.relations,
            kept=tuple(forgetting.KeptInfo(info_id, held) for info_id, held in plan.kept.items()),
            log_rewritten=erasure.rewritten, rows_rewritten=erasure.rows + erasure.revised,
            audits_scrubbed=erasure.audits, abstracts_dropped=tuple(dict.fromkeys(plan.abstracts)),
            aliases_dropped=tuple(dict.fromkeys(plan.aliases)),
            operations=erasure.operations, bytes_before=erasure.bytes_before, bytes_after=erasure.bytes_after,
            fulltext_removed=True, vectors_blanked=vectors, outbox_items_dropped=outbox,
            quarantine_removed=tuple(removed), unreachable=forgetting.unreachable(engine.directory),
            seconds=time.perf_counter() - started,
        )

    def _scope_forgotten_by(self, digest: str) -> str | None:
        """The forget operation that forgot the scope with this digest, if one did."""
        for op in self._engine.history(None, None):
            forgot = (op.audit or {}).get("forget") if op.kind == FORGET_KIND else None
            if isinstance(forgot, dict) and forgot.get("scope_sha256") == digest:
                return op.op_id
        return None
