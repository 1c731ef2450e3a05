"""The ``herald`` command: one subcommand per Procfile process, plus operator tools.

::

    herald demo [--jobs N] [--events N] [--batch-size N] [--orders N] [--purchase-orders N]
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

Every command reads the settings first, so an invalid environment variable stops it
with a message naming the variable (exit code 1), and configures logging (to stderr;
a command's own output goes to stdout).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from herald.queue.errors import UnknownQueue
from herald.settings import Settings, load_settings

if TYPE_CHECKING:
    from rich.console import Console

    from herald.queue import Queue
    from herald.queue.registry import Keep, QueueSpec

log = logging.getLogger("herald.cli")

#: Exit code of a usage mistake (argparse's own, also used for unknown queue names).
USAGE_ERROR = 2
#: The Procfile process ``herald up`` runs first, alone, waiting for it to succeed.
RELEASE_PROCESS = "release"
#: How long ``herald up`` lets its processes drain after SIGTERM before killing them
#: (Heroku's own grace period).
UP_SHUTDOWN_GRACE = timedelta(seconds=30)
#: The signals that stop ``herald up`` (honcho passes them on to each process as SIGTERM).
UP_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How long ``herald queues`` waits for Redis before leaving the live counts out.
QUEUES_REDIS_TIMEOUT = timedelta(seconds=1)
#: Characters that make a Procfile command more than one simple command (no ``exec``).
SHELL_SYNTAX = frozenset(";&|<>()`$\n")
#: Width of tables written to a pipe or file (a terminal uses its own width).
PIPE_WIDTH = 240


# -- shared ---------------------------------------------------------------------------
def _configure_logging(settings: Settings) -> None:
    try:
        from herald.logs import configure_logging
    except ImportError:  # pragma: no cover - until herald.logs exists everywhere
        logging.basicConfig(level=settings.log_level, stream=sys.stderr)
        return
    configure_logging(settings)


def _console(max_width: int | None = None) -> Console:
    """The console of a command's output: the terminal's width (at most ``max_width``),
    or :data:`PIPE_WIDTH` (else ``max_width``) for a pipe or file."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        return Console(width=max_width or PIPE_WIDTH)
    if max_width is not None and console.width > max_width:
        return Console(width=max_width)
    return console


def load_actor_modules(extra: Sequence[str] = ()) -> None:
    """Import every module of the ``actors`` package (herald's queue table and the actors
    on it), then ``extra`` (an application's own modules).

    The registry then holds every queue herald ships, so ``herald worker``, ``herald
    queues`` and ``herald clean`` all see the same queues.
    """
    import actors

    for module in pkgutil.iter_modules(actors.__path__, prefix="actors."):
        importlib.import_module(module.name)
    for name in extra:
        importlib.import_module(name)


def _fail(message: str, code: int = 1) -> int:
    print(f"herald: {message}", file=sys.stderr)
    return code


def _check_queues(names: Sequence[str]) -> list[str] | None:
    """The queue names checked against the registry (all when none), None on a bad one."""
    from herald.queue.registry import all_specs
    from herald.queue.worker import queues_or_all

    try:
        return queues_or_all(names)
    except UnknownQueue as error:
        _fail(f"{error}; the queues: {', '.join(spec.name for spec in all_specs())}")
        return None


# -- demo -----------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """``herald demo``: see :mod:`herald.demo`."""
    from herald import demo
    from herald.demo.summary import WIDTH as DEMO_WIDTH

    return demo.run(args.jobs, events=args.events, batch_size=args.batch_size,
                    orders=args.orders, purchase_orders=args.purchase_orders,
                    console=_console(DEMO_WIDTH))


# -- up -------------------------------------------------------------------------------
def _graceful_manager(printer: Any, grace: timedelta, stops: StopSignals) -> Any:
    """A honcho Manager that waits ``grace`` (not honcho's 5 s) before SIGKILL, and that
    a stop signal arriving while its processes start (``stops`` holds one that came just
    before its loop took the signals over) stops them all once started."""
    from honcho.manager import Manager

    class GracefulManager(Manager):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(printer)
            self._terminated_at: float | None = None
            self._killed = False
            self._stop_pending = False

        def terminate(self) -> None:
            if not self._all_started():
                # honcho signals a process by the pid it reports once started (before
                # that it fails with KeyError): stop them when the last one has reported
                self._stop_pending = True
                return
            if self._terminated_at is None:
                self._terminated_at = time.monotonic()
            super().terminate()

        def kill(self) -> None:
            since = time.monotonic() - (self._terminated_at or time.monotonic())
            if self._killed or since < grace.total_seconds():
                return
            self._killed = True
            super().kill()

        def _start(self) -> None:
            super()._start()
            if stops.exit_code is not None:
                self.returncode = stops.exit_code
                self.terminate()

        def _system_print(self, data: str) -> None:
            # honcho prints "<name> started" right after recording that process's pid
            super()._system_print(data)
            if self._stop_pending and self._all_started():
                self._stop_pending = False
                self.terminate()

    return GracefulManager()


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


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    """``herald up``: the release process first, then the others, in one terminal.

    On the embedded default ``herald up`` owns the embedded Redis when it finds none
    running: it starts it before the processes (they share it) and stops it after they
    all ended, unless another process still uses it. A SIGTERM/SIGINT at any moment ends
    it that way. Exit code: 0 when every process it ran exited 0,
    a stop signal included; otherwise the first failing process's code, or honcho's
    128 + signal when a stop signal came and a process did not exit 0.
    """
    from honcho.environ import parse_procfile

    procfile_path = Path(args.procfile)
    if not procfile_path.is_file():
        return _fail(f"no Procfile at {procfile_path.resolve()} (use --procfile)", USAGE_ERROR)
    processes: dict[str, str] = dict(parse_procfile(procfile_path.read_text()).processes)
    if args.names:
        unknown = [name for name in args.names if name not in processes]
        if unknown:
            return _fail(f"not in {procfile_path}: {', '.join(unknown)}", USAGE_ERROR)
        processes = {name: processes[name] for name in args.names}
    environments = process_environments(list(processes), settings)
    cwd = os.getcwd()  # where the embedded default's .herald/ and herald.db live
    stops = StopSignals()
    if settings.embedded_redis:
        from herald.embedded_redis import start_embedded_redis

        # before the processes, which share it; main() stops it after them
        start_embedded_redis()
    return _run_processes(processes, environments, cwd, stops)


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


def _run_processes(processes: dict[str, str], environments: dict[str, dict[str, str]],
                   cwd: str, stops: StopSignals) -> int:
    release = processes.pop(RELEASE_PROCESS, None)
    if release is not None:
        returncode = _run_manager({RELEASE_PROCESS: release}, environments, cwd, stops)
        if stops.exit_code is not None:
            return returncode  # stopped: nothing more starts
        if returncode != 0:
            return _fail(f"{RELEASE_PROCESS} failed (exit code {returncode}); "
                         "not starting the other processes", returncode)
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
    manager = _graceful_manager(Printer(sys.stdout), UP_SHUTDOWN_GRACE, stops)
    for name, command in processes.items():
        manager.add_process(name, exec_form(command), env=environments[name], cwd=cwd)
    try:
        manager.loop()
    finally:
        # honcho leaves its handlers installed, bound to this manager once it has ended
        stops.hold()
    # honcho answers 128 + signal after a stop signal even when every process drained and
    # exited 0: a stop asked for and carried out is a success (README.md, "Commands")
    codes = [process.get("returncode") for process in manager._processes.values()]
    if all(code == 0 for code in codes):
        return 0
    return int(manager.returncode or 0)


# -- processes ------------------------------------------------------------------------
def _exit_normally(signum: int, frame: object) -> None:
    raise SystemExit(0)


def cmd_web(args: argparse.Namespace, settings: Settings) -> int:
    """``herald web``: the HTTP app under uvicorn; a graceful stop (SIGTERM or SIGINT)
    ends the process with 0, as the other processes do."""
    from herald.web import serve

    # uvicorn drains on SIGTERM, then restores the handler it found and raises the signal
    # again: with the default one the process would die of it (-15) after a clean stop
    signal.signal(signal.SIGTERM, _exit_normally)
    serve(args.host, args.port)
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """``herald worker``: run queues in their worker groups (``actors.lifecycle``) until
    SIGTERM/SIGINT, then drain. A failed start, or a taken ``WORKER_PORT``, stops it at
    start with one line saying why (exit code 1)."""
    from herald.health import PortInUse, serve_worker_health
    from herald.process import schedule_as_batch, tune_garbage_collector
    from herald.queue.worker import run_worker_process
    from herald.queue_app import start_queue_app

    if args.app:
        _install_app(args.app)
    else:
        load_actor_modules(args.imports)
    queues = _check_queues(args.queues)
    if queues is None:
        return USAGE_ERROR
    if not args.app:
        start_queue_app(settings)
    tune_garbage_collector()
    if settings.worker_batch_scheduling:
        # before any thread of the worker starts: threads inherit the policy
        schedule_as_batch()
    try:
        # another application's worker serves herald's health port only when asked to
        port = (settings.worker_port if not args.app or "worker_port" in settings.model_fields_set
                else None)
        return run_worker_process(
            queues, imports=args.imports,
            health=None if port is None else lambda lanes: serve_worker_health(
                port, lanes=lanes))
    except PortInUse as error:
        return _fail(f"the worker's health port {error.port} (WORKER_PORT) is already in "
                     "use, by another worker on this machine perhaps; set WORKER_PORT to a "
                     "free port, or WORKER_PORT=0 for any free port")


def _install_app(target: str) -> None:
    """Import ``MODULE:ATTR`` and install the herald.queue App it names (the module
    declares its queues and actors as it is imported)."""
    from herald.queue import App

    module_name, _, attribute = target.partition(":")
    app = getattr(importlib.import_module(module_name), attribute or "app")
    if not isinstance(app, App):
        raise SystemExit(f"herald: {target} is not a herald.queue App")
    app.install()


def cmd_clock(args: argparse.Namespace, settings: Settings) -> int:
    """``herald clock``: fire the declared repeatable schedules until SIGTERM/SIGINT.

    Schedules are declared by the modules of ``actors`` (and ``--import``); see
    :mod:`herald.queue.schedules` for how several clocks share the work without double-firing.
    """
    from herald.queue.schedules import fire_schedules, stop_on_signal
    from herald.queue_app import start_queue_app

    load_actor_modules(args.imports)
    start_queue_app(settings)
    fire_schedules(stop_on_signal())
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    """``herald migrate``: bring the database to the newest schema (idempotent)."""
    from herald.db import migrate

    migrate()
    return 0


# -- operator tools -------------------------------------------------------------------
def format_span(span: timedelta) -> str:
    """A duration in its largest whole unit: ``7d``, ``1h``, ``60s``, ``200ms``."""
    ms = int(span.total_seconds() * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def format_keep(keep: Keep) -> str:
    """One kind of retention: ``7d or 5000``, ``500``, ``removed``, ``kept``."""
    if keep.remove:
        return "removed"
    parts = []
    if keep.age is not None:
        parts.append(format_span(keep.age))
    if keep.count is not None:
        parts.append(str(keep.count))
    return " or ".join(parts) or "kept"


def describe_spec(spec: QueueSpec) -> dict[str, str]:
    """The registry columns of ``herald queues`` for one queue."""
    from herald.queue.registry import Backoff

    if spec.rate_limit is None:
        rate = "—"
    else:
        rate = f"{spec.rate_limit[0]} / {format_span(spec.rate_limit[1])}"
    backoff = {Backoff.EXPONENTIAL: "exp", Backoff.FIXED: "fixed"}.get(spec.backoff)
    groups = [f"{group} {limit}" for group, limit in sorted(spec.group_limits.items())]
    if spec.default_group_limit is not None:
        groups.append(f"others {spec.default_group_limit}")
    return {
        "queue": spec.name,
        "concurrency": str(spec.concurrency) + (f" ({', '.join(groups)})" if groups else ""),
        "rate limit": rate,
        "attempts": str(spec.attempts),
        "backoff": f"{backoff} {format_span(spec.backoff_base)}" if backoff else "none",
        "retention": (f"completed {format_keep(spec.retention.completed)} · "
                      f"failed {format_keep(spec.retention.failed)}"),
        "lock": format_span(spec.lock_duration),
    }


def _redis_reachable(settings: Settings) -> bool:
    """True when Redis answers within :data:`QUEUES_REDIS_TIMEOUT` (never starts the
    embedded server)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from herald.embedded_redis import embedded_socket_path
    from herald.queue.redis import new_redis_client
    from herald.queue_app import queue_config

    timeout = QUEUES_REDIS_TIMEOUT.total_seconds()
    quick: dict[str, Any] = {"socket_connect_timeout": timeout, "socket_timeout": timeout,
                             "retry": Retry(NoBackoff(), 0)}
    try:
        if settings.sentinel_hosts:
            client = new_redis_client(queue_config(settings), socket_timeout=timeout)
        elif settings.redis_url:
            client = redis.Redis.from_url(settings.redis_url, **quick)
        else:
            socket_path = embedded_socket_path()
            if not socket_path.exists():
                return False
            client = redis.Redis(unix_socket_path=str(socket_path), **quick)
        with client:
            return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def cmd_queues(args: argparse.Namespace, settings: Settings) -> int:
    """``herald queues``: the registry as a table, with live counts when Redis answers."""
    import redis
    from rich.table import Table

    from herald.queue import queue
    from herald.queue.registry import all_specs
    from herald.queue_app import describe_redis, start_queue_app

    load_actor_modules(args.imports)
    start_queue_app(settings, start_embedded=False)  # counts only when Redis answers
    specs = all_specs()
    where = describe_redis(settings)
    counts: dict[str, dict[str, int]] | None = None
    if _redis_reachable(settings):
        try:
            counts = {spec.name: queue(spec.name).counts() for spec in specs}
        except redis.RedisError as error:
            log.warning("live counts unavailable: %s", type(error).__name__)
    live_states = ("waiting", "active", "delayed", "failed")
    caption = (f"live counts from Redis at {where}" if counts is not None
               else f"Redis at {where} not reachable: live counts left out")
    table = Table(title=f"herald queues ({len(specs)})", caption=caption)
    for column in describe_spec(specs[0]) if specs else ():
        numeric = column in ("concurrency", "attempts")
        table.add_column(column, no_wrap=column in ("queue", "rate limit", "backoff"),
                         justify="right" if numeric else "left")
    if counts is not None:
        for state in live_states:
            table.add_column(state, justify="right")
    for spec in specs:
        row = list(describe_spec(spec).values())
        if counts is not None:
            live = counts[spec.name]
            row += [f"{live['paused']} paused" if state == "waiting" and live["paused"]
                    else str(live[state]) for state in live_states]
        table.add_row(*row)
    _console().print(table)
    return 0


def cmd_sweep(args: argparse.Namespace, settings: Settings) -> int:
    """``herald sweep``: run the registered sweeps (all when none named) once."""
    from herald.queue.sweeps import registered_sweeps
    from herald.queue_app import start_queue_app

    load_actor_modules()
    start_queue_app(settings)
    sweeps = registered_sweeps()
    if not sweeps:
        print("no sweeps registered yet")
        return 0
    unknown = [name for name in args.names if name not in sweeps]
    if unknown:
        return _fail(f"unknown sweep {unknown[0]!r} (registered: {', '.join(sorted(sweeps))})",
                     USAGE_ERROR)
    for name in args.names or list(sweeps):
        handled = sweeps[name]()
        print(f"{name}: {handled}")
    return 0


def cmd_clean(args: argparse.Namespace, settings: Settings) -> int:
    """``herald clean``: apply each queue's retention now; prints records removed."""
    return _each_queue(args, settings, "removed", lambda q: q.prune())


def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    """``herald retry``: run every failed job of the named queues again, once each;
    prints how many."""
    return _each_queue(args, settings, "retried", lambda q: q.retry_all_failed())


def _each_queue(args: argparse.Namespace, settings: Settings, done: str,
                action: Callable[[Queue], int]) -> int:
    """Run ``action`` on each queue of ``args.queues`` (all when none), printing
    ``<queue>: <done> <n>`` per queue and the total; a Redis error stops with one line."""
    import redis

    from herald.queue import queue
    from herald.queue_app import describe_redis, start_queue_app

    load_actor_modules(args.imports)
    names = _check_queues(args.queues)
    if names is None:
        return USAGE_ERROR
    start_queue_app(settings)
    total = 0
    try:
        for name in names:
            count = action(queue(name))
            total += count
            print(f"{name}: {done} {count}")
    except redis.RedisError as error:
        return _fail(f"Redis at {describe_redis(settings)}: {type(error).__name__}: {error}")
    print(f"total: {done} {total}")
    return 0


# -- parser ---------------------------------------------------------------------------
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


_positive = _at_least(1)


def _batch_size(text: str) -> int:
    from actors.batches import MAX_RECIPIENTS

    return _at_least(1, MAX_RECIPIENTS)(text)


def _orders(text: str) -> int:
    from herald.demo.orders import MAX_ORDERS

    return _at_least(0, MAX_ORDERS)(text)


def _purchase_orders(text: str) -> int:
    from herald.demo.purchasing import MAX_PURCHASE_ORDERS

    return _at_least(0, MAX_PURCHASE_ORDERS)(text)


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
        from herald.queue.sweeps import registered_sweeps

        load_actor_modules()
        names = list(registered_sweeps())
        parser.epilog = "\n  ".join([f"sweeps ({len(names)}):", *names])
        parser.print_help()
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from herald.demo import DEFAULT_JOBS

    parser = argparse.ArgumentParser(
        prog="herald", description="herald: a durable notification and fulfillment pipeline")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = _command(commands, "demo", "push jobs, notifications and eSIM orders through "
                    "the real workers; show a summary",
                    "Run herald's own demo end to end on this machine's herald (the embedded "
                    "default when nothing is set): jobs, notification events, eSIM orders and "
                    "purchase orders through the real workers, then a summary of how each "
                    "ended. Exit code 0 only when everything ended as planned.")
    demo.add_argument("--jobs", type=_positive, default=DEFAULT_JOBS,
                      help=f"jobs to run through the demo queue (default {DEFAULT_JOBS})")
    demo.add_argument("--events", type=_at_least(0),
                      help="domain events to fire (default 200; 0 skips the notification "
                           "phase)")
    demo.add_argument("--batch-size", type=_batch_size,
                      help="accounts in the scheduled batch (default 20)")
    demo.add_argument("--orders", type=_orders,
                      help="eSIM orders to place, paid and issued (default three of each "
                           "mock eSIM product; 0 skips the order phase)")
    demo.add_argument("--purchase-orders", type=_purchase_orders,
                      help="purchase orders to send to the demo's suppliers (default 3; 0 "
                           "skips the purchasing phase)")
    demo.set_defaults(handler=cmd_demo)

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
    up.set_defaults(handler=cmd_up)

    web = _command(commands, "web", "serve the HTTP app",
                   "Serve the HTTP API, the operator console and the health routes under "
                   "uvicorn until SIGTERM/SIGINT, then drain (exit code 0).")
    web.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    web.add_argument("--port", type=_port, default=None, help="port (default $PORT or 8000)")
    web.set_defaults(handler=cmd_web)

    worker = _command(commands, "worker", "run queues (all when none given)",
                      "Consume the named queues (all that have an actor when none is "
                      "named) in their worker groups until SIGTERM/SIGINT, then drain. "
                      "`herald queues` lists the queues.")
    _imports_option(worker, "queues and actors")
    worker.add_argument("--app", metavar="MODULE:ATTR",
                        help="run another application's queues: its herald.queue App "
                             "(herald's own queues and settings are then left out)")
    worker.add_argument("queues", nargs="*", metavar="QUEUE", help="queue names to consume")
    worker.set_defaults(handler=cmd_worker)

    clock = _command(commands, "clock", "fire repeatable schedules",
                     "Fire the declared repeatable schedules (the sweeps, the catalog and "
                     "rate syncs) until SIGTERM/SIGINT; several clocks never fire one tick "
                     "twice.")
    _imports_option(clock, "schedules")
    clock.set_defaults(handler=cmd_clock)

    migrate = _command(commands, "migrate", "bring the database schema to head",
                       "Bring the database (DATABASE_URL, or the embedded default's "
                       "herald.db) to the newest schema. Safe to run again: a database "
                       "already at the newest schema is left as it is.")
    migrate.set_defaults(handler=cmd_migrate)

    queues = _command(commands, "queues", "the queue registry, with live counts",
                      "Print every queue's configuration (concurrency, rate limit, "
                      "attempts, backoff, retention, lock), with live job counts when "
                      "Redis answers (it never starts the embedded Redis).")
    _imports_option(queues, "queues")
    queues.set_defaults(handler=cmd_queues)

    sweep = _command(commands, "sweep", "run the repair sweeps once (`herald sweep --help` "
                     "lists them)",
                     "Run the registered repair sweeps once (all when none is named); each\n"
                     "prints how many items it handled.", add_help=False,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep.add_argument("-h", "--help", action=_SweepHelp,
                       help="show this help message, with every registered sweep, and exit")
    sweep.add_argument("names", nargs="*", metavar="NAME",
                       help="sweeps to run (default: all; see the list below)")
    sweep.set_defaults(handler=cmd_sweep)

    clean = _command(commands, "clean", "apply retention now",
                     "Apply each queue's retention now (all queues when none is named): "
                     "remove the finished job records it no longer keeps; prints how many.")
    _imports_option(clean, "queues")
    clean.add_argument("queues", nargs="*", metavar="QUEUE", help="queues (default: all)")
    clean.set_defaults(handler=cmd_clean)

    retry = _command(commands, "retry", "run the failed jobs of queues again",
                     "Run every failed job of the named queues again, once each; prints "
                     "how many.")
    _imports_option(retry, "queues")
    retry.add_argument("queues", nargs="+", metavar="QUEUE",
                       help="queues whose failed jobs to retry")
    retry.set_defaults(handler=cmd_retry)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``herald`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    settings = load_settings()  # SettingsError (a SystemExit) names the bad variable
    _configure_logging(settings)
    handler: Callable[[argparse.Namespace, Settings], int] = args.handler
    from herald.embedded_redis import owning_embedded_redis
    from herald.queue_app import close_installed_app

    # whichever command starts the embedded Redis stops it when it ends
    with owning_embedded_redis(settings.embedded_redis, close_installed_app):
        return handler(args, settings)


if __name__ == "__main__":
    sys.exit(main())
