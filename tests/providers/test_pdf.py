"""The central-kitchen transport: a real Chromium render, the local storage, and the PDF
attached to an email received by a real SMTP server (aiosmtpd)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pypdf
import pytest

from herald.settings import Settings
from providers.pdf import (
    PdfRenderError,
    render_order_pdf,
    renderer_ready,
    send_central_kitchen_order,
)
from providers.storage import LocalStorage
from providers.suppliers import (
    ChromiumUnavailableError,
    SupplierConfigError,
    is_permanent_failure,
)
from tests.support.providers.smtp_relay import Relay, start_relay
from tests.support.purchasing.documents import SENDER, line, order

KITCHEN = "orders@central-kitchen.test"
MISSING_CHROMIUM = "/nonexistent/chromium"


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[tuple[Relay, Settings]]:
    """A plain relay, and settings pointing at it that store PDFs under ``tmp_path``."""
    server, controller = start_relay()
    yield server, Settings(smtp_host="127.0.0.1", smtp_port=controller.port,
                           smtp_starttls=False, email_from=SENDER,
                           supplier_pdf_dir=str(tmp_path / "pdfs"))
    controller.stop()


def pdf_text(data: bytes) -> str:
    return "\n".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(data)).pages)


def test_a_multi_line_order_renders_to_a_pdf_listing_every_line() -> None:
    document = order(*(line(n) for n in range(1, 31)))

    data = render_order_pdf(document, "Central Kitchen", settings=Settings())

    assert data.startswith(b"%PDF-")
    text = pdf_text(data)
    assert "Purchase order PO-1042" in text
    assert "Lucille Downtown" in text
    assert "Back door before 7 am" in text
    for number in range(1, 31):
        assert f"CO-{7000 + number}" in text


def test_the_order_is_rendered_stored_and_attached_to_one_email(
        relay: tuple[Relay, Settings], tmp_path: Path) -> None:
    server, settings = relay
    document = order(*(line(n) for n in range(1, 9)))

    sent = send_central_kitchen_order(document, to=KITCHEN, cc=["chef@kitchen.test"],
                                      supplier_name="Central Kitchen", settings=settings)

    key = "purchase-orders/order-1/dispatch-1.pdf"
    stored = tmp_path / "pdfs" / key
    data = stored.read_bytes()
    assert data.startswith(b"%PDF-") and "PO-1042" in pdf_text(data)
    assert sent.audit == {"pdfUrl": stored.resolve().as_uri(), "pdfKey": key,
                          "pdfBytes": len(data),
                          "subject": "Purchase order PO-1042 — Lucille Downtown",
                          "recipients": [KITCHEN, "chef@kitchen.test"]}
    [received] = server.received
    message = received.message
    assert received.rcpt_tos == [KITCHEN, "chef@kitchen.test"]
    assert sent.reference == message["Message-ID"]
    [attachment] = list(message.iter_attachments())
    assert attachment.get_content_type() == "application/pdf"
    assert attachment.get_filename() == "purchase-order-PO-1042.pdf"
    assert attachment.get_content() == data
    # the email itself still carries the order
    for part in (message.get_body(("plain",)), message.get_body(("html",))):
        content = part.get_content()
        assert "purchase-order-PO-1042.pdf" in content
        assert all(f"CO-{7000 + n}" in content for n in range(1, 9))


def test_a_public_base_url_names_the_stored_pdf(relay: tuple[Relay, Settings]) -> None:
    _, settings = relay
    published = settings.model_copy(
        update={"supplier_pdf_base_url": "https://files.lucille.test/po/"})

    sent = send_central_kitchen_order(order(), to=KITCHEN, settings=published)

    assert sent.audit["pdfUrl"] == (
        "https://files.lucille.test/po/purchase-orders/order-1/dispatch-1.pdf")


def test_a_missing_renderer_is_permanent_and_nothing_is_stored_or_sent(
        relay: tuple[Relay, Settings], tmp_path: Path) -> None:
    server, settings = relay
    broken = settings.model_copy(update={"chromium_path": MISSING_CHROMIUM})

    with pytest.raises(ChromiumUnavailableError, match="CHROMIUM_PATH") as raised:
        send_central_kitchen_order(order(), to=KITCHEN, settings=broken)

    assert is_permanent_failure(raised.value)
    assert not (tmp_path / "pdfs").exists()
    assert server.received == []
    assert "CHROMIUM_PATH" in str(renderer_ready(broken))


def test_a_renderer_that_writes_no_pdf_is_transient(tmp_path: Path) -> None:
    # a real program that starts and exits 1, as a crashing browser does
    settings = Settings(chromium_path="false")

    with pytest.raises(PdfRenderError, match="exited 1") as raised:
        render_order_pdf(order(), settings=settings)

    assert not is_permanent_failure(raised.value)


def test_the_installed_renderer_is_ready() -> None:
    assert renderer_ready(Settings()) is True


def test_a_supplier_without_an_address_fails_before_anything_is_rendered(
        relay: tuple[Relay, Settings], tmp_path: Path) -> None:
    server, settings = relay
    # with no renderer either, the missing address is what is reported: it comes first
    broken = settings.model_copy(update={"chromium_path": MISSING_CHROMIUM})

    with pytest.raises(SupplierConfigError):
        send_central_kitchen_order(order(), to="", settings=broken)

    assert not (tmp_path / "pdfs").exists()
    assert server.received == []


def test_storing_again_replaces_the_document_and_leaves_no_temporary_file(
        tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)

    storage.store("purchase-orders/o-1/d-1.pdf", b"%PDF-first", "application/pdf")
    url = storage.store("purchase-orders/o-1/d-1.pdf", b"%PDF-second", "application/pdf")

    assert url == (tmp_path / "purchase-orders/o-1/d-1.pdf").resolve().as_uri()
    assert [p.name for p in (tmp_path / "purchase-orders/o-1").iterdir()] == ["d-1.pdf"]
    assert (tmp_path / "purchase-orders/o-1/d-1.pdf").read_bytes() == b"%PDF-second"


@pytest.mark.parametrize("key", ["", "../escape.pdf", "{tmp}/absolute.pdf", "a/../../b.pdf",
                                 "a//b.pdf", "a/./b.pdf", "a b.pdf", ".hidden/x.pdf"])
def test_a_key_that_could_leave_the_directory_is_refused(tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    # an absolute key points inside tmp_path: a broken check must not write anywhere else
    key = key.format(tmp=tmp_path)

    with pytest.raises(ValueError, match="storage key"):
        LocalStorage(root).store(key, b"%PDF-x", "application/pdf")

    assert list(tmp_path.iterdir()) == []


def test_a_symlink_inside_the_directory_cannot_lead_a_document_outside(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "purchase-orders").symlink_to(outside, target_is_directory=True)

    with pytest.raises(ValueError, match="leads outside"):
        LocalStorage(root).store("purchase-orders/o-1.pdf", b"%PDF-x", "application/pdf")

    assert list(outside.iterdir()) == []
