"""The demo's purchasing phase: purchase orders to all three supplier types through the
HTTP API, transmitted by the real supplier-dispatch worker to real servers started for
the demo, and one back-ordered line rerouted from Sysco's 855.

The phase starts an SFTP server (Sysco's side: ``herald.demo.sftp_server``) and an SMTP
server (the suppliers' mailboxes: ``herald.demo.mail_sink``) on 127.0.0.1, creates four
suppliers — Sysco over SFTP, Costco and a second Costco-type wholesaler by email, the
central kitchen by PDF — and catalog items for each through ``POST /v1/suppliers`` and
``POST /v1/catalog-items``, then places orders with ``POST /v1/purchase-orders``. The
``supplier-dispatch`` and ``backorder-reroute`` queues run in this process. Once every
dispatch is submitted the phase plays Sysco: it drops an 855 for the first order into the
inbound directory, back-ordering one line, and polls the demo's Sysco supplier; the
reroute sends that line to the other wholesaler, by email.

It succeeds only when every order ended ``completed``, one 850 per order is on the SFTP
server, one email per email dispatch reached the SMTP server (a PDF attached for the
central kitchen), the 855 is archived and the line is rerouted with its dispatch
submitted. Without a PDF renderer (Debian's ``chromium``) the central kitchen is left out
of the plan, and the phase says so.

Isolation: jobs live under the demo's key prefix, and the demo's suppliers are
deactivated when it ends, so a user's clock never polls or dispatches to a server that
is gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from herald.demo.mail_sink import MailSink
from herald.demo.notifications import environment, own_namespace
from herald.demo.orders import ApiRefused, api_client
from herald.demo.sftp_server import SftpTestServer, start_sftp_server
from herald.demo.summary import counts_text

#: Purchase orders the phase places unless told otherwise.
DEFAULT_PURCHASE_ORDERS = 3
#: Most purchase orders one run may place.
MAX_PURCHASE_ORDERS = 100
#: How long the queues get to submit every dispatch, and then the reroute's.
SETTLE_DEADLINE = timedelta(seconds=120)
#: The queues this phase runs in its own process.
QUEUES = ("supplier-dispatch", "backorder-reroute")
#: Sysco's directories on the demo's SFTP server.
SFTP_DIRS = {"outbound_dir": "/outbound", "inbound_dir": "/inbound", "archive_dir": "/archive"}


@dataclasses.dataclass(frozen=True)
class Item:
    """A catalog item of the demo: its supplier (by role), SKU and unit."""

    name: str
    unit: str
    supplier: str
    sku: str
    #: The role of its alternate supplier, if it has one.
    alternate: str | None = None


#: The demo's suppliers by role: (type, name, email).
SUPPLIERS = {
    "sysco": ("sysco", "Sysco (demo)", None),
    "costco": ("costco", "Costco Business Center (demo)", "orders@costco.demo.herald"),
    "depot": ("costco", "Restaurant Depot (demo)", "orders@depot.demo.herald"),
    "kitchen": ("central_kitchen", "Central Kitchen (demo)", "kitchen@demo.herald"),
}
#: What every order of the demo buys. The first Sysco line has the depot as alternate: it
#: is the line the demo's 855 back-orders.
ITEMS = (
    Item("Roma tomatoes", "CA", "sysco", "1000234", alternate="depot"),
    Item("Extra virgin olive oil", "CA", "sysco", "1000571"),
    Item("Bread flour", "LB", "sysco", "2200190"),
    Item("Paper towels", "CA", "costco", "C-88121"),
    Item("Dish soap", "EA", "costco", "C-10022"),
    Item("Demi-glace", "EA", "kitchen", "CK-DG-1"),
    Item("Pizza dough balls", "DZ", "kitchen", "CK-PD-12"),
)


@dataclasses.dataclass
class Outcome:
    """What the phase found at its end."""

    statuses: Counter[str]
    dispatches: Counter[tuple[str, str]]
    files_850: int
    emails: int
    pdfs: int
    archived_855: bool
    rerouted: bool
    problems: list[str]


def run_purchasing(count: int, console: Console) -> int:
    """Run the purchasing phase; returns 0 only when every order, dispatch, file, email
    and the reroute ended as planned."""
    from actors.queues import registry
    from herald.db import migrate
    from herald.queue import SECOND
    from providers.pdf import renderer_ready

    migrate()
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="herald-demo-")))
        sftp = stack.enter_context(start_sftp_server(work / "sftp", "sysco-demo",
                                                     secrets.token_urlsafe(12)))
        mail = stack.enter_context(MailSink())
        prefix = stack.enter_context(own_namespace(QUEUES))
        stack.enter_context(environment(
            SMTP_HOST="127.0.0.1", SMTP_PORT=str(mail.port), SMTP_STARTTLS="false",
            SMTP_USE_TLS="false", SMTP_USERNAME="", SMTP_PASSWORD="",
            SUPPLIER_PDF_DIR=str(work / "pdfs"), SUPPLIER_PDF_BASE_URL="",
            ADMIN_ALERT_EMAIL=""))
        stack.enter_context(registry.redeclared(("supplier-dispatch",), backoff_base=SECOND))
        with_kitchen = renderer_ready() is True
        how = {"sysco": f"X12 850 over SFTP at 127.0.0.1:{sftp.port}",
               "costco": "email", "kitchen": "email with a PDF",
               "depot": "email: the alternate Sysco's back-ordered line is rerouted to"}
        suppliers = "; ".join(f"{_named(role)} ({how[role]})" for role in SUPPLIERS
                              if with_kitchen or role != "kitchen")
        console.print(f"[bold]purchasing[/]: {count} purchase orders through the HTTP API "
                      f"to {len(SUPPLIERS) - (not with_kitchen)} suppliers: {suppliers}. "
                      f"Supplier emails go to an SMTP server at 127.0.0.1:{mail.port}; the "
                      f"supplier queues run in this process (jobs under the key prefix "
                      f"{prefix}).")
        if not with_kitchen:
            console.print("[yellow]no PDF renderer (install Debian's chromium, or set "
                          "CHROMIUM_PATH): the central kitchen is left out[/]")
        supplier_ids: dict[str, str] = {}
        try:
            return _run(count, console, sftp, mail, work, with_kitchen, supplier_ids)
        except ApiRefused as error:
            console.print(f"[red]✗ {error}[/]")
            return 1
        finally:
            _deactivate(supplier_ids.values())


def _run(count: int, console: Console, sftp: SftpTestServer, mail: MailSink, work: Path,
         with_kitchen: bool, supplier_ids: dict[str, str]) -> int:
    from herald.queue import running_worker

    client = api_client()
    items = [item for item in ITEMS if with_kitchen or item.supplier != "kitchen"]
    roles = {item.supplier for item in items} | {"depot"}
    supplier_ids.update({role: _create_supplier(client, role, sftp) for role in sorted(roles)})
    item_ids = [_create_item(client, item, supplier_ids) for item in items]
    run_id = uuid.uuid4().hex[:6]
    started = time.perf_counter()
    with running_worker(list(QUEUES)):
        orders = [_post(client, "/v1/purchase-orders", 201, {
            "restaurant": {"id": str(uuid.uuid4()), "name": f"Bistro {n + 1}",
                           "location": f"{n + 12} Quai Nord, Lyon"},
            "order_number": f"DEMO-{run_id}-{n + 1}",
            "placed_by_email": f"chef{n + 1}@bistro.demo.herald",
            "delivery_notes": "Back door before 7 am",
            "lines": [{"catalog_item_id": item_id, "quantity": 2 + n % 3}
                      for item_id in item_ids]})["id"] for n in range(count)]
        placed = _settle(console, client, orders, "dispatches submitted", _submitted)
        rerouted = False
        if placed:
            rerouted = _backorder_first(console, client, orders[0], sftp, supplier_ids)
    outcome = _outcome(client, orders, sftp, mail, work, supplier_ids, with_kitchen,
                       rerouted)
    _print(console, outcome, time.perf_counter() - started)
    for problem in outcome.problems:
        console.print(f"[red]✗ {problem}[/]")
    if outcome.problems:
        return 1
    console.print("[green]✓ every purchase order reached its suppliers; the back-ordered "
                  "line went to its alternate[/]")
    return 0


# -- the API ---------------------------------------------------------------------------
def _post(client: Any, path: str, expected: int, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    if response.status_code != expected:
        raise ApiRefused(f"POST {path} answered {response.status_code}: {response.text}")
    result: dict[str, Any] = response.json()
    return result


def _get(client: Any, path: str) -> dict[str, Any]:
    response = client.get(path)
    if response.status_code != 200:
        raise ApiRefused(f"GET {path} answered {response.status_code}: {response.text}")
    result: dict[str, Any] = response.json()
    return result


def _create_supplier(client: Any, role: str, sftp: SftpTestServer) -> str:
    kind, name, email = SUPPLIERS[role]
    body: dict[str, Any] = {"name": name, "type": kind, "email": email, "cc": [],
                            "active": True}
    if kind == "sysco":
        body["sftp"] = {"host": sftp.host, "port": sftp.port, "username": sftp.username,
                        "password": sftp.password, **SFTP_DIRS,
                        "host_key": sftp.host_key_line}
    return str(_post(client, "/v1/suppliers", 201, body)["id"])


def _create_item(client: Any, item: Item, suppliers: dict[str, str]) -> str:
    mappings = [{"supplier_id": suppliers[item.supplier], "supplier_sku": item.sku,
                 "supplier_product_code": None, "unit_size": None, "preferred": True}]
    if item.alternate:
        mappings.append({"supplier_id": suppliers[item.alternate],
                         "supplier_sku": f"RD-{item.sku}", "supplier_product_code": None,
                         "unit_size": None, "preferred": False})
    return str(_post(client, "/v1/catalog-items", 201,
                     {"name": item.name, "unit": item.unit, "mappings": mappings})["id"])


# -- waiting ---------------------------------------------------------------------------
def _submitted(order: dict[str, Any]) -> bool:
    """Every dispatch of the order submitted."""
    return all(dispatch["status"] == "submitted" for dispatch in order["dispatches"])


def _settle(console: Console, client: Any, orders: list[str], what: str,
            done: Callable[[dict[str, Any]], bool]) -> bool:
    """Wait until ``done(order)`` holds for every order (read through the API); False
    when the deadline came first."""
    deadline = time.perf_counter() + SETTLE_DEADLINE.total_seconds()
    with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task(what, total=len(orders))
        while time.perf_counter() < deadline:
            finished = sum(done(_get(client, f"/v1/purchase-orders/{order}"))
                           for order in orders)
            progress.update(task, completed=finished)
            if finished == len(orders):
                return True
            time.sleep(0.2)
    return False


def _backorder_first(console: Console, client: Any, order_id: str, sftp: SftpTestServer,
                     suppliers: dict[str, str]) -> bool:
    """Play Sysco: drop an 855 back-ordering the order's first Sysco line, poll the
    demo's Sysco supplier (as the clock's poll does), and wait for the reroute's dispatch
    to be submitted. True when it was."""
    from actors.sysco_inbound import poll_supplier
    from herald.db import session as db_session
    from models.purchasing import Supplier

    order = _get(client, f"/v1/purchase-orders/{order_id}")
    sysco_lines = [line for line in order["lines"]
                   if line["supplier_id"] == suppliers["sysco"]]
    inbound = sftp.root / SFTP_DIRS["inbound_dir"].lstrip("/")
    inbound.mkdir(parents=True, exist_ok=True)
    (inbound / f"855_{order['order_number']}.edi").write_text(
        ack_855(order["order_number"], ["IB"] + ["IA"] * (len(sysco_lines) - 1)))
    with db_session() as session:
        supplier = session.get(Supplier, suppliers["sysco"])
        assert supplier is not None
        session.expunge(supplier)
    poll_supplier(supplier)
    return _settle(console, client, [order_id], "reroute submitted", lambda current: any(
        dispatch["is_reroute"] and dispatch["status"] == "submitted"
        for dispatch in current["dispatches"]))


def ack_855(order_number: str, codes: list[str]) -> str:
    """Sysco's 855 for ``order_number``: line n of the 850 acknowledged with ``codes[n]``
    (``IA`` accepted, ``IB`` back-ordered)."""
    body = [f"BAK*00*AC*{order_number}*{time.strftime('%Y%m%d')}"]
    for number, code in enumerate(codes, start=1):
        body += [f"PO1*{number}*2*CA", f"ACK*{code}*2*CA"]
    body.append(f"CTT*{len(codes)}")
    stamp = time.strftime("%y%m%d*%H%M")
    return "~\n".join([
        f"ISA*00*          *00*          *ZZ*{'SYSCO':<15}*ZZ*{'HERALD':<15}*{stamp}*U*00401"
        "*000000001*0*T*>",
        f"GS*PR*SYSCO*HERALD*{time.strftime('%Y%m%d')}*{time.strftime('%H%M')}*1*X*004010",
        "ST*855*0001", *body, f"SE*{len(body) + 2}*0001", "GE*1*1",
        "IEA*1*000000001"]) + "~\n"


# -- the outcome -------------------------------------------------------------------------
def _outcome(client: Any, orders: list[str], sftp: SftpTestServer, mail: MailSink,
             work: Path, suppliers: dict[str, str], with_kitchen: bool,
             rerouted: bool) -> Outcome:
    read = [_get(client, f"/v1/purchase-orders/{order}") for order in orders]
    names = {supplier_id: role for role, supplier_id in suppliers.items()}
    statuses = Counter(order["status"] for order in read)
    dispatches = Counter((names.get(d["supplier_id"], "?"), d["status"])
                         for order in read for d in order["dispatches"])
    files = list((sftp.root / SFTP_DIRS["outbound_dir"].lstrip("/")).glob("*.edi"))
    archived = any((sftp.root / SFTP_DIRS["archive_dir"].lstrip("/")).glob("855_*.edi"))
    received = mail.received
    pdfs = sum(1 for message in received for part in message.message.iter_attachments()
               if part.get_content_type() == "application/pdf")
    email_roles = {"costco"} | ({"kitchen"} if with_kitchen else set())
    want_emails = len(orders) * len(email_roles) + (1 if rerouted else 0)
    problems = []
    if statuses["completed"] != len(orders):
        problems.append(f"orders by status: {counts_text(statuses)}; planned "
                        f"{len(orders)} completed")
    if len(files) != len(orders):
        problems.append(f"{len(files)} 850 files on the SFTP server, planned {len(orders)}")
    if len(received) != want_emails:
        problems.append(f"{len(received)} supplier emails, planned {want_emails}")
    if with_kitchen and pdfs != len(orders):
        problems.append(f"{pdfs} PDFs attached, planned {len(orders)}")
    if not archived:
        problems.append("the 855 was not archived")
    if not rerouted:
        problems.append("the back-ordered line was not rerouted to its alternate")
    return Outcome(statuses, dispatches, len(files), len(received), pdfs, archived,
                   rerouted, problems)


def _named(role: str) -> str:
    """A supplier's name without the demo's mark: ``Sysco``."""
    return SUPPLIERS[role][1].removesuffix(" (demo)")


def _print(console: Console, outcome: Outcome, wall_s: float) -> None:
    table = Table(title="purchase order dispatches by supplier × status")
    table.add_column("supplier", no_wrap=True)
    states = ("pending", "submitted", "confirmed", "failed")
    for state in states:
        table.add_column(state, justify="right")
    for role in SUPPLIERS:
        row = [outcome.dispatches[(role, state)] for state in states]
        if any(row):
            table.add_row(SUPPLIERS[role][1], *(str(n) for n in row))
    console.print(table)
    console.print(f"wall time {wall_s:.1f} s · purchase orders: {counts_text(outcome.statuses)}"
                  f" · 850 files on the SFTP server: {outcome.files_850} · supplier emails: "
                  f"{outcome.emails} ({outcome.pdfs} with a PDF) · 855 archived: "
                  f"{'yes' if outcome.archived_855 else 'no'} · back-ordered line rerouted: "
                  f"{'yes' if outcome.rerouted else 'no'}")


def _deactivate(supplier_ids: Iterable[str]) -> None:
    """Deactivate the demo's suppliers: their servers stop with the demo."""
    from sqlalchemy import update
    from sqlmodel import col

    from herald.db import session as db_session
    from models.purchasing import Supplier

    ids = list(supplier_ids)
    if ids:
        with db_session() as session:
            session.execute(update(Supplier).where(col(Supplier.id).in_(ids))
                            .values(active=False))
