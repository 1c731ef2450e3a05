"""examples/standalone/: a plain Dramatiq application on herald.queue, run as its users
run it — in processes of its own whose environment holds PATH and REDIS_URL and nothing
else (no DATABASE_URL, no herald setting) — under Dramatiq's own CLI and under
``herald worker --app``. Its outcomes are read from Redis through the ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from herald.queue import JobState, Ledger, LedgerQueries
from tests.support.services import find_free_port
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
APP = "examples.standalone.app"
PREFIX = "standalone"
#: The fixed backoff of the thumbnails queue (examples/standalone/app.py), in ms.
RETRY_AFTER_MS = 2000
#: How late a retry may start after its backoff: a worker looks at a queue's delayed jobs
#: at least once a second.
RETRY_SLACK_MS = 1500

#: The two ways to run the application's worker, each from the checkout's root as its
#: docstring says: Dramatiq's CLI, and the installed ``herald`` console script (not
#: ``python -m herald.cli``, whose path starts at the working directory anyway).
WORKERS = {
    "dramatiq": [sys.executable, "-m", "dramatiq", APP, "--processes", "1", "--threads", "2"],
    "herald": [str(Path(sys.executable).parent / "herald"), "worker", "--app", f"{APP}:app"],
}


def only_redis_env(redis_url: str) -> dict[str, str]:
    """An environment with PATH and REDIS_URL and nothing else."""
    return {"PATH": os.environ["PATH"], "REDIS_URL": redis_url}


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def stop(process: subprocess.Popen[bytes]) -> str:
    """SIGTERM, wait, and return what the process wrote on stderr."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    return stderr.decode(errors="replace")


@pytest.fixture(params=sorted(WORKERS))
def worker(request: pytest.FixtureRequest, private_redis_url: str,
           ) -> Iterator[tuple[str, dict[str, str]]]:
    """The application's worker, run one way, on a Redis of the test's own."""
    env = only_redis_env(private_redis_url)
    process = start(WORKERS[request.param], env)
    yield private_redis_url, env
    stderr = stop(process)
    assert "Traceback" not in stderr, stderr[-3000:]


def test_the_standalone_app_runs_its_jobs_with_nothing_but_a_redis_url(
        worker: tuple[str, dict[str, str]]) -> None:
    redis_url, env = worker
    client = redis.Redis.from_url(redis_url)
    ledger = LedgerQueries(Ledger(client, PREFIX))

    # Given the application's jobs added by a process of its own
    produced = subprocess.run([sys.executable, "-m", "examples.standalone.produce"], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=30)
    assert produced.returncode == 0, produced.stderr
    adds = {line["add"]: line for line in map(json.loads, produced.stdout.splitlines())}
    # and its schedule fired by a clock of its own
    clock = start([sys.executable, "-m", "examples.standalone.clock"], env)
    try:
        # Then the job added twice under one dedup id was added once
        assert adds["first"]["status"] == "added"
        assert (adds["again"]["status"], adds["again"]["job_id"]) == (
            "deduplicated", adds["first"]["job_id"])
        # and it completed
        done = wait_for(lambda: _completed(ledger, "thumbnails", adds["first"]["job_id"]),
                        timeout=30, what="the deduplicated thumbnail")
        assert done.return_value == {"image_id": 1, "attempt": 1}
        # and the job that failed once was retried after exactly its backoff, then completed
        flaky = wait_for(lambda: _completed(ledger, "thumbnails", "flaky-2"), timeout=30,
                         what="the flaky thumbnail")
        assert (flaky.attempts_made, flaky.attempts_started) == (1, 2)
        assert flaky.failed_reason == "thumbnail 2: the image store did not answer"
        first, second = (int(ms) for ms in client.lrange(f"{PREFIX}:attempts:2", 0, -1))
        assert RETRY_AFTER_MS <= second - first < RETRY_AFTER_MS + RETRY_SLACK_MS
        # and the report added by hand ran
        assert wait_for(lambda: _completed(ledger, "reports", "report-1"), timeout=30,
                        what="the report").return_value == {"built": "on-demand"}
        # and the schedule's ticks ran as jobs of their own
        tick = wait_for(lambda: next((job for job in ledger.jobs("reports", JobState.COMPLETED)
                                      if job.id.startswith("repeat:every-second-report:")),
                                     None), timeout=30, what="a scheduled report")
        assert tick.return_value == {"built": "every-second"}
    finally:
        clock_stderr = stop(clock)
    assert "Traceback" not in clock_stderr, clock_stderr[-3000:]
    # and the clock said what it fired, naming the schedule and the job
    assert f"schedule fired schedule=every-second-report job_id={tick.id}" in clock_stderr, \
        clock_stderr[-3000:]


@pytest.mark.parametrize("program", ["produce", "clock"])
def test_without_redis_the_app_says_so_in_one_line(program: str) -> None:
    # Given a REDIS_URL where no Redis answers
    env = only_redis_env(f"redis://127.0.0.1:{find_free_port()}/0")

    # When the application's producer or clock is started
    result = subprocess.run([sys.executable, "-m", f"examples.standalone.{program}"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=30)

    # Then it stops at once with one line saying Redis does not answer, no traceback
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Redis (REDIS_URL) does not answer" in result.stderr
    assert "Connection refused" in result.stderr


def _completed(ledger: LedgerQueries, queue: str, job_id: str) -> object:
    job = ledger.get(queue, job_id)
    return job if job is not None and job.state is JobState.COMPLETED else None
