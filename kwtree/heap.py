"""The process heap around work that makes or frees millions of objects: the cyclic garbage
collector paused while it runs, and the C heap's free pages given back to the system after."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
from collections.abc import Callable, Iterator

__all__ = ["collector_paused", "release_freed"]


_pause_lock = threading.Lock()
_pauses = 0  # blocks of this process inside collector_paused, in any thread
_collecting = False  # whether the collector was on when the first of them began


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector paused (as it was after the last of the
    process's paused blocks ends, whichever thread runs them): for work that makes many
    objects among which there are no cycles (a replay, a checkpoint's load, an index of every
    keyword), where each collection the allocations would trigger walks every object the
    process holds for nothing (measured: half of the agent's first index of 50,000 keywords)."""
    global _pauses, _collecting
    with _pause_lock:
        if _pauses == 0:
            _collecting = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _collecting:
                gc.enable()


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None


_MALLOC_TRIM = _malloc_trim()


def release_freed() -> None:
    """Give the C heap's free pages back to the system. An open's replay frees what it used on
    the way (each dict it grows leaves its outgrown tables behind, between the ones that stay),
    and so does a vector store's load (the key lines as read); glibc keeps such free pages in
    the middle of its heap resident: measured at 50,000 infos, about 310 bytes per info, a
    quarter of the open tree's memory (docs/scaling.md). The call takes about 1 ms there; it
    changes nothing but the process's resident size."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
