"""herald's capsules: which queues start together, what each capsule builds first, and
what a failure of that step stops (docs/queue.md#capsules).

=====================  ==========================================  =====================
capsule                startup step                                a failed step
=====================  ==========================================  =====================
notification queues    build the provider chain of each channel    stops these queues
                       whose queue the process runs; load and      only (``/readyz`` of
                       compile every notification template; check  the worker says so)
                       SMS_FALLBACK_AFTER_S's event types
business queues        build the enabled eSIM provider plugins     stops the process
                       (``ESIM_PROVIDERS``) and operators
                       (``OPERATORS``)
store recovery         enqueue one store recovery scan now (in     stops the process
                       the process that runs ``store-fulfillment``)
supplier queues        warm the PDF renderer (one render, in the   nothing (``/readyz``
                       background); a missing renderer is logged,  of the worker reports
                       not fatal                                   the renderer)
=====================  ==========================================  =====================

The supplier queues' ``/readyz`` also checks the PDF renderer (headless Chromium,
``CHROMIUM_PATH``) on every probe, from a cache of its last successful render: without
it central-kitchen dispatches fail, while Sysco and Costco ones still go.

Every step runs before any queue of the process is consumed, so a process that stops at
start has taken no job. Notification queues drain within 5 s (their queues'
``shutdown_timeout``), then their runs are forced; business queues drain without a
deadline.

Every worker process imports this module, whatever queues it serves, so a step imports
what it builds when it runs (in the processes that run its queues): declaring the
capsules loads no lane (docs/queue.md#the-queue-table).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from actors.queues import registry
from herald.queue import Capsule, OnFailure, capsule_queues
from herald.settings import get_settings

if TYPE_CHECKING:
    from providers.plugins import PluginRegistry

log = logging.getLogger("herald.lifecycle")

NOTIFICATION_QUEUES = ("notification-email", "notification-sms", "notification-push",
                      "notification-orchestration")
BUSINESS_QUEUES = ("activation", "payment", "store-fulfillment")
SUPPLIER_QUEUES = ("supplier-dispatch",)


class StartupError(RuntimeError):
    """A capsule's startup step cannot build what its actors need; the message says which
    setting to fix."""


def start_notification_queues() -> None:
    """Build every provider of the chain of each channel this process sends
    (``EMAIL_PROVIDERS`` or ``EMAIL_PROVIDER``, and so on; every channel when called
    outside a worker's start) and compile every notification template, so that a
    setting or a template that cannot work fails here instead of in every send;
    SMS_FALLBACK_AFTER_S must name event types that send SMS."""
    from actors.event_catalogue import fallback_setting_problem
    from actors.notifications import CHANNEL_QUEUES
    from actors.render import NOTIFICATIONS_DIR, environment
    from providers.select import SERVICE_SETTINGS, provider_chain

    problem = fallback_setting_problem()
    if problem is not None:
        raise StartupError(problem)
    running = capsule_queues()
    for channel, setting in SERVICE_SETTINGS.items():
        if running is not None and CHANNEL_QUEUES[channel] not in running:
            continue  # another process sends it: its SDK and settings are not this one's
        try:
            provider_chain(channel)
        except Exception as error:
            raise StartupError(f"{setting.upper()}(S): a {channel} provider cannot be built "
                               f"({type(error).__name__}: {error})") from error
    templates = environment()
    names = templates.list_templates(filter_func=lambda name: name.startswith(
        f"{NOTIFICATIONS_DIR}/"))
    for name in names:
        templates.get_template(name)
    log.info("notification queues ready", extra={"templates": len(names)})


def start_business_queues() -> None:
    """Build every eSIM provider plugin ``ESIM_PROVIDERS`` enables and every operator
    ``OPERATORS`` enables; an unknown name or a plugin that cannot be built fails here."""
    from providers.esim import esim_providers
    from providers.operators import operators

    _build_all(esim_providers, "ESIM_PROVIDERS", "eSIM provider")
    _build_all(operators, "OPERATORS", "operator")


def _build_all(registry: PluginRegistry[Any], setting: str, what: str) -> None:
    settings = get_settings()
    for name in registry.enabled(settings):
        if name not in registry.classes:
            raise StartupError(f"{setting} names {name!r}, which is not a known {what} "
                               f"(known: {', '.join(sorted(registry.classes))})")
        try:
            registry.get(name, settings)
        except Exception as error:
            raise StartupError(f"{setting}: the {what} {name!r} cannot be built "
                               f"({type(error).__name__}: {error})") from error


def _start_store_recovery() -> None:
    from actors.store_recovery import start_store_recovery

    start_store_recovery()


def _renderer_ready() -> bool | str:
    from providers.pdf import renderer_ready

    return renderer_ready()


def start_supplier_queues() -> None:
    """Start rendering one page with the PDF renderer, so the first readiness probe and
    the first central-kitchen dispatch find it warm; returns at once. A renderer that
    cannot render is logged and reported by ``/readyz``, not fatal (the other supplier
    types need none)."""
    # Chromium's first render takes most of a second: the worker need not wait for it,
    # since Sysco and Costco dispatches never render (docs/suppliers.md#the-dispatch-worker)
    threading.Thread(target=_warm_renderer, name="herald-pdf-warm-up", daemon=True).start()


def _warm_renderer() -> None:
    ready = _renderer_ready()
    if ready is not True:
        log.warning("PDF renderer not ready: central-kitchen dispatches will fail",
                    extra={"reason": ready})


NOTIFICATION_CAPSULE = Capsule(name="notification queues", queues=NOTIFICATION_QUEUES,
                               startup=start_notification_queues,
                               on_failure=OnFailure.STOP_CAPSULE)
BUSINESS_CAPSULE = Capsule(name="business queues", queues=BUSINESS_QUEUES,
                           startup=start_business_queues, on_failure=OnFailure.STOP_ALL)
STORE_RECOVERY_CAPSULE = Capsule(name="store recovery", runs_with=("store-fulfillment",),
                                 startup=_start_store_recovery,
                                 on_failure=OnFailure.STOP_ALL)

SUPPLIER_CAPSULE = Capsule(name="supplier queues", queues=SUPPLIER_QUEUES,
                           startup=start_supplier_queues, on_failure=OnFailure.STOP_CAPSULE,
                           readiness=_renderer_ready)

registry.declare_capsules(NOTIFICATION_CAPSULE, BUSINESS_CAPSULE, STORE_RECOVERY_CAPSULE,
                          SUPPLIER_CAPSULE)
