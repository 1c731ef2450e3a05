"""Exchange-rate providers: where the fx-refresh job gets its US-dollar rates
(docs/pipeline.md#fx-refresh).

A provider answers :meth:`FxProvider.latest` with a :class:`FxQuote` — units of each
currency one US dollar buys — or raises one of three classified errors:

- :class:`FxUnavailable`: worth trying again (HTTP 429 and 5xx, timeouts, connection
  errors); the job throws so the queue retries.
- :class:`FxRefused`: the provider refuses us (a bad or missing key, a plan that does not
  allow the request); trying again cannot help.
- :class:`FxInvalidAnswer`: the answer is not a rate table at all; the job keeps the
  stored rates.

Adapters: ``mock`` (fixed rates, the default: it asks nowhere real) and
``openexchangerates`` (Open Exchange Rates' ``latest.json``). ``FX_PROVIDER`` picks one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol, runtime_checkable

import httpx

from herald.settings import Settings, get_settings
from providers.http import REQUEST_TIMEOUT_S, HttpProvider
from providers.plugins import PluginRegistry

#: The currency every rate is quoted against.
BASE_CURRENCY = "USD"


@dataclasses.dataclass(frozen=True)
class FxQuote:
    """A provider's rates: how many units of each currency one ``base`` unit buys."""

    base: str
    rates: Mapping[str, Decimal]
    provider: str
    #: When the provider says the rates were published (None: it did not say).
    as_of: datetime | None = None


class FxError(Exception):
    """A classified FX provider failure."""


class FxUnavailable(FxError):
    """The provider did not answer usefully this time; trying again may help."""


class FxRefused(FxError):
    """The provider refuses the request (credentials, plan); trying again cannot help."""


class FxInvalidAnswer(FxError):
    """The provider answered something that is not a rate table."""


@runtime_checkable
class FxProvider(Protocol):
    """An exchange-rate provider."""

    #: Its name: ``FX_PROVIDER`` and ``fx_rates.provider``.
    name: str

    def latest(self, currencies: Sequence[str]) -> FxQuote:
        """The latest US-dollar rates of ``currencies`` (more may come back; one may be
        missing, which the caller checks); raises an :class:`FxError`."""


#: The mock's rates, units per US dollar (fixed, so prices in tests and the demo are too).
MOCK_RATES: dict[str, Decimal] = {
    "USD": Decimal("1"),
    "EUR": Decimal("0.92"),
    "GBP": Decimal("0.79"),
    "SAR": Decimal("3.75"),
    "AED": Decimal("3.6725"),
    "KWD": Decimal("0.307"),
    "EGP": Decimal("48.5"),
    "JPY": Decimal("155"),
}


class MockFxProvider:
    """``FX_PROVIDER=mock``: the fixed :data:`MOCK_RATES`."""

    name = "mock"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def latest(self, currencies: Sequence[str]) -> FxQuote:
        """The fixed rates of the currencies it knows (an unknown one is left out)."""
        return FxQuote(base=BASE_CURRENCY, provider=self.name,
                       rates={code: MOCK_RATES[code] for code in currencies
                              if code in MOCK_RATES})


class OpenExchangeRatesProvider(HttpProvider):
    """``FX_PROVIDER=openexchangerates``: Open Exchange Rates' latest rates.

    ``GET {FX_BASE_URL}/latest.json?base=USD&symbols=EUR,GBP`` with ``Authorization:
    Token {FX_API_KEY}`` (the key stays out of URLs and so out of access logs). It
    answers ``{"disclaimer", "license", "timestamp", "base": "USD", "rates": {"EUR":
    0.92, …}}``; an error is ``{"error": true, "status": 401, "message":
    "invalid_app_id", "description": "…"}``. Rates are read as exact decimals.
    """

    name = "openexchangerates"
    base_url_setting = "fx_base_url"

    def __init__(self, settings: Settings | None = None, *,
                 timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        super().__init__(settings)
        self._http.timeout = httpx.Timeout(timeout_s)
        self._timeout_s = timeout_s

    def latest(self, currencies: Sequence[str]) -> FxQuote:
        """The rates of ``currencies`` against USD (see the class docstring)."""
        key = self._settings.fx_api_key
        if not key:
            raise FxRefused("FX_API_KEY is not set")
        try:
            response = self._http.get(
                "/latest.json", params={"base": BASE_CURRENCY, "symbols": ",".join(currencies)},
                headers={"Authorization": f"Token {key}", "Accept": "application/json"})
        except httpx.TimeoutException:
            raise FxUnavailable(f"no answer within {self._timeout_s:g} s") from None
        except httpx.TransportError as error:
            raise FxUnavailable(f"connection failed: {type(error).__name__}") from None
        if response.status_code == 429 or response.status_code >= 500:
            raise FxUnavailable(_error_text(response))
        if response.status_code != 200:
            raise FxRefused(_error_text(response))
        return self._quote(response)

    def _quote(self, response: httpx.Response) -> FxQuote:
        body = _decimal_json(response.text)
        if not isinstance(body, dict) or not isinstance(body.get("rates"), dict):
            raise FxInvalidAnswer("the answer has no rates object")
        rates: dict[str, Decimal] = {}
        for code, value in body["rates"].items():
            if not isinstance(value, Decimal):
                raise FxInvalidAnswer(f"the rate of {str(code)[:8]!r} is not a number")
            rates[str(code)] = value
        timestamp = body.get("timestamp")
        as_of = (datetime.fromtimestamp(int(timestamp), UTC)
                 if isinstance(timestamp, Decimal) and timestamp.is_finite() else None)
        return FxQuote(base=str(body.get("base", "")), rates=rates, provider=self.name,
                       as_of=as_of)


def _decimal_json(text: str) -> Any:
    """``text`` as JSON with every number an exact :class:`Decimal` (``NaN`` and
    ``Infinity`` too, so the caller's check refuses them by value)."""
    try:
        return json.loads(text, parse_float=Decimal, parse_int=Decimal,
                          parse_constant=Decimal)
    except (ValueError, InvalidOperation):
        raise FxInvalidAnswer("the answer is not JSON") from None


def _error_text(response: httpx.Response) -> str:
    """``HTTP 401 invalid_app_id`` — the status and the provider's error code, if any."""
    try:
        body = response.json()
    except ValueError:
        body = None
    code = body.get("message") if isinstance(body, dict) else None
    return f"HTTP {response.status_code}" + (f" {str(code)[:80]}" if code else "")


#: The adapters, by name; ``FX_PROVIDER`` says which one is used.
fx_providers = PluginRegistry[FxProvider]({
    "mock": ("providers.fx", "MockFxProvider"),
    "openexchangerates": ("providers.fx", "OpenExchangeRatesProvider"),
}, lambda settings: settings.fx_provider)


def active_fx_provider(settings: Settings | None = None) -> FxProvider:
    """The adapter ``FX_PROVIDER`` names, built once per settings object."""
    settings = settings or get_settings()
    return fx_providers.get(settings.fx_provider, settings)
