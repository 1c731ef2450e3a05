"""Health: readiness checks, and the small HTTP server worker processes run.

- **Liveness** (``/healthz``) answers from memory, with no I/O: a slow database must
  not get a healthy process restarted.
- **Readiness** (``/readyz``) asks the database, Redis and the broker, concurrently,
  and always answers within :data:`READINESS_TIMEOUT_S` — a dependency that hangs is
  reported as failed, it never hangs the probe. Each is ``ok`` or ``down``; the reasons
  (which may name a host or port) only for a caller with the API token, or on loopback
  while it is unset (:func:`readiness_report`).
- **Metrics** (``/metrics``) is :func:`metrics_text`: the process's metrics
  and the ledger's queue metrics, as Prometheus text (behind METRICS_TOKEN while it is
  set).

A worker serves them on WORKER_PORT (:func:`serve_worker_health`), each connection given
:data:`REQUEST_TIMEOUT_S` and at most :data:`MAX_CONNECTIONS` at once.

The web process serves the same three routes through FastAPI (:mod:`herald.web`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import urlsplit

from herald.access import has_api_access, has_metrics_access
from herald.db import check_database
from herald.queue import METRICS_CONTENT_TYPE, current_app, installed_app, metrics_exposition
from herald.settings import get_settings

log = logging.getLogger(__name__)

#: The media type of :func:`metrics_text` (the web app serves it too).
CONTENT_TYPE = METRICS_CONTENT_TYPE
#: What a passing check reports.
OK = "ok"
#: A failed check, as ``/readyz`` names it.
DOWN = "down"
#: The check of the App's Redis: every shard's (docs/queue.md#shards).
REDIS = "redis"
#: Seconds the whole readiness check may take; a check still running then has failed.
READINESS_TIMEOUT_S = 3.0
#: Seconds RabbitMQ gets to accept a connection (TCP, TLS and AMQP handshake each).
RABBITMQ_TIMEOUT_S = 2.0
#: Longest failure reason reported, so a driver's essay does not become the body.
REASON_MAX_CHARS = 120
#: Seconds a worker health connection stays open from its accept, answered or not: a
#: client that sends half a request is dropped then. Readiness answers within 3 s.
REQUEST_TIMEOUT_S = 5.0
#: Connections the worker health server holds at once (a thread each); docs/deployment.md.
MAX_CONNECTIONS = 32


def _reason(error: BaseException) -> str:
    # SQLAlchemy wraps the driver's error with SQL and a docs link; the driver's is the point.
    cause = getattr(error, "orig", None) or error
    # pika nests the real cause two or three levels deep (first argument or .exception).
    while type(cause).__module__.startswith("pika."):
        inner = cause.args[0] if cause.args else getattr(cause, "exception", None)
        if not isinstance(inner, BaseException):
            break
        cause = inner
    lines = str(cause).strip().splitlines()
    text = f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
    return text[:REASON_MAX_CHARS]


def metrics_text() -> bytes:
    """This process's metrics and every registry queue's, in the Prometheus text format
    (:data:`CONTENT_TYPE`): what the web app and the worker health servers serve."""
    return metrics_exposition()


def _redis_checks() -> dict[str, Callable[[], None]]:
    """One PING check per Redis of the installed App, named ``redis:<shard>``: run side by
    side, so a shard that hangs is named and does not hide the others."""
    app = installed_app()
    if app is None:  # nothing to ping: the check fails as current_app() tells why
        return {f"{REDIS}:default": _installed}
    return {f"{REDIS}:{name}": functools.partial(_ping, shard.client)
            for name, shard in app.shards.items()}


def _ping(client: Any) -> None:
    client.ping()


def _installed() -> None:
    current_app()


def _merged_redis(results: dict[str, str]) -> str:
    """The ``redis`` check from its shards' (taken out of ``results``): ``ok`` when every
    shard answered, else each failed shard's reason, named by its shard when there are
    several."""
    shards = {name.removeprefix(f"{REDIS}:"): results.pop(name)
              for name in [name for name in results if name.startswith(f"{REDIS}:")]}
    failed = {name: status for name, status in sorted(shards.items()) if status != OK}
    if not failed:
        return OK
    if len(shards) == 1:
        return next(iter(failed.values()))
    return "error: " + "; ".join(f"shard {name}: {status.removeprefix('error: ')}"
                                 for name, status in failed.items())


def check_rabbitmq(url: str) -> None:
    """Raise unless RabbitMQ at ``url`` accepts (and we close) a connection in ~2 s."""
    # imported here: only a process on BROKER=rabbitmq checks it, and pika costs every
    # worker's start
    import pika

    parameters = pika.URLParameters(url)
    parameters.socket_timeout = RABBITMQ_TIMEOUT_S
    parameters.stack_timeout = RABBITMQ_TIMEOUT_S
    parameters.blocked_connection_timeout = RABBITMQ_TIMEOUT_S
    parameters.connection_attempts = 1
    pika.BlockingConnection(parameters).close()


def check_readiness() -> dict[str, str]:
    """``{"database", "redis", "broker"}`` each ``"ok"`` or ``"error: <short reason>"``.

    The checks run concurrently; the answer comes within :data:`READINESS_TIMEOUT_S`
    whatever the dependencies do. ``redis`` is every Redis of the App: with shards, each
    is pinged and a failed one is named (``shard <name>: <reason>``). With
    ``BROKER=redis`` the broker *is* Redis and reports the same as Redis.
    """
    settings = get_settings()
    checks: dict[str, Callable[[], None]] = {"database": check_database, **_redis_checks()}
    if settings.broker == "rabbitmq":
        url = settings.rabbitmq_url
        checks["broker"] = lambda: check_rabbitmq(url)
    results = _run_concurrently(checks, READINESS_TIMEOUT_S)
    results[REDIS] = _merged_redis(results)
    results.setdefault("broker", results[REDIS])
    return {name: results[name] for name in ("database", "redis", "broker")}


def readiness_report(checks: dict[str, str], *, detailed: bool) -> dict[str, Any]:
    """``checks`` as ``/readyz`` tells them: each dependency ``ok`` or ``down``, and, when
    ``detailed``, an ``errors`` object with each failed check's reason. A reason may name
    a host, a port or a driver's message, so only a caller with the token gets it."""
    report: dict[str, Any] = {name: OK if status == OK else DOWN
                              for name, status in checks.items()}
    if detailed:
        errors = {name: status.removeprefix("error: ") for name, status in checks.items()
                  if status != OK}
        if errors:
            report["errors"] = errors
    return report


def is_ready(checks: dict[str, str]) -> bool:
    """True when every check in ``checks`` passed."""
    return all(status == OK for status in checks.values())


def _run_concurrently(checks: dict[str, Callable[[], None]], timeout_s: float) -> dict[str, str]:
    results: dict[str, str] = {}
    lock = threading.Lock()

    def run(name: str, check: Callable[[], None]) -> None:
        try:
            check()
            status = OK
        except Exception as error:
            status = f"error: {_reason(error)}"
        with lock:
            results[name] = status

    # Daemon threads: a check blocked on a dead host must not keep the process alive.
    threads = [threading.Thread(target=run, args=item, name=f"herald-ready-{item[0]}",
                                daemon=True) for item in checks.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    with lock:
        answered = dict(results)
    for name in checks:
        answered.setdefault(name, f"error: no answer within {timeout_s:g} s")
    for name, status in answered.items():
        if status != OK:
            log.warning("readiness check failed", extra={"check": name, "status": status})
    return answered


class _HealthHandler(BaseHTTPRequestHandler):
    server_version = "herald-worker"
    # Each socket read or write gives up after this long; the whole request's deadline
    # is _HealthHTTPServer's (a client could trickle one byte per read).
    timeout = REQUEST_TIMEOUT_S

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:  # the request is in: no longer one to drop for a newcomer
            self._server.answering(self.request)
        return parsed

    @property
    def _server(self) -> _HealthHTTPServer:
        return cast(_HealthHTTPServer, self.server)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        settings = get_settings()
        if path == "/healthz":
            self._send_json(200, {"status": OK})
        elif path == "/readyz":
            checks = check_readiness()
            queues = self._server.queues
            if queues is not None:
                checks["queues"] = queues()
            detailed = has_api_access(settings, self.headers, self.client_address[0])
            self._send_json(200 if is_ready(checks) else 503,
                            readiness_report(checks, detailed=detailed))
        elif path == "/metrics":
            if has_metrics_access(settings, self.headers):
                self._send(200, metrics_text(), CONTENT_TYPE)
            else:
                self._send_json(401, {"error": {
                    "code": "unauthorized",
                    "message": "a valid bearer token is required (Authorization: Bearer "
                               "<token>)"}}, {"WWW-Authenticate": "Bearer"})
        else:
            self._send_json(404, {"error": {"code": "not_found",
                                            "message": f"not found: GET {path}"}})

    def _send_json(self, status: int, body: dict[str, Any],
                   headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _send(self, status: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # The stdlib writes the client address to stderr; logs carry no personal data.
        log.debug("health request " + format, *args)


@dataclass
class _Connection:
    deadline: float
    answering: bool = False


#: What a connection beyond the cap gets when every connection held is being answered.
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Connection: close\r\nContent-Length: 73\r\n\r\n"
         b'{"error": {"code": "busy", "message": "too many connections, try again"}}')


class _HealthHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most :data:`MAX_CONNECTIONS` of them, each cut off
    :data:`REQUEST_TIMEOUT_S` after it was accepted (one request per connection: HTTP/1.0).

    A connection beyond the cap takes the place of the oldest one still sending its
    request (which is closed): a client that opens connections and never finishes a
    request cannot keep a probe out. When every connection held is being answered, the
    newcomer gets a 503 and is closed at once."""

    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, address: tuple[str, int],
                 queues: Callable[[], str] | None) -> None:
        #: The worker's own queues check (``/readyz``), or None.
        self.queues = queues
        self._lock = threading.Condition()
        # oldest first (insertion order)
        self._open: dict[socket.socket, _Connection] = {}
        self._closed = False
        self._deadlines = threading.Thread(target=self._cut_late_connections, daemon=True,
                                           name="herald-worker-health-deadlines")
        # binds, or calls server_close and raises: what that reads must exist by then
        super().__init__(address, _HealthHandler)
        self._deadlines.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Start answering ``request`` under its deadline, or turn it away (see the
        class)."""
        with self._lock:
            admitted = len(self._open) < MAX_CONNECTIONS or self._cut_oldest_unread()
            if admitted:
                self._open[request] = _Connection(time.monotonic() + REQUEST_TIMEOUT_S)
                self._lock.notify_all()
        if not admitted:
            try:  # never blocks the accepting thread: what does not fit is dropped
                request.setblocking(False)
                # what the client already sent is read first: closing a socket with
                # unread bytes resets it, and the client would lose the answer
                request.recv(65536)
            except OSError:
                pass
            with contextlib.suppress(OSError):
                request.send(_BUSY)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def answering(self, request: socket.socket) -> None:
        """Mark ``request``'s request read: it is answered, not dropped for a newcomer."""
        with self._lock:
            connection = self._open.get(request)
            if connection is not None:
                connection.answering = True

    def shutdown_request(self, request: Any) -> None:
        """Close ``request``'s connection (its thread ends) and free its place."""
        with self._lock:  # under the lock: _cut never shuts a socket closed here
            self._open.pop(request, None)
        super().shutdown_request(request)

    def server_close(self) -> None:
        """Cut every open connection, stop the deadline thread, stop listening; returns
        once every connection's thread has ended."""
        with self._lock:
            self._closed = True
            for request in list(self._open):
                self._cut(request)
            self._lock.notify_all()
        if self._deadlines.ident is not None:  # started: the port was bound
            self._deadlines.join()
        super().server_close()  # closes the listening socket, joins the threads

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log a request that failed: a connection cut or gone (``OSError``) at DEBUG, a
        bug with its traceback (the stdlib prints it to stderr)."""
        if isinstance(sys.exc_info()[1], OSError):
            log.debug("worker health connection ended early", exc_info=True)
        else:
            log.exception("worker health request failed")

    def _cut_oldest_unread(self) -> bool:
        # the lock is held
        for request, connection in self._open.items():
            if not connection.answering:
                self._cut(request)
                return True
        return False

    def _cut(self, request: socket.socket) -> None:
        # the lock is held. Shutting the socket down wakes its thread blocked reading or
        # writing; the thread then closes it (shutdown_request).
        self._open.pop(request, None)
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_RDWR)

    def _cut_late_connections(self) -> None:
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                for request in [request for request, connection in self._open.items()
                                if connection.deadline <= now]:
                    log.debug("worker health connection cut at its deadline")
                    self._cut(request)
                next_deadline = min((connection.deadline for connection
                                     in self._open.values()), default=None)
                self._lock.wait(None if next_deadline is None else next_deadline - now)


class HealthServer:
    """A running worker health server; :meth:`stop` shuts it down and frees the port."""

    def __init__(self, server: _HealthHTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        """The TCP port the server is bound to (the real one when 0 was asked for)."""
        return int(self._server.server_address[1])

    def stop(self) -> None:
        """Stop serving and close the socket; returns once the serving thread has ended."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> HealthServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class PortInUse(OSError):
    """The health server's port is taken (by another process on this machine)."""

    def __init__(self, port: int) -> None:
        super().__init__(errno.EADDRINUSE, f"port {port} is already in use")
        self.port = port


def serve_worker_health(port: int, host: str = "0.0.0.0", *,
                        queues: Callable[[], str] | None = None) -> HealthServer:
    """Serve ``/healthz``, ``/readyz`` and ``/metrics`` on ``host:port`` in a daemon thread.

    ``port=0`` picks a free port (see :attr:`HealthServer.port`). Raises
    :class:`PortInUse` when the port is taken, any other ``OSError`` when it cannot be
    bound otherwise. Liveness answers even while every dependency is down. ``queues``
    (the worker's own state, read from memory) adds a ``queues`` check to ``/readyz``:
    ``"ok"``, or ``"error: …"`` naming the queues whose start failed.

    Each connection (one request) is closed :data:`REQUEST_TIMEOUT_S` after it was
    accepted, answered or not, and at most :data:`MAX_CONNECTIONS` are held at once
    (:class:`_HealthHTTPServer`). ``/metrics`` asks for METRICS_TOKEN while it is set.
    """
    try:
        server = _HealthHTTPServer((host, port), queues)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise PortInUse(port) from None
        raise
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="herald-worker-health", daemon=True)
    thread.start()
    log.info("worker health server listening", extra={"port": server.server_address[1]})
    return HealthServer(server, thread)
