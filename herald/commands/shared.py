"""What the ``herald`` subcommands share: their console, their error line and exit codes,
and the actor modules that fill the queue registry."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from herald.queue import UnknownQueue

if TYPE_CHECKING:
    from rich.console import Console

    from herald.queue import App, Registry

#: Exit code of a usage mistake (argparse's own, also used for unknown queue names).
USAGE_ERROR = 2
#: Width of tables written to a pipe or file (a terminal uses its own width), unless
#: ``COLUMNS`` says otherwise.
PIPE_WIDTH = 240


def console(max_width: int | None = None) -> Console:
    """The console of a command's output: ``COLUMNS`` when set, else the terminal's width,
    else :data:`PIPE_WIDTH` (else ``max_width``) for a pipe or file; never wider than
    ``max_width``."""
    from rich.console import Console

    default = Console()  # reads COLUMNS itself, else asks the terminal
    if not default.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        return Console(width=max_width or PIPE_WIDTH)
    if max_width is not None and default.width > max_width:
        return Console(width=max_width)
    return default


def load_actor_modules(extra: Sequence[str] = (), queues: Sequence[str] = ()
                       ) -> list[Registry]:
    """Import the modules of the ``actors`` package that declare ``queues``' actors and
    herald's capsules (every module when no queue is named, or one is not in
    ``actors.queues.QUEUE_MODULES``), then ``extra`` (an application's own modules);
    returns the registries of ``extra`` (for the App, beside herald's).

    With no queue named, herald's registry then holds every actor, schedule and sweep
    herald ships, so ``herald worker``, ``herald clock`` and ``herald sweep`` all see the
    same ones; the queue table itself needs no actor module. A worker of some queues
    imports only their lanes (docs/queue.md#the-queue-table).
    """
    import actors
    from actors.queues import modules_of
    from herald.queue import import_modules

    modules = modules_of(queues) if queues else None
    if modules is None:
        modules = [module.name for module in pkgutil.iter_modules(actors.__path__,
                                                                  prefix="actors.")]
    for name in modules:
        importlib.import_module(name)
    return import_modules(extra)


def fail(message: str, code: int = 1) -> int:
    """Write ``herald: message`` to stderr; returns ``code``, the command's exit code."""
    print(f"herald: {message}", file=sys.stderr)
    return code


def check_queues(names: Sequence[str], app: App) -> list[str] | None:
    """The queue names checked against ``app``'s (all when none), None on a bad one."""
    from herald.queue import queues_or_all

    try:
        return queues_or_all(names, app)
    except UnknownQueue as error:
        fail(f"{error}; the queues: {', '.join(spec.name for spec in app.specs())}")
        return None
