"""The store's schedules under a real ``herald clock``: a store-enabled boot adds the eSIM
sync and FX refresh schedules with a startup job each; a store-disabled boot removes
both from Redis (the package sync stays); a removal Redis refuses is a warning and the
clock still starts."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import redis

from herald.queue import queue
from herald.settings import get_settings
from tests.catalog.conftest import Store
from tests.cli.test_cli import herald_command, herald_env
from tests.support.waiting import wait_for

GATED = ("esim-product-sync", "fx-refresh", "store-recovery")
UNGATED = ("package-sync", "reconcile-handoffs", "resettle-lost-payments")
#: The queue of each schedule whose queue is not named after it.
SCHEDULE_QUEUES = {"reconcile-handoffs": "notification-orchestration",
                   "store-recovery": "store-fulfillment", "resettle-lost-payments": "payment"}


def next_key() -> str:
    return f"{get_settings().queue_prefix}:schedules:next"


def startup_jobs(name: str) -> list[str]:
    """The ids of schedule ``name``'s startup jobs waiting in its queue."""
    return [job.id for job in queue(SCHEDULE_QUEUES.get(name, name)).jobs("waiting", per_page=100)
            if job.id.startswith(f"startup:{name}:")]


@contextlib.contextmanager
def clock(store: Store, log: Path, **variables: str) -> Iterator[None]:
    """A real ``herald clock`` with the test's settings and ``variables``, its JSON log
    lines written to ``log``; stopped with SIGTERM after the block."""
    env = herald_env(**{**store.env, **variables, "LOG_FORMAT": "json",
                        "PYTHONUNBUFFERED": "1"})
    with log.open("ab") as output:
        process = subprocess.Popen([*herald_command(), "clock"], cwd=log.parent, env=env,
                                   stdout=subprocess.DEVNULL, stderr=output)
    try:
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()[-2000:]


def booted(count: int) -> bool:
    """True once ``count`` clock boots have added the package sync's startup job (it is
    added after the schedules were synced, whatever the store's gate)."""
    return len(startup_jobs("package-sync")) >= count


def test_a_store_disabled_boot_removes_the_store_schedules(
        store: Store, tmp_path: Path) -> None:
    client = redis.Redis.from_url(store.env["REDIS_URL"])
    # Given a clock that booted with the store enabled
    with clock(store, tmp_path / "clock.log", FEATURE_ESIM_STORE="true"):
        wait_for(lambda: booted(1), timeout=60, what="the first clock to start")
    # Then it scheduled the eSIM sync, FX refresh and store recovery, and ran each once
    # at its start
    for name in (*GATED, *UNGATED):
        assert client.zscore(next_key(), name) is not None, name
        assert len(startup_jobs(name)) == 1, name

    # When a clock boots with the store disabled
    with clock(store, tmp_path / "clock.log", FEATURE_ESIM_STORE="false"):
        wait_for(lambda: booted(2), timeout=60, what="the second clock to start")

    # Then the store's schedules are gone from Redis, the others stay, and the second
    # boot ran no store job at its start
    for name in GATED:
        assert client.zscore(next_key(), name) is None, name
        assert len(startup_jobs(name)) == 1, name
    for name in UNGATED:
        assert client.zscore(next_key(), name) is not None, name
        assert len(startup_jobs(name)) == 2, name
    client.close()


def test_a_removal_redis_refuses_is_a_warning_and_the_clock_starts(
        store: Store, private_redis_url: str, tmp_path: Path) -> None:
    # Given a private Redis where a store-enabled clock left the store's schedules
    admin = redis.Redis.from_url(private_redis_url)
    server = admin.connection_pool.connection_kwargs
    store.configure(REDIS_URL=f"redis://clock:clock-pw@{server['host']}:{server['port']}/0")
    prefix = store.env["QUEUE_PREFIX"]

    def allow(*rules: str) -> None:
        admin.execute_command("ACL", "SETUSER", "clock", "reset", "on", ">clock-pw", "&*",
                              *rules)

    allow("~*", "+@all")
    log = tmp_path / "clock.log"
    with clock(store, log, FEATURE_ESIM_STORE="true"):
        wait_for(lambda: booted(1), timeout=60, what="the first clock to start")
    # and the clock's Redis user may no longer remove anything from the schedule table
    # (ZREM only on the queues' keys and on claimed ticks)
    allow("~*", "+@all", "-zrem", f"(~{prefix}:{{* +zrem)",
          f"(~{prefix}:schedules:claimed +zrem)")

    # When a clock boots with the store disabled
    with clock(store, log, FEATURE_ESIM_STORE="false"):
        # Then it starts all the same
        wait_for(lambda: booted(2), timeout=60, what="the second clock to start")

    # and each refused removal is a warning naming the schedule, which stays in Redis
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    refused = [line for line in lines if line["level"] == "WARNING"
               and line["msg"].startswith("could not remove gated-off schedule")]
    assert sorted(line["schedule"] for line in refused) == sorted(GATED)
    assert all("permission" in line["msg"] for line in refused), refused
    for name in GATED:
        assert admin.zscore(f"{prefix}:schedules:next", name) is not None
    admin.close()

