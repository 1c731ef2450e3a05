"""GET /admin/health/queues: one row per registry queue, the 24-hour failure window, and
every queue route's 404 for a name outside the registry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from herald.queue import current_app, enqueue, queue
from tests.admin.conftest import ADMIN_HEADERS
from tests.support.admin.workload import QUEUE, age_failure, console_work, run_jobs

ROW_KEYS = {"name", "waiting", "active", "delayed", "paused", "completed", "failed",
            "failed_24h", "concurrency", "rate_limit", "is_paused"}


def rows(client: TestClient) -> dict[str, dict]:
    response = client.get("/admin/health/queues", headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["generated_at"]
    return {row["name"]: row for row in body["queues"]}


def test_every_registry_queue_has_a_row_in_registry_order(client: TestClient) -> None:
    # When the operator reads the queues' health
    response = client.get("/admin/health/queues", headers=ADMIN_HEADERS)
    # Then every registry queue has a row, in the registry's order, with the pinned fields
    names = [row["name"] for row in response.json()["queues"]]
    assert names == [spec.name for spec in current_app().specs()]
    assert "notification-email" in names and "email-retry" in names
    assert all(set(row) == ROW_KEYS for row in response.json()["queues"])
    # And the registry's worker concurrency and rate limit sit beside the counts
    email = rows(client)["notification-email"]
    assert email["concurrency"] == 5
    assert email["rate_limit"] == {"max": 30, "per_s": 60.0}
    assert rows(client)["email-retry"]["rate_limit"] is None


def test_a_row_counts_each_state_of_real_jobs(client: TestClient) -> None:
    # Given two jobs that completed, three that failed, one delayed, and the queue paused
    # with one job waiting
    run_jobs(ok=2, failing=3)
    enqueue(console_work, {"key": "later"}, job_id="later", delay=timedelta(hours=1))
    queue(QUEUE).pause()
    enqueue(console_work, {"key": "held"}, job_id="held")
    # When the operator reads the health rows
    row = rows(client)[QUEUE]
    # Then the row holds those counts and the registry's values
    assert {k: row[k] for k in ("waiting", "active", "delayed", "paused", "completed",
                                "failed", "failed_24h", "is_paused")} == {
        "waiting": 0, "active": 0, "delayed": 1, "paused": 1, "completed": 2, "failed": 3,
        "failed_24h": 3, "is_paused": True}
    assert row["concurrency"] == 2 and row["rate_limit"] == {"max": 100, "per_s": 10.0}


def test_only_failures_of_the_last_24_hours_count_as_recent(client: TestClient) -> None:
    # Given three real failures: one 25 hours old, one an hour old, one just now
    run_jobs(failing=3, prefix="window")
    age_failure("window-bad-0", timedelta(hours=25))
    age_failure("window-bad-1", timedelta(hours=1))
    # When the operator reads the health rows
    row = rows(client)[QUEUE]
    # Then all three are retained, but only the two of the last 24 hours count as recent
    assert (row["failed"], row["failed_24h"]) == (3, 2)
    # And the old failure stays inspectable
    old = client.get(f"/admin/health/queues/{QUEUE}/jobs/window-bad-0", headers=ADMIN_HEADERS)
    assert old.status_code == 200 and old.json()["state"] == "failed"


QUEUE_ROUTES = [("GET", "/admin/health/queues/{q}/jobs"),
                ("GET", "/admin/health/queues/{q}/jobs/some-job"),
                ("GET", "/admin/health/queues/{q}/history"),
                ("POST", "/admin/health/queues/{q}/retry"),
                ("POST", "/admin/health/queues/{q}/pause"),
                ("POST", "/admin/health/queues/{q}/obliterate"),
                ("POST", "/admin/health/queues/{q}/jobs/some-job/retry"),
                ("POST", "/admin/health/queues/{q}/jobs/some-job/remove")]


@pytest.mark.parametrize(("method", "route"), QUEUE_ROUTES)
def test_a_queue_outside_the_registry_is_404_never_empty(client: TestClient, method: str,
                                                         route: str) -> None:
    # When a route names a queue the registry does not declare
    response = client.request(method, route.format(q="no-such-queue"), headers=ADMIN_HEADERS)
    # Then it is a 404 naming the problem, not an empty result
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_queue"
