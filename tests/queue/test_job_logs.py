"""What a worker logs per job: at the default INFO only what an operator must see (a
failure, a retry), every completion too with ``LOG_LEVEL=DEBUG`` (docs/queue.md#logging)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from herald import settings
from herald.logs import configure_logging
from herald.queue import enqueue, queue
from herald.queue.worker import running_worker
from tests.queue.conftest import HeraldOn, wait_for
from tests.support.queue.queues import basic, plain


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


def run_jobs_logged(monkeypatch: pytest.MonkeyPatch, level: str) -> list[dict[str, Any]]:
    """Run two jobs that complete (one with a return value, one without), one that fails
    once then completes, and one that fails for good, in a worker logging JSON at
    ``LOG_LEVEL=level``; the lines of its runs (logger herald.queue.middleware)."""
    monkeypatch.setenv("LOG_LEVEL", level)
    monkeypatch.setenv("LOG_FORMAT", "json")
    settings.reset_settings()
    out = io.StringIO()
    configure_logging(stream=out)
    enqueue(plain, {"key": "ok-1"}, job_id="job-ok-1")
    enqueue(basic, {"key": "ok-2"}, job_id="job-ok-2")
    enqueue(plain, {"key": "flaky", "fail_times": 1}, job_id="job-flaky")
    enqueue(plain, {"key": "bad", "permanent": True}, job_id="job-bad")
    with running_worker(["t-plain", "t-basic"]):
        wait_for(lambda: (queue("t-plain").counts()["completed"],
                          queue("t-plain").counts()["failed"],
                          queue("t-basic").counts()["completed"]) == (2, 1, 1),
                 what="3 jobs completed and 1 failed")
    # the worker has stopped: every end it wrote has been reported
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return [line for line in lines if line["logger"] == "herald.queue.middleware"]


def test_at_the_default_info_only_failures_and_retries_are_logged_per_job(
        herald_on: HeraldOn, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a worker logging as shipped (INFO)
    assert settings.Settings.model_fields["log_level"].default == "INFO"
    # When jobs complete, retry and fail
    logged = run_jobs_logged(monkeypatch, "INFO")
    # Then the retry and the failure are logged at WARNING, by id, and no completion is
    outcomes = sorted((line["job_id"], line["outcome"], line["level"]) for line in logged)
    assert outcomes == [("job-bad", "failed", "WARNING"), ("job-flaky", "retry", "WARNING")]
    assert all(line["actor"] == "plain" and line["queue"] == "t-plain" for line in logged)


def test_log_level_debug_brings_back_one_completed_line_per_job(
        herald_on: HeraldOn, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a worker with LOG_LEVEL=DEBUG
    # When the same jobs run
    logged = run_jobs_logged(monkeypatch, "DEBUG")
    # Then each completion is logged once, at DEBUG, beside the retry and the failure
    completed = sorted((line["job_id"], line["queue"], line["actor"], line["msg"])
                       for line in logged if line["outcome"] == "completed")
    assert completed == [("job-flaky", "t-plain", "plain", "job completed"),
                         ("job-ok-1", "t-plain", "plain", "job completed"),
                         ("job-ok-2", "t-basic", "basic", "job completed")]
    assert {line["level"] for line in logged if line["outcome"] == "completed"} == {"DEBUG"}
    assert sorted((line["job_id"], line["outcome"]) for line in logged
                  if line["level"] == "WARNING") == [("job-bad", "failed"),
                                                     ("job-flaky", "retry")]
