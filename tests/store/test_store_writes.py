"""How the store writes: the placed order's answer is what was written (no read-back, the
same as ``GET`` shows), a transition's event names the state it really replaced even when
another writer moved the row while it waited, and on PostgreSQL an issuance run is a
handful of single statements on autocommit connections, and a run's first statement
stamps ``in_flight`` only an order it may issue."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine

from actors.orchestration import flush_handoff_stamps
from actors.store import (
    StoreJob,
    flush_announced_stamps,
    get_order,
    place_order,
    run_issuance,
)
from herald import db, settings
from herald.queue import Permanent
from models.base import utcnow
from models.store import EventSource, IssuanceState, transition_store_order
from providers.esim_mock import MockEsimProvider
from tests.support.row_locks import held_elsewhere, lock_waiters
from tests.support.store.steps import account, events, order, paid, placed
from tests.support.waiting import wait_for


def test_a_placed_order_answers_what_get_shows(backend: str, store: str) -> None:
    # When an order is placed
    placed = place_order(account(), "mock-ok")

    # Then its answer, built from what was written, is the order as GET shows it
    assert placed == get_order(placed["id"])
    assert (placed["status"], placed["issuance_state"], placed["amount"]) == (
        "pending_payment", "pending", "5.00")
    assert [(e["from_state"], e["to_state"], e["source"]) for e in placed["status_events"]] == [
        (None, "pending", "api")]


@pytest.fixture
def moved_elsewhere(store: str) -> Iterator[tuple[str, threading.Event]]:
    """A paid, pending order whose store-order row another transaction holds, having moved
    it to ``in_flight`` (with its event); it commits when the yielded event is set."""
    order_id = paid("mock-ok")
    with held_elsewhere(
            ("UPDATE store_orders SET issuance_state = 'in_flight', in_flight_at = now()"
             " WHERE id = :id", {"id": order_id}),
            ("INSERT INTO store_order_status_events (id, store_order_id, from_state,"
             " to_state, source, note, created_at) VALUES (gen_random_uuid()::text, :id,"
             " 'pending', 'in_flight', 'system', 'elsewhere', now())", {"id": order_id}),
    ) as commit:
        yield order_id, commit


def _waiting_for_a_lock() -> bool:
    return lock_waiters("%store_orders%") > 0


def test_a_transition_that_waited_for_another_writer_records_the_state_it_replaced(
        moved_elsewhere: tuple[str, threading.Event]) -> None:
    order_id, commit = moved_elsewhere
    applied: list[bool] = []

    def fail() -> None:
        with db.autocommit() as connection:
            applied.append(transition_store_order(
                connection, order_id, to=IssuanceState.FAILED,
                expect={IssuanceState.PENDING, IssuanceState.IN_FLIGHT},
                source=EventSource.SYSTEM, note="failed (terminal)", error_code="terminal",
                failed_reason="refused"))

    # When a transition from pending or in_flight starts while another writer holds the
    # row (moving it pending -> in_flight), and that writer then commits
    writer = threading.Thread(target=fail)
    writer.start()
    wait_for(_waiting_for_a_lock, timeout=10, what="the transition to wait for the row")
    commit.set()
    writer.join(10)

    # Then it applied over what the other writer committed, and its event says so
    assert applied == [True]
    assert [e[:3] for e in events(order_id)] == [
        (None, "pending", None), ("pending", "in_flight", None),
        ("in_flight", "failed", "terminal")]
    assert order(order_id)["status"] == "failed"


class _Statements:
    """Counts the statements and the transactions committed on every engine."""

    def __init__(self) -> None:
        self.statements = self.commits = 0

    def __enter__(self) -> _Statements:
        event.listen(Engine, "before_cursor_execute", self._statement)
        event.listen(Engine, "commit", self._commit)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(Engine, "before_cursor_execute", self._statement)
        event.remove(Engine, "commit", self._commit)

    def _statement(self, *_: object) -> None:
        self.statements += 1

    def _commit(self, *_: object) -> None:
        self.commits += 1


def test_an_issuance_run_on_postgres_is_four_single_statements(store: str) -> None:
    MockEsimProvider.reset()
    order_id = paid("mock-ok")
    run_issuance(StoreJob(order_id=paid("mock-ok")))  # the subscribed types read, cached
    flush_handoff_stamps(10)
    flush_announced_stamps(10)

    # When the payment's run issues a paid order
    with _Statements() as counted:
        started = utcnow()
        result = run_issuance(StoreJob(order_id=order_id))
    # the mark that the order was announced is written behind, by a thread of its own
    assert flush_announced_stamps(10)

    # Then it is issued, completed and announced, each step with its event ...
    assert result["issued"] is True
    view = order(order_id)
    assert (view["issuance_state"], view["status"]) == ("issued", "completed")
    assert [e[1] for e in events(order_id)] == ["pending", "in_flight", "issued"]
    with db.session() as session:
        announced = session.execute(text("SELECT announced_at FROM store_orders WHERE id = :id"),
                                    {"id": order_id}).scalar()
    assert announced is not None and announced >= started
    # ... in four statements: the in_flight stamp with the run's read, the provider's
    # reference, the issued write (event and order included), the esim.ready trigger;
    # each commits by itself (no BEGIN/COMMIT round trips). The mark and the trigger's
    # handoff stamp are written by threads of their own, many orders' in one statement,
    # during the run or after it: two more at most
    assert counted.statements in (4, 5, 6)
    assert counted.commits == 0


def test_a_run_stamps_nothing_for_an_unpaid_order_or_a_provider_switched_off(
        backend: str, store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    unpaid, switched_off = placed("mock-ok"), paid("mock-ok")

    # When a run starts for an order not paid yet, and one whose provider's plugin is off
    with pytest.raises(Permanent, match="only a paid order is issued"):
        run_issuance(StoreJob(order_id=unpaid))
    monkeypatch.setenv("ESIM_PROVIDERS", "")
    settings.reset_settings()
    with pytest.raises(Permanent, match="not enabled"):
        run_issuance(StoreJob(order_id=switched_off))

    # Then neither was stamped in flight: both wait, pending, with no event of a run
    for order_id in (unpaid, switched_off):
        assert order(order_id)["issuance_state"] == "pending"
        assert [e[1] for e in events(order_id)] == ["pending"]
