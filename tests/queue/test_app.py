"""The App holds a process's queue wiring: installing one is what makes it the process's,
and nothing of the library works without one (no lazy wiring from the environment)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import dramatiq
import pytest

from herald.queue import App, NoAppInstalled, QueueConfig, current_app, find_jobs, now_ms
from herald.queue.app import installed_app
from herald.queue.dramatiq_internals import installed_broker

#: Nothing listens there: building and installing an App connects to nothing.
NOWHERE = "redis://127.0.0.1:1/0"


@pytest.fixture
def no_app() -> Iterator[None]:
    """No App installed for the test; whatever was installed before is put back."""
    before = installed_broker()
    dramatiq.broker.global_broker = None
    yield
    dramatiq.broker.global_broker = before


def test_without_an_installed_app_the_library_says_so(no_app: None) -> None:
    with pytest.raises(NoAppInstalled, match=r"no herald\.queue App is installed"):
        current_app()
    with pytest.raises(NoAppInstalled):
        find_jobs("any-id")


def test_install_makes_the_app_dramatiqs_broker_and_close_uninstalls_it(no_app: None) -> None:
    app = App(QueueConfig(redis_url=NOWHERE, prefix="unit"))
    assert installed_app() is None
    assert app.install() is app and app.install() is app  # twice is harmless
    assert dramatiq.get_broker() is app.broker
    assert current_app() is app and app.installed
    app.time.advance(timedelta(hours=1))
    assert now_ms() >= app.time.now_ms() - 1000
    app.close()
    assert installed_app() is None and not app.installed


def test_a_config_names_one_redis() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        QueueConfig()
    with pytest.raises(ValueError, match="exactly one"):
        QueueConfig(redis_url=NOWHERE, sentinel_hosts=(("127.0.0.1", 26379),))
    with pytest.raises(ValueError, match="prefix"):
        QueueConfig(redis_url=NOWHERE, prefix="a:b")
    assert QueueConfig(redis_url="redis://user:secret@cache:6380/0").describe() == "cache:6380"
