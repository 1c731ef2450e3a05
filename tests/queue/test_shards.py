"""Shards: queues on a Redis of their own (docs/queue.md#shards).

One App over two real Redis servers: the default one holds ``sh-a``, shard ``b`` (the
Redis 6.2 server) holds ``sh-b`` and ``sh-b2``. Each test reads the servers themselves
(keys by prefix) to see where jobs landed, and runs the library's own workers, queries,
operations and schedules on them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
import redis
from pydantic import BaseModel

from herald.queue import (
    App,
    JobState,
    MixedShards,
    Permanent,
    QueueConfig,
    QueueSpec,
    Registry,
    Schedule,
    ShardConfig,
    enqueue,
    enqueue_many_actors,
    find_jobs,
    queue,
    running_worker,
)
from herald.queue.schedules import fire_due, sync_schedules
from herald.queue.worker import WorkerProcess
from tests.support.waiting import wait_for


class Note(BaseModel):
    text: str


@dataclass
class TwoShards:
    """The installed App, its registry's actors and a client of each Redis."""

    app: App
    prefix: str
    default: redis.Redis
    b: redis.Redis

    def keys(self, client: redis.Redis, queue_name: str) -> set[str]:
        """Every key of ``queue_name``'s ledger on ``client``'s Redis."""
        return {key.decode() for key in
                client.scan_iter(match=f"{self.prefix}:{{{queue_name}}}:*", count=1000)}

    def job_keys(self, client: redis.Redis, queue_name: str) -> set[str]:
        """The job ids whose records are on ``client``'s Redis under ``queue_name``."""
        head = f"{self.prefix}:{{{queue_name}}}:job:"
        return {key.removeprefix(head) for key in self.keys(client, queue_name)
                if key.startswith(head)}

    def events(self) -> list[str]:
        """What the actors recorded, in order (on the default Redis)."""
        return [raw.decode() for raw in self.default.lrange(f"{self.prefix}:events", 0, -1)]


registry = Registry()
registry.declare(QueueSpec(name="sh-a", concurrency=2, attempts=1))
registry.declare(QueueSpec(name="sh-b", concurrency=2, attempts=1))
registry.declare(QueueSpec(name="sh-b2", concurrency=1, attempts=1))


def _record(text: str) -> None:
    from herald.queue import current_app

    app = current_app()
    # the events list lives on the default Redis, whichever shard ran the job
    app.client.rpush(f"{app.config.prefix}:events", text)


@registry.actor(queue="sh-b", payload=Note)
def on_b(job: Note) -> None:
    _record(f"b:{job.text}")


@registry.actor(queue="sh-b2", payload=Note)
def on_b2(job: Note) -> None:
    """Fails a note "boom" for good until the test mends it."""
    from herald.queue import current_app

    app = current_app()
    if job.text == "boom" and not app.client.exists(f"{app.config.prefix}:mended"):
        raise Permanent("boom")
    _record(f"b2:{job.text}")


@registry.actor(queue="sh-a", payload=Note)
def on_a(job: Note) -> None:
    """Runs on the default Redis and hands the note on to shard b (a job crossing shards)."""
    _record(f"a:{job.text}")
    enqueue(on_b, {"text": job.text}, job_id=f"from-a-{job.text}")


registry.schedule(Schedule(name="sh-tick", actor=on_b, payload={"text": "tick"},
                           every=timedelta(seconds=1)))


@pytest.fixture
def shards(redis_url: str, redis6_url: str) -> Iterator[TwoShards]:
    """The App installed over both servers, under a fresh prefix; its keys deleted after."""
    prefix = f"sh{uuid.uuid4().hex[:10]}"
    config = QueueConfig(redis_url=redis_url, prefix=prefix,
                         shards={"b": ShardConfig(redis_url=redis6_url,
                                                  queues=("sh-b", "sh-b2"))})
    app = App(config, registry).install()
    default, b = redis.Redis.from_url(redis_url), redis.Redis.from_url(redis6_url)
    try:
        yield TwoShards(app=app, prefix=prefix, default=default, b=b)
    finally:
        app.close()
        for client in (default, b):
            for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                client.delete(key)
            client.close()


def test_jobs_land_only_on_the_redis_of_their_queues_shard(shards: TwoShards) -> None:
    # When jobs are added one by one and together across both shards
    enqueue(on_a, {"text": "1"}, job_id="a-1", delay=timedelta(hours=1))
    enqueue(on_b, {"text": "1"}, job_id="b-1", delay=timedelta(hours=1))
    results = enqueue_many_actors([(on_b2, [{"text": "2"}]), (on_a, [{"text": "2"}]),
                                   (on_b, [({"text": "3"}, {"job_id": "b-3"})])])
    # Then each result comes back for its actor, in order
    assert [[r.status for r in rs] for rs in results] == [["added"], ["added"], ["added"]]
    assert results[2][0].job_id == "b-3"
    # And every job's keys are on the Redis of its queue's shard, and none on the other
    assert shards.job_keys(shards.b, "sh-b") == {"b-1", "b-3"}
    assert shards.job_keys(shards.b, "sh-b2") == {results[0][0].job_id}
    assert shards.job_keys(shards.default, "sh-a") == {"a-1", results[1][0].job_id}
    assert not shards.keys(shards.default, "sh-b") and not shards.keys(shards.default, "sh-b2")
    assert not shards.keys(shards.b, "sh-a")


def test_a_job_on_one_shard_enqueues_onto_another_and_that_shards_worker_runs_it(
        shards: TwoShards) -> None:
    # Given a worker on each shard, in this process
    with running_worker(["sh-a"]), running_worker(["sh-b"]):
        # When a job of sh-a (default Redis) runs and hands a note on to sh-b (shard b)
        enqueue(on_a, {"text": "x"}, job_id="a-x")
        # Then shard b's worker runs the job it added
        wait_for(lambda: "b:x" in shards.events(), timeout=15, what="the job on shard b")
    assert shards.events() == ["a:x", "b:x"]
    # And each job completed in its own shard's ledger
    assert queue("sh-a").get("a-x").state is JobState.COMPLETED
    assert queue("sh-b").get("from-a-x").state is JobState.COMPLETED
    assert shards.job_keys(shards.b, "sh-b") == {"from-a-x"}
    assert shards.job_keys(shards.default, "sh-a") == {"a-x"}
    # And the throughput history of each queue is read from its shard
    assert sum(done for _, done, _ in queue("sh-b").history(5)) == 1


def test_operators_reads_and_operations_on_a_queue_go_to_its_shard(shards: TwoShards) -> None:
    # Given jobs waiting on both shards
    for n in range(3):
        enqueue(on_b, {"text": str(n)}, job_id=f"op-b-{n}", delay=timedelta(hours=1))
    enqueue(on_a, {"text": "0"}, job_id="op-a-0", delay=timedelta(hours=1))
    # Then the queue's counts, pages and records are shard b's
    b = queue("sh-b")
    assert b.counts()["delayed"] == 3 and queue("sh-a").counts()["delayed"] == 1
    assert {job.id for job in b.jobs("delayed")} == {"op-b-0", "op-b-1", "op-b-2"}
    assert [job.id for job in b.find("op-b-1")] == ["op-b-1"]
    # And a search across every queue finds the jobs of both shards
    assert {(job.queue, job.id) for job in find_jobs("op-")} == {
        ("sh-b", "op-b-0"), ("sh-b", "op-b-1"), ("sh-b", "op-b-2"), ("sh-a", "op-a-0")}
    # And the /metrics collector reads each queue's depth from its shard
    depth = {tuple(sample.labels.values()): sample.value
             for family in shards.app._collector.collect() if family.name == "queue_depth"
             for sample in family.samples}
    assert depth[("sh-b", "delayed")] == 3 and depth[("sh-a", "delayed")] == 1
    # When the operator pauses, removes one and drains the rest of sh-b
    b.pause()
    assert b.is_paused() and shards.b.hget(f"{shards.prefix}:{{sh-b}}:meta", "paused") == b"1"
    assert b.remove("op-b-0")
    assert b.drain() == 2
    # Then shard b lost them and the default Redis kept its own
    assert shards.job_keys(shards.b, "sh-b") == set()
    assert shards.job_keys(shards.default, "sh-a") == {"op-a-0"}
    assert not shards.keys(shards.default, "sh-b")


def test_a_failed_job_is_retried_and_cleaned_on_its_shard(shards: TwoShards) -> None:
    b2 = queue("sh-b2")
    with running_worker(["sh-b2"]):
        # Given a job of shard b that failed for good
        enqueue(on_b2, {"text": "boom"}, job_id="fails")
        wait_for(lambda: b2.counts()["failed"] == 1, timeout=15, what="the failure")
        assert b2.get("fails").failed_reason == "boom"
        # When the operator mends the cause and retries it
        shards.default.set(f"{shards.prefix}:mended", "1")
        assert b2.retry("fails")
        # Then shard b's worker runs it again, to completion
        wait_for(lambda: b2.counts()["completed"] == 1, timeout=15, what="the retried run")
    assert shards.events() == ["b2:boom"]
    # And cleaning the completed record removes it from shard b
    assert b2.clean("completed") == 1
    assert shards.job_keys(shards.b, "sh-b2") == set()


def test_schedules_fire_onto_their_queues_shard(shards: TwoShards) -> None:
    # Given the schedule of an actor on shard b, synced (its state is on the default Redis)
    assert "sh-tick" in sync_schedules()
    shards.default.zadd(f"{shards.prefix}:schedules:next", {"sh-tick": 1})
    # When the clock fires what fell due
    assert fire_due(["sh-tick"]) == 1
    # Then the tick's job waits on shard b, not on the default Redis
    ids = {job_id for job_id in shards.job_keys(shards.b, "sh-b")}
    assert len(ids) == 1 and next(iter(ids)).startswith("repeat:sh-tick:")
    assert not shards.keys(shards.default, "sh-b")


def test_a_worker_process_refuses_queues_of_two_shards(shards: TwoShards) -> None:
    # When one process is asked to run queues of both shards
    with pytest.raises(MixedShards) as refused:
        WorkerProcess(["sh-a", "sh-b"])
    # Then the error names each shard and its queues
    assert "shard 'default': sh-a" in str(refused.value)
    assert "shard 'b': sh-b" in str(refused.value)
    # And the queues of one shard run together
    assert [run.worker.queues for run in WorkerProcess(["sh-b", "sh-b2"]).runs
            if run.worker is not None] == [["sh-b", "sh-b2"]]


def test_a_bad_shard_config_is_refused_naming_the_bad_part(redis_url: str) -> None:
    # A queue in two shards, a shard without a queue, shards with RabbitMQ
    twice = {"x": ShardConfig(redis_url=redis_url, queues=("sh-b",)),
             "y": ShardConfig(redis_url=redis_url, queues=("sh-b",))}
    with pytest.raises(ValueError, match="queue 'sh-b' is in shards 'x' and 'y'"):
        QueueConfig(redis_url=redis_url, shards=twice)
    with pytest.raises(ValueError, match="shard 'x' names no queue"):
        QueueConfig(redis_url=redis_url, shards={"x": ShardConfig(redis_url=redis_url)})
    with pytest.raises(ValueError, match="shards need the Redis broker"):
        QueueConfig(redis_url=redis_url, broker="rabbitmq",
                    shards={"x": ShardConfig(redis_url=redis_url, queues=("sh-b",))})
    # And a queue no registry declares stops the App's build, naming shard and queue
    unknown = QueueConfig(redis_url=redis_url,
                          shards={"x": ShardConfig(redis_url=redis_url, queues=("nope",))})
    with pytest.raises(ValueError, match="shard 'x' names queue 'nope'"):
        App(unknown, registry)


def test_without_shards_every_queue_is_on_the_one_redis(redis_url: str) -> None:
    # Given an App with no shards
    app = App(QueueConfig(redis_url=redis_url, prefix=f"sh{uuid.uuid4().hex[:10]}"), registry)
    try:
        # Then every queue is on its one shard, whose parts are the App's own
        assert list(app.shards) == ["default"]
        assert {app.shard(name) for name in ("sh-a", "sh-b", "sh-b2")} == {app.default_shard}
        assert app.default_shard.broker is app.broker and app.default_shard.ledger is app.ledger
    finally:
        app.close()
