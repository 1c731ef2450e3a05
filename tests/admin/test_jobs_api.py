"""GET /admin/health/queues/{name}/jobs (a page of one state, truncated) and
…/jobs/{id} (the whole job) on real jobs run by a real worker."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient

from herald.queue import enqueue
from tests.admin.conftest import ADMIN_HEADERS
from tests.support.admin.workload import QUEUE, console_work, run_jobs

JOBS = f"/admin/health/queues/{QUEUE}/jobs"
#: Long enough that a list must cut the payload and the failure (message and stack).
NOTE = "x" * 1500


def test_a_list_pages_failed_jobs_newest_first_and_truncates_them(client: TestClient) -> None:
    # Given three jobs that failed with long payloads and long errors, and one that completed
    run_jobs(ok=1, failing=3, note=NOTE)
    # When the operator lists the failed jobs two at a time (failed is the default state)
    first = client.get(JOBS, params={"per_page": 2}, headers=ADMIN_HEADERS).json()
    second = client.get(JOBS, params={"per_page": 2, "page": 2}, headers=ADMIN_HEADERS).json()
    # Then the pages hold the three failures, newest first, and the state's total
    assert (first["page"], first["per_page"], first["total"]) == (1, 2, 3)
    assert (second["page"], second["total"]) == (2, 3)
    listed = first["jobs"] + second["jobs"]
    assert sorted(job["id"] for job in listed) == ["job-bad-0", "job-bad-1", "job-bad-2"]
    finished = [job["timestamps"]["finished"] for job in listed]
    assert finished == sorted(finished, reverse=True)
    # And each is cut: the payload's JSON text to 500 characters, the reason and stack
    # trace to 1,000, and says so
    for job in listed:
        assert job["state"] == "failed" and job["truncated"] is True
        assert len(job["data"]) == 500 and job["data"].startswith('{"key": "job-bad-')
        assert len(job["stacktrace"]) == 1000 and len(job["failed_reason"]) == 1000


def test_a_short_job_is_listed_whole(client: TestClient) -> None:
    # Given a completed job with a short payload
    run_jobs(ok=1)
    # When the operator lists completed jobs
    body = client.get(JOBS, params={"state": "completed"}, headers=ADMIN_HEADERS).json()
    # Then it is listed uncut
    [job] = body["jobs"]
    assert job["truncated"] is False and job["stacktrace"] is None
    assert job["data"] == '{"key": "job-ok-0", "fail": false, "hold": false, "note": ""}'
    assert body["total"] == 1


def test_a_job_is_shown_whole(client: TestClient) -> None:
    # Given a job that failed with a long payload and a long error
    run_jobs(failing=1, note=NOTE)
    # When the operator opens it
    response = client.get(f"{JOBS}/job-bad-0", headers=ADMIN_HEADERS)
    # Then everything is there, uncut
    job = response.json()
    assert response.status_code == 200
    assert job["data"] == {"key": "job-bad-0", "fail": True, "hold": False, "note": NOTE}
    assert job["failed_reason"] == f"job job-bad-0 failed {NOTE}"
    assert "ConsoleTestFailure" in job["stacktrace"] and NOTE in job["stacktrace"]
    assert (job["id"], job["queue"], job["state"]) == ("job-bad-0", QUEUE, "failed")
    assert (job["attempts_made"], job["attempts_started"], job["priority"]) == (1, 1, 5)
    assert job["return_value"] is None and job["dedup_id"] is None
    stamps = job["timestamps"]
    assert stamps["created"] <= stamps["processed"] <= stamps["finished"]


def test_a_delayed_job_shows_when_it_runs(client: TestClient) -> None:
    # Given a job delayed by an hour
    enqueue(console_work, {"key": "later"}, job_id="later", delay=timedelta(hours=1))
    # When the operator lists delayed jobs and opens it
    listed = client.get(JOBS, params={"state": "delayed"}, headers=ADMIN_HEADERS).json()
    job = client.get(f"{JOBS}/later", headers=ADMIN_HEADERS).json()
    # Then it is there, with its run time and no processing yet
    assert [j["id"] for j in listed["jobs"]] == ["later"]
    assert job["state"] == "delayed" and job["timestamps"]["processed"] is None
    assert job["timestamps"]["run_at"] > job["timestamps"]["created"]


def test_an_unknown_state_page_or_job_is_refused(client: TestClient) -> None:
    # When the operator asks for a state that does not exist, a page 0, or an absent job
    state = client.get(JOBS, params={"state": "lost"}, headers=ADMIN_HEADERS)
    page = client.get(JOBS, params={"page": 0}, headers=ADMIN_HEADERS)
    job = client.get(f"{JOBS}/no-such-job", headers=ADMIN_HEADERS)
    # Then each gets a clear error
    assert state.status_code == 422 and "state" in state.json()["error"]["message"]
    assert page.status_code == 422
    assert job.status_code == 404 and job.json()["error"]["code"] == "unknown_job"
