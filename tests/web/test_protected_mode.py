"""Protected mode over real HTTP: ``herald web`` bound to every address with no API_TOKEN
answers ``/v1`` to loopback clients only; a client on another host (a network namespace
this test makes, joined by a veth pair) gets 403 ``api_token_required`` unless
HERALD_OPEN_API opens ``/v1`` or it sends the API_TOKEN that is set."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.support import netns
from tests.support.web_process import StartWeb, web_processes

pytestmark = pytest.mark.skipif(netns.unavailable() is not None,
                                reason=netns.unavailable() or "")

#: ``(status, JSON body)`` of one request.
Answer = tuple[int, dict[str, object]]


@pytest.fixture(scope="module")
def foreign() -> Iterator[netns.ForeignHost]:
    """Another host, as far as herald can tell: a namespace of this test's own."""
    with netns.foreign_host() as host:
        yield host


@pytest.fixture
def start_web(migrated_database: str, redis_url: str, tmp_path: Path) -> Iterator[StartWeb]:
    """``start_web(NAME=value, …)``: ``herald web --host 0.0.0.0`` with those settings on
    top of the test's database and Redis (API_TOKEN and HERALD_OPEN_API unset unless
    given); its port and log. Stopped at the end of the test."""
    with web_processes(tmp_path, "0.0.0.0", {
            "DATABASE_URL": migrated_database, "REDIS_URL": redis_url, "BROKER": "redis",
            "QUEUE_PREFIX": f"pm{uuid.uuid4().hex[:8]}", "WEB_CONCURRENCY": "1",
            "LOG_LEVEL": "INFO", "API_TOKEN": "", "HERALD_OPEN_API": ""}) as start:
        yield start


def local(method: str, port: int, path: str, body: object = None,
          token: str | None = None) -> Answer:
    """The request from this host, over loopback."""
    status, answer = netns.http_request(f"http://127.0.0.1:{port}{path}", method, body, token)
    return status, dict(answer)  # type: ignore[call-overload]


def remote(host: netns.ForeignHost, method: str, port: int, path: str, body: object = None,
           token: str | None = None) -> Answer:
    """The request from the namespace, to this host's address on the veth pair."""
    status, answer = host.request(f"http://{host.host_address}:{port}{path}", method, body,
                                  token)
    return status, dict(answer)  # type: ignore[call-overload]


def accounts_with(database_url: str, email: str) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT count(*) FROM accounts WHERE email = :e"),
                                          {"e": email}).scalar_one())
    finally:
        engine.dispose()


def test_without_a_token_v1_answers_loopback_only(
        foreign: netns.ForeignHost, start_web: StartWeb,
        migrated_database: str) -> None:
    # Given herald web on every address, API_TOKEN unset
    port, log = start_web()
    email = f"far-{uuid.uuid4().hex[:8]}@example.com"

    # When a client on another host creates an account
    status, body = remote(foreign, "POST", port, "/v1/accounts", {"email": email})

    # Then 403 api_token_required, saying what to set, and no account exists
    assert status == 403, body
    error = body["error"]
    assert isinstance(error, dict) and error["code"] == "api_token_required"
    assert "API_TOKEN" in error["message"] and "HERALD_OPEN_API=1" in error["message"]
    assert accounts_with(migrated_database, email) == 0
    # (the host is reachable: liveness answers it, and a provider's signed callback is
    # judged by its signature, not by where it comes from)
    assert remote(foreign, "GET", port, "/healthz")[0] == 200
    callback = remote(foreign, "POST", port, "/v1/callbacks/mock", {})
    assert callback[0] == 401, callback

    # When the same request comes from this machine, then it is served
    assert local("POST", port, "/v1/accounts", {"email": email})[0] == 201
    assert accounts_with(migrated_database, email) == 1
    # and the start said so
    assert "/v1 answers loopback clients only" in log.read_text()


def test_herald_open_api_opens_v1_on_purpose_with_a_warning(
        foreign: netns.ForeignHost, start_web: StartWeb,
        migrated_database: str) -> None:
    port, log = start_web(HERALD_OPEN_API="1")
    email = f"open-{uuid.uuid4().hex[:8]}@example.com"

    status, body = remote(foreign, "POST", port, "/v1/accounts", {"email": email})

    assert status == 201, body
    assert accounts_with(migrated_database, email) == 1
    warning = [line for line in log.read_text().splitlines() if "HERALD_OPEN_API" in line]
    assert warning and "WARNING" in warning[0], log.read_text()[-2000:]


def test_with_a_token_any_host_that_sends_it_gets_in(
        foreign: netns.ForeignHost, start_web: StartWeb,
        migrated_database: str) -> None:
    port, _ = start_web(API_TOKEN="far-token")
    email = f"token-{uuid.uuid4().hex[:8]}@example.com"

    without = remote(foreign, "POST", port, "/v1/accounts", {"email": email})
    with_token = remote(foreign, "POST", port, "/v1/accounts", {"email": email},
                        token="far-token")

    assert without[0] == 401 and with_token[0] == 201, (without, with_token)
    assert accounts_with(migrated_database, email) == 1
    # the token is asked of loopback clients too once it is set
    assert local("GET", port, "/v1/notifications/none")[0] == 401
