"""The demo's order phase: eSIM orders across every behaviour of the mock eSIM provider,
placed and paid through the HTTP API, issued by real workers, a worker crash repaired —
until every order is final.

The phase syncs the mock's catalog (the eSIM product sync, run once in this process),
creates an account, and for each order calls ``POST /v1/store/orders``, ``POST
/v1/payments`` and ``POST /v1/payments/{id}/complete`` on the real app. The payment and
store-fulfillment queues run in a worker *process* (``herald worker``), because
``mock-crash`` ends the process that issues it right after the provider charged; the
phase restarts the worker, and the restarted run reconciles with the provider instead of
issuing again. For ``mock-verify`` the phase plays the customer: the mock issues the
profile and the phase posts the provider's signed webhook to
``POST /v1/store/webhooks/mock``. The notification queues run in this process and send
each issued order's ``esim.ready`` email, its QR code attached, through the mock
notification provider.

It succeeds only when every order ended as its product plans (:data:`PLANS`), with the
mock's charges and eSIM emails to match.

Isolation, as in the notification phase: jobs and the mocks' records live under the
demo's key prefix, and every wait and count reads this run's account and orders only.
The store is turned on (``FEATURE_ESIM_STORE``) in this process only, for the order
routes: the worker process runs with it off, so its start-up store recovery scan — which
reads every order in the database — never re-drives a user's order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import func
from sqlmodel import col, select

# the notification queues' actors, which this process runs
import actors.callbacks
import actors.handoffs
import actors.notifications  # noqa: F401
from herald.demo.notifications import DEMO_SWEEP_AGE, DEMO_SWEEP_EVERY, environment, own_namespace
from herald.demo.notifications import QUEUES as NOTIFICATION_QUEUES
from herald.demo.order_workers import ORDER_QUEUES
from providers.esim_mock import CRASH_EXIT_CODE, MOCK_PRODUCTS, MockEsimProvider

#: Orders the phase places unless told otherwise: three of each mock product.
DEFAULT_ORDERS = 3 * len(MOCK_PRODUCTS)
#: Most orders one run may place.
MAX_ORDERS = 700
#: Order n buys product n mod 7, in this order.
PRODUCTS = tuple(MOCK_PRODUCTS)
#: How long the workers get to bring every order to its end (and send its email).
SETTLE_DEADLINE = timedelta(seconds=120)
#: How long a stopped worker process gets to drain before it is killed.
STOP_GRACE = timedelta(seconds=30)
#: Unexpected exits of the worker process (not ``mock-crash``) the phase restarts it after;
#: one more and the phase gives up.
MAX_UNEXPECTED_EXITS = 2
#: The file of the eSIM email's QR code attachment.
QR_ATTACHMENT = "esim-qr.png"
#: Issuance states the summary shows, final ones last.
ISSUANCE_STATES = ("pending", "in_flight", "reconciliation_required",
                   "pending_verification", "issued", "failed")
FINAL_STATES = ("issued", "failed")
#: Delivery outcomes that still wait for a worker.
OPEN_OUTCOMES = ("queued", "sending")


@dataclasses.dataclass(frozen=True)
class Plan:
    """How an order of a product must end."""

    issuance_state: str
    status: str
    charges: int
    esim_emails: int
    #: Checked when set.
    error_code: str | None = None

    def describe(self) -> str:
        """``issued, 1 charge`` — the summary's "planned" column."""
        what = self.issuance_state + (f" ({self.error_code})" if self.error_code else "")
        return f"{what}, {self.charges} charge" + ("" if self.charges == 1 else "s")


ISSUED = Plan("issued", "completed", charges=1, esim_emails=1)
#: Every mock product's planned end (providers/esim_mock.py says why).
PLANS: dict[str, Plan] = {
    "mock-ok": ISSUED,
    "mock-transient": ISSUED,
    "mock-out-of-stock": Plan("failed", "failed", charges=0, esim_emails=0,
                              error_code="out_of_stock"),
    "mock-terminal": Plan("failed", "failed", charges=0, esim_emails=0),
    "mock-ambiguous": ISSUED,
    "mock-verify": ISSUED,
    "mock-crash": ISSUED,
}


@dataclasses.dataclass(frozen=True)
class OrderRow:
    """One of this run's orders as the database and the mocks have it."""

    id: str
    product_id: str
    issuance_state: str
    status: str
    error_code: str | None
    iccid: str | None
    charges: int = 0
    esim_emails: int = 0

    def problems(self) -> list[str]:
        """How the order differs from its product's plan (empty: as planned)."""
        plan = PLANS[self.product_id]
        got = {"issuance state": self.issuance_state, "order status": self.status,
               "charges": self.charges, "eSIM emails": self.esim_emails}
        want = {"issuance state": plan.issuance_state, "order status": plan.status,
                "charges": plan.charges, "eSIM emails": plan.esim_emails}
        if plan.error_code is not None:
            got["error code"], want["error code"] = self.error_code, plan.error_code
        return [f"order {self.id[:8]} ({self.product_id}): {field} {got[field]}, "
                f"planned {want[field]}" for field in want if got[field] != want[field]]


# -- the worker process --------------------------------------------------------------------
def worker_environment() -> dict[str, str]:
    """This process's environment (the demo's key prefix, database and Redis) for the
    worker process, with the store turned off there (see the module's docstring) and a
    health port of its own."""
    env = {name: value for name, value in os.environ.items()
           if name.upper() not in ("FEATURE_ESIM_STORE", "WORKER_PORT")}
    return env | {"FEATURE_ESIM_STORE": "false", "WORKER_PORT": "0"}


class WorkerProcess:
    """``herald worker`` on the payment and store-fulfillment queues, restarted whenever it
    dies; its log goes to a temporary file (shown when it dies unexpectedly)."""

    def __init__(self, console: Console, log: IO[bytes]) -> None:
        self.console = console
        self.env = worker_environment()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.crashes = 0
        self.failures: list[str] = []

    def start(self) -> None:
        """Start the process (it takes jobs once its queues have started)."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "herald.cli", "worker", "--import",
             "herald.demo.order_workers", *ORDER_QUEUES],
            env=self.env, cwd=os.getcwd(), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.log)

    def restart_if_dead(self) -> None:
        """Restart the process if it ended, and say why it ended."""
        assert self.process is not None
        code = self.process.poll()
        if code is None:
            return
        if code == CRASH_EXIT_CODE:
            self.crashes += 1
            self.console.print("[yellow]worker crashed (mock-crash), restarted[/]")
        else:
            self.failures.append(f"the worker process exited with {code}:\n{self.log_tail()}")
            self.console.print(f"[red]worker exited with {code}, restarted[/]")
        self.start()

    def log_tail(self, lines: int = 15) -> str:
        """The last lines the worker processes logged."""
        self.log.seek(0)
        return "\n".join(self.log.read().decode(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM (the worker drains), then SIGKILL after :data:`STOP_GRACE`."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_GRACE.total_seconds())
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def worker_process(console: Console) -> Iterator[WorkerProcess]:
    """The running worker process for the block; stopped after it, whatever happens."""
    with tempfile.TemporaryFile() as log:
        worker = WorkerProcess(console, log)
        worker.start()
        try:
            yield worker
        finally:
            worker.stop()


# -- placing and paying through the HTTP API ---------------------------------------------------
class ApiRefused(RuntimeError):
    """The app answered a call with an unexpected status."""


def _call(client: Any, path: str, expected: int, body: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    response = client.post(path, json=body or {})
    if response.status_code != expected:
        raise ApiRefused(f"POST {path} answered {response.status_code}: {response.text}")
    result: dict[str, Any] = response.json()
    return result


def place_and_pay(client: Any, account_id: str, product_id: str) -> str:
    """Place an order of ``product_id``, pay its price and complete the payment (the
    settlement is queued); returns the order id."""
    order = _call(client, "/v1/store/orders", 201,
                  {"account_id": account_id, "product_id": product_id})
    payment = _call(client, "/v1/payments", 201, {"order_id": order["id"],
                                                  "amount": order["amount"],
                                                  "currency": order["currency"]})
    _call(client, f"/v1/payments/{payment['id']}/complete", 202)
    return str(order["id"])


# -- reading this run's rows -------------------------------------------------------------------
def read_orders(order_ids: Sequence[str], email: str) -> list[OrderRow]:
    """This run's orders, with the mock's charges and the eSIM emails sent for each."""
    from herald.db import session as db_session
    from models.store import Order, StoreOrder
    from providers.mock import MockProvider

    with db_session() as session:
        rows = session.exec(
            select(  # type: ignore[call-overload]  # sqlmodel types up to 4 columns
                col(StoreOrder.id), col(StoreOrder.product_id), col(StoreOrder.issuance_state),
                col(Order.status), col(StoreOrder.error_code), col(StoreOrder.iccid))
            .join(Order, col(Order.id) == col(StoreOrder.id))
            .where(col(StoreOrder.id).in_(order_ids))).all()
    emails = [str(send["text"]) for send in MockProvider.sends(accepted_only=True)
              if send["channel"] == "email" and send["to"] == email
              and QR_ATTACHMENT in send["attachments"]]
    found = {row[0]: OrderRow(*row) for row in rows}
    return [dataclasses.replace(
        found[order_id], charges=MockEsimProvider.charges(order_id),
        esim_emails=sum(iccid in text for text in emails)
        if (iccid := found[order_id].iccid) else 0) for order_id in order_ids if order_id in found]


def open_deliveries(account_id: str) -> int:
    """Deliveries to the account still waiting for a worker."""
    from actors.handoffs import Scope
    from herald.db import session as db_session
    from models.notifications import Delivery

    with db_session() as session:
        return session.exec(select(func.count()).select_from(Delivery).where(
            Scope.of([account_id]).deliveries(),
            col(Delivery.outcome).in_(OPEN_OUTCOMES))).one()


def verify_waiting(client: Any, orders: list[OrderRow], verified: set[str]) -> None:
    """Play the customer of each order waiting for verification: the mock issues the
    profile, and its signed ``verified`` webhook is posted to the app."""
    for order in orders:
        if order.issuance_state != "pending_verification" or order.id in verified:
            continue
        reference = MockEsimProvider.reference(order.id)
        if reference is None:
            continue
        body, headers = MockEsimProvider.customer_verifies(reference)
        response = client.post("/v1/store/webhooks/mock", content=body, headers=headers)
        if response.status_code == 202:
            verified.add(order.id)


# -- the phase ---------------------------------------------------------------------------------
def run_orders(count: int, console: Console) -> int:
    """Run the order phase; returns 0 only when every order ended as its product plans,
    with one charge and one eSIM email per issued order and no charge for a failed one."""
    from actors.queues import registry

    with own_namespace((*NOTIFICATION_QUEUES, *ORDER_QUEUES)) as prefix, \
            environment(FEATURE_ESIM_STORE="true"), \
            registry.redeclared(NOTIFICATION_QUEUES, rate_limit=None):
        MockEsimProvider.reset()
        return _run(count, console, prefix)


def api_client() -> Any:
    """herald's HTTP API in this process, as a loopback client with the API token."""
    with warnings.catch_warnings():  # starlette's note about its httpx client, not ours
        warnings.filterwarnings("ignore", message=".*httpx.*")
        from fastapi.testclient import TestClient

    from herald.settings import get_settings
    from herald.web import create_app

    token = get_settings().api_token
    # the demo calls the app in its own process: a loopback client naming a loopback
    # Host, as protected mode (API_TOKEN unset) requires
    return TestClient(create_app(), base_url="http://127.0.0.1", client=("127.0.0.1", 50000),
                      headers={"Authorization": f"Bearer {token}"} if token else {})


def _run(count: int, console: Console, prefix: str) -> int:
    from actors.catalog import sync_esim_products
    from herald.db import migrate
    from providers.esim import esim_providers

    if "mock" not in esim_providers.enabled():
        console.print("[red]✗ the order phase needs the mock eSIM provider: add mock to "
                      "ESIM_PROVIDERS, or skip the phase with --orders 0[/]")
        return 1
    migrate()
    run_id = uuid.uuid4().hex[:8]
    console.print(f"[bold]orders[/]: {count} eSIM orders over the mock's products "
                  f"({', '.join(PRODUCTS)}), placed and paid through the HTTP API; payment "
                  f"and store queues in a worker process (jobs under the key prefix "
                  f"{prefix!r})")
    started = time.perf_counter()
    with worker_process(console) as worker:
        sync_esim_products()
        client = api_client()
        email = f"orders.{run_id}@example.com"
        try:
            account_id = str(_call(client, "/v1/accounts", 201,
                                   {"email": email, "locale": "en"})["id"])
            order_ids = [place_and_pay(client, account_id, PRODUCTS[n % len(PRODUCTS)])
                         for n in range(count)]
        except ApiRefused as error:
            console.print(f"[red]✗ {error}[/]")
            return 1
        console.print(f"placed and paid {count} orders in "
                      f"{time.perf_counter() - started:.2f} s")
        settled = _settle(client, worker, order_ids, account_id, email, console)
    orders = read_orders(order_ids, email)
    _print_orders(console, orders)
    console.print(f"{count} orders final in {time.perf_counter() - started:.2f} s · worker "
                  f"crashes repaired {worker.crashes} · charges "
                  f"{sum(o.charges for o in orders)} · esim.ready emails "
                  f"{sum(o.esim_emails for o in orders)} · customer verifications "
                  f"{len(settled.verified)} · handoff sweep re-created {settled.recreated} "
                  "lost jobs")
    problems = [*worker.failures] if settled.done else [
        "not every order was final (with its eSIM email sent) before the deadline",
        *worker.failures]
    problems += [problem for order in orders for problem in order.problems()]
    if len(orders) != count:
        problems.append(f"{count - len(orders)} orders are missing")
    for problem in problems:
        console.print(f"[red]✗ {problem}[/]")
    if not problems:
        console.print("[green]✓ every order ended as planned: one charge and one eSIM "
                      "email per issued order, none for the failed ones[/]")
    return 1 if problems else 0


@dataclasses.dataclass
class Settling:
    """Where the run of the workers stands."""

    done: bool = False
    #: Jobs of the account's deliveries the handoff sweep re-created.
    recreated: int = 0
    last_sweep: float = 0.0
    verified: set[str] = dataclasses.field(default_factory=set)

    def sweep(self, account_id: str) -> None:
        """The handoff sweep over the account's rows, every DEMO_SWEEP_EVERY: a receipt
        or eSIM notification whose channel job died with the worker process comes back."""
        from actors.handoffs import Scope, reconcile_handoffs

        if time.monotonic() - self.last_sweep < DEMO_SWEEP_EVERY.total_seconds():
            return
        self.last_sweep = time.monotonic()
        self.recreated += reconcile_handoffs(age=DEMO_SWEEP_AGE,
                                             scope=Scope.of([account_id])).recreated


def _settle(client: Any, worker: WorkerProcess, order_ids: list[str], account_id: str,
            email: str, console: Console) -> Settling:
    """Run until every order is final, each issued one has its eSIM email and no
    delivery of the account is open; restart the worker when it dies (``done`` stays
    False when the deadline came first)."""
    from herald.queue import running_worker

    settling = Settling()
    deadline = time.perf_counter() + SETTLE_DEADLINE.total_seconds()
    with Progress(TextColumn("orders final"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                  console=console) as progress, running_worker(list(NOTIFICATION_QUEUES)):
        task = progress.add_task("orders", total=len(order_ids), detail="")
        while time.perf_counter() < deadline:
            if len(worker.failures) > MAX_UNEXPECTED_EXITS:
                break
            worker.restart_if_dead()
            orders = read_orders(order_ids, email)
            verify_waiting(client, orders, settling.verified)
            settling.sweep(account_id)
            states = Counter(order.issuance_state for order in orders)
            final = sum(states[state] for state in FINAL_STATES)
            emails_due = sum(order.issuance_state == "issued" and order.esim_emails == 0
                             for order in orders)
            progress.update(task, completed=final, detail=f"issued {states['issued']} · "
                            f"failed {states['failed']} · emails due {emails_due}")
            if final == len(order_ids) and emails_due == 0 and open_deliveries(
                    account_id) == 0:
                settling.done = True
                break
            time.sleep(0.2)
    return settling


def _print_orders(console: Console, orders: list[OrderRow]) -> None:
    # the issuance states some order ended in (the others would be columns of zeros)
    reached = [state for state in ISSUANCE_STATES
               if any(order.issuance_state == state for order in orders)]
    table = Table(title="orders by product: issuance state, order status, charges, eSIM "
                        "emails, and what was planned")
    table.add_column("product", no_wrap=True)
    for state in reached:
        table.add_column(state, justify="right")
    for column in ("order status", "charges", "esim emails", "planned"):
        table.add_column(column, justify="right" if column != "planned" else "left")
    for product in PRODUCTS:
        mine = [order for order in orders if order.product_id == product]
        if not mine:
            continue
        states = Counter(order.issuance_state for order in mine)
        statuses = Counter(order.status for order in mine)
        table.add_row(product, *(str(states[state]) for state in reached),
                      " ".join(f"{status} {n}" for status, n in sorted(statuses.items())),
                      str(sum(order.charges for order in mine)),
                      str(sum(order.esim_emails for order in mine)),
                      f"{len(mine)} × {PLANS[product].describe()}")
    console.print(table)
