"""The handoff sweep's run time as the deliveries table grows (the target: flat, within
2×, from 10k to 1M rows).

``python -m bench.sweep [--sizes 10000,100000,1000000] [--runs 5]``. Uses
``$DATABASE_URL`` / ``$REDIS_URL`` or starts private PostgreSQL and Redis servers. For each
size the table holds that many delivery rows, of which 200 are eligible (queued, never
handed off) and the rest finished (sent); also 1 % as many finished batches and processed
callback receipts. Each run re-opens the 200 eligible rows, clears Redis, and times one
full ``reconcile_handoffs`` (three claims, stamps, 200 enqueues) and, separately, the
delivery selection query alone. Appends the medians to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from sqlalchemy import text

from bench import publish
from bench.e2e import _configure, _services
from herald.queue import current_app

ELIGIBLE = 200

FILL = """
INSERT INTO deliveries (id, notification_id, channel, outcome, attempts, created_at,
                        updated_at, queued_at, provider, provider_message_id)
SELECT md5(:tag || i::text)::uuid::text, :notification, 'email',
       CASE WHEN i <= :eligible THEN 'queued' ELSE 'sent' END, 1,
       now() - interval '2 days' + i * interval '1 millisecond', now(),
       CASE WHEN i <= :eligible THEN NULL ELSE now() - interval '1 day' END,
       'mock', 'mock-' || i
FROM generate_series(1, :rows) AS i
"""
FILL_BATCHES = """
INSERT INTO notification_batches (id, type, account_ids, data, status, notification_count,
                                  fully_enqueued, created_at, updated_at)
SELECT md5('b' || :tag || i::text)::uuid::text, 'account.welcome', '[]', '{}', 'finished', 0,
       true, now() - interval '2 days', now()
FROM generate_series(1, :rows) AS i
"""
FILL_RECEIPTS = """
INSERT INTO callback_receipts (id, provider, event_id, channel, provider_message_id, status,
                               payload, received_at, queued_at, processed_at, result)
SELECT md5('r' || :tag || i::text)::uuid::text, 'mock', 'e' || :tag || i, 'email',
       'mock-' || i, 'delivered', '{}', now() - interval '2 days', now() - interval '2 days',
       now() - interval '2 days', 'applied'
FROM generate_series(1, :rows) AS i
"""


def _fill(rows: int) -> None:
    from herald.db import get_engine
    from models.notifications import Account, Notification

    engine = get_engine()
    with engine.begin() as connection:
        connection.execute(text("TRUNCATE deliveries, notifications, accounts, "
                                "notification_batches, callback_receipts CASCADE"))
    from herald.db import session

    with session() as s:
        account = Account(email="bench@example.com")
        notification = Notification(account_id=account.id, type="account.welcome",
                                    occurrence="bench")
        s.add(account)
        s.flush()
        s.add(notification)
    tag = uuid.uuid4().hex[:8]
    with engine.begin() as connection:
        connection.execute(text(FILL), {"tag": tag, "notification": notification.id,
                                        "eligible": ELIGIBLE, "rows": rows})
        connection.execute(text(FILL_BATCHES), {"tag": tag, "rows": max(rows // 100, 1)})
        connection.execute(text(FILL_RECEIPTS), {"tag": tag, "rows": max(rows // 100, 1)})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE"))


def _reopen() -> None:
    from herald.db import get_engine

    with get_engine().begin() as connection:
        connection.execute(text("UPDATE deliveries SET queued_at = NULL WHERE outcome = 'queued'"))
    current_app().client.flushdb()


def _time_runs(rows: int, runs: int) -> tuple[float, float]:
    from actors.handoffs import Window, reconcile_handoffs, stale_deliveries
    from herald.db import session

    sweeps, selects = [], []
    for _ in range(runs):
        _reopen()
        with session() as s:
            started = time.perf_counter()
            found = s.exec(stale_deliveries(Window.current())).all()
            selects.append(time.perf_counter() - started)
            s.rollback()
        assert len(found) == ELIGIBLE, len(found)
        started = time.perf_counter()
        report = reconcile_handoffs()
        sweeps.append(time.perf_counter() - started)
        assert report.deliveries == ELIGIBLE, report
    return statistics.median(sweeps), statistics.median(selects)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    env, started = _services()
    results = {}
    try:
        _configure({**env, "QUEUE_PREFIX": f"sweep{uuid.uuid4().hex[:6]}", "BROKER": "redis",
                    "LOG_LEVEL": "WARNING"})
        import logging

        logging.disable(logging.INFO)
        from herald.db import migrate

        migrate()
        for rows in sizes:
            _fill(rows)
            results[rows] = _time_runs(rows, args.runs)
            print(f"{rows:>9,} rows: sweep {results[rows][0] * 1000:.1f} ms, "
                  f"selection {results[rows][1] * 1000:.2f} ms", flush=True)
    finally:
        for service in started:
            service.stop()
    smallest = results[sizes[0]][0]
    lines = ["", f"Handoff sweep ({time.strftime('%Y-%m-%d')}, PostgreSQL, {ELIGIBLE} eligible "
             f"deliveries, median of {args.runs}):", "",
             "| delivery rows | full sweep (ms) | delivery selection (ms) | × smallest |",
             "|---|---|---|---|"]
    lines += [f"| {rows:,} | {sweep * 1000:.1f} | {select_ * 1000:.2f} | "
              f"{sweep / smallest:.2f} |" for rows, (sweep, select_) in results.items()]
    publish(lines)


if __name__ == "__main__":
    main()
