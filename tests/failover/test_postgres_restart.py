"""PostgreSQL restarts under a steady load of events: while it is down the API answers
503 (never 500) and comes back by itself once it is up; the workers' runs that met the
outage are retried; every event the API accepted ends with its delivery sent.

The test's own PostgreSQL (migrated here) is stopped with ``pg_ctl stop -m immediate`` —
every connection cut at once, as in a crash — and started again on the same port and
data directory. The API runs under uvicorn in the test process; two ``herald worker``
processes and a ``herald clock`` (the handoff sweep every second, rows older than 3 s)
run as in production.
"""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Iterator

import pytest
from sqlmodel import select

from herald import db
from herald.queue import queue
from models.notifications import FINAL_OUTCOMES, Delivery
from tests.support.event_load import (
    IN_FLIGHT_PER_PROCESS,
    create_accounts,
    delivery_outcomes,
    killed_at_end,
    pipeline_worker,
    probe_get_routes,
    serving_app,
    steady_load,
    wait_all_sent,
)
from tests.support.pipeline.steps import accepted_twice, breakable_pipeline
from tests.support.processes import spawn_herald
from tests.support.restartable_postgres import RestartablePostgres, restartable_postgres
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

#: The operator console's token in this test.
ADMIN_TOKEN = "failover-admin-token"
#: Seconds PostgreSQL stays down.
DOWN_S = 5.0


@pytest.fixture
def restarted_db(pipeline: None,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[RestartablePostgres]:
    """The pipeline on a PostgreSQL of the test's own (migrated) with a fast handoff sweep;
    the workers and the clock inherit the environment."""
    with restartable_postgres() as server:
        db.migrate(server.url)
        # ADMIN_TOKEN: the console's routes are probed too
        with breakable_pipeline(monkeypatch, DATABASE_URL=server.url, ADMIN_TOKEN=ADMIN_TOKEN):
            yield server


def _unfinished(notifications: list[str]) -> list[str]:
    """Each delivery not yet final, with its row and its job as the ledger has it."""
    final = [o.value for o in FINAL_OUTCOMES]
    with db.session() as session:
        rows = session.exec(select(Delivery).where(
            Delivery.notification_id.in_(notifications), Delivery.outcome.not_in(final))).all()
    found = []
    for row in rows:
        job = queue(f"notification-{row.channel}").get(row.id)
        found.append(f"{row.id} {row.channel} {row.outcome} claimed {row.claimed_at} queued "
                     f"{row.queued_at} attempts {row.attempts}: job "
                     f"{job and (job.state, job.attempts_made, job.return_value)}")
    return found


@pytest.mark.timeout(120)
def test_a_postgres_restart_under_load_answers_503_and_loses_nothing(
        restarted_db: RestartablePostgres) -> None:
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    # (a claim stale after 6 s: an outcome write the outage failed leaves the claim)
    processes = [pipeline_worker("tests.support.pipeline.short_lock") for _ in range(2)]
    processes.append(spawn_herald("clock"))
    with killed_at_end(processes) as exits, serving_app() as base:
        accounts = create_accounts(base, 20, f"pgr{tag}")
        # Given a steady load that the workers keep up with
        with steady_load(base, accounts, tag) as load:
            # When PostgreSQL stops (every connection cut) and is started again
            restarted_db.stop("immediate")
            down_at = time.monotonic()
            before_down = load.count(503)
            wait_for(lambda: load.count(503) > before_down + 10, timeout=20,
                     what="the API to answer 503")
            probed = probe_get_routes(base, ADMIN_TOKEN)  # every GET route, once
            time.sleep(max(0.0, DOWN_S - (time.monotonic() - down_at)))
            restarted_db.start()
            up_at = time.monotonic()
            accepted_at_restart = len(load.accepted)
            # Then the API accepts events again by itself
            wait_for(lambda: len(load.accepted) > accepted_at_restart + 20, timeout=30,
                     what="the API to accept events again")
            recovered_s = load.accepted_at[accepted_at_restart] - up_at
        # and every accepted event's delivery ends sent
        wait_all_sent(load, timeout=60, detail=lambda: _unfinished(load.accepted))
    # the workers and the clock rode it out: none exited (none needed restarting)
    assert exits == [None] * len(processes), exits
    outcomes = delivery_outcomes(load.accepted)
    assert sum(outcomes.values()) == len(load.accepted)
    assert set(outcomes) <= {o.value for o in FINAL_OUTCOMES}
    # never a 500 (or any answer but 202 and 503), never a request left without an answer
    assert set(load.statuses) <= {202, 503}, (dict(load.statuses), load.bodies)
    assert load.count(503) > 0
    # and no GET route of the OpenAPI document answered 500 while it was down
    assert {path: status for path, status in probed.items() if status >= 500
            and status != 503} == {}
    # the provider accepted each delivery once, except sends whose outcome write the
    # outage failed: a worker holds at most 9 sends at once (email 5, SMS 2, and 2)
    twice = len(accepted_twice())
    assert twice <= 2 * IN_FLIGHT_PER_PROCESS, twice
    print(f"PostgreSQL restart: {time.monotonic() - started:.0f} s, {dict(load.statuses)}; "
          f"down {up_at - down_at:.1f} s, {load.count_after(503, up_at)} 503 after the "
          f"restart, first event accepted {recovered_s:.2f} s after "
          f"the restart; the API's longest time without an accepted event "
          f"{load.longest_gap(down_at - 1):.1f} s; {twice} deliveries sent twice; GET routes "
          f"while down: {dict(collections.Counter(probed.values()))} of {len(probed)}")
