"""``kwtree serve DIR``: one long-lived process per directory that holds the tree open and
answers the reading commands of ``kwtree`` (``kwtree.cli.entry``) and Claude Code's reading
hooks, so each of them costs a round trip instead of an import and a replay.

The server never writes the log (its tree's embedding worker fills the vector store with what
commands wrote and left in the outbox: ``kwtree.cli.main``'s ``_serve`` opens it). Before each
answer it reads what other processes appended (``refresh()``), so an answer is what a command
opening the tree at that moment would print.
It serves one request at a time (requests are milliseconds; others wait their turn) and stops:
after ``idle`` seconds without a request, on ``kwtree serve DIR --stop``, on SIGTERM or SIGINT,
or when the directory is no longer the tree it opened (removed, or its manifest replaced by a
restore or an embedder switch). Anything it cannot answer as the command would (an error of its
own, a request it does not know) it declines, and the command runs by itself. One server runs
per endpoint: it holds the endpoint's lock file (``fcntl.flock``) while it lives, so a second
one started at the same time exits at once, and a killed one leaves nothing that stops the next.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwtree.cli import rendezvous
from kwtree.stores.manifest import MANIFEST_NAME

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree

__all__ = ["Answer", "refresh", "serve", "status", "stop"]

#: Answers one request with the held tree: ``{"rc", "out", "err"}``, or ``{"declined": why}``.
Answer = Callable[["KeywordTree", dict[str, Any]], dict[str, Any]]
#: How often the server looks at the clock and at the directory between requests (seconds).
_TICK = 1.0
#: How long a client may take to send its request (seconds).
_READ_TIMEOUT = 10.0


def _identity(directory: str) -> tuple[int, int] | None:
    """The manifest file the tree was opened with (replaced atomically by whatever changes the
    tree wholesale); None when the directory holds none."""
    try:
        info = os.stat(os.path.join(directory, MANIFEST_NAME))
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _peer_is_me(conn: socket.socket) -> bool:
    """Whether the client runs as this user (where the system says; the socket's directory is
    this user's only in any case)."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return True
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i")))
    return bool(uid == os.getuid())


class _Server:
    def __init__(self, where: rendezvous.Endpoint, tree: KeywordTree, embeds: bool, answer: Answer, idle: float,
                 say: Callable[[str], None]) -> None:
        self.where, self.tree, self.embeds, self.answer, self.idle, self.say = where, tree, embeds, answer, idle, say
        self.identity = _identity(where.directory)
        self.turn = threading.Lock()  # one request at a time
        self.stopping = threading.Event()
        self.last = time.monotonic()
        self.started = time.time()
        self.answered = self.declined = 0
        self.busy = 0  # connections being answered (counted under `counting`)
        self.counting = threading.Lock()

    def handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(_READ_TIMEOUT)
                if not _peer_is_me(conn):
                    return
                request = rendezvous.receive(conn)
                conn.settimeout(None)
                rendezvous.send(conn, self.reply(request))
            except (OSError, ValueError):
                pass  # the client went away or sent nonsense; it runs the command itself
            finally:
                with self.counting:
                    self.last = time.monotonic()
                    self.busy -= 1

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("stop") is True:
            self.stopping.set()
            return {"stopped": True}
        if request.get("status") is True:
            return {"status": {"directory": self.where.directory, "pid": os.getpid(), "since": self.started,
                               "answered": self.answered, "declined": self.declined, "idle": self.idle,
                               "embeds": self.embeds, "socket": self.where.socket}}
        if request.get("refresh") is True:  # after a forget: drop the erased texts now, not at the next read
            with self.turn:
                try:
                    applied = self.tree.refresh()
                except Exception:  # noqa: BLE001 -- its own failure: it stops, and holds nothing
                    traceback.print_exc()
                    self.stopping.set()
                    return {"declined": "the server failed"}
                self.say(f"read {applied} operation(s) another process asked it to read")
                return {"refreshed": applied}
        with self.turn:
            if self.stopping.is_set():
                return {"declined": "stopping"}
            if _identity(self.where.directory) != self.identity:
                self.stopping.set()
                return {"declined": "the directory is no longer the tree this server opened"}
            try:
                self.tree.refresh()
                answer = self.answer(self.tree, request)
                if "declined" in answer:
                    self.declined += 1
                else:
                    self.answered += 1
                return answer
            except Exception:  # noqa: BLE001 -- its own failure (the command's are in the reply): step aside
                traceback.print_exc()
                self.stopping.set()
                return {"declined": "the server failed"}

    def run(self, listener: socket.socket) -> None:
        listener.settimeout(_TICK)
        while not self.stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if _identity(self.where.directory) != self.identity:
                    break
                with self.counting:
                    if self.idle > 0 and self.busy == 0 and time.monotonic() - self.last > self.idle:
                        break
                continue
            with self.counting:
                self.busy += 1
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
        self.stopping.set()
        with self.turn:  # the request under way finishes first
            pass


def _listen(where: rendezvous.Endpoint) -> socket.socket:
    """Bind the endpoint's socket (a dead server's file replaced), private to this user."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(where.socket)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(where.socket)
    os.chmod(where.socket, 0o600)
    listener.listen(64)
    return listener


def serve(where: rendezvous.Endpoint, open_tree: Callable[[], tuple[KeywordTree, bool]], answer: Answer, *,
          idle: float, say: Callable[[str], None]) -> bool:
    """Serve ``where.directory`` until a reason to stop (module docstring); False, at once, when
    another server already serves this endpoint. ``open_tree`` gives the tree and whether it
    embeds (it was opened writable). ``idle`` 0 never stops for idleness."""
    import fcntl

    lock = os.open(where.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        tree, embeds = open_tree()
        with tree:
            tree.recall("kwtree", k=1)  # load the indexes and the embedder before the first request
            server = _Server(where, tree, embeds, answer, idle, say)
            listener = _listen(where)
            bound = os.stat(where.socket).st_ino
            previous = {sig: signal.signal(sig, lambda *_: server.stopping.set())
                        for sig in (signal.SIGTERM, signal.SIGINT)}
            say(f"serving {where.directory} at {where.socket}"
                + (f" until {idle:g} s pass without a request" if idle > 0 else ""))
            try:
                server.run(listener)
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                listener.close()
                with contextlib.suppress(FileNotFoundError):
                    if os.stat(where.socket).st_ino == bound:
                        os.unlink(where.socket)
        say(f"stopped serving {where.directory}")
        return True
    finally:
        os.close(lock)


def _tell(where: rendezvous.Endpoint, message: dict[str, Any]) -> dict[str, Any] | None:
    """The server's reply to ``message``; None when none runs or it does not answer."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(30)
        conn.connect(where.socket)
        rendezvous.send(conn, message)
        return rendezvous.receive(conn)
    except (OSError, ValueError):
        return None
    finally:
        conn.close()


def stop(where: rendezvous.Endpoint) -> bool:
    """Ask the server of ``where`` to stop; whether one was running. It stops once the request
    under way, if any, is answered."""
    reply = _tell(where, {"stop": True})
    return reply is not None and reply.get("stopped") is True


def status(where: rendezvous.Endpoint) -> dict[str, Any] | None:
    """What the server of ``where`` says of itself (directory, pid, since when, requests answered
    and declined, idle timeout, whether it embeds); None when none runs."""
    reply = _tell(where, {"status": True})
    found = None if reply is None else reply.get("status")
    return found if isinstance(found, dict) else None


def refresh(where: rendezvous.Endpoint) -> bool:
    """Ask the server of ``where``, if one runs, to read the log now (``refresh()``): after a
    forget, so that it holds the erased texts no longer than the forget took. Whether it did."""
    reply = _tell(where, {"refresh": True})
    return reply is not None and "refreshed" in reply


def log(message: str) -> None:
    print(f"kwtree serve: {message}", file=sys.stderr, flush=True)


def is_tree(directory: str | Path) -> bool:
    return _identity(str(directory)) is not None
