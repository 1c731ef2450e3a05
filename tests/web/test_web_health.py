"""Health, readiness, metrics and error shapes of the web app and the worker health server,
against real PostgreSQL and Redis (and servers stopped for real when a test needs one down)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import text

from actors.queues import registry
from herald import db
from herald.health import check_readiness, serve_worker_health
from herald.queue import enqueue
from herald.settings import get_settings, reset_settings
from herald.web import create_app
from herald.web.errors import api_error
from tests.support.queue_app import close_queue_app, install_queue_app
from tests.support.services import find_free_port
from tests.support.waiting import wait_for

#: ``configure(NAME=value, …)``: see the fixture.
Configure = Callable[..., None]
#: Seconds /readyz may take with a dependency down (the check itself is bounded at 3 s).
READYZ_BOUND_S = 5.0


def closed_port() -> int:
    """A local TCP port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def configure(monkeypatch: pytest.MonkeyPatch) -> Iterator[Configure]:
    """``configure(NAME=value, …)`` sets the environment and drops cached settings/clients."""

    def apply(**env: str) -> None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        reset_settings()
        db.reset_engine()
        if get_settings().embedded_redis:
            close_queue_app()  # no test starts the embedded Redis
        else:
            install_queue_app()

    yield apply
    reset_settings()
    db.reset_engine()
    close_queue_app()


@pytest.fixture
def services_up(configure: Configure, database_url: str, redis_url: str) -> None:
    """PostgreSQL and Redis up; Redis is also the broker."""
    configure(DATABASE_URL=database_url, REDIS_URL=redis_url, BROKER="redis")


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


def timed_get(client: TestClient, path: str) -> tuple[int, dict[str, str], float]:
    started = time.monotonic()
    response = client.get(path)
    return response.status_code, response.json(), time.monotonic() - started


def test_healthz_answers_with_no_dependency_reachable(configure: Configure,
                                                      client: TestClient) -> None:
    # Given a database and a Redis that do not exist
    port = closed_port()
    configure(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/x",
              REDIS_URL=f"redis://127.0.0.1:{port}/0")

    # When liveness is asked, then it answers at once: no I/O
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_200_when_everything_is_up(services_up: None, client: TestClient) -> None:
    status, body, _ = timed_get(client, "/readyz")

    assert status == 200
    assert body == {"database": "ok", "redis": "ok", "broker": "ok"}


def test_readyz_names_redis_within_bound_when_redis_is_down(
        configure: Configure, database_url: str, tmp_path: Path, client: TestClient) -> None:
    # Given a Redis that ran and was then stopped
    from tests.support.services import start_redis

    redis_service = start_redis(tmp_path)
    configure(DATABASE_URL=database_url, REDIS_URL=redis_service.url, BROKER="redis")
    redis_service.stop()

    # When readiness is asked
    status, body, elapsed = timed_get(client, "/readyz")

    # Then it answers 503 in time and names Redis (the broker too: it is Redis)
    assert status == 503
    assert elapsed < READYZ_BOUND_S
    assert body["database"] == "ok"
    assert (body["redis"], body["broker"]) == ("down", "down")


def test_readyz_pings_every_redis_shard_and_names_the_one_that_is_down(
        configure: Configure, database_url: str, redis_url: str, redis6_url: str,
        tmp_path: Path, client: TestClient) -> None:
    # Given the fulfillment queues on a Redis of their own (REDIS_SHARDS), both up
    from tests.support.services import start_redis

    shard = start_redis(tmp_path)
    configure(DATABASE_URL=database_url, REDIS_URL=redis_url, BROKER="redis",
              REDIS_SHARDS=f"fulfillment={shard.url} payment,store-fulfillment")
    status, body, _ = timed_get(client, "/readyz")
    assert (status, body) == (200, {"database": "ok", "redis": "ok", "broker": "ok"})

    # When the shard's Redis stops (the default one still answers)
    shard.stop()
    status, body, elapsed = timed_get(client, "/readyz")

    # Then readiness is 503 in time, Redis down, and the reason (for those who may read it)
    # names the shard
    assert status == 503
    assert elapsed < READYZ_BOUND_S
    assert (body["database"], body["redis"], body["broker"]) == ("ok", "down", "down")
    assert check_readiness()["redis"].startswith("error: shard fulfillment: ")


def test_readyz_names_the_database_when_it_is_down(configure: Configure, redis_url: str,
                                                   client: TestClient) -> None:
    configure(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{closed_port()}/herald",
              REDIS_URL=redis_url, BROKER="redis")

    status, body, elapsed = timed_get(client, "/readyz")

    assert status == 503
    assert elapsed < READYZ_BOUND_S
    assert (body["database"], body["redis"]) == ("down", "ok")


def test_readyz_checks_a_real_rabbitmq_broker(configure: Configure, database_url: str,
                                              redis_url: str, rabbitmq_url: str,
                                              client: TestClient) -> None:
    configure(DATABASE_URL=database_url, REDIS_URL=redis_url, BROKER="rabbitmq",
              RABBITMQ_URL=rabbitmq_url)

    status, body, _ = timed_get(client, "/readyz")

    assert status == 200
    assert body == {"database": "ok", "redis": "ok", "broker": "ok"}


def test_readyz_names_a_rabbitmq_broker_that_is_down(configure: Configure, database_url: str,
                                                     redis_url: str, client: TestClient) -> None:
    configure(DATABASE_URL=database_url, REDIS_URL=redis_url, BROKER="rabbitmq",
              RABBITMQ_URL=f"amqp://guest:guest@127.0.0.1:{closed_port()}/%2F")

    status, body, elapsed = timed_get(client, "/readyz")

    assert status == 503
    assert elapsed < READYZ_BOUND_S
    assert (body["database"], body["redis"], body["broker"]) == ("ok", "ok", "down")


def test_readyz_tells_why_only_to_a_caller_with_the_token(configure: Configure,
                                                         redis_url: str) -> None:
    # Given a database that does not answer, and API_TOKEN set
    port = closed_port()
    configure(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/herald",
              REDIS_URL=redis_url, BROKER="redis", API_TOKEN="ready-token")
    client = TestClient(create_app())

    # When readiness is asked without the token, then the states only: no host, port or
    # driver text
    anonymous = client.get("/readyz")
    assert anonymous.status_code == 503
    assert anonymous.json() == {"database": "down", "redis": "ok", "broker": "ok"}
    assert str(port) not in anonymous.text and "127.0.0.1" not in anonymous.text
    # and with a wrong token, the same
    assert client.get("/readyz", headers={"Authorization": "Bearer nope"}).json() == \
        anonymous.json()

    # When the caller has the token, then the reason too
    told = client.get("/readyz", headers={"Authorization": "Bearer ready-token"}).json()
    assert told["database"] == "down" and set(told["errors"]) == {"database"}
    assert "OperationalError" in told["errors"]["database"]


def test_readyz_tells_why_to_loopback_callers_while_api_token_is_unset(
        configure: Configure, redis_url: str) -> None:
    configure(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{closed_port()}/herald",
              REDIS_URL=redis_url, BROKER="redis")

    local = TestClient(create_app(), base_url="http://127.0.0.1",
                       client=("127.0.0.1", 50000)).get("/readyz").json()
    remote = TestClient(create_app(), client=("192.0.2.1", 50000)).get("/readyz").json()

    assert set(local["errors"]) == {"database"}
    assert "errors" not in remote and remote["database"] == "down"


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/redoc"])
def test_the_docs_need_the_token_while_it_is_set(configure: Configure, path: str) -> None:
    # Given API_TOKEN set
    configure(API_TOKEN="docs-token")
    client = TestClient(create_app())
    # Then the schema and its pages need it
    refused = client.get(path)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    assert client.get(path, headers={"Authorization": "Bearer docs-token"}).status_code == 200
    # When DOCS_PUBLIC opens them, then anyone reads them
    configure(DOCS_PUBLIC="1")
    assert client.get(path).status_code == 200


def test_the_schema_is_served_to_a_loopback_client_while_api_token_is_unset() -> None:
    local = TestClient(create_app(), base_url="http://127.0.0.1", client=("127.0.0.1", 50000))
    document = local.get("/openapi.json").json()
    assert "/v1/accounts" in document["paths"]
    # the documentation routes are not operations of the API
    assert not {"/openapi.json", "/docs", "/redoc"} & document["paths"].keys()


def test_unknown_route_is_a_json_404(client: TestClient) -> None:
    response = client.get("/no/such/route")

    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert "/no/such/route" in error["message"]


def test_wrong_method_is_a_json_405(client: TestClient) -> None:
    response = client.post("/healthz")

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


class Widget(BaseModel):
    name: str
    size: int


def test_routers_get_json_errors_for_bad_input_raised_errors_and_database_outages(
        configure: Configure) -> None:
    # Given an extra router whose handlers count their calls
    calls: list[str] = []
    router = APIRouter()

    @router.post("/widgets")
    def make_widget(widget: Widget) -> dict[str, str]:
        calls.append(widget.name)
        return {"name": widget.name}

    @router.get("/widgets/{name}")
    def get_widget(name: str) -> dict[str, str]:
        raise api_error(409, "widget_busy", f"widget {name} is busy")

    @router.get("/rows")
    def rows() -> dict[str, int]:
        with db.session() as session:
            return {"one": session.execute(text("SELECT 1")).scalar_one()}

    configure(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{closed_port()}/herald")
    client = TestClient(create_app(extra_routers=[router]))

    # When a malformed body arrives, then 422 in the error shape and the handler never ran
    malformed = client.post("/widgets", json={"name": "a", "size": "big"})
    assert malformed.status_code == 422
    assert malformed.json()["error"]["code"] == "validation_error"
    assert "size" in malformed.json()["error"]["message"]
    not_json = client.post("/widgets", content=b"{nope",
                           headers={"content-type": "application/json"})
    assert not_json.status_code == 422
    assert calls == []

    # When a route raises api_error, then its code and message come through
    busy = client.get("/widgets/w1")
    assert busy.status_code == 409
    assert busy.json() == {"error": {"code": "widget_busy", "message": "widget w1 is busy"}}

    # When the database is down under a route, then 503 in the error shape
    down = client.get("/rows")
    assert down.status_code == 503
    assert down.json()["error"]["code"] == "unavailable"


def test_metrics_is_prometheus_text(client: TestClient) -> None:
    response = client.get("/metrics")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "# TYPE python_info gauge" in response.text


def test_openapi_lists_the_health_routes() -> None:
    paths = create_app().openapi()["paths"]

    assert {"/healthz", "/readyz", "/metrics"} <= paths.keys()


def http_get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=READYZ_BOUND_S) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def test_worker_health_server_answers_over_http(services_up: None) -> None:
    # Given a worker health server on a free port
    server = serve_worker_health(0)
    base = f"http://127.0.0.1:{server.port}"
    try:
        # Then liveness, readiness and metrics answer over real HTTP
        assert http_get(f"{base}/healthz")[::2] == (200, b'{"status": "ok"}')
        status, _, body = http_get(f"{base}/readyz")
        assert (status, json.loads(body)) == (200, {"database": "ok", "redis": "ok",
                                                    "broker": "ok"})
        status, content_type, body = http_get(f"{base}/metrics")
        assert status == 200 and content_type.startswith("text/plain")
        assert b"# TYPE python_info gauge" in body
        status, _, body = http_get(f"{base}/nope")
        assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
    finally:
        server.stop()

    # When it is stopped, then the port no longer answers
    with pytest.raises(urllib.error.URLError):
        http_get(f"{base}/healthz")


def test_worker_readyz_tells_why_only_to_a_caller_with_the_token(configure: Configure,
                                                                redis_url: str) -> None:
    # Given a worker health server whose database does not answer, and API_TOKEN set
    port = closed_port()
    configure(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/herald",
              REDIS_URL=redis_url, BROKER="redis", API_TOKEN="worker-token")
    with serve_worker_health(0, host="127.0.0.1") as server:
        url = f"http://127.0.0.1:{server.port}/readyz"
        # When readiness is asked without the token, then the states only
        status, _, body = http_get(url)
        assert (status, json.loads(body)) == (503, {"database": "down", "redis": "ok",
                                                    "broker": "ok"})
        assert str(port).encode() not in body
        # When with the token, then the reason too
        request = urllib.request.Request(url, headers={"Authorization": "Bearer worker-token"})
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(request, timeout=READYZ_BOUND_S)
        told = json.loads(not_ready.value.read())
    assert set(told["errors"]) == {"database"} and str(port) in told["errors"]["database"]


def test_readyz_answers_within_bound_when_every_dependency_hangs(configure: Configure,
                                                                 client: TestClient) -> None:
    # Given one TCP listener that accepts connections and never says a word
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        configure(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/herald",
                  REDIS_URL=f"redis://127.0.0.1:{port}/0", BROKER="rabbitmq",
                  RABBITMQ_URL=f"amqp://guest:guest@127.0.0.1:{port}/%2F")

        # When readiness is asked
        status, body, elapsed = timed_get(client, "/readyz")

    # Then it still answers in time, naming all three
    assert status == 503
    assert elapsed < READYZ_BOUND_S
    assert body == {"database": "down", "redis": "down", "broker": "down"}


def test_head_on_health_routes_answers_the_status_with_no_body(services_up: None,
                                                              client: TestClient) -> None:
    # When a load balancer probes with HEAD
    for path in ("/healthz", "/readyz"):
        response = client.head(path)
        # Then the status is the GET's, with no body
        assert (response.status_code, response.content) == (200, b""), path


def test_head_readyz_is_503_when_a_dependency_is_down(configure: Configure, redis_url: str,
                                                      client: TestClient) -> None:
    configure(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{closed_port()}/herald",
              REDIS_URL=redis_url, BROKER="redis")

    response = client.head("/readyz")

    assert (response.status_code, response.content) == (503, b"")


class Probe(BaseModel):
    n: int


#: A job function on a registry queue that nothing else in the tests uses.
probe = registry.actor(queue="supplier-dispatch", payload=Probe, name="t-web-metrics-probe")(
    lambda job: None)


@pytest.fixture
def web_process(configure: Configure, database_url: str, redis_url: str,
                tmp_path: Path) -> Iterator[str]:
    """``herald web`` in a process of its own on a free port (its base URL); it shares the
    test's database, Redis and a queue prefix of the test's own, and has never enqueued
    anything."""
    configure(DATABASE_URL=database_url, REDIS_URL=redis_url, BROKER="redis",
              QUEUE_PREFIX=f"web{time.monotonic_ns()}", LOG_LEVEL="WARNING")
    port = find_free_port()
    log = tmp_path / "web.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "herald.cli", "web", "--host",
                                    "127.0.0.1", "--port", str(port)], env=dict(os.environ),
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{base}/healthz") or process.poll() is not None,
                 timeout=30, what="herald web")
        assert process.poll() is None, log.read_text()[-2000:]
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return http_get(url)[0] == 200
    except OSError:
        return False


def test_the_web_process_serves_the_queue_counts_on_metrics(web_process: str) -> None:
    # Given jobs waiting and delayed on a registry queue, enqueued by another process
    for n in range(3):
        enqueue(probe, Probe(n=n))
    for n in range(2):
        enqueue(probe, Probe(n=n), delay=timedelta(hours=1))

    # When Prometheus scrapes the web process
    status, content_type, body = http_get(f"{web_process}/metrics")

    # Then its text has the queue counts by queue and state, as a worker's port has them
    assert status == 200 and content_type.startswith("text/plain")
    text = body.decode()
    assert 'queue_depth{queue="supplier-dispatch",state="waiting"} 3.0' in text
    assert 'queue_depth{queue="supplier-dispatch",state="delayed"} 2.0' in text
    assert 'queue_depth{queue="notification-email",state="waiting"} 0.0' in text
    assert 'queue_jobs_total{outcome="completed",queue="supplier-dispatch"} 0.0' in text


def test_the_web_process_answers_head_over_real_http(web_process: str) -> None:
    request = urllib.request.Request(f"{web_process}/healthz", method="HEAD")
    with urllib.request.urlopen(request, timeout=READYZ_BOUND_S) as response:
        assert (response.status, response.read()) == (200, b"")


def test_every_openapi_operation_has_an_id_of_its_own() -> None:
    # Given the app's OpenAPI document (client generators name methods by operation id)
    from herald.web import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # FastAPI warns of a duplicate id; fail on it
        document = create_app().openapi()
    # Then no two operations share an id (GET and HEAD of a probe included)
    ids = [operation["operationId"] for path in document["paths"].values()
           for operation in path.values()]
    assert len(ids) == len(set(ids))
    assert {"healthz_head", "readyz_head"} <= set(ids)
