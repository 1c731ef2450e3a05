"""The delivery-report fallback of urgent SMS (docs/pipeline.md#delivery-report-fallback).

An urgent SMS of an event type with a fallback wait (:func:`actors.event_catalogue.
fallback_after_s`: SMS_FALLBACK_AFTER_S, off for every built-in type), accepted by
provider P of the SMS chain, is sent once more through the next provider after P whose
circuit is not open when no ``delivered`` receipt came within the wait. It sends twice on
purpose, so it is opt-in.

:func:`schedule_fallback` adds, after the acceptance, one delayed check job per delivery
(job id ``sms-fallback-<delivery id>``: added once). The check (:func:`check_fallback`)
claims nothing: it sends only when one conditional UPDATE
(:func:`models.delivery_fallback.take_fallback`) finds the delivery still ``sent`` by P
with no fallback taken, and names the fallback's provider there *before* sending, with
the send logged ``ambiguous`` until its answer replaces that entry. Two workers, a
retried job or one restarted after a SIGKILL therefore send it at most once; a kill
mid-send leaves the ``ambiguous`` entry. A failed fallback send is logged and never
retried, through that provider or another.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from actors.event_catalogue import fallback_after_s
from actors.provider_chain import (
    PROVIDER_SENDS,
    AttemptResult,
    circuit_verdict,
    kept,
    log_entry,
    record_send,
)
from actors.queues import registry
from actors.render import render
from herald.db import autocommit
from herald.queue import URGENT_PRIORITY, Permanent, enqueue
from models.delivery_fallback import read_for_fallback, record_fallback, take_fallback
from models.notifications import Outcome
from providers.base import Channel, FailureKind, OutboundMessage, Provider, SendResult
from providers.circuit import Verdict
from providers.select import provider_chain

log = logging.getLogger("herald.notifications")

#: The one channel and urgency the fallback serves.
FALLBACK_CHANNEL = Channel.SMS
FALLBACK_URGENCY = "urgent"
#: What the fallback's entry says until its send answers (left so by a kill mid-send).
UNCONFIRMED = "fallback_unconfirmed: the fallback send did not report back"


class FallbackJob(BaseModel):
    """A fallback check carries the delivery's id only; the rest is read when it runs."""

    delivery_id: str = Field(min_length=1, max_length=36)


def fallback_job_id(delivery_id: str) -> str:
    """The check's job id: one per delivery, so it is added once."""
    return f"sms-fallback-{delivery_id}"


def applies(channel: str, urgency: str, event_type: str) -> float | None:
    """The fallback wait of a delivery on ``channel`` of a notification of ``urgency`` and
    ``event_type``, in seconds; None when no fallback applies."""
    if channel != FALLBACK_CHANNEL.value or urgency != FALLBACK_URGENCY:
        return None
    return fallback_after_s(event_type)


def schedule_fallback(delivery_id: str, channel: str, urgency: str, event_type: str,
                      sent: dict[str, Any]) -> bool:
    """After a channel attempt (``sent``, what :func:`actors.provider_chain.
    send_through_chain` returned): when it was accepted and the fallback applies, add the
    delayed check; True when added (or found added). A failed add is logged and loses
    this delivery's fallback only: the acceptance stands, and a second send is the
    extra."""
    wait = applies(channel, urgency, event_type)
    provider = sent.get("provider")
    if wait is None or provider is None or "provider_message_id" not in sent:
        return False
    if not _after(provider):
        log.info("no provider after %s in the SMS chain: no fallback", provider,
                 extra={"delivery_id": delivery_id})
        return False
    try:
        enqueue(check_sms_fallback, FallbackJob(delivery_id=delivery_id),
                job_id=fallback_job_id(delivery_id), priority=URGENT_PRIORITY,
                delay=timedelta(seconds=wait))
    except Exception as error:  # the queue away: the message is sent, the fallback lost
        log.warning("fallback check not added (%s)", type(error).__name__,
                    extra={"delivery_id": delivery_id})
        return False
    return True


def check_fallback(job: FallbackJob) -> dict[str, Any]:
    """Send the delivery's fallback if it is still ``sent`` (no ``delivered`` or
    ``failed_terminal`` receipt), has none yet, and a provider after its own has its
    circuit not open; returns what it did. At most one send per delivery, ever."""
    delivery_id = job.delivery_id
    with autocommit() as db:
        row = read_for_fallback(db, delivery_id)
        if row is None:
            raise Permanent(f"delivery {delivery_id} does not exist")
        skipped = _skip_reason(row)
        if skipped is not None:
            return {"delivery_id": delivery_id, "skipped": skipped}
        chosen = _next_open(row["provider"])
        if chosen is None:
            log.info("no provider after %s with its circuit closed: no fallback",
                     row["provider"], extra={"delivery_id": delivery_id})
            return {"delivery_id": delivery_id, "skipped": "no provider to fall back to"}
        provider, verdict = chosen
        rendered = render(row["type"], FALLBACK_CHANNEL.value, row["locale"], row["data"],
                          {"locale": row["locale"]})
        message = OutboundMessage(
            channel=FALLBACK_CHANNEL, to=row["phone"], subject=rendered.subject,
            text=rendered.text, html=rendered.html, idempotency_key=delivery_id,
            attachments=rendered.attachments)
        entries = list(row["attempts_log"] or [])
        pending = _entry(provider.name, AttemptResult.AMBIGUOUS, UNCONFIRMED)
        if not take_fallback(db, delivery_id, accepted_by=row["provider"],
                             provider=provider.name, attempts_log=kept([*entries, pending])):
            return {"delivery_id": delivery_id, "skipped": "taken or settled meanwhile"}
        result = provider.send(message)
        record_send(provider.name, result, probe=verdict is Verdict.PROBE)
        entry = _result_entry(provider.name, result)
        PROVIDER_SENDS.labels(provider.name, entry["result"]).inc()
        record_fallback(db, delivery_id, provider=provider.name,
                        message_id=result.provider_message_id if result.accepted else None,
                        attempts_log=kept([*entries, entry]))
    log.info("fallback sent", extra={"delivery_id": delivery_id, "provider": provider.name,
                                     "outcome": entry["result"]})
    return {"delivery_id": delivery_id, "fallback_provider": provider.name,
            "result": entry["result"]}


def _skip_reason(row: dict[str, Any]) -> str | None:
    """Why the check sends nothing for the delivery ``row`` (None: it may send)."""
    if row["outcome"] != Outcome.SENT.value:
        return f"outcome {row['outcome']}"  # a receipt came (or the send never stood)
    if row["fallback_provider"] is not None:
        return "fallback taken"
    if applies(row["channel"], row["urgency"], row["type"]) is None:
        return "no fallback for it"  # the setting changed since the acceptance
    if not row["phone"]:
        return "no address"
    return None


def _after(accepted_by: str) -> tuple[Provider, ...]:
    """The providers of the SMS chain after ``accepted_by``, in order (none when it is
    not in the chain any more)."""
    chain = provider_chain(FALLBACK_CHANNEL)
    names = [provider.name for provider in chain]
    return chain[names.index(accepted_by) + 1:] if accepted_by in names else ()


def _next_open(accepted_by: str) -> tuple[Provider, Verdict] | None:
    """The first provider after ``accepted_by`` whose circuit lets a send through, with
    the breaker's verdict (a probe is reported as one)."""
    for provider in _after(accepted_by):
        verdict = circuit_verdict(provider.name)
        if verdict is not Verdict.SKIP:
            return provider, verdict
    return None


def _entry(provider: str, result: AttemptResult, error: str | None = None,
           message_id: str | None = None) -> dict[str, Any]:
    """An attempts log entry of the fallback: marked ``fallback: true``, a deliberate
    second send, with its message id when it has one."""
    return log_entry(provider, result, error) | {"fallback": True,
                                                 "provider_message_id": message_id}


def _result_entry(provider: str, result: SendResult) -> dict[str, Any]:
    """What the fallback's send answered, as its entry."""
    if result.accepted:
        return _entry(provider, AttemptResult.ACCEPTED, message_id=result.provider_message_id)
    kind = (AttemptResult.AMBIGUOUS if result.failure_kind is FailureKind.AMBIGUOUS
            else AttemptResult.DEFINITE_FAILURE)
    return _entry(provider, kind, f"{result.failure_code}: {result.failure_message}")


@registry.actor(queue="notification-sms", payload=FallbackJob)
def check_sms_fallback(job: FallbackJob) -> dict[str, Any]:
    """Check one delivery's delivery-report fallback, once its wait is over."""
    return check_fallback(job)
