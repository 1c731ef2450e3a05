"""End-to-end orders/s: an eSIM order placed and paid → the mock eSIM provider issued it →
the order completed, on PostgreSQL + Redis.

``python -m bench.orders [--orders N] [--repeat R]``. Uses ``$DATABASE_URL`` /
``$REDIS_URL`` or starts private servers. The producer (one thread, this process) calls
what the HTTP routes call, per order: ``place_order`` (``mock-ok``, which the mock
issues at once), ``create_payment`` and ``complete_payment`` (the gateway's completion,
which adds the settlement job). Real ``herald worker`` processes run the Procfile's
fulfillment queues (activation, payment, store-fulfillment): settlement marks the order
paid and hands it to issuance, issuance asks the mock and writes the profile with the
order's ``completed``, then triggers the ``esim.ready`` notification; settlement also adds
the payment's receipt job.

Two set-ups, each with 2 worker processes (``--processes``):

- **fulfillment only**: the workers run the fulfillment queues only; the notifications the orders
  trigger (``esim.ready`` on email + SMS, ``payment.receipt``) are created and queued but
  not sent. The clock stops when every order is completed.
- **with notifications**: the workers also run the email and SMS queues (rate limits
  lifted, ``bench.unlimited``); the clock stops when every order is completed *and*
  every delivery is final (the eSIM email with its QR code, the SMS, the receipt email).

50 orders go through before the clock starts. Each of ``--repeat`` rounds measures the
machine (``bench.machine``), then runs both set-ups; medians are reported with every run,
and the CPU per order of each process group; then the database statements and CPU of
each step of one order, in process. Appends to ``bench/results.md``.

``--steps N``: only the costs of each step, over N orders one at a time in process (no
worker processes, no rounds): the quick measure of a change to one step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

from sqlalchemy import func, text
from sqlmodel import select

from bench import machine, publish
from bench.e2e import (
    REPO,
    CpuMeter,
    _accounts,
    _configure,
    _open_deliveries,
    _peak_rss_mb,
    _services,
)

#: The Procfile's ``worker-fulfillment`` queues.
FULFILLMENT_QUEUES = ("activation", "payment", "store-fulfillment")
#: The channel queues the ``esim.ready`` and receipt notifications go out on.
NOTIFICATION_QUEUES = ("notification-email", "notification-sms")
#: Set-up name → the queues its workers run.
SETUPS: dict[str, tuple[str, ...]] = {
    "fulfillment only": FULFILLMENT_QUEUES,
    "with notifications": FULFILLMENT_QUEUES + NOTIFICATION_QUEUES}
PRODUCT = "mock-ok"
#: Orders placed and completed before the clock starts.
WARM_UP_ORDERS = 50


def _reset_tables() -> None:
    from herald.db import get_engine, migrate

    migrate()
    with get_engine().begin() as connection:
        connection.execute(text("TRUNCATE payments, store_order_status_events, store_orders,"
                                " orders, store_products, provider_health, deliveries,"
                                " notifications, accounts CASCADE"))


def _order_history(per_account: int = 50) -> None:
    """Give each account ``per_account`` earlier issued orders (settled payment, profile
    announced, status events), so the store tables and the planner's statistics look like
    a store in use (as ``bench.e2e`` does for notifications). Announced: an issued order
    without its ``esim.ready`` is one the workers' start-up recovery scan re-drives,
    which would be counted against the measured orders."""
    from herald.db import autocommit, get_engine

    then = "now() - interval '1 day'"
    with get_engine().begin() as connection:
        connection.execute(text(
            "INSERT INTO orders (id, account_id, status, amount, currency, created_at,"
            f" updated_at) SELECT gen_random_uuid()::text, a.id, 'completed', 5, 'USD', {then},"
            f" {then} FROM accounts a, generate_series(1, :n) n"), {"n": per_account})
        connection.execute(text(
            "INSERT INTO store_orders (id, product_id, provider, issuance_state,"
            " provider_order_ref, idempotency_key, iccid, activation_code, smdp_address,"
            " in_flight_at, announced_at, created_at, updated_at) SELECT id, 'mock-ok',"
            " 'mock', 'issued', 'mock-esim-' || md5(id), md5(id),"
            " '8999' || substr(md5(id), 1, 15), 'LPA:1$smdp$' || md5(id), 'smdp', created_at,"
            " created_at, created_at, created_at"
            " FROM orders"))
        connection.execute(text(
            "INSERT INTO payments (id, order_id, amount, currency, gateway, status,"
            " completed_at, settled_at, created_at, updated_at) SELECT gen_random_uuid()::text,"
            " id, 5, 'USD', 'mock', 'settled', created_at, created_at, created_at, created_at"
            " FROM orders"))
        connection.execute(text(
            "INSERT INTO store_order_status_events (id, store_order_id, from_state, to_state,"
            " source, note, created_at) SELECT gen_random_uuid()::text, id, s.f, s.t,"
            " 'system', 'history', created_at FROM orders,"
            " (VALUES (NULL, 'pending'), ('pending', 'in_flight'), ('in_flight', 'issued'))"
            " s(f, t)"))
    with autocommit() as connection:
        connection.execute(text("VACUUM ANALYZE"))


def _open_orders() -> int:
    """Orders placed but neither completed nor failed (runs settle one after the other, so
    these are the current run's)."""
    from herald.db import session
    from models.store import Order, OrderStatus

    with session() as s:
        return s.exec(select(func.count()).select_from(Order).where(Order.status.in_(
            [OrderStatus.PENDING_PAYMENT.value, OrderStatus.PAID.value]))).one()


def place_and_pay(account_id: str) -> None:
    """One order placed and paid through the functions the HTTP routes call."""
    from actors.payments import complete_payment, create_payment
    from actors.store import place_order

    order = place_order(account_id, PRODUCT)
    payment = create_payment(order_id=order["id"], amount=order["amount"],
                             currency=order["currency"])
    complete_payment(payment.id)


def _settle(orders: int, accounts: list[str], done: Callable[[], bool]) -> None:
    """Place and pay ``orders`` orders, then wait until ``done``."""
    for n in range(orders):
        place_and_pay(accounts[n % len(accounts)])
    while not done():
        time.sleep(0.1)


def _done(queues: tuple[str, ...]) -> Callable[[], bool]:
    if set(NOTIFICATION_QUEUES) <= set(queues):
        return lambda: _open_orders() == 0 and _open_deliveries() == 0
    return lambda: _open_orders() == 0


def _drop_unsent_notifications() -> None:
    """Remove the queued deliveries a fulfillment-only run leaves (nobody sends them), so the
    next run's completion check sees only its own."""
    from herald.db import get_engine

    with get_engine().begin() as connection:
        connection.execute(text("DELETE FROM deliveries WHERE outcome IN ('queued', 'sending')"))


def run_once(orders: int, processes: int, queues: tuple[str, ...], accounts: list[str],
             started: list) -> tuple[float, dict[str, float]]:
    """Orders/s with ``processes`` worker processes on ``queues``, the CPU ms per order
    each process group spent, and the workers' peak RSS."""
    workers = [subprocess.Popen(
        [sys.executable, "-m", "herald.cli", "worker", "--import", "bench.unlimited", *queues],
        cwd=REPO, env={**os.environ, "WORKER_PORT": "0", "LOG_LEVEL": "WARNING"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(processes)]
    done = _done(queues)
    try:
        # warm up before the clock starts: the workers boot, connect, build the plugins
        _settle(WARM_UP_ORDERS, accounts, done)
        with CpuMeter([worker.pid for worker in workers], started) as meter:
            clock = time.perf_counter()
            _settle(orders, accounts, done)
            elapsed = time.perf_counter() - clock
        costs = {name: 1000 * cpu_s / orders for name, cpu_s in meter.spent.items()}
        costs["peak RSS per worker process, MB"] = max(_peak_rss_mb(w.pid) for w in workers)
        return orders / elapsed, costs
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
        _drop_unsent_notifications()
        _purge_queues()


def _purge_queues() -> None:
    """Empty the notification queues a fulfillment-only run filled (their rows are gone)."""
    from herald.queue import queue

    for name in NOTIFICATION_QUEUES:
        queue(name).drain()


def per_order_costs(accounts: list[str], sample: int = 100) -> dict[str, tuple[float, float]]:
    """Database statements and CPU ms of each step of one order, in process, one order at
    a time: placing it, paying it (the producer's two other calls), its settlement, its
    issuance (the mock, the issued write, the ``esim.ready`` trigger), and of the issuance
    the ``esim.ready`` trigger alone (the orchestration's part)."""
    from actors import store
    from actors.payments import (
        PaymentAction,
        PaymentJob,
        complete_payment,
        create_payment,
        settle_payment,
    )
    from actors.store import StoreJob, issue_store_order, place_order
    from bench.e2e import _Counter
    from herald.db import session
    from models.base import utcnow
    from models.payments import Payment
    from models.store import Order

    before = utcnow()
    placed = []
    with _Counter() as placing:
        for n in range(sample):
            placed.append(place_order(accounts[n % len(accounts)], PRODUCT))
    with _Counter() as paying:
        for order in placed:
            payment = create_payment(order_id=order["id"], amount=order["amount"],
                                     currency=order["currency"])
            complete_payment(payment.id)
    with session() as s:
        paid = s.exec(select(Payment, Order.account_id).join(Order, Order.id == Payment.order_id)
                      .where(Payment.created_at >= before)).all()
    with _Counter() as settling:
        for payment, account_id in paid:
            settle_payment(PaymentJob(action=PaymentAction.SETTLE, payment_id=payment.id,
                                      order_id=payment.order_id, user_id=account_id,
                                      gateway=payment.gateway, created_at=utcnow()))
    triggering = _Counter()
    trigger_event = store.trigger_event

    def counted_trigger(**kwargs: object) -> object:
        # the issuance's esim.ready trigger, counted on its own as well (nested counters)
        with _Counter() as one:
            result = trigger_event(**kwargs)  # type: ignore[arg-type]
        triggering.statements += one.statements
        triggering.cpu_s += one.cpu_s
        return result

    store.trigger_event = counted_trigger  # type: ignore[assignment]
    try:
        with _Counter() as issuing:
            for payment, _ in paid:
                issue_store_order(StoreJob(order_id=payment.order_id))
    finally:
        store.trigger_event = trigger_event
    return {step: (counter.statements / sample, 1000 * counter.cpu_s / sample)
            for step, counter in (("place (`place_order`)", placing),
                                  ("pay (`create_payment`, `complete_payment`)", paying),
                                  ("settlement", settling), ("issuance", issuing),
                                  ("… of which the `esim.ready` trigger", triggering))}


def _flush_stamps() -> None:
    """Write what the in-process steps left to their write-behind threads while the
    servers still run (at exit they would be gone)."""
    if "actors.store" in sys.modules:
        from actors.orchestration import flush_handoff_stamps
        from actors.store import flush_announced_stamps

        flush_handoff_stamps(10)
        flush_announced_stamps(10)


def _step_lines(steps: dict[str, tuple[float, float]]) -> list[str]:
    return [f"| {step}: database statements, CPU ms per order (in process) | "
            f"{statements:.1f}, {cpu_ms:.1f} |" for step, (statements, cpu_ms) in steps.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds of (machine speeds, fulfillment only, with notifications); "
                             "the medians are reported (default 3)")
    parser.add_argument("--steps", type=int, default=0, metavar="N",
                        help="only the per-step costs, over N orders in process (no workers, "
                             "no throughput rounds)")
    args = parser.parse_args()
    env, started = _services()
    rates: dict[str, list[float]] = {name: [] for name in SETUPS}
    spent: dict[str, list[float]] = {}
    speeds: list[dict[str, float | None]] = []
    try:
        _configure({**env, "QUEUE_PREFIX": f"orders{uuid.uuid4().hex[:6]}", "BROKER": "redis",
                    "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock", "LOG_LEVEL": "WARNING",
                    "FEATURE_ESIM_STORE": "true", "ESIM_PROVIDERS": "mock"})
        import logging

        logging.disable(logging.INFO)
        _reset_tables()
        from actors.catalog import sync_esim_products

        sync_esim_products()  # the mock's catalog and health, as the clock's sync writes them
        accounts = _accounts()
        _order_history()
        if args.steps:
            per_order_costs(accounts, WARM_UP_ORDERS)  # connections, plugins, caches
            steps = per_order_costs(accounts, args.steps)
            publish(["", f"Orders, per step ({time.strftime('%Y-%m-%d %H:%M')}, PostgreSQL "
                     f"+ Redis, {args.steps} {PRODUCT} orders one at a time, in process):",
                     "", "| measure | value |", "|---|---|", *_step_lines(steps)])
            return
        for _ in range(args.repeat):
            speeds.append(machine.measure(os.environ["DATABASE_URL"], os.environ["REDIS_URL"]))
            for name, queues in SETUPS.items():
                rate, costs = run_once(args.orders, args.processes, queues, accounts, started)
                rates[name].append(rate)
                for group, value in costs.items():
                    label = group if group.startswith("peak") else f"CPU ms per order, {group}"
                    spent.setdefault(f"{name}: {label}", []).append(value)
        steps = per_order_costs(accounts)
    finally:
        _flush_stamps()
        for service in started:
            service.stop()
    median = statistics.median
    lines = ["", f"Orders end to end ({time.strftime('%Y-%m-%d %H:%M')}, PostgreSQL + Redis, "
             f"mock eSIM provider, {args.orders} {PRODUCT} orders placed and paid by one "
             f"producer thread, {args.processes} worker processes; median of {args.repeat} "
             "rounds, each run in brackets):", "", "| measure | value |", "|---|---|"]
    lines += [f"| orders/s, {name} | {median(values):,.0f} "
              f"({', '.join(f'{v:,.0f}' for v in values)}) |" for name, values in rates.items()]
    lines += [f"| {name} | {median(values):.2f} |" for name, values in spent.items()]
    lines += _step_lines(steps)
    lines += machine.table(speeds)
    publish(lines)


if __name__ == "__main__":
    main()
