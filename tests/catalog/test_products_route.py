"""``GET /v1/store/products`` on PostgreSQL: the synced catalog, in each product's own
currency or converted through the stored exchange rates, and a clear 422 for a bad or
unrated currency."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from fastapi.testclient import TestClient

from actors.catalog import sync_esim_products
from herald.db import session
from herald.web import create_app
from models.catalog import replace_rates
from tests.catalog.conftest import Store
from tests.support.catalog.plugins import product
from tests.support.catalog.steps import products


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    """The API over a catalog: alpha's three products (one dropped), beta's one in SAR,
    and US-dollar rates for EUR and SAR."""
    alpha = store.catalog("alpha", product("a-1", price="5.00"), product("a-2", price="1.00"),
                          product("a-gone"))
    store.catalog("beta", product("b-1", price="37.50", currency="SAR"))
    store.configure(ESIM_PROVIDERS="alpha,beta")
    sync_esim_products()
    alpha.products = alpha.products[:2]
    sync_esim_products()
    with session() as db:
        replace_rates(db, {"EUR": Decimal("0.925"), "SAR": Decimal("3.75")}, "test",
                      datetime(2026, 1, 1, tzinfo=UTC))
    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


def test_the_active_products_in_their_own_currency(client: TestClient) -> None:
    response = client.get("/v1/store/products")

    assert response.status_code == 200
    assert response.json() == {"products": [
        {"id": "a-1", "provider": "alpha", "name": "Product a-1", "price": "5.00",
         "currency": "USD"},
        {"id": "a-2", "provider": "alpha", "name": "Product a-2", "price": "1.00",
         "currency": "USD"},
        {"id": "b-1", "provider": "beta", "name": "Product b-1", "price": "37.50",
         "currency": "SAR"},
    ]}


def test_prices_converted_into_a_requested_currency(client: TestClient) -> None:
    response = client.get("/v1/store/products", params={"currency": "EUR"})

    # price / rate[from] * rate[to], rounded half-up to cents: 1.00 USD is 0.925 EUR → 0.93
    assert response.status_code == 200
    assert [(p["id"], p["price"], p["currency"]) for p in response.json()["products"]] == [
        ("a-1", "4.63", "EUR"), ("a-2", "0.93", "EUR"), ("b-1", "9.25", "EUR")]


def test_us_dollars_need_no_stored_rate(client: TestClient) -> None:
    response = client.get("/v1/store/products", params={"currency": "USD"})

    assert [p["price"] for p in response.json()["products"]] == ["5.00", "1.00", "10.00"]


def test_a_provider_no_longer_enabled_is_not_listed(store: Store, client: TestClient) -> None:
    store.configure(ESIM_PROVIDERS="beta")

    response = client.get("/v1/store/products")

    assert [p["id"] for p in response.json()["products"]] == ["b-1"]


def test_a_currency_with_no_rate_is_a_422_naming_it(client: TestClient) -> None:
    before = products()

    response = client.get("/v1/store/products", params={"currency": "JPY"})

    assert response.status_code == 422
    assert response.json()["error"] == {"code": "unknown_currency",
                                        "message": "no exchange rate for JPY"}
    assert products() == before


@pytest.mark.parametrize("currency", ["eur", "EU", "EURO", "E1R", ""])
def test_a_malformed_currency_is_a_422(client: TestClient, currency: str) -> None:
    response = client.get("/v1/store/products", params={"currency": currency})

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["message"].startswith("query.currency:")


def test_an_unrated_currency_is_refused_even_with_nothing_to_convert(store: Store) -> None:
    # Given an empty catalog (nothing synced yet)
    with TestClient(create_app(), raise_server_exceptions=False) as empty:
        # When a currency with no rate is asked for, Then it is refused all the same
        response = empty.get("/v1/store/products", params={"currency": "XTS"})
        assert response.status_code == 422
        assert response.json()["error"]["message"] == "no exchange rate for XTS"
        # while the base currency lists the empty catalog
        assert empty.get("/v1/store/products", params={"currency": "USD"}).json() == {
            "products": []}
