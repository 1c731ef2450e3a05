"""Prometheus metrics of the queue layer, as an operator scrapes them."""

from __future__ import annotations

from fastapi.testclient import TestClient

from herald.queue import enqueue, queue
from herald.queue.worker import running_worker
from herald.web import create_app
from tests.queue.conftest import HeraldOn, wait_for
from tests.support.queue.queues import basic, events


def test_metrics_count_outcomes_dedup_and_durations(herald_on: HeraldOn) -> None:
    enqueue(basic, {"key": "ok"}, dedup_id="m1")
    enqueue(basic, {"key": "dup"}, dedup_id="m1")
    enqueue(basic, {"key": "bad", "permanent": True})
    with running_worker(["t-basic"]):
        wait_for(lambda: len(events("start")) == 2)
        wait_for(lambda: queue("t-basic").counts()["active"] == 0)
    body = TestClient(create_app()).get("/metrics").text
    assert 'queue_jobs_total{outcome="completed",queue="t-basic"} 1.0' in body
    assert 'queue_jobs_total{outcome="failed",queue="t-basic"} 1.0' in body
    assert 'queue_jobs_deduplicated_total{queue="t-basic"} 1.0' in body
    assert 'queue_job_duration_seconds_count{queue="t-basic"}' in body
