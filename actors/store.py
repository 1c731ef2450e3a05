"""The store-fulfillment queue: issue the eSIM profile of a paid store order through its
provider plugin, following the issuance state machine
(docs/state-machines.md#store-orders).

``pending → in_flight → issued | failed | reconciliation_required | pending_verification``.
``in_flight`` is committed before every provider call; a run that finds the order
``in_flight``, ``reconciliation_required`` or ``pending_verification`` reconciles through
the plugin instead of issuing again, so a provider without idempotency keys never charges
twice. Every write goes through :func:`models.store.transition_store_order`.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from herald.queue import EnqueueResult, actor, enqueue


class Trigger(StrEnum):
    """What asked for a run; the status events' notes name it."""

    #: The payment settled (the first run).
    PAYMENT = "payment"
    PROVIDER_WEBHOOK = "provider_webhook"
    WEBHOOK_FALLBACK = "webhook_fallback"
    VERIFICATION_DEADLINE = "verification_deadline"
    STALLED_SCAN = "stalled_scan"
    #: An operator (or the payment's replayed settlement) asked again.
    REQUEUE = "requeue"


#: How each trigger reads in a status event's note: ``reconcile (provider webhook)``.
TRIGGER_NOTES: dict[Trigger, str] = {
    Trigger.PAYMENT: "payment settled",
    Trigger.PROVIDER_WEBHOOK: "provider webhook",
    Trigger.WEBHOOK_FALLBACK: "webhook fallback check",
    Trigger.VERIFICATION_DEADLINE: "verification deadline check",
    Trigger.STALLED_SCAN: "stalled order scan",
    Trigger.REQUEUE: "retry or requeue",
}


class StoreJob(BaseModel):
    """A store-fulfillment job carries the order id and what asked for the run."""

    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(min_length=1, max_length=36)
    trigger: Trigger = Trigger.PAYMENT


def issuance_job_id(order_id: str, trigger: Trigger, run_key: str | None = None) -> str:
    """The job id of a run: ``{orderId}-issue`` for the payment's run (one per order, a
    retained failure retried in place), ``{orderId}-{trigger}-{key}`` for the others so
    each recovery or webhook gets a run of its own while a repeat of the same one (same
    key) is deduplicated."""
    if trigger is Trigger.PAYMENT:
        return f"{order_id}-issue"
    key = hashlib.sha256((run_key or "").encode()).hexdigest()[:16]
    return f"{order_id}-{trigger.value}-{key}"


def enqueue_issuance(order_id: str, trigger: Trigger = Trigger.PAYMENT,
                     run_key: str | None = None) -> EnqueueResult:
    """Add a run for ``order_id``; a retained failed run of the same id is retried in place,
    a live or completed one is left alone (``duplicated``)."""
    return enqueue(issue_store_order, StoreJob(order_id=order_id, trigger=trigger),
                   job_id=issuance_job_id(order_id, trigger, run_key), retry_failed=True)


@actor(queue="store-fulfillment", payload=StoreJob)
def issue_store_order(job: StoreJob) -> dict[str, object]:
    """Issue or reconcile one order (see the module's docstring)."""
    raise NotImplementedError
