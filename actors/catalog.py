"""The catalog syncs: one engine, two thin syncs (docs/pipeline.md#catalog-sync).

- ``esim-product-sync`` copies each enabled eSIM provider's catalog (``ESIM_PROVIDERS``)
  into ``store_products``, then refreshes every provider's health reading in
  ``provider_health`` — the checkout's circuit breaker.
- ``package-sync`` copies each enabled telecom operator's packages (``OPERATORS``) into
  ``operator_packages``.

The engine (:func:`sync_catalog`) gives every owner — a provider or an operator — its
own transaction: one owner failing (its fetch raises, its listing is invalid, its writes
fail) is logged with the owner's name and leaves the others synced; only when every owner
fails does it raise, so the queue retries the job. A product or package an owner no
longer lists is kept, marked ``active = false``; listed again, it is active again.

The clock runs both syncs every ``CATALOG_SYNC_INTERVAL_S`` and once at its start; the
eSIM sync only while ``FEATURE_ESIM_STORE`` is on (package sync feeds activations, which
are not part of the store, so it always runs).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from sqlmodel import Session, col, select

from actors.fx import UnratedCurrency, convert, current_rates
from actors.queues import esim_store_enabled, registry
from herald.db import session as db_session
from herald.queue import Schedule
from herald.settings import get_settings
from models.base import new_id, utcnow
from models.catalog import (
    OperatorPackage,
    StoreProduct,
    deactivate_unlisted,
    disable_missing_providers,
    record_health,
    upsert,
)
from providers.esim import CatalogProduct, esim_providers
from providers.operators import Package, operators

log = logging.getLogger("herald.catalog")

T = TypeVar("T")

#: An ISO 4217 currency code as catalogs and the API spell it.
CURRENCY_CODE = re.compile(r"[A-Z]{3}")
#: Longest product id and name the tables keep.
MAX_KEY, MAX_NAME = 64, 255


class InvalidListing(ValueError):
    """An owner's listing that cannot be stored; nothing of that owner is written."""


class CatalogSyncFailed(RuntimeError):
    """Every owner of a sync failed (the job is retried)."""


# -- the engine -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Counts:
    """What one owner's sync did: items listed, of those new, and rows deactivated."""

    listed: int
    added: int
    deactivated: int


@dataclasses.dataclass(frozen=True)
class OwnerResult:
    """One owner's outcome: its counts, or the error that stopped it."""

    owner: str
    counts: Counts | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class SyncReport:
    """Every owner's outcome of one run of a sync."""

    sync: str
    results: list[OwnerResult]

    @property
    def failed(self) -> dict[str, str]:
        """Owner → error, for the owners that failed."""
        return {r.owner: r.error for r in self.results if r.error is not None}

    def as_dict(self) -> dict[str, Any]:
        """The job's return value: owner → counts, or owner → ``{"error": …}``."""
        return {r.owner: dataclasses.asdict(r.counts) if r.counts else {"error": r.error}
                for r in self.results}

    def raise_if_all_failed(self) -> None:
        """Raise :class:`CatalogSyncFailed` when there were owners and every one failed."""
        if self.results and len(self.failed) == len(self.results):
            raise CatalogSyncFailed(f"{self.sync}: every owner failed: " + "; ".join(
                f"{owner}: {error}" for owner, error in self.failed.items()))


def run_sync(sync: str, owners: Sequence[str], fetch: Callable[[str], Sequence[T]],
             apply: Callable[[Session, str, Sequence[T]], Counts]) -> SyncReport:
    """Sync each owner in turn: ``fetch(owner)`` outside any transaction, then
    ``apply(session, owner, items)`` in a transaction of its own. Never raises for an
    owner's failure: it is logged with the owner and reported."""
    results = []
    for owner in owners:
        try:
            items = fetch(owner)
            with db_session() as session:
                counts = apply(session, owner, items)
        except Exception as error:  # any failure of one owner: the others still sync
            message = describe(error)
            log.warning("catalog sync of %s failed: %s", owner, message,
                        extra={"sync": sync, "owner": owner})
            results.append(OwnerResult(owner, error=message))
        else:
            log.info("catalog synced", extra={"sync": sync, "owner": owner,
                                              **dataclasses.asdict(counts)})
            results.append(OwnerResult(owner, counts=counts))
    return SyncReport(sync, results)


def describe(error: BaseException) -> str:
    """An error as one short line: its type and the first line of its message (for a
    database error, the driver's own, not the statement)."""
    cause = getattr(error, "orig", None) or error
    first_line = (str(cause).strip().splitlines() or [""])[0]
    return f"{type(cause).__name__}: {first_line}"[:300]


def sync_catalog(sync: str, owners: Sequence[str], fetch: Callable[[str], Sequence[T]],
                 apply: Callable[[Session, str, Sequence[T]], Counts]) -> SyncReport:
    """:func:`run_sync`, raising :class:`CatalogSyncFailed` when every owner failed."""
    report = run_sync(sync, owners, fetch, apply)
    report.raise_if_all_failed()
    return report


def check_listing(owner: str, entries: Sequence[tuple[str, str, Decimal, str]]) -> None:
    """Refuse a listing (key, name, price, currency per item) with a duplicate or empty
    key, an over-long key or name, a price that is not a positive finite number, or a
    currency that is not an ISO code: :class:`InvalidListing`."""
    seen: set[str] = set()
    for key, name, price, currency in entries:
        if not key or len(key) > MAX_KEY or key in seen:
            raise InvalidListing(f"{owner}: empty, over-long or repeated key {key[:80]!r}")
        if len(name) > MAX_NAME:
            raise InvalidListing(f"{owner}: name of {key!r} is over {MAX_NAME} characters")
        if not isinstance(price, Decimal) or not price.is_finite() or price <= 0:
            raise InvalidListing(f"{owner}: price of {key!r} is not a positive number")
        if not CURRENCY_CODE.fullmatch(currency):
            raise InvalidListing(f"{owner}: currency of {key!r} is not an ISO code")
        seen.add(key)


# -- the eSIM product sync --------------------------------------------------------------------
def fetch_products(provider: str) -> list[CatalogProduct]:
    """The catalog of the enabled plugin ``provider``."""
    return esim_providers.get(provider).catalog()


def apply_products(session: Session, provider: str,
                   products: Sequence[CatalogProduct]) -> Counts:
    """Store ``provider``'s listing in ``store_products``; products it no longer lists are
    deactivated. A product id another provider already holds refuses the listing."""
    check_listing(provider, [(p.id, p.name, p.price, p.currency) for p in products])
    ids = [p.id for p in products]
    held = dict(session.exec(select(StoreProduct.id, StoreProduct.provider)
                             .where(col(StoreProduct.id).in_(ids))).all())
    taken = sorted(product_id for product_id, owner in held.items() if owner != provider)
    if taken:
        raise InvalidListing(f"{provider}: product ids held by another provider: {taken}")
    now = utcnow()
    upsert(session, StoreProduct, [
        {"id": p.id, "provider": provider, "name": p.name, "price": p.price,
         "currency": p.currency, "active": True, "synced_at": now} for p in products], ["id"])
    deactivated = deactivate_unlisted(session, StoreProduct.id, ids,
                                      col(StoreProduct.provider) == provider)
    return Counts(listed=len(ids), added=len(ids) - len(held), deactivated=deactivated)


def refresh_health(report: SyncReport) -> dict[str, dict[str, Any]]:
    """Write each enabled provider's health reading: its plugin's ``health()``, except
    that a provider whose health call or catalog fetch failed is unavailable with the
    reason. Providers no longer enabled are marked unavailable. Returns the readings."""
    readings: dict[str, tuple[bool, str | None]] = {}
    for provider in esim_providers.enabled():
        try:
            reading = esim_providers.get(provider).health()
            readings[provider] = (reading.available, reading.detail)
        except Exception as error:  # an unreachable provider is an unavailable one
            readings[provider] = (False, f"health check failed: {describe(error)}")
        if provider in report.failed:
            readings[provider] = (False, f"catalog sync failed: {report.failed[provider]}")
    now = utcnow()
    with db_session() as session:
        record_health(session, readings, now)
        disable_missing_providers(session, list(readings), now)
    for provider, (available, detail) in readings.items():
        if not available:
            log.warning("eSIM provider unavailable: %s", detail, extra={"provider": provider})
    return {name: {"available": available, "detail": detail}
            for name, (available, detail) in readings.items()}


def sync_esim_products() -> dict[str, Any]:
    """One run of the eSIM sync: every enabled provider's catalog, then every provider's
    health reading (written even when every catalog failed, before that raises)."""
    report = run_sync("esim-product-sync", esim_providers.enabled(), fetch_products,
                      apply_products)
    health = refresh_health(report)
    report.raise_if_all_failed()
    return {"owners": report.as_dict(), "health": health}


# -- the operator package sync -----------------------------------------------------------------
def fetch_packages(operator: str) -> list[Package]:
    """The packages of the enabled operator adapter ``operator``."""
    return operators.get(operator).packages()


def apply_packages(session: Session, operator: str, packages: Sequence[Package]) -> Counts:
    """Store ``operator``'s packages in ``operator_packages`` (keyed by its own code);
    packages it no longer lists are deactivated."""
    check_listing(operator, [(p.code, p.name, p.price, p.currency) for p in packages])
    codes = [p.code for p in packages]
    known = set(session.exec(select(OperatorPackage.code).where(
        col(OperatorPackage.operator_slug) == operator,
        col(OperatorPackage.code).in_(codes))).all())
    now = utcnow()
    upsert(session, OperatorPackage, [
        {"id": new_id(), "operator_slug": operator, "code": p.code, "name": p.name,
         "price": p.price, "currency": p.currency, "active": True, "synced_at": now}
        for p in packages], ["operator_slug", "code"], keep={"id"})
    deactivated = deactivate_unlisted(session, OperatorPackage.code, codes,
                                      col(OperatorPackage.operator_slug) == operator)
    return Counts(listed=len(codes), added=len(codes) - len(known), deactivated=deactivated)


def sync_operator_packages() -> dict[str, Any]:
    """One run of the package sync over every enabled operator."""
    report = sync_catalog("package-sync", operators.enabled(), fetch_packages, apply_packages)
    return {"owners": report.as_dict()}


# -- reading the catalog -----------------------------------------------------------------------
def price_text(amount: Decimal) -> str:
    """A price as the API writes it: at least two decimals, no trailing zeros past them."""
    cents = amount.quantize(Decimal("0.01"))
    return str(cents) if cents == amount else str(amount.normalize())


def list_products(currency: str | None = None) -> list[dict[str, str]]:
    """The active products of the enabled providers, by provider then id; with
    ``currency`` every price is converted (:func:`actors.fx.convert`), else each is in
    its own currency. Raises :class:`actors.fx.UnratedCurrency` naming a currency
    without a rate."""
    with db_session() as session:
        products = session.exec(
            select(StoreProduct)
            .where(col(StoreProduct.active).is_(True),
                   col(StoreProduct.provider).in_(esim_providers.enabled()))
            .order_by(StoreProduct.provider, StoreProduct.id)).all()
        rates = current_rates(session) if currency else {}
    if currency and currency not in rates:
        raise UnratedCurrency(currency)  # named even when no product needs converting
    return [_product_view(product, currency, rates) for product in products]


def product_price(product: StoreProduct, currency: str | None,
                  rates: Mapping[str, Decimal]) -> tuple[Decimal, str]:
    """``(price, currency)`` of ``product`` as the catalog shows it: in its own currency
    when ``currency`` is None, else converted through ``rates`` by
    :func:`actors.fx.convert` (rounded half-up to cents). An order placed in a currency
    is priced by this same function, so it costs what the catalog listed. Raises
    :class:`actors.fx.UnratedCurrency` when ``currency`` has no rate."""
    if not currency:
        return product.price, product.currency
    if currency not in rates:
        raise UnratedCurrency(currency)  # named even when no conversion is needed
    return convert(product.price, product.currency, currency, rates), currency


def _product_view(product: StoreProduct, currency: str | None,
                  rates: Mapping[str, Decimal]) -> dict[str, str]:
    price, shown = product_price(product, currency, rates)
    return {"id": product.id, "provider": product.provider, "name": product.name,
            "price": price_text(price), "currency": shown}


# -- the jobs and their schedules --------------------------------------------------------------
class SyncJob(BaseModel):
    """A catalog sync carries nothing: it asks every enabled owner."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue="esim-product-sync", payload=SyncJob)
def sync_esim_products_job(job: SyncJob) -> dict[str, Any]:
    """One eSIM catalog sync and health refresh as a job (:func:`sync_esim_products`)."""
    return sync_esim_products()


@registry.actor(queue="package-sync", payload=SyncJob)
def sync_operator_packages_job(job: SyncJob) -> dict[str, Any]:
    """One operator package sync as a job (:func:`sync_operator_packages`)."""
    return sync_operator_packages()


_every = timedelta(seconds=get_settings().catalog_sync_interval_s)
registry.schedule(Schedule(name="esim-product-sync", actor=sync_esim_products_job, every=_every,
                           feature_gate=esim_store_enabled, run_at_start=True))
registry.schedule(Schedule(name="package-sync", actor=sync_operator_packages_job, every=_every,
                           run_at_start=True))
