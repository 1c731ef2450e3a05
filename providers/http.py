"""The base of providers that speak HTTP: one pooled httpx client per provider."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx

from herald.settings import Settings, get_settings
from providers.base import OutboundMessage, SendResult

log = logging.getLogger(__name__)

#: Seconds one HTTP request to a provider may take (connect, write, read each).
REQUEST_TIMEOUT_S = 10.0


class HttpProvider:
    """Holds the settings and a pooled client on the provider's base URL setting."""

    #: The Settings field holding the provider's API base URL.
    base_url_setting: str

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings or get_settings()
        # one pooled client per provider; httpx.Client is safe to share between threads
        self._http = httpx.Client(
            base_url=str(getattr(self._settings, self.base_url_setting)).rstrip("/"),
            timeout=REQUEST_TIMEOUT_S)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def post_json(self, message: OutboundMessage, path: str, payload: dict[str, Any],
                  headers: dict[str, str],
                  classify: Callable[[httpx.Response, str], SendResult]) -> SendResult:
        """POST ``payload``; a timeout or transport error is transient, an answer is
        classified by ``classify(response, recipient)``. A failure is logged by delivery id."""
        try:
            response = self._http.post(path, json=payload, headers=headers)
        except httpx.TimeoutException:
            result = SendResult.transient("timeout", f"no answer within {REQUEST_TIMEOUT_S} s")
        except httpx.TransportError as error:
            result = SendResult.transient("connection", type(error).__name__)
        else:
            result = classify(response, message.to)
        if not result.accepted:
            log.info("%s send failed", type(self).__name__,
                     extra={"delivery_id": message.idempotency_key,
                            "failure_code": result.failure_code})
        return result

