"""Giving the C heap's free pages back to the system after work that freed much of what it made."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

__all__ = ["release_freed"]


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
