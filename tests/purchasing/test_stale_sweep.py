"""The stale-dispatch sweep: a dispatch still pending past DISPATCH_STALE_AFTER_S whose
job is gone gets one again; one with a live job, a young one, one the relay still owns
and one the supplier has (or that failed) are left alone; a reroute's dispatch keeps its
own dedup id."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from actors.purchasing import EnqueueCounts, relay_outbox, sweep_stale_dispatches
from herald import db
from herald.queue import queue
from models.base import utcnow
from models.purchasing import (
    DispatchStatus,
    LineStatus,
    SupplierDispatch,
    link_lines,
    set_line_status,
    transition_dispatch,
)
from tests.purchasing.conftest import Placed, make_item, make_supplier, place_order

QUEUE = "supplier-dispatch"


def jobs_of(dispatch_id: str) -> list[Any]:
    """The supplier-dispatch jobs of one dispatch, whatever their state."""
    dispatch = queue(QUEUE)
    return [job for state in ("waiting", "delayed", "active", "paused", "completed", "failed")
            for job in dispatch.jobs(state, per_page=500)
            if job.payload["dispatchId"] == dispatch_id]


def an_order(kind: str = "costco") -> tuple[Placed, str]:
    """A one-line order placed and relayed: its dispatch has its job. Returns it and the
    dispatch's id."""
    supplier = make_supplier(kind)
    item = make_item("Towels", mappings=[(supplier, "C-1", True)])
    placed = place_order([(item, 1)])
    relay_outbox()
    return placed, next(iter(placed.dispatch_by_supplier.values()))


def lose_job(dispatch_id: str) -> None:
    """Redis lost the dispatch's job (removed: its dedup id is free again)."""
    for job in jobs_of(dispatch_id):
        assert queue(QUEUE).remove(job.id)


def age(*dispatch_ids: str, by: timedelta = timedelta(hours=2)) -> None:
    """Make the dispatches older than DISPATCH_STALE_AFTER_S (600 s by default)."""
    with db.session() as session:
        session.execute(update(SupplierDispatch)
                        .where(SupplierDispatch.id.in_(dispatch_ids))  # type: ignore[attr-defined]
                        .values(created_at=utcnow() - by))


def test_an_old_pending_dispatch_whose_job_was_lost_gets_one_again(purchasing: str) -> None:
    # Given an old pending dispatch whose job Redis lost
    placed, dispatch = an_order()
    lose_job(dispatch)
    age(dispatch)

    # When the sweep runs
    counts = sweep_stale_dispatches()

    # Then it has one job again, under the order's dedup id
    assert counts == EnqueueCounts(added=1)
    jobs = jobs_of(dispatch)
    assert [(job.state.value, job.dedup_id) for job in jobs] == [
        ("waiting", f"dispatch:{placed.order_id}:costco")]

    # And a second sweep finds that job live: still one
    assert sweep_stale_dispatches() == EnqueueCounts(deduplicated=1)
    assert len(jobs_of(dispatch)) == 1


def test_an_old_dispatch_with_a_live_job_is_left_to_it(purchasing: str) -> None:
    # Given an old pending dispatch whose job is waiting
    _, dispatch = an_order()
    age(dispatch)
    [job] = jobs_of(dispatch)

    # When the sweep runs
    counts = sweep_stale_dispatches()

    # Then the add was absorbed by the live job: the same single job
    assert counts == EnqueueCounts(deduplicated=1)
    assert [j.id for j in jobs_of(dispatch)] == [job.id]


@pytest.mark.parametrize("status", [DispatchStatus.SUBMITTED, DispatchStatus.CONFIRMED,
                                    DispatchStatus.FAILED])
def test_a_dispatch_that_left_pending_is_never_swept(purchasing: str,
                                                     status: DispatchStatus) -> None:
    # Given an old dispatch the supplier has (or that failed), its job gone, and an old
    # pending one whose job was lost (the sentinel: the sweep did run)
    _, done = an_order()
    _, sentinel = an_order()
    with db.session() as session:
        assert transition_dispatch(session, done, to=status, expect=[DispatchStatus.PENDING],
                                   reference="PO_1.edi", attempt=1)
    lose_job(done)
    lose_job(sentinel)
    age(done, sentinel)

    # When the sweep runs
    counts = sweep_stale_dispatches()

    # Then only the pending one got a job
    assert counts == EnqueueCounts(added=1)
    assert len(jobs_of(sentinel)) == 1
    assert jobs_of(done) == []


def test_a_young_dispatch_and_an_unrelayed_one_are_left(purchasing: str) -> None:
    # Given a young pending dispatch whose job was lost, an old one whose outbox entry is
    # not relayed yet, and an old one whose job was lost (the sentinel)
    _, young = an_order()
    lose_job(young)
    _, sentinel = an_order()
    lose_job(sentinel)
    supplier = make_supplier("costco")
    unrelayed_order = place_order([(make_item("Basil", mappings=[(supplier, "B", True)]), 1)])
    [unrelayed] = unrelayed_order.dispatch_by_supplier.values()
    age(unrelayed, sentinel)

    # When the sweep runs
    counts = sweep_stale_dispatches()

    # Then only the sentinel got a job: the young one may still be on its way, the
    # unrelayed one is the relay's
    assert counts == EnqueueCounts(added=1)
    assert len(jobs_of(sentinel)) == 1
    assert jobs_of(young) == jobs_of(unrelayed) == []


def test_a_reroute_dispatch_is_swept_under_its_own_dedup_id(purchasing: str) -> None:
    # Given an order whose Costco dispatch has a live job, and an old reroute of one of
    # its lines to another Costco supplier, whose job was lost
    first, alternate = make_supplier("costco"), make_supplier("costco", name="Costco East")
    item = make_item("Towels", mappings=[(first, "C-1", True), (alternate, "E-1", False)])
    placed = place_order([(item, 1)])
    relay_outbox()
    original = placed.dispatch_by_supplier[first]
    line = placed.line_ids[0]
    reroute = SupplierDispatch(order_id=placed.order_id, supplier_id=alternate,
                               supplier_type="costco", is_reroute=True,
                               reroute_of_dispatch_id=original)
    with db.session() as session:
        session.add(reroute)
        session.flush()
        link_lines(session, reroute.id, [line])
        set_line_status(session, [line], to=LineStatus.REROUTED, dispatch_id=reroute.id,
                        supplier_id=alternate)
    age(original, reroute.id)

    # When the sweep runs
    counts = sweep_stale_dispatches()

    # Then the reroute got its job (not taken for the original's), with the line's suffix
    assert counts == EnqueueCounts(added=1, deduplicated=1)
    [job] = jobs_of(reroute.id)
    assert job.dedup_id == f"dispatch:{placed.order_id}:costco:reroute:{line}"
    assert job.payload["supplierId"] == alternate
    assert [line_item["supplierSku"] for line_item in job.payload["lineItems"]] == ["E-1"]
    assert len(jobs_of(original)) == 1
