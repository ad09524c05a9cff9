"""Who holds an outbox lease: worker ids that say where their worker runs, so that a lease
whose holder is gone can be taken over at once rather than when it ends (a minute).

An id is ``"<place>/<pid>-<thread>-<ns>"``: the place is the host name and the process-id
namespace, the pid is the worker's process. A holder is gone when it ran here (same place) and

- in this process, it is no longer registered: the tree (or ``kwtree worker``) that
  registered it was closed;
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

__all__ = ["holder_gone", "new_worker_id", "retire_worker"]

_LIVE: set[str] = set()  # the ids of this process's workers that are not retired
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


def holder_gone(worker: str) -> bool:
    """True when the worker ``worker`` is known to have stopped (see the module docstring)."""
    place, slash, rest = worker.rpartition("/")
    pid = rest.split("-", 1)[0]
    if not slash or not pid.isdigit() or len(pid) > 10 or place != _place():
        return False
    if int(pid) == os.getpid():
        with _LIVE_LOCK:
            return worker not in _LIVE
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # not ours to signal, or an impossible pid: it may be alive
        return False
    return False
