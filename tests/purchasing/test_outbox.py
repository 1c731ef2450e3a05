"""The dispatch outbox: an order's jobs reach the queue exactly once whatever stops the
request between its commit and its enqueue — a web process killed there, Redis away —
and two relays at once add each job once."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import text, update
from sqlmodel import col, select

from actors.purchasing import EnqueueCounts, relay_outbox
from herald import db
from herald.demo.sftp_server import SftpTestServer
from herald.queue import queue, running_worker
from models.purchasing import DispatchOutbox, PurchaseOrder, SupplierDispatch
from tests.purchasing.conftest import Mailbox, make_item, make_supplier, place_order
from tests.support.processes import REPO
from tests.support.queue_app import follow_settings
from tests.support.reset import reset_herald
from tests.support.services import find_free_port
from tests.support.waiting import wait_for

LIVE_STATES = ("waiting", "delayed", "active", "paused")


def dispatch_jobs() -> list[Any]:
    """Every job of the supplier-dispatch queue, whatever its state."""
    dispatch = queue("supplier-dispatch")
    return [job for state in (*LIVE_STATES, "completed", "failed")
            for job in dispatch.jobs(state, per_page=500)]


def jobs_by_dispatch() -> dict[str, int]:
    """How many supplier-dispatch jobs each dispatch has."""
    counts: dict[str, int] = {}
    for job in dispatch_jobs():
        counts[job.payload["dispatchId"]] = counts.get(job.payload["dispatchId"], 0) + 1
    return counts


def statuses(dispatch_ids: set[str]) -> set[str]:
    with db.session() as session:
        return {dispatch.status for dispatch in session.exec(
            select(SupplierDispatch).where(col(SupplierDispatch.id).in_(dispatch_ids)))}


def reference_of(dispatch_ids: set[str], supplier_type: str) -> str | None:
    with db.session() as session:
        return session.exec(select(SupplierDispatch.reference).where(
            col(SupplierDispatch.id).in_(dispatch_ids),
            SupplierDispatch.supplier_type == supplier_type)).one()


def outbox() -> list[DispatchOutbox]:
    with db.session() as session:
        return list(session.exec(select(DispatchOutbox).order_by(DispatchOutbox.created_at)))


def three_supplier_order() -> tuple[str, set[str]]:
    """An order placed (not relayed) with one line for each of three suppliers."""
    suppliers = [make_supplier(kind) for kind in ("sysco", "costco", "central_kitchen")]
    items = [make_item(f"Item {n}", mappings=[(supplier, f"SKU{n}", True)])
             for n, supplier in enumerate(suppliers)]
    placed = place_order([(item, 1) for item in items])
    return placed.order_id, set(placed.dispatch_by_supplier.values())


def use_redis(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Point herald (this process) at another Redis from now on."""
    monkeypatch.setenv("REDIS_URL", url)
    reset_herald()
    follow_settings()


def outbox_sessions() -> int:
    """Database sessions (other than this one) inside a transaction that last touched the
    outbox: a relay holding its entries."""
    with db.get_engine().connect() as connection:
        return int(connection.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%' "
            "AND query ILIKE '%supplier_dispatch_outbox%'")).scalar_one())


# -- a black hole: Redis that accepts and never answers --------------------------------------
class BlackHole:
    """A TCP server that accepts every connection and never answers a byte."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self.listener.accept()
                self.accepted.append(connection)

    def close(self) -> None:
        self.listener.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    hole = BlackHole()
    yield hole
    hole.close()


@pytest.fixture
def web_on_black_hole(purchasing: str, black_hole: BlackHole,
                      tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``herald web`` in a process of its own, on the test's database, whose Redis is the
    black hole; killed at the end if the test did not."""
    port = find_free_port()
    # one process: the one this test kills is the one whose request hangs
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{black_hole.port}",
           "LOG_LEVEL": "WARNING", "WEB_CONCURRENCY": "1"}
    with (tmp_path / "web.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "herald.cli", "web", "--host",
                                    "127.0.0.1", "--port", str(port)], cwd=REPO, env=env,
                                   stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{base}/healthz") or process.poll() is not None,
                 timeout=60, what="herald web")
        assert process.poll() is None, (tmp_path / "web.log").read_text()[-2000:]
        yield base, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_web_process_killed_between_commit_and_enqueue_loses_no_dispatch(
        web_on_black_hole: tuple[str, subprocess.Popen[bytes]], black_hole: BlackHole,
        sftp: SftpTestServer, mailbox: Mailbox, monkeypatch: pytest.MonkeyPatch) -> None:
    base, web = web_on_black_hole
    sysco, costco = make_supplier("sysco", sftp=sftp), make_supplier("costco")
    items = [make_item("Tomatoes", mappings=[(sysco, "T-1", True)]),
             make_item("Basil", mappings=[(sysco, "B-1", True)]),
             make_item("Towels", mappings=[(costco, "C-1", True)])]
    body = {"restaurant": {"id": str(uuid.uuid4()), "name": "Bistro Nord"},
            "order_number": "PO-CRASH", "lines": [{"catalog_item_id": item, "quantity": 3}
                                                  for item in items]}

    # Given a placement request that committed and hangs in its enqueue (Redis answers
    # nothing)
    def post() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{base}/v1/purchase-orders", json=body, timeout=120)

    request = threading.Thread(target=post, daemon=True)
    request.start()
    wait_for(lambda: outbox() and outbox_sessions() and black_hole.accepted, timeout=60,
             what="the order committed and its relay waiting on Redis")
    assert request.is_alive()

    # When the web process is killed right there
    web.send_signal(signal.SIGKILL)
    web.wait(timeout=30)
    request.join(timeout=30)
    wait_for(lambda: outbox_sessions() == 0, what="the killed relay's transaction ended")

    # Then the order, its two dispatches and their unrelayed outbox entries are committed,
    # and no job was added
    with db.session() as session:
        orders = session.exec(select(PurchaseOrder)).all()
        dispatches = {d.id for d in session.exec(select(SupplierDispatch))}
    assert [order.order_number for order in orders] == ["PO-CRASH"]
    assert len(dispatches) == 2
    assert [entry.relayed_at for entry in outbox()] == [None, None]
    assert dispatch_jobs() == []

    # When the relay runs (as the clock's relay job does)
    counts = relay_outbox()

    # Then each dispatch has exactly one job, and the entries are relayed
    assert counts == EnqueueCounts(added=2)
    assert jobs_by_dispatch() == dict.fromkeys(dispatches, 1)
    assert all(entry.relayed_at is not None for entry in outbox())

    # When the relay runs again, and once more after a relay that died before its commit
    # (the entries unstamped again)
    assert relay_outbox() == EnqueueCounts()
    with db.session() as session:
        session.execute(update(DispatchOutbox).values(relayed_at=None))
    again = relay_outbox()

    # Then the live jobs absorb the adds: still one job per dispatch
    assert again == EnqueueCounts(deduplicated=2)
    assert jobs_by_dispatch() == dict.fromkeys(dispatches, 1)
    assert all(job.state.value == "waiting" for job in dispatch_jobs())

    # When the worker runs them, and the relay runs once more after they finished (their
    # dedup ids released: the adds are new jobs)
    with running_worker(["supplier-dispatch"]):
        wait_for(lambda: statuses(dispatches) == {"submitted"}, timeout=60,
                 what="both dispatches submitted")
        with db.session() as session:
            session.execute(update(DispatchOutbox).values(relayed_at=None))
        assert relay_outbox() == EnqueueCounts(added=2)
        wait_for(lambda: all(job.state.value == "completed" for job in dispatch_jobs()),
                 what="the late jobs to finish")

    # Then each supplier got the order exactly once: one 850 on Sysco's server, one email
    assert [path.name for path in (sftp.root / "outbound").iterdir()] == [
        reference_of(dispatches, "sysco")]
    assert len(mailbox.messages) == 1


def test_an_entry_whose_enqueue_fails_stays_until_the_next_relay(
        purchasing: str, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an order placed (its entries unrelayed) while Redis refuses connections
    _, dispatches = three_supplier_order()
    use_redis(monkeypatch, f"redis://127.0.0.1:{find_free_port()}")

    # When the relay runs
    counts = relay_outbox()

    # Then the first entry failed with tries 1 and the error, the rest were left for the
    # next run (Redis is away for them too), and nothing is relayed
    assert counts == EnqueueCounts(failed=1)
    entries = outbox()
    assert [entry.tries for entry in entries] == [1, 0, 0]
    assert "ConnectionError" in (entries[0].last_error or "")
    assert all(entry.relayed_at is None for entry in entries)

    # When Redis is back and the relay runs again
    use_redis(monkeypatch, redis_url)
    counts = relay_outbox()

    # Then every dispatch has its one job and every entry is relayed
    assert counts == EnqueueCounts(added=3)
    assert jobs_by_dispatch() == dict.fromkeys(dispatches, 1)
    assert all(entry.relayed_at is not None for entry in outbox())


def test_a_placement_whose_relay_fails_answers_201_and_the_relay_adds_its_job(
        purchasing: str, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from herald.web import create_app

    costco = make_supplier("costco")
    item = make_item("Towels", mappings=[(costco, "C-1", True)])
    use_redis(monkeypatch, f"redis://127.0.0.1:{find_free_port()}")

    # When an order is placed while Redis refuses connections
    with TestClient(create_app()) as client:
        response = client.post("/v1/purchase-orders", json={
            "restaurant": {"id": str(uuid.uuid4()), "name": "Bistro"},
            "order_number": "PO-7", "lines": [{"catalog_item_id": item, "quantity": 1}]})

    # Then the order is accepted, its entry waits unrelayed with the failed try
    assert response.status_code == 201, response.text
    assert [(entry.relayed_at, entry.tries) for entry in outbox()] == [(None, 1)]

    # And the next relay adds its job
    use_redis(monkeypatch, redis_url)
    assert relay_outbox() == EnqueueCounts(added=1)
    assert jobs_by_dispatch() == {response.json()["dispatches"][0]["id"]: 1}


def test_two_relays_at_once_add_each_job_once(purchasing: str, private_redis_url: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Given three unrelayed entries, and a relay holding them while Redis is paused
    _, dispatches = three_supplier_order()
    use_redis(monkeypatch, private_redis_url)
    admin = redis.Redis.from_url(private_redis_url)
    admin.execute_command("CLIENT", "PAUSE", 20000, "WRITE")
    first: list[EnqueueCounts] = []
    relay = threading.Thread(target=lambda: first.append(relay_outbox()), daemon=True)
    try:
        relay.start()
        wait_for(outbox_sessions, what="the first relay holding its entries")

        # When a second relay runs meanwhile
        second = relay_outbox()
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        relay.join(timeout=60)
        admin.close()

    # Then the second took nothing, the first added all three, and each dispatch has
    # one job
    assert second == EnqueueCounts()
    assert first == [EnqueueCounts(added=3)]
    assert jobs_by_dispatch() == dict.fromkeys(dispatches, 1)
