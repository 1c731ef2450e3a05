"""herald's queue table: every queue its processes run, with the values each one needs.

The values and what each queue is for are listed in docs/queue.md#the-queue-table.
The environment overrides a value where a setting names it (``DISPATCH_ATTEMPTS``,
``DISPATCH_BACKOFF_MS``, ``EMAIL_WORKER_CONCURRENCY``). The table is on herald's
:class:`~herald.queue.Registry` (``registry``, here), which every module of ``actors``
declares its actors, schedules, sweeps and capsules on, and herald's App reads.

The table also says which modules declare each queue's actors (:data:`QUEUE_MODULES`),
so that a worker imports only the lanes it serves (docs/queue.md#the-queue-table): the
table itself imports none of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from herald.queue import (
    DAY,
    HOUR,
    MINUTE,
    SECOND,
    Backoff,
    Keep,
    QueueSpec,
    Registry,
    Retention,
)
from herald.settings import Settings, get_settings

#: Retention the notification queues share: 500 completed; failed 7 days or 5,000.
NOTIFICATION_RETENTION = Retention(completed=Keep(count=500), failed=Keep(count=5000, age=7 * DAY))
#: Supplier dispatch retention: completed 1 h or 1,000; failed 24 h.
DISPATCH_RETENTION = Retention(completed=Keep(count=1000, age=HOUR), failed=Keep(age=DAY))
#: email-retry retention: completed 1 day or 500; failed 7 days or 5,000.
EMAIL_RETRY_RETENTION = Retention(completed=Keep(count=500, age=DAY),
                                  failed=Keep(count=5000, age=7 * DAY))


def herald_queues(settings: Settings | None = None) -> list[QueueSpec]:
    """herald's queues, with the overrides of ``settings`` (read now when not given)
    applied: the queue table, called with no argument when an App is built."""
    settings = settings or get_settings()
    notification: dict[str, Any] = {"retention": NOTIFICATION_RETENTION,
                                    "backoff_base": 5 * SECOND, "shutdown_timeout": 5 * SECOND}
    business: dict[str, Any] = {"concurrency": 2, "attempts": 3, "backoff_base": 2 * SECOND}
    sync: dict[str, Any] = {"concurrency": 1, "attempts": 3, "backoff_base": 5 * SECOND,
                            "lock_duration": MINUTE}
    return [
        # orchestration → render and send one persisted email / SMS / push delivery
        QueueSpec(name="notification-email", concurrency=5, rate_limit=(30, MINUTE), attempts=5,
                  max_started_attempts=5, **notification),
        QueueSpec(name="notification-sms", concurrency=2, rate_limit=(10, MINUTE), attempts=3,
                  max_started_attempts=3, **notification),
        QueueSpec(name="notification-push", concurrency=2, attempts=3, max_started_attempts=3,
                  **notification),
        # batches, handoff reconciliation, callback normalisation
        QueueSpec(name="notification-orchestration", concurrency=2, attempts=5,
                  **{**notification, "backoff_base": SECOND}),
        # payment settlement → operator activation steps; settle completed payments;
        # issue eSIM profiles for paid store orders
        QueueSpec(name="activation", **business),
        QueueSpec(name="payment", **business),
        QueueSpec(name="store-fulfillment", **business),
        # clock → sync operator packages and eSIM catalogs; refresh exchange rates
        QueueSpec(name="package-sync", **sync),
        QueueSpec(name="esim-product-sync", **sync),
        QueueSpec(name="fx-refresh", **sync),
        # order placement and reroute → transmit one order to one supplier
        # (one group per supplier type: Sysco's SSH server limits its sessions, the
        # emails and PDF renders of the others need not wait behind its uploads)
        QueueSpec(name="supplier-dispatch", concurrency=4, attempts=settings.dispatch_attempts,
                  backoff_base=timedelta(milliseconds=settings.dispatch_backoff_ms),
                  lock_duration=120 * SECOND, retention=DISPATCH_RETENTION,
                  group_limits={"sysco": settings.sysco_worker_concurrency}),
        # inbound acknowledgments and admin → move a back-ordered line
        QueueSpec(name="backorder-reroute", concurrency=settings.email_worker_concurrency,
                  attempts=3, backoff_base=SECOND, retention=DISPATCH_RETENTION),
        # the state changes' webhook messages → one signed POST each; a group per endpoint
        # (its key the endpoint id), so a slow or dead endpoint holds only its own slots;
        # retries are the relay's own schedule (deferrals), attempts count only crashes
        QueueSpec(name="webhook-delivery", concurrency=8, attempts=5, backoff_base=5 * SECOND,
                  lock_duration=MINUTE, retention=DISPATCH_RETENTION, default_group_limit=2),
        # failed in-call sends → 5 min, 30 min, 2 h, 12 h, 24 h schedule
        QueueSpec(name="email-retry", concurrency=4, attempts=1, backoff=Backoff.NONE,
                  retention=EMAIL_RETRY_RETENTION),
    ]


#: The modules of ``actors`` that declare each queue's actors: ``herald worker QUEUE…``
#: imports just these (and :data:`EVERY_WORKER_MODULES`), so a process that serves the email
#: queue never loads the SFTP, PDF or eSIM adapters. A queue missing here makes the
#: worker import every module of ``actors`` instead (never too little).
QUEUE_MODULES: dict[str, tuple[str, ...]] = {
    "notification-email": ("actors.notifications",),
    "notification-sms": ("actors.notifications", "actors.sms_fallback"),
    "notification-push": ("actors.notifications",),
    "notification-orchestration": ("actors.batches", "actors.callbacks", "actors.digests",
                                   "actors.handoffs", "actors.idempotency"),
    "activation": ("actors.activation",),
    "payment": ("actors.payments",),
    "store-fulfillment": ("actors.store", "actors.store_recovery"),
    "package-sync": ("actors.catalog",),
    "esim-product-sync": ("actors.catalog",),
    "fx-refresh": ("actors.fx",),
    "supplier-dispatch": ("actors.supplier_dispatch", "actors.sysco_inbound"),
    "backorder-reroute": ("actors.backorder_reroute", "actors.purchasing"),
    "email-retry": ("actors.email_retry",),
    "webhook-delivery": ("actors.webhooks",),
}
#: What every worker process imports whatever its queues: the relay, because every
#: lane's state changes write webhook messages and hand them to it once committed
#: (docs/api.md#webhooks), and the module that declares herald's capsules.
EVERY_WORKER_MODULES = ("actors.webhooks", "actors.lifecycle")


def modules_of(queues: Iterable[str]) -> list[str] | None:
    """The modules that declare the actors of ``queues``, and
    :data:`EVERY_WORKER_MODULES`, in a stable order; None when a queue is not in
    :data:`QUEUE_MODULES` (import them all then)."""
    modules: dict[str, None] = {}
    for queue in queues:
        if queue not in QUEUE_MODULES:
            return None
        modules.update(dict.fromkeys(QUEUE_MODULES[queue]))
    return [*modules, *(name for name in EVERY_WORKER_MODULES if name not in modules)]


#: herald's declarations: this queue table, and every actor, schedule, sweep and worker
#: group of ``actors`` (each module declares its own on it when imported).
registry = Registry()
registry.provide(herald_queues)


def esim_store_enabled() -> bool:
    """The feature gate of the eSIM store's schedules: ``FEATURE_ESIM_STORE``."""
    return get_settings().feature_esim_store
