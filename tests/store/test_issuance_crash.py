"""``mock-crash``: the provider accepts and charges, then the worker process dies before
the issued write. The next run reconciles instead of issuing again: the order ends
issued, once, with one charge."""

from __future__ import annotations

import subprocess

import pytest

from actors.store import enqueue_issuance
from providers.esim_mock import CRASH_EXIT_CODE, MockEsimProvider
from tests.support.processes import spawn_herald
from tests.support.store.steps import events, order, paid, store_row, wait_state


def worker() -> subprocess.Popen[bytes]:
    """``herald worker`` on store-fulfillment with a 1 s lock (the environment is the
    test's: its database, Redis and queue prefix)."""
    return spawn_herald("worker", "--import", "tests.support.store.short_lock", "store-fulfillment")


@pytest.mark.timeout(120)
def test_a_worker_that_dies_after_the_charge_leaves_an_order_the_next_run_reconciles(
        store: str) -> None:
    MockEsimProvider.reset()
    order_id = paid("mock-crash")
    enqueue_issuance(order_id)

    # When a worker runs it, the provider charges and the worker's process dies
    first = worker()
    try:
        assert first.wait(timeout=60) == CRASH_EXIT_CODE
    finally:
        first.kill()
    # it had committed in_flight and the provider's reference, and nothing after
    row = store_row(order_id)
    assert (row.issuance_state, row.provider_order_ref) == (
        "in_flight", MockEsimProvider.reference(order_id))
    assert MockEsimProvider.charges(order_id) == 1

    # Then a new worker restarts the run once its lock expired: it reconciles
    second = worker()
    try:
        view = wait_state(order_id, "issued", timeout=60)
        assert second.poll() is None  # the reconcile did not crash it again
    finally:
        second.terminate()
        second.wait(timeout=30)
    assert view["status"] == "completed"
    assert MockEsimProvider.charges(order_id) == 1
    assert [e[1:] for e in events(order_id)][-2:] == [
        ("in_flight", None, "system", "fresh issuance: asking the provider"),
        ("issued", None, "system", "reconcile (retry or requeue): issued")]
    assert order(order_id)["profile"]["iccid"].startswith("8999")
    MockEsimProvider.reset()
