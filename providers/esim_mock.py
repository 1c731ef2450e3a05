"""The mock eSIM provider: sells fixed products whose behaviour drives every path of the
issuance job, and counts its charges per order (docs/pipeline.md#the-mock-esim-provider).

=====================  ==============================================================
``mock-ok``            issued
``mock-transient``     one transient failure (nothing charged), then issued
``mock-out-of-stock``  failed, ``error_code = out_of_stock`` (nothing charged)
``mock-terminal``      failed (nothing charged)
``mock-ambiguous``     charged and issued, but the answer is ambiguous
                       (``reconciliation_required``); reconcile finds it issued
``mock-verify``        charged, ``pending_verification`` with a verification URL;
                       issued once the customer verified (:meth:`customer_verifies`,
                       which also returns the signed ``verified`` webhook to post)
``mock-crash``         charged and issued, then the calling *process* is killed
                       (SIGKILL) before it can record the profile; reconcile finds
                       it issued. Only the first issue of an order crashes.
=====================  ==============================================================

``MOCK_ESIM_ANSWER_DELAY_S`` makes every charged order's answer wait that long after the
charge (and the reference's commit), as a provider slow to answer: the partition tests
cut a worker host off inside that window.

Like the mock notification provider, its records live in Redis (MOCK_STORE_URL, else the
job Redis) under ``<QUEUE_PREFIX>:mock:esim:``, so worker processes, the test or the demo
that scripts them, and a FLUSHALL of the job Redis (with MOCK_STORE_URL elsewhere) all see
the same orders and charges. It takes no idempotency keys: asking it to issue twice
charges twice, which is what the job's reconcile-instead-of-issue prevents.

Status webhooks: ``POST /v1/store/webhooks/mock`` with the body ``{"provider_order_ref",
"status": "issued" | "verified" | "failed"}`` signed ``X-Herald-Signature: sha256=<hex
HMAC-SHA256 of the body>`` under MOCK_CALLBACK_SECRET (:func:`signed_webhook`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, cast

from herald.settings import Settings, get_settings
from providers.base import InvalidSignature, hmac_sha256_signature, verify_hmac_sha256
from providers.esim import (
    AmbiguousEsimError,
    CatalogProduct,
    HealthReading,
    InvalidWebhook,
    InvalidWebhookBody,
    IssueRequest,
    OutOfStock,
    Profile,
    ProviderOrder,
    ProviderOrderStatus,
    StatusWebhook,
    TerminalEsimError,
    TransientEsimError,
)
from providers.mock import MOCK_SIGNATURE_HEADER, mock_store

log = logging.getLogger(__name__)

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
#: The statuses a mock webhook may carry.
WEBHOOK_STATUSES = ("issued", "verified", "failed")
#: The return code its parent sees of a process the ``mock-crash`` product kills: it is
#: killed with SIGKILL, as an out-of-memory kill or a host's hard stop would.
CRASH_EXIT_CODE = -int(signal.SIGKILL)
#: The mock's SM-DP+ server (profiles point their activation codes at it).
SMDP_ADDRESS = "smdp.mock-esim.invalid"


def _key(name: str) -> str:
    return f"{get_settings().queue_prefix}:mock:esim:{name}"


def _profile(reference: str) -> dict[str, str]:
    """A profile derived from the reference: the same order always shows the same one."""
    digits = str(int(hashlib.sha256(reference.encode()).hexdigest(), 16))[:15]
    matching_id = hashlib.sha256(f"code-{reference}".encode()).hexdigest()[:16].upper()
    return {"iccid": f"8999{digits}", "smdp_address": SMDP_ADDRESS,
            "activation_code": f"LPA:1${SMDP_ADDRESS}${matching_id}"}


def _answer(reference: str, record: dict[str, Any]) -> ProviderOrder:
    """A stored mock order as the provider reports it."""
    status = ProviderOrderStatus(record["status"])
    profile = (Profile(**_profile(reference)) if status is ProviderOrderStatus.ISSUED
               else None)
    return ProviderOrder(status=status, provider_order_ref=reference, profile=profile,
                         verification_url=record.get("verification_url"))


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
        """Behave as the product says (module docstring); every accepted order is one
        charge, recorded before the answer."""
        product = request.product_id
        if product not in MOCK_PRODUCTS:
            raise TerminalEsimError(f"the mock sells no product {product!r}",
                                    code="unknown_product")
        if product == "mock-out-of-stock":
            raise OutOfStock(f"{product} is sold out")
        if product == "mock-terminal":
            raise TerminalEsimError(f"{product}: the mock refuses this order")
        if product == "mock-transient" and mock_store().hincrby(_key("transient"),
                                                               request.order_id, 1) == 1:
            raise TransientEsimError(f"{product}: the mock is briefly unavailable")
        status = ("pending_verification" if product == "mock-verify" else "issued")
        reference = self._accept(request, status)
        on_reference(reference)
        if self.settings.mock_esim_answer_delay_s:
            # a blocking sleep on purpose: a provider slow to answer after it charged
            time.sleep(self.settings.mock_esim_answer_delay_s)
        if product == "mock-ambiguous":
            raise AmbiguousEsimError("the mock's answer was cut off",
                                     provider_order_ref=reference)
        if product == "mock-crash" and mock_store().hsetnx(_key("crashed"),
                                                           request.order_id, "1"):
            log.warning("mock-crash: the process is killed (SIGKILL) after the charge",
                        extra={"order_id": request.order_id})
            os.kill(os.getpid(), signal.SIGKILL)
        # the order it accepted, as it stands now (by its reference: one read)
        return self.reconcile(dataclasses.replace(request, provider_order_ref=reference))

    def _accept(self, request: IssueRequest, status: str) -> str:
        """Record a new order and its charge (one transaction); returns its reference."""
        reference = f"mock-esim-{uuid.uuid4().hex}"
        record: dict[str, Any] = {"order_id": request.order_id,
                                  "product_id": request.product_id, "status": status}
        if status == "pending_verification":
            record["verification_url"] = f"https://mock-esim.invalid/verify/{reference}"
        pipe = mock_store().pipeline(transaction=True)
        pipe.hset(_key("orders"), reference, json.dumps(record))
        pipe.hset(_key("refs"), request.order_id, reference)
        pipe.hincrby(_key("charges"), request.order_id, 1)
        pipe.execute()
        return reference

    def reconcile(self, request: IssueRequest) -> ProviderOrder:
        """The mock's order by reference, else the newest one for the order id; NOT_FOUND
        when it never accepted one. Never charges, never crashes."""
        store = mock_store()
        # (the synchronous client's answers: redis-py types each as maybe awaitable)
        reference = request.provider_order_ref or cast(
            "bytes | str | None", store.hget(_key("refs"), request.order_id))
        if isinstance(reference, bytes):
            reference = reference.decode()
        raw = (cast("bytes | str | None", store.hget(_key("orders"), reference))
               if reference else None)
        if reference is None or raw is None:
            return ProviderOrder(status=ProviderOrderStatus.NOT_FOUND)
        return _answer(reference, json.loads(raw))

    def verify_webhook(self, body: bytes, headers: Mapping[str, str]) -> StatusWebhook:
        """Check ``X-Herald-Signature`` (MOCK_CALLBACK_SECRET), then read the body."""
        signature = {name.lower(): value for name, value in headers.items()}.get(
            MOCK_SIGNATURE_HEADER.lower())
        try:
            verify_hmac_sha256(self.settings.mock_callback_secret, body, signature)
        except InvalidSignature as error:
            raise InvalidWebhook(str(error)) from None
        try:
            fields = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise InvalidWebhookBody("the body is not JSON") from None
        reference = fields.get("provider_order_ref") if isinstance(fields, dict) else None
        status = fields.get("status") if isinstance(fields, dict) else None
        if not isinstance(reference, str) or not reference or len(reference) > 255:
            raise InvalidWebhookBody("provider_order_ref: a reference of at most 255 "
                                     "characters is required")
        if status not in WEBHOOK_STATUSES:
            raise InvalidWebhookBody(f"status: must be one of {', '.join(WEBHOOK_STATUSES)}")
        return StatusWebhook(provider_order_ref=reference, status=status)

    # -- for tests and the demo ---------------------------------------------------------
    @classmethod
    def customer_verifies(cls, reference: str) -> tuple[bytes, dict[str, str]]:
        """The customer completes the verification of a ``mock-verify`` order: the mock
        issues its profile. Returns the signed ``verified`` webhook the provider then
        posts (body, headers). KeyError for a reference the mock does not know."""
        store = mock_store()
        raw = cast("bytes | str | None", store.hget(_key("orders"), reference))
        if raw is None:
            raise KeyError(reference)
        record = json.loads(raw) | {"status": "issued"}
        store.hset(_key("orders"), reference, json.dumps(record))
        return signed_webhook(reference, "verified")

    @classmethod
    def charges(cls, order_id: str) -> int:
        """How many times the mock charged for ``order_id`` (0: never)."""
        return int(cast("bytes | str | None", mock_store().hget(_key("charges"), order_id)) or 0)

    @classmethod
    def reference(cls, order_id: str) -> str | None:
        """The reference of the mock's newest order for ``order_id``, if it has one."""
        reference = cast("bytes | str | None", mock_store().hget(_key("refs"), order_id))
        return reference.decode() if isinstance(reference, bytes) else reference

    @classmethod
    def reset(cls) -> None:
        """Forget every order, charge and crash."""
        mock_store().delete(*(_key(name) for name in ("orders", "refs", "charges",
                                                      "transient", "crashed")))


def signed_webhook(reference: str, status: str, *,
                   secret: str | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a signed mock status webhook; POST them to
    ``/v1/store/webhooks/mock``."""
    body = json.dumps({"provider_order_ref": reference, "status": status}).encode()
    signature = hmac_sha256_signature(secret or get_settings().mock_callback_secret, body)
    return body, {MOCK_SIGNATURE_HEADER: signature, "Content-Type": "application/json"}
