"""How a ``kwtree`` command and its directory's server (``kwtree serve``) meet: which commands
a server answers, where it listens, and what travels between them.

A server is found by name, never announced: its socket sits in a private directory of this
user (``$XDG_RUNTIME_DIR/kwtree-UID``, else ``$TMPDIR`` or ``/tmp``, mode 0700 and owned by the
user, or no server is used), named by a digest of the tree's real path, the installed kwtree
(its version and where it is) and the ``KWTREE_*`` settings of the environment. So a command
reaches only a server that runs the same code, with the same settings, on the same directory;
after an upgrade or with other settings it finds none and starts its own.

One connection carries one exchange: the client sends a JSON object and closes its half; the
server answers with one JSON object and closes. Standard library only: the command imports this
before anything of kwtree's (``kwtree.cli.entry``).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["DEFAULT_IDLE", "MAX_MESSAGE", "SERVED", "SERVED_HOOKS", "Endpoint", "Unserved", "endpoint", "peer_is_me",
           "receive", "send", "served_directory", "touch"]

#: The largest message either side reads (a request's stdin, a reply's output).
MAX_MESSAGE = 256 << 20
#: The environment variables kwtree and the model clients it builds read (their values are
#: hashed into a server's name: a command never reaches a server started with other ones).
_SETTINGS = ("KWTREE_", "OPENAI_", "ANTHROPIC_", "PYTHONWARNINGS", "PYTHONIOENCODING")
#: Variables that choose how commands reach a server; they do not change what a command does.
_ROUTING = ("KWTREE_SERVE", "KWTREE_SERVE_IDLE", "KWTREE_SERVE_TIMEOUT")


#: The commands a server answers: those that read the tree, need no LLM and write no file
#: (a test holds this to the command table), with the position of DIR among their arguments.
SERVED: dict[str, int] = {
    "get": 1, "children": 1, "path": 1, "find": 1, "info": 1, "infos": 1, "keywords-of": 1, "relations": 1,
    "recall": 1, "context": 1, "assemble": 1, "bootstrap": 1, "memories": 1, "history": 1, "metrics": 1,
}
#: The hook events a server answers (``kwtree hook EVENT DIR``): those that only read, and
#: ``stop`` when it commits offline, as the hooks' actor, a transcript named by an absolute path
#: (any other stop it leaves to run by itself: ``Unserved``).
SERVED_HOOKS = ("prompt", "session-start", "stop")
#: How long a server waits for a request before it stops, unless told otherwise (seconds).
DEFAULT_IDLE = 600.0


def served_directory(argv: Sequence[str]) -> str | None:
    """The DIR of a command a server could answer, or None. Only plain forms are taken
    (DIR where the command's usage puts it, no ``--help`` and no ``--as-of``): anything else
    runs here, where argparse reads it."""
    if not argv or any(a in ("-h", "--help") or a.startswith("--as-of") for a in argv):
        return None
    hook = argv[0] == "hook" and len(argv) > 2 and argv[1] in SERVED_HOOKS
    place = 2 if hook else None if argv[0] == "hook" else SERVED.get(argv[0])
    if place is None or len(argv) <= place or argv[place].startswith("-"):
        return None
    return argv[place]


class Unserved(Exception):
    """Raised by a command a server runs, before it does anything, when it is one the server
    leaves to run by itself (the server declines it)."""


class Endpoint(NamedTuple):
    """The files of one directory's server: its socket, the lock its process holds for as long
    as it runs, the log its stderr goes to when a command started it, the mark a command leaves
    when it ran alone (the next one starts a server) and the mark of a server that failed to start
    (no command starts another for a while)."""

    directory: str
    socket: str
    lock: str
    log: str
    wanted: str
    failed: str


def _safe_base(base: str, uid: int) -> bool:
    """Whether nobody but this user (or root) can swap what ``base`` holds: owned by one of
    them, and sticky where others may write to it (as /tmp is)."""
    try:
        info = os.stat(base)
    except OSError:
        return False
    return info.st_uid in (uid, 0) and (not info.st_mode & 0o022 or bool(info.st_mode & stat.S_ISVTX))


def _private_directory() -> str | None:
    """This user's rendezvous directory, made if missing; None unless it is a real directory
    that only this user can enter, in a directory nobody else can swap it in (else another
    user could answer in a server's place)."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if not (os.path.isabs(base) and os.path.isdir(base)):
        base = os.environ.get("TMPDIR", "") or "/tmp"
    uid = os.getuid()
    if not _safe_base(base, uid):
        return None
    path = os.path.join(base, f"kwtree-{uid}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        return None
    return path


def _installed() -> str:
    """The kwtree this process runs: its version and where its code is."""
    import kwtree  # the package's __init__ imports nothing

    return f"{kwtree.__version__}\0{os.path.dirname(os.path.abspath(kwtree.__file__))}\0{sys.version}"


def endpoint(directory: str | os.PathLike[str]) -> Endpoint | None:
    """Where the server of ``directory`` (as this process would start it) listens; None where
    no server can be used: no unix sockets, or no private directory for them."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    private = _private_directory()
    if private is None:
        return None
    real = os.path.realpath(directory)
    settings = sorted((k, v) for k, v in os.environ.items()
                      if k.startswith(_SETTINGS) and k not in _ROUTING)
    digest = hashlib.sha256(json.dumps([real, _installed(), settings]).encode()).hexdigest()[:24]
    base = os.path.join(private, digest)
    return Endpoint(real, f"{base}.sock", f"{base}.lock", f"{base}.log", f"{base}.wanted", f"{base}.failed")


def peer_is_me(conn: socket.socket) -> bool:
    """Whether the process at the other end runs as this user (where the system tells: Linux's
    SO_PEERCRED; elsewhere the private directory is the only guard)."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return True
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i")))
    return bool(uid == os.getuid())


def touch(path: str) -> None:
    """Make ``path`` (a file of the private directory, never followed if a link) or renew its
    modification time."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
    os.utime(path, follow_symlinks=False)


def send(conn: socket.socket, message: dict[str, Any]) -> None:
    """Send one message and close this side's half of the connection."""
    conn.sendall(json.dumps(message, ensure_ascii=False).encode())
    conn.shutdown(socket.SHUT_WR)


def receive(conn: socket.socket, deadline: float | None = None) -> dict[str, Any]:
    """The one message the other side sent; ValueError if it is not a JSON object or too long,
    TimeoutError if it is not all there by ``deadline`` (``time.monotonic()``)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no whole message in time")
            conn.settimeout(left)
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_MESSAGE:
            raise ValueError("message too long")
        chunks.append(chunk)
    message = json.loads(b"".join(chunks))
    if not isinstance(message, dict):
        raise ValueError("not a JSON object")
    return message
