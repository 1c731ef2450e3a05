"""Every place herald relies on Dramatiq's internals, in one module.

herald is a broker and middleware on Dramatiq, not a fork, but five things it does need
more than Dramatiq's public API: a cheaper middleware dispatch on the Redis ledger broker,
a time limit armed only for queues that set one, removing a stopped worker's own
middleware from a broker that outlives it, a shutdown join that honours its total
timeout, and reading (or undoing) the global broker without making a default one (how
:func:`~herald.queue.app.current_app` finds the installed App). Each relies on names
Dramatiq does not promise to keep; ``tests/queue/test_dramatiq_internals.py`` checks them
against the installed Dramatiq, so an upgrade outside :data:`SUPPORTED_DRAMATIQ` fails
there, loudly, in one place.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import dramatiq
import dramatiq.worker
from dramatiq.broker import MessageProxy
from dramatiq.middleware import MiddlewareError, TimeLimit
from dramatiq.worker import _WorkerMiddleware

#: The Dramatiq versions whose internals this module was checked against (the same
#: range as the package's dependency).
SUPPORTED_DRAMATIQ = (">=2.2", "<3")
#: Default time limit of a run when the queue sets none (Dramatiq's TimeLimit needs one).
NO_TIME_LIMIT_MS = 24 * 3600 * 1000


class HookDispatch:
    """Broker mixin: calls only the middleware hooks that are defined.

    Dramatiq calls every middleware's method for every signal, the base class's no-ops
    included (a getattr and a call each, four signals per run). The hooks a middleware
    actually defines are looked up once per signal instead, and again whenever the list
    changes: assigning it resets the lookups, and ``add_middleware`` (which appends)
    changes its length. Relies on ``Broker.__init__`` assigning ``self.middleware`` and on
    ``Broker.logger``.
    """

    _middleware: list[dramatiq.Middleware]
    logger: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: each hook name's middleware count when its hooks were looked up, and the hooks
        self._hooks: dict[str, tuple[int, list[Any]]] = {}
        super().__init__(*args, **kwargs)

    @property
    def middleware(self) -> list[dramatiq.Middleware]:
        """The broker's middleware, in order."""
        return self._middleware

    @middleware.setter
    def middleware(self, value: list[dramatiq.Middleware]) -> None:
        self._middleware = value
        self._hooks = {}

    def _hooks_for(self, name: str, reverse: bool) -> list[Any]:
        middleware = self._middleware
        entry = self._hooks.get(name)
        if entry is None or entry[0] != len(middleware):
            noop = getattr(dramatiq.Middleware, name, None)
            ordered = reversed(middleware) if reverse else middleware
            hooks = [getattr(m, name) for m in ordered
                     if getattr(type(m), name, None) is not noop
                     or name in getattr(m, "__dict__", ())]
            entry = self._hooks[name] = (len(middleware), hooks)
        return entry[1]

    def emit_before(self, signal: str, *args: Any, **kwargs: Any) -> None:
        self._emit("before_" + signal, False, MiddlewareError, args, kwargs)

    def emit_after(self, signal: str, *args: Any, **kwargs: Any) -> None:
        self._emit("after_" + signal, True, (), args, kwargs)

    def _emit(self, name: str, reverse: bool, passed_on: type[Exception] | tuple[()],
              args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Call the hooks of ``name``, as Dramatiq does: a failing hook is logged, except
        that ``passed_on`` errors are raised (a before-hook's MiddlewareError)."""
        for hook in self._hooks_for(name, reverse):
            try:
                hook(self, *args, **kwargs)
            except passed_on:
                raise
            except Exception:
                self.logger.critical("Unexpected failure in %s of %r.", name, hook.__self__,
                                     exc_info=True)


class QueueTimeLimit(TimeLimit):
    """Dramatiq's TimeLimit, armed only for jobs whose queue (or message) sets a limit.

    Most queues set none; arming and disarming a 24-hour timer around every job is pure
    cost on the hot path. Its watchdog thread starts with the first worker (Dramatiq starts
    it on ``process_boot``, which only Dramatiq's own CLI emits).
    """

    def __init__(self, *, time_limit: float = 600000, interval: int = 1000) -> None:
        super().__init__(time_limit=time_limit, interval=interval)
        #: worker threads whose current run has a timer armed
        self._armed: set[int] = set()

    def after_process_boot(self, broker: dramatiq.Broker) -> None:
        # once: Dramatiq's CLI emits process_boot and then worker_boot
        if not getattr(self, "_watching", False):
            self._watching = True
            super().after_process_boot(broker)  # type: ignore[no-untyped-call]  # unannotated

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.after_process_boot(broker)

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        if (message.options.get("time_limit")
                or broker.get_actor(message.actor_name).options.get("time_limit")):
            # (TimeLimit's hooks and its manager are unannotated, and calls through super()
            # are not covered by the untyped_calls_exclude of pyproject.toml)
            super().before_process_message(broker, message)  # type: ignore[no-untyped-call]
            self._armed.add(threading.get_ident())

    def after_process_message(self, broker: dramatiq.Broker, message: MessageProxy, *,
                              result: Any = None, exception: BaseException | None = None,
                              ) -> None:
        # disarm only what was armed: the manager's lock is not free either
        thread = threading.get_ident()
        if thread in self._armed:
            self._armed.discard(thread)
            self.manager.remove_timeout(thread)  # type: ignore[no-untyped-call]  # unannotated

    after_skip_message = after_process_message


def drop_worker_middleware(broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
    """Remove the middleware ``dramatiq.Worker`` added to ``broker`` for ``worker``.

    Dramatiq adds one per started worker and never removes it; a later worker on the same
    broker would otherwise find one of its type (Dramatiq warns "adding a middleware of
    the same type twice") and run its hooks twice. Its only job is done once the worker
    started: adding a consumer for each queue declared by then.
    """
    broker.middleware = [m for m in broker.middleware
                         if not (isinstance(m, _WorkerMiddleware) and m.worker is worker)]


def join_within(joinables: Iterable[Any], timeout: float) -> None:
    """Join every object within ``timeout`` milliseconds in total, measured from the call.

    Dramatiq's own ``join_all`` subtracts the time elapsed since its start from a
    remainder it already reduced, so with several threads the drain ends well before
    the worker's shutdown timeout (a 5 s bound ended after 3 s with eleven threads).
    """
    deadline = time.monotonic() + timeout / 1000
    for joinable in joinables:
        joinable.join(timeout=max(0.0, deadline - time.monotonic()))


def install_deadline_join() -> None:
    """Make ``dramatiq.Worker.stop`` join its threads with :func:`join_within`, so a
    queue's drain bound is the time its runs are given. Idempotent."""
    # (join_all is imported into dramatiq.worker, not exported by it)
    dramatiq.worker.join_all = join_within  # type: ignore[attr-defined]


def installed_broker() -> dramatiq.Broker | None:
    """The broker :func:`dramatiq.set_broker` installed, or None when none was.

    ``dramatiq.get_broker()`` would make a default broker (RabbitMQ on localhost) when
    none is installed; the module variable it reads is read directly instead.
    """
    return dramatiq.broker.global_broker


def uninstall_broker(broker: dramatiq.Broker) -> None:
    """Undo :func:`dramatiq.set_broker` of ``broker`` (nothing when another is installed)."""
    if dramatiq.broker.global_broker is broker:
        dramatiq.broker.global_broker = None
