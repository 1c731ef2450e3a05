"""The eSIM provider contract: what the store's issuance job and the catalog sync ask of
every eSIM provider plugin, and the registry that builds them by name.

A plugin issues a profile for an order, reconciles an order the provider may already
have (the job's guard against charging twice when a provider takes no idempotency
key), lists its catalog, reports its health, and verifies its signed status webhooks.
Failures are raised as one of the classified errors below; anything else a plugin raises
is *unclassified*, and the job then assumes the provider may have the order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from decimal import Decimal
from enum import StrEnum
from typing import Protocol, runtime_checkable

from providers.plugins import PluginRegistry


class ProviderOrderStatus(StrEnum):
    """What a provider says of an order."""

    #: The profile exists; ``profile`` holds it.
    ISSUED = "issued"
    #: The provider waits for the customer to verify (``verification_url``).
    PENDING_VERIFICATION = "pending_verification"
    #: Accepted, not issued yet: ask again later.
    PROCESSING = "processing"
    #: The provider gave up on it; ``error_code`` / ``reason`` say why.
    FAILED = "failed"
    #: The provider has no such order (a reconcile only): it never got the issue call.
    NOT_FOUND = "not_found"


@dataclasses.dataclass(frozen=True)
class Profile:
    """An issued eSIM profile."""

    iccid: str
    activation_code: str
    smdp_address: str


@dataclasses.dataclass(frozen=True)
class ProviderOrder:
    """A provider's answer about one order (from ``issue`` or ``reconcile``)."""

    status: ProviderOrderStatus
    provider_order_ref: str | None = None
    profile: Profile | None = None
    verification_url: str | None = None
    error_code: str | None = None
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class IssueRequest:
    """What a plugin needs to issue or reconcile one order."""

    order_id: str
    product_id: str
    #: The provider's reference when one was persisted (reconcile looks it up by it).
    provider_order_ref: str | None = None
    #: Sent only to plugins that accept one (``supports_idempotency_keys``).
    idempotency_key: str | None = None


@dataclasses.dataclass(frozen=True)
class CatalogProduct:
    """One product as a provider's catalog lists it."""

    id: str
    name: str
    price: Decimal
    currency: str


@dataclasses.dataclass(frozen=True)
class HealthReading:
    """Whether a provider takes orders now, and why not."""

    available: bool
    detail: str | None = None


@dataclasses.dataclass(frozen=True)
class StatusWebhook:
    """A verified status webhook: which order it is about and what it says."""

    provider_order_ref: str
    status: str


class EsimError(Exception):
    """A classified provider failure; ``code`` is what the order's ``error_code`` records."""

    code = "provider_error"

    def __init__(self, message: str, *, code: str | None = None,
                 provider_order_ref: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        #: The provider's reference, when it answered with one before failing.
        self.provider_order_ref = provider_order_ref


class TransientEsimError(EsimError):
    """Worth trying again: the provider did not take the order (timeouts are *not* this:
    a timed-out call may have reached it, so they are unclassified)."""

    code = "transient"


class OutOfStock(EsimError):
    """The product is sold out: the order fails, no retries."""

    code = "out_of_stock"


class TerminalEsimError(EsimError):
    """The provider refused the order for good: the order fails, no retries."""

    code = "terminal"


class AmbiguousEsimError(EsimError):
    """The provider's answer does not say whether it took the order: only a reconcile may
    move the order on (``reconciliation_required``)."""

    code = "ambiguous"


class InvalidWebhook(ValueError):
    """A status webhook whose signature or body is wrong (answered 401/422, ignored).

    Raised as is, it means the signature did not verify (401); a correctly signed body
    herald cannot read is :class:`InvalidWebhookBody` (422)."""


class InvalidWebhookBody(InvalidWebhook):
    """A status webhook whose signature verified but whose body has not the provider's
    shape."""


@runtime_checkable
class EsimProvider(Protocol):
    """An eSIM provider plugin."""

    #: Its name: ``store_products.provider``, ``store_orders.provider`` and the
    #: ``{provider}`` of ``POST /v1/store/webhooks/{provider}``.
    name: str
    #: True when ``issue`` honours ``IssueRequest.idempotency_key`` (a repeat answers with
    #: the first order instead of charging again).
    supports_idempotency_keys: bool

    def issue(self, request: IssueRequest, *,
              on_reference: Callable[[str], None]) -> ProviderOrder:
        """Order a profile. Calls ``on_reference`` with the provider's order reference as
        soon as it is known (before waiting for the profile), so the caller can persist
        it; raises a classified :class:`EsimError` or anything else (unclassified)."""

    def reconcile(self, request: IssueRequest) -> ProviderOrder:
        """What the provider knows of this order (by reference, else by our order id /
        idempotency key); never charges."""

    def catalog(self) -> list[CatalogProduct]:
        """The products it sells now."""

    def health(self) -> HealthReading:
        """Whether it takes orders now."""

    def verify_webhook(self, body: bytes, headers: Mapping[str, str]) -> StatusWebhook:
        """Check a status webhook's signature and read it; raises :class:`InvalidWebhook`."""


#: The plugins, by name; ``ESIM_PROVIDERS`` says which are enabled.
esim_providers = PluginRegistry[EsimProvider]({
    "mock": ("providers.esim_mock", "MockEsimProvider"),
    "esimhub": ("providers.esim_http", "EsimhubProvider"),
}, lambda settings: settings.esim_providers)
