"""Who holds an outbox lease: worker ids that say where their worker runs, so that a lease
whose holder is gone can be taken over at once rather than when it ends (a minute).

An id is ``"<place>/<pid>-<thread>-<ns>"``: the place is the host name and the process-id
namespace, the pid is the worker's process. A holder is gone when it ran here (same place) and

- in this process, it is no longer registered (the tree, or ``kwtree worker``, that registered
  it was closed), or it holds no claim it has not recorded yet (``claiming``): a lease it still
  holds then is one whose done row was lost (a damaged or copied outbox), and nobody works on
  it;
- in another process, no process has its pid any more (it exited or was killed).

Anything else (another machine or container, an id without a place, a pid that another
process reuses now, a process that may not be signalled) counts as alive: its lease is
waited out, which costs time, never work done twice.
"""

from __future__ import annotations

import os
import socket
import threading
import time

__all__ = ["claiming", "holder_gone", "new_worker_id", "retire_worker"]

_LIVE: set[str] = set()  # the ids of this process's workers that are not retired
_CLAIMING: set[str] = set()  # ...that hold claimed items they have not recorded yet
_LIVE_LOCK = threading.Lock()


def _place() -> str:
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux: one pid space per host
        namespace = ""
    return f"{socket.gethostname()}:{namespace}"


def new_worker_id() -> str:
    """A fresh worker id for this process, registered as alive until ``retire_worker``."""
    worker = f"{_place()}/{os.getpid()}-{threading.get_ident()}-{time.time_ns()}"
    with _LIVE_LOCK:
        _LIVE.add(worker)
    return worker


def retire_worker(worker: str) -> None:
    """``worker`` (of this process) holds nothing from now on: its leases may be taken over."""
    with _LIVE_LOCK:
        _LIVE.discard(worker)
        _CLAIMING.discard(worker)


def claiming(worker: str, holds: bool) -> None:
    """Note whether ``worker`` (of this process) holds claimed items it has not recorded done
    or failed yet (``Outbox.claim`` says it does, ``record_results`` that it no longer does)."""
    with _LIVE_LOCK:
        if not holds:
            _CLAIMING.discard(worker)
        elif worker in _LIVE:
            _CLAIMING.add(worker)


def holder_gone(worker: str) -> bool:
    """True when the worker ``worker`` is known to have stopped (see the module docstring)."""
    place, slash, rest = worker.rpartition("/")
    pid = rest.split("-", 1)[0]
    if not slash or not pid.isdigit() or len(pid) > 10 or place != _place():
        return False
    if int(pid) == os.getpid():
        with _LIVE_LOCK:
            return worker not in _LIVE or worker not in _CLAIMING
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # not ours to signal, or an impossible pid: it may be alive
        return False
    return False
