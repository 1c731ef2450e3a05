"""An eSIM order priced in another currency: it costs what the catalog lists in that
currency (``GET /v1/store/products?currency=``), that price is locked on the order
whatever the rates do next, and paying it in that currency is accepted; a currency with
no exchange rate is refused and persists nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from fastapi.testclient import TestClient

from herald import db
from models.catalog import replace_rates
from tests.support.store.steps import account, place, rows


def rates(**values: str) -> None:
    """Make ``values`` (currency → units per US dollar) the stored exchange rates."""
    with db.session() as session:
        replace_rates(session, {code: Decimal(rate) for code, rate in values.items()},
                      "test", datetime(2026, 1, 1, tzinfo=UTC))


def listed(client: TestClient, product_id: str, currency: str) -> tuple[str, str]:
    """``(price, currency)`` of ``product_id`` in the catalog converted to ``currency``."""
    response = client.get("/v1/store/products", params={"currency": currency})
    assert response.status_code == 200, response.text
    [product] = [p for p in response.json()["products"] if p["id"] == product_id]
    return product["price"], product["currency"]


def test_an_order_in_eur_costs_what_the_catalog_lists_and_keeps_that_price(
        client: TestClient) -> None:
    # Given a 2.50 USD product and 0.93 EUR to the dollar (2.325: rounded half-up)
    rates(EUR="0.93")
    assert listed(client, "mock-ambiguous", "EUR") == ("2.33", "EUR")

    # When an order for it is placed in EUR
    response = place(client, {"account_id": account(), "product_id": "mock-ambiguous",
                              "currency": "EUR"})

    # Then it costs the catalog's EUR price
    assert response.status_code == 201, response.text
    order = response.json()
    assert (order["amount"], order["currency"], order["status"]) == (
        "2.33", "EUR", "pending_payment")

    # And once the rate moves, the catalog changes but the order keeps its price
    rates(EUR="0.95")
    assert listed(client, "mock-ambiguous", "EUR") == ("2.38", "EUR")
    assert client.get(f"/v1/store/orders/{order['id']}").json()["amount"] == "2.33"

    # And the order is paid in EUR at its locked price, not at the product's USD price
    usd = client.post("/v1/payments", json={"order_id": order["id"], "amount": "2.50",
                                             "currency": "USD"})
    assert (usd.status_code, usd.json()["error"]["code"]) == (422, "invalid_payment")
    eur = client.post("/v1/payments", json={"order_id": order["id"], "amount": "2.33",
                                             "currency": "EUR"})
    assert eur.status_code == 201, eur.text
    assert (eur.json()["amount"], eur.json()["currency"]) == ("2.33", "EUR")


def test_an_order_in_its_products_own_currency_costs_its_price(client: TestClient) -> None:
    rates(EUR="0.93")
    response = place(client, {"account_id": account(), "product_id": "mock-ambiguous",
                              "currency": "USD"})
    assert response.status_code == 201, response.text
    assert (response.json()["amount"], response.json()["currency"]) == ("2.50", "USD")


def test_a_currency_with_no_rate_is_422_and_persists_nothing(client: TestClient) -> None:
    rates(EUR="0.93")
    buyer = account()

    response = place(client, {"account_id": buyer, "product_id": "mock-ambiguous",
                              "currency": "XTS"})

    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "unknown_currency"
    assert "XTS" in response.json()["error"]["message"]
    assert rows() == (0, 0, 0)


def test_a_malformed_currency_is_422_and_persists_nothing(client: TestClient) -> None:
    for currency in ("eur", "EURO", "", 978):
        response = place(client, {"account_id": account(), "product_id": "mock-ambiguous",
                                  "currency": currency})
        assert (response.status_code, response.json()["error"]["code"]) == (
            422, "validation_error"), currency
    assert rows() == (0, 0, 0)
