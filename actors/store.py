"""The eSIM store: placing an order, issuing the eSIM profile of a paid one through its
provider plugin (the store-fulfillment queue), and the providers' status webhooks
(docs/state-machines.md#store-orders).

``pending → in_flight → issued | failed | reconciliation_required | pending_verification``.
``in_flight`` is committed before every call that may charge (``issue``); a run that finds
the order ``in_flight``, ``reconciliation_required`` or ``pending_verification`` reconciles
through the plugin instead of issuing again, so a provider without idempotency keys never
charges twice. Every write goes through :func:`models.store.transition_store_order`.

How each provider answer moves the order:

- transient failure: back to ``pending`` and the error re-raised, so the queue's attempts
  and backoff engage; the failure is recorded (``error_code``, ``failed_reason``) on the
  last attempt only.
- out of stock, terminal: ``failed`` (the order too), and :class:`Permanent`: no retry.
- ambiguous: ``reconciliation_required``, and :class:`ReconcileLater` is raised, so the
  job's next attempt (after the backoff) reconciles it. Left there after the last
  attempt, it waits for the provider's webhook or a requeue.
- anything unclassified: the order stays ``in_flight`` and the error is re-raised; the
  next attempt reconciles.
- pending verification: the verification URL and a deadline
  (``STORE_VERIFICATION_DEADLINE_S``) are recorded and the job completes; the order waits
  (paid, not completed) for the provider's ``verified`` webhook. A run of the
  verification deadline check that still finds it unverified fails it.
- issued: the profile and the order's ``completed`` are one transaction; then the
  ``esim.ready`` notification is triggered (durably deduplicated per profile: its
  occurrence is the ICCID). A failed trigger never un-issues: the error is re-raised, and
  the retried run, finding the order issued, triggers it again.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import ColumnElement, bindparam, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from actors.catalog import product_price
from actors.fx import current_rates
from actors.orchestration import trigger_event
from actors.queues import registry
from herald.db import Prepared, autocommit, is_postgres
from herald.db import session as db_session
from herald.queue import EnqueueResult, Permanent, enqueue, is_last_attempt
from herald.settings import get_settings
from herald.write_behind import WriteBehind
from models.base import snapshot, table_of, utcnow
from models.catalog import ProviderHealth, StoreProduct, health_reason
from models.store import (
    FINAL_ISSUANCE_STATES,
    RECONCILE_STATES,
    Db,
    EventSource,
    IssuanceState,
    Order,
    OrderStatus,
    StoreOrder,
    connection_of,
    find_by_reference,
    mark_announced,
    new_store_order,
    order_view,
    read_order_view,
    record_provider_reference,
    stamp_webhook,
    start_fresh_issuance,
    store_db,
    transition_store_order,
    write_store_order,
)
from providers.esim import (
    AmbiguousEsimError,
    EsimError,
    EsimProvider,
    IssueRequest,
    OutOfStock,
    ProviderOrder,
    ProviderOrderStatus,
    TerminalEsimError,
    TransientEsimError,
    esim_providers,
)

log = logging.getLogger("herald.store")


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


def issuance_job(order_id: str, trigger: Trigger = Trigger.PAYMENT,
                 run_key: str | None = None) -> tuple[StoreJob, dict[str, Any]]:
    """A run for ``order_id`` as :func:`herald.queue.enqueue_many_actors` takes it for
    :func:`issue_store_order`: its payload and its add's options (those of
    :func:`enqueue_issuance`), for a caller that adds it with jobs of its own."""
    return (StoreJob(order_id=order_id, trigger=trigger),
            {"job_id": issuance_job_id(order_id, trigger, run_key), "retry_failed": True})


def enqueue_issuance(order_id: str, trigger: Trigger = Trigger.PAYMENT,
                     run_key: str | None = None) -> EnqueueResult:
    """Add a run for ``order_id``; a retained failed run of the same id is retried in place,
    a live or completed one is left alone (``duplicated``)."""
    job, options = issuance_job(order_id, trigger, run_key)
    return enqueue(issue_store_order, job, **options)


#: The label of a run that asks the provider for a new order.
FRESH = "fresh issuance"
#: What the ``in_flight`` stamp before an ``issue`` call says it does.
ASKING = "asking the provider"


class ReconcileLater(RuntimeError):
    """The provider's answer was ambiguous: the order waits as ``reconciliation_required``
    and the job's next attempt reconciles it."""


# -- placing an order -------------------------------------------------------------------
class StoreDisabled(RuntimeError):
    """FEATURE_ESIM_STORE is off: no order is taken."""


class ProductNotFound(LookupError):
    """No product of that id is on sale in the synced catalog."""


class ProviderUnavailable(RuntimeError):
    """The product's provider takes no orders now (its health reading, or its plugin is
    not enabled); ``provider`` names it."""

    def __init__(self, provider: str, detail: str) -> None:
        super().__init__(f"provider {provider} is unavailable: {detail}")
        self.provider = provider


class AccountNotFound(LookupError):
    """The order names an account that does not exist."""


_products, _health = table_of(StoreProduct), table_of(ProviderHealth)
#: The product and its provider's health reading, in one read (the checkout's hot path).
_PRODUCT_AND_HEALTH = Prepared(
    select(*_products.columns,
           _health.c.available.label("health_available"),
           _health.c.detail.label("health_detail"),
           _health.c.checked_at.label("health_checked_at"))
    .outerjoin(_health, _health.c.provider == _products.c.provider)
    .where(_products.c.id == bindparam("product_id")))


def _product(db: Db, product_id: str) -> tuple[StoreProduct, ProviderHealth | None] | None:
    """The product of that id and its provider's health reading (None: never read)."""
    row = _PRODUCT_AND_HEALTH.run(connection_of(db),
                                  {"product_id": product_id}).first()
    if row is None:
        return None
    health = None
    if row["health_available"] is not None:
        health = snapshot(ProviderHealth, provider=row["provider"],
                          available=row.pop("health_available"),
                          detail=row.pop("health_detail"),
                          checked_at=row.pop("health_checked_at"))
    product = snapshot(StoreProduct, **{column.key: row[column.key]
                                         for column in _products.columns})
    return product, health


def _check_provider(provider: str, health: ProviderHealth | None) -> None:
    """The checkout circuit breaker: refuse a provider whose plugin is off, or whose last
    health reading (``health``) says it is unavailable."""
    if provider not in esim_providers.enabled() or provider not in esim_providers.classes:
        raise ProviderUnavailable(provider, "its plugin is not enabled (ESIM_PROVIDERS)")
    reason = health_reason(health)
    if reason is not None:
        raise ProviderUnavailable(provider, reason)


def _rates() -> dict[str, Decimal]:
    with db_session() as session:
        return current_rates(session)


def place_order(account_id: str, product_id: str, currency: str | None = None
                ) -> dict[str, Any]:
    """Persist an order for a product of the synced catalog (``pending_payment``, issuance
    ``pending``) and return it as JSON. It costs the product's price, or with
    ``currency`` the price the catalog lists in that currency at the latest exchange
    rates (:func:`actors.catalog.product_price`); that amount and currency are locked on
    the order, and its payment must match them. Nothing is persisted when it is refused:
    StoreDisabled, AccountNotFound, ProductNotFound (also for a product no longer on
    sale), ProviderUnavailable, :class:`actors.fx.UnratedCurrency`."""
    if not get_settings().feature_esim_store:
        raise StoreDisabled("the eSIM store is turned off (FEATURE_ESIM_STORE)")
    with store_db() as db:
        found = _product(db, product_id)
        if found is None or not found[0].active:
            raise ProductNotFound(product_id)
        product, health = found
        _check_provider(product.provider, health)
        rates = _rates() if currency else {}
        amount, priced_in = product_price(product, currency, rates)
        order, store_order, event = new_store_order(
            account_id=account_id, product_id=product.id, provider=product.provider,
            amount=amount, currency=priced_in)
        try:
            write_store_order(db, order, store_order, event)
        except IntegrityError:  # the account's foreign key: no look-up first
            raise AccountNotFound(account_id) from None
        if isinstance(db, Session):
            db.commit()
    # the answer is what was written: nothing is read back
    return order_view(order, store_order, [event])


# -- reading ----------------------------------------------------------------------------
def get_order(order_id: str) -> dict[str, Any] | None:
    """A store order as JSON with its status events, or None."""
    with db_session() as session:
        return read_order_view(session, order_id)


# -- provider webhooks ------------------------------------------------------------------
class UnknownEsimProvider(LookupError):
    """No enabled eSIM provider plugin has that name."""


class UnknownReference(LookupError):
    """A webhook about an order reference herald does not have."""


def receive_webhook(provider: str, body: bytes, headers: Mapping[str, str]) -> str:
    """Verify a provider's status webhook and queue a reconcile run of its order; returns
    the order id. The issuance state is never written here: the run reconciles through
    the provider, whatever the webhook claims.

    The run's job id derives from the body, so a redelivered webhook is one run. The
    order's ``webhook_at`` is stamped once the run is queued (a failed enqueue raises and
    leaves it unstamped, for the webhook fallback check). Raises UnknownEsimProvider,
    :class:`providers.esim.InvalidWebhook` (nothing changed), UnknownReference.
    """
    try:
        plugin = esim_providers.get(provider)
    except KeyError:
        raise UnknownEsimProvider(provider) from None
    webhook = plugin.verify_webhook(body, headers)
    with db_session() as session:
        order = find_by_reference(session, provider, webhook.provider_order_ref)
        if order is None:
            raise UnknownReference(webhook.provider_order_ref)
        enqueue_issuance(order.id, Trigger.PROVIDER_WEBHOOK,
                         run_key=hashlib.sha256(body).hexdigest())
        stamp_webhook(session, order.id)
        return order.id


# -- the issuance job -------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    """A store order and its order as a run read them at its start."""

    id: str
    account_id: str
    order_status: str
    product_id: str
    provider: str
    issuance_state: str
    provider_order_ref: str | None
    idempotency_key: str
    in_flight_at: datetime | None
    verification_deadline: datetime | None
    #: The product's name in the synced catalog (the ``esim.ready`` notification's plan
    #: name), None when the catalog no longer has it.
    product_name: str | None = None


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of one order: what asked for it, and the label its status events carry."""

    order: Snapshot
    trigger: Trigger
    label: str

    def note(self, what: str) -> str:
        """A status event's note: the run, then what happened (``fresh issuance: issued``)."""
        return f"{self.label}: {what}"


def run_label(trigger: Trigger, *, reconcile: bool) -> str:
    """``fresh issuance``, or ``reconcile (<trigger>)``. The payment's own job reconciles
    only when it runs again (a retried attempt, a restart after a crash, a replayed
    settlement): that reads as ``reconcile (retry or requeue)``."""
    if not reconcile:
        return FRESH
    shown = Trigger.REQUEUE if trigger is Trigger.PAYMENT else trigger
    return f"reconcile ({TRIGGER_NOTES[shown]})"


_store_orders, _orders = table_of(StoreOrder), table_of(Order)
#: A run's one read at its start: the store order, its order, its product's name.
_SNAPSHOT = Prepared(
    select(*(_store_orders.c[field.name] for field in dataclasses.fields(Snapshot)
             if field.name not in ("account_id", "order_status", "product_name")),
           _orders.c.account_id, _orders.c.status.label("order_status"),
           _products.c.name.label("product_name"))
    .join(_orders, _orders.c.id == _store_orders.c.id)
    .outerjoin(_products, _products.c.id == _store_orders.c.product_id)
    .where(_store_orders.c.id == bindparam("order_id")))


def _snapshot(order_id: str) -> Snapshot | None:
    with store_db() as db:
        row = _SNAPSHOT.run(connection_of(db),
                            {"order_id": order_id}).first()
    return None if row is None else Snapshot(**row)


def _transition(run: Run, what: str, **kwargs: Any) -> bool:
    """:func:`transition_store_order` for this run (source ``system``, the run's note)."""
    with store_db() as db:
        return transition_store_order(db, run.order.id, source=EventSource.SYSTEM,
                                      note=run.note(what), **kwargs)


def _plugin(provider: str) -> EsimProvider:
    try:
        return esim_providers.get(provider)
    except KeyError:
        # configuration, not the order: left as it is for a requeue once it is enabled
        raise Permanent(f"eSIM provider {provider!r} is not enabled (ESIM_PROVIDERS)") from None


def _request(plugin: EsimProvider, order: Snapshot, reference: str | None = None
             ) -> IssueRequest:
    key = order.idempotency_key if plugin.supports_idempotency_keys else None
    return IssueRequest(order_id=order.id, product_id=order.product_id,
                        provider_order_ref=reference, idempotency_key=key)


def _persist_reference(order_id: str, reference: str) -> None:
    with store_db() as db:
        record_provider_reference(db, order_id, reference)


def _issue(plugin: EsimProvider, run: Run, *, expect: frozenset[IssuanceState],
           guard: ColumnElement[bool] | None = None) -> dict[str, Any]:
    """Stamp ``in_flight`` (committed), then ask the provider for the order."""
    order = run.order
    if order.order_status != OrderStatus.PAID.value:
        raise Permanent(f"order {order.id} is {order.order_status}: only a paid order is "
                        "issued")
    if not _transition(run, ASKING, to=IssuanceState.IN_FLIGHT, expect=expect,
                       guard=guard, in_flight_at=utcnow()):
        # another run got there first and is issuing it (or has): never a second order
        return {"order_id": order.id, "skipped": "another run holds it"}
    return _ask(plugin, run)


def _ask(plugin: EsimProvider, run: Run) -> dict[str, Any]:
    """Ask the provider for the order, its ``in_flight`` stamp committed, and apply what
    it answers."""
    order = run.order
    try:
        answer = plugin.issue(_request(plugin, order),
                              on_reference=functools.partial(_persist_reference, order.id))
    except EsimError as error:
        _classified(run, error, issuing=True)
    if answer.status is ProviderOrderStatus.NOT_FOUND:
        raise RuntimeError("the provider answered an issue with not_found")  # unclassified
    return _apply(run, answer)


def _reconcile(plugin: EsimProvider, run: Run) -> dict[str, Any]:
    """Ask the provider what it has of the order instead of issuing again; issue fresh
    only when it has nothing."""
    order = run.order
    try:
        answer = plugin.reconcile(_request(plugin, order, order.provider_order_ref))
    except EsimError as error:
        _classified(run, error, issuing=False)
    if answer.status is ProviderOrderStatus.NOT_FOUND:
        # the provider never got it: safe to issue. Fenced by the in_flight stamp this run
        # read, so two runs reconciling at once cannot both issue.
        fresh = dataclasses.replace(run, label=f"{run.label} found nothing, {FRESH}")
        return _issue(plugin, fresh, expect=RECONCILE_STATES,
                      guard=col(StoreOrder.in_flight_at).is_not_distinct_from(order.in_flight_at))
    return _apply(run, answer)


def _classified(run: Run, error: EsimError, *, issuing: bool) -> NoReturn:
    """Record a classified provider failure, then raise what the queue should do."""
    if isinstance(error, TransientEsimError):
        if issuing:  # the provider did not take it: back to pending for the next attempt
            last = is_last_attempt()
            recorded = ({"error_code": error.code, "failed_reason": str(error)} if last
                        else {})
            _transition(run, "transient failure" + (" on the last attempt" if last else
                                                    ", retrying"),
                        to=IssuanceState.PENDING, expect={IssuanceState.IN_FLIGHT}, **recorded)
        raise error
    if isinstance(error, OutOfStock | TerminalEsimError):
        _fail(run, error.code, str(error))
        raise Permanent(f"{error.code}: {error}") from error
    if isinstance(error, AmbiguousEsimError):
        reference = ({"provider_order_ref": error.provider_order_ref}
                     if error.provider_order_ref else {})
        _transition(run, "ambiguous answer, to be reconciled",
                    to=IssuanceState.RECONCILIATION_REQUIRED, expect=RECONCILE_STATES,
                    error_code=error.code, **reference)
        raise ReconcileLater(f"ambiguous provider answer: {error}") from error
    raise error  # a bare EsimError is unclassified: the order stays as it is


def _fail(run: Run, code: str, reason: str, *, guard: ColumnElement[bool] | None = None,
          expect: frozenset[IssuanceState] = RECONCILE_STATES) -> bool:
    failed = _transition(run, f"failed ({code})", to=IssuanceState.FAILED, expect=expect,
                         guard=guard, error_code=code, failed_reason=reason)
    if failed:
        log.info("order failed", extra={"order_id": run.order.id, "error_code": code})
    return failed


def _apply(run: Run, answer: ProviderOrder) -> dict[str, Any]:
    """Move the order to what the provider's answer says."""
    order, status = run.order, answer.status
    result: dict[str, Any] = {"order_id": order.id, "provider_status": status.value}
    reference = ({"provider_order_ref": answer.provider_order_ref}
                 if answer.provider_order_ref else {})
    if status is ProviderOrderStatus.ISSUED:
        return result | _issued(run, answer, reference)
    if status is ProviderOrderStatus.FAILED:
        _fail(run, answer.error_code or "provider_failed",
              answer.reason or "the provider failed the order")
    elif status is ProviderOrderStatus.PROCESSING:
        # the provider has it: its webhook (or the fallback check) brings the profile
        _transition(run, "accepted, waiting for the profile", to=IssuanceState.IN_FLIGHT,
                    expect=RECONCILE_STATES, **reference)
    elif (run.trigger is Trigger.VERIFICATION_DEADLINE
          and order.issuance_state == IssuanceState.PENDING_VERIFICATION.value):
        _fail(run, "verification_expired", "the customer did not verify before the "
              "deadline", expect=frozenset({IssuanceState.PENDING_VERIFICATION}),
              guard=col(StoreOrder.verification_deadline) <= utcnow())
    else:
        deadline = order.verification_deadline or utcnow() + timedelta(
            seconds=get_settings().store_verification_deadline_s)
        _transition(run, "waiting for the customer to verify",
                    to=IssuanceState.PENDING_VERIFICATION, expect=RECONCILE_STATES,
                    verification_url=answer.verification_url,
                    verification_deadline=deadline, **reference)
    return result


def _issued(run: Run, answer: ProviderOrder, reference: dict[str, str]) -> dict[str, Any]:
    """The issued write (with the order's ``completed``), then the eSIM notification."""
    profile = answer.profile
    if profile is None:
        raise RuntimeError("the provider reported the order issued without a profile")
    applied = _transition(run, "issued", to=IssuanceState.ISSUED, expect=RECONCILE_STATES,
                          error_code=None, failed_reason=None, iccid=profile.iccid,
                          activation_code=profile.activation_code,
                          smdp_address=profile.smdp_address, **reference)
    if applied:
        log.info("order issued", extra={"order_id": run.order.id})
        # what the announcement needs is what this run read and wrote: no read again
        _announce(run.order.id, run.order.account_id, profile.iccid, profile.activation_code,
                  run.order.product_name)
    return {"issued": applied}


def announce_profile(order_id: str) -> None:
    """Trigger ``esim.ready`` for an issued order's profile through the orchestration
    (its email carries the QR code). The occurrence is the ICCID: one notification per
    profile however often this runs."""
    with db_session() as session:
        row = session.execute(
            select(col(Order.account_id), col(StoreOrder.iccid), col(StoreOrder.activation_code),
                   col(StoreProduct.name))
            .join(Order, col(Order.id) == col(StoreOrder.id))
            .outerjoin(StoreProduct, col(StoreProduct.id) == col(StoreOrder.product_id))
            .where(col(StoreOrder.id) == order_id,
                   col(StoreOrder.issuance_state) == IssuanceState.ISSUED.value)).first()
    if row is not None:
        _announce(order_id, row.account_id, row.iccid, row.activation_code, row.name)


def _announce(order_id: str, account_id: str, iccid: str | None,
              activation_code: str | None, plan_name: str | None) -> None:
    """:func:`announce_profile` of an issued profile already at hand."""
    if not iccid or not activation_code:
        return
    data = {"iccid": iccid, "activation_code": activation_code}
    if plan_name:
        data["plan_name"] = plan_name[:100]
    trigger_event(account_id=account_id, type="esim.ready", occurrence=iccid, data=data)
    # only now: a run killed before its stamp is written leaves the order for the
    # recovery scans, whose run triggers it again (a no-op if it had got through: one
    # per profile)
    _announced_behind.add([order_id])


#: The ``announced_at`` stamps, written behind the runs, many in one UPDATE: a stamp lost
#: with its process leaves the order to the stalled order scan (module docstring), which
#: is what a run killed before it would have left.
_announced_behind: WriteBehind[str] = WriteBehind(
    mark_announced, name="herald-announced-stamps", max_batch=1000, linger_s=0.02)


def flush_announced_stamps(timeout_s: float | None = None) -> bool:
    """Wait until the ``announced_at`` stamps of every profile announced so far in this
    process are written; False when ``timeout_s`` ran out first."""
    return _announced_behind.flush(timeout_s)


def _start_fresh(order_id: str) -> Snapshot | None:
    """PostgreSQL: the ``pending → in_flight`` stamp of a paid order whose provider's
    plugin is enabled and built, and the run's read, in one statement
    (:func:`models.store.start_fresh_issuance`); the order as the run read it, or None
    when nothing was stamped (SQLite, or another state: the run reads and decides)."""
    if not is_postgres():
        return None
    providers = []
    for name in esim_providers.enabled():
        try:
            esim_providers.get(name)
        except Exception:  # its orders take the usual path, which raises why
            continue
        providers.append(name)
    with autocommit() as connection:
        row = start_fresh_issuance(connection, order_id, providers=providers,
                                   note=f"{FRESH}: {ASKING}")
    return None if row is None else Snapshot(**row)


def run_issuance(job: StoreJob) -> dict[str, Any]:
    """Issue or reconcile one order as the module's docstring says; returns what it did
    (the job's return value)."""
    started = _start_fresh(job.order_id)
    if started is not None:  # the usual first run: stamped, ask the provider
        return _ask(_plugin(started.provider), Run(started, job.trigger, FRESH))
    order = _snapshot(job.order_id)
    if order is None:
        raise Permanent(f"no store order {job.order_id}")
    state = IssuanceState(order.issuance_state)
    if state in FINAL_ISSUANCE_STATES:
        if state is IssuanceState.ISSUED:
            announce_profile(order.id)  # a no-op unless an earlier trigger failed
        return {"order_id": order.id, "skipped": f"already {state.value}"}
    plugin = _plugin(order.provider)
    if state is IssuanceState.PENDING:
        return _issue(plugin, Run(order, job.trigger, run_label(job.trigger, reconcile=False)),
                      expect=frozenset({IssuanceState.PENDING}))
    return _reconcile(plugin, Run(order, job.trigger, run_label(job.trigger, reconcile=True)))


@registry.actor(queue="store-fulfillment", payload=StoreJob)
def issue_store_order(job: StoreJob) -> dict[str, Any]:
    """Issue or reconcile one order (see the module's docstring)."""
    return run_issuance(job)
