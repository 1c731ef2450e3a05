"""A local HTTP server speaking Open Exchange Rates' ``latest.json`` API.

``GET /latest.json?base=USD&symbols=EUR,GBP`` with ``Authorization: Token <app id>``
answers ``{"disclaimer", "license", "timestamp", "base", "rates"}`` from :attr:`rates`
(the symbols asked for; all of them without ``symbols``). A wrong token is 401
``invalid_app_id``, another base 403 ``not_allowed`` (as on Open Exchange Rates' free
plan). A test can make it answer anything (:attr:`body`), fail (``fail_next``), or
answer slowly (:attr:`delay_s`).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.providers.fakes import Answer, FakeApi, RecordedRequest

#: The app id the fake accepts unless told otherwise.
APP_ID = "oxr-test-app-id"


def _error(status: int, message: str, description: str) -> dict[str, Any]:
    return {"error": True, "status": status, "message": message, "description": description}


class FakeOpenExchangeRates(FakeApi):
    """Open Exchange Rates' latest rates (see the module docstring)."""

    error_bodies = {
        429: _error(429, "too_many_requests", "You have exceeded your request allowance."),
        500: _error(500, "internal_error", "Something went wrong on our side."),
        503: _error(503, "service_unavailable", "The service is temporarily unavailable."),
    }

    def __init__(self, rates: dict[str, Any] | None = None, *, app_id: str = APP_ID) -> None:
        super().__init__()
        self.app_id = app_id
        self.rates: dict[str, Any] = dict(rates or {"EUR": 0.92, "GBP": 0.79, "SAR": 3.75,
                                                    "AED": 3.6725})
        self.base = "USD"
        #: When set, answered as it is instead of the rate table.
        self.body: Any = None
        #: Seconds to wait before answering (a slow provider).
        self.delay_s = 0.0

    def answer(self, request: RecordedRequest) -> Answer:
        url = urlsplit(request.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        if url.path != "/latest.json":
            return 404, _error(404, "not_found", "Requested resource not found.")
        if request.headers.get("authorization") != f"Token {self.app_id}":
            return 401, _error(401, "invalid_app_id", "Invalid App ID provided.")
        if query.get("base", "USD") != "USD":
            return 403, _error(403, "not_allowed", "Changing the API `base` currency is "
                               "available for Developer, Enterprise and Unlimited plan clients.")
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.body is not None:
            return 200, self.body
        symbols = query.get("symbols")
        rates = ({code: rate for code, rate in self.rates.items()
                  if code in symbols.split(",")} if symbols else dict(self.rates))
        return 200, {"disclaimer": "Usage subject to terms: https://openexchangerates.org/terms",
                     "license": "https://openexchangerates.org/license",
                     "timestamp": int(time.time()), "base": self.base, "rates": rates}
