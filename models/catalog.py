"""What the catalog syncs keep: eSIM products, operator packages, each provider's health
reading, and exchange rates (docs/state-machines.md#catalog).

Prices are stored in the currency the provider quotes; the ``fx_rates`` rows convert them
(one rate per currency: units per US dollar).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import Numeric, UniqueConstraint
from sqlmodel import Field, SQLModel

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
