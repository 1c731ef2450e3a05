"""What the ``/v1`` API refuses, and that a refusal changes nothing: no row, no job.

Against the app on PostgreSQL + Redis (the ``pipeline`` fixture), through its HTTP
interface; every refusal is a 4xx in the one error shape, never a 5xx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import func
from sqlmodel import select

from actors import orchestration
from actors.locales import SUPPORTED_LOCALES
from herald import settings
from herald.db import session as db_session
from herald.queue import queue, running_worker
from herald.web import create_app
from models.notifications import Account, Delivery, Notification
from providers.mock import MockProvider
from tests.pipeline.conftest import NOTIFICATION_QUEUES
from tests.support.waiting import wait_for

RECEIPT = {"amount": "49.00", "currency": "SAR", "order_id": "ORD-1"}
PROMO = {"headline": "Spring", "code": "SPRING10"}


@pytest.fixture
def client(pipeline: None) -> Iterator[TestClient]:
    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


def configure(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings.reset_settings()


def new_account(client: TestClient, **fields: Any) -> str:
    response = client.post("/v1/accounts", json={"email": "amal@example.com",
                                                 "phone": "+966501234567", **fields})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def post_event(client: TestClient, account_id: str, type_: str = "account.welcome",
               **fields: Any) -> Response:
    return client.post("/v1/events", json={"type": type_, "account_id": account_id,
                                           "occurrence": "o-1", **fields})


def rows(model: type) -> int:
    with db_session() as session:
        return int(session.exec(select(func.count()).select_from(model)).one())


def jobs_in_notification_queues() -> int:
    return sum(sum(queue(name).counts().values()) for name in NOTIFICATION_QUEUES)


def refused(response: Response, status: int = 422) -> dict[str, str]:
    """The error of a refused request, checked to be in the API's one shape."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str)
    return dict(error)


def assert_nothing_sent() -> None:
    assert (rows(Notification), rows(Delivery), jobs_in_notification_queues()) == (0, 0, 0)


# -- storage limits -------------------------------------------------------------------------
def test_a_nul_character_is_a_422_and_stores_nothing(client: TestClient) -> None:
    # In a body, NUL is a control character, refused before anything runs
    event = client.post("/v1/events", json={"type": "account.welcome", "account_id": "a\u0000b",
                                            "occurrence": "signup"})
    account = client.post("/v1/accounts", json={"email": "a\u0000@example.com"})
    assert refused(event)["code"] == refused(account)["code"] == "control_character"
    # In a path, it reaches PostgreSQL, which refuses NUL in text: a client error, not a 500
    patched = client.patch("/v1/accounts/a%00b", json={"active": False})
    assert refused(patched)["code"] == "invalid_value"
    assert rows(Account) == 0
    assert rows(Notification) == 0


# -- accounts -------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["active", "marketing_opt_out", "locale"])
def test_null_for_a_field_that_cannot_be_null_is_a_422_and_changes_nothing(
        client: TestClient, field: str) -> None:
    # Given an account opted out of marketing
    account_id = new_account(client, marketing_opt_out=True, locale="ar")
    # When a client sets a field that has no "none" value to null
    error = refused(client.patch(f"/v1/accounts/{account_id}", json={field: None}))
    # Then 422 names the field, and the account is as it was
    assert error["code"] == "validation_error" and field in error["message"]
    with db_session() as session:
        account = session.get(Account, account_id)
        assert account is not None
        assert (account.active, account.marketing_opt_out, account.locale) == (True, True, "ar")


def test_null_removes_an_address_and_the_schema_offers_null_only_there(
        client: TestClient) -> None:
    # Given an account with an email
    account_id = new_account(client)
    # When its email is set to null, then it is removed
    patched = client.patch(f"/v1/accounts/{account_id}", json={"email": None})
    assert patched.status_code == 200 and patched.json()["email"] is None
    # And the published schema lets null through for the addresses and the quiet-hours
    # fields only (null: UTC, never held)
    schema = client.get("/openapi.json").json()["components"]["schemas"]["AccountPatch"]
    nullable = {name for name, field in schema["properties"].items()
                if "null" in json.dumps(field)}
    assert nullable == {"email", "phone", "push_subscription_id", "timezone", "quiet_hours"}


@pytest.mark.parametrize("email", ["x<a@b.co>,y", "a@b.co,c@d.co", "Amal <a@b.co>",
                                   "a@b.co;bcc:c@d.co", "a b@c.co", "a@b"])
def test_an_account_email_is_one_bare_address_as_a_supplier_email_is(
        client: TestClient, email: str) -> None:
    # Given an account
    account_id = new_account(client)
    # When an account is created, or changed, with more (or less) than one bare address
    created = refused(client.post("/v1/accounts", json={"email": email}))
    patched = refused(client.patch(f"/v1/accounts/{account_id}", json={"email": email}))
    # Then both are refused naming the email, as a supplier's email is, and nothing changed
    assert created["code"] == patched["code"] == "invalid_account"
    assert created["message"].startswith("email: ") and patched["message"].startswith("email: ")
    supplier = refused(client.post("/v1/suppliers", json={"name": "Costco", "type": "costco",
                                                          "email": email}))
    assert supplier["message"].endswith(created["message"].removeprefix("email: "))
    assert rows(Account) == 1
    with db_session() as session:
        account = session.get(Account, account_id)
        assert account is not None and account.email == "amal@example.com"


def test_accounts_are_keyed_by_id_so_two_may_share_an_email(client: TestClient) -> None:
    # When two accounts are created with one email (a shared family or company mailbox)
    first = new_account(client, email="family@example.com")
    second = new_account(client, email="family@example.com")
    # Then both exist, each with its own id
    assert first != second
    assert rows(Account) == 2


@pytest.mark.parametrize("locale", ["fr", "ar-SA", "EN", ""])
def test_a_locale_without_templates_is_a_422(client: TestClient, locale: str) -> None:
    # When an account asks for a locale herald has no templates in
    error = refused(client.post("/v1/accounts", json={"email": "a@example.com",
                                                      "locale": locale}))
    # Then it is refused, and no account was made
    assert "locale" in error["message"]
    assert rows(Account) == 0
    # and changing an account to one is refused too
    account_id = new_account(client, locale="ar")
    refused(client.patch(f"/v1/accounts/{account_id}", json={"locale": locale}))
    with db_session() as session:
        assert session.get(Account, account_id).locale == "ar"  # type: ignore[union-attr]
    # and so is a Python caller's (the demo, a script)
    with pytest.raises(ValueError, match="locale: must be one of en, ar"):
        orchestration.create_account(email="b@example.com", locale=locale)
    assert rows(Account) == 1


def test_the_schema_lists_the_supported_locales(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("AccountIn", "AccountPatch"):
        assert schemas[name]["properties"]["locale"]["enum"] == list(SUPPORTED_LOCALES)


# -- event data -----------------------------------------------------------------------------
# Raw JSON: NaN, Infinity and 1e999 are what a careless client's serializer writes
BAD_DATA = {
    "an amount that is a list": ("payment.receipt", '{**, "amount": [1, 2]}', "amount"),
    "an amount that is NaN": ("payment.receipt", '{**, "amount": NaN}', "amount"),
    "an amount that is Infinity": ("payment.receipt", '{**, "amount": Infinity}', "amount"),
    "an amount past any float": ("payment.receipt", '{**, "amount": 1e999}', "amount"),
    "an amount that is true": ("payment.receipt", '{**, "amount": true}', "amount"),
    "a currency that is no code": ("payment.receipt", '{**, "currency": "S A R"}', "currency"),
    "a currency that is no ISO 4217 code": ("payment.receipt", '{**, "currency": "XYZ"}',
                                            "currency"),
    "a headline over 200 characters": ("promo.offer", '{**, "headline": "' + "x" * 201 + '"}',
                                       "headline"),
    "a blank code": ("promo.offer", '{**, "code": "  "}', "code"),
    "a code that is a number": ("promo.offer", '{**, "code": 10}', "code"),
    "an unknown key": ("promo.offer", '{**, "headlin": "Spring"}', "headlin"),
}


def with_base(type_: str, template: str) -> str:
    base = json.dumps(RECEIPT if type_ == "payment.receipt" else PROMO)[1:-1]
    return template.replace("**", base)


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_event_data_that_does_not_fit_its_type_is_a_422_and_sends_nothing(
        client: TestClient, case: str) -> None:
    type_, data, key = BAD_DATA[case]
    account_id = new_account(client)
    body = (f'{{"type": "{type_}", "account_id": "{account_id}", "occurrence": "o-1", '
            f'"data": {with_base(type_, data)}}}')
    # When an event arrives whose data does not fit its type's model
    response = client.post("/v1/events", content=body,
                           headers={"content-type": "application/json"})
    # Then 422 names the key at fault, and no notification, delivery or job exists
    error = refused(response)
    assert error["code"] == "invalid_event" and f"data: {type_} event data: {key}" in \
        error["message"]
    assert_nothing_sent()


def test_a_5_mb_headline_is_refused_by_the_body_limit_and_by_its_type(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    account_id = new_account(client)
    huge = {**PROMO, "headline": "x" * 5_000_000}
    # When a 5 MB headline is posted, then the body limit refuses it before any route runs
    error = refused(post_event(client, account_id, "promo.offer", data=huge), 413)
    assert error["code"] == "payload_too_large" and "MAX_BODY_BYTES" in error["message"]
    # And with the limit raised past it, the type's model refuses it
    configure(monkeypatch, MAX_BODY_BYTES=str(16 * 1024 * 1024))
    error = refused(post_event(client, account_id, "promo.offer", data=huge))
    assert "headline" in error["message"]
    assert_nothing_sent()


def test_data_that_fits_its_type_is_accepted(client: TestClient) -> None:
    # Given data at the edge of each limit: a float amount, a 200-character headline
    account_id = new_account(client)
    receipt = post_event(client, account_id, "payment.receipt",
                         data={**RECEIPT, "amount": 12.5, "description": None})
    promo = post_event(client, account_id, "promo.offer",
                       data={**PROMO, "headline": "x" * 200, "url": "https://e.com/s"})
    # Then both are accepted
    assert (receipt.status_code, promo.status_code) == (202, 202)


# -- request bodies -------------------------------------------------------------------------
def test_every_route_refuses_a_body_over_the_limit_declared_or_chunked(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    configure(monkeypatch, MAX_BODY_BYTES="2048")
    account_id = new_account(client)
    big = json.dumps({"type": "account.welcome", "account_ids": ["x" * 30] * 100}).encode()

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit counts as it reads
        yield from (big[i:i + 500] for i in range(0, len(big), 500))

    # When bodies over 2 KiB go to every kind of route (callbacks included)
    for path in ("/v1/batches", "/v1/events", "/v1/accounts", "/v1/callbacks/mock",
                 f"/v1/accounts/{account_id}", "/healthz"):
        method = "PATCH" if path.startswith("/v1/accounts/") else "POST"
        for content in (big, chunked()):
            response = client.request(method, path, content=content,
                                      headers={"content-type": "application/json"})
            # Then each is a 413 in the error shape
            assert refused(response, 413)["code"] == "payload_too_large", path
    # And a chunked body under the limit goes through
    small = json.dumps({"email": "b@example.com"}).encode()
    assert client.post("/v1/accounts", content=iter([small[:10], small[10:]]),
                       headers={"content-type": "application/json"}).status_code == 201
    assert rows(Account) == 2


def test_a_receipt_in_a_currency_herald_does_not_know_says_what_to_send(
        client: TestClient) -> None:
    account_id = new_account(client)
    # When a receipt names a currency that is no ISO 4217 code
    error = refused(post_event(client, account_id, "payment.receipt",
                               data={**RECEIPT, "currency": "XYZ"}))
    # Then the 422 names the field and says what to send; nothing is sent
    assert error["code"] == "invalid_event"
    assert error["message"] == (
        'data: payment.receipt event data: currency: not an ISO 4217 currency code herald '
        'knows; send the three-letter code, like "SAR", "EUR" or "USD"')
    assert_nothing_sent()
    # and a known code, in any case, is taken
    assert post_event(client, account_id, "payment.receipt",
                      data={**RECEIPT, "currency": "jpy"}).status_code == 202


@pytest.mark.parametrize(("content_type", "body"), [
    ("application/x-www-form-urlencoded", b"email=amal%40example.com&phone=%2B966501234567"),
    ("text/plain", b'{"email": "amal@example.com", "phone": "+966501234567"}'),
    ("text/plain; charset=utf-8", b'{"email": "amal@example.com"}'),
])
def test_a_body_not_sent_as_json_is_a_415_saying_to_send_json(
        client: TestClient, content_type: str, body: bytes) -> None:
    # When an account is posted as a form, or as JSON labelled text/plain
    response = client.post("/v1/accounts", content=body,
                           headers={"content-type": content_type})
    # Then 415 says to send JSON with its content type, naming the one sent
    error = refused(response, 415)
    assert error["code"] == "unsupported_media_type"
    sent = content_type.partition(";")[0]
    assert error["message"] == (
        "the body must be JSON, sent with Content-Type: application/json (this request's "
        f"Content-Type is {sent})")
    # and nothing was written
    assert rows(Account) == 0


def test_malformed_json_says_at_which_byte(client: TestClient) -> None:
    # Given a body that stops being JSON after a two-byte character (é)
    body = '{"email": "é@example.com",, }'.encode()
    # When it is posted
    error = refused(client.post("/v1/accounts", content=body,
                                headers={"content-type": "application/json"}))
    # Then the message names the byte where it broke, in plain words
    at = body.index(b",,") + 1
    assert error["message"].startswith(f"invalid JSON at byte {at}: ")
    assert rows(Account) == 0


# -- category -------------------------------------------------------------------------------
def test_a_marketing_type_cannot_be_sent_as_transactional(client: TestClient) -> None:
    # Given an account that opted out of marketing
    account_id = new_account(client, marketing_opt_out=True)
    # When a promotion is posted as transactional (which would bypass the opt-out)
    error = refused(post_event(client, account_id, "promo.offer", data=PROMO,
                               transactional=True))
    # Then 422 says why, and nothing is sent
    assert error["code"] == "invalid_event"
    assert "promo.offer is a marketing type" in error["message"]
    assert_nothing_sent()
    # while restating its own category is fine
    assert post_event(client, account_id, "promo.offer", data=PROMO,
                      transactional=False).status_code == 202


def test_a_transactional_type_sent_as_marketing_respects_the_opt_out(
        client: TestClient) -> None:
    # Given one account opted out of marketing and one that did not
    opted_out = new_account(client, marketing_opt_out=True)
    opted_in = new_account(client, email="sara@example.com")
    # When a welcome (transactional by its type) is posted as marketing to both
    sent = [post_event(client, account_id, transactional=False, channels=["email"])
            for account_id in (opted_out, opted_in)]
    assert [response.status_code for response in sent] == [202, 202]
    assert {response.json()["transactional"] for response in sent} == {False}
    with running_worker(["notification-email"]):
        outcomes = wait_for(lambda: settled_outcomes(client, sent), timeout=30)
    # Then the opted-out account gets nothing, the other gets its email
    assert outcomes == [("suppressed", "opted_out"), ("sent", None)]
    assert [send["to"] for send in MockProvider.sends()] == ["sara@example.com"]


def settled_outcomes(client: TestClient, sent: list[Response]) -> list[tuple[str, Any]] | None:
    outcomes = []
    for response in sent:
        delivery = client.get(f"/v1/deliveries/{response.json()['deliveries'][0]['id']}").json()
        if delivery["outcome"] in ("queued", "sending"):
            return None
        outcomes.append((delivery["outcome"], delivery["reason"]))
    return outcomes


# -- channels -------------------------------------------------------------------------------
def test_asking_only_for_channels_that_are_off_is_a_422_and_keeps_the_occurrence(
        client: TestClient) -> None:
    # Given push is off (FEATURE_PUSH unset)
    account_id = new_account(client)
    # When an event asks for push only
    error = refused(post_event(client, account_id, channels=["push"]))
    # Then 422 names the switch, and nothing is persisted or enqueued
    assert "FEATURE_PUSH" in error["message"]
    assert_nothing_sent()
    # And the same occurrence with an available channel is a new notification with its delivery
    again = post_event(client, account_id, channels=["email"])
    assert again.status_code == 202
    assert [d["channel"] for d in again.json()["deliveries"]] == ["email"]
    assert queue("notification-email").counts()["waiting"] == 1


def test_a_mix_leaves_the_channels_that_are_off_out(client: TestClient) -> None:
    account_id = new_account(client)
    # When an event asks for email and push while push is off
    mixed = post_event(client, account_id, channels=["email", "push"])
    # Then it is accepted with the email delivery only, as a type's default channels are
    assert mixed.status_code == 202
    assert [d["channel"] for d in mixed.json()["deliveries"]] == ["email"]


def test_push_alone_is_accepted_when_push_is_on(client: TestClient,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    configure(monkeypatch, FEATURE_PUSH="true")
    account_id = new_account(client, push_subscription_id="sub-1")
    response = post_event(client, account_id, channels=["push"])
    assert response.status_code == 202
    assert [d["channel"] for d in response.json()["deliveries"]] == ["push"]


@pytest.mark.parametrize(("path", "code"), [
    ("/v1/notifications/no-such-id", "notification_not_found"),
    ("/v1/deliveries/no-such-id", "delivery_not_found"),
    ("/v1/batches/no-such-id", "batch_not_found"),
])
def test_an_unknown_id_is_a_404_naming_what_was_not_found(client: TestClient, path: str,
                                                          code: str) -> None:
    response = client.get(path)

    assert response.status_code == 404
    assert response.json()["error"] == {"code": code, "message": f"no {code.split('_')[0]} "
                                                                 "with id no-such-id"}
