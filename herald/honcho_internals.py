"""Every place herald relies on honcho's internals, in one module.

``herald up`` runs the Procfile under honcho's ``Manager`` (:mod:`herald.supervisor`).
Its public API is ``add_process``, ``loop``, ``terminate``, ``kill`` and ``returncode``;
``herald up`` needs four things more, each from names or behaviour honcho does not
promise to keep:

- a moment right after ``loop`` launched the processes, its own SIGTERM/SIGINT handlers
  already installed (honcho's private ``_start``): a stop signal that came before the
  loop took the signals over is acted on there;
- a moment right after a process reported its pid (honcho writes ``<name> started``
  through its private ``_system_print`` just after recording it), and whether every
  process has (its private ``_all_started``): honcho's ``terminate`` fails with
  ``KeyError`` on a process whose pid it does not know yet;
- each process's own exit code (its private ``_processes``), where ``returncode`` is the
  first one only, or 128 + the stop signal;
- ``loop`` calling ``kill`` on every pass once 5 s have passed since a process ended
  (honcho's ``KILL_WAIT``), so an override of ``kill`` that declines postpones the
  SIGKILL to a grace period of its own.

``tests/cli/test_honcho_internals.py`` checks each against the installed honcho, so an
upgrade outside :data:`SUPPORTED_HONCHO` fails there, loudly, in one place.
"""

from __future__ import annotations

from honcho.manager import Manager

#: The honcho versions whose internals this module was checked against (the same range
#: as the package's dependency).
SUPPORTED_HONCHO = (">=2.0", "<2.1")


# honcho ships no type information: to mypy its Manager is Any, and subclassing Any is
# an error under --strict (disallow_subclassing_any)
class HookedManager(Manager):  # type: ignore[misc]
    """honcho's ``Manager`` with the moments ``herald up`` acts on as hooks of their own.

    The hooks do nothing by default; a subclass overrides the ones it needs.
    """

    def after_start(self) -> None:
        """Called once ``loop`` has launched every process, with its SIGTERM/SIGINT
        handlers installed; no process has reported its pid yet."""

    def after_system_line(self, line: str) -> None:
        """Called after each line honcho writes for itself, among them ``<name> started``,
        written just after honcho recorded that process's pid (see :meth:`all_started`)."""

    def all_started(self) -> bool:
        """True once every process has reported its pid, so that ``terminate`` can signal
        each of them."""
        return bool(self._all_started())

    def returncodes(self) -> dict[str, int | None]:
        """Each process's exit code by name, None for one that has not ended."""
        return {name: process.get("returncode") for name, process in self._processes.items()}

    def _start(self) -> None:
        # loop() installs its signal handlers, then calls _start() to launch the processes
        super()._start()
        self.after_start()

    def _system_print(self, data: str) -> None:
        # every line honcho writes for itself ("started", "stopped", "sending SIGTERM")
        super()._system_print(data)
        self.after_system_line(data)
