"""``herald demo`` leaves nothing behind in the configuration it ran on: the user's
database holds exactly the user's rows afterwards (no demo account, supplier or webhook
endpoint), nothing of the demo's stays queued in the user's Redis, and the same holds
when the demo is stopped with Ctrl-C or SIGTERM in the middle of a phase."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import IO

import pytest
import redis
from sqlalchemy import Engine, create_engine, inspect, make_url, text

from herald.demo.notifications import NAMESPACE_SUFFIX
from tests.cli.test_cli import (
    DEMO_S,
    QUICK_S,
    embedded_answers,
    flat,
    herald_command,
    herald_env,
    run_herald,
    table_rows,
)
from tests.support.waiting import wait_for

#: Makes the user's own database and one account in it, as ``herald up`` and a
#: ``POST /v1/accounts`` would.
USER_ACCOUNT = """
from herald.db import migrate
migrate()
from actors.orchestration import create_account
print(create_account(email="user@example.com").id)
"""
#: Every phase that makes rows, kept small: accounts and deliveries (notifications),
#: suppliers and purchase orders (purchasing), a webhook endpoint (digest and webhooks).
PHASES = ("--jobs", "5", "--events", "4", "--batch-size", "2", "--failover-events", "0",
          "--orders", "0", "--purchase-orders", "1", "--digest-events", "5")
#: The job states a worker would still take a job from.
PENDING = ("waiting", "delayed", "active", "paused")


@pytest.fixture
def user_env(redis_url: str) -> dict[str, str]:
    """A user's environment: the test Redis under a key prefix of their own, SQLite
    ``./herald.db`` (the embedded default's database) unless a test sets DATABASE_URL."""
    return herald_env(REDIS_URL=redis_url, BROKER="redis",
                      QUEUE_PREFIX=f"leftover{uuid.uuid4().hex[:10]}")


def make_user_account(cwd: Path, env: dict[str, str]) -> str:
    """The user's own account in the user's database; returns its id."""
    made = subprocess.run([sys.executable, "-c", USER_ACCOUNT], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=QUICK_S, check=False)
    assert made.returncode == 0, made.stderr
    return made.stdout.split()[-1]


def snapshot(engine: Engine) -> dict[str, object]:
    """Every row of every table of the user's database (and, on PostgreSQL, the schemas
    it has): what must be exactly the same after a demo."""
    with engine.connect() as connection:
        tables = inspect(connection).get_table_names()
        rows: dict[str, object] = {
            table: sorted(map(repr, connection.execute(text(f'SELECT * FROM "{table}"'))))
            for table in tables}
        if engine.dialect.name == "postgresql":
            rows["schemas"] = sorted(connection.execute(text(
                "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
                "AND nspname <> 'information_schema'")).scalars())
    return rows


def user_tables(engine: Engine) -> dict[str, int]:
    """The rows a user sees in the API and console: accounts, suppliers, webhook endpoints."""
    with engine.connect() as connection:
        return {table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in ("accounts", "suppliers", "webhook_endpoints")}


def pending_jobs(redis_url: str, prefix: str) -> dict[str, dict[str, int]]:
    """Jobs a worker could still take, per queue, under the user's key prefix and the
    demo's own one beside it (both in the Redis the user's workers read)."""
    from actors.queues import herald_queues
    from herald.queue import Ledger, LedgerQueries
    from herald.settings import Settings

    client = redis.Redis.from_url(redis_url)
    try:
        found = {}
        for key_prefix in (prefix, prefix + NAMESPACE_SUFFIX):
            queries = LedgerQueries(Ledger(client, key_prefix))
            for spec in herald_queues(Settings()):
                counts = queries.counts(spec.name)
                pending = {state: counts[state] for state in PENDING if counts[state]}
                if pending:
                    found[f"{key_prefix}:{spec.name}"] = pending
        return found
    finally:
        client.close()


def assert_nothing_left(tmp_path: Path, engine: Engine, before: dict[str, object],
                        env: dict[str, str], redis_url: str) -> None:
    """The user's database holds exactly what it held before the demo, nothing of the
    demo's is queued, and the demo's own database is gone."""
    assert user_tables(engine) == {"accounts": 1, "suppliers": 0, "webhook_endpoints": 0}
    assert snapshot(engine) == before
    assert pending_jobs(redis_url, env["QUEUE_PREFIX"]) == {}
    assert not (tmp_path / ".herald" / "demo").exists(), "the demo's own database stayed"


@pytest.mark.timeout(DEMO_S + 60)
def test_a_demo_leaves_the_users_sqlite_database_and_queues_as_they_were(
        tmp_path: Path, user_env: dict[str, str], redis_url: str) -> None:
    # Given a user's herald.db with one account of the user's own
    make_user_account(tmp_path, user_env)
    engine = create_engine(f"sqlite:///{tmp_path / 'herald.db'}")
    before = snapshot(engine)

    for run in (1, 2):
        # When the demo runs in the same directory and Redis, every phase that makes rows
        # (twice: the second run on what the first left)
        result = run_herald("demo", *PHASES, cwd=tmp_path, env=user_env, timeout_s=DEMO_S)

        # Then it succeeds, its webhook endpoint and suppliers made and used
        assert result.returncode == 0, f"run {run}:\n{result.stdout}\n{result.stderr}"
        output = flat(result.stdout)
        assert "delivery.sent webhook arrived once, signature verified" in output
        assert "purchase orders: 1 completed" in output
        # and the user's database holds exactly the user's rows: no demo account, supplier
        # or webhook endpoint; nothing of the demo's waits for the user's workers
        assert_nothing_left(tmp_path, engine, before, user_env, redis_url)
    engine.dispose()


@pytest.mark.timeout(DEMO_S + 60)
def test_a_demo_on_postgresql_leaves_the_users_database_as_it_was(
        tmp_path: Path, user_env: dict[str, str], redis_url: str,
        fresh_postgres: str) -> None:
    # Given a user's PostgreSQL database with one account of the user's own, configured
    # as a deployment may be: no SECRETS_KEY and no provider named (each channel off)
    unset = {"SECRETS_KEY", "EMAIL_PROVIDER", "SMS_PROVIDER", "PUSH_PROVIDER", "ESIM_PROVIDERS"}
    env = {name: value for name, value in {**user_env, "DATABASE_URL": fresh_postgres}.items()
           if name not in unset}
    make_user_account(tmp_path, env)
    engine = create_engine(fresh_postgres)
    before = snapshot(engine)

    # When the demo runs on it
    result = run_herald("demo", *PHASES, cwd=tmp_path, env=env, timeout_s=DEMO_S)

    # Then it succeeds (its own database runs on the mock, with a key of the run's own),
    # and the database holds exactly the user's rows and schemas
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "delivery.sent webhook arrived once" in flat(result.stdout)
    assert_nothing_left(tmp_path, engine, before, env, redis_url)
    engine.dispose()


def test_a_demo_refuses_a_postgresql_schema_of_the_users_named_as_its_own(
        tmp_path: Path, user_env: dict[str, str], fresh_postgres: str) -> None:
    # Given a user's database with a schema named herald_demo of the user's own
    engine = create_engine(fresh_postgres)
    with engine.begin() as connection:
        connection.execute(text("CREATE SCHEMA herald_demo"))
        connection.execute(text("CREATE TABLE herald_demo.notes (body text)"))
        connection.execute(text("INSERT INTO herald_demo.notes VALUES ('mine')"))

    # When the demo is started on it
    result = run_herald("demo", "--jobs", "5", "--events", "0", "--failover-events", "0",
                        "--orders", "0", "--purchase-orders", "0", "--digest-events", "5",
                        cwd=tmp_path, env={**user_env, "DATABASE_URL": fresh_postgres},
                        timeout_s=DEMO_S)

    # Then it refuses, saying why, and the user's schema is as it was
    assert result.returncode == 2, f"{result.stdout}\n{result.stderr}"
    assert "a schema 'herald_demo' the demo did not make" in flat(result.stdout)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT body FROM herald_demo.notes")).all() == [
            ("mine",)]
    engine.dispose()


def _collect(stream: IO[str], into: list[str]) -> None:
    for line in stream:
        into.append(line)


@pytest.mark.timeout(DEMO_S + 60)
@pytest.mark.parametrize(("stop", "exit_code", "said"), [
    (signal.SIGINT, 130, "demo stopped (Ctrl-C)"),
    (signal.SIGTERM, 143, "demo stopped (SIGTERM)")])
def test_a_demo_stopped_mid_phase_leaves_the_users_database_and_queues_as_they_were(
        tmp_path: Path, user_env: dict[str, str], redis_url: str, stop: signal.Signals,
        exit_code: int, said: str) -> None:
    # Given a user's herald.db with one account of the user's own
    make_user_account(tmp_path, user_env)
    engine = create_engine(f"sqlite:///{tmp_path / 'herald.db'}")
    before = snapshot(engine)

    # When the demo is stopped with Ctrl-C (SIGINT) or SIGTERM once its notification phase
    # has made its accounts and fired its events, while its workers run
    process = subprocess.Popen(
        [*herald_command(), "demo", "--jobs", "5", "--events", "400", "--failover-events",
         "0", "--orders", "0", "--purchase-orders", "0", "--digest-events", "5"],
        cwd=tmp_path, env={**user_env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=_collect, args=(process.stdout, lines), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(line.startswith("accepted 400 events") for line in lines)
                 or process.poll() is not None, timeout=DEMO_S, every=0.1,
                 what="the notification phase to fire its events")
        assert process.poll() is None, "".join(lines)
        process.send_signal(stop)
        code = process.wait(timeout=QUICK_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(timeout=10)

    # Then it says it stopped and exits 128 + the signal, and leaves nothing: the user's
    # database holds exactly the user's rows, nothing of the demo's is queued
    output = "".join(lines)
    assert code == exit_code, output
    assert said in output and "Traceback" not in output, output
    assert "deliveries by channel" not in output  # it did stop mid-phase
    assert_nothing_left(tmp_path, engine, before, user_env, redis_url)
    engine.dispose()


@pytest.mark.timeout(DEMO_S + 30)
def test_jobs_0_skips_the_job_phase_as_0_skips_every_other(tmp_path: Path) -> None:
    # When the demo runs with --jobs 0 and only its digest phase
    result = run_herald("demo", "--jobs", "0", "--events", "0", "--failover-events", "0",
                        "--orders", "0", "--purchase-orders", "0", "--digest-events", "5",
                        cwd=tmp_path, env=herald_env(), timeout_s=DEMO_S)

    # Then it is accepted, runs no job, and runs the phases not skipped
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "jobs by queue × state" not in result.stdout
    assert "demo" not in table_rows(result.stdout)
    assert "delivery.sent webhook arrived once" in flat(result.stdout)
    assert not embedded_answers(tmp_path), "the demo must stop the Redis it started"
    # and quietly: no library's warning on stderr (asyncssh's about DSA keys among them)
    assert "Warning" not in result.stderr, result.stderr


def test_demo_database_url_keeps_the_users_options_and_adds_its_schema() -> None:
    from herald.demo.database import SCHEMA, demo_database_url

    url = make_url(demo_database_url(
        "postgresql+psycopg://u:p%40ss@db:5432/app?options=-cstatement_timeout%3D5000"))
    # the same server, database and credentials; the demo's schema first on the path
    assert (url.host, url.database, url.username, url.password) == ("db", "app", "u", "p@ss")
    assert url.query["options"] == f"-cstatement_timeout=5000 -csearch_path={SCHEMA}"
