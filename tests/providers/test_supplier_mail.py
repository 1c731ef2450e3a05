"""The supplier email transport (the Costco case) against a real SMTP server (aiosmtpd)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest

from herald.settings import Settings
from providers.supplier_mail import SupplierMailError, send_supplier_email
from providers.suppliers import (
    PermanentMailError,
    SupplierConfigError,
    is_permanent_failure,
)
from tests.support.providers.smtp_relay import Relay, start_relay
from tests.support.purchasing.documents import COSTCO, COSTCO_CC, SENDER, line, order
from tests.support.services import find_free_port


@pytest.fixture
def relay() -> Iterator[tuple[Relay, Settings]]:
    """A plain relay and settings pointing at it; EMAIL_PROVIDER stays ``mock``: supplier
    email goes through the SMTP settings whatever it says."""
    server, controller = start_relay()
    yield server, Settings(smtp_host="127.0.0.1", smtp_port=controller.port,
                           smtp_starttls=False, email_from=SENDER, email_provider="mock")
    controller.stop()


def test_the_costco_order_is_one_email_with_every_line_in_both_parts(
        relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    lines = (line(1), line(2, supplier_product_code=None, unit_size=None),
             line(3, quantity=Decimal("2.50"), unit="each"))
    document = order(*lines)

    sent = send_supplier_email(document, to=COSTCO, cc=COSTCO_CC,
                               supplier_name="Costco Business Center", settings=settings)

    [received] = server.received
    message = received.message
    assert received.mail_from == "orders@lucille.test"
    assert received.rcpt_tos == [COSTCO, *COSTCO_CC]
    assert message["Subject"] == "Purchase order PO-1042 — Lucille Downtown"
    assert message["From"] == SENDER
    assert message["To"] == COSTCO
    assert message["Cc"] == ", ".join(COSTCO_CC)
    assert message["Reply-To"] == "chef@lucille.test"
    assert sent.reference == message["Message-ID"]
    assert sent.audit == {"subject": "Purchase order PO-1042 — Lucille Downtown",
                          "recipients": [COSTCO, *COSTCO_CC]}
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    for part in (text, html):
        for expected in ("PO-1042", "Lucille Downtown", "12 Main Street",
                         "Back door before 7 am", "chef@lucille.test",
                         "Costco Business Center"):
            assert expected in part
    # every line, every column, in both alternatives
    text_rows = {row.split()[2]: row for row in text.splitlines()
                 if row.startswith("Item number")}
    assert text_rows.keys() == {"1", "2", "3"}
    assert text_rows["1"].split() == ["Item", "number", "1", "CO-7001", "UPC00001", "2",
                                      "case", "6", "x", "1", "lb"]
    assert text_rows["2"].split() == ["Item", "number", "2", "CO-7002", "3", "case"]
    assert text_rows["3"].split() == ["Item", "number", "3", "CO-7003", "UPC00003", "2.5",
                                      "each", "8", "x", "1", "lb"]
    assert [_cells(row) for row in _html_rows(html)] == [
        ["Item number 1", "CO-7001", "UPC00001", "2", "case", "6 x 1 lb"],
        ["Item number 2", "CO-7002", "", "3", "case", ""],
        ["Item number 3", "CO-7003", "UPC00003", "2.5", "each", "8 x 1 lb"],
    ]


def test_the_html_part_escapes_what_the_order_says(relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    document = order(line(1, name='Eggs <b>large</b> & "fresh"'),
                     restaurant_name="Lucille <script>x</script>")

    send_supplier_email(document, to=COSTCO, settings=settings)

    message = server.received[0].message
    html = message.get_body(("html",)).get_content()
    assert "<b>large</b>" not in html and "<script>" not in html
    assert "Eggs &lt;b&gt;large&lt;/b&gt; &amp; &#34;fresh&#34;" in html
    assert 'Eggs <b>large</b> & "fresh"' in message.get_body(("plain",)).get_content()


def test_a_retry_of_the_same_dispatch_repeats_its_message_id(
        relay: tuple[Relay, Settings]) -> None:
    server, settings = relay

    first = send_supplier_email(order(), to=COSTCO, settings=settings)
    again = send_supplier_email(order(), to=COSTCO, settings=settings)
    other = send_supplier_email(order(dispatch_id="dispatch-2"), to=COSTCO, settings=settings)

    assert first.reference == again.reference != other.reference
    assert [r.message["Message-ID"] for r in server.received] == [
        first.reference, again.reference, other.reference]


@pytest.mark.parametrize("to", ["", "   ", None])
def test_a_supplier_without_an_address_fails_permanently_before_contacting_the_relay(
        to: str | None) -> None:
    # nothing listens on this port: an attempt to send would be a connection error
    settings = Settings(smtp_host="127.0.0.1", smtp_port=find_free_port(),
                        smtp_starttls=False)

    with pytest.raises(SupplierConfigError, match="no email address") as raised:
        send_supplier_email(order(), to=to, cc=COSTCO_CC, settings=settings)

    assert is_permanent_failure(raised.value)


@pytest.mark.parametrize("to, cc", [("orders@costco", ()),
                                    (COSTCO, ("buyer@costco.test, evil@x.test",))])
def test_a_malformed_address_fails_permanently_and_sends_nothing(
        relay: tuple[Relay, Settings], to: str, cc: tuple[str, ...]) -> None:
    server, settings = relay

    with pytest.raises(SupplierConfigError, match="not an email address") as raised:
        send_supplier_email(order(), to=to, cc=cc, settings=settings)

    assert is_permanent_failure(raised.value)
    # the relay is up and working: the next good email is the only one it ever got
    send_supplier_email(order(order_number="PO-SENTINEL"), to=COSTCO, settings=settings)
    assert [r.message["Subject"] for r in server.received] == [
        "Purchase order PO-SENTINEL — Lucille Downtown"]


def test_a_5xx_refusal_is_a_permanent_mail_error(relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    server.rcpt_reply = f"550 5.1.1 <{COSTCO}>: Recipient address rejected"

    with pytest.raises(PermanentMailError) as raised:
        send_supplier_email(order(), to=COSTCO, settings=settings)

    assert is_permanent_failure(raised.value)
    assert "Recipient address rejected" in str(raised.value)
    assert COSTCO not in str(raised.value)
    assert server.received == []


def test_a_4xx_reply_is_transient(relay: tuple[Relay, Settings]) -> None:
    server, settings = relay
    server.data_reply = "451 4.3.0 Please try again later"

    with pytest.raises(SupplierMailError) as raised:
        send_supplier_email(order(), to=COSTCO, settings=settings)

    assert raised.value.code == "smtp_451"
    assert not is_permanent_failure(raised.value)
    assert server.received == []


def test_a_relay_that_is_down_is_transient() -> None:
    settings = Settings(smtp_host="127.0.0.1", smtp_port=find_free_port(),
                        smtp_starttls=False)

    with pytest.raises(SupplierMailError) as raised:
        send_supplier_email(order(), to=COSTCO, settings=settings)

    assert raised.value.code == "connection"
    assert not is_permanent_failure(raised.value)


def _html_rows(html: str) -> list[str]:
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [row for row in body.split("<tr>")[1:]]


def _cells(row: str) -> list[str]:
    return [cell.split(">", 1)[1].split("</td>", 1)[0] for cell in row.split("<td")[1:]]
