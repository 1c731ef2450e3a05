"""An application's declarations live on its Registry, and an App reads those of the
registries it was built with (or includes), and nothing else (docs/queue.md#registry)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import dramatiq
import pytest
from pydantic import BaseModel

from herald.queue import (
    App,
    Capsule,
    QueueConfig,
    QueueSpec,
    Registry,
    Schedule,
    UnknownQueue,
)
from herald.queue.dramatiq_internals import installed_broker

#: Nothing listens there: building and installing an App connects to nothing.
NOWHERE = "redis://127.0.0.1:1/0"


class Ping(BaseModel):
    n: int = 0


def app_of(*registries: Registry) -> App:
    return App(QueueConfig(redis_url=NOWHERE, prefix="declarations"), *registries)


@pytest.fixture
def no_app() -> Iterator[None]:
    """No App installed for the test; whatever was installed before is put back."""
    before = installed_broker()
    dramatiq.broker.global_broker = None
    yield
    dramatiq.broker.global_broker = before


def test_an_app_reads_the_registries_it_is_built_with_and_no_others() -> None:
    # Given two applications' registries, each with a queue, a schedule, a sweep, a capsule
    first, second = Registry(), Registry()
    first.declare(QueueSpec(name="d-first"))
    second.declare(QueueSpec(name="d-second", concurrency=2))
    ping = first.actor(queue="d-first", payload=Ping)(lambda job: None)
    first.schedule(Schedule(name="d-tick", actor=ping, every=timedelta(seconds=1)))
    second.sweep("d-sweep", lambda: 0)
    second.declare_capsules(Capsule(name="d-capsule", queues=("d-second",)))

    # When one App reads the first, another the second, a third both
    only_first, only_second, both = app_of(first), app_of(second), app_of(first, second)

    # Then each sees its own registries' declarations, and none of the others'
    assert [spec.name for spec in only_first.specs()] == ["d-first"]
    with pytest.raises(UnknownQueue):
        only_first.spec("d-second")
    assert (list(only_first.schedules()), list(only_first.sweeps())) == (["d-tick"], [])
    assert ([capsule.name for capsule in only_second.capsules()], only_second.actors()) == (
        ["d-capsule"], [])
    assert [spec.name for spec in both.specs()] == ["d-first", "d-second"]
    assert both.actor(ping.name) is ping and both.spec("d-second").concurrency == 2


def test_tables_are_read_when_the_app_is_built_declarations_at_each_use() -> None:
    # Given a registry whose queue table lists what the application's configuration says
    configured = {"concurrency": 1}
    registry = Registry()
    registry.provide(lambda: [QueueSpec(name="d-table", **configured)])
    app = app_of(registry)

    # When the configuration changes after the App was built
    configured["concurrency"] = 5
    # Then that App keeps the table as it was, and an App built now reads the new one
    assert app.spec("d-table").concurrency == 1
    assert app_of(registry).spec("d-table").concurrency == 5

    # When a queue is declared on the registry after the App was built
    registry.declare(QueueSpec(name="d-late"))
    # Then the App sees it at once, and a declaration replaces the table's queue
    assert app.spec("d-late").name == "d-late"
    with registry.redeclared(["d-table"], concurrency=3):
        assert app.spec("d-table").concurrency == 3
    assert registry.declared_specs()["d-table"].concurrency == 5  # the table's, now


def test_a_later_registry_wins_for_a_name_both_declare() -> None:
    herald_like, override = Registry(), Registry()
    herald_like.declare(QueueSpec(name="d-shared", attempts=3))
    override.declare(QueueSpec(name="d-shared", attempts=1))

    assert app_of(herald_like, override).spec("d-shared").attempts == 1
    assert app_of(override, herald_like).spec("d-shared").attempts == 3


@pytest.mark.usefixtures("no_app")
def test_actors_are_bound_to_the_installed_app_that_reads_their_registry() -> None:
    # Given an installed App reading one registry, and a registry it does not read
    mine, other = Registry(), Registry()
    mine.declare(QueueSpec(name="d-mine", time_limit=timedelta(seconds=2)))
    other.declare(QueueSpec(name="d-other"))
    early = mine.actor(queue="d-mine", payload=Ping, name="d_early")(lambda job: None)
    app = app_of(mine).install()
    try:
        # When actors are declared on both after the install
        late = mine.actor(queue="d-mine", payload=Ping, name="d_late")(lambda job: None)
        stranger = other.actor(queue="d-other", payload=Ping, name="d_stranger")(
            lambda job: None)

        # Then the App's are bound to its broker, with their queue's time limit, the other not
        assert early.broker is app.broker and late.broker is app.broker
        assert app.broker.get_actor("d_late").options["time_limit"] == 2000
        assert stranger.broker is None
        # and once the App includes the other registry, its actors are bound too
        app.include(other)
        assert stranger.broker is app.broker and app.spec("d-other").name == "d-other"
    finally:
        app.close()


@pytest.mark.usefixtures("no_app")
def test_an_actor_on_a_queue_nobody_declared_is_refused() -> None:
    with pytest.raises(UnknownQueue):
        Registry().actor(queue="d-nowhere", payload=Ping)


def test_a_queue_in_two_capsules_is_refused_and_the_registry_keeps_its_capsules() -> None:
    registry = Registry()
    registry.declare_capsules(Capsule(name="d-a", queues=("d-q",)))

    with pytest.raises(ValueError, match="'d-q' is in capsules 'd-a' and 'd-b'"):
        registry.declare_capsules(Capsule(name="d-b", queues=("d-q",)))

    assert list(registry.capsules()) == ["d-a"]
