"""``Idempotency-Key`` on the creating routes, as a client that retries sees it: the same
key and body answer the first answer again and do nothing; another body is 422; a key
still running is 409, also under real concurrency on PostgreSQL; a 5xx is not kept; keys
are per token and expire after 24 hours.

Against the app on PostgreSQL + Redis (the ``pipeline`` fixture)."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, text
from sqlmodel import select

from actors.idempotency import expire_idempotency_keys
from herald import db, settings
from herald.queue import queue
from herald.web import create_app
from herald.web.idempotency import IDEMPOTENT_ROUTES
from models.base import utcnow
from models.idempotency import IdempotencyKey
from models.notifications import Account, Delivery, Notification
from tests.support.idempotency import client_without_keys

ACCOUNT = {"email": "amal@example.com", "phone": "+966501234567"}


@pytest.fixture
def client(pipeline: None) -> Iterator[TestClient]:
    """The app on the pipeline's database, with no idempotency key kept yet."""
    with client_without_keys() as test_client:
        yield test_client


def count(model: Any) -> int:
    with db.session() as session:
        return int(session.exec(select(func.count()).select_from(model)).one())


def keyed(key: str, token: str | None = None) -> dict[str, str]:
    headers = {"Idempotency-Key": key}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def queued(channel: str) -> int:
    """Jobs of a channel's queue, whatever their state."""
    return sum(queue(f"notification-{channel}").counts().values())


# -- replay -----------------------------------------------------------------------------------
def test_a_retried_account_is_the_first_answer_again_and_creates_nothing(
        client: TestClient) -> None:
    # Given an account created with a key
    first = client.post("/v1/accounts", json=ACCOUNT, headers=keyed("create-amal"))
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers

    # When the client retries the same request with the same key
    again = client.post("/v1/accounts", json=ACCOUNT, headers=keyed("create-amal"))

    # Then it gets the first answer, byte for byte, marked as replayed
    assert again.status_code == 201
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-type"] == first.headers["content-type"]
    # and there is still one account
    assert count(Account) == 1


def test_a_retried_event_makes_one_notification_and_queues_its_jobs_once(
        client: TestClient) -> None:
    account = client.post("/v1/accounts", json=ACCOUNT).json()["id"]
    event = {"type": "account.welcome", "account_id": account, "occurrence": "welcome-1"}

    first = client.post("/v1/events", json=event, headers=keyed("evt-1"))
    after_first = (count(Delivery), [queued(channel) for channel in ("email", "sms")])
    again = client.post("/v1/events", json=event, headers=keyed("evt-1"))

    # the retry is answered 202 like the first (not the 200 of a repeated occurrence)
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    # and nothing more was written or queued
    assert count(Notification) == 1
    assert after_first[0] >= 1 and sum(after_first[1]) >= 1
    assert (count(Delivery), [queued(channel) for channel in ("email", "sms")]) == after_first


def test_a_refused_request_is_replayed_as_refused(client: TestClient) -> None:
    # A 4xx is an answer like any other: the retry gets it again, without running
    body = {"type": "account.welcome", "account_id": "nobody", "occurrence": "x"}
    first = client.post("/v1/events", json=body, headers=keyed("refused"))
    assert first.status_code == 404
    again = client.post("/v1/events", json=body, headers=keyed("refused"))
    assert (again.status_code, again.content) == (404, first.content)
    assert again.headers["idempotent-replayed"] == "true"


def test_the_same_json_with_other_whitespace_or_key_order_is_the_same_request(
        client: TestClient) -> None:
    # Given an account created with a key, its JSON written compactly
    first = client.post("/v1/accounts", content=b'{"email":"amal@example.com",'
                        b'"phone":"+966501234567"}',
                        headers={**keyed("reordered"), "Content-Type": "application/json"})
    assert first.status_code == 201, first.text

    # When the client retries with the same JSON, keys swapped and spaced out
    again = client.post("/v1/accounts", content=b'{\n  "phone" : "+966501234567",\n'
                        b'  "email": "amal@example.com"\n}\n',
                        headers={**keyed("reordered"),
                                 "Content-Type": "application/json; charset=utf-8"})

    # Then it is the same request: the first answer again, and one account
    assert again.status_code == 201, again.text
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert count(Account) == 1


def test_a_key_kept_with_the_bodys_bytes_is_replayed_to_the_same_bytes(
        client: TestClient) -> None:
    # Given a key whose fingerprint is of the body's exact bytes (as keys claimed by
    # earlier versions of herald hold, until they expire)
    body = b'{"phone": "+966501234567", "email": "amal@example.com"}'
    headers = {**keyed("kept-by-bytes"), "Content-Type": "application/json"}
    first = client.post("/v1/accounts", content=body, headers=headers)
    assert first.status_code == 201, first.text
    digest = hashlib.sha256()
    for part in (b"POST", b"/v1/accounts", b"", body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    with db.get_engine().begin() as connection:
        connection.execute(text("UPDATE idempotency_keys SET fingerprint = :f"),
                           {"f": digest.hexdigest()})

    # When the client retries with the same bytes, then with the same JSON spaced out
    again = client.post("/v1/accounts", content=body, headers=headers)
    respaced = client.post("/v1/accounts", content=body.replace(b": ", b":"),
                           headers=headers)

    # Then the byte-identical retry is replayed; the other is the same JSON, but the key
    # knows only the bytes: refused as another request, never run
    assert (again.status_code, again.content) == (201, first.content)
    assert again.headers["idempotent-replayed"] == "true"
    assert respaced.status_code == 422
    assert respaced.json()["error"]["code"] == "idempotency_key_reused"
    assert count(Account) == 1


def test_a_request_without_the_header_keeps_nothing(client: TestClient) -> None:
    for _ in range(2):
        assert client.post("/v1/accounts", json=ACCOUNT).status_code == 201
    assert count(Account) == 2
    assert count(IdempotencyKey) == 0


# -- refusals ---------------------------------------------------------------------------------
def test_the_same_key_for_another_body_or_route_is_422_and_runs_nothing(
        client: TestClient) -> None:
    assert client.post("/v1/accounts", json=ACCOUNT,
                       headers=keyed("k-1")).status_code == 201

    other_body = client.post("/v1/accounts", json={**ACCOUNT, "email": "b@example.com"},
                             headers=keyed("k-1"))
    other_route = client.post("/v1/batches", json={}, headers=keyed("k-1"))
    # the same characters, but a body the route does not read as JSON
    other_type = client.post(
        "/v1/accounts", content=b'{"email":"amal@example.com","phone":"+966501234567"}',
        headers={**keyed("k-1"), "Content-Type": "text/plain"})

    for response in (other_body, other_route, other_type):
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "idempotency_key_reused"
        assert "idempotent-replayed" not in response.headers
    assert count(Account) == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there", "caf\u00e9"])
def test_a_key_that_is_not_1_to_255_printable_ascii_is_422(client: TestClient,
                                                           key: str) -> None:
    response = client.post("/v1/accounts", json=ACCOUNT,
                           headers=[("Idempotency-Key", key.encode("utf-8"))])  # type: ignore[arg-type]
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_idempotency_key"
    assert count(Account) == 0
    assert count(IdempotencyKey) == 0


def test_a_key_of_255_printable_characters_is_taken(client: TestClient) -> None:
    key = "".join(chr(32 + n % 95) for n in range(255))
    assert client.post("/v1/accounts", json=ACCOUNT, headers=keyed(key)).status_code == 201
    again = client.post("/v1/accounts", json=ACCOUNT, headers=keyed(key))
    assert again.headers["idempotent-replayed"] == "true"


# -- concurrency ------------------------------------------------------------------------------
async def _post_together(requests: list[tuple[str, dict[str, Any], dict[str, str]]],
                         ) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=create_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://herald",
                                 timeout=30) as client:
        return list(await asyncio.gather(*(client.post(path, json=body, headers=headers)
                                           for path, body, headers in requests)))


def test_a_retry_while_the_first_still_runs_is_409_and_runs_nothing(
        client: TestClient) -> None:
    # Given the first request stuck on PostgreSQL: another transaction holds a lock on
    # the accounts table, so its INSERT waits
    with db.get_engine().connect() as blocker:
        blocker.execute(text("LOCK TABLE accounts IN EXCLUSIVE MODE"))

        async def scenario() -> tuple[httpx.Response, list[httpx.Response]]:
            transport = httpx.ASGITransport(app=create_app())
            async with httpx.AsyncClient(transport=transport, base_url="http://herald",
                                         timeout=30) as http:
                first = asyncio.create_task(
                    http.post("/v1/accounts", json=ACCOUNT, headers=keyed("slow")))
                # wait until its claim is committed (the row is there, with no answer)
                for _ in range(500):
                    if count(IdempotencyKey):
                        break
                    await asyncio.sleep(0.01)
                # When the client retries, several times, while it runs
                retries = await asyncio.gather(*(
                    http.post("/v1/accounts", json=ACCOUNT, headers=keyed("slow"))
                    for _ in range(5)))
                blocker.rollback()  # then the first may finish
                return await first, retries

        first, retries = asyncio.run(scenario())

    # Then every retry was 409 and ran nothing; the first finished as usual
    assert [r.status_code for r in retries] == [409] * 5
    assert {r.json()["error"]["code"] for r in retries} == {"idempotency_key_in_use"}
    assert retries[0].headers["retry-after"] == "1"
    assert first.status_code == 201, first.text
    assert count(Account) == 1
    # and once it has, a retry gets its answer
    again = client.post("/v1/accounts", json=ACCOUNT, headers=keyed("slow"))
    assert (again.status_code, again.content) == (201, first.content)


def test_many_concurrent_requests_with_one_key_run_once(client: TestClient) -> None:
    # Twenty requests with the same key at once, each on its own connection: the claim is
    # one INSERT, so exactly one of them runs; the others get its answer or a 409
    responses = asyncio.run(_post_together(
        [("/v1/accounts", ACCOUNT, keyed("race"))] * 20))
    statuses = sorted(r.status_code for r in responses)
    assert set(statuses) <= {201, 409}, statuses
    originals = [r for r in responses
                 if r.status_code == 201 and "idempotent-replayed" not in r.headers]
    assert len(originals) == 1
    assert {r.content for r in responses if r.status_code == 201} == {originals[0].content}
    assert count(Account) == 1


# -- 5xx --------------------------------------------------------------------------------------
def test_a_5xx_answer_is_not_kept_and_the_retry_runs(client: TestClient) -> None:
    # Given a request that fails on the server: the table it writes is away
    with db.get_engine().begin() as connection:
        connection.execute(text("ALTER TABLE accounts RENAME TO accounts_away"))
    try:
        failed = client.post("/v1/accounts", json=ACCOUNT, headers=keyed("flaky"))
    finally:
        with db.get_engine().begin() as connection:
            connection.execute(text("ALTER TABLE accounts_away RENAME TO accounts"))
        db.reset_engine()  # no pooled connection remembers the missing table
    assert failed.status_code >= 500
    assert count(IdempotencyKey) == 0  # the claim was released, nothing kept

    # When the client retries with the same key once the server is well
    retried = client.post("/v1/accounts", json=ACCOUNT, headers=keyed("flaky"))

    # Then the request runs, and its answer is the one kept
    assert retried.status_code == 201, retried.text
    assert "idempotent-replayed" not in retried.headers
    assert count(Account) == 1
    replay = client.post("/v1/accounts", json=ACCOUNT, headers=keyed("flaky"))
    assert (replay.status_code, replay.content) == (201, retried.content)


# -- scope ------------------------------------------------------------------------------------
def test_keys_are_per_token_and_only_a_hash_of_it_is_stored(client: TestClient) -> None:
    # API_TOKEN unset: any bearer token is let in, each with keys of its own
    first = client.post("/v1/accounts", json=ACCOUNT, headers=keyed("shared", "token-a"))
    second = client.post("/v1/accounts", json={**ACCOUNT, "email": "b@example.com"},
                         headers=keyed("shared", "token-b"))
    anonymous = client.post("/v1/accounts", json={**ACCOUNT, "email": "c@example.com"},
                            headers=keyed("shared"))
    assert [r.status_code for r in (first, second, anonymous)] == [201, 201, 201]
    assert "idempotent-replayed" not in second.headers
    assert count(Account) == 3
    with db.session() as session:
        scopes = set(session.exec(select(IdempotencyKey.scope)))
    assert hashlib.sha256(b"token-a").hexdigest() in scopes
    with db.get_engine().connect() as connection:
        dump = str(connection.execute(text("SELECT * FROM idempotency_keys")).all())
    assert "token-a" not in dump and "token-b" not in dump


def test_a_refused_token_claims_no_key(client: TestClient,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_TOKEN", "the-right-token")
    settings.reset_settings()
    wrong = client.post("/v1/accounts", json=ACCOUNT, headers=keyed("k", "wrong-token"))
    assert wrong.status_code == 401
    assert count(IdempotencyKey) == 0
    right = client.post("/v1/accounts", json=ACCOUNT, headers=keyed("k", "the-right-token"))
    assert right.status_code == 201
    assert count(IdempotencyKey) == 1


# -- expiry -----------------------------------------------------------------------------------
def test_the_sweep_expires_keys_after_24_hours(client: TestClient) -> None:
    assert client.post("/v1/accounts", json=ACCOUNT,
                       headers=keyed("old")).status_code == 201

    # a day less an hour later the key is kept; a day and an hour later it is gone
    assert expire_idempotency_keys(now=utcnow() + timedelta(hours=23)) == 0
    assert count(IdempotencyKey) == 1
    assert expire_idempotency_keys(now=utcnow() + timedelta(hours=25)) == 1
    assert count(IdempotencyKey) == 0

    # and the key is free again: a new request with it runs
    renewed = client.post("/v1/accounts", json={**ACCOUNT, "email": "b@example.com"},
                          headers=keyed("old"))
    assert renewed.status_code == 201
    assert "idempotent-replayed" not in renewed.headers
    assert count(Account) == 2


def test_herald_sweep_runs_the_expiry_sweep(client: TestClient) -> None:
    done = subprocess.run([sys.executable, "-m", "herald.cli", "sweep", "idempotency-keys"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "idempotency-keys: 0"


# -- OpenAPI ----------------------------------------------------------------------------------
def test_openapi_lists_the_header_on_each_creating_route_and_no_other(
        client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            names = {p["name"] for p in operation.get("parameters", [])}
            expected = method == "post" and path in IDEMPOTENT_ROUTES
            assert ("Idempotency-Key" in names) == expected, (method, path)
    assert all("post" in paths.get(path, {}) for path in IDEMPOTENT_ROUTES)


# -- the embedded default ---------------------------------------------------------------------
def test_keys_work_on_the_embedded_sqlite_database(fresh_sqlite: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", fresh_sqlite)
    monkeypatch.setenv("HERALD_OPEN_API", "1")  # TestClient's client is no loopback address
    settings.reset_settings()
    db.reset_engine()
    try:
        db.migrate()
        with TestClient(create_app()) as sqlite_client:
            first = sqlite_client.post("/v1/accounts", json=ACCOUNT, headers=keyed("lite"))
            again = sqlite_client.post("/v1/accounts", json=ACCOUNT, headers=keyed("lite"))
            other = sqlite_client.post("/v1/accounts", json={**ACCOUNT, "email": "b@example.com"},
                                       headers=keyed("lite"))
        assert first.status_code == 201, first.text
        assert (again.status_code, again.content) == (201, first.content)
        assert again.headers["idempotent-replayed"] == "true"
        assert other.json()["error"]["code"] == "idempotency_key_reused"
        assert count(Account) == 1
        assert expire_idempotency_keys(now=utcnow() + timedelta(hours=25)) == 1
    finally:
        db.reset_engine()
        settings.reset_settings()
