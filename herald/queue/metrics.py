"""Prometheus metrics of the queue layer.

Job outcome counters live in Redis (each ledger script bumps its queue's ``metrics``
hash), so ``queue_jobs_total`` and ``queue_jobs_deduplicated_total`` are global across
every process; a collector reads them at scrape time for the registry's queues. Run
durations are measured where they happen, per process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from herald.queue.ledger_queries import LedgerQueries

log = logging.getLogger(__name__)

JOB_DURATION = Histogram("queue_job_duration_seconds", "Time one run of a job took.",
                         ["queue"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                             5, 10, 30, 60, 120))

#: Ledger counters exposed as queue_jobs_total outcomes.
OUTCOMES = ("completed", "failed", "retried", "deferred", "stalled", "duplicated")


class Durations:
    """Records how long runs took, per queue (one per broker's middleware)."""

    def __init__(self) -> None:
        #: the histogram child of each queue: ``labels()`` takes a lock and builds a key
        #: on every call, and this runs once per job
        self._children: dict[str, Histogram] = {}

    def observe(self, queue: str, seconds: float) -> None:
        """Record how long one run of ``queue`` took."""
        child = self._children.get(queue)
        if child is None:
            child = self._children.setdefault(queue, JOB_DURATION.labels(queue=queue))
        child.observe(seconds)


class LedgerCollector(Collector):
    """Reads the ledger counters and counts of the queues ``names()`` lists (every queue
    of the App) at scrape time, each from ``queries(queue)``: its shard's ledger."""

    def __init__(self, queries: Callable[[str], LedgerQueries],
                 names: Callable[[], Iterable[str]]) -> None:
        self.queries = queries
        self.names = names

    def describe(self) -> Iterator[Metric]:
        """The families :meth:`collect` yields, without values: registering the collector
        then reads nothing (Redis may be away)."""
        yield from self._families()

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, CounterMetricFamily, GaugeMetricFamily]:
        return (CounterMetricFamily("queue_jobs", "Jobs by queue and outcome.",
                                    labels=["queue", "outcome"]),
                CounterMetricFamily("queue_jobs_deduplicated",
                                    "Adds suppressed by a held dedup id.", labels=["queue"]),
                GaugeMetricFamily("queue_depth", "Jobs per queue and state right now.",
                                  labels=["queue", "state"]))

    def collect(self) -> Iterator[Metric]:
        """Every registry queue's outcome counters and counts by state, read now; nothing
        (and a warning) when Redis does not answer."""
        jobs_total, dedup_total, depth = self._families()
        try:
            for queue in self.names():
                queries = self.queries(queue)
                counters = queries.metrics(queue)
                for outcome in OUTCOMES:
                    jobs_total.add_metric([queue, outcome], counters.get(outcome, 0))
                dedup_total.add_metric([queue], counters.get("deduplicated", 0))
                for state, count in queries.counts(queue).items():
                    depth.add_metric([queue, state], count)
        except Exception as error:  # a scrape must not fail because Redis is down
            log.warning("ledger metrics unavailable: %s", type(error).__name__)
            return
        yield jobs_total
        yield dedup_total
        yield depth


#: The media type of :func:`exposition`'s text.
CONTENT_TYPE = CONTENT_TYPE_LATEST


def exposition() -> bytes:
    """Every metric of this process in the Prometheus text format (:data:`CONTENT_TYPE`),
    the installed App's queue metrics included (its install registered their collector):
    what the web app and the worker health servers serve on ``/metrics``."""
    return generate_latest()
