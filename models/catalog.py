"""What the catalog syncs keep: eSIM products, operator packages, each provider's health
reading, and exchange rates (docs/state-machines.md#catalog).

Prices are stored in the currency the provider quotes; the ``fx_rates`` rows convert them
(one rate per currency: units per US dollar).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, Numeric, UniqueConstraint, delete, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Field, Session, SQLModel, col, select

from herald.db import session as db_session
from models.base import UtcDateTime, id_field, timestamp_field


class StoreProduct(SQLModel, table=True):
    """An eSIM product as its provider's last catalog sync listed it."""

    __tablename__ = "store_products"

    #: The provider's product id (the mock's are ``mock-ok``, ``mock-transient``, ...).
    id: str = Field(primary_key=True, max_length=64)
    provider: str = Field(max_length=32, index=True)
    name: str = Field(max_length=255)
    price: Decimal = Field(sa_type=Numeric(18, 4))
    currency: str = Field(max_length=3)
    #: False once a sync no longer lists it (kept: orders refer to it).
    active: bool = True
    synced_at: datetime = timestamp_field()


class OperatorPackage(SQLModel, table=True):
    """A telecom operator's package as the last package sync listed it."""

    __tablename__ = "operator_packages"
    __table_args__ = (UniqueConstraint("operator_slug", "code", name="uq_operator_packages_code"),)

    id: str = id_field()
    operator_slug: str = Field(max_length=32, index=True)
    #: The operator's own package code (unique per operator).
    code: str = Field(max_length=64)
    name: str = Field(max_length=255)
    price: Decimal = Field(sa_type=Numeric(18, 4))
    currency: str = Field(max_length=3)
    active: bool = True
    synced_at: datetime = timestamp_field()


class ProviderHealth(SQLModel, table=True):
    """An eSIM provider's health reading, refreshed after every catalog sync: the checkout
    circuit breaker refuses orders for a provider that is not available."""

    __tablename__ = "provider_health"

    provider: str = Field(primary_key=True, max_length=32)
    available: bool = True
    #: Why it is unavailable (or the last error), for operators.
    detail: str | None = Field(default=None, max_length=500)
    checked_at: datetime = timestamp_field()


class FxRate(SQLModel, table=True):
    """How many units of ``currency`` one US dollar buys, as last fetched."""

    __tablename__ = "fx_rates"

    currency: str = Field(primary_key=True, max_length=3)
    rate: Decimal = Field(sa_type=Numeric(24, 10))
    provider: str = Field(max_length=32)
    fetched_at: datetime = Field(sa_type=UtcDateTime, nullable=False)


# -- the writes of the catalog syncs and the FX refresh ------------------------------------
#: Written in place of a provider's reading when its provider is no longer enabled.
NOT_ENABLED = "not enabled (ESIM_PROVIDERS)"


def upsert(session: Session, model: type[SQLModel], rows: Sequence[dict[str, Any]],
           keys: Sequence[str], *, keep: Collection[str] = ()) -> None:
    """Insert ``rows`` of ``model``, updating the row already stored under the same
    ``keys`` instead (``keep``: columns a stored row keeps, such as its id). One
    statement, so two writers racing on a new key never fail on it."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    statement = insert(model).values(list(rows))
    changes = {name: statement.excluded[name] for name in rows[0]
               if name not in keys and name not in keep}
    session.execute(statement.on_conflict_do_update(index_elements=list(keys), set_=changes))


def deactivate_unlisted(session: Session, key: Any, listed: Collection[str],
                        owned: ColumnElement[bool]) -> int:
    """Mark the ``owned`` active rows whose ``key`` column is not in ``listed`` inactive
    (kept: orders and activations refer to them); returns how many changed."""
    model = key.class_
    result = session.exec(
        update(model).where(owned, model.active.is_(True), key.not_in(list(listed)))
        .values(active=False))
    return int(result.rowcount or 0)


def record_health(session: Session, readings: Mapping[str, tuple[bool, str | None]],
                  now: datetime) -> None:
    """Store each provider's reading (available, detail), checked at ``now``."""
    upsert(session, ProviderHealth,
           [{"provider": name, "available": available,
             "detail": detail[:500] if detail else None, "checked_at": now}
            for name, (available, detail) in readings.items()],
           ["provider"])


def disable_missing_providers(session: Session, enabled: Collection[str],
                              now: datetime) -> int:
    """Mark the readings of providers no longer enabled unavailable, so the checkout
    refuses their products; returns how many changed."""
    result = session.exec(
        update(ProviderHealth)
        .where(col(ProviderHealth.provider).not_in(list(enabled)),
               col(ProviderHealth.detail).is_distinct_from(NOT_ENABLED))
        .values(available=False, detail=NOT_ENABLED, checked_at=now))
    return int(result.rowcount or 0)


def unavailable_reason(provider: str, session: Session | None = None) -> str | None:
    """Why the checkout's circuit breaker refuses orders for the provider's products (its
    last health reading says it takes no orders), or None when it does not. A provider
    never read yet counts as available: its first catalog sync writes its first reading.
    Reads in ``session`` when given, else in a session of its own."""
    if session is None:
        with db_session() as own:
            return unavailable_reason(provider, own)
    return health_reason(session.get(ProviderHealth, provider))


def health_reason(reading: ProviderHealth | None) -> str | None:
    """:func:`unavailable_reason` of a provider whose health reading is ``reading`` (None:
    never read), for a caller that read it with other rows."""
    if reading is None or reading.available:
        return None
    return reading.detail or "its health check failed"


def stored_rates(session: Session, *, lock: bool = False) -> dict[str, Decimal]:
    """The stored rates, currency → units per US dollar (``lock``: held until commit)."""
    query = select(FxRate)
    if lock and session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    return {row.currency: row.rate for row in session.exec(query)}


def replace_rates(session: Session, rates: Mapping[str, Decimal], provider: str,
                  fetched_at: datetime) -> None:
    """Make ``rates`` the stored rates: each one written, any other currency removed
    (a currency no longer refreshed must not price anything with a stale rate)."""
    upsert(session, FxRate, [{"currency": currency, "rate": rate, "provider": provider,
                              "fetched_at": fetched_at} for currency, rate in rates.items()],
           ["currency"])
    session.execute(delete(FxRate).where(col(FxRate.currency).not_in(list(rates))))
