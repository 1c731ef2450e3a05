"""The ``backorder-reroute`` lane: move a back-ordered line to its alternate supplier
(docs/suppliers.md#purchase-orders).

Jobs are added by the inbound acknowledgment processing (an 855 that back-orders a line)
and by an operator (``POST /admin/backorders/{lineItemId}/reroute``), through
:func:`enqueue_backorder_reroute`, deduplicated by
``reroute:{lineItemId}:{originalSupplierId}``.
"""

from __future__ import annotations

import logging
from typing import Any

from actors import queues as _queues  # noqa: F401  (declares the queue)
from herald.queue import EnqueueResult, actor, enqueue
from models.supplier_jobs import BackorderRerouteJob, reroute_dedup_id

log = logging.getLogger("herald.suppliers")

QUEUE = "backorder-reroute"


@actor(queue=QUEUE, payload=BackorderRerouteJob)
def reroute_backorder(job: BackorderRerouteJob) -> dict[str, Any]:
    """Decide what becomes of the back-ordered line ``job.line_item_id``."""
    raise NotImplementedError


def enqueue_backorder_reroute(payload: BackorderRerouteJob | dict[str, Any]) -> EnqueueResult:
    """Add the reroute's job (validated first; nothing is added when it fails), held by
    ``reroute:{lineItemId}:{originalSupplierId}`` until it ends: a second reroute of
    the same back-order while one is live is reported ``deduplicated``."""
    job = (payload if isinstance(payload, BackorderRerouteJob)
           else BackorderRerouteJob.model_validate(payload))
    return enqueue(reroute_backorder, job,
                   dedup_id=reroute_dedup_id(str(job.line_item_id), str(job.original_supplier_id)))
