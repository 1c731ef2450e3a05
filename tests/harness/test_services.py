"""The service fixtures point at real, working servers."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pika
import psutil
import psycopg
import pytest
import redis

from tests.support.services import (
    Service,
    ServiceSet,
    make_tempdir,
    psycopg_dsn,
    start_postgres,
    start_rabbitmq,
    start_redis,
)
from tests.support.waiting import wait_for


def _redis_version(url: str) -> tuple[int, ...]:
    client = redis.Redis.from_url(url)
    try:
        assert client.ping() is True
        key = f"test-services:{uuid.uuid4().hex}"
        client.set(key, "ok", ex=60)
        assert client.get(key) == b"ok"
        client.delete(key)
        version = str(client.info("server")["redis_version"])
    finally:
        client.close()
    return tuple(int(part) for part in version.split("."))


def test_redis_url_is_redis_7(redis_url: str) -> None:
    assert _redis_version(redis_url)[0] >= 7


def test_redis6_url_is_redis_6_2(redis6_url: str) -> None:
    assert _redis_version(redis6_url)[:2] == (6, 2)


def test_postgres_runs_queries(database_url: str) -> None:
    assert database_url.startswith("postgresql+psycopg://")
    with psycopg.connect(psycopg_dsn(database_url), connect_timeout=10) as conn:
        row = conn.execute("select version()").fetchone()
        assert row is not None and str(row[0]).startswith("PostgreSQL ")
        row = conn.execute("select 40 + %s", (2,)).fetchone()
        assert row == (42,)


def test_rabbitmq_publishes_and_gets(rabbitmq_url: str) -> None:
    params = pika.URLParameters(rabbitmq_url)
    params.socket_timeout = 10
    queue = f"test-services-{uuid.uuid4().hex}"
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.queue_declare(queue=queue, auto_delete=True)
        channel.basic_publish(exchange="", routing_key=queue, body=b"hello")
        body = None
        for _ in range(50):  # a published message may take a moment to be routable
            method, _properties, body = channel.basic_get(queue=queue, auto_ack=True)
            if method is not None:
                break
            connection.sleep(0.05)
        assert body == b"hello"
        channel.queue_delete(queue=queue)
    finally:
        connection.close()


def test_psycopg_dsn_drops_the_driver() -> None:
    assert psycopg_dsn("postgresql+psycopg://u@h:1/d") == "postgresql://u@h:1/d"
    assert psycopg_dsn("postgresql://u@h:1/d") == "postgresql://u@h:1/d"


# -- starting and stopping ---------------------------------------------------------------------

#: Set in the environment a server is started with: every process of that server inherits it,
#: daemons included, which is how these tests find them all.
PROBE = "HERALD_SERVICES_PROBE"
REPO = Path(__file__).resolve().parents[2]


def _processes_carrying(token: str) -> list[str]:
    """Names of the live processes whose environment has ``PROBE=token``."""
    names = []
    for proc in psutil.process_iter(["name", "environ", "status"]):
        environ = proc.info["environ"] or {}
        if environ.get(PROBE) == token and proc.info["status"] != psutil.STATUS_ZOMBIE:
            names.append(str(proc.info["name"]))
    return names


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _refuses_connections(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _listener(port: int) -> psutil.Process:
    """The process listening on ``port`` on this machine."""
    pids = [conn.pid for conn in psutil.net_connections("tcp")
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN]
    assert pids and pids[0], f"nothing listens on port {port}"
    return psutil.Process(pids[0])


@pytest.mark.parametrize("start", [start_redis, start_postgres, start_rabbitmq],
                         ids=["redis", "postgres", "rabbitmq"])
def test_stop_ends_every_process_of_the_server(
    start: Callable[[Path], Service], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = uuid.uuid4().hex
    monkeypatch.setenv(PROBE, token)
    workdir = make_tempdir()
    service = None
    try:
        service = start(workdir / "server")
        listener = _listener(_port_of(service.url))
        if start is start_rabbitmq:
            # Erlang's port mapper: a daemon of its own, outside the node's process group
            assert "epmd" in _processes_carrying(token)
        elif start is start_postgres:
            assert "postgres" in _processes_carrying(token)
        # (redis-server writes its process title over its environment: the listener finds it)

        service.stop()

        def all_gone() -> bool:
            return not listener.is_running() and not _processes_carrying(token)

        wait_for(all_gone, timeout=15, what="every process of the server to end")
        assert _refuses_connections(_port_of(service.url))
    finally:
        if service is not None:
            service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _run_services(env: dict[str, str], script: str) -> subprocess.Popen[str]:
    """``python -m tests.support.services run -- python -c script`` with ``env``."""
    command = [sys.executable, "-m", "tests.support.services", "run", "--",
               sys.executable, "-c", script]  # fmt: skip
    return subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


def test_run_returns_the_command_exit_code_and_stops_what_it_started(
    redis_url: str, database_url: str, rabbitmq_url: str
) -> None:
    # Given every URL but REDIS6_URL: run starts that one server
    token = uuid.uuid4().hex
    env = {**os.environ, PROBE: token, "REDIS_URL": redis_url, "DATABASE_URL": database_url,
           "RABBITMQ_URL": rabbitmq_url}  # fmt: skip
    env.pop("REDIS6_URL", None)
    script = "import os, sys; print('url=' + os.environ['REDIS6_URL'], flush=True); sys.exit(3)"

    # When the command it runs fails
    proc = _run_services(env, script)
    output, _ = proc.communicate(timeout=120)

    # Then run exits with the command's code, and the server it started for it is gone
    assert proc.returncode == 3, output
    url = next(line[4:] for line in output.splitlines() if line.startswith("url="))
    assert url.startswith("redis://")
    wait_for(lambda: not _processes_carrying(token), timeout=15, what="run's servers to end")
    assert _refuses_connections(_port_of(url))


def test_ctrl_c_during_start_up_stops_the_server_being_started(
    redis_url: str, redis6_url: str, rabbitmq_url: str
) -> None:
    # Given run starting PostgreSQL (every other URL is given)
    token = uuid.uuid4().hex
    env = {**os.environ, PROBE: token, "REDIS_URL": redis_url, "REDIS6_URL": redis6_url,
           "RABBITMQ_URL": rabbitmq_url}  # fmt: skip
    env.pop("DATABASE_URL", None)
    proc = _run_services(env, "import time; time.sleep(300)")
    try:
        wait_for(lambda: "initdb" in _processes_carrying(token), timeout=60,
                 what="initdb to run")  # fmt: skip

        # When it is interrupted before PostgreSQL is up
        proc.send_signal(signal.SIGINT)

        # Then it gives up at once (the command never runs) and leaves nothing behind
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, output
        assert "interrupted" in output
        wait_for(lambda: not _processes_carrying(token), timeout=15, what="PostgreSQL to end")
    finally:
        if proc.poll() is None:  # SIGTERM: run passes it on to its command and stops its servers
            proc.terminate()
            proc.communicate(timeout=60)


def test_a_url_from_the_environment_is_used_and_no_server_started() -> None:
    given = "redis://127.0.0.1:1/0"
    with ServiceSet(environ={"REDIS_URL": given}) as services:
        assert services.url("REDIS_URL") == given
        assert services.services == {}


def test_an_unknown_variable_is_refused_and_nothing_started() -> None:
    with ServiceSet(environ={"REDIS_URL": "redis://127.0.0.1:1/0"}) as services:
        with pytest.raises(KeyError, match="MONGO_URL"):
            services.urls(["REDIS_URL", "MONGO_URL"])
        assert services.services == {}
