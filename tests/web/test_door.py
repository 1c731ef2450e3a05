"""The door in protected mode (API_TOKEN unset), over real HTTP: a request a proxy
forwarded is never a loopback one, whatever uvicorn's FORWARDED_ALLOW_IPS makes of it; a
loopback request naming another ``Host`` (a web page that rebound its name to 127.0.0.1)
is refused; the docs follow ``/v1``; ``/metrics`` asks for METRICS_TOKEN once it is set;
and the worker health server drops half-sent requests and holds a bounded number of
connections."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from herald import db
from herald.health import MAX_CONNECTIONS, REQUEST_TIMEOUT_S, serve_worker_health
from herald.settings import SettingsError, load_settings, reset_settings
from herald.web import create_app
from tests.support.event_load import serving_app
from tests.support.waiting import wait_for

#: ``configure(NAME=value, …)``: those settings on top of the test's database, API_TOKEN,
#: HERALD_OPEN_API, ALLOWED_HOSTS, DOCS_PUBLIC and METRICS_TOKEN unset unless given.
Configure = Callable[..., None]
#: A route of ``/v1`` that answers 200 with the database alone.
V1 = "/v1/webhook-endpoints"
DOCS = ("/openapi.json", "/docs", "/redoc")


@pytest.fixture
def configure(monkeypatch: pytest.MonkeyPatch, migrated_database: str) -> Iterator[Configure]:
    def apply(**settings: str) -> None:
        monkeypatch.setenv("DATABASE_URL", migrated_database)
        for name in ("API_TOKEN", "HERALD_OPEN_API", "ALLOWED_HOSTS", "DOCS_PUBLIC",
                     "METRICS_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        reset_settings()
        db.reset_engine()

    apply()
    yield apply
    reset_settings()
    db.reset_engine()


@pytest.fixture
def behind_any_proxy(configure: Configure) -> Iterator[str]:
    """herald's app under a real uvicorn on loopback that trusts every proxy
    (``FORWARDED_ALLOW_IPS='*'``, the usual setting behind a PaaS router); its port."""
    with serving_app(proxy_headers=True, forwarded_allow_ips="*") as base:
        yield base.rsplit(":", 1)[1]


def request(port: str, method: str, path: str, **headers: str) -> httpx.Response:
    """``method path`` from this machine to 127.0.0.1:``port``, with these headers
    (``Host`` included: httpx sends the one given)."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=15) as client:
        return client.request(method, path, headers={name.replace("_", "-"): value
                                                     for name, value in headers.items()},
                              json={"url": "https://hooks.example.com/in",
                                    "events": ["delivery.failed"]} if method == "POST" else None)


def code_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


@pytest.mark.parametrize("forwarded", [
    {"X_Forwarded_For": "127.0.0.1"},
    {"X_Forwarded_For": "127.0.0.1, 203.0.113.9"},  # as a proxy appends the peer
    {"Forwarded": "for=127.0.0.1"},
])
def test_a_request_a_proxy_forwarded_is_never_a_loopback_one(
        behind_any_proxy: str, forwarded: dict[str, str]) -> None:
    port = behind_any_proxy
    # Given a loopback client that gets into /v1
    assert request(port, "GET", V1).status_code == 200

    # When a request says a proxy forwarded it for 127.0.0.1
    answers = {path: request(port, "GET", path, **forwarded) for path in (V1, *DOCS)}

    # Then /v1 and the docs refuse it: the proxy's client may be anywhere
    assert {path: code_of(answer) for path, answer in answers.items()} == dict.fromkeys(
        (V1, *DOCS), (403, "api_token_required"))
    assert "X-Forwarded-For" in answers[V1].json()["error"]["message"]
    # and readiness tells it the states, not the reasons
    ready = request(port, "GET", "/readyz", **forwarded)
    assert "errors" not in ready.json()


def test_a_loopback_request_naming_another_host_is_refused(
        behind_any_proxy: str, configure: Configure) -> None:
    port = behind_any_proxy
    before = request(port, "GET", V1).json()["items"]

    # When a page that rebound its own name to 127.0.0.1 reads /v1, the docs, or creates
    # a webhook endpoint
    for host in ("rebound.example", f"rebound.example:{port}", f"127.0.0.1.rebound.example:{port}",
                 "localhost.", "localhost:http", ""):
        for method, path in (("GET", V1), ("POST", V1), *(("GET", path) for path in DOCS)):
            answer = request(port, method, path, Host=host)
            # Then 403 host_not_allowed, saying what to set
            assert code_of(answer) == (403, "host_not_allowed"), (host, method, path)
            assert "ALLOWED_HOSTS" in answer.json()["error"]["message"]
    # and nothing was created
    assert request(port, "GET", V1).json()["items"] == before
    # (liveness answers any Host)
    assert request(port, "GET", "/healthz", Host="rebound.example").status_code == 200

    # When the request names this machine as a local client does, at any port, then it
    # gets in
    for host in ("localhost", f"localhost:{port}", f"LOCALHOST:{port}", f"127.0.0.1:{port}",
                 "[::1]", f"[::1]:{port}"):
        assert request(port, "GET", V1, Host=host).status_code == 200, host

    # When ALLOWED_HOSTS names the host, then it gets in too; other names still do not
    configure(ALLOWED_HOSTS="herald.internal, 10.0.0.5")
    assert request(port, "GET", V1, Host=f"herald.internal:{port}").status_code == 200
    assert request(port, "GET", "/docs", Host="10.0.0.5").status_code == 200
    assert code_of(request(port, "GET", V1, Host="rebound.example")) == (
        403, "host_not_allowed")

    # When HERALD_OPEN_API opens /v1 to every client on purpose, then to every Host too
    configure(HERALD_OPEN_API="1")
    assert request(port, "GET", V1, Host="rebound.example").status_code == 200


def test_the_docs_follow_the_v1_door_while_api_token_is_unset(configure: Configure) -> None:
    remote = TestClient(create_app(), base_url="http://127.0.0.1", client=("192.0.2.1", 50000))
    # Given API_TOKEN unset, a client on another host is refused the schema and its pages
    for path in DOCS:
        assert code_of(remote.get(path)) == (403, "api_token_required"), path
    # When DOCS_PUBLIC opens them, or HERALD_OPEN_API opens /v1, then it reads them
    for opened in ({"DOCS_PUBLIC": "1"}, {"HERALD_OPEN_API": "1"}):
        configure(**opened)
        assert [remote.get(path).status_code for path in DOCS] == [200, 200, 200], opened


def test_metrics_asks_for_metrics_token_once_it_is_set(configure: Configure) -> None:
    # Given METRICS_TOKEN set (and API_TOKEN, another token)
    configure(METRICS_TOKEN="scrape-token", API_TOKEN="api-token")
    client = TestClient(create_app())
    with serve_worker_health(0, host="127.0.0.1") as worker:
        for get in (client.get,
                    lambda path, **kw: httpx.get(f"http://127.0.0.1:{worker.port}{path}",
                                                 timeout=5, **kw)):
            # When /metrics is scraped without it, or with another token
            for headers in ({}, {"Authorization": "Bearer api-token"},
                            {"Authorization": "scrape-token"}):
                refused = get("/metrics", headers=headers)
                # Then 401, naming the scheme, and no metrics
                assert refused.status_code == 401, headers
                assert refused.headers["WWW-Authenticate"] == "Bearer"
                assert refused.json()["error"]["code"] == "unauthorized"
            # When with it, then the Prometheus text
            scraped = get("/metrics", headers={"Authorization": "bearer scrape-token"})
            assert scraped.status_code == 200 and "# TYPE python_info gauge" in scraped.text


def test_allowed_hosts_takes_names_and_addresses_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLOWED_HOSTS", " Herald.Internal ,10.0.0.5,[FD00::1], fd00::2 ")
    assert load_settings().allowed_host_names == {"herald.internal", "10.0.0.5", "[fd00::1]",
                                                  "[fd00::2]"}
    for bad in ("herald.internal:8000", "https://herald.internal", "*", "*.example.com",
                "herald.internal/x"):
        monkeypatch.setenv("ALLOWED_HOSTS", f"localhost,{bad}")
        with pytest.raises(SettingsError, match="ALLOWED_HOSTS") as refused:
            load_settings()
        assert repr(bad) in str(refused.value)


# -- the worker health server -------------------------------------------------------------

def half_sent(port: int) -> socket.socket:
    """A connection that sent the start of a request and nothing more."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    connection.sendall(b"GET /healthz HTTP/1.1\r\nHo")
    connection.setblocking(False)
    return connection


def closed_by_server(connection: socket.socket) -> bool:
    """True once the server closed ``connection`` (it reads end of file, or a reset)."""
    try:
        return connection.recv(4096) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_the_worker_health_server_drops_half_sent_requests_and_answers_probes() -> None:
    with serve_worker_health(0, host="127.0.0.1") as server:
        # Given more half-sent requests than the server holds connections, and one client
        # that trickles a byte of its request at a time
        stalled = [half_sent(server.port) for _ in range(MAX_CONNECTIONS + 8)]
        trickler = half_sent(server.port)
        closed: set[socket.socket] = set()

        def count_closed() -> int:
            closed.update(c for c in [*stalled, trickler] if c not in closed
                          and closed_by_server(c))
            return len(closed)

        # Then the oldest beyond the cap are closed at once, not queued
        wait_for(lambda: count_closed() >= 8, timeout=2, what="connections over the cap")

        # And a probe is still answered, at once
        started = time.monotonic()
        probe = httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=2)
        assert probe.json() == {"status": "ok"} and time.monotonic() - started < 2

        # And each half-sent request, the trickling one included, is closed by the
        # server once its deadline has passed
        def trickle_and_count() -> bool:
            if trickler not in closed:
                with contextlib.suppress(OSError):  # closed: the next count says so
                    trickler.send(b"x")
            return count_closed() == len(stalled) + 1

        wait_for(trickle_and_count, timeout=REQUEST_TIMEOUT_S + 3, every=0.5,
                 what="the server to close every half-sent request")
        for connection in [*stalled, trickler]:
            connection.close()


def test_a_connection_over_the_cap_while_each_is_answered_gets_a_503_at_once(
        configure: Configure) -> None:
    # Given a worker whose own queues check holds every readiness answer until released
    held, release = [0], threading.Event()
    lock = threading.Lock()

    def queues_check() -> str:
        with lock:
            held[0] += 1
        release.wait(timeout=REQUEST_TIMEOUT_S)
        return "ok"

    configure()
    with serve_worker_health(0, host="127.0.0.1", queues=queues_check) as server:
        try:
            # and as many readiness requests being answered as the server holds connections
            asked = []
            for _ in range(MAX_CONNECTIONS):
                connection = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                connection.sendall(b"GET /readyz HTTP/1.0\r\n\r\n")
                asked.append(connection)
            wait_for(lambda: held[0] == MAX_CONNECTIONS, timeout=REQUEST_TIMEOUT_S - 1,
                     what="every readiness request read and being answered")

            # When one more client connects, then it is told 503 at once, not queued
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as probe:
                answer = probe.recv(4096)
            assert answer.startswith(b"HTTP/1.0 503 ") and b'"code": "busy"' in answer
        finally:
            release.set()

        # And once those are answered, a probe is answered again
        for connection in asked:
            connection.recv(4096)  # the answer's start, or end of file
            connection.close()
        probe_answer = httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
        assert probe_answer.json() == {"status": "ok"}
