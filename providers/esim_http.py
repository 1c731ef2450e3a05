"""The eSIMHub provider plugin (``ESIM_PROVIDERS=esimhub``): an eSIM wholesaler's REST API
over HTTP (docs/pipeline.md#esim-providers).

- ``Authorization: Bearer ESIMHUB_API_KEY`` on every request, JSON both ways.
- ``POST /v1/orders`` ``{"product_id", "client_reference"}`` with an ``Idempotency-Key``
  header → ``{"reference", "status", …}``. eSIMHub answers a repeated key with the first
  order and charges once, so a retry of an issue never pays twice.
- ``GET /v1/orders/{reference}`` → the order: ``status`` (``processing``, ``issued``,
  ``pending_verification``, ``failed``), ``profile`` (``iccid``, ``activation_code``,
  ``smdp_address``), ``verification_url``, ``error`` (``code``, ``message``); 404 when
  unknown. ``GET /v1/orders?client_reference={order id}`` → ``{"orders": [...]}``.
- ``GET /v1/products`` → ``{"products": [{"id", "name", "price", "currency"}]}``;
  ``GET /v1/status`` → ``{"status": "operational" | "degraded" | "down", "message"}``.
- Status webhooks carry ``X-Esimhub-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of
  "<t>.<raw body>">`` keyed with ESIMHUB_WEBHOOK_SECRET (several ``v1`` during a secret
  rotation); a signature more than 5 minutes off the current time is refused, so a
  captured webhook cannot be replayed later (replayed within the tolerance it only asks
  for one more reconcile, which changes nothing).

An issue reports the reference (``on_reference``) as soon as the order is created, then
polls the order for up to ESIMHUB_POLL_S; a profile not ready by then is ``processing``
and the webhook (or the fallback check) finishes the order.

Classification (what the store-fulfillment job does with each is in
docs/state-machines.md#store-orders):

- no connection (refused, DNS, connect timeout: the request never left) → transient
- HTTP 429 and 5xx → transient
- 409 ``out_of_stock`` → :class:`~providers.esim.OutOfStock`
- any other 4xx (401 bad key, 404 unknown product, 422 …) → terminal, ``error_code`` the
  provider's code
- a request sent but not answered (read timeout, connection dropped) and a 2xx whose body
  cannot be read → :class:`EsimhubUnconfirmed`, *unclassified* on purpose: eSIMHub may
  have the order, and the job keeps it ``in_flight`` so its next attempt reconciles by
  our order id. Not *ambiguous*: an order parked ``reconciliation_required`` without a
  reference would wait for a webhook that nothing could ask for.
- a readable answer with a status herald does not know → ambiguous, with the reference
- ESIMHUB_BASE_URL or ESIMHUB_API_KEY unset → terminal ``not_configured``
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote

import httpx

from herald.settings import Settings, get_settings
from providers.esim import (
    AmbiguousEsimError,
    CatalogProduct,
    HealthReading,
    InvalidWebhook,
    IssueRequest,
    OutOfStock,
    Profile,
    ProviderOrder,
    ProviderOrderStatus,
    StatusWebhook,
    TerminalEsimError,
    TransientEsimError,
)

#: The webhook signature header.
SIGNATURE_HEADER = "x-esimhub-signature"
#: How far a webhook's signed time may be from ours (s).
SIGNATURE_TOLERANCE_S = 300
#: Pause between two looks at an order while waiting for its profile (s).
POLL_INTERVAL_S = 0.2
#: eSIMHub's order statuses, as the plugin contract names them.
STATUSES = {"processing": ProviderOrderStatus.PROCESSING,
            "issued": ProviderOrderStatus.ISSUED,
            "pending_verification": ProviderOrderStatus.PENDING_VERIFICATION,
            "failed": ProviderOrderStatus.FAILED}


class EsimhubUnconfirmed(Exception):
    """A request eSIMHub may have acted on without herald knowing the outcome (sent and
    not answered, or answered with a body that cannot be read). Deliberately not an
    :class:`~providers.esim.EsimError`."""


class EsimhubProvider:
    """eSIMHub over HTTP; one pooled client per settings object."""

    name = "esimhub"
    supports_idempotency_keys = True

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings or get_settings()
        s = self._settings
        self._configured = bool(s.esimhub_base_url and s.esimhub_api_key)
        # httpx.Client is safe to share between threads
        self._http = httpx.Client(base_url=s.esimhub_base_url.rstrip("/"),
                                  timeout=s.esimhub_timeout_s,
                                  headers={"Authorization": f"Bearer {s.esimhub_api_key}"})

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # -- orders ----------------------------------------------------------------------------
    def issue(self, request: IssueRequest, *,
              on_reference: Callable[[str], None]) -> ProviderOrder:
        """Create the order (the idempotency key makes a repeat answer with the first one),
        report its reference, then wait up to ESIMHUB_POLL_S for the profile."""
        key = request.idempotency_key or request.order_id
        created = self._call("POST", "/v1/orders",
                             json={"product_id": request.product_id,
                                   "client_reference": request.order_id},
                             headers={"Idempotency-Key": key})
        order = _order(created)
        assert order.provider_order_ref is not None  # _order refuses an order without one
        on_reference(order.provider_order_ref)
        return self._await_profile(order)

    def reconcile(self, request: IssueRequest) -> ProviderOrder:
        """What eSIMHub knows of the order: by reference when one was persisted, else by
        our order id (``client_reference``); ``NOT_FOUND`` when it has none. Never charges."""
        if request.provider_order_ref:
            return self._order(request.provider_order_ref)
        found = self._call("GET", "/v1/orders",
                           params={"client_reference": request.order_id})
        orders = found.get("orders") if isinstance(found, dict) else None
        if not isinstance(orders, list):
            raise EsimhubUnconfirmed("eSIMHub's order search answered without an order list")
        if not orders:
            return ProviderOrder(status=ProviderOrderStatus.NOT_FOUND)
        return _order(orders[0])

    def _order(self, reference: str) -> ProviderOrder:
        """One order by reference; ``NOT_FOUND`` on a 404."""
        try:
            return _order(self._call("GET", f"/v1/orders/{quote(reference, safe='')}"))
        except TerminalEsimError as error:
            if error.code == "not_found":
                return ProviderOrder(status=ProviderOrderStatus.NOT_FOUND,
                                     provider_order_ref=reference)
            raise

    def _await_profile(self, order: ProviderOrder) -> ProviderOrder:
        """Look at a processing order until it is no longer processing or the poll window
        ends; a look that fails leaves it processing (the reference is persisted)."""
        deadline = time.monotonic() + self._settings.esimhub_poll_s
        assert order.provider_order_ref is not None  # _order refuses an order without one
        while order.status is ProviderOrderStatus.PROCESSING and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL_S)
            try:
                order = self._order(order.provider_order_ref)
            except (TransientEsimError, EsimhubUnconfirmed):
                break  # the order exists; the webhook or a reconcile will read it
        return order

    # -- catalog and health ------------------------------------------------------------------
    def catalog(self) -> list[CatalogProduct]:
        """The products eSIMHub sells now; a malformed entry fails the whole sync."""
        body = self._call("GET", "/v1/products")
        try:
            return [CatalogProduct(id=str(p["id"]), name=str(p["name"]),
                                   price=Decimal(str(p["price"])),
                                   currency=str(p["currency"]).upper())
                    for p in body["products"]]
        except (KeyError, TypeError, InvalidOperation) as error:
            raise TransientEsimError(f"eSIMHub's catalog is malformed: {error!r}") from None

    def health(self) -> HealthReading:
        """Available while eSIMHub reports ``operational`` or ``degraded``; unreachable or
        ``down`` is unavailable, with the reason."""
        try:
            body = self._call("GET", "/v1/status")
        except Exception as error:  # any failure to answer is an unavailable provider
            return HealthReading(available=False, detail=str(error) or type(error).__name__)
        if not isinstance(body, dict):
            return HealthReading(available=False, detail="unreadable status answer")
        status, message = body.get("status"), body.get("message")
        return HealthReading(available=status in ("operational", "degraded"),
                             detail=message or (None if status == "operational"
                                                else f"status {status!r}"))

    # -- webhooks ------------------------------------------------------------------------------
    def verify_webhook(self, body: bytes, headers: Mapping[str, str]) -> StatusWebhook:
        """Check the ``X-Esimhub-Signature`` (key, body, time within 5 minutes) and read
        ``{"reference", "status"}``; raises :class:`InvalidWebhook` otherwise."""
        secret = self._settings.esimhub_webhook_secret
        if not secret:
            raise InvalidWebhook("ESIMHUB_WEBHOOK_SECRET is not set")
        lowered = {name.lower(): value for name, value in headers.items()}
        signed_at, signatures = _parse_signature(lowered.get(SIGNATURE_HEADER, ""))
        if abs(time.time() - signed_at) > SIGNATURE_TOLERANCE_S:
            raise InvalidWebhook("signature timestamp outside the tolerance")
        expected = webhook_signature(secret, signed_at, body)
        # bytes: compare_digest refuses a str that is not ASCII (a crafted header)
        if not any(hmac.compare_digest(expected.encode(), given.encode())
                   for given in signatures):
            raise InvalidWebhook("signature does not match")
        try:
            event = json.loads(body)
            reference, status = event["reference"], event["status"]
        except (ValueError, KeyError, TypeError):
            raise InvalidWebhook("body is not an eSIMHub order event") from None
        if not isinstance(reference, str) or not reference or not isinstance(status, str):
            raise InvalidWebhook("body is not an eSIMHub order event")
        return StatusWebhook(provider_order_ref=reference, status=status)

    # -- one request, classified ---------------------------------------------------------------
    def _call(self, method: str, path: str, **options: Any) -> Any:
        """Send one request and return its JSON body, or raise a classified error (see the
        module's docstring)."""
        if not self._configured:
            raise TerminalEsimError("ESIMHUB_BASE_URL and ESIMHUB_API_KEY are required",
                                    code="not_configured")
        try:
            response = self._http.request(method, path, **options)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
            raise TransientEsimError(f"eSIMHub unreachable: {type(error).__name__}") from None
        except httpx.TransportError as error:  # sent: eSIMHub may have acted on it
            raise EsimhubUnconfirmed(f"eSIMHub did not answer: {type(error).__name__}") \
                from None
        if response.is_success:
            try:
                return response.json()
            except ValueError:
                raise EsimhubUnconfirmed(f"eSIMHub answered {response.status_code} with a "
                                         "body that is not JSON") from None
        raise _http_error(response)


def _http_error(response: httpx.Response) -> Exception:
    """The classified error of a non-2xx answer."""
    try:
        error = response.json().get("error") or {}
        code, message = str(error.get("code") or ""), str(error.get("message") or "")
    except (ValueError, AttributeError):
        code, message = "", ""
    status = response.status_code
    text = f"eSIMHub answered {status}" + (f" {code}: {message}" if code else "")
    if status == 429 or status >= 500:
        return TransientEsimError(text)
    if status == 409 and code == "out_of_stock":
        return OutOfStock(text)
    return TerminalEsimError(text, code=code or ("not_found" if status == 404 else None))


def _order(body: Any) -> ProviderOrder:
    """An eSIMHub order as the plugin contract reads it."""
    if not isinstance(body, dict) or not isinstance(body.get("reference"), str):
        raise EsimhubUnconfirmed("eSIMHub's order has no reference")
    reference = body["reference"]
    status = STATUSES.get(str(body.get("status")))
    if status is None:
        raise AmbiguousEsimError(f"eSIMHub order status {body.get('status')!r} is unknown",
                                 provider_order_ref=reference)
    error: dict[str, Any] = body["error"] if isinstance(body.get("error"), dict) else {}
    return ProviderOrder(status=status, provider_order_ref=reference,
                         profile=_profile(body.get("profile"), reference) if status is
                         ProviderOrderStatus.ISSUED else None,
                         verification_url=body.get("verification_url"),
                         error_code=error.get("code"), reason=error.get("message"))


def _profile(profile: Any, reference: str) -> Profile:
    """The issued profile; an issued order without one cannot be used yet."""
    try:
        return Profile(iccid=str(profile["iccid"]),
                       activation_code=str(profile["activation_code"]),
                       smdp_address=str(profile["smdp_address"]))
    except (KeyError, TypeError):
        raise AmbiguousEsimError("eSIMHub reports the order issued without its profile",
                                 provider_order_ref=reference) from None


def webhook_signature(secret: str, signed_at: int, body: bytes) -> str:
    """The hex HMAC-SHA256 eSIMHub puts in ``v1=``: keyed with the webhook secret, over
    ``"<signed_at>.<body>"``."""
    return hmac.new(secret.encode(), str(signed_at).encode() + b"." + body,
                    hashlib.sha256).hexdigest()


def _parse_signature(header: str) -> tuple[int, list[str]]:
    """``t=<unix>,v1=<hex>[,v1=<hex>…]`` → (t, [hex, …]); InvalidWebhook when malformed."""
    signed_at: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        # ASCII digits only (isdigit() accepts "²"), and no more than a timestamp has
        if name == "t" and value.isascii() and value.isdigit() and len(value) <= 12:
            signed_at = int(value)
        elif name == "v1" and value:
            signatures.append(value)
    if signed_at is None or not signatures:
        raise InvalidWebhook("missing or malformed X-Esimhub-Signature")
    return signed_at, signatures
