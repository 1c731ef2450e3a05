"""End-to-end deliveries/s: event accepted → mock provider accepted, on PostgreSQL + Redis.

``python -m bench.e2e [--events N]``. Uses ``$DATABASE_URL`` / ``$REDIS_URL`` or starts
private servers. Workers are real ``herald worker`` processes (1, then 2) on the email and
SMS lanes with the rate limits lifted (``bench.unlimited``); each event of
``account.welcome`` on email + SMS makes two channel deliveries. Also counts the database
statements one delivery costs (one worker attempt, in process). Appends to
``bench/results.md``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from sqlalchemy import event, func, text
from sqlmodel import select

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results.md"
ACCOUNTS = 200


def _services() -> tuple[dict[str, str], list]:
    from tests.support.services import make_tempdir, start_postgres, start_redis

    started, env = [], {}
    workdir = make_tempdir()
    if not os.environ.get("DATABASE_URL"):
        started.append(start_postgres(workdir / "pg"))
        env["DATABASE_URL"] = started[-1].url
    if not os.environ.get("REDIS_URL"):
        started.append(start_redis(workdir / "redis"))
        env["REDIS_URL"] = started[-1].url
    return env, started


def _configure(env: dict[str, str]) -> None:
    os.environ.update(env)
    from herald import connections, db, jobs, settings

    settings.reset_settings()
    connections.reset_redis_client()
    jobs.reset_brokers()
    db.reset_engine()


def _reset_tables() -> None:
    from herald.db import get_engine, migrate

    migrate()
    with get_engine().begin() as connection:
        connection.execute(text("TRUNCATE deliveries, notifications, accounts CASCADE"))


def _accounts() -> list[str]:
    from actors.orchestration import create_account

    return [create_account(email=f"bench{n}@example.com", phone=f"+96650{n:07d}").id
            for n in range(ACCOUNTS)]


def _open_deliveries(run: str) -> int:
    from herald.db import session
    from models.notifications import Delivery, Notification

    with session() as s:
        return s.exec(select(func.count()).select_from(Delivery)
                      .join(Notification, Notification.id == Delivery.notification_id)
                      .where(Notification.occurrence.like(f"{run}-%"),
                             Delivery.outcome.in_(["queued", "sending"]))).one()


def run_once(events: int, processes: int, accounts: list[str]) -> float:
    """Deliveries/s with ``processes`` worker processes already running."""
    from actors.orchestration import trigger_event

    workers = [subprocess.Popen(
        [sys.executable, "-m", "herald.cli", "worker", "--import", "bench.unlimited",
         "notification-email", "notification-sms"], cwd=REPO,
        env={**os.environ, "WORKER_PORT": "0", "LOG_LEVEL": "WARNING"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(processes)]
    try:
        time.sleep(2)  # let the workers boot before the clock starts
        run = uuid.uuid4().hex[:8]
        started = time.perf_counter()
        for n in range(events):
            trigger_event(account_id=accounts[n % len(accounts)], type="account.welcome",
                          occurrence=f"{run}-{n}", channels=["email", "sms"])
        while _open_deliveries(run):
            time.sleep(0.05)
        return 2 * events / (time.perf_counter() - started)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)


def statements_per_delivery(accounts: list[str], sample: int = 100) -> float:
    """Database statements one successful email delivery attempt costs (in process)."""
    from actors.notifications import DeliveryJob, deliver
    from actors.orchestration import trigger_event
    from herald.db import get_engine

    run = uuid.uuid4().hex[:8]
    jobs = []
    for n in range(sample):
        result = trigger_event(account_id=accounts[n % len(accounts)], type="account.welcome",
                               occurrence=f"{run}-{n}", channels=["email"])
        d = result.deliveries[0]
        jobs.append(DeliveryJob(delivery_id=d.id, notification_id=d.notification_id,
                                channel="email"))
    count = {"n": 0}

    def counter(*_: object) -> None:
        count["n"] += 1

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", counter)
    try:
        for job in jobs:
            deliver(job)
    finally:
        event.remove(engine, "before_cursor_execute", counter)
    return count["n"] / sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()
    env, started = _services()
    try:
        _configure({**env, "QUEUE_PREFIX": f"e2e{uuid.uuid4().hex[:6]}", "BROKER": "redis",
                    "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock", "LOG_LEVEL": "WARNING"})
        import logging

        logging.disable(logging.INFO)
        _reset_tables()
        accounts = _accounts()
        rates = {p: run_once(args.events, p, accounts) for p in (1, 2)}
        per_delivery = statements_per_delivery(accounts)
    finally:
        for service in started:
            service.stop()
    lines = ["", f"End to end ({time.strftime('%Y-%m-%d')}, PostgreSQL + Redis, mock provider, "
             f"{args.events} events × email + SMS, rate limits lifted):", "",
             "| measure | value |", "|---|---|"]
    lines += [f"| deliveries/s, {p} worker process(es) | {r:,.0f} |" for p, r in rates.items()]
    lines.append(f"| database statements per delivered email (claim → sent) | "
                 f"{per_delivery:.1f} |")
    text_ = "\n".join(lines) + "\n"
    print(text_)
    with RESULTS.open("a") as out:
        out.write(text_)


if __name__ == "__main__":
    main()
