"""Helpers of the catalog tests: run one job through a real worker, read the tables."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from sqlmodel import select

from herald.db import session
from herald.queue import Job, JobActor, enqueue, queue, running_worker
from models.catalog import FxRate, OperatorPackage, ProviderHealth, StoreProduct
from tests.support.waiting import wait_for

FINISHED = ("completed", "failed")


def run_job(job_actor: JobActor[Any], timeout: float = 30.0) -> Job:
    """Add one job of ``job_actor``, run its queue in a real worker until the job has
    finished (completed, or failed for good), and return its record."""
    job_id = f"test-{uuid.uuid4().hex[:12]}"
    enqueue(job_actor, {}, job_id=job_id)
    jobs = queue(job_actor.queue)
    with running_worker([job_actor.queue]):
        wait_for(lambda: jobs.get(job_id).state in FINISHED, timeout=timeout,
                 what=f"job {job_id} to finish")
    return jobs.get(job_id)


def products() -> dict[str, tuple[str, Decimal, str, bool]]:
    """store_products: id → (provider, price, currency, active)."""
    with session() as db:
        return {p.id: (p.provider, p.price, p.currency, p.active)
                for p in db.exec(select(StoreProduct))}


def packages() -> dict[tuple[str, str], tuple[Decimal, bool]]:
    """operator_packages: (operator, code) → (price, active)."""
    with session() as db:
        return {(p.operator_slug, p.code): (p.price, p.active)
                for p in db.exec(select(OperatorPackage))}


def health() -> dict[str, tuple[bool, str | None]]:
    """provider_health: provider → (available, detail)."""
    with session() as db:
        return {h.provider: (h.available, h.detail) for h in db.exec(select(ProviderHealth))}


def rates() -> dict[str, Decimal]:
    """fx_rates: currency → rate."""
    with session() as db:
        return {r.currency: r.rate for r in db.exec(select(FxRate))}
