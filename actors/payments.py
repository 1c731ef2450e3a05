"""The payment queue: a completed payment is settled, and settlement hands the store
order or the activation on (docs/state-machines.md#payments).

:func:`create_payment` persists a ``pending`` payment for exactly one store order
(``pending_payment``; amount and currency must be the order's) or one pending activation
(its amount is taken as given: an activation has no price of its own). The gateway's
completion (:func:`complete_payment`) moves it to ``completed`` and adds the
``settle_payment`` job, id ``{paymentId}-settle``. :func:`settle_payment` moves the
payment to ``settled`` and the order to ``paid`` in one transaction, then hands off —
the order's issuance run (``actors.store.enqueue_issuance``) or the activation's
``initiate`` step — and adds the payment's receipt (``send_receipt``, id
``{paymentId}-receipt``).

Every payment job id is deterministic, so adding one again is a no-op while it is live
or completed, and retries a retained failure in place. Settlement alone may be replayed
after it completed (:func:`replay_settlement`): the job runs again under its id and
re-does only the handoff, itself idempotent by its own job ids, so a handoff lost
downstream recovers; the receipt, like every other completed payment action, stays
deduplicated.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from sqlmodel import Session, col, select

from actors import activation as activations
from actors import orchestration, store
from actors.queues import registry
from herald.db import autocommit, is_postgres
from herald.db import session as db_session
from herald.queue import (
    EnqueueResult,
    JobActor,
    Permanent,
    Schedule,
    enqueue,
    enqueue_many_actors,
)
from herald.settings import get_settings
from models.activations import Activation, ActivationStatus
from models.base import ID_LENGTH, money, snapshot, utcnow
from models.payments import (
    LIVE_STATUSES,
    PAYMENT_EVENTS,
    Payment,
    PaymentStatus,
    complete_in_one,
    insert_order_payment,
    pay_order,
    read_payment,
    settle_in_one,
    settled_messages,
    transition_payment,
)
from models.store import Order, OrderStatus
from models.webhooks import subscribed_types

log = logging.getLogger("herald.payments")

PAYMENT_QUEUE = "payment"
#: Gateways a payment may name (the gateway's own completion calls come to herald).
GATEWAYS = ("mock", "stc_pay", "card")
#: Largest amount a payment column holds (18 digits, 4 after the point).
MAX_AMOUNT = Decimal("99999999999999.9999")
#: The webhook event a settlement writes.
SETTLED_EVENT = PAYMENT_EVENTS[PaymentStatus.SETTLED]
#: How often one step runs its statement again after losing a race to another (the
#: second run sees the winner's commit: one more is plenty).
RACE_TRIES = 3


class PaymentAction(StrEnum):
    """What a payment job does; each has its own job id suffix."""

    SETTLE = "settle_payment"
    SEND_RECEIPT = "send_receipt"


#: Job id suffix per action: ``{paymentId}-{suffix}``.
JOB_SUFFIX = {PaymentAction.SETTLE: "settle", PaymentAction.SEND_RECEIPT: "receipt"}


class PaymentNotFound(LookupError):
    """No payment (or no order or activation to pay for) has this id; ``kind`` says
    which was looked for."""

    def __init__(self, kind: str, key: str) -> None:
        super().__init__(f"no {kind.replace('_', ' ')} with id {key}")
        self.kind = kind


class InvalidPayment(ValueError):
    """The payment cannot be accepted as given; nothing was persisted."""


class PaymentConflict(RuntimeError):
    """The payment (or what it pays for) is not in a state that allows this."""


class PaymentJob(BaseModel):
    """A payment job, in the camelCase shape other producers of payment jobs use."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              serialize_by_alias=True)

    type: Literal["payment"] = "payment"
    action: PaymentAction
    payment_id: str = Field(min_length=1, max_length=ID_LENGTH)
    order_id: str | None = Field(default=None, max_length=ID_LENGTH)
    activation_id: str | None = Field(default=None, max_length=ID_LENGTH)
    #: The account that pays.
    user_id: str = Field(min_length=1, max_length=ID_LENGTH)
    gateway: str = Field(min_length=1, max_length=32)
    created_at: datetime


def payment_job_id(payment_id: str, action: PaymentAction) -> str:
    """The job id of one action of one payment: ``{paymentId}-settle``,
    ``{paymentId}-receipt``."""
    return f"{payment_id}-{JOB_SUFFIX[action]}"


# -- creating -------------------------------------------------------------------------------
def parse_amount(text: str) -> Decimal:
    """A positive decimal amount with at most 4 places; InvalidPayment otherwise."""
    try:
        amount = Decimal(text)
    except (InvalidOperation, TypeError):
        raise InvalidPayment("amount: not a decimal number (like \"50.00\")") from None
    if not amount.is_finite() or amount <= 0 or amount > MAX_AMOUNT:
        raise InvalidPayment("amount: must be a positive amount")
    if amount != amount.quantize(Decimal("0.0001")):
        raise InvalidPayment("amount: at most 4 decimal places")
    return amount


def price_mismatch(currency: str, price: str, order_currency: str) -> str:
    """Why a payment is refused for not being the order's price, naming the field at
    fault and the values to send: the currency when it is not the order's (whatever the
    amount), else the amount."""
    if currency != order_currency:
        return (f'currency: the order is priced in {order_currency}, not {currency}; send '
                f'"currency": "{order_currency}" with "amount": "{price}"')
    return f'amount: the order costs {price} {order_currency}; send "amount": "{price}"'


def _for_order(session: Session, order_id: str, amount: Decimal, currency: str) -> str:
    """Check (with the order row locked) that the order can be paid this amount; its
    account's id."""
    order = session.exec(select(Order).where(col(Order.id) == order_id)
                         .with_for_update()).first() if activations.storable_id(order_id) else None
    if order is None:
        raise PaymentNotFound("order", order_id)
    if order.status != OrderStatus.PENDING_PAYMENT:
        raise PaymentConflict(f"order {order_id} is {order.status}, not pending_payment")
    if (amount, currency) != (order.amount, order.currency):
        raise InvalidPayment(price_mismatch(currency, money(order.amount), order.currency))
    _no_live_payment(session, col(Payment.order_id) == order_id, f"order {order_id}")
    return order.account_id


def _for_activation(session: Session, activation_id: str) -> str:
    """Check (with the activation row locked) that the activation waits for a payment;
    its account's id."""
    found = session.exec(select(Activation).where(col(Activation.id) == activation_id)
                         .with_for_update()).first() if activations.storable_id(
                             activation_id) else None
    if found is None:
        raise PaymentNotFound("activation", activation_id)
    if found.status != ActivationStatus.PENDING:
        raise PaymentConflict(f"activation {activation_id} is {found.status}, not pending")
    _no_live_payment(session, col(Payment.activation_id) == activation_id,
                     f"activation {activation_id}")
    return found.account_id


def _no_live_payment(session: Session, condition: Any, what: str) -> None:
    existing = session.exec(select(Payment.id).where(
        condition, col(Payment.status).in_(LIVE_STATUSES)).limit(1)).first()
    if existing is not None:
        raise PaymentConflict(f"{what} already has payment {existing}")


def create_payment(*, order_id: str | None = None, activation_id: str | None = None,
                   amount: str, currency: str, gateway: str = "mock") -> Payment:
    """Persist a ``pending`` payment for one order or one activation.

    :class:`InvalidPayment` (nothing written) for both or neither target, an amount that
    is not a positive decimal, an unknown gateway, or an amount and currency that are not
    the order's; :class:`PaymentNotFound` for an unknown order or activation;
    :class:`PaymentConflict` for an order not ``pending_payment``, an activation not
    ``pending``, or one that already has a live payment.
    """
    if (order_id is None) == (activation_id is None):
        raise InvalidPayment("give order_id or activation_id, not both")
    value = parse_amount(amount)
    if gateway not in GATEWAYS:
        raise InvalidPayment(f"gateway: must be one of {', '.join(GATEWAYS)}")
    if order_id is not None and is_postgres():
        payment = _create_for_order(order_id, value, currency, gateway)
        log.info("payment created", extra={"payment_id": payment.id})
        return payment
    with db_session() as session:
        if order_id is not None:
            _for_order(session, order_id, value, currency)
        else:
            assert activation_id is not None
            _for_activation(session, activation_id)
        payment = Payment(order_id=order_id, activation_id=activation_id, amount=value,
                          currency=currency, gateway=gateway)
        session.add(payment)
    log.info("payment created", extra={"payment_id": payment.id})
    return payment


def _create_for_order(order_id: str, amount: Decimal, currency: str, gateway: str) -> Payment:
    """:func:`create_payment` for an order on PostgreSQL: one prepared statement on an
    autocommit connection (:func:`models.payments.insert_order_payment`), the order's
    row locked as the session path locks it, refused as that path refuses."""
    if not activations.storable_id(order_id):
        raise PaymentNotFound("order", order_id)
    payment = snapshot(Payment, order_id=order_id, amount=amount, currency=currency,
                       gateway=gateway)
    with autocommit() as connection:
        found, detail = insert_order_payment(connection, payment)
    if found == "missing":
        raise PaymentNotFound("order", order_id)
    if found == "status":
        raise PaymentConflict(f"order {order_id} is {detail}, not pending_payment")
    if found == "price":
        assert detail is not None
        price, _, order_currency = detail.partition(" ")
        raise InvalidPayment(price_mismatch(currency, price, order_currency))
    if found == "live":
        raise PaymentConflict(f"order {order_id} already has payment {detail}")
    return payment


def get_payment(payment_id: str) -> Payment | None:
    """One payment, or None."""
    if not activations.storable_id(payment_id):
        return None
    with autocommit() as connection:
        return read_payment(connection, payment_id)


# -- completing and settling ----------------------------------------------------------------
def _account_of(session: Session, payment: Payment) -> str:
    """The account that pays (the order's or the activation's)."""
    owner = (session.get(Order, payment.order_id) if payment.order_id
             else session.get(Activation, payment.activation_id))
    if owner is None:
        raise Permanent(f"payment {payment.id} pays for nothing that exists")
    return owner.account_id


def enqueue_payment_action(payment: Payment, action: PaymentAction, *,
                           replay: bool = False, retry_failed: bool = True,
                           user_id: str | None = None) -> EnqueueResult:
    """Add one action's job for ``payment`` (id ``{paymentId}-{suffix}``). A live or
    completed job of that id is left alone (``duplicated``) and a retained failed one is
    retried in place (unless ``retry_failed`` is false); ``replay`` (settlement only) also
    runs a completed settlement again (``replayed``). ``user_id``, the paying account,
    is read from the order or activation unless given."""
    if replay and action is not PaymentAction.SETTLE:
        raise ValueError("only settlement is replayed")
    if user_id is None:
        with db_session() as session:
            user_id = _account_of(session, payment)
    actor, (job, options) = _payment_job(payment, action, user_id, retry_failed=retry_failed,
                                         replay=replay)
    return enqueue(actor, job, **options)


def _payment_job(payment: Payment, action: PaymentAction, user_id: str, *,
                 retry_failed: bool = True, replay: bool = False
                 ) -> tuple[JobActor[PaymentJob], tuple[PaymentJob, dict[str, Any]]]:
    """One action's job for ``payment`` as :func:`herald.queue.enqueue_many_actors` takes
    it: its actor, its payload and its add's options (:func:`enqueue_payment_action`)."""
    job = PaymentJob(action=action, payment_id=payment.id, order_id=payment.order_id,
                     activation_id=payment.activation_id, user_id=user_id,
                     gateway=payment.gateway, created_at=utcnow())
    actor = {PaymentAction.SETTLE: settle_payment,
             PaymentAction.SEND_RECEIPT: send_receipt}[action]
    return actor, (job, {"job_id": payment_job_id(payment.id, action),
                         "retry_failed": retry_failed, "replay_completed": replay})


def complete_payment(payment_id: str) -> tuple[Payment, EnqueueResult | None]:
    """The gateway's completion: ``pending → completed``, then add the settlement job.

    Returns the payment and the settlement add; None when the payment was settled
    already (nothing added: a completion never settles twice). A ``completed`` payment
    whose settlement job was lost gets it added again. :class:`PaymentNotFound`,
    :class:`PaymentConflict` for a failed payment.
    """
    payment, user_id = (_complete_in_one(payment_id) if is_postgres()
                        else _complete_in_session(payment_id))
    if payment.status == PaymentStatus.SETTLED:
        return payment, None
    if payment.status != PaymentStatus.COMPLETED:
        raise PaymentConflict(f"payment {payment_id} is {payment.status}")
    return payment, enqueue_payment_action(payment, PaymentAction.SETTLE, user_id=user_id)


def _complete_in_one(payment_id: str) -> tuple[Payment, str | None]:
    """The completion on PostgreSQL: one statement on an autocommit connection moves the
    payment and reads it back with its paying account. The payment and that account."""
    if not activations.storable_id(payment_id):
        raise PaymentNotFound("payment", payment_id)
    for _ in range(RACE_TRIES):
        with autocommit() as connection:
            found = complete_in_one(connection, payment_id)
        if found is None:
            raise PaymentNotFound("payment", payment_id)
        payment, moved, user_id = found
        if moved or payment.status != PaymentStatus.PENDING:
            return payment, user_id
        # another completion committed while this one ran: read it as it now stands
    raise PaymentConflict(f"payment {payment_id} keeps changing; try again")


def _complete_in_session(payment_id: str) -> tuple[Payment, None]:
    """The completion elsewhere (SQLite): the payment read, moved, and read again."""
    payment = get_payment(payment_id)
    if payment is None:
        raise PaymentNotFound("payment", payment_id)
    if payment.status == PaymentStatus.PENDING:
        with db_session() as session:
            transition_payment(session, payment_id, PaymentStatus.PENDING,
                               PaymentStatus.COMPLETED)
        payment = get_payment(payment_id)
        assert payment is not None
    return payment, None


def replay_settlement(payment_id: str) -> tuple[Payment, EnqueueResult]:
    """Run the settlement of a completed or settled payment again (the operator's
    repair for a lost handoff): its job, completed before, is replayed in place; a live
    one is left alone, a failed one retried. :class:`PaymentNotFound`;
    :class:`PaymentConflict` for a payment not yet completed."""
    payment = get_payment(payment_id)
    if payment is None:
        raise PaymentNotFound("payment", payment_id)
    if payment.status not in (PaymentStatus.COMPLETED, PaymentStatus.SETTLED):
        raise PaymentConflict(f"payment {payment_id} is {payment.status}: only a completed "
                              "payment is settled")
    return payment, enqueue_payment_action(payment, PaymentAction.SETTLE, replay=True)


def _settle_rows(payment_id: str) -> Payment:
    """Payment ``completed → settled`` and its order ``pending_payment → paid`` in one
    transaction, with its ``payment.settled`` webhook messages. A settled payment is left
    as it is (a replay); anything else is Permanent."""
    if is_postgres():
        return _settle_in_one(payment_id)
    return _settle_in_session(payment_id)


def _settle_in_one(payment_id: str) -> Payment:
    """The settlement on PostgreSQL: one statement (:func:`models.payments.settle_in_one`),
    on an autocommit connection while no endpoint subscribes to ``payment.settled``, else
    in a session's transaction that also writes its messages."""
    for _ in range(RACE_TRIES):
        with autocommit() as connection:
            subscribed = SETTLED_EVENT in subscribed_types(connection)
            found = None if subscribed else settle_in_one(connection, payment_id)
        if subscribed:
            with db_session() as session:
                found = settle_in_one(session.connection(), payment_id)
                if found is not None and found[1]:
                    settled_messages(session, found[0])
        if found is None:
            raise Permanent(f"payment {payment_id} does not exist")
        payment, moved, order_status = found
        if moved or payment.status == PaymentStatus.SETTLED:
            return payment
        if payment.status != PaymentStatus.COMPLETED:
            raise Permanent(f"payment {payment_id} is {payment.status}, not completed")
        if payment.order_id is not None and order_status != OrderStatus.PENDING_PAYMENT:
            raise Permanent(f"order {payment.order_id} is {order_status or 'gone'}, "
                            "not pending_payment")
        # another settlement committed while this one ran: read it as it now stands
    raise RuntimeError(f"payment {payment_id} keeps changing under its settlement")


def _settle_in_session(payment_id: str) -> Payment:
    """The settlement elsewhere (SQLite): the payment row locked, then both moves."""
    with db_session() as session:
        payment = session.exec(select(Payment).where(col(Payment.id) == payment_id)
                               .with_for_update()).first()
        if payment is None:
            raise Permanent(f"payment {payment_id} does not exist")
        if payment.status == PaymentStatus.SETTLED:
            return payment
        if payment.status != PaymentStatus.COMPLETED:
            raise Permanent(f"payment {payment_id} is {payment.status}, not completed")
        if payment.order_id is not None and not pay_order(session, payment.order_id):
            order = session.get(Order, payment.order_id)
            raise Permanent(f"order {payment.order_id} is "
                            f"{order.status if order else 'gone'}, not pending_payment")
        transition_payment(session, payment_id, PaymentStatus.COMPLETED,
                           PaymentStatus.SETTLED)
    settled = get_payment(payment_id)
    assert settled is not None
    return settled


def _hand_off(payment: Payment, user_id: str) -> tuple[str, str]:
    """Start what the payment paid for, then add its receipt; each add's status
    (idempotent by its job id). An order's issuance run and the receipt are added in one
    round trip."""
    receipt = _payment_job(payment, PaymentAction.SEND_RECEIPT, user_id)
    if payment.order_id is not None:
        issuance, added_receipt = enqueue_many_actors(
            [(store.issue_store_order, [store.issuance_job(payment.order_id)]),
             (receipt[0], [receipt[1]])])
        return issuance[0].status, added_receipt[0].status
    with db_session() as session:
        found = session.get(Activation, payment.activation_id)
    if found is None:
        raise Permanent(f"activation {payment.activation_id} does not exist")
    result = activations.hand_on(found)
    handoff = result.status if result else f"activation {found.status}"
    actor, (job, options) = receipt
    return handoff, enqueue(actor, job, **options).status


def resettle_lost_payments(now: datetime | None = None) -> int:
    """Add the settlement job again for completed payments whose job was lost (a crash
    between the completion's commit and the add, a job Redis lost): payments ``completed``
    for longer than HANDOFF_SWEEP_AGE_S, oldest first, up to HANDOFF_SWEEP_LIMIT.

    A live or completed job is left alone by its deterministic id, and a retained *failed*
    one too (an operator decides about a failure: ``replay_settlement``), so only a missing
    job is recreated. Returns how many jobs were added.
    """
    settings = get_settings()
    cutoff = (now or utcnow()) - timedelta(seconds=settings.handoff_sweep_age_s)
    with db_session() as session:
        stale = list(session.exec(
            select(Payment).where(col(Payment.status) == PaymentStatus.COMPLETED.value,
                                  col(Payment.completed_at) < cutoff)
            .order_by(col(Payment.completed_at)).limit(settings.handoff_sweep_limit)))
    added = 0
    for payment in stale:
        try:
            result = enqueue_payment_action(payment, PaymentAction.SETTLE, retry_failed=False)
        except Exception as error:  # one payment's failure never stops the others
            log.warning("settlement re-add failed: %s", type(error).__name__,
                        extra={"payment_id": payment.id})
            continue
        added += result.status == "added"
    if added:
        log.info("lost settlements re-added", extra={"rows": added})
    return added


@registry.actor(queue=PAYMENT_QUEUE, payload=PaymentJob)
def settle_payment(job: PaymentJob) -> dict[str, Any]:
    """Settle one payment and hand off (see the module's docstring)."""
    payment = _settle_rows(job.payment_id)
    # the job carries the paying account (read when the settlement was added)
    handoff, receipt = _hand_off(payment, job.user_id)
    log.info("payment settled", extra={"payment_id": payment.id, "handoff": handoff})
    return {"payment_id": payment.id, "handoff": handoff, "receipt": receipt}


@registry.actor(queue=PAYMENT_QUEUE, payload=PaymentJob)
def send_receipt(job: PaymentJob) -> dict[str, Any]:
    """Send the payer the ``payment.receipt`` notification of a settled payment, once
    (its occurrence ``payment:{id}`` is the durable dedupe key)."""
    payment = get_payment(job.payment_id)
    if payment is None or payment.status != PaymentStatus.SETTLED:
        raise Permanent(f"payment {job.payment_id} is not settled")
    data = {"amount": money(payment.amount), "currency": payment.currency,
            "order_id": payment.order_id or payment.activation_id,
            "payment_method": payment.gateway,
            "paid_at": payment.settled_at.isoformat() if payment.settled_at else None}
    if payment.activation_id:
        data["description"] = "SIM activation"
    result = orchestration.trigger_event(
        account_id=job.user_id, type="payment.receipt", occurrence=f"payment:{payment.id}",
        data={key: value for key, value in data.items() if value is not None})
    return {"payment_id": payment.id, "notification_id": result.notification.id,
            "created": result.created}


class ResettleJob(BaseModel):
    """The repair job carries nothing: it reads the database."""

    model_config = ConfigDict(extra="forbid")


@registry.actor(queue=PAYMENT_QUEUE, payload=ResettleJob)
def resettle_lost_payments_job(job: ResettleJob) -> dict[str, int]:
    """One run of :func:`resettle_lost_payments` as a job on the payment queue."""
    return {"added": resettle_lost_payments()}


registry.schedule(Schedule(name="resettle-lost-payments", actor=resettle_lost_payments_job,
                           every=timedelta(seconds=get_settings().handoff_sweep_interval_s),
                           run_at_start=True))
registry.sweep("payments", resettle_lost_payments)
