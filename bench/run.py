"""Side-by-side throughput: plain Dramatiq vs herald on the same Redis, noop jobs.

``python -m bench.run [--jobs N] [--repeat R]`` (``make bench``). Uses ``$REDIS_URL`` or
starts a private redis-server. Prints, and appends to ``bench/results.md``: single enqueue/s,
bulk enqueue/s, processed/s with 1 process × 8 threads and 2 processes × 8 threads, the
ratios herald/plain, and the ceiling of Dramatiq's worker with no I/O (StubBroker).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable

from bench import publish

THREADS = 8


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
def _herald_setup(url: str, prefix: str):
    os.environ.update({"REDIS_URL": url, "QUEUE_PREFIX": prefix, "LOG_LEVEL": "WARNING",
                       "BROKER": "redis"})
    from pydantic import BaseModel

    from herald import jobs, settings
    from herald.queue.redis import reset_redis_client
    from herald.queue.registry import Keep, QueueSpec, Retention, declare

    settings.reset_settings()
    reset_redis_client()
    jobs.reset_brokers()
    declare(QueueSpec(name="bench-herald", concurrency=THREADS, attempts=1,
                      retention=Retention(completed=Keep(count=1000))))

    class Noop(BaseModel):
        n: int

    @jobs.actor(queue="bench-herald", payload=Noop, name="noop")
    def noop(job: Noop) -> None:
        return None

    return noop


def _herald_worker(url: str, prefix: str, seconds_limit: float) -> None:
    import logging

    _herald_setup(url, prefix)
    logging.disable(logging.INFO)
    from herald.queue.worker import running_worker

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
    started = time.perf_counter()
    workers = [multiprocessing.Process(target=_herald_worker, args=(url, prefix, 600))
               for _ in range(processes)]
    for w in workers:
        w.start()
    while True:
        counts = q.counts()
        if counts["waiting"] == 0 and counts["active"] == 0:
            break
        time.sleep(0.01)
    processed_rate = jobs / (time.perf_counter() - started)
    for w in workers:
        w.terminate()
        w.join()
    return {"enqueue": enqueue_rate, "bulk": bulk_rate, "processed": processed_rate}


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
    args = parser.parse_args()
    multiprocessing.set_start_method("fork")
    url, stop = _redis_url()
    rows: dict[str, list[float]] = {}
    try:
        for _ in range(args.repeat):
            for processes in (1, 2):
                plain = plain_run(url, args.jobs, processes)
                ours = herald_run(url, args.jobs, processes)
                rows.setdefault(f"plain processed/s ({processes}×{THREADS})", []).append(
                    plain["processed"])
                rows.setdefault(f"herald processed/s ({processes}×{THREADS})", []).append(
                    ours["processed"])
                if processes == 1:
                    rows.setdefault("plain send/s (single)", []).append(plain["enqueue"])
                    rows.setdefault("herald enqueue/s (single)", []).append(ours["enqueue"])
                    rows.setdefault("herald enqueue_many/s", []).append(ours["bulk"])
            rows.setdefault("StubBroker ceiling processed/s (1×8)", []).append(
                stub_ceiling(args.jobs))
    finally:
        stop()
    median = {name: statistics.median(values) for name, values in rows.items()}
    lines = [f"Median of {args.repeat}, {args.jobs} noop jobs, same Redis, "
             f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}.", "",
             "| measure | jobs/s |", "|---|---|"]
    lines += [f"| {name} | {value:,.0f} |" for name, value in median.items()]
    for processes in (1, 2):
        ratio = (median[f"herald processed/s ({processes}×{THREADS})"]
                 / median[f"plain processed/s ({processes}×{THREADS})"])
        lines.append(f"| ratio herald/plain processed ({processes}×{THREADS}) | {ratio:.2f} |")
    ratio = median["herald enqueue/s (single)"] / median["plain send/s (single)"]
    lines.append(f"| ratio herald enqueue / plain send | {ratio:.2f} |")
    publish(["", *lines])


if __name__ == "__main__":
    main()
