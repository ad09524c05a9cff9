"""``kwtree serve DIR``: one long-lived process per directory that holds the tree open and
answers the reading commands of ``kwtree`` (``kwtree.cli.entry``) and Claude Code's hooks, so
each of them costs a round trip instead of an import and a replay.

The server writes the log only for the Stop hook, when it commits offline (its tree has no LLM
client; ``kwtree.cli.agents``): a commit of the session's new turns, which a stop run again
after a server that died before replying repeats as a commit of nothing. Its tree's embedding
worker fills the vector store with what commands wrote and left in the outbox
(``kwtree.cli.main``'s ``_serve`` opens it). Before each
answer it reads what other processes appended (``refresh()``), so an answer is what a command
opening the tree at that moment would print: what the command prints goes to a buffer of the
thread answering it (``_Routed``; the embedding worker's messages go to the server's own
stderr), and each warning is shown again as in a new process. It serves one request at a time
(requests are milliseconds; one that waits over ``_TURN_WAIT`` for its turn is declined) and
stops: after ``idle`` seconds without a request, on ``kwtree serve DIR --stop``, on SIGTERM or
SIGINT, when the directory is no longer the tree it opened (removed, or its manifest replaced
by a restore or an embedder switch), or when kwtree's own code changed under it (an upgrade
in place, an editable install edited). Anything it cannot answer as the command would (an
error of its own: a lock another process holds, a usage error or help, whose layout depends
on the command's terminal; a request it does not know) it declines, and the command runs by
itself; so does a server whose open warned (the command alone would show the warning). One
server runs per endpoint: it holds the endpoint's lock file (``fcntl.flock``) while it lives,
so a second one started at the same time exits at once, and a killed one leaves nothing that
stops the next.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kwtree.cli import rendezvous
from kwtree.stores.manifest import MANIFEST_NAME

if TYPE_CHECKING:
    from kwtree.facade.tree import KeywordTree

__all__ = ["Answer", "is_tree", "log", "refresh", "serve", "status", "stop"]

#: Answers one request with the held tree, printing what the command prints: ``{"rc"}``, or
#: ``{"declined": why}``.
Answer = Callable[["KeywordTree", dict[str, Any]], dict[str, Any]]
#: How often the server looks at the clock, the directory and its code between requests (seconds).
_TICK = 1.0
#: How long a client may take to send its request (seconds).
_READ_TIMEOUT = 10.0
#: How long a request waits for the one before it; then it is declined (the command runs by itself).
_TURN_WAIT = 5.0
#: Connections answered at once (the others are closed: their commands run by themselves).
_MAX_BUSY = 32


def _identity(directory: str) -> tuple[int, int, int] | None:
    """The manifest file the tree was opened with (replaced atomically by whatever changes the
    tree wholesale); None when the directory holds none."""
    try:
        info = os.stat(os.path.join(directory, MANIFEST_NAME))
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_ctime_ns


def _code() -> dict[str, tuple[int, int]]:
    """Every Python file of the kwtree package, loaded or not (a command imports some on first
    use), with its modification time and size."""
    stamps: dict[str, tuple[int, int]] = {}
    for folder, subfolders, files in os.walk(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))):
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                path = os.path.normpath(os.path.join(folder, name))
                try:
                    info = os.stat(path)
                except OSError:
                    continue
                stamps[path] = (info.st_mtime_ns, info.st_size)
    return stamps


def _code_changed(stamps: dict[str, tuple[int, int]]) -> bool:
    for path, stamp in stamps.items():
        try:
            info = os.stat(path)
        except OSError:
            return True
        if (info.st_mtime_ns, info.st_size) != stamp:
            return True
    return False


class _Routed(io.TextIOBase):
    """A process stream (``sys.stdout``, ``sys.stderr``) that writes, in a thread answering a
    request, into that request's buffer, and in every other thread where it wrote before."""

    def __init__(self, real: TextIO) -> None:
        self.real = real
        self._local = threading.local()

    def _target(self) -> TextIO:
        buffer: TextIO | None = getattr(self._local, "buffer", None)
        return self.real if buffer is None else buffer

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return self._target().isatty()

    @contextlib.contextmanager
    def captured(self) -> Iterator[io.StringIO]:
        buffer = io.StringIO()
        self._local.buffer = buffer
        try:
            yield buffer
        finally:
            self._local.buffer = None


@contextlib.contextmanager
def _warnings_shown_again() -> Iterator[None]:
    """Each warning is shown as in a new process, though this one showed it before: a filter
    added resets every module's record of the warnings it showed (and is taken out after)."""
    warnings.simplefilter("default", append=True)
    added = warnings.filters[-1]
    try:
        yield
    finally:
        filters = warnings.filters
        if isinstance(filters, list):  # (typed a Sequence; it is the module's list)
            with contextlib.suppress(ValueError):
                filters.remove(added)


class _Server:
    def __init__(self, where: rendezvous.Endpoint, tree: KeywordTree, embeds: bool, answer: Answer, idle: float,
                 say: Callable[[str], None], out: _Routed, err: _Routed, warned: str,
                 code: dict[str, tuple[int, int]]) -> None:
        self.where, self.tree, self.embeds, self.answer, self.idle, self.say = where, tree, embeds, answer, idle, say
        self.out, self.err, self.warned = out, err, warned
        self.identity = _identity(where.directory)
        self.code = code
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
                if not rendezvous.peer_is_me(conn):
                    return
                request = rendezvous.receive(conn, time.monotonic() + _READ_TIMEOUT)
                conn.settimeout(None)
                rendezvous.send(conn, self.reply(request))
            except (OSError, ValueError):
                pass  # the client went away or sent nonsense; it runs the command itself
            finally:
                with self.counting:
                    self.last = time.monotonic()
                    self.busy -= 1

    def status(self) -> dict[str, Any]:
        return {"directory": self.where.directory, "pid": os.getpid(), "since": self.started,
                "answered": self.answered, "declined": self.declined, "idle": self.idle, "embeds": self.embeds,
                "socket": self.where.socket, "declines_all": self.warned or None}

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("stop") is True:
            self.stopping.set()
            return {"stopped": True}
        if request.get("status") is True:
            return {"status": self.status()}
        if not self.turn.acquire(timeout=_TURN_WAIT):
            self.declined += 1
            return {"declined": "busy"}
        try:
            if self.stopping.is_set():
                return {"declined": "stopping"}
            if _identity(self.where.directory) != self.identity or _code_changed(self.code):
                self.stopping.set()
                return {"declined": "the directory is no longer the tree this server opened, or kwtree changed"}
            if request.get("refresh") is True:  # after a forget: drop the erased texts now, not at the next read
                applied = self.tree.refresh()
                self.say(f"read {applied} operation(s) another process asked it to read")
                return {"refreshed": applied}
            if self.warned:
                self.declined += 1
                return {"declined": "opening the tree warned; the command alone shows it"}
            self.tree.refresh()
            with self.out.captured() as out, self.err.captured() as err, _warnings_shown_again():
                answer = self.answer(self.tree, request)
            if "declined" in answer:
                self.declined += 1
                return answer
            self.answered += 1
            return {**answer, "out": out.getvalue(), "err": err.getvalue()}
        except Exception:  # noqa: BLE001 -- its own failure (the command's are in the reply): step aside
            traceback.print_exc(file=sys.__stderr__ or self.err.real)
            self.stopping.set()
            return {"declined": "the server failed"}
        finally:
            self.turn.release()

    def run(self, listener: socket.socket) -> None:
        listener.settimeout(_TICK)
        while not self.stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if _identity(self.where.directory) != self.identity or _code_changed(self.code):
                    break
                with self.counting:
                    if self.idle > 0 and self.busy == 0 and time.monotonic() - self.last > self.idle:
                        break
                continue
            with self.counting:
                crowded = self.busy >= _MAX_BUSY
                self.busy += 0 if crowded else 1
            if crowded:
                conn.close()  # its command runs by itself
                continue
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
        self.stopping.set()


def _listen(where: rendezvous.Endpoint) -> socket.socket:
    """Bind the endpoint's socket (a dead server's file replaced), private to this user."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(where.socket)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(where.socket)
    os.chmod(where.socket, 0o600)
    listener.listen(64)
    return listener


class _Logged(logging.Handler):
    """The messages kwtree's loggers say at WARNING or above (what a command alone prints on stderr)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(f"{record.getMessage()}\n")


def _opened(open_tree: Callable[[], tuple[KeywordTree, bool]], say: Callable[[str], None]
            ) -> tuple[KeywordTree, bool, str]:
    """The tree, whether it embeds, and the warnings opening it (and a first search) showed or
    logged."""
    logged, logger = _Logged(), logging.getLogger("kwtree")
    logger.addHandler(logged)
    try:
        with warnings.catch_warnings(record=True) as caught:  # (before any thread of this server runs)
            warnings.simplefilter("default")
            tree, embeds = open_tree()
            try:
                tree.recall("kwtree", k=1)  # load the indexes and the embedder before the first request
            except BaseException:
                tree.close()
                raise
    finally:
        logger.removeHandler(logged)
    warned = "".join(logged.said) + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                                            for w in caught)
    if warned:
        say(f"opening the tree warned; every command will run by itself:\n{warned}")
    return tree, embeds, warned


def serve(where: rendezvous.Endpoint, open_tree: Callable[[], tuple[KeywordTree, bool]], answer: Answer, *,
          idle: float, say: Callable[[str], None]) -> bool:
    """Serve ``where.directory`` until a reason to stop (module docstring); False, at once, when
    another server already serves this endpoint. ``open_tree`` gives the tree and whether it
    embeds (it was opened writable). ``idle`` 0 never stops for idleness."""
    import fcntl

    lock = _lock_file(where)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        code = _code()  # (before the open: an edit made while it opens counts too)
        try:
            tree, embeds, warned = _opened(open_tree, say)
        except BaseException:
            with contextlib.suppress(OSError):  # commands start no other server for a while (kwtree.cli.entry)
                rendezvous.touch(where.failed)
            raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(where.failed)
        out, err = _Routed(sys.stdout), _Routed(sys.stderr)
        server = _Server(where, tree, embeds, answer, idle, say, out, err, warned, code)
        try:
            _run(server, where, out, err)
        finally:
            with server.turn:  # the request under way finishes first; none starts after
                tree.close()
        say(f"stopped serving {where.directory}")
        return True
    finally:
        os.close(lock)


def _lock_file(where: rendezvous.Endpoint) -> int:
    """The endpoint's lock file, opened (made if missing; never followed if a link)."""
    return os.open(where.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)


def _run(server: _Server, where: rendezvous.Endpoint, out: _Routed, err: _Routed) -> None:
    """Listen, with the process's streams routed per thread and SIGTERM/SIGINT stopping it,
    until the server stops; then put everything back."""
    listener = _listen(where)
    bound = os.stat(where.socket).st_ino
    previous = {sig: signal.signal(sig, lambda *_: server.stopping.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    sys.stdout, sys.stderr = out, err
    server.say(f"serving {where.directory} at {where.socket}"
               + (f" until {server.idle:g} s pass without a request" if server.idle > 0 else ""))
    try:
        server.run(listener)
    finally:
        sys.stdout, sys.stderr = out.real, err.real
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            if os.stat(where.socket).st_ino == bound:
                os.unlink(where.socket)


def _tell(where: rendezvous.Endpoint, message: dict[str, Any]) -> dict[str, Any] | None:
    """The server's reply to ``message``; None when none runs or it does not answer."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(30)
        conn.connect(where.socket)
        if not rendezvous.peer_is_me(conn):
            return None
        rendezvous.send(conn, message)
        return rendezvous.receive(conn, time.monotonic() + 30)
    except (OSError, ValueError):
        return None
    finally:
        conn.close()


def stop(where: rendezvous.Endpoint, wait: float = 30.0) -> bool:
    """Ask the server of ``where`` to stop; whether one was running. Returns once it is gone (its
    lock released: a server started next takes its place at once), or after ``wait`` seconds."""
    import fcntl

    reply = _tell(where, {"stop": True})
    if reply is None or reply.get("stopped") is not True:
        return False
    deadline = time.monotonic() + wait
    lock = _lock_file(where)
    try:
        while time.monotonic() < deadline:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(0.05)
            else:
                fcntl.flock(lock, fcntl.LOCK_UN)
                break
    finally:
        os.close(lock)
    return True


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
    """Say ``message`` on the server's own stderr (its log file, when a command started it)."""
    print(f"kwtree serve: {message}", file=sys.__stderr__ or sys.stderr, flush=True)


def is_tree(directory: str | Path) -> bool:
    return _identity(str(directory)) is not None
