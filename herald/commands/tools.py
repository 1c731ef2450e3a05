"""The operator tools: ``herald queues`` (the registry as a table, with live counts),
``herald sweep``, ``herald clean`` and ``herald retry``."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from herald.commands.shared import USAGE_ERROR, check_queues, console, fail, load_actor_modules

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from herald.queue import Keep, Queue, QueueSpec
    from herald.settings import Settings

log = logging.getLogger(__name__)

#: How long ``herald queues`` waits for Redis before leaving the live counts out.
QUEUES_REDIS_TIMEOUT = timedelta(seconds=1)
#: The columns ``herald queues`` leaves out, first to last, while its table is wider than
#: the output (``COLUMNS``, else the terminal; docs/queue.md#the-queue-table): the queue
#: and its live counts always stay.
LEFT_OUT_WHEN_NARROW = ("retention", "lock", "backoff", "rate limit", "attempts",
                        "concurrency")
#: The right-aligned columns of ``herald queues``.
NUMERIC_COLUMNS = frozenset({"concurrency", "attempts", "waiting", "active", "delayed",
                             "failed"})


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
    from herald.queue import Backoff

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
    from herald.queue import new_redis_client
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

    from herald.queue import queue
    from herald.queue_app import describe_redis, start_queue_app

    extra = load_actor_modules(args.imports)
    # counts only when Redis answers
    specs = start_queue_app(settings, start_embedded=False, extra=extra).specs()
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
    rows = []
    for spec in specs:
        row = describe_spec(spec)
        if counts is not None:
            live = counts[spec.name]
            row.update({state: f"{live['paused']} paused"
                        if state == "waiting" and live["paused"] else str(live[state])
                        for state in live_states})
        rows.append(row)
    out = console()
    every = list(rows[0]) if rows else []
    left_out: list[str] = []

    def fits(columns: list[str]) -> bool:
        return _natural_width(out, _queues_table(specs, columns, rows, caption)) <= out.width

    # narrower than the table: leave out the least needed columns, one at a time, until
    # it fits (the queue and its live counts always stay); then take back, most needed
    # first, any of them that fits in what is left
    for column in LEFT_OUT_WHEN_NARROW:
        if fits([c for c in every if c not in left_out]):
            break
        left_out.append(column)
    for column in reversed(list(left_out)):
        if fits([c for c in every if c not in left_out or c == column]):
            left_out.remove(column)
    table = _queues_table(specs, [c for c in every if c not in left_out], rows, caption)
    if left_out:
        full = _natural_width(out, _queues_table(specs, every, rows, caption))
        table.caption = (f"{caption}; left out to fit {out.width} columns: "
                         f"{', '.join(left_out)} (COLUMNS={full} shows them)")
    out.print(table)
    return 0


def _queues_table(specs: list[QueueSpec], columns: list[str], rows: list[dict[str, str]],
                  caption: str) -> Table:
    """The ``herald queues`` table of ``columns`` (of ``rows``, one per queue)."""
    from rich.table import Table

    table = Table(title=f"herald queues ({len(specs)})", caption=caption)
    for column in columns:
        numeric = column in NUMERIC_COLUMNS
        # only the retention wraps (at its words): every other value reads whole or not at all
        table.add_column(column, no_wrap=column != "retention",
                         justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(row[column] for column in columns))
    return table


def _natural_width(out: Console, table: Table) -> int:
    """How wide ``table`` is with nothing wrapped."""
    return out.measure(table, options=out.options.update_width(10_000)).maximum


def cmd_sweep(args: argparse.Namespace, settings: Settings) -> int:
    """``herald sweep``: run the registered sweeps (all when none named) once."""
    from herald.queue_app import start_queue_app

    load_actor_modules()
    sweeps = start_queue_app(settings).sweeps()
    if not sweeps:
        print("no sweeps registered yet")
        return 0
    unknown = [name for name in args.names if name not in sweeps]
    if unknown:
        return fail(f"unknown sweep {unknown[0]!r} (registered: {', '.join(sorted(sweeps))})",
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
    from herald.queue_app import build_queue_app, describe_redis, start_queue_app

    extra = load_actor_modules(args.imports)
    # the queues are checked before herald's Redis is started: a typo starts nothing
    names = check_queues(args.queues, build_queue_app(settings, start_embedded=False,
                                                      extra=extra))
    if names is None:
        return USAGE_ERROR
    start_queue_app(settings, extra=extra)
    total = 0
    try:
        for name in names:
            count = action(queue(name))
            total += count
            print(f"{name}: {done} {count}")
    except redis.RedisError as error:
        return fail(f"Redis at {describe_redis(settings)}: {type(error).__name__}: {error}")
    print(f"total: {done} {total}")
    return 0
