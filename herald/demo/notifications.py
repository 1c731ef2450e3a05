"""The demo's notification phase: accounts, events over email, SMS and in-app, a scheduled
batch, the mock provider failing some sends, provider callbacks, and a lost-job phase the
handoff sweep repairs — with the real channel and orchestration workers until every
delivery is final.

Runs on whatever database and Redis herald is configured for (the embedded default:
SQLite ``./herald.db`` and the embedded Redis). The registry's provider rate limits are
lifted for the run, as the benchmark does; everything else is the production path:
callbacks go through the HTTP route with the mock's signature, the sweep is the one the
clock runs (with its handoff age shortened, since the demo cannot wait 15 minutes).

The phase touches only what it made. Its jobs and the mock provider's records live under
a key prefix of its own (``QUEUE_PREFIX`` + ``-demo``), so its workers never take a job
the user queued; its sweep, its waits and its summary are scoped to its own accounts and
batch, so a user's queued deliveries or unmatched receipts in the same database are
neither sent, nor waited for, nor counted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import func
from sqlmodel import col, select

import actors  # noqa: F401  (registers herald's queue table)
from herald.demo.summary import counts_text

if TYPE_CHECKING:
    from actors.handoffs import Scope

#: Accounts the demo seeds per run (at least the batch size).
DEMO_ACCOUNTS = 60
#: Every n-th account is inactive, opted out of marketing, or has no phone number.
INACTIVE_EVERY, OPTED_OUT_EVERY, NO_PHONE_EVERY = 10, 7, 9
#: Every n-th account's address fails once transiently, or for good, at the mock provider.
TRANSIENT_EVERY, TERMINAL_EVERY = 6, 13
#: Every n-th event loses its channel jobs (as if Redis lost them) for the sweep to repair.
LOST_EVERY = 25
#: Accounts in the scheduled batch unless told otherwise, and how far ahead it is due.
DEFAULT_BATCH_SIZE = 20
BATCH_DUE_IN = timedelta(seconds=3)
#: The handoff age of the demo's sweep, and how often it runs.
DEMO_SWEEP_AGE = timedelta(seconds=2)
DEMO_SWEEP_EVERY = timedelta(seconds=1)
#: How long the workers get to settle every delivery.
SETTLE_DEADLINE = timedelta(seconds=180)
QUEUES = ("notification-email", "notification-sms", "notification-orchestration")
OUTCOMES = ("queued", "sending", "sent", "delivered", "failed_terminal", "suppressed")
OPEN_OUTCOMES = ("queued", "sending")
EVENT_MIX: tuple[tuple[str, dict[str, Any]], ...] = (
    ("account.welcome", {}),
    ("payment.receipt", {"amount": "49.00", "currency": "SAR", "order_id": "demo-order"}),
    ("esim.ready", {"iccid": "8966000000000000001", "activation_code": "LPA:1$smdp.io$DEMO"}),
    ("promo.offer", {"headline": "Spring data bundle", "code": "SPRING10"}),
)
#: Appended to QUEUE_PREFIX for the phase's own Redis keys (its queues, the mock's records).
NAMESPACE_SUFFIX = "-demo"


def _reload_settings() -> None:
    from herald.queue_app import reinstall_queue_app
    from herald.settings import reset_settings

    reset_settings()
    reinstall_queue_app()


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Run the block with these variables set in this process's environment and the
    settings read again; every earlier value (in any spelling of the name: they are
    case-insensitive) is restored after, and the settings read again."""
    wanted = {name.upper() for name in values}
    saved = {name: os.environ.pop(name) for name in list(os.environ)
             if name.upper() in wanted}
    os.environ.update(values)
    _reload_settings()
    try:
        yield
    finally:
        for name in values:
            os.environ.pop(name, None)
        os.environ.update(saved)
        _reload_settings()


@contextlib.contextmanager
def own_namespace(queues: Sequence[str] = QUEUES) -> Iterator[str]:
    """Run the block with this process's ledger, broker and mock provider under the demo's
    own key prefix (yielded); the queues under the configured prefix are left alone.

    ``queues`` of that prefix start empty: a job an earlier, interrupted demo left there
    is not this run's. They are emptied again when the block ends (on Ctrl-C too): no job
    or message of the demo's stays queued.
    """
    import redis

    from herald.queue import queue
    from herald.settings import get_settings
    from providers.mock import MockProvider

    prefix = get_settings().queue_prefix + NAMESPACE_SUFFIX
    with environment(QUEUE_PREFIX=prefix):
        for name in queues:
            queue(name).obliterate()
        MockProvider.reset()
        try:
            yield prefix
        finally:
            # a Redis gone by now keeps them until the next run's obliterate above
            with contextlib.suppress(redis.RedisError):
                for name in queues:
                    queue(name).obliterate()


def _seed_accounts(run_id: str, count: int) -> list[str]:
    from actors.orchestration import create_account
    from providers.mock import MockProvider

    ids = []
    for n in range(count):
        email = f"demo{n}.{run_id}@example.com"
        # +9665 and 8 digits: this run's number, then the account's
        phone = (None if n % NO_PHONE_EVERY == 4
                 else f"+9665{int(run_id, 16) % 10**5:05d}{n:03d}")
        account = create_account(email=email, phone=phone, locale="ar" if n % 3 == 0 else "en",
                                 active=n % INACTIVE_EVERY != 3,
                                 marketing_opt_out=n % OPTED_OUT_EVERY == 2)
        if n % TRANSIENT_EVERY == 1:
            MockProvider.script(email, "transient:1")
        if n % TERMINAL_EVERY == 5 and phone:
            MockProvider.script(phone, "terminal")
        ids.append(account.id)
    return ids


def _fire_events(run_id: str, events: int, accounts: list[str]) -> int:
    """Fire the events; every LOST_EVERY-th loses its channel jobs. Returns jobs lost."""
    from actors.notifications import CHANNEL_QUEUES
    from actors.orchestration import trigger_event
    from herald.queue import queue

    lost = 0
    for n in range(events):
        type_name, data = EVENT_MIX[n % len(EVENT_MIX)]
        result = trigger_event(account_id=accounts[n % len(accounts)], type=type_name,
                               occurrence=f"{run_id}-{n}", data=data,
                               urgency="urgent" if n % 10 == 0 else "normal")
        if n % LOST_EVERY == LOST_EVERY - 1:
            for delivery in result.deliveries:
                if delivery.channel in CHANNEL_QUEUES:
                    lost += queue(CHANNEL_QUEUES[delivery.channel]).remove(delivery.id)
    return lost


@dataclasses.dataclass
class Progressed:
    """What the phase has done so far while the workers run."""

    callbacks_posted: set[str] = dataclasses.field(default_factory=set)
    sweeps: int = 0
    recreated: int = 0
    last_sweep: float = 0.0


def _post_callbacks(client: Any, done: Progressed) -> int:
    """Post a signed "delivered" receipt for every accepted send not yet reported; returns
    how many sends the provider has accepted."""
    from providers.mock import MockProvider, signed_callback

    sends = MockProvider.sends(accepted_only=True)
    for send in sends:
        if send["provider_message_id"] in done.callbacks_posted:
            continue
        body, headers = signed_callback(send, "delivered")
        response = client.post("/v1/callbacks/mock", content=body, headers=headers)
        if response.status_code in (200, 202):
            done.callbacks_posted.add(send["provider_message_id"])
    return len(sends)


def _sweep(done: Progressed, scope: Scope) -> None:
    from actors.handoffs import reconcile_handoffs

    if time.monotonic() - done.last_sweep < DEMO_SWEEP_EVERY.total_seconds():
        return
    done.last_sweep = time.monotonic()
    report = reconcile_handoffs(age=DEMO_SWEEP_AGE, scope=scope)
    done.sweeps += 1
    done.recreated += report.recreated


def tally(scope: Scope) -> Counter[tuple[str, str]]:
    """The deliveries of ``scope`` by (channel, outcome), counted in one query."""
    from herald.db import session as db_session
    from models.notifications import Delivery

    with db_session() as session:
        rows = session.exec(
            select(Delivery.channel, Delivery.outcome, func.count())
            .where(scope.deliveries())
            .group_by(Delivery.channel, Delivery.outcome)).all()
    return Counter({(channel, outcome): count for channel, outcome, count in rows})


def run_notifications(events: int, console: Console, *, batch_size: int | None = None) -> int:
    """Run the notification phase; returns 0 when every delivery it made ended final, its
    batch finished, every callback it posted was processed and the provider accepted
    exactly its deliveries recorded as sent or delivered (and nothing else)."""
    from actors.queues import registry

    with own_namespace() as prefix, registry.redeclared(QUEUES, rate_limit=None):
        return _run(events, console, batch_size or DEFAULT_BATCH_SIZE, prefix)


def _run(events: int, console: Console, batch_size: int, prefix: str) -> int:
    with warnings.catch_warnings():  # starlette's note about its httpx client, not ours
        warnings.filterwarnings("ignore", message=".*httpx.*")
        from fastapi.testclient import TestClient

    from actors.batches import create_batch, get_batch
    from actors.handoffs import Scope
    from herald.db import migrate
    from herald.db import session as db_session
    from herald.queue import running_worker
    from herald.web import create_app
    from models.base import utcnow
    from models.callbacks import CallbackReceipt
    from models.notifications import Delivery
    from providers.mock import MockProvider

    migrate()
    run_id = uuid.uuid4().hex[:8]
    accounts = _seed_accounts(run_id, max(DEMO_ACCOUNTS, batch_size))
    console.print(f"[bold]notifications[/]: {len(accounts)} accounts, {events} events over "
                  f"email, SMS and in-app, a batch of {batch_size} due in "
                  f"{BATCH_DUE_IN.seconds} s (mock provider; provider rate limits lifted; "
                  f"jobs under the key prefix {prefix!r})")
    started = time.perf_counter()
    lost = _fire_events(run_id, events, accounts)
    batch = create_batch(type="promo.offer", account_ids=accounts[:batch_size],
                         data={"headline": "Weekend roaming pass", "code": "ROAM5"},
                         scheduled_at=utcnow() + BATCH_DUE_IN).batch
    console.print(f"accepted {events} events in {time.perf_counter() - started:.2f} s; "
                  f"{lost} channel jobs then lost on purpose (the sweep must repair them)")
    # every wait, count and repair below reads this run's rows only
    scope = Scope.of(accounts, [batch.id])

    def unprocessed_receipts() -> int:
        with db_session() as session:
            return session.exec(select(func.count()).select_from(CallbackReceipt).where(
                col(CallbackReceipt.processed_at).is_(None), scope.receipts())).one()

    # the batch adds its deliveries when it runs: the bar grows with them
    expected = sum(tally(scope).values())
    done = Progressed()
    settled_at = None
    client = TestClient(create_app())
    with Progress(TextColumn("deliveries final"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress, \
            running_worker(list(QUEUES)):
        task = progress.add_task("deliveries", total=expected)
        while time.perf_counter() - started < SETTLE_DEADLINE.total_seconds():
            accepted = _post_callbacks(client, done)
            counts = tally(scope)
            total = sum(counts.values())
            open_ = sum(n for (_, outcome), n in counts.items() if outcome in OPEN_OUTCOMES)
            progress.update(task, total=total, completed=total - open_)
            report = get_batch(batch.id)
            batch_done = report is not None and report.batch.status == "finished"
            # the lost-job phase: once the traffic that still has its jobs has drained (or
            # after a while regardless), the sweep repairs what lost them, like the clock
            # would minutes later
            if (batch_done and open_ <= lost) or time.perf_counter() - started > 30:
                _sweep(done, scope)
            if (open_ == 0 and batch_done and len(done.callbacks_posted) == accepted
                    and unprocessed_receipts() == 0 and counts[("email", "sent")] +
                    counts[("sms", "sent")] == 0):
                settled_at = time.perf_counter()
                break
            time.sleep(0.2)
    counts = tally(scope)
    print_deliveries(console, counts)
    report = get_batch(batch.id)
    assert report is not None
    enqueued = "all enqueued" if report.batch.fully_enqueued else "not all enqueued"
    console.print(f"batch {batch.id[:8]}: {report.batch.status}, "
                  f"{report.batch.notification_count} notifications ({enqueued}); its "
                  f"deliveries: {counts_text(report.delivery_summary, OUTCOMES)}")
    console.print(f"callbacks: {len(done.callbacks_posted)} signed receipts posted · sweep: "
                  f"{done.sweeps} runs re-created {done.recreated} lost jobs ({lost} lost)")
    total = sum(counts.values())
    reached = sum(n for (channel, outcome), n in counts.items()
                  if channel != "in_app" and outcome in ("sent", "delivered"))
    with db_session() as session:
        ours = set(session.exec(select(Delivery.id).where(scope.deliveries())).all())
    sends = MockProvider.sends(accepted_only=True)
    accepted = sum(1 for send in sends if send["idempotency_key"] in ours)
    elapsed = (settled_at or time.perf_counter()) - started
    console.print(f"{total} deliveries final in {elapsed:.2f} s "
                  f"({total / max(elapsed, 1e-9):,.0f} deliveries/s) · provider accepted "
                  f"{accepted}, deliveries sent or delivered {reached}")
    problems = []
    if len(sends) > accepted:
        problems.append(f"the provider accepted {len(sends) - accepted} sends for "
                        "deliveries this demo did not make")
    if settled_at is None:
        problems.append("not everything settled before the deadline (deliveries final, "
                        "batch finished, callbacks processed)")
    if accepted != reached:
        problems.append(f"the provider accepted {accepted} sends but {reached} deliveries "
                        "are recorded sent or delivered")
        _print_repeated_sends(console)
    if done.recreated < lost:
        problems.append(f"the sweep re-created {done.recreated} jobs of {lost} lost")
    for problem in problems:
        console.print(f"[red]✗ {problem}[/]")
    if not problems:
        console.print("[green]✓ every delivery is final, every lost job was repaired and "
                      "the provider's record matches[/]")
    return 1 if problems else 0


def _print_repeated_sends(console: Console) -> None:
    """Each delivery the provider accepted more than once, with its sends (diagnosis)."""
    from herald.db import session as db_session
    from models.notifications import Delivery
    from providers.mock import MockProvider

    by_delivery: dict[str, list[dict[str, Any]]] = {}
    for send in MockProvider.sends(accepted_only=True):
        by_delivery.setdefault(send["idempotency_key"], []).append(send)
    with db_session() as session:
        for delivery_id, sends in by_delivery.items():
            if len(sends) < 2:
                continue
            row = session.get(Delivery, delivery_id)
            state = "missing" if row is None else (
                f"{row.channel} {row.outcome} attempts={row.attempts} "
                f"message={row.provider_message_id} queued_at={row.queued_at}")
            console.print(f"  repeated: {delivery_id} {state}; sends at "
                          + ", ".join(f"{s['at']} ({s['provider_message_id']})" for s in sends))


def print_deliveries(console: Console, counts: Counter[tuple[str, str]],
                     channels: Sequence[str] = ("email", "sms", "in_app")) -> None:
    """A table of ``counts`` (:func:`tally`): a row per channel, a column per outcome."""
    table = Table(title="deliveries by channel × outcome")
    table.add_column("channel")
    for outcome in OUTCOMES:
        table.add_column(outcome, justify="right")
    for channel in channels:
        table.add_row(channel, *(str(counts[(channel, o)]) for o in OUTCOMES))
    console.print(table)
