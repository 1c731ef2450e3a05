"""Redis over TLS (rediss://) and through Sentinel: jobs flow end to end; a thread's own
connection outlives a dropped connection and a script cache Redis lost."""

from __future__ import annotations

import gc
import shutil
import subprocess
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.commands.core import Script

from herald.queue import App, QueueConfig, enqueue, queue
from herald.queue.redis import ThreadConnections
from herald.queue.worker import running_worker
from tests.queue.conftest import reset_herald, wait_for
from tests.support.queue.queues import basic
from tests.support.services import find_free_port


def _spawn(args: list[str], workdir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, cwd=workdir, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server that only speaks TLS, with a certificate made for the test."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test certificate")
    key, cert = tmp_path / "server.key", tmp_path / "server.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    port = find_free_port()
    server = _spawn(["redis-server", "--port", "0", "--tls-port", str(port), "--bind",
                     "127.0.0.1", "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                     "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
                     "--save", "", "--dir", str(tmp_path)], tmp_path)
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={cert}"
    try:
        wait_for(lambda: _pings(url), timeout=10, what="TLS redis")
        yield url
    finally:
        server.kill()
        server.wait()


@pytest.fixture
def sentinel(tmp_path: Path, redis_url: str) -> Iterator[str]:
    """A Sentinel watching the test Redis as master ``herald-test``."""
    master = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs
    port = find_free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor herald-test {master['host']} {master['port']} 1\n")
    server = _spawn(["redis-server", str(conf), "--sentinel"], tmp_path)
    try:
        wait_for(lambda: _pings(f"redis://127.0.0.1:{port}"), timeout=10, what="sentinel")
        yield f"127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _job_runs_through(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    monkeypatch.setenv("QUEUE_PREFIX", f"conn{time.monotonic_ns()}")
    monkeypatch.setenv("BROKER", "redis")
    monkeypatch.setenv("LOG_LEVEL", "WARNING")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_herald()
    try:
        enqueue(basic, {"key": "over-the-wire"}, job_id="wire")
        with running_worker(["t-basic"]):
            wait_for(lambda: queue("t-basic").get("wire").state == "completed", timeout=20)
    finally:
        reset_herald()


def test_jobs_run_over_tls(tls_redis: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _job_runs_through(monkeypatch, REDIS_URL=tls_redis)


def test_jobs_run_through_sentinel(sentinel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # REDIS_URL points nowhere: Sentinel mode must ignore it
    _job_runs_through(monkeypatch, REDIS_SENTINELS=sentinel,
                      REDIS_SENTINEL_NAME="herald-test", REDIS_URL="redis://127.0.0.1:1/0")


#: A script whose every run shows: it counts its runs in a key.
COUNT_RUNS = Script(None, b"return redis.call('INCR', KEYS[1])")


def test_a_threads_own_connection_recovers_from_a_drop_and_a_lost_script(
        private_redis_url: str) -> None:
    # CLIENT KILL and SCRIPT FLUSH hit every client of a server: a server of the test's own
    client = redis.Redis.from_url(private_redis_url)
    own = ThreadConnections(client)
    key = f"own-{time.monotonic_ns()}"
    assert own.run_script(COUNT_RUNS, keys=(key,)) == 1
    # the server drops the thread's connection: the call lands once, through the client,
    # and the next one opens a connection of its own again
    client.client_kill_filter(_type="normal", skipme=True)
    assert own.run_script(COUNT_RUNS, keys=(key,)) == 2
    assert own.run_script(COUNT_RUNS, keys=(key,)) == 3
    # Redis forgot its scripts (a restart, SCRIPT FLUSH): loaded again on the way
    client.script_flush()
    assert own.run_script(COUNT_RUNS, keys=(key,)) == 4
    assert int(client.get(key) or 0) == 4


def test_an_app_that_is_gone_takes_its_client_and_threads_connections_along(
        redis_url: str) -> None:
    # a process that makes new Apps (after a settings change, in tests) keeps no old
    # client, pool or socket alive through the threads' connections
    app = App(QueueConfig(redis_url=redis_url))
    assert app.connections.run_script(COUNT_RUNS, keys=(f"gone-{time.monotonic_ns()}",))
    gone = weakref.ref(app.client)
    app.close()
    del app
    gc.collect()
    assert gone() is None
