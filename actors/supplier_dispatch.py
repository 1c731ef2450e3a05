"""The ``supplier-dispatch`` lane: transmit one order to one supplier
(docs/suppliers.md#purchase-orders).

Jobs are added by the outbox relay (an order's dispatches, a reroute's) and by the
stale-dispatch sweep, always through :func:`enqueue_supplier_dispatch`: deduplicated by
``dispatch:{orderId}:{supplierType}`` (plus a reroute's suffix), in the group of their
supplier type, so Sysco's uploads run one at a time across every worker while the
other types use the rest of the queue's slots.
"""

from __future__ import annotations

import logging
from typing import Any

from actors import queues as _queues  # noqa: F401  (declares the queue)
from herald.queue import EnqueueResult, actor, enqueue
from models.supplier_jobs import SupplierDispatchJob

log = logging.getLogger("herald.suppliers")

QUEUE = "supplier-dispatch"


@actor(queue=QUEUE, payload=SupplierDispatchJob)
def dispatch_to_supplier(job: SupplierDispatchJob) -> dict[str, Any]:
    """Transmit the dispatch ``job.dispatch_id`` to its supplier, at most once."""
    raise NotImplementedError


def enqueue_supplier_dispatch(payload: SupplierDispatchJob | dict[str, Any], *,
                              dedup_id: str) -> EnqueueResult:
    """Add the dispatch's job (validated first; nothing is added when it fails), held
    by ``dedup_id`` until it ends, in its supplier type's group. A live job holding
    the key makes this a no-op reported ``deduplicated``."""
    job = (payload if isinstance(payload, SupplierDispatchJob)
           else SupplierDispatchJob.model_validate(payload))
    return enqueue(dispatch_to_supplier, job, dedup_id=dedup_id, group=job.supplier_type)
