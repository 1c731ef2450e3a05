"""The eSIMHub plugin (providers/esim_http.py) against a local server speaking its API."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from herald.settings import Settings
from providers.esim import (
    AmbiguousEsimError,
    EsimError,
    EsimProvider,
    InvalidWebhook,
    IssueRequest,
    OutOfStock,
    ProviderOrderStatus,
    TerminalEsimError,
    TransientEsimError,
    esim_providers,
)
from providers.esim_http import EsimhubProvider, EsimhubUnconfirmed
from tests.support.providers.fake_esimhub import FakeEsimhub, FakeProduct, sign_webhook
from tests.support.services import find_free_port

API_KEY = "ehub_test_key"
SECRET = "whsec_test"
PRODUCTS = {
    "eu-5gb": FakeProduct(name="Europe 5 GB, 30 days", price="12.50"),
    "us-1gb-slow": FakeProduct(name="USA 1 GB, 7 days", price="4.00", ready_after_polls=2),
    "jp-10gb": FakeProduct(name="Japan 10 GB", price="20.00", stock=0),
    "kyc-20gb": FakeProduct(name="Saudi 20 GB", price="25.00", verification=True),
    "never-ready": FakeProduct(name="Slow", price="1.00", ready_after_polls=1000),
}


@pytest.fixture
def hub() -> Iterator[FakeEsimhub]:
    products = {pid: FakeProduct(**vars(p)) for pid, p in PRODUCTS.items()}
    with FakeEsimhub(api_key=API_KEY, products=products) as fake:
        yield fake
        fake.release()


def plugin(hub: FakeEsimhub | None, **overrides: Any) -> EsimhubProvider:
    fields = {"esimhub_base_url": hub.url if hub else f"http://127.0.0.1:{find_free_port()}",
              "esimhub_api_key": API_KEY, "esimhub_webhook_secret": SECRET,
              "esimhub_poll_s": 2.0, "esimhub_timeout_s": 5.0}
    return EsimhubProvider(Settings(**{**fields, **overrides}))


def order(order_id: str = "ord-1", product: str = "eu-5gb", **more: Any) -> IssueRequest:
    return IssueRequest(order_id=order_id, product_id=product,
                        idempotency_key=more.pop("key", f"key-{order_id}"), **more)


def ignore(_reference: str) -> None:
    pass


# -- issue ---------------------------------------------------------------------------------
def test_an_issue_returns_the_profile_and_a_repeat_of_its_key_charges_once(
        hub: FakeEsimhub) -> None:
    provider = plugin(hub)
    first = provider.issue(order(), on_reference=ignore)
    assert first.status is ProviderOrderStatus.ISSUED
    assert first.profile is not None and first.profile.smdp_address == "smdp.esimhub.test"
    [create] = [r for r in hub.requests if r.method == "POST"]
    assert create.path == "/v1/orders"
    assert create.headers["idempotency-key"] == "key-ord-1"
    assert create.headers["authorization"] == f"Bearer {API_KEY}"
    assert create.json() == {"product_id": "eu-5gb", "client_reference": "ord-1"}
    # When the same order is issued again (a retry after a lost answer)
    again = provider.issue(order(), on_reference=ignore)
    # Then eSIMHub answers with the first order: one charge
    assert again.provider_order_ref == first.provider_order_ref
    assert again.profile == first.profile
    assert hub.charges == ["ord-1"]
    assert provider.supports_idempotency_keys


def test_the_reference_is_reported_before_the_profile_is_awaited(hub: FakeEsimhub) -> None:
    reported: list[tuple[str, int]] = []
    result = plugin(hub).issue(order(product="us-1gb-slow"), on_reference=lambda ref: (
        reported.append((ref, hub.looks(ref)))))
    # Then the reference came while the order had not been looked at yet
    [(reference, looks_then)] = reported
    assert looks_then == 0
    # and the plugin waited for the profile
    assert result.status is ProviderOrderStatus.ISSUED and result.profile is not None
    assert result.provider_order_ref == reference
    assert hub.looks(reference) == 2


def test_a_profile_not_ready_in_the_poll_window_is_processing(hub: FakeEsimhub) -> None:
    references: list[str] = []
    result = plugin(hub, esimhub_poll_s=0.5).issue(order(product="never-ready"),
                                                   on_reference=references.append)
    assert result.status is ProviderOrderStatus.PROCESSING
    assert result.provider_order_ref == references[0] and result.profile is None


def test_a_product_that_needs_verification_is_pending_with_its_url(hub: FakeEsimhub) -> None:
    result = plugin(hub).issue(order(product="kyc-20gb"), on_reference=ignore)
    assert result.status is ProviderOrderStatus.PENDING_VERIFICATION
    assert result.verification_url == (
        f"https://verify.esimhub.test/{result.provider_order_ref}")


# -- reconcile -----------------------------------------------------------------------------
def test_reconcile_finds_an_order_by_reference_or_by_our_order_id(hub: FakeEsimhub) -> None:
    provider = plugin(hub)
    issued = provider.issue(order("ord-7"), on_reference=ignore)
    by_ref = provider.reconcile(IssueRequest(order_id="ord-7", product_id="eu-5gb",
                                             provider_order_ref=issued.provider_order_ref))
    by_id = provider.reconcile(IssueRequest(order_id="ord-7", product_id="eu-5gb"))
    for found in (by_ref, by_id):
        assert found.status is ProviderOrderStatus.ISSUED
        assert (found.provider_order_ref, found.profile) == (issued.provider_order_ref,
                                                             issued.profile)
    # and a reconcile never charges
    assert hub.charges == ["ord-7"]


def test_reconcile_of_an_order_eSIMHub_never_got_is_not_found(hub: FakeEsimhub) -> None:
    provider = plugin(hub)
    unknown_ref = provider.reconcile(IssueRequest(order_id="ord-8", product_id="eu-5gb",
                                                  provider_order_ref="ehub_missing"))
    unknown_id = provider.reconcile(IssueRequest(order_id="ord-8", product_id="eu-5gb"))
    assert unknown_ref.status is ProviderOrderStatus.NOT_FOUND
    assert unknown_id.status is ProviderOrderStatus.NOT_FOUND
    assert hub.charges == []


# -- classification ------------------------------------------------------------------------
@pytest.mark.parametrize("status", [500, 503, 429])
def test_an_outage_or_rate_limit_is_transient_and_charges_nothing(
        hub: FakeEsimhub, status: int) -> None:
    hub.fail_next(status)
    with pytest.raises(TransientEsimError, match=str(status)):
        plugin(hub).issue(order(), on_reference=ignore)
    assert hub.charges == []


def test_a_refused_connection_is_transient(hub: FakeEsimhub) -> None:
    with pytest.raises(TransientEsimError, match="unreachable"):
        plugin(None).issue(order(), on_reference=ignore)


def test_out_of_stock_is_out_of_stock(hub: FakeEsimhub) -> None:
    with pytest.raises(OutOfStock) as raised:
        plugin(hub).issue(order(product="jp-10gb"), on_reference=ignore)
    assert raised.value.code == "out_of_stock"
    assert hub.charges == []


@pytest.mark.parametrize(("overrides", "product", "code"), [
    ({}, "no-such-product", "product_not_found"),
    ({"esimhub_api_key": "wrong"}, "eu-5gb", "unauthorized"),
    ({"esimhub_api_key": ""}, "eu-5gb", "not_configured"),
])
def test_other_refusals_are_terminal_with_the_providers_code(
        hub: FakeEsimhub, overrides: dict[str, str], product: str, code: str) -> None:
    with pytest.raises(TerminalEsimError) as raised:
        plugin(hub, **overrides).issue(order(product=product), on_reference=ignore)
    assert raised.value.code == code
    assert hub.charges == []


def test_a_timeout_after_sending_is_unclassified_and_reconcile_finds_the_order(
        hub: FakeEsimhub) -> None:
    provider = plugin(hub, esimhub_timeout_s=0.3)
    references: list[str] = []
    # Given eSIMHub takes the order but its answer does not come in time
    hub.hold_next_create()
    with pytest.raises(EsimhubUnconfirmed) as raised:
        provider.issue(order("ord-9"), on_reference=references.append)
    hub.release()
    # Then the failure is unclassified (the job keeps the order in flight)
    assert not isinstance(raised.value, EsimError)
    assert references == [] and hub.charges == ["ord-9"]
    # and a reconcile by our order id finds the order eSIMHub took
    found = provider.reconcile(IssueRequest(order_id="ord-9", product_id="eu-5gb"))
    assert found.status is ProviderOrderStatus.ISSUED
    # and issuing again with the same key still charges once
    provider.issue(order("ord-9"), on_reference=references.append)
    assert references == [found.provider_order_ref] and hub.charges == ["ord-9"]


def test_a_2xx_without_a_reference_is_unclassified(hub: FakeEsimhub) -> None:
    hub.answer_next(201, {"order": "accepted"})
    with pytest.raises(EsimhubUnconfirmed):
        plugin(hub).issue(order(), on_reference=ignore)


def test_an_unknown_order_status_is_ambiguous_with_its_reference(hub: FakeEsimhub) -> None:
    hub.answer_next(201, {"reference": "ehub_odd", "status": "under_review"})
    with pytest.raises(AmbiguousEsimError) as raised:
        plugin(hub).issue(order(), on_reference=ignore)
    assert raised.value.provider_order_ref == "ehub_odd"


# -- catalog, health, registry -------------------------------------------------------------
def test_the_catalog_lists_eSIMHubs_products_with_decimal_prices(hub: FakeEsimhub) -> None:
    products = {p.id: p for p in plugin(hub).catalog()}
    assert set(products) == set(PRODUCTS)
    assert (products["eu-5gb"].price, products["eu-5gb"].currency) == (Decimal("12.50"), "USD")


def test_health_follows_eSIMHubs_status_and_reachability(hub: FakeEsimhub) -> None:
    assert plugin(hub).health().available
    hub.status = "down"
    down = plugin(hub).health()
    assert not down.available and down.detail == "Issuing is paused"
    assert not plugin(None).health().available


def test_the_registry_builds_it_when_enabled(hub: FakeEsimhub) -> None:
    settings = Settings(esim_providers="mock,esimhub", esimhub_base_url=hub.url,
                        esimhub_api_key=API_KEY)
    built = esim_providers.get("esimhub", settings)
    assert isinstance(built, EsimhubProvider) and isinstance(built, EsimProvider)
    with pytest.raises(KeyError):
        esim_providers.get("esimhub", Settings(esim_providers="mock"))


# -- webhooks ------------------------------------------------------------------------------
BODY = json.dumps({"reference": "ehub_1", "status": "issued",
                   "client_reference": "ord-1"}).encode()


def test_a_signed_webhook_is_read() -> None:
    event = plugin(None).verify_webhook(BODY, sign_webhook(SECRET, BODY))
    assert (event.provider_order_ref, event.status) == ("ehub_1", "issued")


def test_a_webhook_signed_during_a_secret_rotation_is_read() -> None:
    headers = sign_webhook(SECRET, BODY)
    old = sign_webhook("whsec_old", BODY)["X-Esimhub-Signature"].split(",")[1]
    headers["X-Esimhub-Signature"] = headers["X-Esimhub-Signature"] + "," + old
    assert plugin(None).verify_webhook(BODY, headers).provider_order_ref == "ehub_1"


# the headers are made when the test runs, not when it is collected: a signature "6
# minutes ahead" made at collection is no longer ahead by the time a long suite gets here
@pytest.mark.parametrize(("case", "headers", "settings"), [
    ("wrong secret", lambda: sign_webhook("whsec_other", BODY), {}),
    ("body changed after signing",
     lambda: sign_webhook(SECRET, BODY.replace(b"issued", b"failed")), {}),
    ("signed 6 minutes ago (a replay)",
     lambda: sign_webhook(SECRET, BODY, time.time() - 360), {}),
    ("signed 6 minutes ahead", lambda: sign_webhook(SECRET, BODY, time.time() + 360), {}),
    ("no signature", dict, {}),
    ("malformed signature", lambda: {"X-Esimhub-Signature": "sha256=abc"}, {}),
    ("no secret configured", lambda: sign_webhook(SECRET, BODY),
     {"esimhub_webhook_secret": ""}),
])
def test_a_webhook_that_does_not_verify_is_refused(
        case: str, headers: Callable[[], dict[str, str]], settings: dict[str, str]) -> None:
    with pytest.raises(InvalidWebhook):
        plugin(None, **settings).verify_webhook(BODY, headers())


def test_a_webhook_signed_within_the_tolerance_is_read() -> None:
    headers = sign_webhook(SECRET, BODY, time.time() - 240)
    assert plugin(None).verify_webhook(BODY, headers).status == "issued"


def test_a_signed_webhook_that_is_not_an_order_event_is_refused() -> None:
    body = b'{"hello": "world"}'
    with pytest.raises(InvalidWebhook, match="not an eSIMHub order event"):
        plugin(None).verify_webhook(body, sign_webhook(SECRET, body))
