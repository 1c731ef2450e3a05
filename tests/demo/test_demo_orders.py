"""``herald demo``'s order phase, run as a real process: eSIM orders over every mock
behaviour, placed and paid through the API, issued by a worker process that ``mock-crash``
ends and the demo restarts; the summary says how each order ended."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import update
from sqlmodel import Session, create_engine

from models.base import utcnow
from models.store import Order, OrderStatus, StoreOrder
from tests.cli.test_cli import (
    DEMO_S,
    QUICK_S,
    embedded_answers,
    flat,
    herald_env,
    run_herald,
    table_rows,
)

#: The summary's columns after the product: the issuance states, then these.
STATES = ("pending", "in_flight", "reconciliation_required", "pending_verification",
          "issued", "failed")
#: Product → (issued, failed) of each order, with its charges and eSIM emails.
PLANNED = {"mock-ok": "issued", "mock-transient": "issued", "mock-out-of-stock": "failed",
           "mock-terminal": "failed", "mock-ambiguous": "issued", "mock-verify": "issued",
           "mock-crash": "issued"}


@pytest.fixture
def user_env(redis_url: str) -> dict[str, str]:
    """A user's environment: the test Redis, a key prefix of its own, the directory's
    SQLite database."""
    return herald_env(REDIS_URL=redis_url, BROKER="redis",
                      QUEUE_PREFIX=f"ordertest{uuid.uuid4().hex[:10]}")


def order_summary(output: str) -> dict[str, dict[str, str]]:
    """The order table's rows: product → column → cell."""
    rows = table_rows(output)
    # the table shows the issuance states some order ended in: its header names them
    header = next(line for line in output.splitlines()
                  if line.startswith("┃") and "product" in line)
    columns = [cell.strip() for cell in header.strip().strip("┃").split("┃")][1:]
    assert set(columns) <= {*STATES, "order status", "charges", "esim emails", "planned"}
    return {product: {column: "0" for column in STATES}
            | dict(zip(columns, rows[product][1:], strict=False))
            for product in PLANNED if product in rows}


@pytest.mark.timeout(DEMO_S + 30)
def test_the_order_phase_ends_every_order_as_planned_on_the_embedded_default(
        tmp_path: Path) -> None:
    # When the demo runs its order phase alone (two orders of each product) with no
    # environment: SQLite ./herald.db and the embedded Redis
    result = run_herald("demo", "--purchase-orders", "0", "--failover-events", "0",
                        "--digest-events", "0",
                        "--jobs", "20", "--events", "0", "--orders", "14",
                        cwd=tmp_path, env=herald_env(), timeout_s=DEMO_S)

    # Then it exits 0, and the summary shows each product's two orders as planned
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    summary = order_summary(result.stdout)
    assert set(summary) == set(PLANNED), result.stdout
    for product, end in PLANNED.items():
        row = summary[product]
        issued = end == "issued"
        assert {state: row[state] for state in STATES} == {
            state: "2" if state == end else "0" for state in STATES}, (product, row)
        assert row["order status"] == ("completed 2" if issued else "failed 2"), row
        # one charge and one eSIM email (QR attached) per issued order, none otherwise
        assert (row["charges"], row["esim emails"]) == (("2", "2") if issued else ("0", "0"))
    # each mock-crash order killed the worker process once; the demo restarted it
    assert result.stdout.count("worker crashed (mock-crash), restarted") == 2, result.stdout
    assert "worker crashes repaired 2" in flat(result.stdout)
    assert "customer verifications 2" in flat(result.stdout)
    assert "every order ended as planned" in flat(result.stdout)
    assert not embedded_answers(tmp_path), "the demo must stop the Redis it started"


#: Places a user's order in the working directory's database, as ``herald web`` would.
USER_ORDER = """
from herald.db import migrate
migrate()
from actors.catalog import sync_esim_products
from actors.orchestration import create_account
from actors.store import place_order
sync_esim_products()
account = create_account(email="user@example.com")
print(place_order(account.id, "mock-ok")["id"])
"""


@pytest.mark.timeout(DEMO_S + 30)
def test_the_order_phase_never_touches_a_users_stalled_order(
        tmp_path: Path, user_env: dict[str, str], redis_url: str) -> None:
    # Given a user's paid order, still pending an hour later: any store recovery scan
    # would re-drive it
    placed = subprocess.run([sys.executable, "-c", USER_ORDER], cwd=tmp_path,
                            env={**user_env, "FEATURE_ESIM_STORE": "true"},
                            capture_output=True, text=True, timeout=QUICK_S, check=False)
    assert placed.returncode == 0, placed.stderr
    user_order = placed.stdout.split()[-1]
    engine = create_engine(f"sqlite:///{tmp_path / 'herald.db'}")
    an_hour_ago = utcnow() - timedelta(hours=1)
    with Session(engine) as db:
        db.execute(update(Order).where(Order.id == user_order)
                   .values(status=OrderStatus.PAID.value, updated_at=an_hour_ago))
        db.execute(update(StoreOrder).where(StoreOrder.id == user_order)
                   .values(updated_at=an_hour_ago))
        db.commit()

    # When the demo runs its order phase in the same directory and Redis
    result = run_herald("demo", "--purchase-orders", "0", "--failover-events", "0",
                        "--digest-events", "0",
                        "--jobs", "20", "--events", "0", "--orders", "7",
                        cwd=tmp_path, env=user_env, timeout_s=DEMO_S)

    # Then its own orders end as planned, and the user's order is as the user left it:
    # paid, pending, never sent to the provider
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "worker crashed (mock-crash), restarted" in flat(result.stdout)
    with Session(engine) as db:
        order, store_order = db.get(Order, user_order), db.get(StoreOrder, user_order)
        assert order is not None and store_order is not None
        assert (order.status, store_order.issuance_state, store_order.provider_order_ref) == (
            "paid", "pending", None)
    engine.dispose()
    client = redis.Redis.from_url(redis_url)
    charged = {key: client.hget(key, user_order) for key in client.scan_iter(
        f"{user_env['QUEUE_PREFIX']}*:mock:esim:charges")}
    client.close()
    assert charged, "the demo's mock provider recorded no charges at all"
    assert set(charged.values()) == {None}, charged


@pytest.mark.parametrize(("value", "refusal"), [("-1", "must be at least 0"),
                                                ("701", "must be at most 700")])
def test_the_demo_refuses_an_order_count_out_of_range(tmp_path: Path, value: str,
                                                      refusal: str) -> None:
    result = run_herald("demo", "--orders", value, cwd=tmp_path, env=herald_env())

    assert result.returncode == 2
    assert f"argument --orders: {refusal}" in result.stderr
    assert not (tmp_path / ".herald").exists(), "a refused demo must start nothing"
    assert not re.search(r"orders by product", result.stdout)
