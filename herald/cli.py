"""The ``herald`` command: one subcommand per Procfile process, plus operator tools.

::

    herald --version                  the installed herald's version
    herald demo [--jobs N] [--events N] [--batch-size N] [--failover-events N] [--orders N]
                [--purchase-orders N] [--digest-events N]
                                      push jobs, notifications and eSIM orders through the
                                      real workers
    herald up [--procfile P] [NAME…]  run the Procfile's processes in one terminal
    herald web [--host H] [--port N]  the HTTP app
    herald worker [--import M]… [QUEUE…]  run queues (all when none given)
    herald clock [--import M]…        fire the repeatable schedules
    herald migrate                    bring the database schema to head
    herald queues [--import M]…       the registry as a table, with live counts
    herald sweep [NAME…]              run the sweeps once (``handoffs``)
    herald clean [--import M]… [QUEUE…]  apply retention now
    herald retry [--import M]… QUEUE…    run the queues' failed jobs again, once each
    herald secrets rotate             encrypt every stored secret with SECRETS_KEY's newest key

Every command reads the settings first, so an invalid environment variable stops it
with a message naming the variable (exit code 1), as does a PostgreSQL DATABASE_URL
with no REDIS_URL / REDIS_SENTINELS (every command but ``queues``); it configures logging
(to stderr; a command's own output goes to stdout) and warns of each variable that looks
like a herald setting but is none. This module parses the arguments and hands them
to the command's function (:mod:`herald.commands`), importing only that command's module:
a worker's start pays for no other command's imports (docs/queue.md#the-queue-table).

A command told to import an application's modules (``--app MODULE:ATTR``, ``--import
MODULE``) finds them in the current directory first, as ``dramatiq`` and ``python -m`` do.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herald.settings import Settings

#: Each subcommand's function, as ``module:function`` of :mod:`herald.commands`.
HANDLERS = {
    "demo": "herald.commands.demo:cmd_demo",
    "up": "herald.commands.up:cmd_up",
    "web": "herald.commands.processes:cmd_web",
    "worker": "herald.commands.processes:cmd_worker",
    "clock": "herald.commands.processes:cmd_clock",
    "migrate": "herald.commands.processes:cmd_migrate",
    "queues": "herald.commands.tools:cmd_queues",
    "sweep": "herald.commands.tools:cmd_sweep",
    "clean": "herald.commands.tools:cmd_clean",
    "retry": "herald.commands.tools:cmd_retry",
    "secrets": "herald.commands.secrets:cmd_secrets",
}
#: The commands that need no shared Redis: ``queues`` prints the registry (with counts
#: only when a Redis answers), ``secrets`` works on the database alone, and ``demo`` is one
#: process whose jobs live under its own prefix (an embedded Redis serves it anywhere).
#: Every other one refuses to start outside the embedded default while no Redis is named
#: (:func:`_check_deployment`).
WITHOUT_HERALD_REDIS = frozenset({"queues", "secrets", "demo"})
#: The commands whose start ends in :func:`herald.process.tune_garbage_collector`, which
#: collects once and sets the collector's thresholds again: until then their start runs
#: with the collector paused (:func:`main`).
COLLECTED_AT_THEIR_START = frozenset({"worker"})


def _configure_logging(settings: Settings) -> None:
    try:
        from herald.logs import configure_logging
    except ImportError:  # pragma: no cover - until herald.logs exists everywhere
        logging.basicConfig(level=settings.log_level, stream=sys.stderr)
        return
    configure_logging(settings)


def _check_deployment(args: argparse.Namespace, settings: Settings) -> None:
    """Warn of each variable that looks like a herald setting but is none, naming the
    closest known one; refuse (:class:`~herald.settings.SettingsError`, exit code 1) a
    command that would use Redis outside the embedded default with no Redis named
    (:func:`~herald.settings.shared_redis_problem`)."""
    import os

    from herald.settings import SettingsError, shared_redis_problem, unknown_settings

    for variable, closest in unknown_settings(os.environ):
        logging.getLogger("herald.settings").warning(
            "%s is not a herald setting and is ignored; did you mean %s?", variable, closest)
    if args.command in WITHOUT_HERALD_REDIS or getattr(args, "app", None):
        return  # the registry table needs no Redis; another App brings its own
    problem = shared_redis_problem(settings)
    if problem is not None:
        raise SettingsError(f"herald {args.command}: {problem}")


def _imports_option(command: argparse.ArgumentParser, declares: str) -> None:
    """``--import MODULE`` (repeatable): modules of an application that extends herald."""
    command.add_argument("--import", dest="imports", action="append", default=[],
                         metavar="MODULE",
                         help=f"import a module that declares {declares} (repeatable)")


def _at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``low`` (and at most ``high``)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}")
        return value
    return parse


def _demo_jobs(text: str) -> int:
    from herald.demo.jobs import MAX_DEMO_JOBS

    return _at_least(0, MAX_DEMO_JOBS)(text)


def _batch_size(text: str) -> int:
    from actors.batches import MAX_RECIPIENTS

    return _at_least(1, MAX_RECIPIENTS)(text)


def _failover_events(text: str) -> int:
    from herald.demo.failover import MAX_FAILOVER_EVENTS, MIN_FAILOVER_EVENTS

    value = _at_least(0, MAX_FAILOVER_EVENTS)(text)
    if 0 < value < MIN_FAILOVER_EVENTS:
        raise argparse.ArgumentTypeError(f"must be 0 or at least {MIN_FAILOVER_EVENTS}")
    return value


def _orders(text: str) -> int:
    from herald.demo.orders import MAX_ORDERS

    return _at_least(0, MAX_ORDERS)(text)


def _purchase_orders(text: str) -> int:
    from herald.demo.purchasing import MAX_PURCHASE_ORDERS

    return _at_least(0, MAX_PURCHASE_ORDERS)(text)


def _digest_events(text: str) -> int:
    from herald.demo.outbound import MAX_DIGEST_EVENTS

    return _at_least(0, MAX_DIGEST_EVENTS)(text)


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be 0..65535")
    return value


def _command(commands: Any, name: str, summary: str, description: str,
             **options: Any) -> argparse.ArgumentParser:
    """A subcommand: ``summary`` in ``herald --help``, ``description`` in its own help."""
    command: argparse.ArgumentParser = commands.add_parser(
        name, help=summary, description=description, **options)
    return command


class _SweepHelp(argparse.Action):
    """``herald sweep --help``: the help, with every sweep of the registry (the actor
    modules are imported only then: they register the sweeps)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None,
                 ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from actors.queues import registry
        from herald.commands.shared import load_actor_modules

        load_actor_modules()
        names = list(registry.sweeps())
        parser.epilog = "\n  ".join([f"sweeps ({len(names)}):", *names])
        parser.print_help()
        parser.exit()


class _Version(argparse.Action):
    """``herald --version``: the installed distribution's version (read only when asked:
    no other command pays for the metadata lookup)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None,
                 ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("herald")
        except PackageNotFoundError:  # run from a checkout that was never installed
            installed = "unknown (not installed)"
        print(f"herald {installed}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="herald", description="herald: a durable notification and fulfillment pipeline")
    parser.add_argument("--version", action=_Version, help="print herald's version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = _command(commands, "demo", "push jobs, notifications and eSIM orders through "
                    "the real workers; show a summary",
                    "Run herald's own demo end to end on this machine's herald (the embedded "
                    "default when nothing is set): jobs, notification events, eSIM orders and "
                    "purchase orders through the real workers, then a summary of how each "
                    "ended. Its rows live in a database of its own (.herald/demo/herald.db, "
                    "or the herald_demo schema on PostgreSQL), removed when it ends, on "
                    "Ctrl-C and SIGTERM too. Exit code 0 only when everything ended as "
                    "planned; 130 on Ctrl-C, 143 on SIGTERM.")
    # the default is the demo's own (herald.demo.DEFAULT_JOBS), not imported here: the
    # demo's module loads rich, which no other command's start should pay for
    demo.add_argument("--jobs", type=_demo_jobs,
                      help="jobs to run through the demo queue (default 3000; 0 skips the "
                           "job phase)")
    demo.add_argument("--events", type=_at_least(0),
                      help="domain events to fire (default 200; 0 skips the notification "
                           "phase)")
    demo.add_argument("--batch-size", type=_batch_size,
                      help="accounts in the scheduled batch (default 20)")
    demo.add_argument("--failover-events", type=_failover_events,
                      help="events to send through the provider chain mock-a → mock-b while "
                           "mock-a goes down and comes back (default 120; 0 skips the "
                           "failover phase)")
    demo.add_argument("--orders", type=_orders,
                      help="eSIM orders to place, paid and issued (default three of each "
                           "mock eSIM product; 0 skips the order phase)")
    demo.add_argument("--purchase-orders", type=_purchase_orders,
                      help="purchase orders to send to the demo's suppliers (default 3; 0 "
                           "skips the purchasing phase)")
    demo.add_argument("--digest-events", type=_digest_events,
                      help="account.activity events collected into one digest, whose email's "
                           "delivery.sent goes to a signed webhook endpoint (default 50; 0 "
                           "skips the digest and webhooks phase)")

    up = _command(commands, "up", "run the Procfile's processes in one terminal",
                  "Run the Procfile's release process, then the others, in one terminal "
                  "until SIGTERM/SIGINT (Ctrl-C) or one of them ends; on the embedded "
                  "default it starts the embedded Redis first and stops it last.")
    up.epilog = ("exit code: 0 when every process exited 0 (after SIGTERM/SIGINT too); "
                 "otherwise the first failing process's code, or 128 + the signal (143 "
                 "SIGTERM, 130 SIGINT) when a stop signal came and a process did not exit 0")
    up.add_argument("--procfile", default="Procfile", help="path of the Procfile")
    up.add_argument("names", nargs="*", metavar="NAME",
                    help="Procfile processes to run (default: all)")

    web = _command(commands, "web", "serve the HTTP app",
                   "Serve the HTTP API, the operator console and the health routes under "
                   "uvicorn until SIGTERM/SIGINT, then drain (exit code 0).")
    web.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    web.add_argument("--port", type=_port, default=None, help="port (default $PORT or 8000)")

    worker = _command(commands, "worker", "run queues (all when none given)",
                      "Consume the named queues (all that have an actor when none is "
                      "named) in their capsules until SIGTERM/SIGINT, then drain. "
                      "`herald queues` lists the queues.")
    _imports_option(worker, "queues and actors")
    worker.add_argument("--app", metavar="MODULE:ATTR",
                        help="run another application's queues: its herald.queue App "
                             "(herald's own queues and settings are then left out)")
    worker.add_argument("queues", nargs="*", metavar="QUEUE", help="queue names to consume")

    clock = _command(commands, "clock", "fire repeatable schedules",
                     "Fire the declared repeatable schedules (the sweeps, the catalog and "
                     "rate syncs) until SIGTERM/SIGINT; several clocks never fire one tick "
                     "twice.")
    _imports_option(clock, "schedules")

    _command(commands, "migrate", "bring the database schema to head",
             "Bring the database (DATABASE_URL, or the embedded default's herald.db) to "
             "the newest schema. Safe to run again: a database already at the newest "
             "schema is left as it is.")

    queues = _command(commands, "queues", "the queue registry, with live counts",
                      "Print every queue's configuration (concurrency, rate limit, "
                      "attempts, backoff, retention, lock), with live job counts when "
                      "Redis answers (it never starts the embedded Redis).")
    _imports_option(queues, "queues")

    sweep = _command(commands, "sweep", "run the repair sweeps once (`herald sweep --help` "
                     "lists them)",
                     "Run the registered repair sweeps once (all when none is named); each\n"
                     "prints how many items it handled.", add_help=False,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep.add_argument("-h", "--help", action=_SweepHelp,
                       help="show this help message, with every registered sweep, and exit")
    sweep.add_argument("names", nargs="*", metavar="NAME",
                       help="sweeps to run (default: all; see the list below)")

    clean = _command(commands, "clean", "apply retention now",
                     "Apply each queue's retention now (all queues when none is named): "
                     "remove the finished job records it no longer keeps; prints how many.")
    _imports_option(clean, "queues")
    clean.add_argument("queues", nargs="*", metavar="QUEUE", help="queues (default: all)")

    retry = _command(commands, "retry", "run the failed jobs of queues again",
                     "Run every failed job of the named queues again, once each; prints "
                     "how many.")
    _imports_option(retry, "queues")
    retry.add_argument("queues", nargs="+", metavar="QUEUE",
                       help="queues whose failed jobs to retry")

    secrets = _command(commands, "secrets", "encrypt the stored secrets with SECRETS_KEY's "
                       "newest key",
                       "rotate: encrypt every secret herald stores (webhook signing "
                       "secrets, SFTP passwords, idempotent answers) with the first key of "
                       "SECRETS_KEY: those stored in clear, and those encrypted with an "
                       "older key. Safe to run again. Prints the counts per kind.")
    secrets.add_argument("action", choices=["rotate"], help="what to do (rotate)")
    return parser


def _current_directory_first(args: argparse.Namespace) -> None:
    """When the command imports an application's modules (``--app``, ``--import``), put
    the current directory first on ``sys.path``, as ``dramatiq`` does: ``herald worker
    --app examples.standalone.app:app`` then finds ``examples`` from the repository root.
    A console script's path starts at its own bin directory, not at the current one
    (``python -m herald.cli`` already has it; it is not added twice)."""
    if not (getattr(args, "app", None) or getattr(args, "imports", None)):
        return
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _missing_module(args: argparse.Namespace) -> str | None:
    """The first module named by ``--app``/``--import`` that is nowhere to be found (in the
    current directory or on the path), else None."""
    import importlib.util

    app = getattr(args, "app", None)
    names = [*getattr(args, "imports", []), *([app.partition(":")[0]] if app else [])]
    for name in names:
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # a parent package of it is missing
            found = None
        if found is None:
            return str(name)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``herald`` console script; returns the exit code."""
    # No automatic collection while the command starts: its imports build some hundred
    # thousand objects that live as long as the process, and the collector walked them all
    # again and again, a fifth of a worker's start (bench/README.md, "Start-up"). A
    # worker collects once at the end of its start; every other command gets the
    # thresholds back before it runs.
    thresholds = gc.get_threshold()
    gc.set_threshold(0)
    try:
        from herald.process import quiet_known_warnings
        from herald.settings import load_settings

        quiet_known_warnings()  # before any command imports asyncssh
        args = build_parser().parse_args(argv)
        _current_directory_first(args)
        missing = _missing_module(args)
        if missing is not None:
            print(f"herald: no module named {missing!r} in the current directory "
                  f"({os.getcwd()}) or on the Python path", file=sys.stderr)
            return 2  # a usage mistake, as argparse's own
        settings = load_settings()  # SettingsError (a SystemExit) names the bad variable
        _configure_logging(settings)
        _check_deployment(args, settings)
        module, _, function = HANDLERS[args.command].partition(":")
        handler: Callable[[argparse.Namespace, Settings], int] = getattr(
            importlib.import_module(module), function)
        from herald.embedded_redis import owning_embedded_redis
        from herald.queue_app import close_installed_app

        if args.command not in COLLECTED_AT_THEIR_START:
            gc.set_threshold(*thresholds)
        # whichever command starts the embedded Redis stops it when it ends
        with owning_embedded_redis(settings.embedded_redis, close_installed_app):
            return handler(args, settings)
    finally:
        if gc.get_threshold()[0] == 0:  # a start that ended early, or a caller's own
            gc.set_threshold(*thresholds)


if __name__ == "__main__":
    sys.exit(main())
