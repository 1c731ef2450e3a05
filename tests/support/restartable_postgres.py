"""A PostgreSQL server of a test's own that the test stops and starts again on the same
port and data directory, as an operator's restart (or a crash and its recovery) does.

The cluster is made and first started by :func:`tests.support.services.start_postgres`;
from then on ``pg_ctl`` (run as the ``postgres`` user when we are root) stops and starts
it. ``pg_ctl stop -m immediate`` is a crash for the clients: every connection is cut at
once and the next start replays the WAL.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

from tests.support.services import Service, postgres_bindir, server_in_tempdir, start_postgres

#: The server's settings once the helper runs it: the suite's (tests.support.services) but
#: for ``synchronous_commit``, on as in production. Off, a commit is answered before its
#: WAL is written and a crash loses it: an event answered 202 would vanish. (``fsync``
#: stays off: a stopped server's writes are in the operating system's cache, which only a
#: crash of the machine loses.)
_SETTINGS = {"listen_addresses": "127.0.0.1", "fsync": "off", "synchronous_commit": "on",
             "full_page_writes": "off", "max_connections": "200"}
#: Seconds pg_ctl may take to stop or start the server.
PG_CTL_TIMEOUT_S = 30


class RestartablePostgres:
    """One PostgreSQL server: its ``url``; :meth:`stop` and :meth:`start` on the same port."""

    def __init__(self, workdir: Path) -> None:
        self._service: Service | None = start_postgres(workdir)
        self.url = self._service.url
        self.port = int(make_url(self.url).port or 0)
        self._workdir = workdir
        self._bindir = postgres_bindir()
        # the first start's settings are the suite's: start it again with the helper's
        self.stop("fast")
        self.start()

    def _pg_ctl(self, *args: str) -> None:
        assert self._bindir is not None
        run_as: dict[str, Any] = {}
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            run_as = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        subprocess.run([str(self._bindir / "pg_ctl"), "-D", str(self._workdir / "data"), *args],
                       check=True, timeout=PG_CTL_TIMEOUT_S, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "LC_ALL": "C"}, **run_as)

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: every connection cut, as in a crash; ``fast``:
        sessions ended cleanly) and wait until it is gone."""
        self._pg_ctl("stop", "-m", mode, "-w")

    def start(self) -> None:
        """Start the server again on its port and data directory; returns once it takes
        connections."""
        options = " ".join(f"-c {key}={value}" for key, value in _SETTINGS.items())
        options += f" -c unix_socket_directories={self._workdir} -p {self.port}"
        self._pg_ctl("start", "-w", "-o", options, "-l", str(self._workdir / "restarted.log"))

    def close(self) -> None:
        """Stop the server for good (a stopped one is left as it is)."""
        with contextlib.suppress(subprocess.SubprocessError):
            self._pg_ctl("stop", "-m", "immediate", "-w")
        if self._service is not None:  # the first start's process is gone: its bookkeeping
            self._service.stop()
            self._service = None


def restartable_postgres() -> contextlib.AbstractContextManager[RestartablePostgres]:
    """A :class:`RestartablePostgres` in a new temporary directory (one its service user can
    traverse), stopped for good and removed afterwards."""
    return server_in_tempdir("herald-pg-restart-", RestartablePostgres)
