"""References between entities whose other end is missing: what verify reports, repair retires.

A link or relation row whose info or keyword id names an entity the log never wrote is damage
(a flipped digit in an id, a lost segment that held the entity), not history: every writer
checks that both ends exist before it writes one. In a format-2 log a digit flipped on disk
is found first by its operation's checksum (``checksum``; repair quarantines the operation
whole), so what is judged here is damage made before the checksum (a buggy writer, a merged
log), a format-1 log, and the references that a quarantined operation or a lost segment
leaves naming nothing. One that names a *deleted* entity is history
(merged branches leave those, DESIGN §3): it is inert, and verify only warns about it.

- Replay keeps a reference that names nothing out of the indexes (``State.put_link`` and
  ``put_relation``), so no read returns it or fails on it; it stays in ``State.links`` /
  ``State.relations`` for verify.
- ``verify`` reports each as an error (``dangling-link``, ``dangling-relation``) at the file
  and line of its last row.
- ``repair`` retires them: one operation of kind ``"repair"`` (actor ``"repair"``) writing a
  tombstone for each; verify then lists them as ``retired-link`` / ``retired-relation`` (info).
  We rejected cutting the row out of its operation: the other rows of that operation (the
  info a ``create_info`` stored, the keywords a merge moved) are intact, and an operation
  rewritten without a row no longer matches its copies in other clones. The row stays in the
  log to be read, and once the missing entity is back (a lost segment found),
  ``undo(<repair op id>)`` makes the reference live again (before that, undo refuses).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kwtree.engine.replay import RawOperation
from kwtree.engine.state import State
from kwtree.models import Link, Relation, entity_key

__all__ = ["REPAIR_KIND", "DanglingReference", "find_dangling", "reference_findings", "to_retire"]

#: The kind (and actor) of the operation repair writes to retire dangling references.
REPAIR_KIND = "repair"
#: (severity, code, file, line, message), as ``verify`` collects findings.
FindingTuple = tuple[str, str, str | None, int | None, str]


@dataclass(frozen=True, slots=True)
class DanglingReference:
    """A link or relation (its last version, live or not) and the end of it that no
    operation wrote, as ``"info <id>"`` or ``"keyword <id>"``."""

    entity: Link | Relation
    missing: str

    @property
    def key(self) -> str:
        """The entity's name in operations and ``history`` (``info_id/keyword_id`` ...)."""
        return entity_key(self.entity)

    @property
    def kind(self) -> str:
        return "link" if type(self.entity) is Link else "relation"


def find_dangling(state: State) -> list[DanglingReference]:
    """Every link and relation of ``state`` with an end that no operation wrote."""
    infos, keywords = state.infos, state.keywords
    found: list[DanglingReference] = []
    for link in state.links.values():
        if link.info_id not in infos:
            found.append(DanglingReference(link, f"info {link.info_id}"))
        elif link.keyword_id not in keywords:
            found.append(DanglingReference(link, f"keyword {link.keyword_id}"))
    for rel in state.relations.values():
        missing = next((end for end in (rel.from_id, rel.to_id) if end not in keywords), None)
        if missing is not None:
            found.append(DanglingReference(rel, f"keyword {missing}"))
    return found


def to_retire(state: State, operations: Sequence[RawOperation]) -> list[DanglingReference]:
    """The dangling references of ``state`` that no repair operation has retired yet."""
    return [ref for ref, raw in _last_rows(find_dangling(state), operations) if not _retired(ref, raw)]


def reference_findings(state: State, operations: Sequence[RawOperation]) -> Iterator[FindingTuple]:
    """Verify's findings about references: an error for each that names nothing (an info
    finding once repair retired it), a warning for each live one with a deleted end."""
    dangling = find_dangling(state)
    for ref, located in _last_rows(dangling, operations):
        raw, row = located if located is not None else (None, 0)
        path, line = (raw.path, raw.first_line + row) if raw is not None else (None, None)
        if raw is not None and _retired(ref, located):
            yield ("info", f"retired-{ref.kind}", path, line,
                   f"{ref.kind} {ref.key} names {ref.missing}, which the log never wrote; `kwtree repair` "
                   f"retired it (operation {raw.op_id})")
        else:
            yield ("error", f"dangling-{ref.kind}", path, line,
                   f"{ref.kind} {ref.key} names {ref.missing}, which the log never wrote (a damaged id or a lost "
                   "segment): reads skip it; `kwtree repair` retires it")
    named = {ref.key for ref in dangling}

    def deleted_end(kind: str, entity_id: str) -> str | None:
        table = state.infos if kind == "info" else state.keywords
        return f"{kind} {entity_id} is deleted" if table[entity_id].deleted else None

    for link in state.links.values():
        if not link.deleted and entity_key(link) not in named:
            why = deleted_end("info", link.info_id) or deleted_end("keyword", link.keyword_id)
            if why is not None:
                yield ("warning", "inert-link", None, None,
                       f"link {entity_key(link)} is live but {why}: it is inert (never returned)")
    for rel in state.relations.values():
        if not rel.deleted and entity_key(rel) not in named:
            why = deleted_end("keyword", rel.from_id) or deleted_end("keyword", rel.to_id)
            if why is not None:
                yield ("warning", "inert-relation", None, None,
                       f"relation {entity_key(rel)} is live but {why}: it is inert")


Located = tuple[RawOperation, int] | None  # the operation holding a row, and the row's index


def _row_key(row: dict[str, object]) -> tuple[object, ...]:
    if row["entity"] == "link":
        return ("link", row["info_id"], row["keyword_id"])
    return ("relation", row["from_id"], row["to_id"], row["type"])


def _entity_row_key(entity: Link | Relation) -> tuple[object, ...]:
    if type(entity) is Link:
        return ("link", entity.info_id, entity.keyword_id)
    return ("relation", entity.from_id, entity.to_id, entity.type)


def _last_rows(dangling: list[DanglingReference],
               operations: Sequence[RawOperation]) -> list[tuple[DanglingReference, Located]]:
    """Each reference with the last row (in op-id order) that wrote it. One pass over the
    rows, made only when there is something dangling."""
    if not dangling:
        return []
    wanted = {_entity_row_key(ref.entity): ref for ref in dangling}
    where: dict[tuple[object, ...], tuple[RawOperation, int]] = {}
    for raw in operations:
        for index, row in enumerate(raw.rows):
            if row.get("entity") in ("link", "relation"):
                key = _row_key(row)
                if key in wanted:
                    where[key] = (raw, index)
    return [(ref, where.get(key)) for key, ref in wanted.items()]


def _retired(ref: DanglingReference, located: Located) -> bool:
    """True if the reference's last version is a tombstone a repair operation wrote."""
    if not ref.entity.deleted or located is None:
        return False
    end = located[0].rows[-1].get("end")
    return type(end) is dict and end.get("kind") == REPAIR_KIND
