"""``herald demo``: push a few thousand jobs through the real worker and show what happened.

On the embedded default (no environment needed) the demo starts the embedded Redis,
clears its own ``demo`` queue, enqueues the planned jobs of :mod:`herald.demo.jobs` in
chunks, runs the real Dramatiq worker on the ``demo`` queue in this process with a
progress bar, waits until no job is waiting, delayed or active, and ends with a table
of jobs per queue × state. It succeeds (exit code 0) only when nothing is left
non-terminal and the completed and failed counts are exactly those the plan predicts.
A second run starts from a clean queue and succeeds the same way.

Then the notification phase (:mod:`herald.demo.notifications`, ``--events N``; 0 skips
it) drives real notification traffic through the channel workers, with a scheduled batch
(``--batch-size``), provider callbacks and a lost-job phase the handoff sweep repairs, on
Redis keys of its own and scoped to the rows it made: a user's own queued work in the
same Redis and database is neither run, nor waited for, nor counted.

Then the failover phase (:mod:`herald.demo.failover`, ``--failover-events N``; 0 skips
it) sends email and SMS through the provider chain ``mock-a`` → ``mock-b`` while
``mock-a`` goes down and comes back: the circuit opens, ``mock-b`` carries the sends, the
circuit closes again, and no delivery is accepted twice.

Then the order phase (:mod:`herald.demo.orders`, ``--orders N``; 0 skips it) places and
pays eSIM orders across every behaviour of the mock eSIM provider through the HTTP API,
runs the payment and store queues in a worker process that one product crashes on purpose
(restarted, the order repaired with one charge), and checks that each order ended as its
product plans — with the same isolation.

Then the purchasing phase (:mod:`herald.demo.purchasing`, ``--purchase-orders N``; 0 skips
it) sends purchase orders to Sysco over a real SFTP server and to the email suppliers
through a real SMTP server, both started for the demo, and reroutes a line Sysco's 855
back-orders.

Then the digest and webhooks phase (:mod:`herald.demo.outbound`, ``--digest-events N``;
0 skips it) collects ``account.activity`` events into one digest and sends its email,
whose ``delivery.sent`` message reaches a signed webhook endpoint the demo listens on.

Every row the phases make lives in a database of the demo's own
(:mod:`herald.demo.database`: ``.herald/demo/herald.db``, or the ``herald_demo`` schema
on PostgreSQL), made empty when the demo starts and removed when it ends, on Ctrl-C and
SIGTERM too: the user's database never holds a demo account, supplier or webhook
endpoint.

``--jobs 0`` skips the job phase, as 0 skips each other phase.

The ``demo`` queue is declared by :mod:`herald.demo.jobs`, which only this command
imports: a production worker or ``herald queues`` never sees it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from datetime import timedelta

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from herald.demo.database import DemoDatabaseError, own_database
from herald.embedded_redis import embedded_redis_running, stop_embedded_redis
from herald.queue_app import close_installed_app, describe_redis, start_queue_app
from herald.settings import get_settings

#: Jobs a demo run plans unless told otherwise.
DEFAULT_JOBS = 3000
#: Domain events the notification phase fires unless told otherwise (0 skips the phase).
DEFAULT_EVENTS = 200
#: How long the worker gets to drain the demo queue, at least.
DRAIN_DEADLINE = timedelta(seconds=120)
#: Extra drain time per job planned beyond what the deadline covers (large runs).
DRAIN_TIME_PER_JOB = timedelta(milliseconds=5)
#: How often the progress bar reads the queue's counts.
POLL_INTERVAL = timedelta(milliseconds=100)
#: The states a job can still leave; the demo waits until none of its jobs is in one.
NON_TERMINAL = ("waiting", "delayed", "active", "paused")
#: Column order of the summary table.
STATES = ("waiting", "delayed", "active", "paused", "completed", "failed")
#: Loggers held quiet while the progress bar runs: the planned failures and retries
#: would otherwise log thousands of lines (the summary table reports them instead).
QUIET_DURING_RUN = {"herald.queue.middleware": logging.ERROR,
                    "herald.queue.producer": logging.ERROR,
                    "herald.queue.worker": logging.WARNING, "dramatiq": logging.WARNING,
                    "herald.orchestration": logging.WARNING,
                    "herald.batches": logging.WARNING, "herald.handoffs": logging.WARNING,
                    "herald.digests": logging.WARNING,
                    "herald.callbacks": logging.WARNING,
                    "herald.store": logging.WARNING, "herald.payments": logging.WARNING,
                    "herald.catalog": logging.WARNING, "herald.suppliers": logging.WARNING,
                    # the purchasing phase's SFTP and SMTP servers log every connection
                    "asyncssh": logging.WARNING, "mail.log": logging.WARNING}


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Raise the chatty loggers' levels for the duration of the block."""
    saved = {name: logging.getLogger(name).level for name in QUIET_DURING_RUN}
    for name, level in QUIET_DURING_RUN.items():
        logger = logging.getLogger(name)
        logger.setLevel(max(level, logger.getEffectiveLevel()))
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _deadline(jobs: int) -> timedelta:
    return max(DRAIN_DEADLINE, DRAIN_TIME_PER_JOB * jobs)


def run(jobs: int = DEFAULT_JOBS, *, events: int | None = None, batch_size: int | None = None,
        failover_events: int | None = None, orders: int | None = None,
        purchase_orders: int | None = None, digest_events: int | None = None,
        console: Console | None = None) -> int:
    """Run the demo; returns the process exit code (0 only when every job, delivery and
    order ended as planned). ``events``, ``failover_events``, ``orders``,
    ``purchase_orders`` and ``digest_events`` of 0 skip their phase; None runs it at its
    default size."""
    console = console or Console()
    settings = get_settings()
    if settings.mock_routes_refused and (events != 0 or orders != 0):
        # the demo posts the mock's signed callbacks and webhooks, which do not exist then
        console.print("[red]✗ API_TOKEN is set and MOCK_CALLBACK_SECRET is the public "
                      "default, so the mock's callback routes are off: set "
                      "MOCK_CALLBACK_SECRET too, or unset API_TOKEN[/]")
        return 1
    started_embedded = settings.embedded_redis and not embedded_redis_running()
    try:
        start_queue_app(settings)
        try:
            with own_database(console) as database:
                console.print(f"[dim]the demo's rows live in {database.where}, removed when "
                              "it ends: your own data is never touched[/]")
                code = _run_phases(jobs, events=events, batch_size=batch_size,
                                   failover_events=failover_events, orders=orders,
                                   purchase_orders=purchase_orders,
                                   digest_events=digest_events, console=console)
        except DemoDatabaseError as error:
            console.print(f"[red]✗ {error}[/]")
            return 2
        return code if database.removed else code or 1
    finally:
        close_installed_app()
        if started_embedded:
            stop_embedded_redis()
            console.print("[dim]stopped the embedded Redis this demo started "
                          "(its data stays under .herald/)[/]")


def _run_phases(jobs: int, *, events: int | None, batch_size: int | None,
                failover_events: int | None, orders: int | None,
                purchase_orders: int | None, digest_events: int | None,
                console: Console) -> int:
    """Run each phase not skipped, in order, while the ones before it succeeded."""
    code = _run_jobs(jobs, console) if jobs else 0
    if code == 0 and events != 0:
        from herald.demo.notifications import run_notifications

        with quiet_logs():
            code = run_notifications(DEFAULT_EVENTS if events is None else events,
                                     console, batch_size=batch_size)
    if code == 0 and failover_events != 0:
        from herald.demo.failover import DEFAULT_FAILOVER_EVENTS, run_failover

        with quiet_logs():
            code = run_failover(DEFAULT_FAILOVER_EVENTS if failover_events is None
                                else failover_events, console)
    if code == 0 and orders != 0:
        from herald.demo.orders import DEFAULT_ORDERS, run_orders

        with quiet_logs():
            code = run_orders(DEFAULT_ORDERS if orders is None else orders, console)
    if code == 0 and purchase_orders != 0:
        from herald.demo.purchasing import DEFAULT_PURCHASE_ORDERS, run_purchasing

        with quiet_logs():
            code = run_purchasing(DEFAULT_PURCHASE_ORDERS if purchase_orders is None
                                  else purchase_orders, console)
    if code == 0 and digest_events != 0:
        # last: with fewer events than a full digest it moves queue time ahead
        from herald.demo.outbound import DEFAULT_DIGEST_EVENTS, run_outbound

        with quiet_logs():
            code = run_outbound(DEFAULT_DIGEST_EVENTS if digest_events is None
                                else digest_events, console)
    return code


def _run_jobs(jobs: int, console: Console) -> int:
    from herald.demo import jobs as demo
    from herald.queue import enqueue_many, queue, running_worker

    if not 1 <= jobs <= demo.MAX_DEMO_JOBS:  # 0 skips the phase before it gets here
        console.print(f"[red]--jobs must be 0 or between 1 and {demo.MAX_DEMO_JOBS}[/]")
        return 2
    settings = get_settings()
    console.print(f"[bold]herald demo[/]: {jobs} jobs on the [cyan]{demo.DEMO_QUEUE}[/] queue "
                  f"through the real worker (broker {settings.broker}, Redis "
                  f"{describe_redis(settings)})")
    planned = demo.plan(jobs)
    want = {"completed": 0, "failed": 0}
    for job in planned:
        want[demo.expected_outcome(job)] += 1
    want_retries = sum(demo.expected_retries(job) for job in planned)
    console.print(f"plan: {want['completed']} to complete, {want['failed']} to fail "
                  f"(permanent errors and exhausted attempts), {want_retries} retries on the way")

    demo_queue = queue(demo.DEMO_QUEUE)
    demo_queue.obliterate()
    enqueue_started = time.perf_counter()
    results = enqueue_many(demo.crunch, [(job, {"job_id": demo.job_id(job)}) for job in planned])
    enqueue_s = time.perf_counter() - enqueue_started
    added = sum(result.status == "added" for result in results)
    console.print(f"enqueued {added} jobs in {enqueue_s:.2f} s "
                  f"({added / max(enqueue_s, 1e-9):,.0f} jobs/s)")

    deadline = _deadline(jobs)
    run_started = time.perf_counter()
    drained = False
    with quiet_logs(), Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(),
        MofNCompleteColumn(), TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
        console=console,
    ) as progress, running_worker([demo.DEMO_QUEUE]):
        task = progress.add_task("jobs finished", total=jobs, detail="")
        while time.perf_counter() - run_started < deadline.total_seconds():
            counts = demo_queue.counts()
            finished = counts["completed"] + counts["failed"]
            progress.update(task, completed=min(finished, jobs),
                            detail=f"failed {counts['failed']} · retrying {counts['delayed']}")
            if not any(counts[state] for state in NON_TERMINAL):
                drained = True
                break
            time.sleep(POLL_INTERVAL.total_seconds())
    run_s = time.perf_counter() - run_started

    # the demo's own queue only: the other queues hold the user's jobs, not the demo's
    counts = demo_queue.counts()
    table = Table(title="jobs by queue × state")
    table.add_column("queue", no_wrap=True)
    for state in STATES:
        table.add_column(state, justify="right")
    table.add_row(demo.DEMO_QUEUE, *(str(counts[state]) for state in STATES))
    console.print(table)

    finished = counts["completed"] + counts["failed"]
    retries = int(demo_queue.queries.metrics(demo.DEMO_QUEUE).get("retried", 0))
    console.print(f"wall time {run_s:.2f} s · {finished / max(run_s, 1e-9):,.0f} jobs/s · "
                  f"completed {counts['completed']} (planned {want['completed']}) · "
                  f"failed {counts['failed']} (planned {want['failed']}) · "
                  f"retries {retries} (planned {want_retries})")

    problems = []
    if not drained:
        left = {state: counts[state] for state in NON_TERMINAL if counts[state]}
        problems.append(f"not drained within {deadline.total_seconds():.0f} s: {left}")
    if added != jobs:
        problems.append(f"only {added} of {jobs} jobs were added")
    for state in ("completed", "failed"):
        if counts[state] != want[state]:
            problems.append(f"{counts[state]} {state}, planned {want[state]}")
    if problems:
        for problem in problems:
            console.print(f"[red]✗ {problem}[/]")
        return 1
    console.print("[green]✓ every job ended as planned; nothing left non-terminal[/]")
    return 0
