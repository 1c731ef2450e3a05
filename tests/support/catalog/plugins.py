"""An eSIM provider plugin and a telecom operator adapter of the tests' own, each reading
its catalog (and the plugin its health) from a local HTTP server, so a test makes one
fail for real: the server answers 503, lists a bad product, or is not running.

The catalog servers answer ``GET /catalog`` → ``{"products": [{"id", "name", "price",
"currency"}]}`` and ``GET /health`` → ``{"available": bool, "detail": str | null}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import httpx

from herald.settings import Settings
from providers.esim import (
    CatalogProduct,
    HealthReading,
    IssueRequest,
    ProviderOrder,
    StatusWebhook,
)
from providers.operators import Package, StepRequest, StepResult
from tests.support.providers.fakes import Answer, FakeApi, RecordedRequest

#: Base URL of each test owner's catalog server, by owner name (set by the tests).
ENDPOINTS: dict[str, str] = {}


class FakeCatalog(FakeApi):
    """A provider's catalog API: ``products`` and ``health`` are what it answers."""

    error_bodies = {503: {"error": "unavailable"}}

    def __init__(self, products: list[dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.products: list[dict[str, Any]] = products or []
        self.health: dict[str, Any] = {"available": True, "detail": None}
        #: The statuses ``/catalog`` and ``/health`` answer with (200: their lists).
        self.catalog_status = self.health_status = 200

    def answer(self, request: RecordedRequest) -> Answer:
        if request.path == "/catalog":
            return self.catalog_status, {"products": self.products}
        if request.path == "/health":
            return self.health_status, self.health
        return 404, {"error": "not found"}


def product(item_id: str, price: str = "4.00", currency: str = "USD") -> dict[str, Any]:
    """One catalog entry as the fake servers list it."""
    return {"id": item_id, "name": f"Product {item_id}", "price": price, "currency": currency}


def _get(owner: str, path: str) -> Any:
    response = httpx.get(ENDPOINTS[owner] + path, timeout=5)
    response.raise_for_status()
    return response.json()


class HttpCatalogPlugin:
    """An eSIM plugin whose catalog and health come from its server."""

    name = "http"
    supports_idempotency_keys = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def catalog(self) -> list[CatalogProduct]:
        return [CatalogProduct(id=p["id"], name=p["name"], price=Decimal(p["price"]),
                               currency=p["currency"])
                for p in _get(self.name, "/catalog")["products"]]

    def health(self) -> HealthReading:
        reading = _get(self.name, "/health")
        return HealthReading(available=reading["available"], detail=reading["detail"])

    def issue(self, request: IssueRequest, *,
              on_reference: Callable[[str], None]) -> ProviderOrder:
        raise NotImplementedError

    def reconcile(self, request: IssueRequest) -> ProviderOrder:
        raise NotImplementedError

    def verify_webhook(self, body: bytes, headers: Mapping[str, str]) -> StatusWebhook:
        raise NotImplementedError


class Alpha(HttpCatalogPlugin):
    name = "alpha"


class Beta(HttpCatalogPlugin):
    name = "beta"


class Gamma:
    """A telecom operator whose packages come from its server (``code`` is ``id``)."""

    slug = "gamma"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def packages(self) -> list[Package]:
        return [Package(code=p["id"], name=p["name"], price=Decimal(p["price"]),
                        currency=p["currency"])
                for p in _get(self.slug, "/catalog")["products"]]

    def initiate(self, request: StepRequest) -> StepResult:
        raise NotImplementedError

    def verify_identity(self, request: StepRequest) -> StepResult:
        raise NotImplementedError

    def complete(self, request: StepRequest) -> StepResult:
        raise NotImplementedError
