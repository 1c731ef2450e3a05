"""Side-by-side throughput: plain Dramatiq vs herald on the same Redis, noop jobs.

``python -m bench.run [--jobs N] [--repeat R]`` (``make bench``). Uses ``$REDIS_URL`` or
starts a private redis-server. Prints, and appends to ``bench/results.md``: single enqueue/s,
bulk enqueue/s, processed/s with 1 process × 8 threads and 2 processes × 8 threads, the
ratios herald/plain, and the ceiling of Dramatiq's worker with no I/O (StubBroker).

It also measures herald's processing with logging as shipped against logging off, side by
side (``--logging-only`` runs just that): each worker process runs ``herald worker``'s own
entry point (:func:`herald.cli.main`: settings, ``configure_logging``, health port, signal
drain) with ``LOG_LEVEL=INFO``, the default, and its stderr on a file, so it logs exactly
what a production ``herald worker`` writes; "off" is the same process with
``logging.disable(logging.INFO)``, as in the herald/plain comparison.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench import publish
from bench.noop_queue import THREADS
from herald.queue_app import reinstall_queue_app


def _redis_url() -> tuple[str, Callable[[], None]]:
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"], lambda: None
    from tests.support.services import make_tempdir, start_redis

    service = start_redis(make_tempdir())
    return service.url, service.stop


# -- plain Dramatiq --------------------------------------------------------------------
def _plain_broker(url: str):
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=url)
    dramatiq.set_broker(broker)

    @dramatiq.actor(broker=broker, queue_name="bench-plain", max_retries=0)
    def noop(n: int) -> None:
        return None

    return broker, noop


def _plain_worker(url: str, seconds_limit: float) -> None:
    import dramatiq

    broker, _ = _plain_broker(url)
    worker = dramatiq.Worker(broker, worker_threads=THREADS)
    worker.start()
    time.sleep(seconds_limit)
    worker.stop()


def plain_run(url: str, jobs: int, processes: int) -> dict[str, float]:
    import redis

    _, noop = _plain_broker(url)
    redis.Redis.from_url(url).flushall()
    started = time.perf_counter()
    for i in range(jobs):
        noop.send(i)
    enqueue_rate = jobs / (time.perf_counter() - started)
    client = redis.Redis.from_url(url)
    key = "dramatiq:bench-plain.msgs"
    started = time.perf_counter()
    workers = [multiprocessing.Process(target=_plain_worker, args=(url, 600))
               for _ in range(processes)]
    for w in workers:
        w.start()
    while client.hlen(key) > 0:
        time.sleep(0.01)
    processed_rate = jobs / (time.perf_counter() - started)
    for w in workers:
        w.terminate()
        w.join()
    return {"enqueue": enqueue_rate, "processed": processed_rate}


# -- herald ------------------------------------------------------------------------------
def _herald_setup(url: str, prefix: str) -> Any:
    """herald in this process on ``url`` under ``prefix``, with the benchmark's queue
    (bench/noop_queue.py); returns its noop actor."""
    os.environ.update({"REDIS_URL": url, "QUEUE_PREFIX": prefix, "LOG_LEVEL": "WARNING",
                       "BROKER": "redis"})
    from bench import noop_queue
    from herald import settings

    settings.reset_settings()
    reinstall_queue_app(extra=(noop_queue.registry,))
    return noop_queue.noop


def _herald_worker(url: str, prefix: str, seconds_limit: float) -> None:
    import logging

    _herald_setup(url, prefix)
    logging.disable(logging.INFO)
    from herald.queue import running_worker

    with running_worker(["bench-herald"]):
        time.sleep(seconds_limit)


def herald_run(url: str, jobs: int, processes: int) -> dict[str, float]:
    import logging

    import redis

    prefix = f"bench{os.getpid()}x{processes}"
    noop = _herald_setup(url, prefix)
    logging.disable(logging.INFO)
    from herald.queue import enqueue, enqueue_many, queue

    redis.Redis.from_url(url).flushall()
    single = min(jobs, 5000)
    started = time.perf_counter()
    for i in range(single):
        enqueue(noop, {"n": i})
    enqueue_rate = single / (time.perf_counter() - started)
    queue("bench-herald").obliterate()
    started = time.perf_counter()
    enqueue_many(noop, [{"n": i} for i in range(jobs)])
    bulk_rate = jobs / (time.perf_counter() - started)
    q = queue("bench-herald")
    processed_rate = jobs / _drain(q, [multiprocessing.Process(
        target=_herald_worker, args=(url, prefix, 600)) for _ in range(processes)])
    return {"enqueue": enqueue_rate, "bulk": bulk_rate, "processed": processed_rate}


def _drain(q: Any, workers: list[multiprocessing.Process]) -> float:
    """Seconds ``workers`` take, started now, to leave ``q`` with nothing waiting or
    active; they are stopped afterwards."""
    started = time.perf_counter()
    for w in workers:
        w.start()
    while True:
        counts = q.counts()
        if counts["waiting"] == 0 and counts["active"] == 0:
            break
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    for w in workers:
        w.terminate()
        w.join()
    return elapsed


def _herald_cli_worker(url: str, prefix: str, log_path: str, logging_on: bool) -> None:
    """A worker process as ``herald worker bench-herald`` runs it, its stderr on
    ``log_path``; with ``logging_on`` False, INFO and below are disabled."""
    import logging

    from herald import cli

    _herald_setup(url, prefix)
    # the shipped default level; WORKER_PORT=0: each worker's health server on any port
    os.environ.update({"LOG_LEVEL": "INFO", "WORKER_PORT": "0"})
    from herald import settings

    settings.reset_settings()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    # the bench process disabled INFO before the fork; a production worker has not
    logging.disable(logging.NOTSET if logging_on else logging.INFO)
    sys.exit(cli.main(["worker", "--import", "bench.noop_queue", "bench-herald"]))


def herald_logging_run(url: str, jobs: int, processes: int, logging_on: bool,
                       log_dir: str) -> dict[str, float]:
    """herald processed/s with its workers logging as shipped (or with logging off), and
    the lines they logged per job (read back from their stderr files)."""
    import logging

    import redis

    prefix = f"benchlog{os.getpid()}x{processes}"
    noop = _herald_setup(url, prefix)
    logging.disable(logging.INFO)
    from herald.commands.shared import load_actor_modules
    from herald.queue import enqueue_many, queue

    # imported before the fork, so no worker spends the clock importing the actors
    load_actor_modules()
    redis.Redis.from_url(url).flushall()
    enqueue_many(noop, [{"n": i} for i in range(jobs)])
    q = queue("bench-herald")
    paths = [os.path.join(log_dir, f"worker-{'on' if logging_on else 'off'}-{time.time_ns()}"
                          f"-{index}.log") for index in range(processes)]
    processed_rate = jobs / _drain(q, [multiprocessing.Process(
        target=_herald_cli_worker, args=(url, prefix, path, logging_on)) for path in paths])
    lines = 0
    for path in paths:
        with open(path, "rb") as log_file:
            lines += sum(1 for _ in log_file)
        os.unlink(path)
    return {"processed": processed_rate, "lines per job": lines / jobs}


def stub_ceiling(jobs: int) -> float:
    """Dramatiq's worker on the in-memory StubBroker: the no-I/O ceiling."""
    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    broker = StubBroker()

    @dramatiq.actor(broker=broker, queue_name="stub", max_retries=0)
    def noop(n: int) -> None:
        return None

    for i in range(jobs):
        noop.send(i)
    worker = dramatiq.Worker(broker, worker_threads=THREADS)
    started = time.perf_counter()
    worker.start()
    broker.join("stub")
    worker.join()
    rate = jobs / (time.perf_counter() - started)
    worker.stop()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--logging-only", action="store_true",
                        help="only herald with logging as shipped against logging off")
    parser.add_argument("--label", default="",
                        help="what code this is, for results.md (old and new alternated)")
    args = parser.parse_args()
    multiprocessing.set_start_method("fork")
    url, stop = _redis_url()
    rows: dict[str, list[float]] = {}
    log_dir = tempfile.mkdtemp(prefix="bench-logs-")
    try:
        for round_ in range(args.repeat):
            for processes in (1, 2):
                if not args.logging_only:
                    plain = plain_run(url, args.jobs, processes)
                    ours = herald_run(url, args.jobs, processes)
                    rows.setdefault(f"plain processed/s ({processes}×{THREADS})", []).append(
                        plain["processed"])
                    rows.setdefault(f"herald processed/s ({processes}×{THREADS})", []).append(
                        ours["processed"])
                    if processes == 1:
                        rows.setdefault("plain send/s (single)", []).append(plain["enqueue"])
                        rows.setdefault("herald enqueue/s (single)", []).append(
                            ours["enqueue"])
                        rows.setdefault("herald enqueue_many/s", []).append(ours["bulk"])
                # on and off alternate which goes first, so neither always runs on the
                # machine state the other left
                for logging_on in (True, False) if round_ % 2 == 0 else (False, True):
                    name = "logging as shipped" if logging_on else "logging off"
                    run = herald_logging_run(url, args.jobs, processes, logging_on, log_dir)
                    rows.setdefault(f"herald processed/s, {name} ({processes}×{THREADS})",
                                    []).append(run["processed"])
                    rows.setdefault(f"herald log lines per job, {name} ({processes}×{THREADS})",
                                    []).append(run["lines per job"])
            if not args.logging_only:
                rows.setdefault("StubBroker ceiling processed/s (1×8)", []).append(
                    stub_ceiling(args.jobs))
    finally:
        stop()
        os.rmdir(log_dir)
    median = {name: statistics.median(values) for name, values in rows.items()}
    lines = [f"bench.run: median of {args.repeat}, {args.jobs} noop jobs, same Redis, "
             f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}"
             + (f", {args.label}." if args.label else "."), "",
             "| measure | median | each round |", "|---|---|---|"]
    for name, value in median.items():
        each = ", ".join(_figure(v) for v in rows[name])
        lines.append(f"| {name} | {_figure(value)} | {each} |")
    for processes in (1, 2):
        shape = f"{processes}×{THREADS}"
        if not args.logging_only:
            plain = median[f"plain processed/s ({shape})"]
            ratio = median[f"herald processed/s ({shape})"] / plain
            lines.append(f"| ratio herald/plain processed ({shape}) | {ratio:.2f} | |")
            # what a user gets: herald as shipped against plain Dramatiq (which logs
            # nothing per job at INFO)
            ratio = median[f"herald processed/s, logging as shipped ({shape})"] / plain
            lines.append(f"| ratio herald logging as shipped / plain processed ({shape}) | "
                         f"{ratio:.2f} | |")
        on = rows[f"herald processed/s, logging as shipped ({shape})"]
        off = rows[f"herald processed/s, logging off ({shape})"]
        each = ", ".join(f"{a / b:.2f}" for a, b in zip(on, off, strict=True))
        ratio = statistics.median(on) / statistics.median(off)
        lines.append(f"| ratio herald logging as shipped / off ({shape}) | {ratio:.2f} | "
                     f"{each} |")
    if not args.logging_only:
        ratio = median["herald enqueue/s (single)"] / median["plain send/s (single)"]
        lines.append(f"| ratio herald enqueue / plain send | {ratio:.2f} | |")
    publish(["", *lines])


def _figure(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


if __name__ == "__main__":
    main()
