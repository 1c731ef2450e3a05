"""The console's actions: each bulk action's effect on a queue of real jobs and its audit
row, the per-job actions and their refusals, and the row an action that dies leaves."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from herald import db
from herald.queue import enqueue, queue, running_worker
from models.audit import recent_audit
from tests.admin.conftest import ADMIN_HEADERS
from tests.support.admin.workload import GATE, QUEUE, console_work, point_at_stopped_redis, run_jobs
from tests.support.waiting import wait_for

ACTIONS = f"/admin/health/queues/{QUEUE}"


def act(client: TestClient, verb: str, body: dict[str, Any] | None = None,
        status: int = 200) -> dict[str, Any]:
    response = client.post(f"{ACTIONS}/{verb}", json=body, headers=ADMIN_HEADERS)
    assert response.status_code == status, response.text
    return response.json()


def audit_rows() -> list[dict[str, Any]]:
    """The audit log as stored, newest first."""
    with db.session() as session:
        return [entry.model_dump() for entry in recent_audit(session)]


def assert_audited(action: str, count: int, detail: dict[str, Any], job_id: str | None = None,
                   ) -> None:
    """The newest audit row is this completed action by the admin."""
    row = audit_rows()[0]
    assert (row["actor"], row["action"], row["queue"], row["job_id"]) == (
        "admin", action, QUEUE, job_id)
    assert (row["count"], row["detail"], row["error"]) == (count, detail, None)
    assert row["completed_at"] is not None and row["completed_at"] >= row["at"]


def counts() -> dict[str, int]:
    return queue(QUEUE).counts()


def test_retry_runs_every_failed_job_again(client: TestClient) -> None:
    # Given three failed jobs and one completed
    run_jobs(ok=1, failing=3)
    # When the operator retries the queue
    answer = act(client, "retry")
    # Then the three wait to run again, the completed one is untouched, and it is audited
    assert answer == {"action": "retry", "queue": QUEUE, "count": 3}
    assert (counts()["failed"], counts()["waiting"], counts()["completed"]) == (0, 3, 1)
    assert_audited("queue.retry", 3, {})


def test_remove_takes_every_job_of_one_state(client: TestClient) -> None:
    # Given two failed jobs, one completed and one delayed
    run_jobs(ok=1, failing=2)
    enqueue(console_work, {"key": "later"}, job_id="later", delay=timedelta(hours=1))
    # When the operator removes the failed ones
    answer = act(client, "remove", {"state": "failed"})
    # Then only those are gone, and it is audited with the state
    assert answer["count"] == 2
    assert (counts()["failed"], counts()["completed"], counts()["delayed"]) == (0, 1, 1)
    assert queue(QUEUE).get("job-bad-0") is None
    assert_audited("queue.remove", 2, {"state": "failed"})


def test_bad_parameters_are_refused_and_change_nothing(client: TestClient) -> None:
    # Given a failed job and a completed one
    run_jobs(ok=1, failing=1)
    # When the operator removes without a state, removes active jobs, cleans waiting
    # jobs, drains with a state, names an unknown action or sends a negative grace
    refused = [act(client, "remove", status=422),
               act(client, "remove", {"state": "active"}, status=422),
               act(client, "clean", {"state": "waiting"}, status=422),
               act(client, "drain", {"state": "failed"}, status=422),
               act(client, "explode", status=422),
               act(client, "clean", {"grace_s": -1}, status=422)]
    # Then each is a clear 422, nothing changed, and nothing was audited
    assert all(body["error"]["message"] for body in refused)
    assert "state" in refused[0]["error"]["message"]
    assert (counts()["failed"], counts()["completed"]) == (1, 1)
    assert audit_rows() == []


def test_pause_and_resume_say_whether_they_changed_the_queue(client: TestClient) -> None:
    # When the operator pauses the queue twice, then resumes it
    first, again = act(client, "pause"), act(client, "pause")
    paused = queue(QUEUE).is_paused()
    resumed = act(client, "resume")
    # Then the first pause paused it, the second changed nothing, resume resumed it
    assert (first["count"], again["count"], resumed["count"]) == (1, 0, 1)
    assert paused and not queue(QUEUE).is_paused()
    assert [row["action"] for row in audit_rows()] == ["queue.resume", "queue.pause",
                                                       "queue.pause"]
    assert_audited("queue.resume", 1, {})


def test_drain_removes_waiting_and_delayed_jobs_only(client: TestClient) -> None:
    # Given a failed job, two waiting (the queue paused) and one delayed
    run_jobs(failing=1)
    queue(QUEUE).pause()
    enqueue(console_work, {"key": "w1"}, job_id="w1")
    enqueue(console_work, {"key": "w2"}, job_id="w2")
    enqueue(console_work, {"key": "later"}, job_id="later", delay=timedelta(hours=1))
    # When the operator drains the queue
    answer = act(client, "drain")
    # Then the three are gone and the failure stays
    assert answer["count"] == 3
    assert (counts()["paused"], counts()["delayed"], counts()["failed"]) == (0, 0, 1)
    assert_audited("queue.drain", 3, {})


def test_clean_removes_records_older_than_the_grace(client: TestClient) -> None:
    # Given two completed jobs and a failed one
    run_jobs(ok=2, failing=1)
    # When the operator cleans completed records older than an hour, then older than 0 s
    kept = act(client, "clean", {"grace_s": 3600})
    cleaned = act(client, "clean")
    # Then the first removed nothing, the second (completed is the default) both, and the
    # failure stays
    assert (kept["count"], cleaned["count"]) == (0, 2)
    assert (counts()["completed"], counts()["failed"]) == (0, 1)
    assert_audited("queue.clean", 2, {"state": "completed", "grace_s": 0})
    # And a failed-records clean takes the failure
    assert act(client, "clean", {"state": "failed", "grace_s": 0})["count"] == 1
    assert counts()["failed"] == 0


def test_obliterate_deletes_everything_the_queue_holds(client: TestClient) -> None:
    # Given a completed, a failed and a delayed job in a paused queue
    run_jobs(ok=1, failing=1)
    enqueue(console_work, {"key": "later"}, job_id="later", delay=timedelta(hours=1))
    queue(QUEUE).pause()
    # When the operator obliterates the queue
    answer = act(client, "obliterate")
    # Then nothing is left (not even the pause), and the count is the jobs it held
    assert answer["count"] == 3
    assert sum(counts().values()) == 0 and not queue(QUEUE).is_paused()
    assert_audited("queue.obliterate", 3, {})


def test_one_failed_job_is_retried_and_one_job_removed(client: TestClient) -> None:
    # Given two failed jobs and a delayed one
    run_jobs(failing=2)
    enqueue(console_work, {"key": "later"}, job_id="later", delay=timedelta(hours=1))
    # When the operator retries one failed job
    retried = client.post(f"{ACTIONS}/jobs/job-bad-0/retry", headers=ADMIN_HEADERS)
    # Then it alone waits again, and the audit names the job
    assert retried.json() == {"action": "retry", "queue": QUEUE, "count": 1}
    assert queue(QUEUE).get("job-bad-0").state == "waiting"
    assert queue(QUEUE).get("job-bad-1").state == "failed"
    assert_audited("job.retry", 1, {"state": "failed"}, job_id="job-bad-0")
    # When the operator removes the delayed job
    removed = client.post(f"{ACTIONS}/jobs/later/remove", headers=ADMIN_HEADERS)
    # Then it is gone
    assert removed.json()["count"] == 1 and queue(QUEUE).get("later") is None
    assert_audited("job.remove", 1, {"state": "delayed"}, job_id="later")


def test_a_job_in_the_wrong_state_or_absent_is_refused(client: TestClient) -> None:
    # Given a delayed job, and a job a worker is running
    GATE.clear()
    enqueue(console_work, {"key": "later"}, job_id="later", delay=timedelta(hours=1))
    enqueue(console_work, {"key": "busy", "hold": True}, job_id="busy")
    with running_worker([QUEUE]):
        wait_for(lambda: queue(QUEUE).get("busy").state == "active", what="busy to start")
        # When the operator retries the delayed job, removes the running one, and
        # retries a job that does not exist
        retry = client.post(f"{ACTIONS}/jobs/later/retry", headers=ADMIN_HEADERS)
        remove = client.post(f"{ACTIONS}/jobs/busy/remove", headers=ADMIN_HEADERS)
        absent = client.post(f"{ACTIONS}/jobs/nope/retry", headers=ADMIN_HEADERS)
        GATE.set()
        wait_for(lambda: queue(QUEUE).get("busy").state == "completed", what="busy to end")
    # Then each is refused, both jobs went on as before, and nothing was audited
    assert (retry.status_code, retry.json()["error"]["code"]) == (409, "invalid_job_state")
    assert (remove.status_code, remove.json()["error"]["code"]) == (409, "invalid_job_state")
    assert (absent.status_code, absent.json()["error"]["code"]) == (404, "unknown_job")
    assert queue(QUEUE).get("later").state == "delayed"
    assert audit_rows() == []


def test_an_action_that_dies_leaves_its_audit_row(client: TestClient,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  private_redis_url: str) -> None:
    # Given herald's Redis gone (a server of the test's own, shut down)
    point_at_stopped_redis(monkeypatch, private_redis_url)
    # When the operator drains a queue
    response = client.post(f"{ACTIONS}/drain", headers=ADMIN_HEADERS)
    # Then the request fails as the app does while Redis is away
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    # And the row written before the action remains, completed with the error
    [row] = audit_rows()
    assert (row["action"], row["queue"], row["count"]) == ("queue.drain", QUEUE, 0)
    assert row["completed_at"] is not None and "ConnectionError" in row["error"]
