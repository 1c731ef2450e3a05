"""The payment half of one order, step by step: database statements, Redis commands and
CPU ms of ``create_payment``, ``complete_payment``, ``settle_payment`` and
``send_receipt``, in process, one order at a time, on PostgreSQL + Redis.

``python -m bench.payments_steps [--orders N] [--repeat R]``. Uses ``$DATABASE_URL`` /
``$REDIS_URL`` or starts private servers; the tables are emptied and filled as
``bench.orders`` fills them (its accounts with their history, their earlier orders), so
the planner sees a store in use. The orders are placed by ``place_order`` outside the
count (the store's half is ``bench.orders``' to measure), and no webhook endpoint
subscribes to ``payment.settled`` (the settlement's one-statement path). Each round runs
every step for ``--orders`` orders, one step after the other; the median of the rounds
is reported with each round's CPU. Appends to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench import publish

STEPS = ("create_payment", "complete_payment", "settle_payment", "send_receipt")


def _redis_commands() -> int:
    """Commands the Redis server processed so far (this call's INFO included)."""
    import redis

    with redis.Redis.from_url(os.environ["REDIS_URL"]) as client:
        return int(client.info("stats")["total_commands_processed"])


def _measure(run: Callable[[], None]) -> tuple[int, int, float]:
    """Statements, Redis commands and CPU seconds of ``run``."""
    from bench.e2e import _Counter

    commands = _redis_commands()
    with _Counter() as counter:
        run()
    # the INFO that reads the count is itself counted once (its connection's HELLO/SELECT
    # none: a fresh client sends only INFO)
    return counter.statements, _redis_commands() - commands - 1, counter.cpu_s


def one_round(accounts: list[str], orders: int) -> dict[str, tuple[float, float, float]]:
    """Per step: statements, Redis commands and CPU ms per order, ``orders`` orders."""
    from actors.payments import (
        PaymentAction,
        PaymentJob,
        complete_payment,
        create_payment,
        send_receipt,
        settle_payment,
    )
    from actors.store import place_order
    from bench.orders import PRODUCT
    from models.base import utcnow

    placed = [(accounts[n % len(accounts)], place_order(accounts[n % len(accounts)], PRODUCT))
              for n in range(orders)]
    created: list[Any] = []
    jobs: list[PaymentJob] = []

    def create() -> None:
        for _, order in placed:
            created.append(create_payment(order_id=order["id"], amount=order["amount"],
                                          currency=order["currency"]))

    def complete() -> None:
        for payment in created:
            complete_payment(payment.id)

    def settle() -> None:
        for job in jobs:
            settle_payment(job)

    def receipt() -> None:
        for job in jobs:
            send_receipt(job.model_copy(update={"action": PaymentAction.SEND_RECEIPT}))

    spent = {"create_payment": _measure(create), "complete_payment": _measure(complete)}
    jobs.extend(PaymentJob(action=PaymentAction.SETTLE, payment_id=payment.id,
                           order_id=payment.order_id, user_id=account_id,
                           gateway=payment.gateway, created_at=utcnow())
                for payment, (account_id, _) in zip(created, placed, strict=True))
    spent["settle_payment"] = _measure(settle)
    spent["send_receipt"] = _measure(receipt)
    return {step: (statements / orders, commands / orders, 1000 * cpu_s / orders)
            for step, (statements, commands, cpu_s) in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from bench.e2e import _accounts, _configure, _services
    from bench.orders import _order_history, _reset_tables

    env, started = _services()
    rounds: list[dict[str, tuple[float, float, float]]] = []
    try:
        _configure({**env, "QUEUE_PREFIX": f"paysteps{uuid.uuid4().hex[:6]}",
                    "BROKER": "redis", "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
                    "LOG_LEVEL": "WARNING", "FEATURE_ESIM_STORE": "true",
                    "ESIM_PROVIDERS": "mock"})
        import logging

        logging.disable(logging.INFO)
        _reset_tables()
        from actors.catalog import sync_esim_products

        sync_esim_products()
        accounts = _accounts()
        _order_history()
        one_round(accounts, 20)  # warm up: connections, prepared statements, caches
        for _ in range(args.repeat):
            rounds.append(one_round(accounts, args.orders))
    finally:
        for service in started:
            service.stop()
    median = statistics.median
    lines = ["", f"Payment steps ({time.strftime('%Y-%m-%d %H:%M')}, PostgreSQL + Redis, "
             f"{args.orders} orders per round, in process, median of {args.repeat} rounds; "
             f"load average {' '.join(f'{n:.1f}' for n in os.getloadavg())}):", "",
             "| step | database statements | Redis commands | CPU ms (each round) |",
             "|---|---|---|---|"]
    for step in STEPS:
        statements, commands, cpu = zip(*(spent[step] for spent in rounds), strict=True)
        lines.append(f"| `{step}` | {median(statements):.1f} | {median(commands):.1f} | "
                     f"{median(cpu):.2f} ({', '.join(f'{v:.2f}' for v in cpu)}) |")
    publish(lines)


if __name__ == "__main__":
    main()
