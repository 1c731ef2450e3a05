"""A worker host cut off between the provider's charge and the issued write charges no
order twice (docs/failure-modes.md#partition).

100 paid eSIM orders (``mock-ok`` and ``mock-ambiguous``) wait for issuance. The first
worker host takes as many as its slots allow; the mock provider charges each, then takes
its time to answer (``MOCK_ESIM_ANSWER_DELAY_S``), and the host's link goes down inside
that window. A second host issues the other orders and, once the cut-off host's locks
ran out, restarts its runs: they reconcile with the provider instead of issuing again.
Only then does the link come back, and the cut-off host's late writes change nothing:
every order issued, each charged once, one ``esim.ready`` each.
"""

from __future__ import annotations

import collections
import time

import pytest
from sqlalchemy import func
from sqlmodel import select

from actors.queues import registry
from actors.store import enqueue_issuance
from herald import db, settings
from models.notifications import Notification
from models.store import Order, StoreOrder
from providers.esim_mock import MockEsimProvider
from tests.support.netns import Network
from tests.support.store.steps import events, paid, store_row
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

ORDERS = 100
PRODUCTS = ("mock-ok", "mock-ambiguous")
#: How long the cut-off host's provider takes to answer after a charge: the cut happens
#: inside it (the link goes down within a poll of the charges).
ANSWER_DELAY_S = "5"
RUN_IGNORED = "run ignored: job no longer holds this token"
WORKER = ("worker", "--import", "bench.unlimited", "--import", "tests.partition.short_locks",
          "store-fulfillment", "notification-email", "notification-sms")


def _charged(order_ids: list[str]) -> list[str]:
    return [order_id for order_id in order_ids if MockEsimProvider.charges(order_id)]


def _issued() -> int:
    with db.session() as session:
        return session.exec(select(func.count()).select_from(StoreOrder).where(
            StoreOrder.issuance_state == "issued")).one()


def _ready() -> collections.Counter[str]:
    """How many ``esim.ready`` notifications each account has."""
    with db.session() as session:
        return collections.Counter(session.exec(select(Notification.account_id).where(
            Notification.type == "esim.ready")).all())


@pytest.mark.timeout(150)
def test_a_host_cut_off_after_the_charge_leaves_orders_reconciled_and_charged_once(
        store: str, monkeypatch: pytest.MonkeyPatch, redis6_url: str,
        network: Network) -> None:
    started = time.monotonic()
    monkeypatch.setenv("MOCK_STORE_URL", redis6_url)  # the provider is not the job Redis
    settings.reset_settings()
    MockEsimProvider.reset()
    cut_off, other = network.hosts
    order_ids = [paid(PRODUCTS[n % 2]) for n in range(ORDERS)]
    for order_id in order_ids:
        enqueue_issuance(order_id)

    # Given a host whose runs the provider charged and has not answered yet
    cut_off.spawn_herald(*WORKER, label="worker",
                         env={"MOCK_ESIM_ANSWER_DELAY_S": ANSWER_DELAY_S})
    slots = registry.spec("store-fulfillment").concurrency
    in_window = wait_for(lambda: (found := _charged(order_ids)) and len(found) >= slots
                         and found, timeout=60, every=0.05, what="the first host's charges")
    # When its link goes down there
    cut_off.cut()
    assert isinstance(in_window, list)
    # the other host issues the rest and reconciles the cut-off host's orders once their
    # locks ran out, while that host is still cut off
    other.spawn_herald(*WORKER, label="worker")
    wait_for(lambda: _issued() == ORDERS, timeout=90, every=0.5,
             what="every order to be issued")
    cut_off.restore()

    # Then the cut-off host's runs end, refused by their run tokens
    wait_for(lambda: cut_off.log_lines("worker", RUN_IGNORED) >= len(in_window), timeout=60,
             every=0.5, what="the cut-off host's late job ends to be refused")
    # every order issued, charged once, with one esim.ready
    assert _issued() == ORDERS
    assert {order_id: MockEsimProvider.charges(order_id) for order_id in order_ids} == {
        order_id: 1 for order_id in order_ids}
    with db.session() as session:
        accounts = session.exec(select(Order.account_id).where(
            Order.id.in_(order_ids))).all()
    # (each run triggers its order's notification right after the issued write)
    wait_for(lambda: sum(_ready().values()) >= ORDERS, timeout=30, every=0.2,
             what="every esim.ready notification")
    assert _ready() == {account: 1 for account in accounts}
    # the orders cut off after their charge were reconciled, not issued again, and the
    # cut-off host wrote nothing after it came back: issued is their last status event
    for order_id in in_window:
        assert store_row(order_id).issuance_state == "issued"
        history = events(order_id)
        assert history[-1][1] == "issued" and history[-1][4].startswith("reconcile"), history
    print(f"partition orders test: {time.monotonic() - started:.0f} s, "
          f"{len(in_window)} orders cut off after the charge, "
          f"{cut_off.log_lines('worker', RUN_IGNORED)} late job ends refused")
