"""The job Redis loses every job (``FLUSHALL``) in the middle of 200 eSIM orders, and
every order still ends as its product plans, charged at most once.

The orders cover every mock product. They are placed and paid through the HTTP app;
real ``herald worker`` processes (the Procfile's fulfillment line) settle and issue them
on PostgreSQL and a job Redis of the test's own; the mock eSIM provider keeps its orders
and charges on another Redis, out of the flush's reach. The flush comes once some orders
are issued, while others are in flight or wait (for a retry, for verification, for their
settlement: the payment queue is paused just before 20 of them are paid), and the last 30
are placed after it. A real ``herald clock`` runs the store recovery scans and the
lost-settlement repair with windows of seconds. Workers that ``mock-crash`` stops are
started again. The test plays the customer of the ``mock-verify`` orders: half of them
verify (the signed webhook is posted), the other half let the verification deadline pass.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, text
from sqlmodel import select

from herald import db, settings
from herald.queue import queue
from models.notifications import Notification
from models.payments import Payment
from models.store import Order, StoreOrder, StoreOrderStatusEvent
from providers.esim_mock import CRASH_EXIT_CODE, MockEsimProvider
from tests.support.processes import spawn_herald
from tests.support.queue_app import install_queue_app
from tests.support.waiting import wait_for

#: How many orders of each mock product (200 in all).
PRODUCTS = {"mock-ok": 50, "mock-transient": 30, "mock-out-of-stock": 20,
            "mock-terminal": 20, "mock-ambiguous": 30, "mock-verify": 40, "mock-crash": 10}
#: ``mock-verify`` orders are split: the customer verifies one, lets the next expire.
VERIFIED, EXPIRED = "mock-verify (verified)", "mock-verify (expired)"
#: What each plan ends as: (issuance state, order status, error code, provider charges).
OUTCOMES: dict[str, tuple[str, str, str | None, int]] = {
    "mock-ok": ("issued", "completed", None, 1),
    "mock-transient": ("issued", "completed", None, 1),
    "mock-ambiguous": ("issued", "completed", None, 1),
    "mock-crash": ("issued", "completed", None, 1),
    VERIFIED: ("issued", "completed", None, 1),
    "mock-out-of-stock": ("failed", "failed", "out_of_stock", 0),
    "mock-terminal": ("failed", "failed", "terminal", 0),
    EXPIRED: ("failed", "failed", "verification_expired", 1),
}
#: Orders issued before the flush.
ISSUED_BEFORE_FLUSH = 30
#: Paid orders whose settlement waits (the payment queue paused) when the flush hits:
#: those numbered from HELD_FROM; the orders after them are placed after the flush.
HELD_SETTLEMENTS = 20
HELD_FROM = 150
#: The Procfile's ``worker-fulfillment`` line.
WORKER_QUEUES = ("activation", "payment", "store-fulfillment")
#: The recovery windows the workers and the clock run with (seconds).
WINDOWS = {"STORE_RECOVERY_INTERVAL_S": "1", "STORE_STALLED_AGE_S": "3",
           "STORE_WEBHOOK_FALLBACK_S": "3", "STORE_VERIFICATION_DEADLINE_S": "8",
           "HANDOFF_SWEEP_AGE_S": "3", "HANDOFF_SWEEP_INTERVAL_S": "1"}


@pytest.fixture
def flushall_store(store: str, monkeypatch: pytest.MonkeyPatch, private_redis_url: str,
                   redis6_url: str) -> Iterator[str]:
    """The store (PostgreSQL, the mock's catalog) on a job Redis of the test's own (it is
    flushed: no other test's keys may live there), the mock's records on the Redis 6.2
    server and recovery windows of seconds; yields the job Redis's URL. The workers and
    the clock inherit these variables."""
    monkeypatch.setenv("REDIS_URL", private_redis_url)
    monkeypatch.setenv("MOCK_STORE_URL", redis6_url)
    for name, value in WINDOWS.items():
        monkeypatch.setenv(name, value)
    settings.reset_settings()
    install_queue_app()
    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE payments CASCADE"))
    MockEsimProvider.reset()
    yield private_redis_url
    MockEsimProvider.reset()


# -- processes -------------------------------------------------------------------------------
def _worker() -> subprocess.Popen[bytes]:
    return spawn_herald("worker", "--import", "tests.support.store.fulfillment_lock",
                        *WORKER_QUEUES)


class Workers:
    """Worker processes; one that ``mock-crash`` stopped is started again. Any other
    exit is recorded (the test fails on it)."""

    def __init__(self, count: int) -> None:
        self.processes = [_worker() for _ in range(count)]
        self.crashes = 0
        self.other_exits: list[int] = []

    def restart_stopped(self) -> None:
        """Start a new process in place of each one that exited."""
        for index, process in enumerate(self.processes):
            code = process.poll()
            if code is None:
                continue
            if code == CRASH_EXIT_CODE:
                self.crashes += 1
            else:
                self.other_exits.append(code)
            self.processes[index] = _worker()

    def kill(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait(timeout=10)


class Repeating:
    """Calls ``step`` every ``every`` seconds on a thread of its own until stopped; the
    first error stops it and is kept in ``error``."""

    def __init__(self, step: Callable[[], None], every: float = 0.1) -> None:
        self.step, self.every = step, every
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.step()
            except BaseException as error:  # handed to the test's thread
                self.error = error
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def check(self) -> None:
        """Re-raise the step's error, if it had one."""
        if self.error is not None:
            raise self.error


# -- the customer ----------------------------------------------------------------------------
def _created(response: Any, status: int = 201) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return dict(response.json())


def place_and_pay(client: TestClient, product: str, n: int) -> str:
    """A new account orders ``product`` and pays it (the gateway's completion); the
    order's id."""
    account = _created(client.post("/v1/accounts", json={
        "email": f"flush{n}@example.com", "phone": f"+96650{n:07d}"}))
    order = _created(client.post("/v1/store/orders", json={"account_id": account["id"],
                                                            "product_id": product}))
    payment = _created(client.post("/v1/payments", json={
        "order_id": order["id"], "amount": order["amount"], "currency": order["currency"]}))
    _created(client.post(f"/v1/payments/{payment['id']}/complete"), 202)
    return str(order["id"])


def planned(products: list[str]) -> list[tuple[str, str]]:
    """Each product with what its order plans to end as: every second ``mock-verify``
    order's customer verifies."""
    verify_orders = 0
    plans = []
    for product in products:
        plan = product
        if product == "mock-verify":
            plan = VERIFIED if verify_orders % 2 == 0 else EXPIRED
            verify_orders += 1
        plans.append((product, plan))
    return plans


@dataclasses.dataclass
class Customers:
    """The orders placed so far with what each plans to end as, and the customers of
    ``mock-verify`` orders who verify."""

    client: TestClient
    orders: list[tuple[str, str]]
    plans: dict[str, str] = dataclasses.field(default_factory=dict)
    verified: set[str] = dataclasses.field(default_factory=set)

    def place(self, numbers: range) -> None:
        """Place and pay those of the orders, one after the other."""
        for n in numbers:
            product, plan = self.orders[n]
            self.plans[place_and_pay(self.client, product, n)] = plan

    def verify_waiting(self) -> None:
        """Each verifying customer whose order waits for verification verifies at the
        provider, which posts its signed ``verified`` webhook."""
        wanted = {order_id for order_id, plan in list(self.plans.items())
                  if plan == VERIFIED} - self.verified
        if not wanted:
            return
        with db.session() as session:
            waiting = session.exec(select(StoreOrder.id, StoreOrder.provider_order_ref).where(
                StoreOrder.id.in_(wanted),
                StoreOrder.issuance_state == "pending_verification")).all()
        for order_id, reference in waiting:
            body, headers = MockEsimProvider.customer_verifies(reference)
            _created(self.client.post("/v1/store/webhooks/mock", content=body,
                                      headers=headers), 202)
            self.verified.add(order_id)


# -- what the database says ------------------------------------------------------------------
def issuance_states() -> collections.Counter[str]:
    with db.session() as session:
        return collections.Counter(dict(session.exec(
            select(StoreOrder.issuance_state, func.count()).group_by(
                StoreOrder.issuance_state)).all()))


def payment_statuses() -> collections.Counter[str]:
    with db.session() as session:
        return collections.Counter(dict(session.exec(
            select(Payment.status, func.count()).group_by(Payment.status)).all()))


def all_final(expected: int, *helpers: Repeating) -> bool:
    for helper in helpers:
        helper.check()
    states = issuance_states()
    return sum(states.values()) == expected and states["issued"] + states["failed"] == expected


def outcomes(plans: dict[str, str]) -> list[str]:
    """Every way an order differs from its plan: its state, its order's status, its
    error code, the provider's charges, how often it was issued, its eSIM notifications."""
    with db.session() as session:
        rows = session.exec(select(Order, StoreOrder).join(
            StoreOrder, StoreOrder.id == Order.id)).all()
        issued = collections.Counter(session.exec(
            select(StoreOrderStatusEvent.store_order_id).where(
                StoreOrderStatusEvent.to_state == "issued")).all())
        ready = collections.Counter(session.exec(select(Notification.account_id).where(
            Notification.type == "esim.ready")).all())
    problems = []
    for order, store_order in rows:
        plan = plans[order.id]
        state, status, code, charges = OUTCOMES[plan]
        found = (store_order.issuance_state, order.status, store_order.error_code,
                 MockEsimProvider.charges(order.id))
        if found != (state, status, code, charges):
            problems.append(f"{plan} {order.id}: {found}, planned {(state, status, code, charges)}")
        times = 1 if state == "issued" else 0
        if (issued[order.id], ready[order.account_id]) != (times, times):
            problems.append(f"{plan} {order.id}: issued {issued[order.id]} times, "
                            f"{ready[order.account_id]} esim.ready notifications")
        if (state == "issued") != (store_order.iccid is not None):
            problems.append(f"{plan} {order.id}: profile {store_order.iccid!r}")
    if len(rows) != len(plans):
        problems.append(f"{len(rows)} orders in the database, {len(plans)} placed")
    return problems


@pytest.mark.timeout(240)
def test_a_flushall_mid_run_leaves_every_order_final_and_charged_once(
        flushall_store: str) -> None:
    from herald.web import create_app

    started = time.monotonic()
    products = [product for product, count in PRODUCTS.items() for _ in range(count)]
    random.Random(15).shuffle(products)
    workers = Workers(2)
    clock = spawn_herald("clock")
    supervisor = Repeating(workers.restart_stopped)
    try:
        with TestClient(create_app()) as client:
            customers = Customers(client, planned(products))
            verifier = Repeating(customers.verify_waiting, every=0.2)
            flushed = threading.Event()

            def produce() -> None:
                customers.place(range(0, HELD_FROM))
                flushed.wait(timeout=120)  # the last orders are placed after the flush
                customers.place(range(HELD_FROM + HELD_SETTLEMENTS, len(products)))

            try:
                with ThreadPoolExecutor(max_workers=1) as producer:
                    placing = producer.submit(produce)
                    try:
                        # When Redis loses every job once some orders are issued
                        wait_for(lambda: issuance_states()["issued"] >= ISSUED_BEFORE_FLUSH,
                                 timeout=120, every=0.1,
                                 what=f"{ISSUED_BEFORE_FLUSH} orders to be issued")
                        # (orders paid with their settlements held back: the flush takes them)
                        queue("payment").pause()
                        customers.place(range(HELD_FROM, HELD_FROM + HELD_SETTLEMENTS))
                        at_flush = issuance_states(), payment_statuses(), len(customers.plans)
                        redis.Redis.from_url(flushall_store).flushall()
                    finally:
                        flushed.set()
                    placing.result(timeout=120)
                # Then recovery brings every order to a final state
                try:
                    wait_for(lambda: all_final(len(products), supervisor, verifier),
                             timeout=150, every=0.5, what="every order to end issued or failed")
                except AssertionError as error:
                    raise AssertionError(f"{error}: issuance {dict(issuance_states())}, "
                                         f"payments {dict(payment_statuses())}") from None
            finally:
                verifier.stop()
    finally:
        supervisor.stop()
        workers.kill()
        clock.kill()
        clock.wait(timeout=10)
    states, payments, placed = at_flush
    # the flush hit a run in progress: orders issued, others not yet final, settlements
    # waiting, orders still to be placed
    assert states["issued"] >= ISSUED_BEFORE_FLUSH, at_flush
    assert payments["completed"] >= HELD_SETTLEMENTS, at_flush
    assert placed < len(products), at_flush
    assert placed - states["issued"] - states["failed"] > 0, at_flush
    assert workers.other_exits == []
    assert workers.crashes == PRODUCTS["mock-crash"]
    # and each ended as its product plans, charged once if issued, issued and announced once
    assert outcomes(customers.plans) == []
    assert len(customers.verified) == PRODUCTS["mock-verify"] // 2
    print(f"FLUSHALL test: {time.monotonic() - started:.0f} s, {workers.crashes} worker "
          f"crashes; at the flush: {placed} orders placed, issuance {dict(states)}, "
          f"payments {dict(payments)}")
