"""Versioning a memory directory with git: ``setup`` makes the directory a good git citizen,
and the ``kwtree`` merge driver merges the log segments two branches appended to.

**setup(dir)** (``kwtree git init DIR``) works whether DIR is the root of a repository or a
subdirectory of a bigger one (the agent's project); a DIR inside no repository becomes one
(``git init``). It adds, inside DIR and without touching lines already there:

- ``.gitignore``: what is local or rebuilt — ``cache/``, the writer lock, the outbox and its
  lock, ``quarantine/``, the compaction work directories, snapshots, temporary files. The log
  and ``manifest.json`` are what git keeps;
- ``.gitattributes``: ``log/*.jsonl merge=kwtree -text`` (no end-of-line conversion either);

and sets ``merge.kwtree.driver`` in the repository's own config (``.git/config``), because git
never takes merge drivers from the files it tracks: every clone runs ``setup`` once.

**The merge** of one segment (``merge_segments`` on bytes, ``merge_files`` on the three files
git hands the driver) is the union of the whole operations of both sides, each operation once,
in op-id order (with a ``merge`` note where both sides wrote to a chained log, format 3, naming
the operation they forked after), then the seal lines either side has (format 2 and later);
replay then resolves concurrent edits deterministically (DESIGN §3). It refuses
(``MergeConflictError``, and git reports a conflict, keeping our side's file as it was) rather
than lose or invent data: when a side ends with an incomplete operation, when one op id holds
different rows on the two sides, when a side lacks an operation the common base has (its log
was rewritten, e.g. compacted), or when bytes follow a segment's zero padding. A row that is
not a log row raises ``CorruptLogError``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from kwtree.engine.events import CRC_KEY, NOTE_MERGE, PREV_KEY, encode_note, op_digest, with_checksum, with_prev
from kwtree.engine.replay import parse_operations
from kwtree.errors import (
    GitError,
    InvalidInputError,
    KwtreeError,
    MergeConflictError,
    NotFoundError,
)
from kwtree.stores.directory import CACHE_DIR, OUTBOX_NAME
from kwtree.stores.eventlog import LOG_DIR, QUARANTINE_DIR, seals_start
from kwtree.stores.files import write_atomically
from kwtree.stores.lock import LOCK_NAME
from kwtree.stores.manifest import MANIFEST_NAME

__all__ = [
    "ATTRIBUTE_LINES",
    "DRIVER_NAME",
    "IGNORE_LINES",
    "GitError",
    "GitSetup",
    "MergeConflictError",
    "MergeSummary",
    "driver_command",
    "merge_files",
    "merge_segments",
    "setup",
]

DRIVER_NAME = "kwtree"

#: The lines ``setup`` makes sure ``<dir>/.gitignore`` has (paths relative to the directory).
IGNORE_LINES: tuple[str, ...] = (
    "# kwtree: caches and per-machine state; the log and manifest.json are what git keeps",
    f"/{CACHE_DIR}/",
    f"/{LOCK_NAME}",
    f"/{OUTBOX_NAME}",
    f"/{Path(OUTBOX_NAME).with_suffix('.lock')}",
    f"/{QUARANTINE_DIR}/",
    f"/{LOG_DIR}.compacting/",
    f"/{LOG_DIR}.compacted/",
    f"/{LOG_DIR}.old/",
    "/snapshots/",
    "*.kwsnap",
    "/.*.tmp",
    f"/{LOG_DIR}/.*.tmp",
)

#: The lines ``setup`` makes sure ``<dir>/.gitattributes`` has.
ATTRIBUTE_LINES: tuple[str, ...] = (
    "# kwtree: log segments are merged by the kwtree merge driver (`kwtree git init` sets it up)",
    f"{LOG_DIR}/*.jsonl merge={DRIVER_NAME} -text",
)

_GIT_TIMEOUT = 120.0


@dataclasses.dataclass(frozen=True, slots=True)
class GitSetup:
    """What ``setup`` found and did. ``changed`` names what it wrote (``.gitignore``,
    ``.gitattributes``, ``merge.kwtree.name``, ``merge.kwtree.driver``); empty when the
    directory was already set up."""

    directory: Path
    repository: Path  # the top of the work tree the directory belongs to
    initialized: bool  # True when setup ran ``git init`` (DIR was in no repository)
    changed: tuple[str, ...]

    def __str__(self) -> str:
        where = "a new repository" if self.initialized else f"the repository {self.repository}"
        done = f"updated {', '.join(self.changed)}" if self.changed else "already set up, nothing changed"
        return f"{self.directory} in {where}: {done}"


@dataclasses.dataclass(frozen=True, slots=True)
class MergeSummary:
    """The outcome of merging one segment: ``operations`` in the result, how many of them only
    ours or only theirs had, and whether our file had to be rewritten."""

    path: str
    operations: int
    only_ours: int
    only_theirs: int
    written: bool

    def __str__(self) -> str:
        return (f"merged {self.path}: {self.operations} operation(s), {self.only_ours} only in ours, "
                f"{self.only_theirs} only in theirs")


# --- the merge ---------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Operation:
    rows: list[dict[str, Any]]
    text: bytes  # its lines as they were found, each ending in a newline


def _operations(data: bytes, label: str, *, allow_torn: bool) -> tuple[dict[str, _Operation], list[bytes]]:
    """The whole operations of one side by op id (copies of one operation kept once), and
    its seal lines (format 2)."""
    nul = data.find(b"\0")
    if nul >= 0:  # preallocated padding: the data ends at the first NUL (see stores/eventlog.py)
        if data[nul:].strip(b"\0"):
            raise MergeConflictError(
                f"{label} has data after its zero padding (byte {nul}); this is not a segment kwtree "
                f"wrote: check the file, then resolve by hand"
            )
        data = data[:nul]
    cut = seals_start(data)
    seals = [line + b"\n" for line in data[cut:].split(b"\n")[:-1]]  # (a partial seal line is left out)
    data = data[:cut]
    found, consumed, _ = parse_operations(data, label, 1)
    if consumed < len(data) and not allow_torn:
        raise MergeConflictError(
            f"{label} ends with an incomplete operation ({len(data) - consumed} bytes after byte {consumed}): "
            f"a writer died mid-write on that branch; there, open the tree for writing (or run `kwtree repair`) "
            f"to move it to quarantine/, commit, and merge again"
        )
    lines = data[:consumed].split(b"\n")
    operations: dict[str, _Operation] = {}
    start = 0
    for raw in found:
        end = start + len(raw.rows)
        operation = _Operation(raw.rows, b"\n".join(lines[start:end]) + b"\n")
        start = end
        seen = operations.setdefault(raw.op_id, operation)
        if seen is not operation:
            _check_same(raw.op_id, seen, operation, label, label)
    return operations, seals


def _check_same(op_id: str, first: _Operation, second: _Operation, where_first: str, where_second: str) -> None:
    if first.text != second.text and first.rows != second.rows:
        raise MergeConflictError(
            f"operation {op_id} has different rows in {where_first} and {where_second}: op ids are unique, so "
            f"one of the logs was edited; keep the right copy by hand"
        )


def _merge(base: bytes, ours: bytes, theirs: bytes, path: str) -> tuple[bytes, dict[str, int]]:
    for name, value in (("base", base), ("ours", ours), ("theirs", theirs)):
        if not isinstance(value, bytes):
            raise InvalidInputError(f"{name} must be the bytes of a log segment, got {type(value).__name__}")
    common = _operations(base, f"{path} (base)", allow_torn=True)[0]  # only its whole operations matter
    mine, our_seals = _operations(ours, f"{path} (ours)", allow_torn=False)
    other, their_seals = _operations(theirs, f"{path} (theirs)", allow_torn=False)
    for side, operations in (("ours", mine), ("theirs", other)):
        lost = [op_id for op_id in common if op_id not in operations]
        if lost:
            raise MergeConflictError(
                f"{path} ({side}) lacks {len(lost)} operation(s) of the common base, e.g. {lost[0]}: the log was "
                f"rewritten on that branch (compacted, repaired or restored); merge only histories that append, "
                f"e.g. compact after merging"
            )
    union = dict(mine)
    for op_id, operation in other.items():
        if op_id in union:
            _check_same(op_id, union[op_id], operation, f"{path} (ours)", f"{path} (theirs)")
        else:
            union[op_id] = operation
    note = _merge_note(common, mine, other, our_seals, their_seals)
    if note is not None:
        union[note[0]] = _Operation([], note[1])
    # The seal lines of both sides follow: a segment sealed on one branch stays sealed (verify
    # reports that it grew), and two branches that each started a segment after it both name theirs.
    seals = sorted(set(our_seals) | set(their_seals))
    merged = b"".join(union[op_id].text for op_id in sorted(union)) + b"".join(seals)
    counts = {
        "operations": len(union),
        "only_ours": sum(op_id not in other for op_id in mine),
        "only_theirs": sum(op_id not in mine for op_id in other),
    }
    return merged, counts


def _merge_note(common: dict[str, _Operation], mine: dict[str, _Operation], other: dict[str, _Operation],
                our_seals: list[bytes], their_seals: list[bytes]) -> tuple[str, bytes] | None:
    """The ``merge`` note (format 3: kwtree.models.Note) of a merge where both branches wrote
    after the base: it follows the base's newest operation, where the branches forked, so that
    verify tells this fork from an operation inserted beside the chain. (op id, rows), or None
    when the log is not chained or one side holds nothing the other lacks. It depends only on
    what the two sides hold, not on which is ours: its id follows the greatest op id of the
    union by an amount taken from its content, its time is the newest of their end markers'."""
    ours_own = any(op_id not in other for op_id in mine) or not set(our_seals) <= set(their_seals)
    theirs_own = any(op_id not in mine for op_id in other) or not set(their_seals) <= set(our_seals)
    if not (common and ours_own and theirs_own):
        return None
    base_last = common[max(common)]  # the newest operation both had: what each side's writer named next
    if PREV_KEY not in base_last.rows[-1]["end"]:
        return None  # a log without a chain (format 1 or 2)
    base = op_digest(base_last.text)
    heads = sorted(op_digest(side[max(op_id for op_id in side if op_id not in common)].text)
                   for side in (mine, other) if any(op_id not in common for op_id in side))
    audit = {"merge": {"base": base, "heads": heads}}
    union = {**mine, **other}
    salt = int.from_bytes(hashlib.sha256(orjson.dumps(audit)).digest()[:4], "big")
    op_id = f"{int(max(union), 16) + 1 + salt:032x}"
    timestamp = max(float(op.rows[-1]["end"]["ts"]) for op in union.values() if op.rows)
    encoded = with_prev(encode_note(op_id, timestamp, NOTE_MERGE, "git", audit), base)
    checksummed = CRC_KEY in base_last.rows[-1]["end"]
    return op_id, with_checksum(encoded) if checksummed else encoded


def merge_segments(base: bytes, ours: bytes, theirs: bytes, *, path: str = "segment") -> bytes:
    """Merge two versions of one log segment that grew from ``base``.

    Returns every whole operation of ``ours`` and ``theirs`` once, in op-id order, each with
    its rows as found (the copy in ``ours`` when both have it), and, in a chained log (format
    3) where both sides wrote, a ``merge`` note recording where they forked. The result does not depend
    on which side is ours, nor on the order of operations inside either side. ``path`` is
    used in messages. Raises MergeConflictError (see the module docstring for when),
    CorruptLogError for a line that is not a log row, InvalidInputError for non-bytes.
    """
    if not isinstance(path, str):
        raise InvalidInputError(f"path must be a string naming the segment, got {type(path).__name__}")
    return _merge(base, ours, theirs, path)[0]


def _read(path: Path, name: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"{name} file {path} does not exist; git passes three existing files (%O %A %B)") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{name} file {path} is a directory, not a log segment") from None


def merge_files(
    base: str | os.PathLike[str],
    ours: str | os.PathLike[str],
    theirs: str | os.PathLike[str],
    *,
    path: str | None = None,
) -> MergeSummary:
    """The merge driver: merge the segment files ``base`` (%O), ``ours`` (%A) and ``theirs``
    (%B) and leave the result in ``ours``, replaced atomically (a reader sees the old file or
    the new one), and only if it changes. ``path`` (%P) names the segment in messages.

    On any error ``ours`` is left as it was; raises what ``merge_segments`` raises,
    NotFoundError for a missing file, InvalidInputError when ``ours`` must be rewritten but is
    not a regular file.
    """
    files = []
    for name, value in (("base", base), ("ours", ours), ("theirs", theirs)):
        if not isinstance(value, (str, os.PathLike)):
            raise InvalidInputError(f"{name} must be a file path, got {type(value).__name__}")
        files.append(Path(value))
    if path is not None and not isinstance(path, str):
        raise InvalidInputError(f"path must be a string or None, got {type(path).__name__}")
    label = path if path else str(files[1])
    old = _read(files[1], "ours")
    merged, counts = _merge(_read(files[0], "base"), old, _read(files[2], "theirs"), label)
    written = merged != old
    if written:
        if not stat.S_ISREG(files[1].stat().st_mode):
            raise InvalidInputError(f"ours ({files[1]}) must be a regular file to receive the merge")
        write_atomically(files[1], merged)
    return MergeSummary(label, counts["operations"], counts["only_ours"], counts["only_theirs"], written)


# --- setup -------------------------------------------------------------------------------------


def driver_command(python: str | None = None) -> str:
    """The command git runs to merge a segment: this Python (absolute, so it works from any
    directory git runs it in) with ``-m kwtree merge-driver %O %A %B --path %P``."""
    return f"{shlex.quote(python or sys.executable)} -m kwtree merge-driver %O %A %B --path %P"


def _git(args: Sequence[str], cwd: Path, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LC_ALL": "C"}  # messages in English: setup reads one of them
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=_GIT_TIMEOUT)
    except FileNotFoundError:
        raise GitError("git is not installed (or not on PATH); install git and retry") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"`git {' '.join(args)}` in {cwd} did not finish within {_GIT_TIMEOUT:g} s") from None
    if check and done.returncode != 0:
        raise GitError(f"`git {' '.join(args)}` in {cwd} failed: {done.stderr.strip() or done.returncode}")
    return done


def _repository(directory: Path) -> tuple[Path, bool]:
    """The top of the work tree holding ``directory``; ``git init`` it when there is none."""
    found = _git(["rev-parse", "--show-toplevel"], directory, check=False)
    if found.returncode == 0:
        return Path(found.stdout.strip()), False
    if "not a git repository" not in found.stderr:
        raise GitError(f"git cannot use the repository around {directory}: {found.stderr.strip()}")
    _git(["init", "--quiet"], directory)
    return directory, True


def _check_not_ignored(directory: Path, repository: Path) -> None:
    """The log and manifest must be versionable: refuse when the repository ignores them."""
    probe = [MANIFEST_NAME, f"{LOG_DIR}/0.jsonl", ".gitignore", ".gitattributes"]
    found = _git(["check-ignore", "--verbose", "--", *probe], directory, check=False)
    if found.returncode == 0:
        rule = found.stdout.strip().splitlines()[0]
        raise InvalidInputError(
            f"the repository {repository} ignores files of {directory} (rule {rule.split(chr(9))[0]!r}); "
            f"remove or negate that rule, or keep the memory in its own repository"
        )
    if found.returncode != 1:
        raise GitError(f"`git check-ignore` in {directory} failed: {found.stderr.strip()}")


def _missing_lines(path: Path, wanted: Sequence[str]) -> tuple[bytes, list[str]]:
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = b""
    have = {line.strip() for line in old.decode("utf-8", "replace").splitlines()}
    return old, [line for line in wanted if line not in have]


def _add_lines(path: Path, old: bytes, missing: list[str]) -> None:
    """Append ``missing`` to the file, keeping every byte that was there."""
    prefix = old if not old or old.endswith(b"\n") else old + b"\n"
    write_atomically(path, prefix + "".join(f"{line}\n" for line in missing).encode())


def setup(directory: str | os.PathLike[str]) -> GitSetup:
    """Make the kwtree directory ``directory`` ready for git (see the module docstring).

    Idempotent: lines already in ``.gitignore`` / ``.gitattributes`` are kept and not repeated,
    and a config value already right is not rewritten (a changed Python path is). It commits
    nothing. Raises NotFoundError if ``directory`` is not a kwtree directory, InvalidInputError
    if the repository ignores its log or manifest (nothing is changed; a repository setup
    created is removed again), GitError if git is missing or fails.
    """
    if not isinstance(directory, (str, os.PathLike)):
        raise InvalidInputError(f"directory must be a path, got {type(directory).__name__}")
    folder = Path(directory)
    if not (folder / MANIFEST_NAME).is_file():
        raise NotFoundError(
            f"{folder} is not a kwtree directory (no {MANIFEST_NAME}); create it with `kwtree init {folder}`"
        )
    folder = folder.resolve()
    repository, initialized = _repository(folder)
    try:
        _check_not_ignored(folder, repository)
    except KwtreeError:
        if initialized:
            shutil.rmtree(folder / ".git", ignore_errors=True)
        raise
    changed = []
    for name, wanted in ((".gitignore", IGNORE_LINES), (".gitattributes", ATTRIBUTE_LINES)):
        old, missing = _missing_lines(folder / name, wanted)
        if missing:
            _add_lines(folder / name, old, missing)
            changed.append(name)
    settings = (("name", "kwtree event log: union of whole operations in op-id order"), ("driver", driver_command()))
    for key, value in settings:
        name = f"merge.{DRIVER_NAME}.{key}"
        current = _git(["config", "--local", "--get", name], folder, check=False)
        if current.returncode != 0 or current.stdout.rstrip("\n") != value:
            _git(["config", "--local", name, value], folder)
            changed.append(name)
    return GitSetup(folder, repository, initialized, tuple(changed))
