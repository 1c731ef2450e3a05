"""The Redis broker's hot path: plain completions and the middleware hook lookup."""

from __future__ import annotations

from typing import Any

import dramatiq

from herald.queue import current_app, enqueue, get_spec, queue
from tests.queue.conftest import HeraldOn
from tests.support.queue.queues import basic


def test_plain_completion_is_fenced_by_its_token(redis_only: HeraldOn) -> None:
    # Given a job a consumer started
    ledger = current_app().ledger
    spec = get_spec("t-basic")
    config = ledger.cycle_config(spec)
    enqueue(basic, {"key": "fenced"}, job_id="job-fenced")
    started = ledger.cycle_raw(spec, config, fetch=1)[1]
    assert [row[0].decode() for row in started] == ["job-fenced"]
    token = started[0][3].decode()

    # When a plain completion arrives under another token, it is reported stale and ignored
    finished = ledger.cycle_raw(spec, config, done=[("job-fenced", token + "x")])[0]
    assert [[field.decode() if isinstance(field, bytes) else field for field in row]
            for row in finished] == [["job-fenced", "stale", 0]]
    assert queue("t-basic").get("job-fenced").state == "active"

    # When it arrives under the job's token, the job completes and nothing is reported back
    finished = ledger.cycle_raw(spec, config, done=[("job-fenced", token, "basic")])[0]
    assert finished == []
    job = queue("t-basic").get("job-fenced")
    assert job.state == "completed" and job.return_value is None
    assert current_app().queries.metrics("t-basic")["completed"] == 1


def test_a_fetch_that_empties_the_queue_clears_the_wake_ups_left_for_its_jobs(
        redis_only: HeraldOn) -> None:
    # Given three jobs added, each leaving a wake-up for a consumer blocked on the queue
    ledger = current_app().ledger
    spec = get_spec("t-basic")
    config = ledger.cycle_config(spec)
    wake_ups = ledger.marker_key("t-basic")
    for n in range(3):
        enqueue(basic, {"key": f"w{n}"}, job_id=f"wake-{n}")
    assert ledger.client.llen(wake_ups) == 3

    # When a consumer takes one, two jobs still wait and the wake-ups stay
    *_, drained = ledger.cycle_raw(spec, config, fetch=1)
    assert drained == 0 and ledger.client.llen(wake_ups) == 3

    # When it takes the rest, nothing waits: no other consumer is woken for nothing
    _, started, *_, drained = ledger.cycle_raw(spec, config, fetch=5)
    assert len(started) == 2 and drained == 1
    assert ledger.client.llen(wake_ups) == 0

    # And a job added later still wakes a consumer
    enqueue(basic, {"key": "later"}, job_id="wake-later")
    assert ledger.client.llen(wake_ups) == 1


class Recorder(dramatiq.Middleware):
    """Counts the runs it sees."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def before_process_message(self, broker: Any, message: Any) -> None:
        self.seen.append(message.message_id)


def test_middleware_added_or_removed_later_is_seen_by_the_hook_lookup(
        redis_only: HeraldOn) -> None:
    # Given the broker has dispatched a signal (its hooks are looked up and kept)
    broker = current_app().broker
    message = dramatiq.Message(queue_name="t-basic", actor_name="basic", args=({},),
                               kwargs={}, options={"job_id": "x"}, message_id="m1")
    broker.emit_before("ack", message)

    # When a middleware is added, it runs; when the list is replaced without it, it does not
    recorder = Recorder()
    broker.add_middleware(recorder)
    broker.emit_before("process_message", message)
    broker.emit_after("process_message", message, result=None)
    assert recorder.seen == ["m1"]
    broker.middleware = [m for m in broker.middleware if m is not recorder]
    broker.emit_before("process_message", message)
    broker.emit_after("process_message", message, result=None)
    assert recorder.seen == ["m1"]
