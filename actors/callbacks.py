"""Provider delivery receipts: ingestion, then ``normalise_callback``
(docs/pipeline.md#callbacks, docs/sweeps.md#callback-receipts).

Ingestion (:func:`ingest_callback`, behind ``POST /v1/callbacks/{provider}``) receives an
event whose signature the provider's adapter already verified, persists the normalized
receipt, enqueues ``normalise_callback`` (job id ``notification-callback-{eventId}``,
payload = the receipt id only) and writes the enqueue stamp only after the enqueue
succeeded. A redelivered event finds its receipt; an unstamped one is enqueued and
stamped then, which is how a sender's retry after a 503 repairs it. Receipts that no
request repairs are re-driven by the handoff sweep through :func:`enqueue_normalisation`.

Normalization correlates the delivery by channel, provider and provider message id (of
its first message or of its delivery-report fallback's) and moves its outcome forward
only (:func:`models.notifications.advance_delivery_from_receipt`); a delivery sent twice
by the fallback is ``delivered`` when either message is, ``failed_terminal`` only when
both failed.
An unmatched receipt is deferred (each wait as long as the receipt's age, at least
10 s: an exponential backoff, logged at INFO) until it is 30 minutes old, then marked
processed ``unmatched`` without touching any delivery, with one WARNING.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field
from sqlmodel import Session, col, select

from actors.queues import registry
from herald.db import session as db_session
from herald.queue import NORMAL_PRIORITY, SECOND, Defer, Permanent, enqueue
from herald.settings import get_settings
from models.base import utcnow
from models.callbacks import (
    RESULT_APPLIED,
    RESULT_UNCHANGED,
    RESULT_UNMATCHED,
    CallbackReceipt,
    insert_or_find_receipt,
    mark_receipt_processed,
    stamp_receipts,
)
from models.delivery_fallback import other_message_failed, sent_as
from models.notifications import Delivery, Outcome, advance_delivery_from_receipt
from providers.base import CallbackEvent, CallbackRequest, CallbackStatus

log = logging.getLogger("herald.callbacks")

#: The module of each provider that accepts callbacks; each has ``parse_callback``.
#: Imported on first use, like the senders (a process never sent a Twilio callback
#: never loads the Twilio SDK).
CALLBACK_ADAPTERS = {"mock": "providers.mock", "twilio": "providers.twilio",
                     "taqnyat": "providers.taqnyat", "onesignal": "providers.onesignal"}
#: How long an unmatched receipt waits for its delivery: the provider can report faster
#: than the channel worker records the provider message id.
CORRELATION_CUTOFF = timedelta(minutes=30)
#: The most runs of one normalise_callback job, deferrals included: the ten or so tries of
#: an unmatched receipt and the failures of a database that was away.
MAX_STARTS = 20
#: The shortest wait before an unmatched receipt is tried again; later waits are as long
#: as the receipt is old (10, 10, 20, 40 … s: about ten tries within the cutoff).
UNMATCHED_FIRST_WAIT = timedelta(seconds=10)


class UnknownProvider(LookupError):
    """No provider of that name accepts callbacks."""


class CallbackNotQueued(RuntimeError):
    """The receipt is persisted but its job could not be enqueued; it stays unstamped."""


class ReceiptUnmatched(Defer):
    """No delivery carries the receipt's message id yet: tried again later, not counted as
    a failed attempt (a delivery that records its message id late is expected, not an
    error), until the cutoff."""


class CallbackJob(BaseModel):
    """A normalise_callback job carries the persisted receipt's id and nothing else."""

    receipt_id: str = Field(min_length=1, max_length=36)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ingested:
    """What ingestion did with one callback."""

    receipt_id: str
    #: The (provider, event id) was stored before.
    duplicate: bool
    #: A normalise_callback job was enqueued (or found live) and the stamp written now.
    queued: bool


# -- ingestion ------------------------------------------------------------------------------
def adapter_module(provider: str) -> str | None:
    """The module that reads ``provider``'s callbacks, or None: a mock instance's
    (MOCK_INSTANCES) are the mock's, received under the instance's own name so that they
    correlate with the deliveries that instance accepted."""
    if provider in get_settings().mock_instance_names:
        return CALLBACK_ADAPTERS["mock"]
    return CALLBACK_ADAPTERS.get(provider)


def parse_callback(provider: str, request: CallbackRequest) -> CallbackEvent:
    """The provider's adapter verifies the signature and reads the body.

    Raises :class:`UnknownProvider`, or the adapter's
    :class:`~providers.base.InvalidSignature` / :class:`~providers.base.InvalidCallback`.
    """
    module = adapter_module(provider)
    if module is None:
        raise UnknownProvider(provider)
    event: CallbackEvent = importlib.import_module(module).parse_callback(request)
    return event


def ingest_callback(provider: str, event: CallbackEvent) -> Ingested:
    """Persist the receipt, enqueue its normalization, then stamp it.

    A stored event that is stamped or processed is a duplicate and nothing is enqueued;
    an unstamped one is enqueued and stamped now. Raises :class:`CallbackNotQueued`
    (the receipt stays unstamped, so the sender's retry or the sweep repairs it) when the
    enqueue fails; database errors propagate.
    """
    with db_session() as session:
        receipt, created = insert_or_find_receipt(session, _receipt(provider, event))
    if not created and (receipt.queued_at is not None or receipt.processed_at is not None):
        return Ingested(receipt_id=receipt.id, duplicate=True, queued=False)
    try:
        enqueue_normalisation(receipt)
    except Exception as error:  # Redis or the broker away: answered 503, the sender retries
        log.warning("callback enqueue failed: %s", type(error).__name__,
                    extra={"receipt_id": receipt.id})
        raise CallbackNotQueued(receipt.id) from error
    with db_session() as session:
        stamp_receipts(session, [receipt.id])
    return Ingested(receipt_id=receipt.id, duplicate=not created, queued=True)


def enqueue_normalisation(receipt: CallbackReceipt) -> str:
    """Add the receipt's normalise_callback job under its deterministic id (a no-op while
    a live job holds that id); returns the add status. Writes no stamp."""
    result = enqueue(normalise_callback, CallbackJob(receipt_id=receipt.id),
                     job_id=callback_job_id(receipt.event_id), priority=NORMAL_PRIORITY)
    return result.status


def callback_job_id(event_id: str) -> str:
    """The job id of an event's normalization: deterministic, so a re-add is a no-op."""
    return f"notification-callback-{event_id}"


def _receipt(provider: str, event: CallbackEvent) -> CallbackReceipt:
    return CallbackReceipt(provider=provider, event_id=event.event_id,
                           channel=event.channel.value,
                           provider_message_id=event.provider_message_id,
                           status=event.status.value, detail=event.detail,
                           payload=event.payload or {})


# -- normalization --------------------------------------------------------------------------
def normalise(job: CallbackJob) -> dict[str, Any]:
    """Apply one receipt to its delivery and mark it processed, in one transaction.

    Missing receipt → :class:`~herald.queue.errors.Permanent`; already processed → nothing.
    Unmatched and younger than :data:`CORRELATION_CUTOFF` → :class:`ReceiptUnmatched`
    (deferred, one INFO line); older → processed ``unmatched`` (one WARNING).
    """
    with db_session() as session:
        receipt = session.get(CallbackReceipt, job.receipt_id)
        if receipt is None:
            raise Permanent(f"callback receipt {job.receipt_id} does not exist")
        if receipt.processed_at is not None:
            return {"receipt_id": receipt.id, "skipped": "already processed"}
        delivery_id = correlated_delivery(session, receipt)
        if delivery_id is None:
            age = utcnow() - receipt.received_at
            extra = {"receipt_id": receipt.id, "provider": receipt.provider,
                     "channel": receipt.channel}
            if age < CORRELATION_CUTOFF:
                wait = min(max(age, UNMATCHED_FIRST_WAIT), CORRELATION_CUTOFF - age)
                log.info("callback receipt matches no delivery yet; tried again in %d s",
                         wait.total_seconds(), extra=extra)
                raise ReceiptUnmatched(wait, reason=f"no {receipt.channel} delivery of "
                                       f"{receipt.provider} message "
                                       f"{receipt.provider_message_id} yet")
            mark_receipt_processed(session, receipt.id, result=RESULT_UNMATCHED)
            log.warning("callback receipt matched no delivery within %d minutes: given up",
                        CORRELATION_CUTOFF.total_seconds() // 60, extra=extra)
            return {"receipt_id": receipt.id, "result": RESULT_UNMATCHED}
        applied = (receipt.status != CallbackStatus.OTHER.value
                   and (receipt.status != Outcome.FAILED_TERMINAL.value
                        or other_message_failed(session, delivery_id, receipt))
                   and advance_delivery_from_receipt(session, delivery_id,
                                                     Outcome(receipt.status),
                                                     detail=receipt.detail))
        result = RESULT_APPLIED if applied else RESULT_UNCHANGED
        mark_receipt_processed(session, receipt.id, result=result, delivery_id=delivery_id)
    return {"receipt_id": receipt.id, "delivery_id": delivery_id, "result": result}


def correlated_delivery(session: Session, receipt: CallbackReceipt) -> str | None:
    """The id of the delivery the receipt reports on: same channel, provider and provider
    message id, of its first message or of its delivery-report fallback's (None when no
    delivery carries that message id yet)."""
    return session.exec(
        select(Delivery.id)
        .where(Delivery.channel == receipt.channel,
               sent_as(receipt.provider, receipt.provider_message_id))
        .order_by(col(Delivery.created_at)).limit(1)).first()


@registry.actor(queue="notification-orchestration", payload=CallbackJob, attempts=9,
       backoff_base=10 * SECOND, max_started_attempts=MAX_STARTS,
       remove_on_complete=True, remove_on_fail=True)
def normalise_callback(job: CallbackJob) -> dict[str, Any]:
    """Normalize one persisted provider receipt: 9 attempts for failures (exponential
    backoff from 10 s), an unmatched receipt deferred until the cutoff (at most
    :data:`MAX_STARTS` runs in all), the job record removed when it finishes either way
    (the receipt row is the durable record)."""
    return normalise(job)
