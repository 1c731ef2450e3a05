"""``transition_store_order``: the one write of a store order's issuance state, error code
and failed reason — guarded, evented, and issued together with the order's completion —
on PostgreSQL and on SQLite."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from herald import db
from models.base import utcnow
from models.store import EventSource, IssuanceState, StoreOrder, transition_store_order
from tests.support.row_locks import held_elsewhere
from tests.support.store.steps import events, order, paid, store_row
from tests.support.waiting import wait_for

PENDING, IN_FLIGHT, ISSUED = IssuanceState.PENDING, IssuanceState.IN_FLIGHT, IssuanceState.ISSUED
PROFILE = {"iccid": "8999000000000000001", "activation_code": "LPA:1$smdp.example$X",
           "smdp_address": "smdp.example"}


def stamp(order_id: str, note: str = "fresh issuance: asking the provider") -> bool:
    with db.session() as session:
        return transition_store_order(session, order_id, to=IN_FLIGHT, expect={PENDING},
                                      source=EventSource.SYSTEM, note=note,
                                      in_flight_at=utcnow())


def test_a_write_applies_only_from_the_states_it_expects_and_records_its_event(
        backend: str, store: str) -> None:
    order_id = paid("mock-ok")

    # When the order is stamped in flight, twice
    first, second = stamp(order_id), stamp(order_id, note="a second run")

    # Then only the first applied, and it left one event naming its run
    assert (first, second) == (True, False)
    assert events(order_id) == [
        (None, "pending", None, "api", "order placed"),
        ("pending", "in_flight", None, "system", "fresh issuance: asking the provider")]
    assert store_row(order_id).in_flight_at is not None


def test_a_write_whose_guard_fails_changes_nothing(backend: str, store: str) -> None:
    order_id = paid("mock-ok")
    stamp(order_id)

    # When a write's further condition does not hold (a stamp it did not read)
    with db.session() as session:
        applied = transition_store_order(
            session, order_id, to=IssuanceState.FAILED, expect={IN_FLIGHT},
            source=EventSource.SYSTEM, note="n", error_code="x", failed_reason="y",
            guard=StoreOrder.in_flight_at.is_(None))

    # Then nothing changed: not the state, not the order, no event
    assert applied is False
    view = order(order_id)
    assert (view["issuance_state"], view["status"], view["error_code"]) == (
        "in_flight", "paid", None)
    assert len(events(order_id)) == 2


def test_an_error_code_change_alone_is_an_event_and_a_same_state_write_is_not(
        backend: str, store: str) -> None:
    order_id = paid("mock-ok")
    stamp(order_id)
    with db.session() as session:
        # the same state, a new error code: an event
        assert transition_store_order(session, order_id, to=IN_FLIGHT, expect={IN_FLIGHT},
                                      source="system", note="coded", error_code="ambiguous")
        # the same state and code, another column: no event
        assert transition_store_order(session, order_id, to=IN_FLIGHT, expect={IN_FLIGHT},
                                      source="system", note="silent", provider_order_ref="r")
    assert [e[2:] for e in events(order_id)][-1] == ("ambiguous", "system", "coded")
    assert len(events(order_id)) == 3
    assert store_row(order_id).provider_order_ref == "r"


def test_the_issued_write_completes_the_order_and_failed_fails_it(backend: str,
                                                                  store: str) -> None:
    issued_id, failed_id = paid("mock-ok"), paid("mock-terminal")
    stamp(issued_id)
    stamp(failed_id)

    with db.session() as session:
        assert transition_store_order(session, issued_id, to=ISSUED, expect={IN_FLIGHT},
                                      source="system", note="fresh issuance: issued",
                                      **PROFILE)
        assert transition_store_order(session, failed_id, to=IssuanceState.FAILED,
                                      expect={IN_FLIGHT}, source="system", note="f",
                                      error_code="terminal", failed_reason="refused")

    issued, failed = order(issued_id), order(failed_id)
    assert (issued["status"], issued["issuance_state"]) == ("completed", "issued")
    assert issued["profile"] == PROFILE
    assert (failed["status"], failed["issuance_state"], failed["error_code"],
            failed["failed_reason"]) == ("failed", "failed", "terminal", "refused")


def test_racing_writers_apply_one_write_once(backend: str, store: str) -> None:
    order_id = paid("mock-ok")

    # When eight runs try to stamp the same pending order at once
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda n: stamp(order_id, note=f"run {n}"), range(8)))

    # Then exactly one applied, with one event
    assert results.count(True) == 1
    assert [e[1] for e in events(order_id)] == ["pending", "in_flight"]


def test_a_guarded_column_is_refused_as_a_free_column(backend: str, store: str) -> None:
    order_id = paid("mock-ok")
    with db.session() as session, pytest.raises(ValueError, match="issuance_state"):
        transition_store_order(session, order_id, to=IN_FLIGHT, expect={PENDING},
                               source="system", note="n", issuance_state="issued")
    assert store_row(order_id).issuance_state == "pending"
    assert len(events(order_id)) == 1


# -- PostgreSQL: the store-order row is locked before the order row -------------------------
@pytest.fixture
def order_row_held(store: str) -> Iterator[tuple[str, threading.Event]]:
    """A paid, in-flight order whose ``orders`` row another transaction holds (FOR UPDATE)
    until the yielded event is set."""
    order_id = paid("mock-ok")
    stamp(order_id)
    with held_elsewhere(("SELECT id FROM orders WHERE id = :id FOR UPDATE",
                         {"id": order_id})) as release:
        yield order_id, release


def _locked_elsewhere(table: str, order_id: str) -> bool:
    """True when another transaction holds the row (a NOWAIT lock attempt fails)."""
    with db.get_engine().connect() as connection, connection.begin():
        try:
            connection.execute(text(f"SELECT id FROM {table} WHERE id = :id FOR UPDATE NOWAIT"),
                               {"id": order_id})
        except Exception as error:
            assert "could not obtain lock" in str(error)
            return True
        return False


def test_the_issued_write_holds_the_store_row_then_waits_for_the_order_row(
        order_row_held: tuple[str, threading.Event]) -> None:
    order_id, release = order_row_held
    done: list[bool] = []

    def issue() -> None:
        with db.session() as session:
            done.append(transition_store_order(session, order_id, to=ISSUED,
                                               expect={IN_FLIGHT}, source="system",
                                               note="fresh issuance: issued", **PROFILE))

    writer = threading.Thread(target=issue)
    writer.start()
    try:
        # While the order row is held elsewhere, the issued write holds the store-order
        # row and waits; nothing of it is visible yet: not the profile, not the event
        wait_for(lambda: _locked_elsewhere("store_orders", order_id), timeout=10,
                 what="the issued write to lock the store-order row")
        assert order(order_id)["issuance_state"] == "in_flight"
        assert [e[1] for e in events(order_id)] == ["pending", "in_flight"]
    finally:
        release.set()
        writer.join(10)
    # Once the order row is free, both land together
    assert done == [True]
    view = order(order_id)
    assert (view["issuance_state"], view["status"]) == ("issued", "completed")
    assert [e[1] for e in events(order_id)][-1] == "issued"
