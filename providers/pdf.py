"""The PDF transport of supplier orders: render, store, attach, send (docs/suppliers.md).

The order is rendered from the same template block as the supplier email
(``templates/suppliers/order_pdf.html``) and printed to PDF by headless Chromium, the
Debian ``chromium`` package run as a separate process (CHROMIUM_PATH): no Python
dependency, and its memory is the render's only, returned when it exits (the
measurements behind the choice: bench/README.md#supplier-order-pdfs-benchpdf). Each
render gets its own temporary profile, so concurrent renders never share a profile lock,
and its whole process group is killed at :data:`RENDER_TIMEOUT_S`.

The page is printed as if its markup were hostile, though the templates escape every
value, behind layers that each suffice alone: the page is handed to Chromium over its
DevTools pipe (:mod:`providers.chromium_pipe`), never as a file, into a tab with script
execution off and every request failed before it leaves the browser, an opaque origin
that may load no ``file://`` URL; a Content Security Policy set before any of its
markup allows no script and fetches nothing (styles inline, images and fonts as
``data:`` URLs only); the markup cannot set a policy or a refresh of its own; and
Chromium resolves no host name or address (``--host-resolver-rules``).

Failures: no renderer (CHROMIUM_PATH names nothing executable) is
:class:`~providers.suppliers.ChromiumUnavailableError`, permanent; a render that crashes,
times out or writes no PDF is :class:`PdfRenderError`, transient.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from herald.settings import Settings, get_settings
from providers.base import Attachment
from providers.chromium_pipe import PipeError, TimedOut, print_html
from providers.storage import Storage, storage_from_settings
from providers.supplier_mail import (
    order_context,
    send_supplier_email,
    supplier_recipients,
    templates,
)
from providers.suppliers import ChromiumUnavailableError, PurchaseOrderDocument, Transmission

log = logging.getLogger(__name__)

#: Seconds one render may take before its processes are killed (well under the
#: supplier-dispatch queue's 120-second lock, leaving room for the send).
RENDER_TIMEOUT_S = 60.0
#: Seconds a successful readiness render is trusted before the next check renders again.
READY_TTL_S = 300.0
#: What every PDF starts with.
PDF_MAGIC = b"%PDF-"
#: Flags of a headless print: no sandbox (containers have no user namespaces), no GPU, no
#: /dev/shm (small in containers), nothing fetched from the network (no host name or
#: address resolves: the page's own requests fail too). (``--no-pdf-header-footer``, a
#: flag of the command-line print, crashes a print over the DevTools pipe.)
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--no-default-browser-check", "--disable-extensions",
    "--disable-background-networking", "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
#: The printed page's Content Security Policy: ``default-src 'none'`` blocks every script
#: (inline, handlers, ``javascript:`` URLs), frame, object, font and fetch, ``file://``
#: ones included; styles may only be inline, images and fonts only ``data:`` URLs.
PAGE_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
               "font-src data:; base-uri 'none'; form-action 'none'")
_POLICY_META = f'<meta http-equiv="Content-Security-Policy" content="{PAGE_POLICY}">'
#: An ``http-equiv`` attribute anywhere in the markup (names are case-insensitive and take
#: no character references, so this spelling is the only one).
_HTTP_EQUIV = re.compile(r"http-equiv", re.IGNORECASE)
#: A leading doctype, which must stay first (else the page is laid out in quirks mode).
_DOCTYPE = re.compile(r"\s*<!doctype[^>]*>", re.IGNORECASE)

_ready_lock = threading.Lock()
_ready_until: dict[str, float] = {}


class PdfRenderError(Exception):
    """The renderer started but produced no PDF this time (crash, timeout): transient."""

    permanent = False


def render_order_html(document: PurchaseOrderDocument, supplier_name: str | None = None) -> str:
    """The HTML page of ``document`` the PDF is printed from (escaped, A4, every line)."""
    return templates().get_template("suppliers/order_pdf.html").render(
        order_context(document, supplier_name))


def render_order_pdf(document: PurchaseOrderDocument, supplier_name: str | None = None, *,
                     settings: Settings | None = None) -> bytes:
    """``document`` as a PDF (bytes starting ``%PDF-``) listing every line; raises
    ChromiumUnavailableError without a renderer, PdfRenderError when a render fails."""
    return html_to_pdf(render_order_html(document, supplier_name), settings=settings)


def isolated_page(html: str) -> str:
    """``html`` with :data:`PAGE_POLICY` set before any of its markup, and its own
    ``http-equiv`` attributes made inert (no policy of its own, no refresh elsewhere)."""
    inert = _HTTP_EQUIV.sub("data-inert", html)
    doctype = _DOCTYPE.match(inert)
    start = doctype.end() if doctype else 0
    return f"{inert[:start]}{_POLICY_META}{inert[start:]}"


def html_to_pdf(html: str, *, settings: Settings | None = None,
                timeout_s: float = RENDER_TIMEOUT_S) -> bytes:
    """Print ``html`` (a self-contained page) to PDF with headless Chromium; no script in
    it runs and nothing it references is fetched (:func:`isolated_page`,
    :func:`~providers.chromium_pipe.print_html`)."""
    binary = chromium_binary(settings)
    with tempfile.TemporaryDirectory(prefix="herald-pdf-") as workdir:
        try:
            data = print_html(binary, CHROMIUM_FLAGS, isolated_page(html), Path(workdir),
                              timeout_s)
        except OSError as error:  # not found, not executable, not a binary
            raise ChromiumUnavailableError(
                f"chromium cannot start: {error.strerror or error}") from error
        except TimedOut:
            raise PdfRenderError(f"chromium did not finish within {timeout_s:g} s") from None
        except PipeError as error:
            raise PdfRenderError(f"chromium printed no PDF: {error}") from None
    if not data.startswith(PDF_MAGIC):
        raise PdfRenderError("chromium printed something that is not a PDF")
    return data


def chromium_binary(settings: Settings | None = None) -> str:
    """The executable CHROMIUM_PATH names (a path, or a name looked up on PATH); raises
    ChromiumUnavailableError when there is none."""
    configured = (settings or get_settings()).chromium_path.strip()
    if not configured:
        raise ChromiumUnavailableError("CHROMIUM_PATH is empty")
    found = shutil.which(configured)
    if found is None:
        raise ChromiumUnavailableError(
            f"no executable chromium at CHROMIUM_PATH={configured!r} "
            "(install Debian's chromium package or point CHROMIUM_PATH at the binary)")
    return found


def renderer_ready(settings: Settings | None = None) -> bool | str:
    """True when the renderer starts and prints a page; otherwise why not, as a short
    sentence. A success is remembered for :data:`READY_TTL_S`, so a readiness probe
    renders at most once per that period (call it once at worker start to warm it)."""
    binary_setting = (settings or get_settings()).chromium_path
    with _ready_lock:
        if _ready_until.get(binary_setting, 0.0) > time.monotonic():
            return True
    try:
        html_to_pdf("<!DOCTYPE html><title>ready</title><p>ready</p>", settings=settings,
                    timeout_s=min(RENDER_TIMEOUT_S, 20.0))
    except (ChromiumUnavailableError, PdfRenderError) as error:
        return str(error)
    with _ready_lock:
        _ready_until[binary_setting] = time.monotonic() + READY_TTL_S
    return True


def pdf_key(document: PurchaseOrderDocument) -> str:
    """Where a dispatch's PDF is stored: ``purchase-orders/<order id>/<dispatch id>.pdf``."""
    return f"purchase-orders/{document.order_id}/{document.dispatch_id}.pdf"


def pdf_filename(document: PurchaseOrderDocument) -> str:
    """The attachment's file name: ``purchase-order-<order number>.pdf`` (safe characters)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in document.order_number)
    return f"purchase-order-{safe}.pdf"


def send_central_kitchen_order(document: PurchaseOrderDocument, *, to: str | None,
                               cc: Sequence[str] = (), supplier_name: str | None = None,
                               settings: Settings | None = None,
                               storage: Storage | None = None) -> Transmission:
    """Render ``document`` to PDF, store it under :func:`pdf_key`, and email the order
    with the PDF attached (as :func:`~providers.supplier_mail.send_supplier_email`).

    The address is checked before anything is rendered. Returns the Message-ID as
    reference, with ``pdfUrl``, ``pdfKey``, ``pdfBytes``, ``subject`` (and
    ``recipients``) for the audit. A retry renders and stores again under the same key.
    """
    settings = settings or get_settings()
    supplier_recipients(to, cc)  # a supplier without an address: nothing rendered or stored
    data = render_order_pdf(document, supplier_name, settings=settings)
    key = pdf_key(document)
    url = (storage or storage_from_settings(settings)).store(key, data, "application/pdf")
    attachment = Attachment(filename=pdf_filename(document), content_type="application/pdf",
                            data=data)
    sent = send_supplier_email(document, to=to, cc=cc, attachments=(attachment,),
                               supplier_name=supplier_name, settings=settings)
    return Transmission(reference=sent.reference,
                        audit={"pdfUrl": url, "pdfKey": key, "pdfBytes": len(data), **sent.audit})
