"""A Redis Sentinel deployment of a test's own, all local on free ports: one primary, one
replica and three Sentinels (a quorum of two) that promote the replica once the primary
has not answered for ``down-after-milliseconds``.

The primary and the replica are :func:`tests.support.services.start_redis` servers (the
replica told ``REPLICAOF`` once started); each Sentinel is ``redis-server --sentinel``
with a configuration file of its own, which it rewrites as it learns the deployment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis

from tests.support.services import Service, find_free_port, redis_server_binary, start_redis
from tests.support.waiting import wait_for

#: The master's name the Sentinels monitor.
MASTER_NAME = "herald-failover"
#: Milliseconds without an answer before a Sentinel holds the primary down (30 000 by
#: default; short here so a failover takes seconds).
DOWN_AFTER_MS = 1000
#: Milliseconds a failover may take before Sentinel tries again.
FAILOVER_TIMEOUT_MS = 10_000


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=1)


@dataclass
class SentinelDeployment:
    """The running deployment: the Sentinels' ``host:port`` list (``REDIS_SENTINELS``),
    the master's name, and the servers."""

    primary: Service
    replica: Service
    sentinel_ports: list[int]
    _sentinels: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    @property
    def sentinels(self) -> str:
        """``REDIS_SENTINELS``: each Sentinel's ``host:port``, comma-separated."""
        return ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)

    def master_port(self) -> int | None:
        """The port the first Sentinel that answers names as the master's, or None."""
        for port in self.sentinel_ports:
            with contextlib.suppress(redis.RedisError):
                host_port = _client(port).execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
                if host_port:
                    return int(host_port[1])
        return None

    def kill_primary(self) -> None:
        """SIGKILL the primary (as a crash or a lost host: nothing is written or handed
        over); the replica keeps what it had received."""
        pid = int(_client(_port(self.primary)).info("server")["process_id"])
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _pid_alive(pid), timeout=5, what="the primary to die")

    def close(self) -> None:
        """Stop every server of the deployment."""
        for process in self._sentinels:
            process.kill()
            process.wait(timeout=10)
        for service in (self.primary, self.replica):
            service.stop()


def _port(service: Service) -> int:
    return int(service.url.rsplit(":", 1)[1])


def _pid_alive(pid: int) -> bool:
    """False once ``pid`` has ended (a zombie, which our server bookkeeping reaps later,
    has ended too)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _in_sync(replica: int) -> bool:
    with contextlib.suppress(redis.RedisError):
        return _client(replica).info("replication").get("master_link_status") == "up"
    return False


def _knows_all(sentinel: int, others: int) -> bool:
    """True once the Sentinel on ``sentinel`` knows the replica and ``others`` Sentinels
    (learnt from their hello messages, every 2 s): only then can they fail over."""
    with contextlib.suppress(redis.RedisError):
        master = _client(sentinel).info("sentinel").get("master0") or {}
        return bool(master.get("slaves") == 1 and master.get("sentinels") == others + 1)
    return False


@contextlib.contextmanager
def sentinel_deployment(workdir: Path, sentinels: int = 3) -> Iterator[SentinelDeployment]:
    """A primary, a replica in sync with it and ``sentinels`` Sentinels that all know the
    deployment, in ``workdir``; stopped afterwards."""
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError("redis-server not found (see tests.support.services)")
    primary = start_redis(workdir / "primary")
    replica = start_redis(workdir / "replica")
    deployment = SentinelDeployment(primary, replica, [])
    try:
        _client(_port(replica)).replicaof("127.0.0.1", _port(primary))
        wait_for(lambda: _in_sync(_port(replica)), timeout=10, what="the replica to sync")
        for n in range(sentinels):
            port = find_free_port()
            home = workdir / f"sentinel-{n}"
            home.mkdir()
            conf = home / "sentinel.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {home}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {_port(primary)} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n")
            with (home / "sentinel.log").open("wb") as log:
                deployment._sentinels.append(subprocess.Popen(
                    [binary, str(conf), "--sentinel"], cwd=home, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            deployment.sentinel_ports.append(port)
        wait_for(lambda: all(_knows_all(port, sentinels - 1)
                             for port in deployment.sentinel_ports),
                 timeout=20, every=0.2, what="the Sentinels to know each other and the replica")
        yield deployment
    finally:
        deployment.close()
