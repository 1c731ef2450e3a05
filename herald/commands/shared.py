"""What the ``herald`` subcommands share: their console, their error line and exit codes,
and the actor modules that fill the queue registry."""

from __future__ import annotations

import importlib
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
#: Width of tables written to a pipe or file (a terminal uses its own width).
PIPE_WIDTH = 240


def console(max_width: int | None = None) -> Console:
    """The console of a command's output: the terminal's width (at most ``max_width``),
    or :data:`PIPE_WIDTH` (else ``max_width``) for a pipe or file."""
    from rich.console import Console

    default = Console()
    if not default.is_terminal:
        return Console(width=max_width or PIPE_WIDTH)
    if max_width is not None and default.width > max_width:
        return Console(width=max_width)
    return default


def load_actor_modules(extra: Sequence[str] = ()) -> list[Registry]:
    """Import every module of the ``actors`` package (herald's queue table and the actors
    on it), then ``extra`` (an application's own modules); returns the registries of
    ``extra`` (for the App, beside herald's).

    herald's registry then holds every queue herald ships, so ``herald worker``,
    ``herald queues`` and ``herald clean`` all see the same queues.
    """
    import actors
    from herald.queue import import_modules

    for module in pkgutil.iter_modules(actors.__path__, prefix="actors."):
        importlib.import_module(module.name)
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
