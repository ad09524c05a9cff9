"""Progress of long work, reported to a callback rather than printed.

A long call (indexing the full text of a bulk load, compaction, a forget's rewrite, export,
import, restore, migrate, upgrade, reindex, the embedding worker) tells the ``progress``
callback it was given how far it is: a :class:`Progress` per report, ``done`` out of
``total`` ``unit`` for one named ``task``. The library never prints; the ``kwtree`` command
turns the reports into bars on a terminal or plain lines in a pipe (``kwtree.cli.progress``).

Reports of one task come in order, ``done`` never decreases, the first has ``done == 0`` and
the last ``finished`` set with ``done == total``; between them at most one per :data:`REPORT_EVERY` seconds. A
callback must be quick and must not raise: one that raises is reported once as a warning and
not called again for that task, and the work goes on (a progress display never decides
whether data is written).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from kwtree.errors import InvalidInputError

__all__ = ["REPORT_EVERY", "Progress", "ProgressCallback", "Ticker", "check_progress", "counted"]

#: Seconds between two reports of one task (besides its first and last): often enough for a
#: bar to move smoothly, rarely enough that reporting costs nothing next to the work.
REPORT_EVERY = 0.1

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Progress:
    """One report: ``done`` of ``total`` (None: not known yet) ``unit`` of ``task``, e.g.
    ``Progress("indexing full text", 5000, 20200, "texts", False)``."""

    task: str
    done: int
    total: int | None
    unit: str
    finished: bool

    def __str__(self) -> str:
        of = "" if self.total is None else f"/{self.total:,}"
        share = f" ({100 * self.done // self.total}%)" if self.total else ""
        return f"{self.task}: {self.done:,}{of} {self.unit}{share}{', done' if self.finished else ''}"


ProgressCallback = Callable[[Progress], None]


def check_progress(progress: object, field: str = "progress") -> ProgressCallback | None:
    """``progress`` if it is None or callable; InvalidInputError naming ``field`` otherwise."""
    if progress is not None and not callable(progress):
        raise InvalidInputError(f"{field} must be a callable taking a kwtree.progress.Progress, or None, "
                                f"got {type(progress).__name__}")
    return progress


class Ticker:
    """Reports one task's progress to a callback (none: does nothing). Use as a context
    manager: entering reports ``done == 0``, leaving without an error reports it finished."""

    __slots__ = ("_callback", "_last", "_unfinished", "done", "task", "total", "unit")

    def __init__(self, callback: ProgressCallback | None, task: str, total: int | None, unit: str) -> None:
        self._callback = callback
        self.task, self.total, self.unit = task, total, unit
        self.done = 0
        self._last = 0.0
        self._unfinished = False

    def start(self) -> Ticker:
        """Report the task begun (``done == 0``); returns the ticker."""
        self._report(finished=False)
        return self

    def finish(self) -> None:
        """Report the task finished (unless ``leave_unfinished`` was called)."""
        if not self._unfinished:
            self._report(finished=True)

    def __enter__(self) -> Ticker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.finish()

    def add(self, count: int = 1) -> None:
        """Count ``count`` more units done (reported if the last report is old enough)."""
        self.done += count
        if self._callback is not None and time.monotonic() - self._last >= REPORT_EVERY:
            self._report(finished=False)

    def leave_unfinished(self) -> None:
        """The task stops short (a deadline passed): leaving reports nothing more."""
        self._unfinished = True

    def remaining(self, left: int) -> None:
        """``left`` units are still to do: the total grows to cover them (work added while the
        task runs), and what it covers beyond them counts as done."""
        self.total = max(self.total or 0, self.done + left)
        self.add(self.total - self.done - left)

    def _report(self, *, finished: bool) -> None:
        callback = self._callback
        if callback is None:
            return
        self._last = time.monotonic()
        if finished:
            self.total = self.done  # (a total estimated up front is corrected by the last report)
        total = self.total
        try:
            callback(Progress(self.task, self.done, total, self.unit, finished))
        except Exception as exc:  # noqa: BLE001 -- a display must never stop the work
            self._callback = None
            warnings.warn(f"the progress callback failed on {self.task!r} and is no longer called for it: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=3)


def counted(items: Iterable[T], ticker: Ticker) -> Iterator[T]:
    """``items``, counting each one handed out on ``ticker``."""
    for item in items:
        yield item
        ticker.add()
