"""Supplier dispatch: purchase orders/s from placement to every dispatch ``submitted``, on
PostgreSQL + Redis, with a local SFTP server and SMTP sink as the suppliers.

``python -m bench.suppliers [--orders N] [--repeat R] [--processes P]``. Uses
``$DATABASE_URL`` / ``$REDIS_URL`` or starts private servers. A child process of the bench
runs the suppliers' side: an SFTP server (asyncssh, ``herald.demo.sftp_server``) for Sysco
and an SMTP sink (aiosmtpd, ``herald.demo.mail_sink``) for Costco, so their CPU is a group
of its own. Every order has three Sysco lines and two Costco lines: two dispatches, an X12
850 uploaded over SFTP and an email. The producer (one thread, this process) calls what
``POST /v1/purchase-orders`` calls, ``place_and_relay`` (the order, its lines, its
dispatches and their outbox entries in one transaction, then their jobs). Real ``herald
worker`` processes run the Procfile's ``worker-suppliers`` queues (supplier-dispatch,
backorder-reroute); Sysco's uploads run one at a time across them
(``SYSCO_WORKER_CONCURRENCY``), as in production.

10 orders go through before the clock starts; the clock stops when no dispatch is pending.
Each of ``--repeat`` rounds measures the machine (``bench.machine``) first. Reported: orders/s
and dispatches/s, the CPU ms per dispatch of each process group (workers, producer,
supplier servers, PostgreSQL and Redis when the bench started them), how long a Sysco job
ran and how long the next one waited to start after it, then the database
statements and CPU ms of one placement and of one dispatch of each type, in process, one
at a time (the best of 5 batches of 30 orders; ``--steps-only``: this part alone).
Appends to ``bench/results.md``. The defaults keep a run under a minute.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import func, text
from sqlmodel import col, select

from bench import machine, publish
from bench.e2e import REPO, CpuMeter, _configure, _cpu_s, _peak_rss_mb, _services

#: The Procfile's ``worker-suppliers`` queues.
QUEUES = ("supplier-dispatch", "backorder-reroute")
#: Orders placed and submitted before the clock starts.
WARM_UP_ORDERS = 10
#: Lines per order for each supplier type.
SYSCO_LINES, COSTCO_LINES = 3, 2
#: Dispatches per order (one per supplier).
DISPATCHES_PER_ORDER = 2
_TABLES = ("supplier_dispatch_outbox, supplier_dispatch_lines, purchase_order_events, "
           "vendor_documents, purchase_order_lines, supplier_dispatches, purchase_orders, "
           "supplier_mappings, catalog_items, suppliers")


# -- the suppliers' side, in a child process --------------------------------------------------
def serve(root: Path) -> None:
    """Run the SFTP server and the SMTP sink until stdin closes; print where they listen
    (one JSON line) once both answer."""
    from herald.demo.mail_sink import MailSink
    from herald.demo.sftp_server import start_sftp_server

    with start_sftp_server(root / "sftp") as sftp, MailSink() as sink:
        print(json.dumps({"sftp": {"host": sftp.host, "port": sftp.port,
                                   "username": sftp.username, "password": sftp.password,
                                   "host_key": sftp.host_key_line},
                          "smtp_port": sink.port}), flush=True)
        sys.stdin.read()


def _start_suppliers(root: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    process = subprocess.Popen([sys.executable, "-m", "bench.suppliers", "--serve", str(root)],
                               cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    return process, json.loads(process.stdout.readline())


# -- the rows ---------------------------------------------------------------------------------
def _setup_rows(where: dict[str, Any]) -> list[str]:
    """Empty purchasing tables, a Sysco and a Costco supplier (the SFTP server's key
    recorded) and their catalog items; returns the items, Sysco's first."""
    from herald.db import get_engine, migrate
    from herald.db import session as db_session
    from models.purchasing import CatalogItem, Supplier, SupplierMapping

    migrate()
    with get_engine().begin() as connection:
        connection.execute(text(f"TRUNCATE {_TABLES} CASCADE"))
    sftp = {**where["sftp"], "outbound_dir": "/outbound", "inbound_dir": "/inbound",
            "archive_dir": "/archive"}
    items = []
    with db_session() as session:
        sysco = Supplier(name="Sysco (bench)", type="sysco", sftp=sftp)
        costco = Supplier(name="Costco (bench)", type="costco", email="orders@costco.bench")
        session.add_all([sysco, costco])
        session.flush()
        for supplier, count in ((sysco, SYSCO_LINES), (costco, COSTCO_LINES)):
            for n in range(count):
                item = CatalogItem(name=f"{supplier.type} item {n}", unit="CA")
                session.add(item)
                session.flush()
                session.add(SupplierMapping(catalog_item_id=item.id, supplier_id=supplier.id,
                                            supplier_sku=f"{supplier.type[:2].upper()}-{n}",
                                            unit_size="6/#10", preferred=True))
                items.append(item.id)
    return items


def _new_order(items: list[str], number: str) -> Any:
    from models.purchasing import NewPurchaseOrder, OrderedLine

    return NewPurchaseOrder(
        order_number=number, restaurant_id=str(uuid.uuid4()), restaurant_name="Bistro Nord",
        restaurant_location="12 Quai Nord, Lyon", placed_by_email="chef@bistro.test",
        delivery_notes="Back door", lines=tuple(OrderedLine(item, Decimal(n + 1))
                                                for n, item in enumerate(items)))


def _pending() -> int:
    """Dispatches not yet submitted (counted on the pending dispatches' index)."""
    from herald.db import session
    from models.purchasing import SupplierDispatch

    with session() as s:
        return s.exec(select(func.count()).select_from(SupplierDispatch)
                      .where(SupplierDispatch.status == "pending")).one()


def _settle(orders: int, items: list[str]) -> None:
    """Place ``orders`` orders, then wait until none of their dispatches is pending."""
    from actors.purchasing import place_and_relay

    run = uuid.uuid4().hex[:8]
    for n in range(orders):
        place_and_relay(_new_order(items, f"PO-{run}-{n}"))
    while _pending():
        time.sleep(0.05)


def sysco_timeline(since: datetime) -> dict[str, float]:
    """Of the Sysco jobs that ran since ``since`` (one at a time, their group's limit): the
    median ms one ran, and the median ms between one's end and the next one's start."""
    from herald.queue import queue

    jobs = sorted((job for job in queue(QUEUES[0]).jobs("completed", per_page=1000)
                   if job.group == "sysco" and job.processed_at and job.finished_at
                   and job.processed_at >= since), key=lambda job: job.processed_at)
    runs = [(job.finished_at - job.processed_at).total_seconds() for job in jobs]
    gaps = [(after.processed_at - before.finished_at).total_seconds()
            for before, after in itertools.pairwise(jobs)]
    return {"Sysco upload job, median ms it ran": 1000 * statistics.median(runs),
            "Sysco upload job, median ms from one's end to the next one's start":
                1000 * statistics.median(gaps)}


def run_once(orders: int, processes: int, items: list[str], started: list,
             suppliers: subprocess.Popen[str]) -> tuple[float, dict[str, float]]:
    """Orders/s with ``processes`` worker processes, the CPU ms per dispatch of each
    process group, the workers' peak RSS, and the Sysco jobs' timeline."""
    workers = [subprocess.Popen(
        [sys.executable, "-m", "herald.cli", "worker", *QUEUES], cwd=REPO,
        env={**os.environ, "WORKER_PORT": "0", "LOG_LEVEL": "WARNING"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(processes)]
    try:
        _settle(WARM_UP_ORDERS, items)  # the workers boot and connect before the clock
        servers_before = _cpu_s(suppliers.pid)
        since = datetime.now(UTC)
        with CpuMeter([worker.pid for worker in workers], started) as meter:
            clock = time.perf_counter()
            _settle(orders, items)
            elapsed = time.perf_counter() - clock
        dispatches = DISPATCHES_PER_ORDER * orders
        costs = {name: 1000 * cpu_s / dispatches for name, cpu_s in meter.spent.items()}
        costs["supplier servers (SFTP + SMTP)"] = (
            1000 * (_cpu_s(suppliers.pid) - servers_before) / dispatches)
        costs["peak RSS per worker process, MB"] = max(_peak_rss_mb(w.pid) for w in workers)
        return orders / elapsed, costs | sysco_timeline(since)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)


def per_unit_costs(items: list[str], sample: int = 30, batches: int = 5
                   ) -> dict[str, tuple[float, float]]:
    """Database statements and CPU ms of one placement (two dispatches' jobs relayed) and
    of one dispatch of each type, in process, one at a time, no worker running: the best
    CPU of ``batches`` batches of ``sample`` orders (the least disturbed by other work on
    the machine)."""
    runs = [_unit_costs(items, sample) for _ in range(batches)]
    return {step: (runs[0][step][0], min(run[step][1] for run in runs)) for step in runs[0]}


def _unit_costs(items: list[str], sample: int) -> dict[str, tuple[float, float]]:
    from actors.purchasing import place_and_relay
    from actors.supplier_dispatch import dispatch_to_supplier
    from bench.e2e import _Counter
    from herald.db import session
    from herald.queue import queue
    from models.purchasing import SupplierDispatch, dispatch_job

    run = uuid.uuid4().hex[:8]
    with _Counter() as placing:
        placed = [place_and_relay(_new_order(items, f"PO-{run}-{n}")).order_id
                  for n in range(sample)]
    queue(QUEUES[0]).drain()  # the relayed jobs: dispatched below, in process
    with session() as s:
        rows = s.exec(select(SupplierDispatch).where(
            col(SupplierDispatch.order_id).in_(placed))).all()
        jobs = {kind: [dispatch_job(s, row.id) for row in rows if row.supplier_type == kind]
                for kind in ("sysco", "costco")}
    costs = {"placement (producer: place_and_relay)": (placing.statements / sample,
                                                       1000 * placing.cpu_s / sample)}
    for kind, kind_jobs in jobs.items():
        with _Counter() as dispatching:
            for job in kind_jobs:
                dispatch_to_supplier(job)
        costs[f"one {kind} dispatch (worker)"] = (dispatching.statements / len(kind_jobs),
                                                  1000 * dispatching.cpu_s / len(kind_jobs))
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of (machine speeds, the run); medians are reported")
    parser.add_argument("--steps-only", action="store_true",
                        help="only the in-process statements and CPU of each step")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    env, started = _services()
    rates: list[float] = []
    spent: dict[str, list[float]] = {}
    speeds: list[dict[str, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="bench-suppliers-") as work:
        suppliers, where = _start_suppliers(Path(work))
        try:
            _configure({**env, "QUEUE_PREFIX": f"sup{uuid.uuid4().hex[:6]}", "BROKER": "redis",
                        "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
                        "LOG_LEVEL": "WARNING", "SMTP_HOST": "127.0.0.1",
                        "SMTP_PORT": str(where["smtp_port"]), "SMTP_STARTTLS": "false",
                        "EMAIL_FROM": "orders@herald.bench", "ADMIN_ALERT_EMAIL": ""})
            import logging

            logging.disable(logging.INFO)
            items = _setup_rows(where)
            for _ in range(0 if args.steps_only else args.repeat):
                speeds.append(machine.measure(os.environ["DATABASE_URL"],
                                              os.environ["REDIS_URL"]))
                rate, costs = run_once(args.orders, args.processes, items, started, suppliers)
                rates.append(rate)
                for group, value in costs.items():
                    label = (group if group.startswith(("peak", "Sysco"))
                             else f"CPU ms per dispatch, {group}")
                    spent.setdefault(label, []).append(value)
            steps = per_unit_costs(items)
        finally:
            assert suppliers.stdin is not None
            suppliers.stdin.close()
            suppliers.wait(timeout=30)
            for service in started:
                service.stop()
    median = statistics.median
    if args.steps_only:
        lines = ["", f"Supplier dispatch steps ({time.strftime('%Y-%m-%d %H:%M')}, in "
                 f"process, load average {os.getloadavg()[0]:.1f}):", "",
                 "| step | database statements | CPU ms (best of 5 batches of 30) |",
                 "|---|---|---|"]
        publish(lines + [f"| {step} | {statements:.1f} | {cpu_ms:.1f} |"
                         for step, (statements, cpu_ms) in steps.items()])
        return
    each = ", ".join(f"{rate:,.1f}" for rate in rates)
    lines = ["", f"Supplier dispatch ({time.strftime('%Y-%m-%d %H:%M')}, PostgreSQL + Redis, "
             f"local SFTP server + SMTP sink, {args.orders} orders × (Sysco {SYSCO_LINES} lines "
             f"over SFTP + Costco {COSTCO_LINES} lines by email) placed by one producer "
             f"thread, {args.processes} worker processes; median of {args.repeat} rounds, each "
             f"in brackets; load average {os.getloadavg()[0]:.1f}):", "",
             "| measure | value |", "|---|---|",
             f"| orders/s (placed → every dispatch submitted) | {median(rates):,.1f} ({each}) |",
             f"| dispatches/s | {DISPATCHES_PER_ORDER * median(rates):,.1f} |"]
    lines += [f"| {name} | {median(values):.2f} |" for name, values in spent.items()]
    lines += [f"| {step}: database statements, CPU ms (in process, best of 5 batches) | "
              f"{statements:.1f}, {cpu_ms:.1f} |" for step, (statements, cpu_ms) in steps.items()]
    lines += machine.table(speeds)
    publish(lines)


if __name__ == "__main__":
    main()
