"""Forget, on disk: every row of the erased entities rewritten to its tombstone, as a new
generation of the log swapped in the way compaction swaps one; the quarantine purged; and
what kwtree cannot reach (older snapshots, git history, exports, copies) found and named.

The erased entities are those the log's ``forget`` operations wrote (``kwtree.writes.forget``
decides them): every row of each of them, in every operation — every version, every
before-image — becomes its tombstone; a relation touching an erased keyword loses its
reason in every row. Ids, versions, op ids, kinds and the order of operations stay, so
``history()`` lists the same operations without the text. Audits are scrubbed too: the
agent's record of an operation that wrote an erased entity (its query, its candidates, the
LLM's answers) is replaced by ``{"forgotten_by": <op id>}``, and any other audit string
holding an erased text is emptied. The rewrite is idempotent (an erased row is already its
tombstone), so running it again after a crash finishes the job, and a log that holds no
text to erase is left as it is.

An erasure the rewrite did not finish (a full disk, a crash: the forget operation is
committed, the rows still hold the text) is found from the log itself: ``find_unfinished``
reads every row (``verify`` reports each such forget operation), ``unfinished_forget`` only
the last forget operation (cheap enough for every writable open, which finishes it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kwtree.engine.engine import Engine
from kwtree.engine.events import ENTITY_DECODERS, NOTE_ENTITY, encode_row
from kwtree.engine.replay import RawOperation
from kwtree.engine.state import State
from kwtree.errors import DiskFullError, LockTimeoutError, StorageError
from kwtree.models import Info, Keyword
from kwtree.normalize import normalize_name
from kwtree.ops import compaction
from kwtree.progress import ProgressCallback, Ticker, counted
from kwtree.stores.eventlog import QUARANTINE_DIR
from kwtree.stores.snapshot import SNAPSHOT_SUFFIX
from kwtree.writes.abstracts import ABSTRACT_KEY, quotes
from kwtree.writes.forget import FORGET_KIND, FORGOTTEN_BY, is_forgotten, last_forget, tombstone

__all__ = ["ForgetReport", "KeptInfo", "LogErasure", "UnreachableCopy", "erase_log", "find_unfinished",
           "purge_quarantine", "scope_digest", "unfinished_error", "unfinished_forget", "unreachable"]

#: Audit strings are emptied when they hold an erased text at least this long (or equal one):
#: shorter texts ("tea", "ok") occur inside unrelated words.
_MIN_NEEDLE = 4
#: Metadata strings at least this long count as an erased text (for audits and quarantine).
_MIN_METADATA_NEEDLE = 16
_TEXT_FIELDS = ("content", "source", "name", "description", "reason")


@dataclass(frozen=True, slots=True)
class KeptInfo:
    """An info that was linked inside the forgotten subtree and is kept: live keywords
    outside it (``keyword_ids``) still hold it; it lost only its links inside."""

    info_id: str
    keyword_ids: tuple[str, ...]
    why: str = "also linked outside the forgotten subtree: kept, without its links inside it"


@dataclass(frozen=True, slots=True)
class UnreachableCopy:
    """A copy of the forgotten content that kwtree cannot erase: ``what`` it is, the
    ``paths`` kwtree knows of (maybe none), and ``how`` to purge it."""

    what: str
    paths: tuple[str, ...]
    how: str


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """What ``KeywordTree.forget`` did (docs/agent-memory.md, "Forget").

    ``op_id`` is the ``forget`` operation this call committed (None when the target had been
    forgotten already, by ``already_forgotten_by``: the call then only finished the erasure).
    ``infos`` and ``keywords`` are the ids it erased, ``links`` and ``relations`` how many
    links and relations it deleted with them; ``kept`` the infos it kept and why. The log:
    ``rows_rewritten`` rows (and ``audits_scrubbed`` audits) of ``operations`` operations
    now hold tombstones instead of text, or lost a keyword abstract quoting it
    (``log_rewritten`` False when nothing was left to rewrite), ``bytes_before`` and
    ``bytes_after`` its size; ``abstracts_dropped`` are the live keywords whose abstract
    summarised what was erased (``abstracts()`` rebuilds them), ``aliases_dropped`` those that
    lost an alias naming an erased keyword (a merge gave it to them). The caches: the full-text
    index was removed (the next search rebuilds it), ``vectors_blanked`` vector rows zeroed,
    ``outbox_items_dropped`` queued or dead embedding items dropped, ``quarantine_removed``
    files of ``quarantine/`` holding the text deleted. ``unreachable`` lists the copies
    kwtree cannot erase, with how to purge each.
    """

    target: str
    op_id: str | None
    already_forgotten_by: str | None
    infos: tuple[str, ...]
    keywords: tuple[str, ...]
    links: int
    relations: int
    kept: tuple[KeptInfo, ...]
    log_rewritten: bool
    rows_rewritten: int
    audits_scrubbed: int
    abstracts_dropped: tuple[str, ...]
    aliases_dropped: tuple[str, ...]
    operations: int
    bytes_before: int
    bytes_after: int
    fulltext_removed: bool
    vectors_blanked: int
    outbox_items_dropped: int
    quarantine_removed: tuple[str, ...]
    unreachable: tuple[UnreachableCopy, ...]
    seconds: float


@dataclass(slots=True)
class LogErasure:
    """What ``erase_log`` found and did: every erased entity id (from all forget
    operations), the texts they held (to find copies elsewhere), and the rewrite's counts."""

    entity_ids: set[str] = field(default_factory=set)
    needles: set[str] = field(default_factory=set)
    rows: int = 0
    pending: dict[str, int] = field(default_factory=dict)  # forget op id -> its entities' rows that held text
    revised: int = 0  # kept keywords' rows that lost an abstract or alias holding an erased text
    quoting: set[str] = field(default_factory=set)  # live keywords whose abstract or alias holds one
    carriers: set[str] = field(default_factory=set)  # keywords a merge gave an erased keyword's name
    audits: int = 0
    operations: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rewritten: bool = False


def scope_digest(scope: str) -> str:
    """What a forget operation's audit keeps of the scope it forgot: a SHA-256, so the log
    does not name it, while forgetting the same scope again still finds that operation."""
    return hashlib.sha256(scope.encode()).hexdigest()


def _erased(raws: list[RawOperation]) -> dict[str, str]:
    """Erased entity id -> the forget operation that erased it (the first, if several)."""
    erased: dict[str, str] = {}
    for raw in sorted(raws, key=lambda raw: raw.op_id):
        if raw.rows[-1]["end"].get("kind") == FORGET_KIND:
            for row in raw.rows:  # its tombstones (it also drops abstracts from live keywords)
                metadata = row.get("metadata")
                if (row["entity"] in ("info", "keyword") and row.get("deleted") and type(metadata) is dict
                        and FORGOTTEN_BY in metadata):
                    erased.setdefault(row["id"], raw.op_id)
    return erased


def _forgetter(row: dict[str, Any], erased: dict[str, str]) -> str | None:
    """The forget operation that erases this row's content, None when it keeps it."""
    entity_id = row.get("id")  # (once per row of the log: one lookup for infos and keywords)
    if entity_id is not None:
        return erased.get(entity_id)
    if row["entity"] == "relation":
        return erased.get(row["from_id"]) or erased.get(row["to_id"])
    return None


def _texts(fields: dict[str, Any]) -> Iterator[str]:
    """The texts of one row: its text fields, aliases, and the long strings of its metadata
    (an abstract, a quote; short ones such as a role or a category are labels, which would
    empty every audit string that contains them)."""
    for name in _TEXT_FIELDS:
        value = fields.get(name)
        if type(value) is str and value:
            yield value
    aliases = fields.get("aliases")
    if type(aliases) is list:
        yield from (alias for alias in aliases if type(alias) is str and alias)
    yield from _long_strings(fields.get("metadata"))


def _long_strings(value: Any) -> Iterator[str]:
    if type(value) is str and len(value) >= _MIN_METADATA_NEEDLE:
        yield value
    elif type(value) is dict:
        for item in value.values():
            yield from _long_strings(item)
    elif type(value) is list:
        for item in value:
            yield from _long_strings(item)


def _tombstoned(fields: dict[str, Any], kind: str, op_id: str, forgetter: str, *, row: bool) -> dict[str, Any]:
    """A row's (or, without ``row``, a before-image's) fields, with its entity's text replaced
    by the tombstone, in the codec's field order."""
    entity = tombstone(ENTITY_DECODERS[kind](fields, op_id), forgetter)
    return encode_row(entity, op_id, kind=row)


def _scrub_row(row: dict[str, Any], forgetter: str) -> dict[str, Any]:
    kind = row["entity"]
    new = _tombstoned(row, kind, row["op"], forgetter, row=True)
    if "wrote" in row:
        new["wrote"] = row["wrote"]
    before = row.get("before")
    if before is not None:
        new["before"] = _tombstoned(before, kind, before["op"], forgetter, row=False)
    if "end" in row:
        new["end"] = row["end"]
    return new


def _scrub_value(value: Any, needles: list[str]) -> Any:
    """``value`` (an audit, or part of one) with every string holding an erased text emptied."""
    if type(value) is str:
        return "" if value and any(n in value if len(n) >= _MIN_NEEDLE else n == value for n in needles) else value
    if type(value) is list:
        return [_scrub_value(item, needles) for item in value]
    if type(value) is dict:
        return {key: _scrub_value(item, needles) for key, item in value.items()}
    return value


def _scrub_audit(audit: dict[str, Any], forgetter: str | None, needles: list[str]) -> dict[str, Any]:
    if forgetter is not None and "agent" in audit:
        audit = {**audit, "agent": {FORGOTTEN_BY: forgetter}}
    return _scrub_value(audit, needles) if needles else audit


def _unquoted(fields: dict[str, Any], needles: list[str], names: set[str]) -> dict[str, Any] | None:
    """A keyword row's (or before-image's) fields without what still holds an erased text:
    its stored abstract when that quotes one of ``needles`` (``kwtree.writes.abstracts.quotes``)
    and its aliases that are one of ``names`` (an erased keyword's name, given by a merge);
    None when it holds none."""
    metadata = fields.get("metadata")
    metadata = metadata if type(metadata) is dict else {}
    stored = metadata.get(ABSTRACT_KEY)
    drop = type(stored) is dict and quotes(stored, needles)
    aliases = fields.get("aliases")
    aliases = aliases if type(aliases) is list else []
    kept = [alias for alias in aliases if not (type(alias) is str and normalize_name(alias) in names)]
    if not drop and len(kept) == len(aliases):
        return None
    new = dict(fields)
    if drop:
        rest = {key: value for key, value in metadata.items() if key != ABSTRACT_KEY}
        if rest:
            new["metadata"] = rest
        else:
            new.pop("metadata", None)  # the codec writes no empty metadata
    if len(kept) != len(aliases):
        if kept:
            new["aliases"] = kept
        else:
            new.pop("aliases", None)  # nor empty aliases
    return new


def _revise_survivor(row: dict[str, Any], needles: list[str], names: set[str],
                     live: Callable[[dict[str, Any]], bool], erasure: LogErasure) -> dict[str, Any]:
    """``row`` (a keyword row no forget erased) without the abstracts and aliases, in it or
    its before-image, that still hold an erased text. The row that is a live keyword's
    current version is left as it is (the new log must replay to the same live state) and its
    id goes to ``erasure.quoting``, for a forget operation to drop them first."""
    new = row
    if live(row):
        if _unquoted(row, needles, names) is not None:
            erasure.quoting.add(row["id"])
    else:
        new = _unquoted(row, needles, names) or row
    before = row.get("before")
    clean = _unquoted(before, needles, names) if type(before) is dict else None
    if clean is not None:
        new = {**new, "before": clean}
    if new is not row:
        erasure.revised += 1
    return new


def _carriers(raws: list[RawOperation], erased: set[str], names: set[str]) -> set[str]:
    """The keywords kept that took an erased keyword's name or alias as an alias: in an
    operation that deleted an erased keyword (or a keyword that had taken one: merges chain),
    another keyword row holding one of ``names`` among its aliases (what a merge writes)."""
    carriers: set[str] = set()
    for raw in raws:
        if raw.rows[-1]["end"].get("kind") == FORGET_KIND:
            continue
        keywords = [row for row in raw.rows if row["entity"] == "keyword"]
        if not any(row.get("deleted") and (row["id"] in erased or row["id"] in carriers) for row in keywords):
            continue
        for row in keywords:
            aliases = row.get("aliases")
            if (not row.get("deleted") and row["id"] not in erased and type(aliases) is list
                    and any(type(alias) is str and normalize_name(alias) in names for alias in aliases)):
                carriers.add(row["id"])
    return carriers


def scrub(raws: list[RawOperation], erased: dict[str, str], erasure: LogErasure,
          live: Callable[[dict[str, Any]], bool]) -> list[RawOperation]:
    """The operations with every row of an erased entity (and every audit, and every older
    keyword abstract quoting an erased text) scrubbed; counts what changed in ``erasure`` and
    collects the erased texts into ``erasure.needles``. ``live`` tells the rows that are a
    live keyword's current version."""
    found: dict[int, dict[int, str]] = {}  # operation index -> {row index: its forgetter}
    for at, raw in enumerate(raws):
        for index, row in enumerate(raw.rows):
            forgetter = _forgetter(row, erased)
            if forgetter is not None:
                found.setdefault(at, {})[index] = forgetter
                erasure.needles.update(_texts(row))
                if "before" in row:
                    erasure.needles.update(_texts(row["before"]))
    needles = sorted(erasure.needles)
    names = {normalize_name(text) for text in needles}
    erasure.carriers = _carriers(raws, set(erased), names)
    scrubbed = []
    for at, raw in enumerate(raws):
        rows, forgetters = raw.rows, found.get(at) or {}
        for index, row in enumerate(raw.rows):
            if index in forgetters:
                new = _scrub_row(row, forgetters[index])
                if new != row:
                    erasure.rows += 1
                    erasure.pending[forgetters[index]] = erasure.pending.get(forgetters[index], 0) + 1
            elif row["entity"] == "keyword" and needles:
                new = _revise_survivor(row, needles, names if row["id"] in erasure.carriers else set(), live, erasure)
            else:
                continue
            if new is not row:
                rows = list(rows) if rows is raw.rows else rows
                rows[index] = new
        end = rows[-1]["end"]
        audit = end.get("audit")
        if type(audit) is dict and rows[-1]["entity"] != NOTE_ENTITY:  # (a note holds digests and op ids, no text)
            clean = _scrub_audit(audit, next(iter(forgetters.values()), None), needles)
            if clean != audit:
                erasure.audits += 1
                rows = [*rows[:-1], {**rows[-1], "end": {**end, "audit": clean}}]
        scrubbed.append(raw if rows is raw.rows else RawOperation(raw.op_id, rows, raw.path, raw.first_line))
    return scrubbed


def erase_log(engine: Engine, state: State, progress: ProgressCallback | None = None) -> LogErasure:
    """Inside ``engine.writing()`` (``state`` is what it yielded): rewrite the log so that no
    row holds the text of an entity a ``forget`` operation erased, as a new generation that
    ``Engine.replace_log`` checks (it must replay to the same live state) and swaps in
    atomically, as compaction does: a crash leaves the old log or the new one. Nothing is
    written when no row or audit needs it, nor when a live keyword's current abstract quotes an
    erased text (``erasure.quoting``: the caller drops those abstracts in an operation, then
    calls again). Returns what it found and did; ``progress`` is told how the rewrite goes."""
    raws, size, _ = compaction.read_log(engine.read_segments(), parse=True)
    erasure, scrubbed = _scrubbed(raws, state)
    erasure.bytes_before = erasure.bytes_after = size
    if erasure.quoting:  # the caller drops those live abstracts first, then calls again
        return erasure
    if erasure.rows or erasure.audits or erasure.revised:
        # The log is chained anew from the first row it erased: a note says so, and names no digest of
        # what it erased (a digest of the old bytes would let a guess of the erased text be checked).
        note = {"reason": "forget", "by": last_forget(state)}
        with Ticker(progress, "rewriting the log", len(scrubbed), "operations") as tick:
            operations = counted(compaction.history_operations(_without_old_heads(scrubbed)), tick)
            after = engine.replace_log(operations, compaction.same_state(state, f"forget in {engine.directory}"),
                                       note)
        erasure.bytes_after, erasure.operations, erasure.rewritten = after.size, after.operations, True
    return erasure


def _without_old_heads(raws: list[RawOperation]) -> list[RawOperation]:
    """``raws`` with the ``replaced_head`` of every earlier ``rechain`` note dropped: a digest
    of a log that held what is now erased (kwtree.engine.events, "the hash chain")."""
    kept = []
    for raw in raws:
        end = raw.rows[-1]["end"]
        audit = end.get("audit") if raw.rows[-1].get("entity") == NOTE_ENTITY else None
        said = audit.get("rechain") if type(audit) is dict else None
        if type(audit) is dict and type(said) is dict and "replaced_head" in said:
            said = {key: value for key, value in said.items() if key != "replaced_head"}
            row = {**raw.rows[-1], "end": {**end, "audit": {**audit, "rechain": said}}}
            raw = RawOperation(raw.op_id, [*raw.rows[:-1], row], raw.path, raw.first_line)
        kept.append(raw)
    return kept


def _scrubbed(raws: list[RawOperation], state: State) -> tuple[LogErasure, list[RawOperation]]:
    """What ``erase_log`` would write: the counts, and the operations scrubbed (``raws`` as
    they are when no forget operation erased anything); ``state`` is what ``raws`` replay to."""
    erasure = LogErasure(operations=len(raws))
    erased = _erased(raws)
    erasure.entity_ids = set(erased)
    if not erased:
        return erasure, raws
    current = state.keywords

    def live(row: dict[str, Any]) -> bool:
        keyword = current.get(row["id"])
        return keyword is not None and not keyword.deleted and keyword.op_id == row["op"]

    return erasure, scrub(raws, erased, erasure, live)


def find_unfinished(raws: list[RawOperation], state: State) -> LogErasure:
    """What a rewrite of the log (``erase_log``) would still erase, without writing: every
    row is read. ``pending`` names each forget operation whose erasure did not finish, with
    how many rows of its entities still hold their text (empty when every erasure finished);
    ``audits``, ``revised`` and ``quoting`` count what else would be scrubbed (an audit of a
    later operation may quote an erased text by chance, so only ``pending`` tells that an
    erasure did not finish). ``state`` is what ``raws`` (whole operations, e.g. verify's)
    replay to."""
    return _scrubbed(raws, state)[0]


def unfinished_forget(engine: Engine, last: str) -> bool:
    """Whether the erasure of the log by ``last``, the last forget operation that erased
    something (``kwtree.writes.forget.last_forget`` of the engine's state), did not finish (a
    full disk or a crash stopped the rewrite after the operation was committed). Inside
    ``engine.exclusive()``.

    Cheap enough for every writable open: only that operation is read (one segment, found
    by its id). A rewrite erases the rows of every forget operation at once, so the last one
    tells for all: it is unfinished while one of its own rows keeps, as its before-image, the
    text it erased (the rewrite makes that before-image a tombstone too). What only a merge
    of logs could bring back, an older row of an erased entity written by a writer that
    never saw the forget, is found by ``find_unfinished`` (verify), not here."""
    op = engine.find_operation(last)
    return op is not None and any(
        isinstance(change.after, (Info, Keyword)) and is_forgotten(change.after)
        and isinstance(change.before, (Info, Keyword)) and FORGOTTEN_BY not in change.before.metadata
        for change in op.changes)


def unfinished_error(op_id: str, exc: StorageError | LockTimeoutError, *,
                     log_erased: bool) -> StorageError | LockTimeoutError:
    """The error to raise (``from exc``) when finishing the erasure of forget operation
    ``op_id`` failed with ``exc``: of ``exc``'s class (a DiskFullError keeps its path), saying
    what is left — the text in the log, or (``log_erased``) in the caches — and how to finish."""
    if log_erased:
        left = ("its text is erased from the log, but the caches (full-text index, vectors, outbox) may still hold "
                "some of it")
        later = "the next forget of any target or repair() finishes it too"
    else:
        left = "the entities are gone from the tree, but their text is still in the log until the erasure finishes"
        later = ("the next forget of any target, repair() or writable open of the tree finishes it too, and "
                 "`kwtree verify` reports it meanwhile")
    message = (f"forget operation {op_id} is committed: {left}. Finishing the erasure failed: {exc}. Call forget "
               f"again once that is mended (free space on a full disk); {later}")
    if isinstance(exc, DiskFullError):
        return DiskFullError(message, exc.path)
    return type(exc)(message)


def _encodings(needles: Iterable[str]) -> list[bytes]:
    """Each text as its UTF-8 bytes and as it reads inside a JSON string (orjson's escapes)."""
    found: set[bytes] = set()
    for needle in needles:
        if len(needle) >= _MIN_NEEDLE:
            found.add(needle.encode())
            found.add(orjson.dumps(needle)[1:-1])
    return sorted(found)


def purge_quarantine(directory: Path, erasure: LogErasure) -> list[str]:
    """Delete the files of ``quarantine/`` (torn tails and damaged operations a writer or
    ``repair`` set aside) that name an erased entity or hold one of its texts; returns their
    paths. Under the writer lock."""
    folder = directory / QUARANTINE_DIR
    patterns = [*_encodings(erasure.needles), *(entity_id.encode() for entity_id in sorted(erasure.entity_ids))]
    removed: list[str] = []
    if not patterns or not folder.is_dir():
        return removed
    for path in sorted(folder.iterdir()):
        if path.is_file() and any(pattern in path.read_bytes() for pattern in patterns):
            path.unlink()
            removed.append(str(path))
    return removed


def _git_history(directory: Path) -> UnreachableCopy | None:
    """The git repository holding the directory, when its log was ever committed there."""
    git = shutil.which("git")
    if git is None:
        return None
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}

    def run(*args: str) -> str:
        try:
            done = subprocess.run([git, *args], cwd=directory, capture_output=True, text=True, timeout=30, env=env,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    top = run("rev-parse", "--show-toplevel")
    if not top:
        return None
    commits = run("log", "--all", "--format=%H", "-1", "--", "log", "manifest.json")
    where = os.path.relpath(directory.resolve(), Path(top).resolve())
    if not commits:
        how = (f"{directory} is in the git repository {top}, but its log was never committed: nothing to purge "
               f"there; commit the log only after forgetting")
    else:
        how = (f"commits of {top} hold the old log segments ({where}/log/*.jsonl): commit the rewritten log, then "
               f"rewrite the history, e.g. `git filter-repo --path-glob '{where}/log/*.jsonl' --invert-paths` "
               f"followed by a new commit of the log (or `git filter-repo --replace-text` with the forgotten texts); "
               f"then expire the reflog, `git gc --prune=now`, and force-push to every remote and re-clone elsewhere")
    return UnreachableCopy("git history", (top,) if commits else (), how)


def unreachable(directory: Path) -> tuple[UnreachableCopy, ...]:
    """The copies kwtree cannot erase: snapshots written beside the directory under their
    default name, the git history holding it, exports, copies elsewhere, and the memory of
    processes that have the tree open."""
    home = directory.resolve()
    snapshots = tuple(str(path) for path in sorted(home.parent.glob(f"{home.name}-*{SNAPSHOT_SUFFIX}")))
    found = [
        UnreachableCopy(
            "snapshots", snapshots,
            "snapshots taken before the forget still hold the text: delete them (kwtree knows only those written "
            "beside the directory under their default name; look for other .kwsnap files you wrote elsewhere), "
            "or restore each, forget again and snapshot anew"),
        UnreachableCopy(
            "exports", (),
            "JSON and Markdown exports written before hold the text (kwtree keeps no list of them): delete them, "
            "or export again"),
        UnreachableCopy(
            "copies", (),
            "backups, clones and copies of the directory on other machines: run the same forget there, or replace "
            "them with a copy of this directory"),
        UnreachableCopy(
            "open trees", (),
            "other processes that have this tree open hold the text in memory until they catch up with the log "
            "(refresh(), or their next write, replays the rewritten log), a read-only tree's private full-text index "
            "until its next search after that, and an as_of view until it is closed; none of them keeps it on disk"),
    ]
    git = _git_history(directory)
    if git is not None:
        found.insert(1, git)
    return tuple(found)
