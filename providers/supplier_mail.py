"""The email transport of supplier orders: one order, one email (docs/suppliers.md).

:func:`render_order_email` turns a :class:`~providers.suppliers.PurchaseOrderDocument` into
a subject and two alternatives — HTML and plain text — that both carry the order number,
the restaurant and where to deliver, the delivery notes, who placed the order and a table
of every line (name, supplier SKU, product code, quantity, unit, unit size). The subject
is :data:`SUBJECT_FORMAT`.

:func:`send_supplier_email` sends it through the SMTP_* settings — whatever EMAIL_PROVIDER
says, which is for notifications — From EMAIL_FROM, To the supplier's address, Cc its
copies, Reply-To whoever placed the order, and returns the Message-ID as the dispatch's
reference. The Message-ID is derived from the dispatch id, so a retry after a lost reply
repeats it and mail clients show one message.

On the embedded default with SMTP_HOST not set (the README's tour: no mail relay there)
it goes to the mock provider's mail store instead, as notification email does, and the
mock's message id is the reference (:func:`mail_goes_to_mock`; docs/api.md, "Purchasing").

Failures: no supplier address (or a malformed one) is :class:`SupplierConfigError` and
nothing is sent; a 5xx reply or a relay lacking what the SMTP settings require is
:class:`PermanentMailError`; a 4xx reply, a refused or dropped connection and the send
deadline are :class:`SupplierMailError`, which is transient (retried).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from herald.settings import Settings, email_address_problem, get_settings
from providers.base import Attachment, Channel, OutboundMessage
from providers.mock import MockProvider
from providers.smtp import build_mime, send_mime
from providers.suppliers import (
    DocumentLine,
    PermanentDispatchError,
    PermanentMailError,
    PurchaseOrderDocument,
    SupplierConfigError,
    Transmission,
)

#: The subject of every supplier order email (and the title of its PDF).
SUBJECT_FORMAT = "Purchase order {order_number} — {restaurant_name}"
#: The order table's columns, in order, in both alternatives and the PDF.
HEADINGS = ("Item", "Supplier SKU", "Product code", "Quantity", "Unit", "Unit size")
#: The repository's ``templates/`` directory (shipped in the wheel beside ``providers``).
TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "templates"


class SupplierMailError(Exception):
    """The relay could not take the email this time (a 4xx reply, a refused or dropped
    connection, the deadline): another attempt may succeed."""

    permanent = False

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


@cache
def templates() -> jinja2.Environment:
    """The Jinja2 environment of the supplier templates: ``.html`` autoescaped, plain
    text not, an undefined name an error."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )


def order_subject(document: PurchaseOrderDocument) -> str:
    """The subject of ``document``'s email, e.g. ``Purchase order PO-1042 — Lucille Downtown``."""
    return SUBJECT_FORMAT.format(order_number=document.order_number,
                                 restaurant_name=document.restaurant_name)


def format_quantity(quantity: Decimal) -> str:
    """``quantity`` as written on an order: no exponent, no trailing zeros (2, 1.5, 10)."""
    return format(quantity.normalize(), "f")


def order_context(document: PurchaseOrderDocument, supplier_name: str | None,
                  **extra: Any) -> dict[str, Any]:
    """The data every supplier template renders: ``order`` (the header fields, one row
    per line and the plain-text table), ``subject``, ``supplier_name`` and ``extra``."""
    rows = [_row(line) for line in document.lines]
    order = {
        "order_number": document.order_number,
        "restaurant_name": document.restaurant_name,
        "restaurant_location": document.restaurant_location or "",
        "placed_by_email": document.placed_by_email or "",
        "delivery_notes": document.delivery_notes or "",
        "headings": HEADINGS,
        "rows": rows,
        "line_count": len(rows),
        "text_table": _text_table(rows),
    }
    return {"order": order, "subject": order_subject(document),
            "supplier_name": supplier_name or "", "attachment_name": "", **extra}


def render_order_email(document: PurchaseOrderDocument, supplier_name: str | None = None, *,
                       attachment_name: str = "") -> tuple[str, str, str]:
    """``(subject, html, text)`` of ``document``'s email: both parts carry every line
    and the order's header fields; the HTML is escaped. ``attachment_name`` adds a
    sentence pointing at an attached copy of the order."""
    context = order_context(document, supplier_name, attachment_name=attachment_name)
    env = templates()
    html = env.get_template("suppliers/order_email.html").render(context)
    text = env.get_template("suppliers/order_email.txt").render(context)
    return context["subject"], html, text


def send_supplier_email(document: PurchaseOrderDocument, *, to: str | None,
                        cc: Sequence[str] = (), attachments: Sequence[Attachment] = (),
                        supplier_name: str | None = None,
                        settings: Settings | None = None) -> Transmission:
    """Email ``document`` to the supplier at ``to`` (copies to ``cc``) through the SMTP_*
    settings (the mock's mail store when :func:`mail_goes_to_mock`), with
    ``attachments``; exactly one message per call.

    Returns the Message-ID as reference, with ``subject`` and ``recipients`` for the
    audit. Raises :class:`SupplierConfigError` before sending anything when ``to`` is
    empty or an address is malformed, :class:`PermanentMailError` when the relay refuses
    for good and :class:`SupplierMailError` (transient) otherwise.
    """
    settings = settings or get_settings()
    recipients = supplier_recipients(to, cc)
    reply_to = _reply_to(document)
    attachment_name = attachments[0].filename if attachments else ""
    subject, html, text = render_order_email(document, supplier_name,
                                             attachment_name=attachment_name)
    message = OutboundMessage(
        channel=Channel.EMAIL, to=recipients[0], cc=tuple(recipients[1:]),
        sender=settings.email_from, subject=subject, text=text, html=html,
        attachments=tuple(attachments),
        # one Message-ID per dispatch: a retry that duplicates the mail repeats it
        idempotency_key=f"dispatch-{document.dispatch_id}",
    )
    if mail_goes_to_mock(settings):
        result = MockProvider(settings).send(message)
    else:
        mime = build_mime(message, sender=settings.email_from)
        if reply_to:
            mime["Reply-To"] = reply_to
        result = send_mime(mime, recipients, settings)
    if result.accepted:
        return Transmission(reference=str(result.provider_message_id),
                            audit={"subject": subject, "recipients": recipients})
    code, reason = result.failure_code or "smtp", result.failure_message or ""
    if not result.retryable:  # terminal, or refused by this relay (its auth, its policy)
        raise PermanentMailError(f"{code}: {reason}")
    raise SupplierMailError(code, reason)


def mail_goes_to_mock(settings: Settings) -> bool:
    """True when supplier email goes to the mock provider's mail store, not SMTP: herald
    runs on the embedded default (its own Redis) and SMTP_HOST was not set. Anywhere
    else an unset SMTP_HOST still means ``localhost``, so a deploy that forgot it fails
    its dispatches loudly rather than sending real orders nowhere."""
    return settings.embedded_redis and "smtp_host" not in settings.model_fields_set


def supplier_recipients(to: str | None, cc: Sequence[str] = ()) -> list[str]:
    """``[to, *cc]`` stripped, each a bare address, a repeated one dropped; raises
    SupplierConfigError when ``to`` is empty or an address is malformed."""
    to = (to or "").strip()
    if not to:
        raise SupplierConfigError("the supplier has no email address")
    recipients: list[str] = []
    for address in (to, *(c.strip() for c in cc)):
        problem = email_address_problem(address)
        if problem:
            raise SupplierConfigError(f"supplier email address {address!r}: {problem}")
        if address.lower() not in (r.lower() for r in recipients):
            recipients.append(address)
    return recipients


def _reply_to(document: PurchaseOrderDocument) -> str | None:
    address = (document.placed_by_email or "").strip()
    if not address:
        return None
    problem = email_address_problem(address)
    if problem:
        # the order's own data is wrong: no attempt can fix it
        raise PermanentDispatchError(f"placed_by_email {address!r}: {problem}")
    return address


def _row(line: DocumentLine) -> dict[str, str]:
    return {"name": line.name, "supplier_sku": line.supplier_sku,
            "product_code": line.supplier_product_code or "",
            "quantity": format_quantity(line.quantity), "unit": line.unit,
            "unit_size": line.unit_size or ""}


def _text_table(rows: list[dict[str, str]]) -> str:
    """The lines as a fixed-width table for the plain-text part."""
    keys = ("name", "supplier_sku", "product_code", "quantity", "unit", "unit_size")
    cells = [list(HEADINGS)] + [[row[key] for key in keys] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(keys))]
    quantity = keys.index("quantity")

    def line(values: list[str]) -> str:
        padded = [value.rjust(widths[i]) if i == quantity else value.ljust(widths[i])
                  for i, value in enumerate(values)]
        return "  ".join(padded).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(cells[0]), rule, *(line(values) for values in cells[1:])])
