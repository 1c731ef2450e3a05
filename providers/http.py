"""The base of providers that speak HTTP: one pooled httpx client per provider."""

from __future__ import annotations

import httpx

from herald.settings import Settings, get_settings

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
