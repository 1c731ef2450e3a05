"""Probe actors on herald's real queues, for ``herald worker --import tests.support.queue.probes``.

They are declared on herald's registry and run in herald's own capsules
(notification queues, business queues), and record in Redis (``<prefix>:lc:events``)
when each run starts and ends, so a test can see what a worker process took. A gated run
waits until the test opens its gate.
"""

from __future__ import annotations

import json
import time

from pydantic import BaseModel

from actors.queues import registry
from herald.queue import current_app, enqueue
from herald.settings import get_settings

#: How often a gated run looks at its gate (s).
GATE_POLL_S = 0.05


class Probe(BaseModel):
    """What a probe run does: wait for its gate, sleep, then maybe enqueue a follow-up."""

    key: str
    sleep_s: float = 0.0
    gated: bool = False
    #: the key (and job id) of a payment probe to enqueue as the run's last act
    then_enqueue: str | None = None


def _key(name: str) -> str:
    return f"{get_settings().queue_prefix}:lc:{name}"


def record(kind: str, key: str) -> None:
    """Append ``{"kind", "key"}`` to the event list."""
    current_app().client.rpush(_key("events"), json.dumps({"kind": kind, "key": key}))


def events(kind: str) -> list[str]:
    """The keys of the runs that recorded ``kind`` (``start``/``done``), in order."""
    entries = [json.loads(raw) for raw in current_app().client.lrange(_key("events"), 0, -1)]
    return [entry["key"] for entry in entries if entry["kind"] == kind]


def open_gate(key: str) -> None:
    """Let the gated run ``key`` go on."""
    current_app().client.set(_key(f"gate:{key}"), "1")


def _run(job: Probe) -> None:
    record("start", job.key)
    while job.gated and not current_app().client.exists(_key(f"gate:{job.key}")):
        time.sleep(GATE_POLL_S)
    time.sleep(job.sleep_s)
    if job.then_enqueue:
        enqueue(lc_probe_payment, Probe(key=job.then_enqueue), job_id=job.then_enqueue)
    record("done", job.key)


@registry.actor(queue="notification-email", payload=Probe)
def lc_probe_email(job: Probe) -> None:
    """A probe on the notification queues."""
    _run(job)


@registry.actor(queue="store-fulfillment", payload=Probe)
def lc_probe_store(job: Probe) -> None:
    """A probe on the business queues."""
    _run(job)


@registry.actor(queue="payment", payload=Probe)
def lc_probe_payment(job: Probe) -> None:
    """A probe on the business queues (the follow-up of a store probe)."""
    _run(job)
