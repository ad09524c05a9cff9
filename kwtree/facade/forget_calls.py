"""KeywordTree's ``forget``: erase an info, a keyword with its subtree, or a scope — from the
live tree, the log itself, the caches and the outbox (docs/agent-memory.md, "Forget").

Three steps, each safe to interrupt: (a) an ordinary ``forget`` operation deletes the
entities (decided by ``kwtree.writes.forget``; from then on no process that refreshes sees
them); (b) under the writer lock, the log is rewritten as a new generation in which every
row of every entity a forget operation erased holds its tombstone (``kwtree.ops.erasure``,
through the swap compaction uses); (c) the caches are purged. A rerun finds what a crash
left undone: (b) and (c) always cover every entity the log's forget operations erased.

A step (b) that fails (a full disk) or is killed leaves the forget operation committed and its
text in the log. That is never left to chance: the error says so, ``verify`` reports it
(``forget-unfinished``), and the next forget of any target, ``repair()`` and every writable
open of the tree (``_finish_forget_at_open``) finish it. The open does so because after a
crash nobody was told, and a log replacement a crash interrupted is finished there too; it
costs one read of the last forget operation (``kwtree.ops.erasure.unfinished_forget``), and an
open that cannot finish it (the disk is still full) opens anyway, with a warning.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from kwtree.engine.state import State
from kwtree.errors import InvalidInputError, LockTimeoutError, NotFoundError, StorageError
from kwtree.facade.core import TreeCore
from kwtree.models import Change
from kwtree.normalize import normalize_name
from kwtree.retrieval.scopes import clean_scope, scope_keyword
from kwtree.validate import clean_id
from kwtree.writes import Stamp
from kwtree.writes.abstracts import quotes
from kwtree.writes.forget import (
    FORGET_KIND,
    ForgetPlan,
    forget_entity,
    forget_subtree,
    last_forget,
    revise_survivors,
)

if TYPE_CHECKING:
    from kwtree.ops.erasure import ForgetReport, LogErasure

__all__ = ["ForgetMethods"]

log = logging.getLogger("kwtree.forget")


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
        If the rewrite of the log fails (a full disk), the forget operation stays committed
        and the error (DiskFullError when the disk is full) says that the text is still in
        the log: call forget again once space is freed; the next forget of any target,
        ``repair()`` or a writable open of the tree finish it too.

        Returns a :class:`kwtree.ForgetReport`: what was erased and kept, and what kwtree
        cannot reach (older snapshots, git history, exports, copies) with how to purge it.
        Raises InvalidInputError (not exactly one target, a bad id or scope, the root),
        NotFoundError (no such entity or scope; nothing is written), ReadOnlyError,
        LockTimeoutError, StorageError (DiskFullError); raised after the forget operation is
        committed, the last two say what is left to erase.
        """
        from kwtree.ops import erasure as forgetting

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
        erasure, removed, vectors, outbox = self._erase(plan, audit, op.op_id if op is not None else str(plan.already))
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

    def _erase(self, plan: ForgetPlan, audit: dict[str, Any], op_id: str) -> tuple[LogErasure, list[str], int, int]:
        """Steps (b) and (c) for every forget operation in the log: returns what the log's
        rewrite found and did, the quarantine files removed, the vector rows and outbox items
        dropped. ``op_id`` is the forget operation the caller finishes, named by the error:
        a StorageError or LockTimeoutError saying what is left (``unfinished_error``)."""
        from kwtree.ops import erasure as forgetting

        engine = self._engine
        log_erased = False
        try:
            with engine.writing() as state:
                erasure = forgetting.erase_log(engine, state, self._progress)
            if erasure.quoting:  # a live keyword holds an older erased text (its abstract, an alias): drop it first
                erased_names = {normalize_name(text) for text in erasure.needles}
                names = dict.fromkeys(erasure.carriers, erased_names)
                needles = erasure.needles
                self._commit(FORGET_KIND, lambda state, stamp: revise_survivors(
                    state, stamp, plan, lambda keyword, stored: quotes(stored, needles), names,
                    only=erasure.quoting), audit)
            with engine.writing() as state:
                if erasure.quoting:
                    erasure = forgetting.erase_log(engine, state, self._progress)
                log_erased = True
                removed = forgetting.purge_quarantine(engine.directory, erasure)
                vectors, outbox = self._caches.erase(erasure.entity_ids)
        except (StorageError, LockTimeoutError) as exc:
            raise forgetting.unfinished_error(op_id, exc, log_erased=log_erased) from exc
        self._agent.forget(plan.keywords)
        return erasure, removed, vectors, outbox

    def _finish_forget(self) -> str | None:
        """Finish the erasure of the last forget operation if it did not finish (see the
        module docstring); returns its id, None when there was nothing to finish. Raises as
        ``_erase``, and ReadOnlyError, ClosedError."""
        engine = self._engine
        with engine.exclusive() as state:
            op_id = last_forget(state)
            if op_id is None:  # (a tree that never forgot does not load kwtree.ops.erasure)
                return None
            from kwtree.ops import erasure as forgetting

            if not forgetting.unfinished_forget(engine, op_id):
                return None
        self._erase(ForgetPlan(), {"forget": {"finishes": op_id}}, op_id)
        return op_id

    def _finish_forget_at_open(self) -> None:
        """``_finish_forget`` for a writable open, which it never fails: an erasure it cannot
        finish (the disk is still full, another writer holds the lock) is logged and left for
        the next forget, ``repair()`` or open."""
        try:
            finished = self._finish_forget()
        except (StorageError, LockTimeoutError) as exc:
            log.warning("%s", exc)
            return
        if finished is not None:
            log.warning("finished the erasure of forget operation %s in %s, which a full disk or a crash had "
                        "interrupted", finished, self._engine.directory)

    def _scope_forgotten_by(self, digest: str) -> str | None:
        """The forget operation that forgot the scope with this digest, if one did."""
        for op in self._engine.history(None, None):
            forgot = (op.audit or {}).get("forget") if op.kind == FORGET_KIND else None
            if isinstance(forgot, dict) and forgot.get("scope_sha256") == digest:
                return op.op_id
        return None
