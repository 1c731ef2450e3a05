"""How long fast jobs wait behind a slow group: a group limit against a whole-queue limit.

``python -m bench.groups [--sysco 20] [--costco 100] [--repeat 3]``: one queue, the Redis
broker (``$REDIS_URL`` or a private redis-server), one in-process worker. ``--sysco`` jobs
sleeping 200 ms are enqueued first, then ``--costco`` jobs sleeping 10 ms. Two
arrangements:

- **group limit**: concurrency 4, ``group_limits={"sysco": 1}``, costco unlimited;
- **concurrency 1**: the whole queue one job at a time, no groups (the only way to keep
  sysco serial in a queue without group limits).

Per run it reads from the ledger each job's enqueue time and start time and reports the
costco jobs' wait (start − enqueue) p50 / p99, the sysco jobs' wait p50, the time until
the last job ended, and the most sysco jobs ever active at once (must be 1). Prints the
medians of the repeats and appends them to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from datetime import timedelta
from typing import Any

from bench import publish
from bench.run import _redis_url
from herald.queue_app import reinstall_queue_app

QUEUE = "bench-groups"
SYSCO_S = 0.2
COSTCO_S = 0.01


def _setup(url: str, prefix: str, grouped: bool) -> Any:
    """Point herald at ``url`` under ``prefix`` and declare the queue and its actor."""
    os.environ.update({"REDIS_URL": url, "QUEUE_PREFIX": prefix, "LOG_LEVEL": "WARNING",
                       "BROKER": "redis"})
    from pydantic import BaseModel

    from herald import settings
    from herald.queue import Keep, QueueSpec, Registry, Retention

    settings.reset_settings()
    registry = Registry()
    registry.declare(QueueSpec(name=QUEUE, concurrency=4 if grouped else 1, attempts=1,
                               lock_duration=timedelta(seconds=30),
                               retention=Retention(completed=Keep(count=100_000)),
                               group_limits={"sysco": 1} if grouped else {}))

    class Sleep(BaseModel):
        seconds: float

    @registry.actor(queue=QUEUE, payload=Sleep, name="bench_sleep")
    def sleep(job: Sleep) -> None:
        time.sleep(job.seconds)

    reinstall_queue_app(extra=(registry,))
    return sleep


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of these (start, end) intervals that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = current = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        current += step
        most = max(most, current)
    return most


def run_once(url: str, sysco: int, costco: int, grouped: bool) -> dict[str, float]:
    """Enqueue sysco-first, run until all are done; the waits, from the ledger's records."""
    prefix = f"grp{os.getpid()}{'g' if grouped else 'c'}{time.monotonic_ns()}"
    sleep = _setup(url, prefix, grouped)
    from herald.queue import enqueue_many, queue, running_worker

    q = queue(QUEUE)
    with running_worker([QUEUE]):
        enqueue_many(sleep, [({"seconds": SYSCO_S}, {"job_id": f"s{i}", "group": "sysco"})
                             for i in range(sysco)])
        enqueue_many(sleep, [({"seconds": COSTCO_S}, {"job_id": f"c{i}", "group": "costco"})
                             for i in range(costco)])
        while q.counts()["completed"] < sysco + costco:
            time.sleep(0.05)
    jobs = [q.get(f"s{i}") for i in range(sysco)] + [q.get(f"c{i}") for i in range(costco)]
    first = min(job.created_at for job in jobs)

    def wait_ms(job: Any) -> float:
        return (job.processed_at - job.created_at).total_seconds() * 1000

    costco_waits = [wait_ms(job) for job in jobs if job.id.startswith("c")]
    sysco_jobs = [job for job in jobs if job.id.startswith("s")]
    q.obliterate()
    return {"costco_p50": _percentile(costco_waits, 0.5),
            "costco_p99": _percentile(costco_waits, 0.99),
            "sysco_p50": _percentile([wait_ms(job) for job in sysco_jobs], 0.5),
            "makespan_s": max((job.finished_at - first).total_seconds() for job in jobs),
            "sysco_at_once": _most_at_once([(job.processed_at.timestamp(),
                                             job.finished_at.timestamp())
                                            for job in sysco_jobs])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sysco", type=int, default=20)
    parser.add_argument("--costco", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    url, stop = _redis_url()
    try:
        runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for _ in range(args.repeat):
            for grouped in (True, False):  # alternate, so a machine hiccup hits both
                runs[grouped].append(run_once(url, args.sysco, args.costco, grouped))
    finally:
        stop()

    def median(grouped: bool, key: str) -> float:
        return statistics.median(run[key] for run in runs[grouped])

    lines = [f"## bench.groups {time.strftime('%Y-%m-%d %H:%M')} — {args.sysco} sysco × "
             f"{int(SYSCO_S * 1000)} ms then {args.costco} costco × {int(COSTCO_S * 1000)} ms, "
             f"one worker, median of {args.repeat}", "",
             "| arrangement | costco wait p50 | costco wait p99 | sysco wait p50 "
             "| all done after | sysco at once (max) |", "|---|---|---|---|---|---|"]
    for grouped, name in ((True, "group limit sysco=1, concurrency 4"),
                          (False, "whole queue at concurrency 1")):
        lines.append(f"| {name} | {median(grouped, 'costco_p50'):,.0f} ms "
                     f"| {median(grouped, 'costco_p99'):,.0f} ms "
                     f"| {median(grouped, 'sysco_p50'):,.0f} ms "
                     f"| {median(grouped, 'makespan_s'):.2f} s "
                     f"| {max(run['sysco_at_once'] for run in runs[grouped]):.0f} |")
    publish([*lines, ""])


if __name__ == "__main__":
    main()
