"""GET /admin/health/queues/{name}/history: completed and failed jobs per minute, the
last hour, oldest first."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from fastapi.testclient import TestClient

from tests.admin.conftest import ADMIN_HEADERS
from tests.support.admin.workload import QUEUE, run_jobs

HISTORY = f"/admin/health/queues/{QUEUE}/history"


def test_the_history_has_sixty_minutes_oldest_first(client: TestClient) -> None:
    # Given a queue that ran nothing yet
    # When the operator reads its throughput history
    before = datetime.now().astimezone()
    response = client.get(HISTORY, headers=ADMIN_HEADERS)
    after = datetime.now().astimezone()
    # Then it holds the last 60 minutes, one minute apart, the current one last, all zero
    body = response.json()
    assert response.status_code == 200 and body["queue"] == QUEUE
    minutes = body["minutes"]
    assert len(minutes) == 60
    starts = [datetime.fromisoformat(m["at"]) for m in minutes]
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(starts))
    current = starts[-1]
    assert current <= after and current > before - timedelta(minutes=1)
    assert all((m["completed"], m["failed"]) == (0, 0) for m in minutes)


def test_the_history_counts_the_jobs_that_finished(client: TestClient) -> None:
    # Given four jobs that completed and three that failed, run by a real worker
    run_jobs(ok=4, failing=3)
    # When the operator reads the queue's history
    minutes = client.get(HISTORY, headers=ADMIN_HEADERS).json()["minutes"]
    # Then the last minutes hold exactly those (a run may straddle a minute's end)
    assert sum(m["completed"] for m in minutes) == 4
    assert sum(m["failed"] for m in minutes) == 3
    assert all((m["completed"], m["failed"]) == (0, 0) for m in minutes[:-2])
