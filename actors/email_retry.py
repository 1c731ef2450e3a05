"""The email-retry queue: operational emails that must get out even when the provider is
down for hours (docs/pipeline.md#the-email-retry-queue).

Operational emails are the ones herald sends *outside* the notification pipeline —
operator alerts to ``ADMIN_ALERT_EMAIL`` (:func:`send_admin_alert`) to start with. A
pipeline delivery never comes here: it has its own row, channel job and retries.

Two layers carry such an email:

1. :func:`send_email` (in the call): validates the envelope, sends through the
   configured email provider (``EMAIL_PROVIDER``) and retries a retryable failure (a
   5xx, a 429, an SMTP 4xx, a network error) after each pause of
   ``EMAIL_IN_CALL_BACKOFF_MS``. When the email is still not accepted — retryable
   failures past those tries, or a refusal the provider calls final — it enqueues an
   ``email-retry`` job with the full envelope, job id ``<key>:1``, due in 5 minutes.
2. :func:`retry_email` (the ``email-retry`` queue): one send per job, on the schedule
   :data:`SCHEDULE` (5 min → 30 min → 2 h → 12 h → 24 h) kept by the job's own attempt
   counter: a failure enqueues the next attempt's job ``<key>:<n+1>`` and completes;
   when the last one fails it writes an ``email_delivery_failed`` audit row, logs an
   error and fails the job for good, which keeps it in the failed set for 7 days.

Refusals the provider calls final (a 5xx reply, an HTTP 4xx) go to the queue too: most
are fixed by an operator within the schedule (credentials, a full mailbox, a sender
domain not verified yet), and a refusal that stays ends as the audited failure above
rather than a log line. Malformed input never gets that far: it is refused before the
first send.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from email.utils import parseaddr
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from sqlmodel import col, select

from actors.queues import registry
from herald.db import session as db_session
from herald.queue import Permanent, enqueue
from herald.settings import email_address_problem, get_settings
from models.audit import SYSTEM_ACTOR, AuditEntry, record_audit
from providers.base import Channel, OutboundMessage, SendResult
from providers.select import active_provider

log = logging.getLogger("herald.email_retry")

#: The queue's name (actors/queues.py: concurrency 4, attempts 1, no backoff).
QUEUE = "email-retry"
#: How long after the previous failure each queue attempt runs: attempt n waits
#: ``SCHEDULE[n - 1]``. Five attempts over about 38.5 hours.
SCHEDULE: tuple[timedelta, ...] = (timedelta(minutes=5), timedelta(minutes=30),
                                   timedelta(hours=2), timedelta(hours=12),
                                   timedelta(hours=24))
#: The audit action written when the last attempt fails.
DELIVERY_FAILED = "email_delivery_failed"
#: Longest subject (RFC 5322's line limit) and longest body part, in characters.
SUBJECT_MAX_CHARS = 998
BODY_MAX_CHARS = 200_000
#: Most Cc recipients of one email.
CC_MAX = 10
#: What an idempotency key may hold: it becomes a job id and travels in provider requests.
KEY_PATTERN = r"^[A-Za-z0-9._:@/+=-]{1,200}$"


def _address(value: str) -> str:
    problem = email_address_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class EmailEnvelope(BaseModel):
    """One operational email, complete: what a later attempt needs to send it again.

    ``from`` defaults to EMAIL_FROM when the envelope is made, so a queued email keeps
    the sender it was given. Addresses are bare (``user@example.com``); ``from`` may carry
    a display name (``herald <no-reply@example.com>``). A header field holding a line
    break is refused: it would let a value add headers of its own.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True,
                              validate_by_alias=True, serialize_by_alias=True)

    sender: str = Field(default_factory=lambda: get_settings().email_from, alias="from",
                        max_length=320)
    to: str
    cc: tuple[str, ...] = Field(default=(), max_length=CC_MAX)
    subject: str = Field(min_length=1, max_length=SUBJECT_MAX_CHARS)
    html: str | None = Field(default=None, max_length=BODY_MAX_CHARS)
    text: str = Field(default="", max_length=BODY_MAX_CHARS)

    @field_validator("to")
    @classmethod
    def _to(cls, value: str) -> str:
        return _address(value)

    @field_validator("cc")
    @classmethod
    def _cc(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_address(address) for address in value)

    @field_validator("sender")
    @classmethod
    def _sender(cls, value: str) -> str:
        if "\r" in value or "\n" in value:
            raise ValueError("contains a line break")
        _address(parseaddr(value)[1])
        return value

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str) -> str:
        if "\r" in value or "\n" in value:
            raise ValueError("contains a line break")
        return value

    @model_validator(mode="after")
    def _has_a_body(self) -> EmailEnvelope:
        if not self.text.strip() and not (self.html or "").strip():
            raise ValueError("text or html is required")
        return self

    def message(self, idempotency_key: str) -> OutboundMessage:
        """The provider message that sends this envelope."""
        return OutboundMessage(channel=Channel.EMAIL, to=self.to, cc=self.cc,
                               sender=self.sender, subject=self.subject, text=self.text,
                               html=self.html, idempotency_key=idempotency_key)


class EmailRetryJob(BaseModel):
    """An ``email-retry`` job: the envelope, its idempotency key, which queue attempt this
    is (1 … ``len(SCHEDULE)``) and the failure code that led to it."""

    model_config = ConfigDict(extra="forbid")

    envelope: EmailEnvelope
    idempotency_key: str = Field(pattern=KEY_PATTERN)
    attempt: int = Field(ge=1, le=len(SCHEDULE))
    last_error: str | None = Field(default=None, max_length=100)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SendOutcome:
    """What :func:`send_email` did: ``sent`` (the provider accepted it in the call), or
    handed to the queue under ``retry_job_id``; ``tries`` in the call and the last
    provider answer."""

    sent: bool
    tries: int
    result: SendResult
    #: The ``email-retry`` job that now carries the email (None when it was sent).
    retry_job_id: str | None = None


def retry_job_id(idempotency_key: str, attempt: int) -> str:
    """The job id of queue attempt ``attempt`` of the email under ``idempotency_key``: the
    same email and attempt always get the same id, so two enqueues of it are one job."""
    return f"{idempotency_key}:{attempt}"


# -- one send ----------------------------------------------------------------------------------
def attempt_send(envelope: EmailEnvelope, idempotency_key: str) -> SendResult:
    """One send through the configured email provider, never raising: a provider that
    cannot carry email is a terminal ``provider_unsupported`` (``no_provider`` when none
    is configured), an unexpected error in
    the provider a transient ``provider_error`` (logged with its stack)."""
    provider = active_provider(Channel.EMAIL)
    if provider is None and not get_settings().provider_chain_names(Channel.EMAIL):
        return SendResult.terminal("no_provider", "no email provider is configured "
                                   "(EMAIL_PROVIDER or EMAIL_PROVIDERS)")
    if provider is None:
        return SendResult.terminal("provider_unsupported",
                                   "the configured email provider cannot send email")
    try:
        return provider.send(envelope.message(idempotency_key))
    except Exception as error:
        log.exception("email provider raised", extra={"idempotency_key": idempotency_key})
        return SendResult.transient("provider_error", type(error).__name__)


def _send_in_call(envelope: EmailEnvelope, idempotency_key: str,
                  pauses_s: Sequence[float]) -> tuple[SendResult, int]:
    """Send, trying again after each pause while the failure is retryable; the last
    answer and how many tries it took."""
    for tries, pause in enumerate((*pauses_s, None), start=1):
        result = attempt_send(envelope, idempotency_key)
        if result.accepted or not result.retryable or pause is None:
            return result, tries
        time.sleep(pause)  # a short in-call backoff: the caller waits for its answer
    raise AssertionError("unreachable")


# -- the queue -------------------------------------------------------------------------------
def schedule_attempt(job: EmailRetryJob) -> str:
    """Enqueue queue attempt ``job.attempt``, due after its step of :data:`SCHEDULE`, under
    :func:`retry_job_id`; an attempt already enqueued is left as it is. Returns its id."""
    job_id = retry_job_id(job.idempotency_key, job.attempt)
    result = enqueue(retry_email, job, job_id=job_id, delay=SCHEDULE[job.attempt - 1])
    log.info("email queued for retry", extra={"queue": QUEUE, "job_id": job_id,
                                              "status": result.status,
                                              "failure_code": job.last_error})
    return job_id


def send_email(envelope: EmailEnvelope | dict[str, Any], idempotency_key: str, *,
               pauses_s: Sequence[float] | None = None) -> SendOutcome:
    """Send one operational email now, or hand it to the ``email-retry`` queue.

    The envelope and key are validated first: a problem raises
    :class:`~herald.queue.InvalidPayload` (a ValueError) naming the field, and nothing is
    sent or enqueued. Then the email is sent, and tried again after each pause of
    ``pauses_s`` (default ``EMAIL_IN_CALL_BACKOFF_MS``) while the failure is retryable.
    Not accepted at the end, it is enqueued as queue attempt 1 (job ``<key>:1``, due in 5
    minutes, carrying the full envelope); calls with the same key make one job. Raises
    when Redis refuses the enqueue: the email is then neither sent nor queued.
    """
    first = _first_job(envelope, idempotency_key)
    pauses = get_settings().email_in_call_pauses_s if pauses_s is None else pauses_s
    result, tries = _send_in_call(first.envelope, idempotency_key, pauses)
    if result.accepted:
        return SendOutcome(sent=True, tries=tries, result=result)
    queued = first.model_copy(update={"last_error": result.failure_code})
    return SendOutcome(sent=False, tries=tries, result=result,
                       retry_job_id=schedule_attempt(queued))


def _first_job(envelope: EmailEnvelope | dict[str, Any], idempotency_key: str
               ) -> EmailRetryJob:
    """The queue's first job for this email, validated by the queue's own model (so the
    error names the field, as any refused payload's does)."""
    payload = {"envelope": envelope.model_dump() if isinstance(envelope, EmailEnvelope)
               else envelope, "idempotency_key": idempotency_key, "attempt": 1}
    return EmailRetryJob.model_validate_json(retry_email.validate(payload))


@registry.actor(queue=QUEUE, payload=EmailRetryJob)
def retry_email(job: EmailRetryJob) -> dict[str, Any]:
    """One queue attempt: send; on failure enqueue the next attempt, or after the last
    one record ``email_delivery_failed`` and fail for good."""
    result = attempt_send(job.envelope, job.idempotency_key)
    if result.accepted:
        log.info("email sent by its retry", extra={"queue": QUEUE, "attempt": job.attempt})
        return {"sent": True, "attempt": job.attempt,
                "provider_message_id": result.provider_message_id}
    if job.attempt < len(SCHEDULE):
        following = job.model_copy(update={"attempt": job.attempt + 1,
                                           "last_error": result.failure_code})
        return {"sent": False, "attempt": job.attempt, "failure_code": result.failure_code,
                "next_job_id": schedule_attempt(following)}
    record_delivery_failed(job, result)
    raise Permanent(f"email {job.idempotency_key} not delivered after {job.attempt} "
                    f"attempts (last error: {result.failure_code})")


def record_delivery_failed(job: EmailRetryJob, result: SendResult) -> None:
    """Write the ``email_delivery_failed`` audit row of an email whose schedule ran out
    (once per job, however often its last run is repeated) and log it as an error.

    The row names the key, the attempts and the last failure code, never an address or
    any of the email's text."""
    job_id = retry_job_id(job.idempotency_key, job.attempt)
    detail = {"idempotency_key": job.idempotency_key, "attempts": job.attempt,
              "last_error": result.failure_code}
    with db_session() as session:
        written = session.exec(select(AuditEntry.id).where(
            col(AuditEntry.action) == DELIVERY_FAILED, col(AuditEntry.queue) == QUEUE,
            col(AuditEntry.job_id) == job_id)).first()
        if written is None:
            record_audit(session, actor=SYSTEM_ACTOR, action=DELIVERY_FAILED,
                         target=f"{QUEUE}/{job_id}", queue=QUEUE, job_id=job_id,
                         detail=detail, count=1)
    log.error("email delivery failed", extra={"queue": QUEUE, "job_id": job_id, **detail})


# -- operator alerts ---------------------------------------------------------------------------
def send_admin_alert(subject: str, text: str, *, idempotency_key: str,
                     html: str | None = None) -> SendOutcome | None:
    """Email an operator alert to ADMIN_ALERT_EMAIL through :func:`send_email` (so an
    outage delays it rather than losing it). With ADMIN_ALERT_EMAIL empty it does nothing
    and returns None."""
    to = get_settings().admin_alert_email
    if not to:
        log.debug("no ADMIN_ALERT_EMAIL: alert not sent",
                  extra={"idempotency_key": idempotency_key})
        return None
    return send_email({"to": to, "subject": subject, "text": text, "html": html},
                      idempotency_key)
