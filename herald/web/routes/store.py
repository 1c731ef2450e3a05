"""``/v1/store``: placing an eSIM order, reading it, and the eSIM providers' signed status
webhooks (docs/state-machines.md#store-orders). The work is in ``actors.store``.

The order routes are behind API_TOKEN; the webhooks are authenticated by the provider's
signature instead (providers cannot send the token), like ``/v1/callbacks``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from actors import store
from actors.fx import UnratedCurrency
from herald.text import SingleLine
from herald.web.auth import protected_router
from herald.web.body_limit import read_body_up_to
from herald.web.errors import api_error, found, not_found
from herald.web.routes.callbacks import require_mock_configured
from providers.esim import InvalidWebhook, InvalidWebhookBody

router: APIRouter = protected_router(["store"])
#: Signed by each provider, not behind the bearer token.
webhooks = APIRouter(prefix="/v1", tags=["store"])


class OrderIn(BaseModel):
    """An eSIM order: who buys which product of the synced catalog."""

    model_config = ConfigDict(extra="forbid")
    account_id: SingleLine = Field(min_length=1, max_length=36)
    product_id: SingleLine = Field(min_length=1, max_length=64)
    #: Price the order in this currency at the latest exchange rates (what
    #: ``GET /v1/store/products?currency=`` lists); none: the product's own currency.
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$",
                                 description="ISO 4217 code, upper case (EUR)")


@router.post("/store/orders", status_code=201, summary="Place an eSIM order")
def place_order(body: OrderIn) -> dict[str, Any]:
    """201 with the order (``pending_payment``, issuance ``pending``) at the product's
    price, or at the catalog's price in ``currency`` (locked on the order); 404 for an
    unknown account or product, 409 when the product's provider is unavailable or the
    store is off, 422 ``unknown_currency`` for a currency with no exchange rate. A
    refused order persists nothing."""
    try:
        return store.place_order(body.account_id, body.product_id, body.currency)
    except store.StoreDisabled as error:
        raise api_error(409, "store_disabled", str(error)) from None
    except store.AccountNotFound:
        raise not_found("account", body.account_id) from None
    except store.ProductNotFound:
        raise api_error(404, "product_not_found",
                        f"no product with id {body.product_id} on sale") from None
    except store.ProviderUnavailable as error:
        raise api_error(409, "provider_unavailable", str(error)) from None
    except UnratedCurrency as error:
        raise api_error(422, "unknown_currency", str(error)) from None


@router.get("/store/orders/{order_id}", summary="An eSIM order and its status events")
def get_order(order_id: str) -> dict[str, Any]:
    """The order with its issuance state, profile (once issued) and status events, oldest
    first."""
    return found(store.get_order(order_id), "order", order_id)


@webhooks.post(
    "/store/webhooks/{provider}", status_code=202,
    summary="An eSIM provider's signed order-status webhook (mock)",
    responses={202: {"description": "A reconcile of the order is queued"}})
async def post_webhook(provider: str, request: Request) -> JSONResponse:
    """Verify the provider's signature and queue a reconcile of the order it names; the
    webhook itself never changes the order's issuance. 401 a bad signature, 422 a signed
    body that cannot be read, 404 an unknown provider (the mock while it is not
    configured) or order reference, 413 a body over 64 KiB: none of them changes
    anything."""
    if provider == "mock":
        require_mock_configured()
    body = await read_body_up_to(request)
    try:
        # database and queue work: off the event loop
        order_id = await run_in_threadpool(store.receive_webhook, provider, body,
                                           dict(request.headers))
    except store.UnknownEsimProvider:
        raise api_error(404, "unknown_provider", f"no eSIM provider {provider!r} is "
                        "enabled") from None
    except InvalidWebhookBody as error:
        raise api_error(422, "invalid_webhook", str(error)) from None
    except InvalidWebhook as error:
        raise api_error(401, "invalid_signature", str(error)) from None
    except store.UnknownReference:
        raise api_error(404, "order_not_found", "no order has that provider reference"
                        ) from None
    return JSONResponse({"order_id": order_id, "reconcile": "queued"}, status_code=202)
