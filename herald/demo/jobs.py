"""The demo queue: a few thousand small jobs that exercise the queue layer end to end.

``herald demo`` (:mod:`herald.demo`) plans a run with :func:`plan`, enqueues it on the
``demo`` queue and runs the real Dramatiq worker on it. Each job hashes a little data;
the plan makes some of them misbehave on purpose so a run shows every path the ledger
takes:

- *flaky* jobs fail transiently on their first attempt or two, then succeed (retries
  with the queue's exponential backoff);
- *exhausted* jobs fail transiently on every attempt, so they fail for good once the
  queue's attempts run out;
- *permanent* jobs raise :class:`~herald.queue.errors.Permanent` and fail at once.

:func:`expected_outcome` says how each planned job must end, so the demo can check the
ledger's final counts against the plan.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from dramatiq.middleware import CurrentMessage
from pydantic import BaseModel, Field

from actors.queues import registry
from herald.queue import Keep, Permanent, QueueSpec, Retention, queue

#: The demo's queue name.
DEMO_QUEUE = "demo"
#: Most jobs one demo run may plan: the queue keeps this many finished records of each
#: kind, so the final table shows real counts.
MAX_DEMO_JOBS = 100_000
#: Rounds of SHA-256 each job computes (a tiny bit of real CPU work).
HASH_ROUNDS = 200
#: Every this-many-th job fails permanently.
PERMANENT_EVERY = 100
#: Every this-many-th job fails transiently on every attempt (exhausts its attempts).
EXHAUSTED_EVERY = 250
#: Every this-many-th job fails transiently on its first one or two attempts.
FLAKY_EVERY = 20

DEMO_SPEC = registry.declare(QueueSpec(
    name=DEMO_QUEUE,
    concurrency=8,
    attempts=3,
    backoff_base=timedelta(milliseconds=200),
    retention=Retention(completed=Keep(count=MAX_DEMO_JOBS), failed=Keep(count=MAX_DEMO_JOBS)),
    shutdown_timeout=timedelta(seconds=5),
))


class DemoJob(BaseModel):
    """One demo job: its number and how it is planned to misbehave."""

    n: int = Field(ge=0)
    #: Attempts that fail transiently before one succeeds.
    fail_times: int = Field(default=0, ge=0)
    #: Fail at once with :class:`~herald.queue.errors.Permanent`.
    permanent: bool = False


class TransientDemoFailure(RuntimeError):
    """A planned transient failure (retried with the queue's backoff)."""


def plan(jobs: int) -> list[DemoJob]:
    """The jobs of one demo run: mostly well-behaved, some flaky, exhausted or permanent."""
    planned = []
    for n in range(jobs):
        if n % PERMANENT_EVERY == PERMANENT_EVERY - 1:
            planned.append(DemoJob(n=n, permanent=True))
        elif n % EXHAUSTED_EVERY == EXHAUSTED_EVERY // 2:
            planned.append(DemoJob(n=n, fail_times=DEMO_SPEC.attempts))
        elif n % FLAKY_EVERY == FLAKY_EVERY // 2:
            planned.append(DemoJob(n=n, fail_times=1 + (n // FLAKY_EVERY) % 2))
        else:
            planned.append(DemoJob(n=n))
    return planned


def expected_outcome(job: DemoJob) -> str:
    """``completed`` or ``failed``: how the job must end given the queue's attempts."""
    if job.permanent or job.fail_times >= DEMO_SPEC.attempts:
        return "failed"
    return "completed"


def expected_retries(job: DemoJob) -> int:
    """How many retries (failed attempts followed by another attempt) the job takes."""
    if job.permanent:
        return 0
    return min(job.fail_times, DEMO_SPEC.attempts - 1)


def job_id(job: DemoJob) -> str:
    """The deterministic job id of a planned job."""
    return f"demo-{job.n}"


def _attempts_made() -> int:
    """Failed attempts so far of the job being run (0 when called directly)."""
    message = CurrentMessage.get_current_message()
    if message is None:
        return 0
    made = message.options.get("attempts_made")
    if made is None:  # brokers that do not carry it on the message (RabbitMQ): ask the ledger
        record = queue(DEMO_QUEUE).get(message.options["job_id"])
        made = record.attempts_made if record is not None else 0
    return int(made)


@registry.actor(queue=DEMO_QUEUE, payload=DemoJob)
def crunch(job: DemoJob) -> dict[str, object]:
    """Hash the job's number a few hundred times; misbehave as planned."""
    digest = hashlib.sha256(str(job.n).encode())
    for _ in range(HASH_ROUNDS):
        digest = hashlib.sha256(digest.digest())
    if job.permanent:
        raise Permanent(f"demo job {job.n}: planned permanent failure")
    attempt = _attempts_made() + 1
    if attempt <= job.fail_times:
        raise TransientDemoFailure(f"demo job {job.n}: planned transient failure "
                                   f"(attempt {attempt})")
    return {"n": job.n, "digest": digest.hexdigest()[:16]}
