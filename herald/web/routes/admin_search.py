"""``GET /admin/search``: a job by id in any queue, a domain row by id or address, each
linked to its jobs and its timeline; behind ADMIN_TOKEN (docs/console.md#search).

Each kind of row has one finder in :data:`FINDERS`; a finder yields results lazily, so a
search stops reading once it has :data:`MAX_RESULTS`. The read queries and timelines are
:mod:`models.timelines`; this module links rows to their ledger jobs (through the job id
functions of the actors that add them) and shapes the JSON.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fastapi import Query
from sqlmodel import Session, col, select

from actors.activation import run_activation_step, step_job_id
from actors.batches import batch_job_id, run_batch
from actors.callbacks import callback_job_id, normalise_callback
from actors.notifications import CHANNEL_QUEUES
from actors.orchestration import E164
from actors.payments import PaymentAction, payment_job_id, settle_payment
from actors.purchasing import dispatch_dedup_of
from actors.store import issue_store_order
from actors.supplier_dispatch import dispatch_to_supplier
from herald import db
from herald.queue import Job, queue
from herald.queue import find_jobs as jobs_by_id_prefix
from herald.settings import email_address_problem
from herald.web.auth import admin_router
from herald.web.errors import api_error
from models import timelines
from models.activations import ActivationStep
from models.base import money
from models.callbacks import CallbackReceipt
from models.notifications import Account, Delivery, Notification, Outcome, SuppressionReason
from models.payments import Payment
from models.purchasing import PurchaseOrder, PurchaseOrderEvent, SupplierDispatch
from models.store import Order
from models.timelines import TimelineEvent

router = admin_router(tags=["admin"])

#: Longest search text (the longest address an account may hold).
MAX_QUERY_LENGTH = 320
#: Most results one search answers.
MAX_RESULTS = 50
#: Most issuance jobs listed for one order.
JOBS_PER_ORDER = 20
#: Most accounts an address finds, and most notifications and orders listed per account.
RECENT = 10
#: What may separate a phone number's digits as people write them.
_PHONE_SEPARATORS = re.compile(r"[\s().-]")
_PHONE_TEXT = re.compile(r"^\+?[\d\s().-]+$")

Result = dict[str, Any]
JobRef = tuple[str, str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchQuery:
    """What was typed, and the addresses it may be, normalised as accounts store them."""

    text: str
    #: The email as typed and lower-cased (accounts keep an email as it was given).
    emails: tuple[str, ...] = ()
    #: The E.164 form of a phone number typed with spaces, dashes, brackets or ``00``.
    phone: str | None = None


def parse_query(raw: str) -> SearchQuery:
    """The search for ``raw``; a 422 when it is blank, too long or holds a NUL."""
    text = raw.strip()
    if not text or len(text) > MAX_QUERY_LENGTH or "\x00" in text:
        raise api_error(422, "validation_error",
                        f"q: give an id, a job id prefix, an email or a phone "
                        f"(1 to {MAX_QUERY_LENGTH} characters, no NUL)")
    is_email = email_address_problem(text) is None  # as accounts are checked
    emails = tuple(dict.fromkeys((text, text.lower()))) if is_email else ()
    return SearchQuery(text=text, emails=emails, phone=_phone(text))


def _phone(text: str) -> str | None:
    """``text`` as an E.164 number, or None when it is not a phone number."""
    if not _PHONE_TEXT.match(text):
        return None
    number = _PHONE_SEPARATORS.sub("", text)
    number = "+" + number[2:] if number.startswith("00") else number
    number = number if number.startswith("+") else "+" + number
    return number if E164.match(number) else None


# -- shaping ----------------------------------------------------------------------------------
def _result(kind: str, id_: str, *, summary: str, state: str, jobs: Iterable[Job] = (),
            timeline: Iterable[TimelineEvent] = (), links: dict[str, Any] | None = None,
            job_queue: str | None = None) -> Result:
    result: Result = {"kind": kind, "id": id_, "summary": summary}
    if job_queue is not None:
        result["queue"] = job_queue
    return result | {
        "state": state,
        "jobs": [{"queue": job.queue, "id": job.id, "state": job.state.value} for job in jobs],
        "timeline": [{"at": event.at.isoformat(), "event": event.event, "detail": event.detail}
                     for event in timeline],
        "links": links or {}}


def _existing_jobs(refs: Iterable[JobRef]) -> list[Job]:
    """The jobs the ledger holds of these (queue, job id) pairs; the others are gone
    (finished and pruned, or never added)."""
    found = (queue(name).get(job_id) for name, job_id in dict.fromkeys(refs))
    return [job for job in found if job is not None]


# -- jobs ---------------------------------------------------------------------------------------
def job_result(job: Job) -> Result:
    """A ledger job; its links are the ids its payload carries."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    links = {name: value for name, value in payload.items()
             if name.endswith("_id") and isinstance(value, str)}
    summary = f"{job.actor} in {job.queue}: {job.state.value}"
    if job.failed_reason:
        summary += f" ({job.failed_reason[:120]})"
    return _result("job", job.id, summary=summary, state=job.state.value, links=links,
                   job_queue=job.queue)


def find_jobs(session: Session, query: SearchQuery) -> Iterator[Result]:
    """Jobs whose id is the text or starts with it, in every registry queue; exact ids
    first."""
    for job in jobs_by_id_prefix(query.text, limit=MAX_RESULTS):
        yield job_result(job)


# -- deliveries and notifications -----------------------------------------------------------
def _delivery_jobs(delivery: Delivery, receipts: list[CallbackReceipt]) -> list[JobRef]:
    """A delivery's channel job (job id = delivery id) and its receipts' normalisation."""
    refs = [(CHANNEL_QUEUES[delivery.channel], delivery.id)] if (
        delivery.channel in CHANNEL_QUEUES) else []
    return refs + [(normalise_callback.queue, callback_job_id(receipt.event_id))
                   for receipt in receipts]


def delivery_result(session: Session, delivery: Delivery) -> Result:
    """A delivery with its jobs and its outcome history (receipts included)."""
    receipts = timelines.receipts_of(session, delivery)
    notification = session.get(Notification, delivery.notification_id)
    summary = f"{delivery.channel} delivery: {delivery.outcome}"
    if delivery.reason == SuppressionReason.PREFERENCE and delivery.last_error:
        # which setting blocked it: "preference types.promo.offer.sms"
        summary += f" ({delivery.last_error})"
    elif delivery.reason:
        summary += f" ({delivery.reason})"
    if delivery.provider_message_id:
        summary += f" via {delivery.provider} {delivery.provider_message_id}"
    links = {"notification_id": delivery.notification_id}
    if notification is not None:
        links["account_id"] = notification.account_id
    return _result("delivery", delivery.id, summary=summary, state=delivery.outcome,
                   jobs=_existing_jobs(_delivery_jobs(delivery, receipts)),
                   timeline=timelines.delivery_timeline(delivery, receipts), links=links)


def find_deliveries(session: Session, query: SearchQuery) -> Iterator[Result]:
    """A delivery by id, and those a provider knows by that message id."""
    by_id = session.get(Delivery, query.text)
    for delivery in ([by_id] if by_id else []) + timelines.deliveries_by_message_id(
            session, query.text, limit=RECENT):
        yield delivery_result(session, delivery)


def notification_result(session: Session, notification: Notification) -> Result:
    """A notification with its deliveries' jobs and their merged timelines."""
    deliveries = timelines.deliveries_of(session, notification.id)
    receipts = {d.id: timelines.receipts_of(session, d) for d in deliveries}
    refs = [ref for d in deliveries for ref in _delivery_jobs(d, receipts[d.id])]
    if notification.batch_id:
        refs.append((run_batch.queue, batch_job_id(notification.batch_id)))
    pending = any(d.outcome in (Outcome.QUEUED, Outcome.SENDING) for d in deliveries)
    outcomes = ", ".join(f"{d.channel} {d.outcome}" for d in deliveries) or "no deliveries"
    links: dict[str, Any] = {"account_id": notification.account_id,
                             "delivery_ids": [d.id for d in deliveries]}
    if notification.batch_id:
        links["batch_id"] = notification.batch_id
    timeline = timelines.notification_timeline(notification, {
        d.id: timelines.delivery_timeline(d, receipts[d.id]) for d in deliveries})
    return _result("notification", notification.id,
                   summary=f"{notification.type} ({notification.occurrence}): {outcomes}",
                   state="in_progress" if pending else "settled",
                   jobs=_existing_jobs(refs), timeline=timeline, links=links)


def find_notifications(session: Session, query: SearchQuery) -> Iterator[Result]:
    """A notification by id."""
    notification = session.get(Notification, query.text)
    if notification is not None:
        yield notification_result(session, notification)


# -- accounts ---------------------------------------------------------------------------------
def find_accounts(session: Session, query: SearchQuery) -> Iterator[Result]:
    """An account by id or by address, then each one's latest notifications and orders
    (newest first)."""
    by_id = session.get(Account, query.text)
    accounts = list({account.id: account for account in ([by_id] if by_id else []) + (
        timelines.accounts_by_address(session, emails=query.emails, phone=query.phone,
                                      limit=RECENT))}.values())
    recent = {account.id: (timelines.recent_notifications(session, account.id, limit=RECENT),
                           timelines.recent_orders(session, account.id, limit=RECENT))
              for account in accounts}
    for account in accounts:
        notifications, orders = recent[account.id]
        addresses = " · ".join(a for a in (account.email, account.phone) if a) or "no address"
        yield _result("account", account.id, summary=f"account {addresses}",
                      state="active" if account.active else "inactive",
                      timeline=timelines.account_timeline(account),
                      links={"notification_ids": [n.id for n in notifications],
                             "order_ids": [o.id for o in orders]})
    for account in accounts:
        notifications, orders = recent[account.id]
        for notification in notifications:
            yield notification_result(session, notification)
        for order in orders:
            yield order_result(session, order)


# -- orders and payments ----------------------------------------------------------------------
def _payment_jobs(payment: Payment) -> list[JobRef]:
    """A payment's action jobs and, for an activation, its steps' jobs."""
    refs = [(settle_payment.queue, payment_job_id(payment.id, action))
            for action in PaymentAction]
    if payment.activation_id:
        refs += [(run_activation_step.queue, step_job_id(payment.activation_id, step))
                 for step in ActivationStep]
    return refs


def order_result(session: Session, order: Order) -> Result:
    """An order with its issuance runs' and payments' jobs, its status events and its
    payments' history."""
    store_order = timelines.store_order_of(session, order.id)
    payments = timelines.payments_of_order(session, order.id)
    # an order's issuance runs are ``{orderId}-issue`` and ``{orderId}-{trigger}-{key}``
    jobs = queue(issue_store_order.queue).find(f"{order.id}-", limit=JOBS_PER_ORDER)
    jobs += _existing_jobs(ref for payment in payments for ref in _payment_jobs(payment))
    summary = f"order {money(order.amount)} {order.currency}: {order.status}"
    if store_order is not None:
        summary += (f", issuance {store_order.issuance_state} "
                    f"({store_order.product_id} via {store_order.provider})")
    return _result("order", order.id, summary=summary, state=order.status, jobs=jobs,
                   timeline=timelines.order_timeline(session, order, payments),
                   links={"account_id": order.account_id,
                          "payment_ids": [payment.id for payment in payments]})


def find_orders(session: Session, query: SearchQuery) -> Iterator[Result]:
    """An order (and its store order, same id) by id."""
    order = session.get(Order, query.text)
    if order is not None:
        yield order_result(session, order)


def payment_result(payment: Payment) -> Result:
    """A payment with its jobs and its history."""
    links = {name: value for name, value in (("order_id", payment.order_id),
                                            ("activation_id", payment.activation_id)) if value}
    return _result("payment", payment.id,
                   summary=(f"payment {money(payment.amount)} {payment.currency} via "
                            f"{payment.gateway}: {payment.status}"),
                   state=payment.status, jobs=_existing_jobs(_payment_jobs(payment)),
                   timeline=timelines.payment_timeline(payment), links=links)


def find_payments(session: Session, query: SearchQuery) -> Iterator[Result]:
    """A payment by id."""
    payment = session.get(Payment, query.text)
    if payment is not None:
        yield payment_result(payment)


# -- purchase orders ---------------------------------------------------------------------------
def _dispatch_jobs(session: Session, dispatches: Iterable[SupplierDispatch]) -> list[Job]:
    """The live supplier-dispatch job of each dispatch: the job holding its dedup id (the
    jobs have no id of their own to look up; a finished job no longer holds one)."""
    return queue(dispatch_to_supplier.queue).dedup_holders(
        [dispatch_dedup_of(session, dispatch) for dispatch in dispatches])


def purchase_order_result(session: Session, order: PurchaseOrder) -> Result:
    """A purchase order with its dispatches' live jobs and its audit trail."""
    dispatches = list(session.exec(select(SupplierDispatch)
                                   .where(SupplierDispatch.order_id == order.id)
                                   .order_by(col(SupplierDispatch.created_at))))
    events = session.exec(select(PurchaseOrderEvent)
                          .where(PurchaseOrderEvent.order_id == order.id)
                          .order_by(col(PurchaseOrderEvent.at), col(PurchaseOrderEvent.id)))
    timeline = [TimelineEvent(at=order.created_at, event="placed",
                              detail={"order_number": order.order_number})]
    timeline += [TimelineEvent(at=event.at, event=event.type,
                               detail={"supplier_id": event.supplier_id,
                                       "line_item_id": event.line_item_id, **event.payload})
                 for event in events]
    states = ", ".join(f"{d.supplier_type} {d.status}" for d in dispatches) or "no dispatches"
    return _result("purchase_order", order.id,
                   summary=f"purchase order {order.order_number} for {order.restaurant_name}: "
                           f"{order.status} ({states})",
                   state=order.status, jobs=_dispatch_jobs(session, dispatches),
                   timeline=timeline,
                   links={"dispatch_ids": [d.id for d in dispatches],
                          "supplier_ids": sorted({d.supplier_id for d in dispatches})})


def find_purchase_orders(session: Session, query: SearchQuery) -> Iterator[Result]:
    """A purchase order by id."""
    order = session.get(PurchaseOrder, query.text)
    if order is not None:
        yield purchase_order_result(session, order)


#: One finder per kind, asked in this order; a new kind is one more.
FINDERS: list[Callable[[Session, SearchQuery], Iterator[Result]]] = [
    find_deliveries, find_notifications, find_accounts, find_orders, find_payments,
    find_purchase_orders, find_jobs]


def search_all(session: Session, query: SearchQuery,
               limit: int = MAX_RESULTS) -> list[Result]:
    """Every finder's results in :data:`FINDERS` order, each (kind, id) once, at most
    ``limit``."""
    seen: set[tuple[str, str]] = set()

    def first_sightings() -> Iterator[Result]:
        for finder in FINDERS:
            for result in finder(session, query):
                if (result["kind"], result["id"]) not in seen:
                    seen.add((result["kind"], result["id"]))
                    yield result

    return list(itertools.islice(first_sightings(), limit))


@router.get("/search", summary="Find a job, delivery, notification, account, order, payment "
            "or purchase order")
def search(q: str = Query(description="an id, a job id prefix, an email or a phone number",
                          min_length=1, max_length=MAX_QUERY_LENGTH)) -> dict[str, Any]:
    """Jobs by id or id prefix in every queue; deliveries, notifications, accounts, orders,
    payments and purchase orders by id; a delivery by its provider message id; accounts by
    email or phone with their latest notifications and orders. Each result lists its jobs
    and timeline."""
    query = parse_query(q)
    with db.session() as session:
        return {"q": q, "results": search_all(session, query)}
