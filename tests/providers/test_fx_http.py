"""The Open Exchange Rates adapter against a local server speaking its API: what it asks,
how it reads the rates, and how each failure is classified."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from decimal import Decimal

import pytest

from herald.settings import Settings
from providers.fx import (
    FxInvalidAnswer,
    FxRefused,
    FxUnavailable,
    OpenExchangeRatesProvider,
)
from tests.support.providers.fake_fx import APP_ID, FakeOpenExchangeRates

WANTED = ["EUR", "SAR"]


@pytest.fixture
def oxr() -> Iterator[FakeOpenExchangeRates]:
    with FakeOpenExchangeRates() as fake:
        yield fake


def make_provider(base_url: str, *, api_key: str = APP_ID,
                  timeout_s: float = 5.0) -> OpenExchangeRatesProvider:
    settings = Settings(fx_provider="openexchangerates", fx_base_url=base_url,
                        fx_api_key=api_key)
    return OpenExchangeRatesProvider(settings, timeout_s=timeout_s)


@pytest.fixture
def provider(oxr: FakeOpenExchangeRates) -> Iterator[OpenExchangeRatesProvider]:
    with closing(make_provider(oxr.url)) as provider:
        yield provider


def test_the_rates_asked_for_come_back_as_exact_decimals(
        oxr: FakeOpenExchangeRates, provider: OpenExchangeRatesProvider) -> None:
    oxr.rates["AED"] = 3.672538

    quote = provider.latest(["EUR", "SAR", "AED"])

    # the key travels in a header (never in the URL), US dollars are the base
    [request] = oxr.requests
    assert request.headers["authorization"] == f"Token {APP_ID}"
    assert APP_ID not in request.path
    assert request.path == "/latest.json?base=USD&symbols=EUR%2CSAR%2CAED"
    # and every rate is read exactly as written, with the base and the publication time
    assert quote.base == "USD" and quote.provider == "openexchangerates"
    assert quote.rates == {"EUR": Decimal("0.92"), "SAR": Decimal("3.75"),
                           "AED": Decimal("3.672538")}
    assert quote.as_of is not None


@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_server_error_or_rate_limit_is_unavailable(
        oxr: FakeOpenExchangeRates, provider: OpenExchangeRatesProvider, status: int) -> None:
    oxr.fail_next(status)

    with pytest.raises(FxUnavailable, match=f"HTTP {status}"):
        provider.latest(WANTED)


def test_a_timeout_is_unavailable(oxr: FakeOpenExchangeRates) -> None:
    oxr.delay_s = 3.0
    with closing(make_provider(oxr.url, timeout_s=0.3)) as slow, \
            pytest.raises(FxUnavailable, match=r"no answer within 0\.3 s"):
        slow.latest(WANTED)


def test_a_refused_connection_is_unavailable() -> None:
    with FakeOpenExchangeRates() as gone:
        url = gone.url
    with closing(make_provider(url)) as provider, \
            pytest.raises(FxUnavailable, match="connection failed"):
        provider.latest(WANTED)


def test_a_wrong_key_is_refused_with_the_providers_code(oxr: FakeOpenExchangeRates) -> None:
    with closing(make_provider(oxr.url, api_key="wrong")) as provider, \
            pytest.raises(FxRefused, match="HTTP 401 invalid_app_id"):
        provider.latest(WANTED)


def test_a_missing_key_is_refused_without_asking(oxr: FakeOpenExchangeRates) -> None:
    with closing(make_provider(oxr.url, api_key="")) as provider, \
            pytest.raises(FxRefused, match="FX_API_KEY is not set"):
        provider.latest(WANTED)
    assert oxr.requests == []


@pytest.mark.parametrize(("body", "problem"), [
    ([1, 2], "no rates object"),
    ({"base": "USD"}, "no rates object"),
    ({"base": "USD", "rates": {"EUR": "0.92"}}, "rate of 'EUR' is not a number"),
    ({"base": "USD", "rates": {"EUR": None}}, "rate of 'EUR' is not a number"),
])
def test_an_answer_that_is_not_a_rate_table_is_invalid(
        oxr: FakeOpenExchangeRates, provider: OpenExchangeRatesProvider, body: object,
        problem: str) -> None:
    oxr.body = body

    with pytest.raises(FxInvalidAnswer, match=problem):
        provider.latest(WANTED)


def test_odd_numbers_and_another_base_are_passed_on_for_the_job_to_refuse(
        oxr: FakeOpenExchangeRates, provider: OpenExchangeRatesProvider) -> None:
    # Given a provider answering NaN, a negative rate and another base
    oxr.body = {"base": "EUR", "rates": {"EUR": float("nan"), "SAR": -3.75}}

    quote = provider.latest(WANTED)

    # Then the adapter reads them as they are (the job's check refuses them)
    assert quote.base == "EUR"
    assert quote.rates["EUR"].is_nan() and quote.rates["SAR"] == Decimal("-3.75")
