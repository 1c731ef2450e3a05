"""herald relies on a few Dramatiq internals (herald/queue/dramatiq_internals.py); these
tests pin them to the supported Dramatiq range, so an upgrade that moves one fails here."""

from __future__ import annotations

import logging
import threading
import time
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import dramatiq
import dramatiq.worker
import pytest
import redis
from dramatiq.middleware import Middleware, MiddlewareError
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from herald.queue import App, QueueConfig, QueueSpec, Registry
from herald.queue.broker import LedgerBroker
from herald.queue.dramatiq_internals import (
    SUPPORTED_DRAMATIQ,
    QueueTimeLimit,
    drop_worker_middleware,
    installed_broker,
    uninstall_broker,
)
from herald.queue.ledger import Ledger

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def supported() -> SpecifierSet:
    return SpecifierSet(",".join(SUPPORTED_DRAMATIQ))


def test_the_installed_dramatiq_is_one_the_internals_were_checked_against() -> None:
    assert version("dramatiq") in supported()


def test_the_package_depends_on_exactly_the_supported_range() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    dramatiq_requirement = next(Requirement(d) for d in dependencies
                                if Requirement(d).name == "dramatiq")
    assert dramatiq_requirement.specifier == supported()


class Recorder(Middleware):
    """Defines two hooks only; the dispatch must call exactly those."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def before_enqueue(self, broker: dramatiq.Broker, message: Any, delay: Any) -> None:
        self.calls.append("before_enqueue")

    def after_enqueue(self, broker: dramatiq.Broker, message: Any, delay: Any) -> None:
        self.calls.append("after_enqueue")
        raise RuntimeError("an after-hook that fails is logged, not raised")


class Refuser(Middleware):
    def before_enqueue(self, broker: dramatiq.Broker, message: Any, delay: Any) -> None:
        raise MiddlewareError("refused")


def ledger_broker() -> LedgerBroker:
    # never connects: these tests emit signals only
    return LedgerBroker(Ledger(redis.Redis(), "internals"), middleware=[])


def test_the_hook_dispatch_calls_defined_hooks_and_follows_changes_to_the_list(
        caplog: pytest.LogCaptureFixture) -> None:
    broker = ledger_broker()
    first = Recorder()
    broker.add_middleware(first)
    with caplog.at_level(logging.CRITICAL):
        broker.emit_before("enqueue", None, None)
        broker.emit_after("enqueue", None, None)
    assert first.calls == ["before_enqueue", "after_enqueue"]
    assert "Unexpected failure in after_enqueue" in caplog.text

    second = Recorder()
    broker.add_middleware(second)
    broker.emit_before("enqueue", None, None)
    assert (first.calls[-1], second.calls) == ("before_enqueue", ["before_enqueue"])

    # a list of the same length assigned in its place: looked up again all the same
    broker.middleware = [Refuser(), Recorder()]
    with pytest.raises(MiddlewareError):
        broker.emit_before("enqueue", None, None)


def test_the_time_limit_is_armed_only_for_runs_that_have_one() -> None:
    # Given a broker with an actor whose queue sets no time limit
    registry = Registry()
    registry.declare(QueueSpec(name="t-internals"))
    app = App(QueueConfig(redis_url="redis://localhost:1/0"), registry)  # never connects
    broker = app.broker
    limit = QueueTimeLimit(time_limit=60_000)
    dramatiq.Actor(lambda: None, broker=broker, actor_name="t_internals",
                   queue_name="t-internals", priority=0, options={})
    plain = dramatiq.Message(queue_name="t-internals", actor_name="t_internals", args=(),
                             kwargs={}, options={})
    timed = plain.copy(options={"time_limit": 1000})

    # When a plain run and a timed run start and end
    thread = threading.get_ident()
    deadlines = limit.manager.deadlines  # the ctypes manager's: thread → deadline or None
    limit.before_process_message(broker, plain)
    armed_for_plain = deadlines.get(thread)
    limit.after_process_message(broker, plain)
    limit.before_process_message(broker, timed)
    armed_for_timed = deadlines.get(thread)
    limit.after_process_message(broker, timed)

    # Then only the timed run had a deadline, cleared when it ended
    assert armed_for_plain is None
    assert armed_for_timed is not None
    assert deadlines.get(thread) is None


def test_a_stopped_workers_own_middleware_can_be_dropped() -> None:
    broker = ledger_broker()
    worker = dramatiq.Worker(broker, queues=set(), worker_threads=1)
    worker.start()
    worker.stop()
    added = [m for m in broker.middleware if getattr(m, "worker", None) is worker]
    assert len(added) == 1

    drop_worker_middleware(broker, worker)

    assert not [m for m in broker.middleware if getattr(m, "worker", None) is worker]


def test_a_stopping_worker_gives_its_threads_the_whole_timeout() -> None:
    # Given a worker stopped with a 1.5 s timeout whose first three threads take
    # 0.4 s each to stop and whose last one needs 1.35 s from the stop
    import herald.queue.worker  # noqa: F401  (installs the deadline join)

    stopped_at = time.monotonic()

    class Slow:
        def __init__(self, done_after_s: float) -> None:
            self.done_after_s = done_after_s
            self.joined = False

        def join(self, timeout: float) -> None:
            remaining = self.done_after_s - (time.monotonic() - stopped_at)
            time.sleep(max(0.0, min(remaining, timeout)))
            self.joined = remaining <= timeout

    threads = [Slow(0.4), Slow(0.8), Slow(1.2), Slow(1.35)]

    # When Dramatiq's worker joins them
    dramatiq.worker.join_all(threads, 1500)

    # Then every one was given until the total timeout (Dramatiq's own join cut the last
    # one off at about 0.7 s)
    assert all(thread.joined for thread in threads)
    assert time.monotonic() - stopped_at < 1.5


def test_the_global_broker_is_read_and_undone_without_making_a_default_one() -> None:
    before = installed_broker()
    try:
        dramatiq.broker.global_broker = None
        # dramatiq.get_broker() would make a RabbitMQ broker here; the read does not
        assert installed_broker() is None
        broker = ledger_broker()
        dramatiq.set_broker(broker)
        assert installed_broker() is broker
        uninstall_broker(ledger_broker())  # another broker: nothing changes
        assert installed_broker() is broker
        uninstall_broker(broker)
        assert installed_broker() is None
    finally:
        dramatiq.broker.global_broker = before
