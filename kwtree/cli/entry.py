"""The ``kwtree`` command's front door: a read that the directory's server can answer goes to
it, everything else runs here (``kwtree.cli.main``).

A reading command (``recall``, ``context``, ``get``, ... and the ``prompt`` and
``session-start`` hooks) on a directory whose server runs is answered by that server, which
holds the tree open: the command costs a bare interpreter and one round trip instead of
importing the library and replaying the log. Without a server the command runs here; the second
such command within the idle time then starts one in the background for the commands after it
(``KWTREE_SERVE``: ``auto``, the default; ``use`` only uses a running one; ``off`` never does).
A server that does not answer in ``KWTREE_SERVE_TIMEOUT`` seconds (default 30), or declines,
leaves the command to run here, so a server can make a command faster but never change or lose
what it does. ``kwtree serve`` (``kwtree.cli.server``) is the server.

This module imports only the standard library until it runs a command here: choosing costs
nothing a bare interpreter does not pay.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kwtree.cli import rendezvous

__all__ = ["ask", "main", "start_server", "want_server"]

#: A server that failed to start is not started again by a command for this long (seconds).
_FAILED_BACKOFF = 60.0
#: An autostarted server's log past this size is started anew (bytes).
_LOG_LIMIT = 1 << 20

def _mode() -> str:
    mode = os.environ.get("KWTREE_SERVE", "").strip().lower() or "auto"
    return mode if mode in ("auto", "use", "off") else "auto"


def _timeout() -> float:
    try:
        return max(0.1, float(os.environ.get("KWTREE_SERVE_TIMEOUT", "") or 30))
    except ValueError:
        return 30.0


def ask(where: rendezvous.Endpoint, request: dict[str, Any]) -> dict[str, Any] | None:
    """The server's reply to ``request``: ``{"rc", "out", "err"}`` as the command here would
    have printed them; ``{}`` when no server listens; None when it declines, fails or is too
    slow (the command then runs here)."""
    timeout = _timeout()
    deadline = time.monotonic() + timeout  # for the whole exchange
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        try:
            conn.connect(where.socket)
        except (FileNotFoundError, ConnectionRefusedError):
            return {}
        if not rendezvous.peer_is_me(conn):
            return None  # not a server of this user's: never asked, never replaced
        rendezvous.send(conn, request)
        reply = rendezvous.receive(conn, deadline)
    except (OSError, ValueError):
        return None
    finally:
        conn.close()
    if not (isinstance(reply.get("rc"), int) and all(isinstance(reply.get(k), str) for k in ("out", "err"))):
        return None  # declined ({"declined": why}) or not a reply at all
    return reply


def _idle() -> float:
    """How long a server waits for a request before it stops (``KWTREE_SERVE_IDLE``; 0: forever;
    the default for a value that is no number of seconds)."""
    try:
        idle = float(os.environ.get("KWTREE_SERVE_IDLE", "") or rendezvous.DEFAULT_IDLE)
    except ValueError:
        return rendezvous.DEFAULT_IDLE
    return idle if idle > 0 else float("inf") if idle == 0 else rendezvous.DEFAULT_IDLE


def _within(path: str, seconds: float) -> bool:
    """Whether the file ``path`` was touched less than ``seconds`` ago."""
    try:
        return time.time() - os.stat(path, follow_symlinks=False).st_mtime < seconds
    except OSError:
        return False


def want_server(where: rendezvous.Endpoint) -> None:
    """After a served command ran here for want of a server: start one when this is the second
    such command within the idle time (a single read leaves no process behind), unless a server
    of this endpoint failed to start in the last minute (its log says why)."""
    if _within(where.failed, _FAILED_BACKOFF):
        return
    if _within(where.wanted, _idle()):
        os.unlink(where.wanted)
        start_server(where)
    else:
        rendezvous.touch(where.wanted)


def start_server(where: rendezvous.Endpoint) -> None:
    """Start the server of ``where.directory`` in the background, detached from this command
    (its own session, no terminal); a second one started at the same time exits at once."""
    import subprocess  # here: a command that a server answers never needs it

    idle, inf = _idle(), float("inf")
    fresh = os.O_TRUNC if _size(where.log) > _LOG_LIMIT else os.O_APPEND  # (a log only grows: started anew)
    log = os.open(where.log, os.O_WRONLY | fresh | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        subprocess.Popen(
            [sys.executable, "-m", "kwtree", "serve", where.directory, "--idle", f"{idle:g}" if idle < inf else "0"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
            cwd="/",  # (not the command's directory: the server must not hold it, or a mount, busy)
            env=_absolute_path(os.environ))  # (so that in "/" it imports the kwtree this command runs)
    finally:
        os.close(log)


def _absolute_path(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with each entry of ``PYTHONPATH`` made absolute (from this working directory)."""
    env = dict(environ)
    if env.get("PYTHONPATH"):
        try:
            env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p or ".") for p in env["PYTHONPATH"].split(os.pathsep))
        except OSError:  # (no working directory any more: relative entries name nothing)
            env["PYTHONPATH"] = os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if os.path.isabs(p))
    return env


def _size(path: str) -> int:
    try:
        return os.stat(path, follow_symlinks=False).st_size
    except OSError:
        return 0


def _is_tree(directory: str) -> bool:
    from kwtree.stores.manifest import MANIFEST_NAME

    return os.path.isfile(os.path.join(directory, MANIFEST_NAME))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``kwtree`` command, through the directory's server when one can answer it;
    returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    directory = rendezvous.served_directory(args)
    where, stdin, reply = None, None, None
    try:
        where = None if directory is None or _mode() == "off" else rendezvous.endpoint(directory)
        stdin = sys.stdin.read() if where is not None and args[0] == "hook" else None
        reply = None if where is None else ask(where, {"argv": args, "cwd": os.getcwd(), "stdin": stdin})
    except KeyboardInterrupt:  # as the command run here answers Ctrl-C
        return 130
    except OSError:  # (a working directory removed, say): the command runs here, as it would alone
        where = None
    if reply:
        try:
            sys.stdout.write(reply["out"])
            sys.stdout.flush()
        except BrokenPipeError:  # the reader went away (| head): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        sys.stderr.write(reply["err"])
        return int(reply["rc"])
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)  # the hook's input, already read
    from kwtree.cli.main import main as run_here

    code = run_here(args)
    if where is not None and reply == {} and code == 0 and _mode() == "auto" and _is_tree(where.directory):
        with contextlib.suppress(OSError, ValueError):  # else the next command runs here too
            want_server(where)
    return code
