"""No request, however malformed, yields a 5xx.

Fuzzed from the OpenAPI schema: schemathesis generates requests for every operation, both
valid and invalid against the schema (wrong types, missing fields, unknown methods), and
sends them to the app on PostgreSQL + Redis. And behind the signatures: each provider's
callback parser gets correctly signed bodies that are anything but what it expects."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from twilio.request_validator import RequestValidator

from herald.settings import reset_settings
from herald.web import create_app
from providers.esim import esim_providers
from tests.support.callbacks import (
    CALLBACKS,
    TWILIO_TOKEN,
    hmac_signed,
    provider_secrets,
    twilio_callback,
)
from tests.support.providers.fake_esimhub import sign_webhook

# schemathesis reads the schema over ASGI from a client that is not on loopback: the docs
# are public (DOCS_PUBLIC) for that one read
with pytest.MonkeyPatch.context() as docs_public:
    docs_public.setenv("DOCS_PUBLIC", "1")
    reset_settings()
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app())
reset_settings()
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                                max_examples=60)


@schema.parametrize()
# no deadline: a shared CI machine's pauses are not the app's; no example database on disk
@settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case: Any, pipeline: None) -> None:
    # every error leaves in the app's one shape
    assert_client_error_at_most(case.call())


# -- signed callbacks: the parsers behind the signature ------------------------------------
# An unsigned request stops at the signature (401), so the schema fuzz above never reaches
# a provider's body parser. These bodies are signed with the configured secrets: each
# provider's real receipt with its fields kept, dropped or replaced by any JSON value (at
# every depth), or any JSON at all, or any bytes.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8)


def mutated(value: Any) -> st.SearchStrategy[Any]:
    """``value`` with any of its fields (at any depth) kept, dropped or replaced."""
    if isinstance(value, dict):
        return st.fixed_dictionaries({}, optional={key: mutated(inner)
                                                   for key, inner in value.items()})
    return st.just(value) | JSON


def assert_client_error_at_most(response: Any) -> None:
    assert response.status_code < 500, f"{response.status_code}: {response.text[:300]}"
    if response.status_code >= 400:
        assert set(response.json()["error"]) >= {"code", "message"}


@pytest.mark.parametrize("provider", ["mock", "taqnyat", "onesignal"])
def test_no_signed_json_callback_gets_a_server_error(
        provider: str, pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    provider_secrets(monkeypatch)
    client = TestClient(create_app())
    receipt = json.loads(CALLBACKS[provider]()[1])

    @given(body=mutated(receipt).map(lambda v: json.dumps(v).encode())
           | JSON.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=200))
    @settings(max_examples=80, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(body: bytes) -> None:
        assert_client_error_at_most(client.post(f"/v1/callbacks/{provider}", content=body,
                                                headers={**hmac_signed(provider, body),
                                                         "Content-Type": "application/json"}))

    check()


def test_no_signed_twilio_callback_gets_a_server_error(
        pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    provider_secrets(monkeypatch)
    client = TestClient(create_app())
    url = "http://testserver/v1/callbacks/twilio"
    receipt = dict(parse_qsl(twilio_callback()[1].decode()))
    text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)

    @given(params=st.fixed_dictionaries({}, optional={key: st.just(value) | text
                                                      for key, value in receipt.items()})
           | st.dictionaries(text, text, max_size=4))
    @settings(max_examples=80, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(params: dict[str, str]) -> None:
        signature = RequestValidator(TWILIO_TOKEN).compute_signature(url, params)
        assert_client_error_at_most(client.post(
            "/v1/callbacks/twilio", content=urlencode(params).encode(),
            headers={"X-Twilio-Signature": signature,
                     "Content-Type": "application/x-www-form-urlencoded"}))

    check()


# -- bulk events: any element, next to good ones ---------------------------------------------
# The schema fuzz above rarely names an account that exists, so it seldom gets past the
# account check. Here each request mixes events of a real account, kept as they are or
# with any field dropped or replaced, with anything at all: never a 5xx, and every element
# answered on its own, in order.
def test_no_bulk_request_gets_a_server_error(pipeline: None) -> None:
    client = TestClient(create_app())
    account_id = client.post("/v1/accounts", json={"email": "amal@example.com"}).json()["id"]
    receipt = {"type": "payment.receipt", "account_id": account_id, "occurrence": "o-1",
               "data": {"amount": "49.00", "currency": "SAR", "order_id": "ORD-1"},
               "urgency": "urgent", "transactional": None, "channels": ["email"]}
    welcome = {"type": "account.welcome", "account_id": account_id, "occurrence": "o-2"}
    # and any text in the fields that reach the database as text, the ones PostgreSQL
    # cannot store (NUL, a lone surrogate) often
    text = st.text(max_size=8) | st.text(st.sampled_from("a\x00\ud800é\\"), max_size=4)
    texts = st.fixed_dictionaries({"type": st.just("account.welcome"),
                                   "account_id": st.just(account_id) | text,
                                   "occurrence": text})
    element = mutated(receipt) | mutated(welcome) | texts | JSON

    @given(events=st.lists(element, min_size=1, max_size=8))
    @settings(max_examples=80, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(events: list[Any]) -> None:
        # encoded here: Python's json writes an infinity as JSON cannot (``Infinity``),
        # and the app's parser reads it back, so the app must cope with one
        response = client.post("/v1/events/bulk", content=json.dumps({"events": events}),
                               headers={"Content-Type": "application/json"})
        assert_client_error_at_most(response)
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert len(results) == len(events)
        for result in results:
            assert result["status"] in (200, 202, 404, 422), result
            assert ("notification" in result) == (result["status"] < 300), result

    check()


# -- signed eSIM store webhooks ----------------------------------------------------------
#: Each eSIM plugin's webhook, as it signs it, and a body of the shape it sends.
STORE_WEBHOOKS = {
    "mock": (lambda body: hmac_signed("mock", body),
             {"provider_order_ref": "mock-ref-1", "status": "verified"}),
    "esimhub": (lambda body: sign_webhook(ESIMHUB_SECRET, body),
                {"reference": "hub-ref-1", "status": "issued", "event": "order.updated"}),
}
ESIMHUB_SECRET = "fuzz-esimhub-secret"


@pytest.mark.parametrize("provider", sorted(STORE_WEBHOOKS))
def test_no_signed_store_webhook_gets_a_server_error(
        provider: str, pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the store on with both plugins, each webhook signed with its secret
    client = store_on_with_both_plugins(monkeypatch)
    sign, webhook = STORE_WEBHOOKS[provider]

    @given(body=mutated(webhook).map(lambda v: json.dumps(v).encode())
           | JSON.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=200))
    @settings(max_examples=80, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(body: bytes) -> None:
        # Then whatever the signed body holds, the answer is never a server error
        assert_client_error_at_most(client.post(
            f"/v1/store/webhooks/{provider}", content=body,
            headers={**sign(body), "Content-Type": "application/json"}))

    check()
    esim_providers.reset()


# -- crafted signature headers on every signed route ---------------------------------------
#: Every signed route and the headers its signature is read from.
SIGNED_ROUTES = {
    "/v1/callbacks/mock": ("X-Herald-Signature",),
    "/v1/callbacks/taqnyat": ("X-Taqnyat-Signature",),
    "/v1/callbacks/onesignal": ("X-OneSignal-Signature",),
    "/v1/callbacks/twilio": ("X-Twilio-Signature", "X-Twilio-Webhooks-Signature-Settings"),
    "/v1/store/webhooks/mock": ("X-Herald-Signature",),
    "/v1/store/webhooks/esimhub": ("X-Esimhub-Signature",),
}
# Header values are bytes on the wire; Starlette reads them as Latin-1, so "²" (0xB2) or
# "é" arrive as those characters.
LATIN1 = st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=30)
DIGITS = st.text(st.sampled_from("0123456789²³¹"), min_size=1, max_size=12)
#: ``name=value`` lists as the signature schemes write them, with any names and values.
SCHEMED = st.lists(st.tuples(st.sampled_from(["t", "v1", "sha256", "algorithm", "key", ""]),
                             LATIN1 | DIGITS), max_size=4).map(
    lambda parts: ",".join(f"{name}={value}" for name, value in parts))
#: eSIMHub's header with a fresh timestamp, so the comparison itself is reached.
FRESH = LATIN1.map(lambda digest: f"t={int(time.time())},v1={digest}")
HEADER_VALUE = (LATIN1 | SCHEMED | FRESH | DIGITS.map(lambda t: f"t={t},v1=ab")
                | st.just("sha256=") | LATIN1.map(lambda value: f"sha256={value}"))
HOST = st.none() | st.sampled_from(["testserver:99999", "testserver:x", "[::1", "a:b:c",
                                    "testserver:0"]) | LATIN1


@pytest.mark.parametrize("path", sorted(SIGNED_ROUTES))
def test_no_crafted_signature_header_gets_a_server_error(
        path: str, pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given every signed route live: each provider's secret set, the store on
    provider_secrets(monkeypatch)
    client = store_on_with_both_plugins(monkeypatch)
    names = SIGNED_ROUTES[path]

    @given(values=st.fixed_dictionaries({}, optional={name: HEADER_VALUE for name in names}),
           host=HOST, body=st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()))
    @example(values={names[0]: "t=²,v1=ab"}, host=None, body=b"{}")
    @example(values={names[0]: f"t={int(time.time())},v1=é"}, host=None, body=b"{}")
    @example(values={names[0]: "t=" + "9" * 5000 + ",v1=ab"}, host=None, body=b"{}")
    @example(values={names[0]: "sha256=é"}, host="testserver:99999", body=b"{}")
    @settings(max_examples=120, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(values: dict[str, str], host: str | None, body: bytes) -> None:
        # When a request comes with crafted signature headers (and Host)
        headers = {name: value.encode("latin-1") for name, value in values.items()}
        if host is not None:
            headers["Host"] = host.encode("latin-1")
        response = client.post(path, content=body, headers=headers)
        # Then it is refused (or accepted) with a 4xx (2xx), never a server error
        assert_client_error_at_most(response)

    check()
    esim_providers.reset()


def store_on_with_both_plugins(monkeypatch: pytest.MonkeyPatch) -> TestClient:
    """The app with the store on and both eSIM plugins (mock, esimhub), each webhook's
    secret set."""
    for name, value in {"FEATURE_ESIM_STORE": "true", "ESIM_PROVIDERS": "mock,esimhub",
                        "ESIMHUB_WEBHOOK_SECRET": ESIMHUB_SECRET}.items():
        monkeypatch.setenv(name, value)
    reset_settings()
    esim_providers.reset()
    return TestClient(create_app())
