"""``herald up``'s process supervisor: a Procfile's processes run under honcho, in one
terminal (docs/deployment.md#the-herald-command).

The release process runs first, alone; the others start only when it succeeded. Each
process gets its own environment (:func:`process_environments`) and runs as itself, not
behind a shell (:func:`exec_form`). A stop signal (SIGTERM, SIGINT) is passed on to every
process as SIGTERM, whenever it comes (:class:`StopSignals` holds one that comes while no
honcho loop handles them); whatever still runs :data:`UP_SHUTDOWN_GRACE` later is killed.
Everything it needs of honcho beyond its public API is in :mod:`herald.honcho_internals`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herald.honcho_internals import HookedManager
    from herald.settings import Settings

#: The Procfile process ``herald up`` runs first, alone, waiting for it to succeed.
RELEASE_PROCESS = "release"
#: How long ``herald up`` lets its processes drain after SIGTERM before killing them
#: (Heroku's own grace period).
UP_SHUTDOWN_GRACE = timedelta(seconds=30)
#: The signals that stop ``herald up`` (honcho passes them on to each process as SIGTERM).
UP_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Characters that make a Procfile command more than one simple command (no ``exec``).
SHELL_SYNTAX = frozenset(";&|<>()`$\n")


class ReleaseFailed(Exception):
    """The release process exited with a code other than 0: no other process started."""

    def __init__(self, returncode: int) -> None:
        super().__init__(f"{RELEASE_PROCESS} failed (exit code {returncode}); "
                         "not starting the other processes")
        #: the release process's exit code
        self.returncode = returncode


def process_environments(names: Sequence[str], settings: Settings,
                         base: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """The environment of each Procfile process ``herald up`` starts.

    ``herald`` resolves to this installation (its directory leads ``PATH``); output is
    unbuffered so lines arrive as they are written; each ``worker…`` process gets its own
    ``WORKER_PORT`` (``WORKER_PORT``, +1, +2 … in Procfile order; 0 stays 0) so their
    health servers do not collide on one machine, and ``web`` gets ``PORT``.
    """
    base = dict(os.environ if base is None else base)
    bin_dir = str(Path(sys.executable).parent)
    base["PATH"] = os.pathsep.join([bin_dir, base.get("PATH", "")])
    base["PYTHONUNBUFFERED"] = "1"
    environments = {}
    worker_port = settings.worker_port
    for name in names:
        env = dict(base)
        if name.startswith("worker"):
            env["WORKER_PORT"] = str(worker_port)
            # 0 asks each worker for any free port: 0 for all of them
            worker_port += 1 if worker_port else 0
        elif name == "web":
            env["PORT"] = str(settings.port)
        environments[name] = env
    return environments


def exec_form(command: str) -> str:
    """``exec command`` for a simple command, so signals reach the process itself, not a
    shell in front of it (whose death would be reported instead of the exit code)."""
    if SHELL_SYNTAX.isdisjoint(command) and not command.startswith("exec "):
        return f"exec {command}"
    return command


class StopSignals:
    """SIGTERM/SIGINT received while no honcho loop handles them (while the embedded Redis
    starts, between the release and the other processes): recorded, so that ``herald up``
    starts nothing more and still cleans up, instead of dying on the spot."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.hold()

    def hold(self) -> None:
        """Record the stop signals from now on (until a honcho loop takes them over)."""
        for signum in UP_STOP_SIGNALS:
            signal.signal(signum, self._record)

    def _record(self, signum: int, frame: object) -> None:
        self.received.append(signum)

    @property
    def exit_code(self) -> int | None:
        """The exit code of the first stop signal received (as honcho's: 128 + signal)."""
        return 128 + self.received[0] if self.received else None


def run_processes(processes: dict[str, str], environments: dict[str, dict[str, str]],
                  cwd: str, stops: StopSignals) -> int:
    """Run ``processes`` (a Procfile's, by name) in ``cwd``: the release process first,
    alone, then the others together, until they all ended.

    Exit code: 0 when every process it ran exited 0, a stop signal included (nothing
    starts after one); otherwise the first failing process's code, or honcho's 128 +
    signal when a stop signal came and a process did not exit 0. Raises
    :class:`ReleaseFailed` when the release process did not exit 0.
    """
    release = processes.pop(RELEASE_PROCESS, None)
    if release is not None:
        returncode = _run_manager({RELEASE_PROCESS: release}, environments, cwd, stops)
        if stops.exit_code is not None:
            return returncode  # stopped: nothing more starts
        if returncode != 0:
            raise ReleaseFailed(returncode)
    if not processes:
        return 0
    return _run_manager(processes, environments, cwd, stops)


def _run_manager(processes: dict[str, str], environments: dict[str, dict[str, str]],
                 cwd: str, stops: StopSignals) -> int:
    """Run ``processes`` under one honcho manager until all ended (none when a stop signal
    came first: 0); 0 when every one exited 0, else honcho's exit code."""
    from honcho.printer import Printer

    if stops.exit_code is not None:
        return 0
    manager = graceful_manager(Printer(sys.stdout), UP_SHUTDOWN_GRACE, stops)
    for name, command in processes.items():
        manager.add_process(name, exec_form(command), env=environments[name], cwd=cwd)
    try:
        manager.loop()
    finally:
        # honcho leaves its handlers installed, bound to this manager once it has ended
        stops.hold()
    # honcho answers 128 + signal after a stop signal even when every process drained and
    # exited 0: a stop asked for and carried out is a success
    # (docs/deployment.md#the-herald-command)
    if all(code == 0 for code in manager.returncodes().values()):
        return 0
    return int(manager.returncode or 0)


def graceful_manager(printer: Any, grace: timedelta, stops: StopSignals) -> HookedManager:
    """A honcho Manager that waits ``grace`` (not honcho's 5 s) before SIGKILL, and that
    a stop signal arriving while its processes start (``stops`` holds one that came just
    before its loop took the signals over) stops them all once started."""
    from herald.honcho_internals import HookedManager

    class GracefulManager(HookedManager):
        def __init__(self) -> None:
            super().__init__(printer)
            self._terminated_at: float | None = None
            self._killed = False
            self._stop_pending = False

        def terminate(self) -> None:
            if not self.all_started():
                # honcho signals a process by the pid it reports once started (before
                # that it fails with KeyError): stop them when the last one has reported
                self._stop_pending = True
                return
            if self._terminated_at is None:
                self._terminated_at = time.monotonic()
            super().terminate()

        def kill(self) -> None:
            # honcho's loop calls kill on every pass once its own 5 s are up: declining
            # until the grace has passed postpones the SIGKILL to then
            since = time.monotonic() - (self._terminated_at or time.monotonic())
            if self._killed or since < grace.total_seconds():
                return
            self._killed = True
            super().kill()

        def after_start(self) -> None:
            if stops.exit_code is not None:
                self.returncode = stops.exit_code
                self.terminate()

        def after_system_line(self, line: str) -> None:
            if self._stop_pending and self.all_started():
                self._stop_pending = False
                self.terminate()

    return GracefulManager()
