"""The issuance job end to end with a real worker: every mock product's path, each
transition's status event, reconcile instead of issue, the verification deadline."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import update

from actors.queues import registry
from actors.store import Trigger, enqueue_issuance, issuance_job_id
from herald import db
from herald.queue import running_worker
from herald.settings import get_settings
from models.base import utcnow
from models.store import EventSource, IssuanceState, StoreOrder, transition_store_order
from providers.esim import IssueRequest
from providers.esim_mock import MockEsimProvider
from tests.support.store.steps import events, order, paid, wait_job, wait_state

FRESH = "fresh issuance"
PLACED = (None, "pending", None, "api", "order placed")
ASKING = ("pending", "in_flight", None, "system", "fresh issuance: asking the provider")


@pytest.fixture
def worker(store: str) -> Iterator[None]:
    """A store-fulfillment worker in this process, the mock's records emptied."""
    MockEsimProvider.reset()
    with running_worker(["store-fulfillment"]):
        yield
    MockEsimProvider.reset()


def issue(product: str) -> str:
    """A paid order of ``product`` with the payment's run queued; its id."""
    order_id = paid(product)
    enqueue_issuance(order_id)
    return order_id


def test_mock_ok_is_issued_once_and_completes_the_order(backend: str, worker: None) -> None:
    order_id = issue("mock-ok")
    view = wait_state(order_id, "issued")

    assert view["status"] == "completed"
    assert view["profile"]["iccid"].startswith("8999")
    assert view["profile"]["activation_code"].startswith("LPA:1$")
    assert view["provider_order_ref"] == MockEsimProvider.reference(order_id)
    assert events(order_id) == [PLACED, ASKING,
                                ("in_flight", "issued", None, "system", "fresh issuance: issued")]
    assert MockEsimProvider.charges(order_id) == 1
    assert wait_job(f"{order_id}-issue", "completed").state == "completed"


def test_mock_transient_goes_back_to_pending_then_is_issued(worker: None) -> None:
    order_id = issue("mock-transient")
    view = wait_state(order_id, "issued")

    # the failure was not the last attempt: no reason recorded
    assert (view["error_code"], view["failed_reason"]) == (None, None)
    assert events(order_id) == [
        PLACED, ASKING,
        ("in_flight", "pending", None, "system", "fresh issuance: transient failure, retrying"),
        ASKING, ("in_flight", "issued", None, "system", "fresh issuance: issued")]
    assert MockEsimProvider.charges(order_id) == 1
    assert wait_job(f"{order_id}-issue", "completed").attempts_made == 1


def test_a_transient_failure_on_the_last_attempt_records_its_reason(store: str) -> None:
    MockEsimProvider.reset()
    with registry.redeclared(["store-fulfillment"], attempts=1), \
            running_worker(["store-fulfillment"]):
        order_id = issue("mock-transient")
        job = wait_job(f"{order_id}-issue", "failed")

    view = order(order_id)
    assert (view["issuance_state"], view["status"]) == ("pending", "paid")
    assert view["error_code"] == "transient"
    assert "briefly unavailable" in view["failed_reason"]
    assert events(order_id)[-1] == ("in_flight", "pending", "transient", "system",
                                    "fresh issuance: transient failure on the last attempt")
    assert "briefly unavailable" in job.failed_reason
    assert MockEsimProvider.charges(order_id) == 0


@pytest.mark.parametrize(("product", "code"), [("mock-out-of-stock", "out_of_stock"),
                                               ("mock-terminal", "terminal")])
def test_out_of_stock_and_terminal_fail_the_order_without_retries(worker: None, product: str,
                                                                   code: str) -> None:
    order_id = issue(product)
    job = wait_job(f"{order_id}-issue", "failed")

    view = order(order_id)
    assert (view["issuance_state"], view["status"], view["error_code"]) == (
        "failed", "failed", code)
    assert view["failed_reason"]
    assert events(order_id) == [PLACED, ASKING, ("in_flight", "failed", code, "system",
                                                 f"fresh issuance: failed ({code})")]
    assert job.attempts_made == 1  # Permanent: no second attempt
    assert MockEsimProvider.charges(order_id) == 0


def test_an_ambiguous_answer_is_reconciled_by_the_next_attempt(backend: str,
                                                                worker: None) -> None:
    order_id = issue("mock-ambiguous")
    view = wait_state(order_id, "issued")

    assert view["status"] == "completed"
    assert view["error_code"] is None  # cleared by the issued write
    assert events(order_id) == [
        PLACED, ASKING,
        ("in_flight", "reconciliation_required", "ambiguous", "system",
         "fresh issuance: ambiguous answer, to be reconciled"),
        ("reconciliation_required", "issued", None, "system",
         "reconcile (retry or requeue): issued")]
    assert MockEsimProvider.charges(order_id) == 1


def test_pending_verification_completes_the_job_not_the_order(worker: None) -> None:
    order_id = issue("mock-verify")
    wait_job(f"{order_id}-issue", "completed")

    view = order(order_id)
    assert (view["issuance_state"], view["status"]) == ("pending_verification", "paid")
    assert view["verification_url"].startswith("https://mock-esim.invalid/verify/")
    assert events(order_id)[-1] == ("in_flight", "pending_verification", None, "system",
                                    "fresh issuance: waiting for the customer to verify")
    with db.session() as session:
        row = session.get(StoreOrder, order_id)
        assert row is not None and row.verification_deadline is not None
        assert row.verification_deadline > utcnow()
    assert MockEsimProvider.charges(order_id) == 1


def _left_in_flight(order_id: str, reference: str | None) -> None:
    """The order as a worker that died mid-issue leaves it."""
    with db.session() as session:
        assert transition_store_order(session, order_id, to=IssuanceState.IN_FLIGHT,
                                      expect={IssuanceState.PENDING},
                                      source=EventSource.SYSTEM,
                                      note="fresh issuance: asking the provider",
                                      in_flight_at=utcnow(), provider_order_ref=reference)


def test_an_order_left_in_flight_is_reconciled_not_issued_again(worker: None) -> None:
    # Given an order the provider accepted and charged, left in_flight by a dead worker
    order_id = paid("mock-ok")
    mock = MockEsimProvider(get_settings())
    accepted = mock.issue(IssueRequest(order_id=order_id, product_id="mock-ok"),
                          on_reference=lambda reference: None)
    _left_in_flight(order_id, accepted.provider_order_ref)

    # When the stalled order scan queues a run
    enqueue_issuance(order_id, Trigger.STALLED_SCAN, run_key="scan-1")

    # Then the run reconciles: issued, and the provider charged once
    view = wait_state(order_id, "issued")
    assert view["profile"]["iccid"] == accepted.profile.iccid  # type: ignore[union-attr]
    assert events(order_id)[-1] == ("in_flight", "issued", None, "system",
                                    "reconcile (stalled order scan): issued")
    assert MockEsimProvider.charges(order_id) == 1


def test_a_reconcile_that_finds_nothing_issues_fresh(worker: None) -> None:
    # Given an order left in_flight before the provider ever got the call
    order_id = paid("mock-ok")
    _left_in_flight(order_id, None)

    # When the stalled order scan queues a run
    enqueue_issuance(order_id, Trigger.STALLED_SCAN, run_key="scan-1")

    # Then it is issued, charged once
    view = wait_state(order_id, "issued")
    assert view["status"] == "completed"
    assert events(order_id)[-1] == ("in_flight", "issued", None, "system",
                                    "reconcile (stalled order scan) found nothing, "
                                    "fresh issuance: issued")
    assert MockEsimProvider.charges(order_id) == 1


def _deadline_check(order_id: str, key: str) -> None:
    enqueue_issuance(order_id, Trigger.VERIFICATION_DEADLINE, run_key=key)
    wait_job(issuance_job_id(order_id, Trigger.VERIFICATION_DEADLINE, key), "completed")


def test_the_verification_deadline_fails_an_unverified_order_only_once_past(
        worker: None) -> None:
    order_id = issue("mock-verify")
    wait_job(f"{order_id}-issue", "completed")

    # When the deadline check runs before the deadline: nothing changes
    _deadline_check(order_id, "early")
    assert order(order_id)["issuance_state"] == "pending_verification"

    # When it runs once the deadline passed and the customer still did not verify
    with db.session() as session:
        session.execute(update(StoreOrder).where(StoreOrder.id == order_id)
                        .values(verification_deadline=utcnow()))
    _deadline_check(order_id, "late")

    # Then the order failed, saying why
    view = order(order_id)
    assert (view["issuance_state"], view["status"], view["error_code"]) == (
        "failed", "failed", "verification_expired")
    assert "did not verify" in view["failed_reason"]
    assert events(order_id)[-1] == (
        "pending_verification", "failed", "verification_expired", "system",
        "reconcile (verification deadline check): failed (verification_expired)")
    assert MockEsimProvider.charges(order_id) == 1


def test_a_run_for_a_final_order_changes_nothing(worker: None) -> None:
    order_id = issue("mock-ok")
    wait_state(order_id, "issued")
    before = events(order_id)

    enqueue_issuance(order_id, Trigger.REQUEUE, run_key="again")
    job = wait_job(issuance_job_id(order_id, Trigger.REQUEUE, "again"), "completed")

    assert job.return_value["skipped"] == "already issued"
    assert events(order_id) == before
    assert MockEsimProvider.charges(order_id) == 1


def test_an_unpaid_order_is_never_issued(worker: None) -> None:
    from tests.support.store.steps import placed

    order_id = placed("mock-ok")
    enqueue_issuance(order_id)
    job = wait_job(f"{order_id}-issue", "failed")

    assert "only a paid order is issued" in job.failed_reason
    view = order(order_id)
    assert (view["issuance_state"], view["status"]) == ("pending", "pending_payment")
    assert events(order_id) == [PLACED]
    assert MockEsimProvider.charges(order_id) == 0
