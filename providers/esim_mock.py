"""The mock eSIM provider: sells fixed products whose behaviour drives every path of the
issuance lane, and counts its charges per order (docs/pipeline.md#the-mock-esim-provider).

==================  ==============================================================
``mock-ok``         issued
``mock-transient``  one transient failure, then issued
``mock-out-of-stock``  failed, ``error_code = out_of_stock``
``mock-terminal``   failed
``mock-ambiguous``  ambiguous (``reconciliation_required``); reconcile finds it issued
``mock-verify``     ``pending_verification`` with a verification URL; verified when the
                    mock's webhook says so
``mock-crash``      accepted, then the worker process dies before the issued write;
                    reconcile finds it issued
==================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal

from herald.settings import Settings
from providers.esim import (
    CatalogProduct,
    HealthReading,
    IssueRequest,
    ProviderOrder,
    StatusWebhook,
)

#: The mock's catalog: product id → (name, price in USD).
MOCK_PRODUCTS: dict[str, tuple[str, Decimal]] = {
    "mock-ok": ("Mock 1 GB, 7 days", Decimal("5.00")),
    "mock-transient": ("Mock 3 GB, 30 days (one transient failure)", Decimal("9.00")),
    "mock-out-of-stock": ("Mock 5 GB, 30 days (out of stock)", Decimal("12.00")),
    "mock-terminal": ("Mock 10 GB, 30 days (refused)", Decimal("18.00")),
    "mock-ambiguous": ("Mock 1 GB, 1 day (ambiguous answer)", Decimal("2.50")),
    "mock-verify": ("Mock 20 GB, 30 days (identity verification)", Decimal("25.00")),
    "mock-crash": ("Mock 2 GB, 15 days (worker dies after the charge)", Decimal("7.00")),
}


class MockEsimProvider:
    """The mock plugin (``ESIM_PROVIDERS=mock``)."""

    name = "mock"
    supports_idempotency_keys = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def catalog(self) -> list[CatalogProduct]:
        """The fixed products above, priced in USD."""
        return [CatalogProduct(id=product_id, name=name, price=price, currency="USD")
                for product_id, (name, price) in MOCK_PRODUCTS.items()]

    def health(self) -> HealthReading:
        """Always available."""
        return HealthReading(available=True)

    def issue(self, request: IssueRequest, *,
              on_reference: Callable[[str], None]) -> ProviderOrder:
        raise NotImplementedError

    def reconcile(self, request: IssueRequest) -> ProviderOrder:
        raise NotImplementedError

    def verify_webhook(self, body: bytes, headers: Mapping[str, str]) -> StatusWebhook:
        raise NotImplementedError
