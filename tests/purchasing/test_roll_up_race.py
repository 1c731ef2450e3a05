"""An order's roll-up when its two dispatches reach their suppliers at the same moment:
the order ends ``completed``, whatever the interleaving of the two roll-ups. The worst
one is forced on PostgreSQL: B rolls up while A's dispatch is still uncommitted (B
computes ``pending``), A then commits and rolls up, and only then does B write."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from actors.supplier_dispatch import mark_submitted
from herald import db
from models.purchasing import dispatch_job
from models.supplier_jobs import SupplierDispatchJob
from providers.suppliers import Transmission
from tests.purchasing.conftest import make_item, make_supplier, place_order
from tests.support.purchasing.dispatching import dispatch_row, line_statuses, order_row
from tests.support.row_locks import held_elsewhere, lock_waiters
from tests.support.waiting import wait_for


@pytest.fixture
def held_before_order_write() -> Iterator[tuple[threading.Event, threading.Event]]:
    """Stops the thread named ``roll-up-B`` just before it writes the order row: yields
    (it reached the write, let it go on)."""
    reached, go_on = threading.Event(), threading.Event()

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if (threading.current_thread().name == "roll-up-B"
                and statement.lstrip().upper().startswith("UPDATE PURCHASE_ORDERS")):
            reached.set()
            go_on.wait(30)

    engine = db.get_engine()
    event.listen(engine, "before_cursor_execute", before)
    try:
        yield reached, go_on
    finally:
        go_on.set()
        event.remove(engine, "before_cursor_execute", before)


def _job(dispatch_id: str) -> SupplierDispatchJob:
    with db.session() as session:
        return dispatch_job(session, dispatch_id)


def test_two_dispatches_submitted_together_roll_the_order_up_to_completed(
        purchasing: str,
        held_before_order_write: tuple[threading.Event, threading.Event]) -> None:
    # Given an order with an SFTP (sysco) dispatch and an email (costco) dispatch
    sysco, costco = make_supplier("sysco"), make_supplier("costco")
    placed = place_order([(make_item("Tomatoes", mappings=[(sysco, "S-1", True)]), 2),
                          (make_item("Flour", mappings=[(costco, "C-1", True)]), 1)])
    dispatch_a, dispatch_b = (placed.dispatch_by_supplier[sysco],
                              placed.dispatch_by_supplier[costco])
    job_a, job_b = _job(dispatch_a), _job(dispatch_b)
    reached_write, go_on = held_before_order_write
    errors: list[BaseException] = []

    def submit(job: SupplierDispatchJob, reference: str) -> None:
        try:
            mark_submitted(job, 1, Transmission(reference=reference))
        except BaseException as error:  # reported by the assertion below
            errors.append(error)

    a = threading.Thread(target=submit, args=(job_a, "850-A.edi"), name="roll-up-A")
    b = threading.Thread(target=submit, args=(job_b, "<b@mail>"), name="roll-up-B")
    # When A's dispatch write is held back while B's completes and B rolls up
    with held_elsewhere(("SELECT 1 FROM supplier_dispatches WHERE id = :id FOR UPDATE",
                         {"id": dispatch_a})):
        a.start()
        wait_for(lambda: lock_waiters("%supplier_dispatches%") >= 1,
                 what=f"A's dispatch write to wait for its row ({errors})")
        b.start()
        assert reached_write.wait(20), "B's roll-up did not reach its write"
    # ... and A's dispatch commits and rolls up (or waits for B's roll-up) before B writes
    wait_for(lambda: not a.is_alive() or lock_waiters("%purchase_orders%") >= 1,
             what="A's roll-up to end or wait for B's")
    go_on.set()
    a.join(20)
    b.join(20)
    assert not a.is_alive() and not b.is_alive() and not errors, errors
    # Then both dispatches and every line are submitted, and the order is completed
    assert {dispatch_row(dispatch_a).status, dispatch_row(dispatch_b).status} == {"submitted"}
    assert set(line_statuses(placed.order_id).values()) == {"submitted"}
    assert order_row(placed.order_id).status == "completed"
