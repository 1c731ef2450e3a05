"""Scripts sent again after a lost reply: Redis ran the first send, the client timed out
waiting for its answer and sent it again. The second send must change nothing more and
answer as the first would have, or a RabbitMQ job is never published.

Each test has a Redis server of its own, kept busy by a long script for longer than the
client waits for a reply: the first send waits unread, the client gives up and sends it
again, and when the server is free it runs both, in order. (``CLIENT PAUSE`` would not
do: Redis drops a paused command whose client hung up.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from herald.queue import App, current_app, enqueue, get_spec, queue
from herald.queue.ledger import Ledger, RunEnd, new_token
from herald.queue.ledger_admin import LedgerAdmin
from herald.queue.redis import new_redis_client
from herald.queue.worker import running_worker
from herald.queue_app import queue_config
from herald.settings import get_settings
from tests.queue.conftest import reset_herald, wait_for
from tests.support.queue.queues import basic, events, stall
from tests.support.queue_app import close_queue_app, install_queue_app

#: How long the client waits for a reply (s), and how long Redis is kept busy (ms): long
#: enough that the first send times out, short enough that a later one is answered.
REPLY_TIMEOUT_S = 0.3
BUSY_MS = 800
#: Keeps the server busy for ARGV[1] ms.
BUSY = """
local function ms() local t = redis.call('TIME') return t[1] * 1000 + t[2] / 1000 end
local start = ms()
repeat until ms() - start >= tonumber(ARGV[1])
"""


@pytest.fixture(params=["redis", "rabbitmq"])
def kind(request: pytest.FixtureRequest, private_redis_url: str,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """herald on a Redis server of the test's own, with each broker."""
    env = {"QUEUE_PREFIX": f"lost{uuid.uuid4().hex[:8]}", "LOG_LEVEL": "WARNING",
           "REDIS_URL": private_redis_url, "BROKER": "redis"}
    if request.param == "rabbitmq":
        env["BROKER"] = "rabbitmq"
        env["RABBITMQ_URL"] = request.getfixturevalue("rabbitmq_url")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_herald()
    if request.param == "rabbitmq":
        current_app().broker.declare_queue("t-basic", ensure=True)
        current_app().broker.flush("t-basic")
    yield request.param
    reset_herald()


def impatient(kind: str) -> Ledger:
    """Install an App whose Redis client waits only REPLY_TIMEOUT_S for a reply (and, as
    always, sends a command again when it timed out), on the ``kind`` broker the
    settings name; returns its ledger."""
    config = queue_config(get_settings())
    assert config.broker == ("rabbitmq" if kind == "rabbitmq" else "redis")
    client = new_redis_client(config, socket_timeout=REPLY_TIMEOUT_S)
    registries = current_app().registries
    close_queue_app()
    app = App(dataclasses.replace(config, redis_url="", redis_client=client),
              *registries).install()
    return app.ledger


def script_runs(server: redis.Redis) -> int:
    """Scripts the server ran to the end (EVALSHA calls that did not fail, say for a
    script it did not have) since its statistics were reset."""
    stats = server.info("commandstats").get("cmdstat_evalsha", {})
    return (int(stats.get("calls", 0)) - int(stats.get("failed_calls", 0))
            - int(stats.get("rejected_calls", 0)))


def keep_busy(server: redis.Redis) -> threading.Thread:
    """Reset the script count, then keep the server busy for BUSY_MS; returns once it
    is busy (a ping goes unanswered). Join the thread to wait for the end."""
    server.config_resetstat()
    url = server.connection_pool.connection_kwargs
    # No retries: redis-py otherwise sends a timed-out ping again (with backoff), and on a
    # loaded machine the retries can outlast the busy spell, which is then never seen.
    probe = redis.Redis(host=url["host"], port=url["port"], socket_timeout=0.05,
                        retry=Retry(NoBackoff(), 0))

    def unanswered() -> bool:
        # two pings in a row unanswered, so one slow reply on a loaded machine is not taken
        # for a busy server
        for _ in range(2):
            try:
                probe.ping()
            except redis.TimeoutError:
                continue
            return False
        return True

    try:
        # a starved test thread may see a busy spell only after it ended: start another
        for _ in range(10):
            busy = threading.Thread(target=server.eval, args=(BUSY, 0, BUSY_MS))
            busy.start()
            if wait_for(lambda busy=busy: unanswered() or not busy.is_alive(), timeout=5,
                        what="the server to be busy") and busy.is_alive():
                return busy
            busy.join()
        raise AssertionError("never saw the server busy")
    finally:
        probe.close()


@contextlib.contextmanager
def reply_lost(server: redis.Redis) -> Iterator[None]:
    """The block's one script call is sent, its reply lost, and sent again: the server is
    kept busy past the client's patience, and afterwards it must have run a script at
    least twice (or the test proves nothing)."""
    busy = keep_busy(server)
    yield
    busy.join()
    assert script_runs(server) >= 2


def normal_broker() -> None:
    """Back to herald's own broker and client (patient), for the worker."""
    install_queue_app()


def test_an_enqueue_sent_again_after_a_lost_reply_is_added_once_and_runs(
        kind: str, private_redis_url: str) -> None:
    server = redis.Redis.from_url(private_redis_url)
    impatient(kind)
    enqueue(basic, {"key": "warm"}, job_id="job-warm")  # the add script is loaded
    # Given Redis holds writes longer than the client waits for a reply
    with reply_lost(server):
        # When a job is enqueued (the add is sent, times out, is sent again)
        result = enqueue(basic, {"key": "lost"}, job_id="job-lost")
    # Then the call still says the job was added (not a duplicate of itself)
    assert result.status == "added"
    assert "duplicated" not in current_app().queries.metrics("t-basic")
    # and a worker runs it once (on RabbitMQ: its message was published)
    normal_broker()
    with running_worker(["t-basic"]):
        wait_for(lambda: queue("t-basic").get("job-lost").state == "completed",
                 what="the job to run")
    assert sorted(e["key"] for e in events("start")) == ["lost", "warm"]


def test_a_retry_sent_again_after_a_lost_reply_still_says_it_retried(
        kind: str, private_redis_url: str) -> None:
    server = redis.Redis.from_url(private_redis_url)
    # Given a job that failed for good
    enqueue(basic, {"key": "p", "permanent": True}, job_id="job-p")
    with running_worker(["t-basic"]):
        wait_for(lambda: queue("t-basic").get("job-p").state == "failed")
    admin = LedgerAdmin(impatient(kind))
    assert not admin.retry("t-basic", "job-none")  # the retry script is loaded
    with reply_lost(server):
        # When it is retried in place, as q.retry does (sent, times out, sent again)
        message = new_token() if kind == "rabbitmq" else ""
        retried = admin.retry("t-basic", "job-p", message)
    # Then the answer is still True (q.retry publishes the job's message on it), and the
    # job waits for its new life
    assert retried
    job = queue("t-basic").get("job-p")
    assert (job.state, job.attempts_made, job.attempts_started) == ("waiting", 0, 0)
    assert job.message_id == (message or None)


def test_a_failed_attempt_reported_again_after_a_lost_reply_is_still_retried(
        kind: str, private_redis_url: str) -> None:
    if kind != "rabbitmq":
        pytest.skip("the consumer reports ends on its own connection, never sent twice")
    server = redis.Redis.from_url(private_redis_url)
    ledger, spec = impatient(kind), get_spec("t-basic")
    # Given a run of a job, claimed as the RabbitMQ middleware claims it
    enqueue(basic, {"key": "r"}, job_id="job-r")
    verdict, (_, _, token) = ledger.start(spec, "job-r", queue("t-basic").get("job-r").message_id)
    assert verdict == "start"
    ledger.cycle(spec, external=True)  # the cycle script is loaded
    with reply_lost(server):
        # When its failure is reported (sent, times out, sent again)
        next_message = new_token()
        result = ledger.cycle(spec, external=True, finishes=[RunEnd(
            job_id="job-r", token=token, outcome=RunEnd.FAILED, value="boom",
            next_token=next_message)])
    # Then the answer is still "retry at run_at" (so the next message is published), and
    # the failure counted once
    [end] = result.finished
    assert end.result == "retry"
    assert server.zscore(ledger.base("t-basic") + "delayed", "job-r") == end.run_at_ms
    job = queue("t-basic").get("job-r")
    assert (job.state, job.attempts_made, job.message_id) == ("delayed", 1, next_message)


def test_a_remove_sent_again_after_a_lost_reply_still_counts_what_it_removed(
        kind: str, private_redis_url: str) -> None:
    server = redis.Redis.from_url(private_redis_url)
    # Given two waiting jobs
    enqueue(basic, {"key": "a"}, job_id="job-a")
    enqueue(basic, {"key": "b"}, job_id="job-b")
    admin = LedgerAdmin(impatient(kind))
    assert admin.remove("t-basic", ["job-none"]) == 0  # the remove script is loaded
    with reply_lost(server):
        # When both are removed (sent, times out, sent again)
        removed = admin.remove("t-basic", ["job-a", "job-b"])
    # Then the answer counts both (drain and clean add these answers up), and both are gone
    assert removed == 2
    assert (queue("t-basic").get("job-a"), queue("t-basic").get("job-b")) == (None, None)
    assert queue("t-basic").counts()["waiting"] == 0


def test_a_claim_sent_again_after_a_lost_reply_starts_the_run_it_claimed(
        kind: str, private_redis_url: str) -> None:
    if kind != "rabbitmq":
        pytest.skip("only RabbitMQ's middleware claims a job per delivered message")
    server = redis.Redis.from_url(private_redis_url)
    ledger, spec = impatient(kind), get_spec("t-basic")
    # Given a job whose message was delivered
    enqueue(basic, {"key": "c"}, job_id="job-c")
    message = queue("t-basic").get("job-c").message_id
    assert ledger.start(spec, "job-none", message)[0] == "drop"  # the start script is loaded
    with reply_lost(server):
        # When the job is claimed as the RabbitMQ middleware claims it (sent, times out, sent
        # again)
        verdict, detail = ledger.start(spec, "job-c", message)
    # Then the claim still says start (not "later": the run does not wait out its own
    # lock), under the token the job holds, with one start counted and no stall
    assert verdict == "start"
    made, started, token = detail
    job = queue("t-basic").get("job-c")
    assert (made, started) == (0, 1)
    assert (job.state, job.attempts_started, job.token) == ("active", 1, token)
    assert "stalled" not in current_app().queries.metrics("t-basic")
    # and the run's end, under that token, completes the job
    [end] = ledger.cycle(spec, external=True, finishes=[RunEnd(
        job_id="job-c", token=token, outcome=RunEnd.COMPLETED, value="null")]).finished
    assert end.result == "completed"


def test_a_claim_past_max_started_attempts_sent_again_still_fails_the_job(
        kind: str, private_redis_url: str) -> None:
    if kind != "rabbitmq":
        pytest.skip("only RabbitMQ's middleware claims a job per delivered message")
    server = redis.Redis.from_url(private_redis_url)
    ledger, spec = impatient(kind), get_spec("t-stall")  # max_started_attempts 3
    # Given a job started three times already (each run deferred itself)
    enqueue(stall, {"key": "x"}, job_id="job-x")
    message = queue("t-stall").get("job-x").message_id
    for _ in range(3):
        verdict, (_, _, token) = ledger.start(spec, "job-x", message)
        assert verdict == "start"
        message = new_token()
        ledger.cycle(spec, external=True, finishes=[RunEnd(
            job_id="job-x", token=token, outcome=RunEnd.DEFERRED, value="0",
            next_token=message)])
    with reply_lost(server):
        # When its message is claimed once more (sent, times out, sent again)
        verdict, detail = ledger.start(spec, "job-x", message)
    # Then both sends answer "failed", under the token of the fourth start, counted once
    assert verdict == "failed"
    reason, token = detail
    assert reason == "job started 4 times, more than max_started_attempts (3)"
    job = queue("t-stall").get("job-x")
    assert (job.state, job.attempts_started, job.token) == ("active", 4, token)
