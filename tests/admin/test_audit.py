"""GET /admin/audit: the audit log newest first, paged, as the console's actions wrote it."""

from __future__ import annotations

from fastapi.testclient import TestClient

from herald import db
from models.audit import SYSTEM_ACTOR, record_audit
from tests.admin.conftest import ADMIN_HEADERS
from tests.support.admin.workload import QUEUE, run_jobs

ENTRY_KEYS = {"id", "actor", "action", "target", "queue", "job_id", "count", "at",
              "completed_at", "error", "detail"}


def test_the_audit_log_lists_actions_newest_first(client: TestClient) -> None:
    # Given two failed jobs; the operator retries one, then pauses the queue
    run_jobs(failing=2)
    client.post(f"/admin/health/queues/{QUEUE}/jobs/job-bad-1/retry", headers=ADMIN_HEADERS)
    client.post(f"/admin/health/queues/{QUEUE}/pause", headers=ADMIN_HEADERS)
    # When the operator reads the audit log
    response = client.get("/admin/audit", headers=ADMIN_HEADERS)
    # Then both actions are there, newest first, saying who did what to which queue and
    # job, how many, and when
    body = response.json()
    assert response.status_code == 200 and (body["page"], body["per_page"]) == (1, 50)
    pause, retry = body["entries"]
    assert all(set(entry) == ENTRY_KEYS for entry in body["entries"])
    assert (pause["actor"], pause["action"], pause["queue"], pause["job_id"],
            pause["count"]) == ("admin", "queue.pause", QUEUE, None, 1)
    assert (retry["actor"], retry["action"], retry["queue"], retry["job_id"],
            retry["count"]) == ("admin", "job.retry", QUEUE, "job-bad-1", 1)
    assert retry["target"] == f"{QUEUE}/job-bad-1" and retry["detail"] == {"state": "failed"}
    assert pause["at"] >= retry["at"] and pause["completed_at"] and pause["error"] is None


def test_the_audit_log_is_paged(client: TestClient) -> None:
    # Given 51 audited actions
    with db.session() as session:
        for i in range(51):
            record_audit(session, actor=SYSTEM_ACTOR, action="queue.clean", target=QUEUE,
                         queue=QUEUE, count=i, detail={"n": i})
    # When the operator reads the first two pages
    first = client.get("/admin/audit", headers=ADMIN_HEADERS).json()
    second = client.get("/admin/audit", params={"page": 2}, headers=ADMIN_HEADERS).json()
    # Then the first holds the 50 newest, the second the oldest one
    assert len(first["entries"]) == 50 and first["entries"][0]["count"] == 50
    assert [e["count"] for e in second["entries"]] == [0] and second["page"] == 2
    # And a page 0 is refused
    assert client.get("/admin/audit", params={"page": 0},
                      headers=ADMIN_HEADERS).status_code == 422
