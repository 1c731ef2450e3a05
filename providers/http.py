"""The base of providers that speak HTTP: one pooled httpx client per provider."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx

from herald.settings import Settings, get_settings
from providers.base import OutboundMessage, SendResult
from providers.classification import Table

log = logging.getLogger(__name__)

#: Seconds one HTTP request to a provider may take (connect, write, read each).
REQUEST_TIMEOUT_S = 10.0


class HttpProvider:
    """Holds the settings and a pooled client on the provider's base URL setting."""

    #: The Settings field holding the provider's API base URL.
    base_url_setting: str
    #: How the provider's failures are classified (providers/classification.py).
    classification: Table

    def __init__(self, settings: Settings | None = None, *,
                 timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._settings = settings or get_settings()
        self._timeout_s = timeout_s
        # one pooled client per provider; httpx.Client is safe to share between threads
        self._http = httpx.Client(
            base_url=str(getattr(self._settings, self.base_url_setting)).rstrip("/"),
            timeout=timeout_s)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def post_json(self, message: OutboundMessage, path: str, payload: dict[str, Any],
                  headers: dict[str, str],
                  classify: Callable[[httpx.Response, str], SendResult]) -> SendResult:
        """POST ``payload``; a transport error is classified by the provider's table (a
        failure before the request was written is definite, one after it ambiguous), an
        answer by ``classify(response, recipient)``. A failure is logged by delivery id."""
        try:
            response = self._http.post(path, json=payload, headers=headers)
        except (httpx.HTTPError, UnicodeEncodeError) as error:  # the latter: a header value
            detail = (f"no answer within {self._timeout_s} s"
                      if isinstance(error, httpx.TimeoutException) else type(error).__name__)
            result = self.classification.exception(error, detail)
        else:
            result = classify(response, message.to)
        if not result.accepted:
            log.info("%s send failed", type(self).__name__,
                     extra={"delivery_id": message.idempotency_key,
                            "failure_code": result.failure_code})
        return result

