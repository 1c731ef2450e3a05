"""End-to-end deliveries/s: event accepted → mock provider accepted, on PostgreSQL + Redis.

``python -m bench.e2e [--events N] [--repeat R]``. Uses ``$DATABASE_URL`` / ``$REDIS_URL``
or starts private servers. Workers are real ``herald worker`` processes on the email and
SMS queues with the rate limits lifted (``bench.unlimited``); each event of
``account.welcome`` on email + SMS makes two channel deliveries. Events are accepted by
``--producers`` threads at once (default 1; more, as an API's request threads would, only
adds GIL contention on two cores); 50 events are delivered before the clock starts, so
the workers have booted and connected. Each of ``--repeat`` rounds measures the machine's
speeds (``bench.machine``), then runs 1 and 2 worker processes; the medians are reported
with every run. Also counts the database statements one delivery and one event cost, and
the CPU time of one ``trigger_event`` and one delivery attempt (in process, one at a
time; the machine's load makes these vary). ``--bulk N`` adds to each round a run of 2
worker processes whose events are accepted N at a time through ``trigger_events`` (the
bulk path), reported on lines of its own. Appends to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path

from sqlalchemy import Engine, event, func, text
from sqlmodel import select

from bench import machine, publish
from herald.queue_app import reinstall_queue_app

REPO = Path(__file__).resolve().parents[1]
ACCOUNTS = 200
#: Earlier notifications per account, each with a sent email and SMS delivery.
HISTORY = 50
#: Events sent and delivered before the clock starts.
WARM_UP_EVENTS = 50


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
    # A bench's database is a deployment's (PostgreSQL), where an unset provider turns its
    # channel off and no secret is stored without a key: the mock as every provider the
    # environment names none for, and a key of this run's own (docs/configuration.md)
    for name in ("EMAIL_PROVIDER", "SMS_PROVIDER", "PUSH_PROVIDER", "ESIM_PROVIDERS"):
        if not os.environ.get(name):
            env[name] = "mock"
    if not os.environ.get("SECRETS_KEY"):
        from cryptography.fernet import Fernet

        env["SECRETS_KEY"] = Fernet.generate_key().decode()
    return env, started


# -- where the CPU goes: per process group, from /proc (Linux) -------------------------------
def _cpu_s(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of one process (all its threads), with ``reaped`` also
    those of its children that ended and it waited for; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root: int) -> float:
    """CPU seconds of a process and all its descendants, those that ended included: a
    PostgreSQL backend or autovacuum worker that ends between two readings keeps counting
    (in what its parent reaped), where summing the processes alive at each reading would
    lose it, or count its time before the first reading against the group."""
    return sum(_cpu_s(pid, reaped=True) for pid in _with_descendants(root))


def _peak_rss_mb(pid: int) -> float:
    """The most resident memory the process has had (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _with_descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def server_roots(started: list) -> dict[str, list[int]]:
    """The root processes of the servers this bench started (the PostgreSQL postmaster,
    the Redis server), by name, to measure with :func:`tree_cpu_s`; servers given by URL
    are not measured."""
    groups: dict[str, list[int]] = {}
    for service in started:
        postmaster = service.workdir / "data" / "postmaster.pid"
        if postmaster.exists():
            groups[service.name] = [int(postmaster.read_text().split()[0])]
        elif service.url.startswith("redis://"):
            # a foreground child of the bench: found by the port on its command line
            port = service.url.rsplit(":", 1)[1].split("/")[0]
            commands = {int(entry.name): _command(entry) for entry in Path("/proc").iterdir()
                        if entry.name.isdigit()}
            groups[service.name] = [pid for pid, command in commands.items()
                                    if "redis-server" in command.split(" ")[0]
                                    and f":{port}" in command]
    return groups


def _command(process: Path) -> str:
    try:
        return (process / "cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


class CpuMeter:
    """CPU seconds per process group (workers, producer, each server) over a block."""

    def __init__(self, workers: list[int], started: list) -> None:
        self.workers, self.started = workers, started
        self.spent: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        # the bench process alone: what it reaped (earlier runs' workers) is not its own
        spent = {"workers": sum(_cpu_s(pid) for pid in self.workers),
                 "producer (bench process)": _cpu_s(os.getpid())}
        return spent | {name: sum(tree_cpu_s(root) for root in roots)
                        for name, roots in server_roots(self.started).items()}

    def __enter__(self) -> CpuMeter:
        self._before = self._read()
        return self

    def __exit__(self, *_: object) -> None:
        after = self._read()
        self.spent = {name: after[name] - self._before.get(name, 0.0) for name in after}


def _configure(env: dict[str, str]) -> None:
    os.environ.update(env)
    from herald import db, settings

    settings.reset_settings()
    reinstall_queue_app()
    db.reset_engine()


def _reset_tables() -> None:
    from herald.db import get_engine, migrate

    migrate()
    with get_engine().begin() as connection:
        connection.execute(text("TRUNCATE deliveries, notifications, accounts CASCADE"))


def _accounts() -> list[str]:
    """The benchmark's accounts, each with a history of ``HISTORY`` sent notifications, so
    the tables and the planner's statistics look like a system in use: on empty tables
    PostgreSQL plans sequential scans, and keeps them for the prepared statements of the
    whole run as the tables grow."""
    from actors.orchestration import create_account
    from herald.db import autocommit, get_engine

    accounts = [create_account(email=f"bench{n}@example.com", phone=f"+96650{n:07d}").id
                for n in range(ACCOUNTS)]
    with get_engine().begin() as connection:
        connection.execute(text(
            "INSERT INTO notifications (id, account_id, type, occurrence, urgency,"
            " transactional, data, created_at)"
            " SELECT gen_random_uuid()::text, a.id, 'account.welcome', 'history-' || n,"
            " 'normal', true, '{}', now() - interval '1 day'"
            " FROM accounts a, generate_series(1, :history) n"), {"history": HISTORY})
        connection.execute(text(
            "INSERT INTO deliveries (id, notification_id, channel, outcome, attempts,"
            " created_at, updated_at, queued_at)"
            " SELECT gen_random_uuid()::text, n.id, c.channel, 'sent', 1, n.created_at,"
            " n.created_at, n.created_at"
            " FROM notifications n, (VALUES ('email'), ('sms')) c(channel)"))
    with autocommit() as connection:
        connection.execute(text("VACUUM ANALYZE"))
    return accounts


def _open_deliveries() -> int:
    """Deliveries not final yet (queued or sending). Runs settle one after the other, so
    these are the current run's; counted on the pending-deliveries index, so polling does
    not load the database the benchmark measures."""
    from herald.db import session
    from models.notifications import Delivery

    with session() as s:
        return s.exec(select(func.count()).select_from(Delivery)
                      .where(Delivery.outcome.in_(["queued", "sending"]))).one()


def _produce(run: str, events: int, producers: int, accounts: list[str],
             bulk: int = 0) -> None:
    """Accept ``events`` events, one at a time (``bulk`` 0) or ``bulk`` at a time through
    ``trigger_events``."""
    from actors.orchestration import trigger_event, trigger_events

    if bulk:
        batches = [[{"account_id": accounts[n % len(accounts)], "type": "account.welcome",
                     "occurrence": f"{run}-{n}", "channels": ["email", "sms"]}
                    for n in range(start, min(start + bulk, events))]
                   for start in range(0, events, bulk)]

        def many(batch: list[dict[str, object]]) -> None:
            refused = [o for o in trigger_events(batch) if isinstance(o, Exception)]
            if refused:  # a refused event fails the run, as one-at-a-time does
                raise refused[0]

        if producers == 1:
            for batch in batches:
                many(batch)
            return
        with ThreadPoolExecutor(max_workers=producers) as pool:
            list(pool.map(many, batches))
        return

    def one(n: int) -> None:
        trigger_event(account_id=accounts[n % len(accounts)], type="account.welcome",
                      occurrence=f"{run}-{n}", channels=["email", "sms"])

    if producers == 1:  # no executor's hand-offs on the machine being measured
        for n in range(events):
            one(n)
        return
    with ThreadPoolExecutor(max_workers=producers) as pool:
        list(pool.map(one, range(events)))  # list(): a failed event fails the run


def _settle(run: str, events: int, producers: int, accounts: list[str],
            bulk: int = 0) -> None:
    """Accept ``events`` and wait until every delivery they made is final."""
    _produce(run, events, producers, accounts, bulk)
    while _open_deliveries():
        time.sleep(0.1)


def run_once(events: int, processes: int, accounts: list[str], producers: int,
             started: list, bulk: int = 0, *, repo: Path = REPO,
             watch: AbstractContextManager[object] | None = None
             ) -> tuple[float, dict[str, float]]:
    """Deliveries/s with ``processes`` worker processes, events from ``producers`` threads
    (each ``bulk`` at a time when not 0), the CPU ms per delivery each process group
    spent, and the workers' peak RSS. The workers run the code of ``repo`` (this
    checkout by default); ``watch`` is entered around the measured stretch alone."""
    workers = [subprocess.Popen(
        [sys.executable, "-m", "herald.cli", "worker", "--import", "bench.unlimited",
         "notification-email", "notification-sms"], cwd=repo,
        env={**os.environ, "WORKER_PORT": "0", "LOG_LEVEL": "WARNING"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(processes)]
    try:
        # warm up before the clock starts: the workers boot, connect and load templates
        _settle(uuid.uuid4().hex[:8], WARM_UP_EVENTS, producers, accounts, bulk)
        with CpuMeter([worker.pid for worker in workers], started) as meter, \
                watch or contextlib.nullcontext():
            clock = time.perf_counter()
            _settle(uuid.uuid4().hex[:8], events, producers, accounts, bulk)
            elapsed = time.perf_counter() - clock
        costs = {name: 1000 * cpu_s / (2 * events) for name, cpu_s in meter.spent.items()}
        costs["peak RSS per worker process, MB"] = max(_peak_rss_mb(w.pid) for w in workers)
        return 2 * events / elapsed, costs
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)


class _Counter:
    """Counts the statements run and the CPU time, while in the block."""

    def __init__(self) -> None:
        # every engine: the autocommit connections have a pool (an engine) of their own
        self.engine = Engine
        self.statements = 0
        self.cpu_s = 0.0

    def __enter__(self) -> _Counter:
        event.listen(self.engine, "before_cursor_execute", self._count)
        self.cpu_s = -time.process_time()
        return self

    def __exit__(self, *_: object) -> None:
        self.cpu_s += time.process_time()
        event.remove(self.engine, "before_cursor_execute", self._count)

    def _count(self, *_: object) -> None:
        self.statements += 1


def per_unit_costs(accounts: list[str], sample: int = 200, bulk: int = 0) -> dict[str, float]:
    """Statements and CPU ms of one ``trigger_event`` (email + SMS) and of one successful
    email delivery attempt (claim → sent), in process, one at a time; with ``bulk``, also
    those of one event accepted ``bulk`` at a time through ``trigger_events``."""
    from actors.notifications import DeliveryJob, deliver
    from actors.orchestration import flush_handoff_stamps, trigger_event

    run = uuid.uuid4().hex[:8]
    jobs = []
    with _Counter() as producing:
        for n in range(sample):
            result = trigger_event(account_id=accounts[n % len(accounts)],
                                   type="account.welcome", occurrence=f"{run}-{n}",
                                   channels=["email", "sms"])
            d = next(d for d in result.deliveries if d.channel == "email")
            jobs.append(DeliveryJob(delivery_id=d.id, notification_id=d.notification_id,
                                    channel="email"))
        flush_handoff_stamps()  # the stamps' UPDATEs (many events each) count too
    with _Counter() as delivering:
        for job in jobs:
            deliver(job)
    costs = {"event_statements": producing.statements / sample,
             "event_cpu_ms": 1000 * producing.cpu_s / sample,
             "delivery_statements": delivering.statements / sample,
             "delivery_cpu_ms": 1000 * delivering.cpu_s / sample}
    if bulk:
        events = max(sample, bulk)
        with _Counter() as bulk_producing:
            _produce(f"{run}-bulk", events, 1, accounts, bulk)
        costs |= {"bulk_event_statements": bulk_producing.statements / events,
                  "bulk_event_cpu_ms": 1000 * bulk_producing.cpu_s / events}
    return costs


def _bulk_label(bulk: int) -> str:
    return f", events {bulk} at a time (trigger_events)" if bulk else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--producers", type=int, default=1,
                        help="threads accepting events at once (default 1)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds of (machine speeds, 1 process, 2 processes); the "
                             "medians are reported (default 3)")
    parser.add_argument("--bulk", type=int, default=0, metavar="N",
                        help="also run 2 worker processes with the events accepted N at a "
                             "time through trigger_events, on lines of their own")
    args = parser.parse_args()
    if not 0 <= args.bulk <= 1000:
        parser.error("--bulk is 0 (off) to 1000 (trigger_events' limit)")
    env, started = _services()
    # (worker processes, events per trigger_events call; 0: one trigger_event each)
    rates: dict[tuple[int, int], list[float]] = {(1, 0): [], (2, 0): []}
    if args.bulk:
        rates[(2, args.bulk)] = []
    spent: dict[str, list[float]] = {}
    speeds: list[dict[str, float | None]] = []
    try:
        _configure({**env, "QUEUE_PREFIX": f"e2e{uuid.uuid4().hex[:6]}", "BROKER": "redis",
                    "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock", "LOG_LEVEL": "WARNING"})
        import logging

        logging.disable(logging.INFO)
        _reset_tables()
        accounts = _accounts()
        for _ in range(args.repeat):
            # the machine's speed moves between runs: measure it beside each round
            speeds.append(machine.measure(os.environ["DATABASE_URL"], os.environ["REDIS_URL"]))
            for processes, bulk in rates:
                rate, costs = run_once(args.events, processes, accounts, args.producers,
                                       started, bulk)
                rates[(processes, bulk)].append(rate)
                for name, value in costs.items():
                    label = name if name.startswith("peak") else f"CPU ms per delivery, {name}"
                    spent.setdefault(f"{processes} worker process(es){_bulk_label(bulk)}: "
                                     f"{label}", []).append(value)
        costs = per_unit_costs(accounts, bulk=args.bulk)
    finally:
        for service in started:
            service.stop()
    median = statistics.median
    lines = ["", f"End to end ({time.strftime('%Y-%m-%d %H:%M')}, PostgreSQL + Redis, mock "
             f"provider, {args.events} events × email + SMS from {args.producers} producer "
             f"thread(s), rate limits lifted; median of {args.repeat} rounds, each run in "
             "brackets):", "", "| measure | value |", "|---|---|"]
    lines += [f"| deliveries/s, {p} worker process(es){_bulk_label(bulk)} | "
              f"{median(values):,.0f} ({', '.join(f'{v:,.0f}' for v in values)}) |"
              for (p, bulk), values in rates.items()]
    lines += [f"| {name} | {median(values):.2f} |" for name, values in spent.items()]
    lines += [f"| database statements per delivered email (claim → sent) | "
              f"{costs['delivery_statements']:.1f} |",
              f"| CPU ms per delivered email attempt (in process) | "
              f"{costs['delivery_cpu_ms']:.1f} |",
              f"| database statements per event (email + SMS) | "
              f"{costs['event_statements']:.1f} |",
              f"| CPU ms per trigger_event (in process) | {costs['event_cpu_ms']:.1f} |"]
    if args.bulk:
        lines += [f"| database statements per event, {args.bulk} at a time (trigger_events) "
                  f"| {costs['bulk_event_statements']:.2f} |",
                  f"| CPU ms per event, {args.bulk} at a time (trigger_events, in process) "
                  f"| {costs['bulk_event_cpu_ms']:.2f} |"]
    lines += machine.table(speeds)
    publish(lines)


if __name__ == "__main__":
    main()
