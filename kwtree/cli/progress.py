"""How the ``kwtree`` command shows the progress of long work (the library's reports,
``kwtree.progress``): bars drawn by rich when stderr is a terminal, plain lines when it is a
pipe or a log file, nothing with ``--quiet`` or ``--json``. Always on stderr, so stdout holds
only the command's result.

A task is shown once it has run for ``$KWTREE_PROGRESS_EVERY`` seconds (default 2; 0 shows
every task at once): quick commands stay as quiet as before. In a pipe a task then gets a line
at most every that many seconds, and a last line when it ends.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from kwtree.errors import InvalidInputError
from kwtree.progress import Progress

if TYPE_CHECKING:
    from rich.progress import Progress as Bars

__all__ = ["EVERY_ENV", "Display", "display"]

EVERY_ENV = "KWTREE_PROGRESS_EVERY"
#: Seconds a task runs before it is shown, and between two plain lines of it.
DEFAULT_EVERY = 2.0


def _every() -> float:
    text = os.environ.get(EVERY_ENV, "")
    if not text:
        return DEFAULT_EVERY
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise InvalidInputError(f"{EVERY_ENV} must be a number of seconds >= 0, got {text!r}")
    return seconds


class Display:
    """Shows the reports of one command's tasks on ``stream``; ``close`` ends the display."""

    def __init__(self, stream: IO[str], every: float, *, bars: bool) -> None:
        self._stream = stream
        self._every = every
        self._bars: Bars | None = None
        self._use_bars = bars
        self._tasks: dict[str, Any] = {}  # task -> the rich task id, once shown
        self._started: dict[str, float] = {}  # task -> when its first report came
        self._printed: dict[str, float] = {}  # task -> when its last line was printed

    def __call__(self, report: Progress) -> None:
        now = time.monotonic()
        if report.done == 0 and not report.finished:  # (a task may run again: each run is shown anew)
            self._started[report.task] = now
            self._printed.pop(report.task, None)
            self._tasks.pop(report.task, None)
        started = self._started.setdefault(report.task, now)
        shown = report.task in self._tasks or report.task in self._printed
        if not shown and now - started < self._every:
            return
        if self._use_bars:
            self._bar(report)
        elif report.finished or now - self._printed.get(report.task, -self._every) >= self._every:
            print(f"kwtree: {report}", file=self._stream, flush=True)
            self._printed[report.task] = now

    def _bar(self, report: Progress) -> None:
        if self._bars is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[unit]}"), TimeRemainingColumn(),
                                  console=Console(file=self._stream))
            self._bars.start()
        if report.task not in self._tasks:
            self._tasks[report.task] = self._bars.add_task(report.task, total=report.total, unit=report.unit)
        self._bars.update(self._tasks[report.task], completed=report.done, total=report.total)

    def close(self) -> None:
        """Leave the bars drawn as they ended (a no-op for plain lines)."""
        if self._bars is not None:
            self._bars.stop()
            self._bars = None


def display(args: argparse.Namespace) -> Display | None:
    """The display for a command run with ``args``: None under ``--quiet`` or ``--json``."""
    if getattr(args, "quiet", False) or getattr(args, "json", False):
        return None
    return Display(sys.stderr, _every(), bars=sys.stderr.isatty())
