"""What an operator reads back from the ledger: throughput per minute, recent failures,
and jobs found by id.

Throughput runs real workers on both brokers (and Redis 6.2); the readers that only look
at the ledger run on the Redis broker.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from herald.queue import (
    Backoff,
    JobState,
    QueueSpec,
    current_app,
    enqueue,
    enqueue_many,
    find_jobs,
    now_ms,
    queue,
    running_worker,
)
from tests.queue.conftest import HeraldOn, wait_for
from tests.support.queue.queues import Step, _run, basic, other, registry

HOUR = 3_600_000

registry.declare(QueueSpec(name="t-history", concurrency=4, attempts=2, backoff=Backoff.NONE))


def _tally(job: Step) -> dict:
    return _run(job)


# three actors of one queue: records kept, records removed on completion, and at most two
# starts per job (so a job deferred twice fails for good when it is started a third time)
kept = registry.actor(queue="t-history", payload=Step, name="history_kept")(_tally)
removed = registry.actor(queue="t-history", payload=Step, name="history_removed",
                         remove_on_complete=True)(_tally)
capped = registry.actor(queue="t-history", payload=Step, name="history_capped",
                        max_started_attempts=2)(_tally)


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _all_final(ids: list[str]) -> bool:
    """Every job completed or failed for good, or gone (removed when it completed)."""
    jobs = [queue("t-history").get(i) for i in ids]
    return all(j is None or j.state in (JobState.COMPLETED, JobState.FAILED) for j in jobs)


def test_history_counts_each_job_that_finishes_for_good_once(herald_on: HeraldOn) -> None:
    first_minute = _minute(datetime.now(UTC))
    ids = [enqueue(kept, {"key": f"ok{i}"}).job_id for i in range(4)]
    ids += [enqueue(removed, {"key": f"gone{i}"}).job_id for i in range(3)]
    ids.append(enqueue(kept, {"key": "permanent", "permanent": True}).job_id)
    # each fails both of its attempts (one retry, which must not count)
    ids += [enqueue(kept, {"key": f"flaky{i}", "fail_times": 5}).job_id for i in range(2)]
    # deferred at its first two starts, failed for good when started a third time
    ids.append(enqueue(capped, {"key": "deferred", "defer_ms": 50, "defer_times": 5}).job_id)
    with running_worker(["t-history"]):
        wait_for(lambda: _all_final(ids), timeout=60, what="every job final")
    last_minute = _minute(datetime.now(UTC))

    assert queue("t-history").counts()["failed"] == 4
    history = queue("t-history").history()
    read_minute = _minute(datetime.now(UTC))
    # the last hour, oldest first, one row per minute, the current minute last
    assert len(history) == 60
    assert history[-1][0] in (last_minute, read_minute)
    assert all(later[0] - earlier[0] == timedelta(minutes=1)
               for earlier, later in pairwise(history))
    busy = {minute for minute, completed, failed in history if completed or failed}
    # normally one minute; two when the run crossed a minute boundary
    assert busy <= {first_minute, last_minute}
    assert sum(c for _, c, _ in history) == 7
    assert sum(f for _, _, f in history) == 4
    # per queue: another queue's history stays empty
    assert all(c == f == 0 for _, c, f in queue("t-other").history())
    # every minute key expires a little after the hour the history shows
    base = current_app().ledger.base("t-history")
    for minute in busy:
        ttl = current_app().client.pttl(f"{base}tp:{int(minute.timestamp()) // 60}")
        assert 60 * 60_000 < ttl <= 62 * 60_000


def _fail(count: int) -> list[str]:
    """Run ``count`` real jobs of t-other (one attempt each) to failure; their ids."""
    ids = [enqueue(other, {"key": f"bad{i}", "permanent": True}).job_id for i in range(count)]
    with running_worker(["t-other"]):
        wait_for(lambda: queue("t-other").counts()["failed"] == count, timeout=30,
                 what="every job failed")
    return ids


def _age(job_id: str, finished_at_ms: int) -> None:
    """Make a failed record look older. The test writes the ledger's own keys (the failed
    set's score and the record's finish time) since a real failure cannot be dated back."""
    base = current_app().ledger.base("t-other")
    current_app().client.zadd(base + "failed", {job_id: finished_at_ms}, xx=True)
    current_app().client.hset(base + "job:" + job_id, "ft", finished_at_ms)


def test_failed_within_counts_the_last_24_hours_only(redis_only: HeraldOn) -> None:
    _, hour_old, day_and_hour_old = _fail(3)
    _age(hour_old, now_ms() - HOUR)
    _age(day_and_hour_old, now_ms() - 25 * HOUR)

    assert queue("t-other").failed_within(timedelta(hours=24)) == 2
    assert queue("t-other").failed_within(timedelta(hours=26)) == 3
    assert queue("t-other").failed_within(timedelta(minutes=30)) == 1
    # the old failure is not counted, yet still retained and inspectable
    old = queue("t-other").get(day_and_hour_old)
    assert old is not None and old.state is JobState.FAILED
    assert old.failed_reason is not None and "bad2 cannot succeed" in old.failed_reason


def test_failed_within_counts_across_pages(redis_only: HeraldOn) -> None:
    ids = _fail(6)
    ages_h = [0, 1, 5, 23, 25, 24 * 6]  # four recent, two retained from long ago
    for job_id, hours in zip(ids, ages_h, strict=True):
        _age(job_id, now_ms() - hours * HOUR)
    queries = current_app().queries
    cutoff = now_ms() - 24 * HOUR
    # pages of 2 end exactly at the cutoff; pages of 3 cross it midway; 1 page per record
    for page_size in (1, 2, 3, 4, 500):
        assert queries.failed_since("t-other", cutoff, page_size=page_size) == 4, page_size
        # nothing older than the cutoff: every page full but the last
        assert queries.failed_since("t-other", 0, page_size=page_size) == 6, page_size
    assert queue("t-other").failed_within(timedelta(hours=24)) == 4
    # paging stops at the first record past the cutoff: the older retained ones are not
    # read at all (four pages of one recent record, then the page that crossed)
    before = _zrevrange_calls()
    assert queries.failed_since("t-other", cutoff, page_size=1) == 4
    assert _zrevrange_calls() - before == 5


def _zrevrange_calls() -> int:
    """How many ZREVRANGE commands the server has run (nothing else in the test session
    sends any while a test reads the failed set)."""
    return int(current_app().client.info("commandstats")["cmdstat_zrevrange"]["calls"])


def test_find_matches_ids_literally_exact_first_in_one_queue_or_all(
        redis_only: HeraldOn) -> None:
    for job_id in ("order-1", "order-10", "order-11", "order-2", "ord*er", "ord[1]", "ord?x"):
        enqueue(basic, {"key": job_id}, job_id=job_id)
    enqueue(other, {"key": "elsewhere"}, job_id="order-12")

    def found(prefix: str, limit: int = 20) -> list[str]:
        return [job.id for job in queue("t-basic").find(prefix, limit=limit)]

    assert found("order-1") == ["order-1", "order-10", "order-11"]
    assert found("order-11") == ["order-11"]
    assert found("order-") == ["order-1", "order-10", "order-11", "order-2"]
    # the exact id comes first even when many more ids start with it than the limit allows
    enqueue_many(basic, [({"key": "b"}, {"job_id": f"batch-7{i}"}) for i in range(40)])
    enqueue(basic, {"key": "b"}, job_id="batch-7")
    three = found("batch-7", limit=3)
    assert three[0] == "batch-7" and len(three) == 3
    assert all(job_id.startswith("batch-7") for job_id in three)
    # glob characters in an id are taken literally
    assert found("ord*") == ["ord*er"]
    assert found("ord[") == ["ord[1]"]
    assert found("ord[1]") == ["ord[1]"]
    assert found("ord?") == ["ord?x"]
    assert found("ord?x") == ["ord?x"]
    assert found("order-3") == []
    # another queue's job is that queue's only
    assert found("order-12") == []
    assert [job.id for job in queue("t-other").find("order")] == ["order-12"]
    # across every queue at once: exact ids first, each queue's own, globs literal
    everywhere = [(job.queue, job.id) for job in find_jobs("order-1")]
    assert everywhere[0] == ("t-basic", "order-1")
    assert sorted(everywhere[1:]) == [("t-basic", "order-10"), ("t-basic", "order-11"),
                                      ("t-other", "order-12")]
    assert [job.id for job in find_jobs("batch-7", limit=2)][:1] == ["batch-7"]
    assert [job.id for job in find_jobs("ord[1]")] == ["ord[1]"]
    assert find_jobs("nothing-like-it") == []
