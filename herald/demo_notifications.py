"""The demo's notification phase: accounts, events over email, SMS and in-app, the mock
provider failing some sends, and the real channel workers until every delivery is final.

Runs on whatever database and Redis herald is configured for (the embedded default:
SQLite ``./herald.db`` and the embedded Redis). The registry's provider rate limits are
lifted for the run, as the benchmark does; everything else is the production path.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections import Counter
from datetime import timedelta

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import func
from sqlmodel import select

#: Accounts the demo seeds per run.
DEMO_ACCOUNTS = 60
#: Every n-th account is inactive, opted out of marketing, or has no phone number.
INACTIVE_EVERY, OPTED_OUT_EVERY, NO_PHONE_EVERY = 10, 7, 9
#: Every n-th account's address fails once transiently, or for good, at the mock provider.
TRANSIENT_EVERY, TERMINAL_EVERY = 6, 13
#: How long the workers get to settle every delivery.
SETTLE_DEADLINE = timedelta(seconds=180)
LANES = ("notification-email", "notification-sms")
OUTCOMES = ("queued", "sending", "sent", "delivered", "failed_terminal", "suppressed")
EVENT_MIX = (
    ("account.welcome", {}),
    ("payment.receipt", {"amount": "49.00", "currency": "SAR", "order_id": "demo-order"}),
    ("esim.ready", {"iccid": "8966000000000000001", "activation_code": "LPA:1$smdp.io$DEMO"}),
    ("promo.offer", {"headline": "Spring data bundle", "code": "SPRING10"}),
)


def _seed_accounts(run_id: str) -> list[str]:
    from actors.orchestration import create_account
    from providers.mock import MockProvider

    ids = []
    for n in range(DEMO_ACCOUNTS):
        email = f"demo{n}.{run_id}@example.com"
        # +9665 and 8 digits: this run's number, then the account's
        phone = None if n % NO_PHONE_EVERY == 4 else f"+9665{int(run_id, 16) % 10**6:06d}{n:02d}"
        account = create_account(email=email, phone=phone, locale="ar" if n % 3 == 0 else "en",
                                 active=n % INACTIVE_EVERY != 3,
                                 marketing_opt_out=n % OPTED_OUT_EVERY == 2)
        if n % TRANSIENT_EVERY == 1:
            MockProvider.script(email, "transient:1")
        if n % TERMINAL_EVERY == 5 and phone:
            MockProvider.script(phone, "terminal")
        ids.append(account.id)
    return ids


def run_notifications(events: int, console: Console) -> int:
    """Run the notification phase; returns 0 when every delivery ended final and the
    provider accepted exactly the deliveries recorded as sent."""
    from actors.orchestration import trigger_event
    from herald import registry
    from herald.db import migrate
    from herald.db import session as db_session
    from herald.worker import running_worker
    from models.notifications import Delivery, Notification
    from providers.mock import MockProvider

    migrate()
    run_id = uuid.uuid4().hex[:8]
    MockProvider.reset()
    for name in LANES:
        registry.declare(dataclasses.replace(registry.get_spec(name), rate_limit=None))
    console.print(f"[bold]notifications[/]: {DEMO_ACCOUNTS} accounts, {events} events over "
                  "email, SMS and in-app (mock provider; provider rate limits lifted)")
    accounts = _seed_accounts(run_id)
    started = time.perf_counter()
    for n in range(events):
        type_name, data = EVENT_MIX[n % len(EVENT_MIX)]
        trigger_event(account_id=accounts[n % len(accounts)], type=type_name,
                      occurrence=f"{run_id}-{n}", data=data,
                      urgency="urgent" if n % 10 == 0 else "normal")
    accepted_s = time.perf_counter() - started
    console.print(f"accepted {events} events in {accepted_s:.2f} s")

    def tally() -> Counter[tuple[str, str]]:
        with db_session() as session:
            rows = session.exec(
                select(Delivery.channel, Delivery.outcome, func.count())
                .join(Notification, Notification.id == Delivery.notification_id)
                .where(Notification.occurrence.like(f"{run_id}-%"))
                .group_by(Delivery.channel, Delivery.outcome)).all()
        return Counter({(channel, outcome): count for channel, outcome, count in rows})

    total = sum(tally().values())
    settled_at = None
    with Progress(TextColumn("deliveries final"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress, \
            running_worker(list(LANES)):
        task = progress.add_task("deliveries", total=total)
        while time.perf_counter() - started < SETTLE_DEADLINE.total_seconds():
            counts = tally()
            open_ = sum(n for (_, outcome), n in counts.items()
                        if outcome in ("queued", "sending"))
            progress.update(task, completed=total - open_)
            if open_ == 0:
                settled_at = time.perf_counter()
                break
            time.sleep(0.2)
    counts = tally()
    table = Table(title="deliveries by channel × outcome")
    table.add_column("channel")
    for outcome in OUTCOMES:
        table.add_column(outcome, justify="right")
    for channel in ("email", "sms", "in_app"):
        table.add_row(channel, *(str(counts[(channel, o)]) for o in OUTCOMES))
    console.print(table)
    # in-app deliveries never reach a provider
    sent = sum(n for (channel, outcome), n in counts.items()
               if channel != "in_app" and outcome in ("sent", "delivered"))
    accepted = sum(1 for s in MockProvider.sends() if s["outcome"] == "ok")
    elapsed = (settled_at or time.perf_counter()) - started
    console.print(f"{total} deliveries final in {elapsed:.2f} s "
                  f"({total / max(elapsed, 1e-9):,.0f} deliveries/s) · provider accepted "
                  f"{accepted}, deliveries sent {sent}")
    problems = []
    if settled_at is None:
        problems.append("not every delivery became final before the deadline")
    if accepted != sent:
        problems.append(f"the provider accepted {accepted} sends but {sent} are recorded sent")
    for problem in problems:
        console.print(f"[red]✗ {problem}[/]")
    if not problems:
        console.print("[green]✓ every delivery is final; the provider's record matches[/]")
    return 1 if problems else 0
