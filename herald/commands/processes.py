"""The Procfile's processes: ``herald web``, ``herald worker``, ``herald clock`` and the
release process, ``herald migrate``."""

from __future__ import annotations

import argparse
import errno
import importlib
import signal
import socket
from typing import TYPE_CHECKING

from herald.commands.shared import USAGE_ERROR, check_queues, fail, load_actor_modules

if TYPE_CHECKING:
    from herald.settings import Settings


def _exit_normally(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _cannot_listen(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, as one line for the operator, or None
    when it can. Binds a socket as uvicorn does (``SO_REUSEADDR``), then closes it."""
    if port == 0:  # any free port
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return (f"port {port} is already in use, by another herald web perhaps; "
                        "set PORT (or --port) to a free port")
            return f"cannot listen on {host} port {port} (PORT, --host/--port): {error.strerror}"
    return None


def cmd_web(args: argparse.Namespace, settings: Settings) -> int:
    """``herald web``: the HTTP app under uvicorn; a graceful stop (SIGTERM or SIGINT)
    ends the process with 0, as the other processes do. A port it cannot listen on (taken,
    or not allowed) stops it at start with one line naming the port (exit code 1)."""
    from herald.web import serve

    # uvicorn would say only "[Errno 98] Address already in use", naming no port
    problem = _cannot_listen(args.host, settings.port if args.port is None else args.port)
    if problem is not None:
        return fail(problem)
    # uvicorn drains on SIGTERM, then restores the handler it found and raises the signal
    # again: with the default one the process would die of it (-15) after a clean stop
    signal.signal(signal.SIGTERM, _exit_normally)
    serve(args.host, args.port)
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """``herald worker``: run queues in their capsules (``actors.lifecycle``) until
    SIGTERM/SIGINT, then drain. A failed start, or a taken ``WORKER_PORT``, stops it at
    start with one line saying why (exit code 1)."""
    from herald.health import PortInUse, serve_worker_health
    from herald.process import schedule_as_batch, tune_garbage_collector
    from herald.queue import current_app, run_worker_process
    from herald.queue_app import build_queue_app, start_queue_app

    if args.app:
        _install_app(args.app)
        queues = check_queues(args.queues, current_app())
    else:
        # only the lanes of the named queues: their start is what a restart waits for
        extra = load_actor_modules(args.imports, queues=args.queues)
        # the queues are checked before herald's Redis is started: a typo starts nothing
        queues = check_queues(args.queues, build_queue_app(settings, start_embedded=False,
                                                           extra=extra))
    if queues is None:
        return USAGE_ERROR
    if not args.app:
        start_queue_app(settings, extra=extra)
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
            health=None if port is None else lambda queues: serve_worker_health(
                port, queues=queues))
    except PortInUse as error:
        return fail(f"the worker's health port {error.port} (WORKER_PORT) is already in "
                     "use, by another worker on this machine perhaps; set WORKER_PORT to a "
                     "free port, or WORKER_PORT=0 for any free port")


def _install_app(target: str) -> None:
    """Import ``MODULE:ATTR`` and install the herald.queue App it names (the module
    declares its queues and actors as it is imported)."""
    from herald.queue import App

    module_name, _, attribute = target.partition(":")
    app = getattr(importlib.import_module(module_name), attribute or "app", None)
    if not isinstance(app, App):
        raise SystemExit(f"herald: {target} is not a herald.queue App")
    app.install()


def cmd_clock(args: argparse.Namespace, settings: Settings) -> int:
    """``herald clock``: fire the declared repeatable schedules until SIGTERM/SIGINT.

    Schedules are declared by the modules of ``actors`` (and ``--import``); see
    :mod:`herald.queue.schedules` for how several clocks share the work without double-firing.
    """
    from herald.queue import fire_schedules, stop_on_signal
    from herald.queue_app import start_queue_app

    start_queue_app(settings, extra=load_actor_modules(args.imports))
    fire_schedules(stop_on_signal())
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    """``herald migrate``: bring the database to the newest schema (idempotent). Exit code
    1, and nothing changed, when secrets stored in clear must be encrypted and there is
    no key to encrypt them with (docs/configuration.md#secrets_key)."""
    from herald.db import migrate
    from herald.secrets_box import SecretsKeyMissing

    try:
        migrate()
    except SecretsKeyMissing as error:
        return fail(str(error))
    return 0
