"""Bad input is refused where it enters the API, and a refusal changes nothing.

- A control character in any free-text field of any ``/v1`` body (and the operator's
  reroute) is a 422 ``control_character`` naming the field, with no row written anywhere;
  multi-line text (delivery notes, an event's data) may hold tab, LF and CRLF.
- A Sysco order the X12 850 cannot carry is refused when it is placed, not failed later.
- A Sysco supplier needs ``sftp.host_key`` or an explicit ``trust_on_first_use``; its
  ``host_key`` takes several key lines as ``ssh-keyscan`` prints them.

Against the app on PostgreSQL + Redis (the ``purchasing`` fixture), over its HTTP interface.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import asyncssh
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from herald import db, settings
from herald.queue import queue
from models.purchasing import Supplier
from providers.sftp import openssh_key_line
from tests.purchasing.conftest import make_item, make_supplier

ADMIN_TOKEN = "input-admin-token"
HOST_KEY = openssh_key_line(asyncssh.generate_private_key("ssh-ed25519").convert_to_public())
SFTP = {"host": "sftp.sysco.test", "port": 2222, "username": "herald",
        "password": "s3cret-Pa55word", "outbound_dir": "/outbound", "inbound_dir": "/inbound",
        "archive_dir": "/archive", "host_key": HOST_KEY}
#: The characters each field is tried with: line feed, carriage return, NUL, escape.
CONTROLS = {"LF": "\n", "CR": "\r", "NUL": "\x00", "ESC": "\x1b"}


@pytest.fixture
def client(purchasing: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The HTTP app over the test database and Redis, its console on (for the reroute)."""
    from herald.web import create_app

    monkeypatch.setenv("ADMIN_TOKEN", ADMIN_TOKEN)
    settings.reset_settings()
    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client
    settings.reset_settings()


def every_row_count() -> dict[str, int]:
    """How many rows each table of the database holds."""
    with db.get_engine().connect() as connection:
        tables = connection.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")).scalars()
        return {table: connection.execute(text(f'SELECT count(*) FROM "{table}"')).scalar_one()
                for table in tables}


# -- control characters -------------------------------------------------------------------------
EVENT = {"type": "account.welcome", "account_id": "acc-1", "occurrence": "signup",
         "data": {"get_started_url": "https://example.com/start"}}
ORDER = {"restaurant": {"id": "5b0f5c7d-0000-4000-8000-000000000001", "name": "Bistro Nord",
                        "location": "12 Quai Nord, Lyon"},
         "order_number": "PO-2001", "placed_by_email": "chef@bistro.test",
         "delivery_notes": "Back door", "lines": [{"catalog_item_id": "item-1", "quantity": 2}]}
#: Each route with a valid body (but for the ids it names, which a refusal never reaches)
#: and the path of each free-text field in it. A field under ``sftp`` or ``data`` is one
#: value of a JSON object: its 422 names the object and the path inside it.
ROUTES: list[tuple[str, str, dict[str, Any], list[tuple[Any, ...]]]] = [
    ("POST", "/v1/accounts",
     {"email": "amal@example.com", "phone": "+966501234567", "push_subscription_id": "sub-1"},
     [("email",), ("phone",), ("push_subscription_id",)]),
    ("PATCH", "/v1/accounts/acc-1",
     {"email": "amal@example.com", "phone": "+966501234567", "push_subscription_id": "sub-1"},
     [("email",), ("phone",), ("push_subscription_id",)]),
    ("POST", "/v1/events", EVENT,
     [("type",), ("account_id",), ("occurrence",), ("data", "get_started_url")]),
    ("POST", "/v1/events/bulk", {"events": [EVENT]},
     [("events", 0, "type"), ("events", 0, "account_id"), ("events", 0, "occurrence"),
      ("events", 0, "data", "get_started_url")]),
    ("POST", "/v1/batches",
     {"type": "account.welcome", "account_ids": ["acc-1"], "data": {"note": "hello"}},
     [("type",), ("account_ids", 0), ("data", "note")]),
    ("POST", "/v1/store/orders", {"account_id": "acc-1", "product_id": "mock-ok"},
     [("account_id",), ("product_id",)]),
    ("POST", "/v1/payments",
     {"order_id": "ord-1", "amount": "50.00", "currency": "SAR", "gateway": "mock"},
     [("order_id",), ("amount",), ("currency",), ("gateway",)]),
    ("POST", "/v1/payments", {"activation_id": "act-1", "amount": "50.00", "currency": "SAR"},
     [("activation_id",)]),
    ("POST", "/v1/activations",
     {"account_id": "acc-1", "operator_slug": "stc", "msisdn": "+966501234567"},
     [("account_id",), ("operator_slug",), ("msisdn",)]),
    ("POST", "/v1/suppliers", {"name": "Sysco Lyon", "type": "sysco", "sftp": SFTP},
     [("name",), *[("sftp", key) for key in SFTP if key != "port"]]),
    ("POST", "/v1/suppliers",
     {"name": "Costco", "type": "costco", "email": "orders@costco.test",
      "cc": ["ap@costco.test"]},
     [("email",), ("cc", 0)]),
    ("POST", "/v1/catalog-items",
     {"name": "Tomatoes", "unit": "case",
      "mappings": [{"supplier_id": "sup-1", "supplier_sku": "SKU1",
                    "supplier_product_code": "P-1", "unit_size": "6/#10", "preferred": True}]},
     [("name",), ("unit",), ("mappings", 0, "supplier_id"), ("mappings", 0, "supplier_sku"),
      ("mappings", 0, "supplier_product_code"), ("mappings", 0, "unit_size")]),
    ("POST", "/v1/purchase-orders", ORDER,
     [("restaurant", "name"), ("restaurant", "location"), ("order_number",),
      ("placed_by_email",), ("delivery_notes",), ("lines", 0, "catalog_item_id")]),
    ("POST", "/v1/inbound/sysco",
     {"supplier_id": "sup-1", "filename": "855_0001.edi", "content": "ISA*00~"},
     [("supplier_id",), ("filename",)]),
    ("POST", "/admin/backorders/line-1/reroute",
     {"alternate_supplier_id": "sup-2", "reason": "out of stock"},
     [("alternate_supplier_id",), ("reason",)]),
]
#: Text over lines, where a line feed is allowed (herald/text.py); a Sysco supplier's
#: ``host_key`` holds one OpenSSH key per line.
MULTI_LINE = {("delivery_notes",), ("data", "note"), ("data", "get_started_url"),
              ("events", 0, "data", "get_started_url"), ("sftp", "host_key")}
#: JSON objects checked whole: the field named is the object, then the path inside it.
JSON_OBJECTS = {"sftp", "data"}
FIELDS = [pytest.param(method, path, body, field,
                       id=f"{method} {path} {'.'.join(map(str, field))}")
          for method, path, body, fields in ROUTES for field in fields]


def with_value(body: dict[str, Any], field: tuple[Any, ...], char: str) -> dict[str, Any]:
    """``body`` with ``char`` inside the value at ``field``."""
    changed = copy.deepcopy(body)
    parent = changed
    for step in field[:-1]:
        parent = parent[step]
    value = parent[field[-1]]
    parent[field[-1]] = value[:2] + char + value[2:]
    return changed


def expected_place(field: tuple[Any, ...], char: str) -> str:
    """How the 422's message starts: the field's dotted path (for a value inside a JSON
    object, the object's path, then the character and where inside it)."""
    dotted = ".".join(str(step) for step in field)
    for index, step in enumerate(field):
        if step in JSON_OBJECTS:
            outer = ".".join(str(part) for part in field[:index + 1])
            inner = ".".join(str(part) for part in field[index + 1:])
            return f"{outer}: holds the control character U+{ord(char):04X} at {inner}"
    return f"{dotted}: holds the control character U+{ord(char):04X}"


@pytest.mark.parametrize(("method", "path", "body", "field"), FIELDS)
def test_a_control_character_in_a_free_text_field_is_a_422_naming_it_and_writes_nothing(
        client: TestClient, method: str, path: str, body: dict[str, Any],
        field: tuple[Any, ...]) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"} if path.startswith("/admin") else {}
    for name, char in CONTROLS.items():
        if field in MULTI_LINE and char == "\n":
            continue  # a line feed is what multi-line text is for
        # Given the database as it is
        before = every_row_count()
        # When the field holds the control character
        response = client.request(method, path, json=with_value(body, field, char),
                                  headers=headers)
        # Then the field is named in a 422 control_character, and nothing was written
        if path.endswith("/bulk"):  # each element is answered on its own
            assert response.status_code == 200, (name, response.text)
            [answer] = response.json()["results"]
            status, error = answer["status"], answer["error"]
        else:
            status, error = response.status_code, response.json().get("error")
        assert status == 422, (name, response.text)
        assert error["code"] == "control_character", (name, error)
        place = expected_place(field, char)
        assert error["message"].startswith(place), (name, error["message"], place)
        assert every_row_count() == before, name


def test_multi_line_text_keeps_its_lines_and_single_line_text_is_trimmed_as_before(
        client: TestClient) -> None:
    # Given a Costco supplier and an item it delivers
    costco = make_supplier("costco")
    item = make_item("Tomatoes", mappings=[(costco, "C-1", True)])
    # When an order's notes run over lines (LF, CRLF, a tab)
    notes = "Back door\r\nRing twice\n\tbefore 7am"
    response = client.post("/v1/purchase-orders", json={
        **ORDER, "delivery_notes": notes, "order_number": "  PO-7 ",
        "lines": [{"catalog_item_id": item, "quantity": 1}]})
    # Then the order is placed with the notes as written
    assert response.status_code == 201, response.text
    assert response.json()["delivery_notes"] == notes
    assert response.json()["order_number"] == "PO-7"


# -- X12 at order time --------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "says"), [
    ({"order_number": "PO*1"}, "order number"),
    ({"order_number": "PO~1"}, "order number"),
    ({"order_number": "PO-" + "9" * 20}, "order number"),
    ({"sku": "AB>12"}, "supplier SKU"),
    ({"unit": "crate"}, "unit 'crate'"),
])
def test_a_sysco_order_x12_cannot_carry_is_a_422_at_order_time_and_writes_nothing(
        client: TestClient, change: dict[str, str], says: str) -> None:
    # Given a Sysco supplier and an item it delivers
    sysco = make_supplier("sysco", sftp=None)
    item = make_item("Tomatoes", change.get("unit", "case"),
                     mappings=[(sysco, change.get("sku", "SKU1"), True)])
    before = every_row_count()
    # When a restaurant orders it with something an 850 cannot hold
    response = client.post("/v1/purchase-orders", json={
        **ORDER, "order_number": change.get("order_number", "PO-1"),
        "lines": [{"catalog_item_id": item, "quantity": 2}]})
    # Then it is refused now, saying why, and nothing is written or queued
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_order" and says in error["message"], error
    assert "X12" in error["message"]
    assert every_row_count() == before
    assert sum(queue("supplier-dispatch").counts().values()) == 0


@pytest.mark.parametrize("preferred", [True, False])
@pytest.mark.parametrize(("mapping", "unit", "says"), [
    ({"supplier_sku": "AB*12"}, "case", "supplier SKU"),
    ({"supplier_sku": "AB12", "supplier_product_code": "P~1"}, "case", "product code"),
    ({"supplier_sku": "AB12"}, "crate", "unit 'crate'"),
])
def test_an_item_a_sysco_850_cannot_carry_is_refused_when_it_is_mapped(
        client: TestClient, mapping: dict[str, str], unit: str, says: str,
        preferred: bool) -> None:
    # Given a Sysco supplier and a Costco one
    sysco, costco = make_supplier("sysco", sftp=None), make_supplier("costco")
    before = every_row_count()
    # When an item is mapped to Sysco (preferred, or the alternate a reroute would use)
    # with a SKU, product code or unit an 850 cannot hold
    response = client.post("/v1/catalog-items", json={"name": "Tomatoes", "unit": unit,
                                                      "mappings": [
        {"supplier_id": sysco, "preferred": preferred, **mapping},
        {"supplier_id": costco, "supplier_sku": "C-1", "preferred": not preferred}]})
    # Then it is refused, naming the mapping and why, and nothing is written
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_catalog_item", error
    assert error["message"].startswith("mappings.0: ") and says in error["message"], error
    assert every_row_count() == before
    # And the same item for Costco alone is fine
    for_costco = client.post("/v1/catalog-items", json={"name": "Tomatoes", "unit": unit,
                                                        "mappings": [
        {**mapping, "supplier_id": costco, "preferred": True}]})
    assert for_costco.status_code == 201, for_costco.text


def test_the_same_order_number_is_fine_for_a_supplier_that_takes_email(
        client: TestClient) -> None:
    costco = make_supplier("costco")
    item = make_item("Tomatoes", mappings=[(costco, "C-1", True)])
    response = client.post("/v1/purchase-orders", json={
        **ORDER, "order_number": "PO*1", "lines": [{"catalog_item_id": item, "quantity": 2}]})
    assert response.status_code == 201, response.text


# -- SFTP host keys ---------------------------------------------------------------------------
def test_a_sysco_supplier_without_a_host_key_needs_trust_on_first_use(
        client: TestClient) -> None:
    unkeyed = {key: value for key, value in SFTP.items() if key != "host_key"}
    # When a Sysco supplier is created with neither a host key nor trust on first use
    refused = client.post("/v1/suppliers", json={"name": "Sysco", "type": "sysco",
                                                 "sftp": unkeyed})
    # Then it is refused, saying what to give, and nothing is stored
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "host_key_required"
    assert "host_key" in error["message"] and "trust_on_first_use" in error["message"]
    assert every_row_count()[Supplier.__tablename__] == 0
    # A trust_on_first_use that is not a boolean is not trust
    vague = client.post("/v1/suppliers", json={
        "name": "Sysco", "type": "sysco", "sftp": {**unkeyed, "trust_on_first_use": "yes"}})
    assert vague.status_code == 422 and "trust_on_first_use" in vague.text
    # When the operator chooses trust on first use, or gives the key, it is created
    trusting = client.post("/v1/suppliers", json={
        "name": "Sysco", "type": "sysco", "sftp": {**unkeyed, "trust_on_first_use": True}})
    keyed = client.post("/v1/suppliers", json={"name": "Sysco", "type": "sysco",
                                               "sftp": SFTP})
    assert trusting.status_code == keyed.status_code == 201, trusting.text + keyed.text
    assert trusting.json()["sftp"]["trust_on_first_use"] is True
    assert trusting.json()["sftp"]["host_key"] is None
    assert keyed.json()["sftp"]["host_key"] == HOST_KEY


def test_a_host_key_takes_every_line_ssh_keyscan_prints_and_a_line_that_is_no_key_is_named(
        client: TestClient) -> None:
    # Given a server's keys as `ssh-keyscan -p 2222 sftp.sysco.test` prints them: three
    # types, host names in front, a comment line from its stderr
    keys = [openssh_key_line(asyncssh.generate_private_key(algorithm).convert_to_public())
            for algorithm in ("ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa")]
    scanned = "# sftp.sysco.test:2222 SSH-2.0-OpenSSH_9.2p1\n" + "".join(
        f"[sftp.sysco.test]:2222 {key}\r\n" for key in keys)
    # When a Sysco supplier is created with them
    created = client.post("/v1/suppliers", json={
        "name": "Sysco", "type": "sysco", "sftp": {**SFTP, "host_key": scanned}})
    # Then it is created with the lines as given
    assert created.status_code == 201, created.text
    assert created.json()["sftp"]["host_key"] == scanned
    # and a line that is not a key is refused by its number, writing nothing
    before = every_row_count()
    garbled = client.post("/v1/suppliers", json={
        "name": "Sysco", "type": "sysco",
        "sftp": {**SFTP, "host_key": f"{keys[0]}\nsftp.sysco.test ssh-ed25519 AAAA-not-a-key\n"}})
    assert garbled.status_code == 422, garbled.text
    error = garbled.json()["error"]
    assert error["code"] == "invalid_supplier"
    assert "host_key must be one or more OpenSSH public key lines" in error["message"]
    assert "line 2 is not one" in error["message"]
    assert every_row_count() == before
