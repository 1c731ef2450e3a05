"""The webhook relay (docs/api.md#webhooks): one ``webhook-delivery`` job per message
(job id = message id, group = endpoint id, so one slow or dead endpoint holds only its own
group's slots), each run one attempt; the sweep that re-adds the job of a pending message
whose job was lost.

A run reads the message and its endpoint, checks the URL again (request forgery: DNS may
have changed since the endpoint was saved), POSTs the signed body to the checked address
and records the attempt. A failure waits its turn on :data:`RETRY_SCHEDULE_S` (±10 %), or
what a 429/503's ``Retry-After`` asks, as a deferral of the same job; a 410 disables the
endpoint at once, as does a failing streak of WEBHOOK_DISABLE_AFTER_S; after the last
attempt the message is ``failed`` and stays listed. A run killed mid-send runs again
(at least once; ``webhook-id`` lets the receiver drop the duplicate).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlmodel import col, select

from actors import queues as _queues  # noqa: F401  (declares the queue)
from actors.queues import registry
from herald import db
from herald.queue import Defer, Schedule, enqueue, enqueue_many
from herald.settings import get_settings
from models import webhook_attempts, webhooks
from models.base import queue_now, utcnow
from models.webhooks import MessageStatus, WebhookEndpoint, WebhookMessage, signing_secrets
from providers.webhook_connections import Connections
from providers.webhook_http import Attempt, post_message
from providers.webhook_target import UnsafeTarget, check_target

log = logging.getLogger(__name__)

QUEUE = "webhook-delivery"
#: Seconds before each attempt, from the message's creation on (Svix's schedule): the
#: first at once, the last 10 h after the one before.
RETRY_SCHEDULE_S = (0.0, 5.0, 300.0, 1_800.0, 7_200.0, 18_000.0, 36_000.0, 36_000.0)
#: Each wait is drawn within ±10 % of its value, so that a receiver coming back up is not
#: hit by every retry at once.
JITTER = 0.1
#: What a sweep reads at most in one run, oldest hand-off first.
SWEEP_LIMIT = 1_000


class WebhookJob(BaseModel):
    """A ``webhook-delivery`` job: the message to attempt."""

    model_config = ConfigDict(extra="forbid")

    message_id: str


_threads = threading.local()


def _connections() -> Connections:
    """This thread's kept-alive connections to receivers (redirects never followed)."""
    connections: Connections | None = getattr(_threads, "connections", None)
    if connections is None:
        connections = _threads.connections = Connections()
    return connections


def retry_wait_s(failed_attempts: int) -> float | None:
    """Seconds to wait after the ``failed_attempts``-th failure (jittered), or None when
    it was the last attempt."""
    if failed_attempts >= len(RETRY_SCHEDULE_S):
        return None
    base = RETRY_SCHEDULE_S[failed_attempts]
    return base * random.uniform(1 - JITTER, 1 + JITTER)


def enqueue_message(message_id: str, endpoint_id: str, *, at: datetime | None = None,
                    replay: bool = False) -> str:
    """Add the message's job (id = message id, group = endpoint id); a live job of that
    id is left alone. ``replay`` runs a finished one again. Returns the enqueue status."""
    return enqueue(deliver_webhook, WebhookJob(message_id=message_id), job_id=message_id,
                   group=endpoint_id, at=at, retry_failed=replay,
                   replay_completed=replay).status


def hand_off(messages: list[tuple[str, str]]) -> None:
    """Add the jobs of committed ``(message id, endpoint id)`` pairs, one round trip for
    many (a state change with several subscribed endpoints writes several)."""
    enqueue_many(deliver_webhook, [
        (WebhookJob(message_id=message_id), {"job_id": message_id, "group": endpoint_id})
        for message_id, endpoint_id in messages])


@registry.actor(queue=QUEUE, payload=WebhookJob)
def deliver_webhook(job: WebhookJob) -> dict[str, Any]:
    """One attempt of the message; deferred to its next attempt when it failed with
    attempts left (the deferral is the retry, so no failed job run is counted)."""
    done = attempt_message(job.message_id)
    if done.get("retry_in_s") is not None:
        raise Defer(timedelta(seconds=done["retry_in_s"]), "webhook retry",
                    count_start=False)
    return done


def attempt_message(message_id: str, now: datetime | None = None) -> dict[str, Any]:
    """Make the message's next attempt, if it is pending and due; record it. Returns
    ``status`` and, when another attempt is due later, ``retry_in_s``. ``now`` is queue
    time by default, the clock the attempt's deferral counts on (so a test that moves
    queue time walks the retry schedule)."""
    now = now or queue_now()
    # one statement for the message and its endpoint (models/webhook_attempts.py)
    with db.autocommit() as connection:
        row = webhook_attempts.read_message(connection, message_id)
        if row is None:
            return {"status": "gone"}
        if row["status"] != MessageStatus.PENDING:
            return {"status": row["status"]}
        due = row["next_attempt_at"]
        if due is not None and due > now:
            # re-added early (the sweep, a replay): wait for its turn
            return {"status": row["status"], "retry_in_s": (due - now).total_seconds()}
        if row["disabled"]:
            webhook_attempts.give_up(connection, message_id)
            return {"status": MessageStatus.FAILED.value}
    secrets = signing_secrets(row["secret"], row["previous_secret"],
                              row["previous_secret_until"], now)
    body = json.dumps(row["body"], separators=(",", ":")).encode()
    attempt = _send(row["url"], message_id, body, secrets, now)
    return record_attempt(message_id, attempt, now,
                          streak_open=row["failing_since"] is not None)


def _send(url: str, message_id: str, body: bytes, secrets: list[str],
          now: datetime) -> Attempt:
    settings = get_settings()
    try:
        target = check_target(url, allow_http=settings.webhook_allow_http,
                              allow_private=settings.webhook_allow_private)
    except UnsafeTarget as error:
        return Attempt(None, 0, str(error))
    return post_message(_connections(), target, msg_id=message_id,
                        timestamp=int(now.timestamp()), body=body, secrets=secrets)


def record_attempt(message_id: str, attempt: Attempt, now: datetime, *,
                   streak_open: bool = True) -> dict[str, Any]:
    """Write the attempt on its message, and what it means for the message (delivered,
    failed, or its next attempt's time) and its endpoint (its failing streak, disabled on
    a 410 or a streak of WEBHOOK_DISABLE_AFTER_S). A message no longer pending (delivered
    or failed meanwhile) is left as it is. ``streak_open`` False: the caller saw no
    failing streak on the endpoint, so a success spends no statement ending one."""
    entry = {"at": now.isoformat(), "status_code": attempt.status_code,
             "duration_ms": attempt.duration_ms, "error": attempt.error}
    if attempt.ok:
        # the common case: one conditional UPDATE (models/webhook_attempts.py)
        with db.autocommit() as connection:
            if webhook_attempts.record_delivered(connection, message_id, entry, now,
                                                 streak_open=streak_open):
                return {"status": MessageStatus.DELIVERED.value, "retry_in_s": None}
            row = webhook_attempts.read_message(connection, message_id)
        return {"status": row["status"] if row else "gone"}
    return _record_failure(message_id, attempt, entry, now)


def _record_failure(message_id: str, attempt: Attempt, entry: dict[str, Any],
                    now: datetime) -> dict[str, Any]:
    """A failed attempt, in one transaction with the message locked: its next attempt's
    time or its end, and the endpoint's failing streak (disabled on a 410 or a streak
    of WEBHOOK_DISABLE_AFTER_S)."""
    with db.session() as session:
        message = session.get(WebhookMessage, message_id, with_for_update=True)
        endpoint = session.get(WebhookEndpoint, message.endpoint_id) if message else None
        if message is None or endpoint is None:
            return {"status": "gone"}
        if message.status != MessageStatus.PENDING:
            return {"status": message.status}
        message.attempts = [*message.attempts, entry]
        endpoint.failing_since = endpoint.failing_since or now
        streak = (now - endpoint.failing_since).total_seconds()
        if attempt.status_code == 410 or streak >= get_settings().webhook_disable_after_s:
            endpoint.disabled = True
            log.warning("webhook endpoint disabled", extra={
                "endpoint_id": endpoint.id, "status_code": attempt.status_code})
        # a replayed message's attempts go on counting: a failed replay fails again
        retry_in = None if endpoint.disabled else retry_wait_s(len(message.attempts))
        if retry_in is not None and attempt.retry_after_s is not None:
            retry_in = attempt.retry_after_s
        if retry_in is None:
            message.status, message.next_attempt_at = MessageStatus.FAILED, None
        else:
            message.next_attempt_at = now + timedelta(seconds=retry_in)
        endpoint.updated_at = now
        session.add_all([message, endpoint])
        return {"status": str(message.status), "retry_in_s": retry_in}


def sweep_webhook_messages(now: datetime | None = None, *,
                           age: timedelta | None = None) -> int:
    """Re-add the job of every pending message handed off over ``age`` ago (default:
    HANDOFF_SWEEP_AGE_S) or never, at most :data:`SWEEP_LIMIT`, each at its next
    attempt's time; a job still live is left as it is. Returns how many were re-added."""
    now = now or utcnow()
    cutoff = now - (age if age is not None
                    else timedelta(seconds=get_settings().handoff_sweep_age_s))
    with db.session() as session:
        rows = session.exec(
            select(WebhookMessage).where(
                col(WebhookMessage.status) == MessageStatus.PENDING.value,
                (col(WebhookMessage.handed_off_at).is_(None))
                | (col(WebhookMessage.handed_off_at) < cutoff))
            .order_by(col(WebhookMessage.handed_off_at)).limit(SWEEP_LIMIT)
            .with_for_update(skip_locked=True)).all()
        for message in rows:
            message.handed_off_at = now
        session.add_all(rows)
        found = [(message.id, message.endpoint_id, message.next_attempt_at) for message in rows]
    added = 0
    for message_id, endpoint_id, at in found:
        try:
            added += enqueue_message(message_id, endpoint_id, at=at) == "added"
        except Exception as error:  # logged by id only; the row stays pending for the next run
            log.warning("webhook re-enqueue failed: %s", type(error).__name__,
                        extra={"message_id": message_id})
    if found:
        log.info("webhook messages re-driven", extra={"rows": len(found), "recreated": added})
    return added


class WebhookSweepJob(BaseModel):
    """The sweep job carries nothing: it reads the database."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue=QUEUE, payload=WebhookSweepJob)
def sweep_webhook_messages_job(job: WebhookSweepJob) -> dict[str, int]:
    """One sweep of pending webhook messages as a job."""
    return {"recreated": sweep_webhook_messages()}


registry.schedule(Schedule(name="sweep-webhook-messages", actor=sweep_webhook_messages_job,
                           every=timedelta(seconds=get_settings().handoff_sweep_interval_s),
                           run_at_start=True))
registry.sweep("webhook-messages", sweep_webhook_messages)
# the messages a state change writes are handed to this relay once they are committed
webhooks.set_relay(hand_off)


def replay_failed(endpoint_id: str, *, message_id: str | None = None,
                  since: datetime | None = None) -> list[str]:
    """Send again the endpoint's ``failed`` messages (one by id, or every one created
    since ``since``): each back to ``pending``, due now, its job added again; its attempts
    so far stay listed. Returns the ids replayed."""
    query = select(WebhookMessage).where(
        col(WebhookMessage.endpoint_id) == endpoint_id,
        col(WebhookMessage.status) == MessageStatus.FAILED.value)
    if message_id is not None:
        query = query.where(col(WebhookMessage.id) == message_id)
    if since is not None:
        query = query.where(col(WebhookMessage.created_at) >= since)
    now = utcnow()
    with db.session() as session:
        rows = session.exec(query.with_for_update()).all()
        for message in rows:
            message.status, message.next_attempt_at = MessageStatus.PENDING, None
            message.handed_off_at = now
        session.add_all(rows)
        replayed = [message.id for message in rows]
    for replay_id in replayed:
        enqueue_message(replay_id, endpoint_id, replay=True)
    return replayed
