"""The channel workers: claim a delivery, gate it, hold it through quiet hours, render it,
check the claim, dispatch it through the channel's provider chain
(:mod:`actors.provider_chain`), and write the fenced outcome
(docs/pipeline.md#channel-workers); an accepted urgent SMS may get its delivery-report
fallback check (:mod:`actors.sms_fallback`).

Outcomes move ``queued → sending → sent → delivered``, or to ``failed_terminal`` or
``suppressed``; every write goes through :func:`models.notifications.record_delivery_outcome`
fenced by this attempt's claim, so an old attempt never overwrites a newer result.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import Connection

from actors.preferences import blocking_setting
from actors.provider_chain import send_through_chain
from actors.queues import registry
from actors.quiet_hours import hold_if_quiet
from actors.render import RenderError, render
from actors.sms_fallback import schedule_fallback
from herald.db import autocommit
from herald.db import session as db_session
from herald.queue import (
    ADD_CHUNK,
    Defer,
    Permanent,
    enqueue,
    enqueue_many_actors,
)
from herald.settings import get_settings
from models.base import FieldReader
from models.notifications import (
    ClaimVerdict,
    Delivery,
    Outcome,
    SuppressionReason,
    claim_delivery,
    record_delivery_outcome,
    still_claimed,
)
from providers.base import Channel, OutboundMessage
from providers.select import provider_chain

log = logging.getLogger("herald.notifications")
#: An attempt's outcome the fence refused: another attempt took the delivery over, or it
#: reached a final outcome meanwhile (docs/failure-modes.md#partition).
OUTCOME_NOT_WRITTEN = "outcome not written: the delivery is final or another attempt holds it"

#: The queue of each channel that has one (in-app has none).
CHANNEL_QUEUES = {"email": "notification-email", "sms": "notification-sms",
                  "push": "notification-push"}


class DeliveryJob(BaseModel):
    """A channel job carries ids only; everything else is read after the claim."""

    delivery_id: str = Field(min_length=1, max_length=36)
    notification_id: str = Field(min_length=1, max_length=36)
    channel: Literal["email", "sms", "push"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Recipient:
    """A delivery's notification and account, as read with the claim
    (:data:`models.notifications.RECIPIENT_COLUMNS`)."""

    type: str
    data: dict[str, Any]
    transactional: bool
    active: bool
    marketing_opt_out: bool
    email: str | None
    phone: str | None
    push_subscription_id: str | None
    locale: str
    urgency: str
    #: The account's preference document (None: everything on).
    preferences: dict[str, Any] | None
    timezone: str | None
    quiet_hours: dict[str, Any] | None
    #: The delivery's provider attempts so far (None: none yet).
    attempts_log: list[dict[str, Any]] | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gate:
    """Why a delivery must not be sent (None: it may be)."""

    reason: SuppressionReason | None
    address: str | None = None
    #: What the delivery records as its last error: for a preference, which setting
    #: blocked it (``preference types.promo.offer.sms``).
    detail: str | None = None


def gate(recipient: Recipient, channel: str) -> Gate:
    """The gates, in order: inactive account, non-transactional opt-out, the account's
    preferences (:func:`actors.preferences.blocking_setting`), missing address
    (docs/pipeline.md#channel-workers)."""
    if not recipient.active:
        return Gate(reason=SuppressionReason.INACTIVE)
    if not recipient.transactional and recipient.marketing_opt_out:
        return Gate(reason=SuppressionReason.OPTED_OUT)
    setting = blocking_setting(recipient.preferences, recipient.type,
                               recipient.transactional, channel)
    if setting is not None:
        return Gate(reason=SuppressionReason.PREFERENCE,
                    detail=f"{SuppressionReason.PREFERENCE.value} {setting}")
    address = {"email": recipient.email, "sms": recipient.phone,
               "push": recipient.push_subscription_id}.get(channel)
    if not address:
        return Gate(reason=SuppressionReason.NO_ADDRESS)
    return Gate(reason=None, address=address)


def _claim(db: Connection, job: DeliveryJob) -> tuple[datetime, Recipient] | None:
    """This attempt's claim token and the recipient read with it; None when the delivery
    is final already. A live claim elsewhere defers the job until it would be stale; a
    missing delivery fails it."""
    claim = claim_delivery(db, job.delivery_id)
    if claim.verdict is ClaimVerdict.MISSING:
        raise Permanent(f"delivery {job.delivery_id} does not exist")
    if claim.verdict is ClaimVerdict.BUSY:
        raise Defer(claim.retry_in or timedelta(seconds=60), reason="claimed elsewhere")
    if claim.verdict is not ClaimVerdict.CLAIMED:
        return None
    assert claim.token is not None and claim.recipient is not None
    return claim.token, Recipient(**claim.recipient)


def deliver(job: DeliveryJob) -> dict[str, Any]:
    """Run one attempt of one delivery; returns what it did (the job's return value).

    Claim and read the notification and account, gate, hold it while the account's
    quiet hours last, render, check the claim is still this attempt's, dispatch, and
    write the outcome fenced by the claim. Runs on one autocommit connection: the claim
    and each outcome are single conditional UPDATEs, so no statement needs a transaction
    around it (one round trip each).
    """
    with autocommit() as db:
        claimed = _claim(db, job)
        if claimed is None:
            return {"delivery_id": job.delivery_id, "skipped": "already final"}
        token, recipient = claimed

        def write(outcome: Outcome, **fields: Any) -> bool:
            written = record_delivery_outcome(db, job.delivery_id, token=token,
                                              outcome=outcome, **fields)
            if not written:  # what an operator sees of a late attempt (a partition)
                log.info(OUTCOME_NOT_WRITTEN, extra={"delivery_id": job.delivery_id,
                                                     "outcome": outcome.value})
            return written

        verdict = gate(recipient, job.channel)
        if verdict.reason is None and (
                held := hold_if_quiet(db, job.delivery_id, token, recipient, job.channel)):
            return held
        channel = Channel(job.channel)
        providers = provider_chain(channel)
        if verdict.reason is None and not providers:
            # none configured (the channel is off), or none configured can carry it
            verdict = Gate(reason=SuppressionReason.PROVIDER_UNSUPPORTED
                           if get_settings().provider_chain_names(channel)
                           else SuppressionReason.NO_PROVIDER)
        if verdict.reason is not None:
            write(Outcome.SUPPRESSED, reason=verdict.reason.value, error=verdict.detail)
            return {"delivery_id": job.delivery_id, "suppressed": verdict.reason.value}
        assert verdict.address is not None
        try:
            rendered = render(recipient.type, job.channel, recipient.locale,
                              recipient.data, {"locale": recipient.locale})
        except RenderError as error:
            write(Outcome.FAILED_TERMINAL, reason="render_failed", error=str(error))
            raise
        if not still_claimed(db, job.delivery_id, token):
            return {"delivery_id": job.delivery_id, "skipped": "claim taken over"}
        message = OutboundMessage(
            channel=channel, to=verdict.address, subject=rendered.subject,
            text=rendered.text, html=rendered.html, idempotency_key=job.delivery_id,
            attachments=rendered.attachments)
        sent = send_through_chain(write, job.delivery_id, providers, message,
                                  recipient.attempts_log)
        schedule_fallback(job.delivery_id, job.channel, recipient.urgency, recipient.type, sent)
        return sent


def record_exhausted(job: DeliveryJob, reason: str) -> None:
    """Exhausted stall recovery: the job will not run again, so the delivery ends
    ``failed_terminal`` (unless an attempt already reached a final outcome)."""
    with db_session() as session:
        record_delivery_outcome(session, job.delivery_id, token=None,
                                outcome=Outcome.FAILED_TERMINAL, reason="restarts_exhausted",
                                error=reason)


@registry.actor(queue="notification-email", payload=DeliveryJob, on_exhausted=record_exhausted)
def send_email(job: DeliveryJob) -> dict[str, Any]:
    """Send one persisted email delivery."""
    return deliver(job)


@registry.actor(queue="notification-sms", payload=DeliveryJob, on_exhausted=record_exhausted)
def send_sms(job: DeliveryJob) -> dict[str, Any]:
    """Send one persisted SMS delivery."""
    return deliver(job)


@registry.actor(queue="notification-push", payload=DeliveryJob, on_exhausted=record_exhausted)
def send_push(job: DeliveryJob) -> dict[str, Any]:
    """Send one persisted push delivery."""
    return deliver(job)


CHANNEL_ACTORS = {"email": send_email, "sms": send_sms, "push": send_push}


#: What a channel job's payload is made of: ids only, everything else is read after the
#: claim.
_READ_JOB = FieldReader("id", "notification_id", "channel")


def _job(delivery: Delivery) -> dict[str, str]:
    """The channel job's payload (:data:`_READ_JOB`)."""
    delivery_id, notification_id, channel = _READ_JOB(delivery)
    return {"delivery_id": delivery_id, "notification_id": notification_id,
            "channel": channel}


def enqueue_delivery(delivery: Delivery, priority: int, *, retry_failed: bool = True,
                     delay: timedelta | None = None) -> str:
    """Add the channel job of a delivery (job id = delivery id), ``delay`` from now if
    given; a retained failed job is retried in place, a live or completed one is left
    alone. Returns the add status.

    The single-add helper: what the handoff sweep recovers deliveries with."""
    result = enqueue(CHANNEL_ACTORS[delivery.channel], _job(delivery), job_id=delivery.id,
                     priority=priority, retry_failed=retry_failed, delay=delay)
    return result.status


def enqueue_prioritised_deliveries(jobs: Sequence[tuple[Delivery, int]], *,
                                   chunk_size: int = ADD_CHUNK) -> None:
    """Add the channel jobs of freshly persisted deliveries, each ``(delivery, priority)``
    with its own priority, grouped by channel: one round trip per ``chunk_size`` jobs,
    however many channels (job id = delivery id). Raises when the queue is unavailable;
    nothing is added then (a chunk that did go through stays added).

    Fresh jobs only: it never retries a retained failed job, so it must not be used to
    recover deliveries — that is :func:`enqueue_delivery`.
    """
    by_channel: dict[str, list[tuple[dict[str, str], dict[str, Any]]]] = {}
    for delivery, priority in jobs:
        payload = _job(delivery)
        by_channel.setdefault(payload["channel"], []).append(
            (payload, {"job_id": payload["delivery_id"], "priority": priority}))
    enqueue_many_actors([(CHANNEL_ACTORS[channel], items) for channel, items in by_channel.items()],
                   chunk_size=chunk_size)
