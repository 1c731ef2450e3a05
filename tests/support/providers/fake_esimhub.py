"""A local server speaking eSIMHub's API (providers/esim_http.py), built on
:class:`tests.support.providers.fakes.FakeApi`.

It keeps orders and charges as eSIMHub would: one charge per order created, a repeated
``Idempotency-Key`` answered with the first order. Products script the paths: stock (0 is
out of stock), identity verification, and how many looks an order takes before its
profile is ready. ``hold_next_create()`` makes the next order creation charge and then
withhold its answer until ``release()`` (a call sent but not answered in time).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.providers.fakes import Answer, FakeApi, RecordedRequest


@dataclasses.dataclass
class FakeProduct:
    """One product eSIMHub sells, and how its orders behave."""

    name: str
    price: str
    currency: str = "USD"
    stock: int = 100
    verification: bool = False
    #: Looks (GET of the order) before its profile is ready; 0: issued at creation.
    ready_after_polls: int = 0


def error(code: str, message: str) -> dict[str, Any]:
    """eSIMHub's error body."""
    return {"error": {"code": code, "message": message}}


class FakeEsimhub(FakeApi):
    """eSIMHub's REST API on 127.0.0.1 (use as a context manager)."""

    error_bodies = {
        429: error("rate_limited", "Too many requests"),
        500: error("internal", "Internal server error"),
        503: error("unavailable", "Service temporarily unavailable"),
    }

    def __init__(self, *, api_key: str, products: dict[str, FakeProduct]) -> None:
        super().__init__()
        self.api_key = api_key
        self.products = products
        #: Orders by reference, as eSIMHub answers them (plus the looks they took).
        self.orders: dict[str, dict[str, Any]] = {}
        #: Our order id (client_reference) of every order created: one charge each.
        self.charges: list[str] = []
        #: What GET /v1/status answers.
        self.status = "operational"
        self._by_key: dict[str, str] = {}
        self._hold: threading.Event | None = None

    # -- test controls ---------------------------------------------------------------------
    def answer_next(self, status: int, body: dict[str, Any]) -> None:
        """Answer the next request with exactly this (nothing is created or charged)."""
        with self._lock:
            self._forced.append((status, body))

    def hold_next_create(self) -> None:
        """The next order creation charges, then answers only after :meth:`release`."""
        self._hold = threading.Event()

    def release(self) -> None:
        """Let a held answer go."""
        if self._hold is not None:
            self._hold.set()

    def looks(self, reference: str) -> int:
        """How many times the order was read (GET /v1/orders/{reference})."""
        return sum(1 for r in self.requests
                   if r.method == "GET" and urlsplit(r.path).path == f"/v1/orders/{reference}")

    # -- the API ---------------------------------------------------------------------------
    def answer(self, request: RecordedRequest) -> Answer:
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, error("unauthorized", "Invalid API key")
        url = urlsplit(request.path)
        route = (request.method, url.path)
        if route == ("POST", "/v1/orders"):
            return self._create(request)
        if route == ("GET", "/v1/orders"):
            wanted = parse_qs(url.query).get("client_reference", [""])[0]
            with self._lock:
                found = [self._public(o) for o in self.orders.values()
                         if o["client_reference"] == wanted]
            return 200, {"orders": found}
        if request.method == "GET" and url.path.startswith("/v1/orders/"):
            return self._look(url.path.removeprefix("/v1/orders/"))
        if route == ("GET", "/v1/products"):
            return 200, {"products": [
                {"id": pid, "name": p.name, "price": p.price, "currency": p.currency}
                for pid, p in self.products.items()]}
        if route == ("GET", "/v1/status"):
            return 200, {"status": self.status, "message": None
                         if self.status == "operational" else "Issuing is paused"}
        return 404, error("not_found", "No such route")

    def _create(self, request: RecordedRequest) -> Answer:
        body = request.json()
        product = self.products.get(body.get("product_id", ""))
        if not body.get("client_reference"):
            return 422, error("validation_error", "client_reference is required")
        if product is None:
            return 404, error("product_not_found", "No such product")
        key = request.headers.get("idempotency-key")
        with self._lock:
            if key and key in self._by_key:  # a repeat: the first order, no new charge
                return 200, self._public(self.orders[self._by_key[key]])
            if product.stock <= 0:
                return 409, error("out_of_stock", "The product is sold out")
            product.stock -= 1
            reference = "ehub_" + uuid.uuid4().hex[:20]
            order = {"reference": reference, "client_reference": body["client_reference"],
                     "product_id": body["product_id"], "looks": 0,
                     "status": "processing" if product.ready_after_polls else "issued"}
            if product.verification:
                order["status"] = "pending_verification"
            self.orders[reference] = order
            self.charges.append(body["client_reference"])
            if key:
                self._by_key[key] = reference
            hold, self._hold = self._hold, None
        if hold is not None:
            hold.wait(10)
        return 201, self._public(order)

    def _look(self, reference: str) -> Answer:
        with self._lock:
            order = self.orders.get(reference)
            if order is None:
                return 404, error("not_found", "No such order")
            order["looks"] += 1
            product = self.products[order["product_id"]]
            if order["status"] == "processing" and order["looks"] >= product.ready_after_polls:
                order["status"] = "issued"
            return 200, self._public(order)

    @staticmethod
    def _public(order: dict[str, Any]) -> dict[str, Any]:
        """An order as eSIMHub shows it."""
        issued = order["status"] == "issued"
        digits = int(hashlib.sha256(order["reference"].encode()).hexdigest()[:12], 16)
        return {
            "reference": order["reference"], "client_reference": order["client_reference"],
            "product_id": order["product_id"], "status": order["status"],
            "profile": {"iccid": f"8988{digits:015d}"[:19],
                        "activation_code": f"LPA:1$smdp.esimhub.test${order['reference']}",
                        "smdp_address": "smdp.esimhub.test"} if issued else None,
            "verification_url": f"https://verify.esimhub.test/{order['reference']}"
            if order["status"] == "pending_verification" else None,
            "error": None,
        }


def sign_webhook(secret: str, body: bytes, at: float | None = None) -> dict[str, str]:
    """The headers eSIMHub sends with a webhook signed at ``at`` (default: now)."""
    signed_at = int(time.time() if at is None else at)
    digest = hmac.new(secret.encode(), f"{signed_at}.".encode() + body,
                      hashlib.sha256).hexdigest()
    return {"X-Esimhub-Signature": f"t={signed_at},v1={digest}",
            "Content-Type": "application/json"}
