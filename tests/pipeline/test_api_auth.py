"""The ``/v1`` bearer token (API_TOKEN): who gets in, what a refusal says, and that it is
checked before the body is (against the app on PostgreSQL + Redis)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func
from sqlmodel import select

from herald import settings
from herald.db import session as db_session
from herald.web import create_app
from models.notifications import Account

TOKEN = "s3cret-token"
ACCOUNT = {"email": "amal@example.com"}


@pytest.fixture
def client(pipeline: None) -> Iterator[TestClient]:
    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def api_token(monkeypatch: pytest.MonkeyPatch, pipeline: None) -> None:
    monkeypatch.setenv("API_TOKEN", TOKEN)
    # a secret of its own: with API_TOKEN set, the public default hides the mock's routes
    monkeypatch.setenv("MOCK_CALLBACK_SECRET", "mock-secret-of-this-deployment")
    settings.reset_settings()


def accounts() -> int:
    with db_session() as session:
        return int(session.exec(select(func.count()).select_from(Account)).one())


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER  {TOKEN}"])
def test_the_right_token_gets_in_whatever_the_scheme_s_case(
        api_token: None, client: TestClient, header: str) -> None:
    # When a client sends the token with the scheme in any case (RFC 9110: case-insensitive)
    response = client.post("/v1/accounts", json=ACCOUNT, headers={"Authorization": header})
    # Then the request goes through
    assert response.status_code == 201, response.text
    assert accounts() == 1


@pytest.mark.parametrize("header", [None, TOKEN, "Bearer", "Bearer wrong", f"Basic {TOKEN}",
                                    f"Token {TOKEN}", f"Bearer {TOKEN}x"],
                         ids=["missing", "bare token", "scheme only", "wrong token", "basic",
                              "other scheme", "longer token"])
def test_anything_else_is_a_401_that_names_the_scheme(
        api_token: None, client: TestClient, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    # When a request comes without the right bearer token
    response = client.post("/v1/accounts", json=ACCOUNT, headers=headers)
    # Then 401 in the error shape, asking for a bearer token, and nothing is stored
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "unauthorized"
    assert accounts() == 0


def test_the_token_is_checked_before_the_body(api_token: None, client: TestClient) -> None:
    # When a caller without the token sends a body that breaks the schema, or is not JSON
    invalid = client.post("/v1/events", json={"type": 7, "data": "x"})
    not_json = client.post("/v1/batches", content=b"{nope",
                           headers={"content-type": "application/json"})
    # Then both are 401: the caller learns nothing about the schema
    assert (invalid.status_code, not_json.status_code) == (401, 401)
    assert "type" not in invalid.json()["error"]["message"]


def test_every_v1_route_but_callbacks_is_behind_the_token(api_token: None,
                                                          client: TestClient) -> None:
    for method, path in [("GET", "/v1/notifications/n"), ("GET", "/v1/deliveries/d"),
                         ("PATCH", "/v1/accounts/a"), ("GET", "/v1/batches/b"),
                         ("POST", "/v1/batches/b/cancel")]:
        assert client.request(method, path).status_code == 401, path
    # and with the token they are answered (here: not found)
    assert client.get("/v1/batches/b", headers={"Authorization": f"Bearer {TOKEN}"}
                      ).status_code == 404
    # callbacks are signed by their provider instead (no token; a bad signature is refused)
    callback = client.post("/v1/callbacks/mock", content=b"{}")
    assert callback.json()["error"]["code"] == "invalid_signature"


@pytest.fixture
def protected_mode(monkeypatch: pytest.MonkeyPatch, pipeline: None) -> None:
    """API_TOKEN and HERALD_OPEN_API unset (the pipeline fixture opens /v1 for its
    TestClients, whose client address is not a loopback one)."""
    monkeypatch.delenv("API_TOKEN", raising=False)
    monkeypatch.delenv("HERALD_OPEN_API", raising=False)
    settings.reset_settings()


@pytest.mark.parametrize("address", ["127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"])
def test_without_a_token_v1_answers_loopback_clients(protected_mode: None,
                                                     address: str) -> None:
    # (naming this machine as a loopback client does: Host 127.0.0.1)
    with TestClient(create_app(), base_url="http://127.0.0.1",
                    client=(address, 50000)) as local:
        assert local.post("/v1/accounts", json=ACCOUNT).status_code == 201
        # a header of any kind changes nothing then
        assert local.post("/v1/accounts", json=ACCOUNT,
                          headers={"Authorization": "Basic x"}).status_code == 201
    assert accounts() == 2


@pytest.mark.parametrize("address", ["10.0.0.7", "192.0.2.1", "::ffff:10.0.0.7", "2001:db8::1",
                                     "testclient", "localhost", ""])
def test_without_a_token_any_other_client_is_refused_before_the_body(
        protected_mode: None, address: str) -> None:
    with TestClient(create_app(), client=(address, 50000)) as remote:
        # When a client that is not on loopback calls /v1, with a body that breaks the schema
        response = remote.post("/v1/accounts", json=ACCOUNT)
        invalid = remote.post("/v1/events", json={"type": 7})
    # Then 403 api_token_required, saying what to set; nothing is stored or validated
    assert (response.status_code, invalid.status_code) == (403, 403)
    error = response.json()["error"]
    assert error["code"] == "api_token_required"
    assert "API_TOKEN" in error["message"] and "HERALD_OPEN_API=1" in error["message"]
    assert accounts() == 0


def test_herald_open_api_opens_v1_to_every_client(protected_mode: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERALD_OPEN_API", "1")
    settings.reset_settings()
    with TestClient(create_app(), client=("192.0.2.1", 50000)) as remote:
        assert remote.post("/v1/accounts", json=ACCOUNT).status_code == 201


def test_a_set_token_is_asked_of_loopback_clients_too(api_token: None) -> None:
    with TestClient(create_app(), client=("127.0.0.1", 50000)) as local:
        assert local.post("/v1/accounts", json=ACCOUNT).status_code == 401
    assert accounts() == 0
