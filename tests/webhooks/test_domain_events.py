"""The eleven webhook events of the store, payments, activations and purchasing: each
written with the state change that causes it, only for the endpoints subscribed to its
type, relayed by a real worker and verified by ``standardwebhooks`` at a real receiver,
its ``data`` the resource as the API shows it (docs/api.md#webhooks)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event as sql_events
from sqlalchemy import select, text
from sqlmodel import Session

from actors import webhooks as relay
from actors.backorder_reroute import enqueue_backorder_reroute
from actors.store import enqueue_issuance, get_order
from herald import db
from herald.queue import running_worker
from herald.web import create_app
from models.activations import (
    ACTIVATION_EVENTS,
    ActivationStatus,
    ActivationStep,
    transition_activation,
)
from models.payments import PAYMENT_EVENTS, PaymentStatus, transition_payment
from models.purchasing import (
    LINE_EVENTS,
    ORDER_EVENTS,
    DispatchStatus,
    LineStatus,
    roll_up_order,
    set_line_status,
    transition_dispatch,
)
from models.store import ISSUANCE_EVENTS, EventSource, IssuanceState, transition_store_order
from models.webhooks import (
    DELIVERY_EVENTS,
    WEBHOOK_EVENT_TYPES,
    WebhookEndpoint,
    WebhookMessage,
    forget_subscribed_types,
    set_relay,
    subscribed_types,
)
from providers.esim_mock import MockEsimProvider
from providers.operator_mock import MockOperator
from tests.payments.conftest import fulfillment
from tests.purchasing.conftest import (
    mailbox,
    make_item,
    make_supplier,
    place_order,
    purchasing,
)
from tests.store.conftest import backend, database, store
from tests.support.payments.steps import store_order
from tests.support.store.steps import paid
from tests.support.waiting import wait_for
from tests.webhooks.receiver import Receiver, running_receiver

__all__ = ["backend", "database", "fulfillment", "mailbox", "purchasing", "store"]


# -- the endpoints and the receiver ----------------------------------------------------------
@pytest.fixture(autouse=True)
def local_receiver_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The receiver is http:// on loopback (set before each lane's fixture reads the
    settings)."""
    monkeypatch.setenv("WEBHOOK_ALLOW_HTTP", "1")
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "1")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as receiver:
        yield receiver


def _no_webhooks() -> None:
    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE webhook_messages, webhook_endpoints CASCADE"))
    forget_subscribed_types()


@pytest.fixture
def api() -> Iterator[TestClient]:
    """The HTTP app over the lane's database, with no webhook endpoint before or after
    the test (the next tests' state changes would write messages otherwise)."""
    _no_webhooks()
    yield TestClient(create_app())
    _no_webhooks()


def subscribe(api: TestClient, receiver: Receiver, event: str) -> None:
    """An endpoint subscribed to ``event`` (the receiver verifies with its secret) and
    one subscribed to every other type (whose secret the receiver does not hold)."""
    others = [other for other in WEBHOOK_EVENT_TYPES if other != event]
    for events, keep in (([event], True), (others, False)):
        answer = api.post("/v1/webhook-endpoints", json={"url": receiver.url,
                                                         "events": events})
        assert answer.status_code == 201, answer.text
        if keep:
            receiver.secrets.append(answer.json()["secret"])


def messages() -> list[tuple[str, str]]:
    """(type, endpoint id) of every message written."""
    with db.session() as session:
        return [(message.type, message.endpoint_id)
                for message in session.scalars(select(WebhookMessage)).all()]


def received_once(receiver: Receiver, event: str) -> dict[str, Any]:
    """The one ``event`` message received, verified by the subscribed endpoint's secret
    alone; its ``data``. Only that one of its type was written: the other endpoint got
    none."""
    def of_type() -> list[Any]:
        return [got for got in list(receiver.received)
                if json.loads(got.body)["type"] == event]

    wait_for(of_type, what=f"the {event} webhook")
    (got,) = of_type()
    assert got.verified_by == (receiver.secrets[0],)
    body = json.loads(got.body)
    assert body["timestamp"]
    assert [kind for kind, _ in messages()].count(event) == 1
    return dict(body["data"])


def shown(api: TestClient, path: str) -> dict[str, Any]:
    answer = api.get(path)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_every_event_type_an_endpoint_may_subscribe_to_is_written_by_one_transition() -> None:
    written = [event for events in (DELIVERY_EVENTS, ISSUANCE_EVENTS, PAYMENT_EVENTS,
                                    ACTIVATION_EVENTS, ORDER_EVENTS, LINE_EVENTS)
               for event in events.values()]
    assert sorted(written) == sorted(WEBHOOK_EVENT_TYPES) and len(written) == 15


# -- the store: order.issued, order.failed, order.verification_required -----------------------
@pytest.mark.parametrize(("product", "event"), [
    ("mock-ok", "order.issued"), ("mock-out-of-stock", "order.failed"),
    ("mock-verify", "order.verification_required")])
def test_an_issuance_outcome_reaches_the_subscribed_endpoint(
        store: str, api: TestClient, receiver: Receiver, product: str, event: str) -> None:
    # Given an endpoint subscribed to the outcome's event, another to every other type
    MockEsimProvider.reset()
    subscribe(api, receiver, event)
    # When a paid order is issued by the real worker
    order_id = paid(product)
    enqueue_issuance(order_id)
    with running_worker(["store-fulfillment", relay.QUEUE]):
        data = received_once(receiver, event)
    # Then its data is the order as the API shows it
    assert data == shown(api, f"/v1/store/orders/{order_id}")
    MockEsimProvider.reset()


def test_a_store_transition_writes_its_message_only_when_it_applies(
        store: str, backend: str) -> None:
    # Given (on PostgreSQL and on SQLite) an endpoint subscribed to order.failed, another
    # to order.issued, a relay that records hand-offs, and a paid order
    if db.is_postgres():
        _no_webhooks()
    with db.session() as session:
        failed = WebhookEndpoint(url="https://93.184.215.14/a", events=["order.failed"])
        session.add_all([failed, WebhookEndpoint(url="https://93.184.215.14/b",
                                                 events=["order.issued"])])
    forget_subscribed_types()
    order_id = paid("mock-ok")
    handed: list[tuple[str, str]] = []
    set_relay(handed.extend)
    try:
        # When a transition its guard refuses is asked, then one that applies
        with db.session() as session:
            assert not transition_store_order(
                session, order_id, to=IssuanceState.FAILED, expect=[IssuanceState.IN_FLIGHT],
                source=EventSource.SYSTEM, note="refused", error_code="out_of_stock")
        assert messages() == [] and handed == []
        with db.session() as session:
            assert transition_store_order(
                session, order_id, to=IssuanceState.FAILED, expect=[IssuanceState.PENDING],
                source=EventSource.SYSTEM, note="applied", error_code="out_of_stock")
        # Then one message was written for the subscribed endpoint, handed off after its
        # commit, holding the order as the API shows it
        assert messages() == [("order.failed", failed.id)]
        assert [endpoint for _, endpoint in handed] == [failed.id]
        with db.session() as session:
            (message,) = session.scalars(select(WebhookMessage)).all()
            body = message.body
        assert body["data"] == get_order(order_id) and body["data"]["status"] == "failed"
    finally:
        set_relay(relay.hand_off)
        if db.is_postgres():
            _no_webhooks()


# -- payments: payment.settled ----------------------------------------------------------------
def test_a_settled_payment_reaches_the_subscribed_endpoint(
        fulfillment: None, api: TestClient, receiver: Receiver) -> None:
    # Given an endpoint subscribed to payment.settled, another to every other type
    subscribe(api, receiver, "payment.settled")
    account = api.post("/v1/accounts", json={"email": "amal@example.com"}).json()["id"]
    order_id = store_order(account)
    payment = api.post("/v1/payments", json={"order_id": order_id, "amount": "50.00",
                                             "currency": "SAR"}).json()
    # When the gateway completes it and the payment worker settles it
    assert api.post(f"/v1/payments/{payment['id']}/complete").status_code == 202
    with running_worker(["payment", relay.QUEUE]):
        data = received_once(receiver, "payment.settled")
    # Then its data is the payment as the API shows it, settled
    assert data == shown(api, f"/v1/payments/{payment['id']}")
    assert data["status"] == "settled"


# -- activations: activation.completed, activation.failed -------------------------------------
@pytest.mark.parametrize(("script", "event"), [
    ((), "activation.completed"), (("reject:verify_identity",), "activation.failed")])
def test_an_activation_outcome_reaches_the_subscribed_endpoint(
        fulfillment: None, api: TestClient, receiver: Receiver, script: tuple[str, ...],
        event: str) -> None:
    # Given an endpoint subscribed to the outcome's event, another to every other type
    MockOperator.reset()
    subscribe(api, receiver, event)
    msisdn = "+966551234567"
    if script:
        MockOperator.script(msisdn, *script)
    account = api.post("/v1/accounts", json={"email": "amal@example.com"}).json()["id"]
    activation = api.post("/v1/activations", json={
        "account_id": account, "operator_slug": "mock", "msisdn": msisdn}).json()
    payment = api.post("/v1/payments", json={"activation_id": activation["id"],
                                             "amount": "120.00", "currency": "SAR"}).json()
    # When it is paid and the workers run its steps
    api.post(f"/v1/payments/{payment['id']}/complete")
    with running_worker(["payment", "activation", relay.QUEUE]):
        data = received_once(receiver, event)
    # Then its data is the activation as the API shows it, with its ended steps
    assert data == shown(api, f"/v1/activations/{activation['id']}")
    assert data["status"] == event.split(".")[1]
    assert data["steps"][-1]["status"] == event.split(".")[1]
    MockOperator.reset()


# -- purchasing: purchase_order.completed / partial / failed ---------------------------------
@pytest.mark.parametrize(("reachable", "event"), [
    ((True,), "purchase_order.completed"), ((True, False), "purchase_order.partial"),
    ((False,), "purchase_order.failed")])
def test_a_purchase_orders_outcome_reaches_the_subscribed_endpoint(
        purchasing: str, api: TestClient, receiver: Receiver, reachable: tuple[bool, ...],
        event: str) -> None:
    # Given an endpoint subscribed to the outcome's event, another to every other type;
    # and suppliers reached by email, or with no address (their dispatch fails for good)
    subscribe(api, receiver, event)
    lines = []
    for number, ok in enumerate(reachable):
        # one supplier of each type: an order's dispatches are one per supplier type
        supplier = make_supplier(("costco", "central_kitchen")[number],
                                 email=None if ok else "")
        item = make_item(f"Item {number}", mappings=[(supplier, f"SKU-{number}", True)])
        lines.append({"catalog_item_id": item, "quantity": "2"})
    # When the order is placed and the dispatch worker transmits it
    placed = api.post("/v1/purchase-orders", json={
        "restaurant": {"id": "3f1c2a9e-6a51-4f7e-9d7a-0b8c1c2d3e4f", "name": "Bistro Nord"},
        "order_number": "PO-2001", "lines": lines})
    assert placed.status_code == 201, placed.text
    with running_worker(["supplier-dispatch", relay.QUEUE]):
        data = received_once(receiver, event)
    # Then its data is the order as the API shows it (its audit trail left out)
    view = shown(api, f"/v1/purchase-orders/{placed.json()['id']}")
    assert data == {key: value for key, value in view.items() if key != "audit"}
    assert data["status"] == event.split(".")[1]


# -- purchasing: line_item.backordered, line_item.rerouted ------------------------------------
def _line_shown(api: TestClient, order_id: str, line_id: str) -> dict[str, Any]:
    order = shown(api, f"/v1/purchase-orders/{order_id}")
    return dict(next(line for line in order["lines"] if line["id"] == line_id))


def test_a_backordered_line_reaches_the_subscribed_endpoint(
        purchasing: str, api: TestClient, receiver: Receiver) -> None:
    # Given an endpoint subscribed to line_item.backordered, another to every other type
    subscribe(api, receiver, "line_item.backordered")
    sysco = make_supplier("sysco")
    item = make_item("San Marzano tomatoes", mappings=[(sysco, "SYS-1", True)])
    placed = place_order([(item, 4)])
    line_id = placed.line_ids[0]
    # When the supplier's acknowledgment back-orders the line (as the 855 processing does)
    with db.session() as session:
        set_line_status(session, [line_id], to=LineStatus.BACKORDERED)
    with running_worker([relay.QUEUE]):
        data = received_once(receiver, "line_item.backordered")
    # Then its data is the line as the API shows it
    assert data == _line_shown(api, placed.order_id, line_id)
    assert (data["status"], data["order_id"]) == ("backordered", placed.order_id)


def test_a_rerouted_line_reaches_the_subscribed_endpoint(
        purchasing: str, api: TestClient, receiver: Receiver) -> None:
    # Given a back-ordered line with an alternate supplier, an endpoint subscribed to
    # line_item.rerouted and another to every other type
    sysco, costco = make_supplier("sysco"), make_supplier("costco")
    item = make_item("San Marzano tomatoes", mappings=[(sysco, "SYS-1", True),
                                                       (costco, "ALT-1", False)])
    placed = place_order([(item, 4)])
    line_id = placed.line_ids[0]
    with db.session() as session:
        set_line_status(session, [line_id], to=LineStatus.BACKORDERED)
    subscribe(api, receiver, "line_item.rerouted")
    # When the reroute worker moves it to the alternate
    enqueue_backorder_reroute({"orderId": placed.order_id, "lineItemId": line_id,
                               "originalSupplierId": sysco, "ackCode": "IB",
                               "reason": "Supplier acknowledgment IB on 855_1.edi"})
    with running_worker(["backorder-reroute", relay.QUEUE]):
        data = received_once(receiver, "line_item.rerouted")
    # Then its data is the line as the API shows it, on the alternate's dispatch
    assert data == _line_shown(api, placed.order_id, line_id)
    assert (data["status"], data["supplier_id"]) == ("rerouted", costco)


# -- a rolled-back state change writes nothing, hands nothing off ------------------------------
def _settle(session: Any, ids: dict[str, str]) -> None:
    assert transition_payment(session, ids["payment"], PaymentStatus.COMPLETED,
                              PaymentStatus.SETTLED)


def _complete_activation(session: Any, ids: dict[str, str]) -> None:
    assert transition_activation(session, ids["activation"],
                                 expect_step=ActivationStep.COMPLETE,
                                 expect_status=[ActivationStatus.RUNNING],
                                 step=ActivationStep.COMPLETE,
                                 status=ActivationStatus.COMPLETED)


def _payment_rows(api: TestClient) -> dict[str, str]:
    account = api.post("/v1/accounts", json={"email": "amal@example.com"}).json()["id"]
    order_id = store_order(account)
    payment = api.post("/v1/payments", json={"order_id": order_id, "amount": "50.00",
                                             "currency": "SAR"}).json()["id"]
    activation = api.post("/v1/activations", json={
        "account_id": account, "operator_slug": "mock", "msisdn": "+966551234567"}).json()
    with db.session() as session:
        assert transition_payment(session, payment, PaymentStatus.PENDING,
                                  PaymentStatus.COMPLETED)
        assert transition_activation(session, activation["id"],
                                     expect_step=ActivationStep.INITIATE,
                                     expect_status=[ActivationStatus.PENDING],
                                     step=ActivationStep.COMPLETE,
                                     status=ActivationStatus.RUNNING)
    return {"payment": payment, "activation": activation["id"]}


@pytest.mark.parametrize(("event", "change"), [
    ("payment.settled", _settle), ("activation.completed", _complete_activation)])
def test_a_rolled_back_transition_writes_and_hands_off_no_message(
        fulfillment: None, api: TestClient, receiver: Receiver, event: str,
        change: Callable[[Any, dict[str, str]], None]) -> None:
    # Given an endpoint subscribed to the event, and a relay that records hand-offs
    subscribe(api, receiver, event)
    ids = _payment_rows(api)
    handed: list[tuple[str, str]] = []
    set_relay(handed.extend)
    try:
        # When the transition is made, then its transaction rolled back, and the same
        # session commits afterwards
        with Session(db.get_engine()) as session:
            change(session, ids)
            assert [message.type for message in session.scalars(
                select(WebhookMessage)).all()] == [event]
            session.rollback()
            session.commit()
        # Then no message exists and none was handed off
        assert messages() == [] and handed == []
        # and the transition made again and committed writes and hands off one
        with db.session() as session:
            change(session, ids)
        assert [kind for kind, _ in messages()] == [event] and len(handed) == 1
    finally:
        set_relay(relay.hand_off)


def test_a_rolled_back_roll_up_writes_no_message(
        purchasing: str, api: TestClient, receiver: Receiver) -> None:
    # Given an endpoint subscribed to purchase_order.completed and an order whose one
    # dispatch was transmitted
    subscribe(api, receiver, "purchase_order.completed")
    supplier = make_supplier("costco")
    placed = place_order([(make_item("Basil", mappings=[(supplier, "SKU", True)]), 1)])
    # When its roll-up is rolled back
    with pytest.raises(RuntimeError), db.session() as session:
        transition_dispatch(session, placed.dispatch_by_supplier[supplier],
                            to=DispatchStatus.SUBMITTED, expect={DispatchStatus.PENDING})
        roll_up_order(session, placed.order_id)
        raise RuntimeError("the caller's next step failed")
    # Then nothing was written
    assert messages() == []


# -- nobody subscribed: no statement beyond the state change's own ----------------------------
def test_a_state_change_nobody_subscribes_to_costs_no_extra_statement(
        fulfillment: None, api: TestClient, receiver: Receiver) -> None:
    # Given endpoints subscribed to every type but payment.settled (the types read once)
    others = [event for event in WEBHOOK_EVENT_TYPES if event != "payment.settled"]
    assert api.post("/v1/webhook-endpoints", json={"url": receiver.url,
                                                   "events": others}).status_code == 201
    ids = _payment_rows(api)
    with db.get_engine().connect() as connection:
        assert "payment.settled" not in subscribed_types(connection)
    # When a payment settles
    statements: list[str] = []
    engine = db.get_engine()

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    sql_events.listen(engine, "before_cursor_execute", seen)
    try:
        with db.session() as session:
            _settle(session, ids)
    finally:
        sql_events.remove(engine, "before_cursor_execute", seen)
    # Then its UPDATE was the only statement, and no message exists
    assert [s.split()[0] for s in statements] == ["UPDATE"]
    assert messages() == []
