"""``GET /v1/store/products``: the synced eSIM catalog, prices in a requested currency
(docs/pipeline.md#the-product-catalog); the work is in ``actors.catalog``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from actors import catalog
from actors.fx import UnratedCurrency
from herald.web.auth import protected_router
from herald.web.errors import api_error

router: APIRouter = protected_router(["store"])


@router.get("/store/products", summary="The eSIM catalog")
def list_products(
    currency: Annotated[str | None, Query(
        pattern=r"^[A-Z]{3}$", description="ISO 4217 code, upper case (EUR); prices are "
        "converted through the stored exchange rates, rounded half-up to cents")] = None,
) -> dict[str, list[dict[str, str]]]:
    """``{"products": [{id, provider, name, price, currency}]}``: the active products of
    the enabled providers; 422 for a currency without an exchange rate."""
    try:
        return {"products": catalog.list_products(currency)}
    except UnratedCurrency as error:
        raise api_error(422, "unknown_currency", str(error)) from None
