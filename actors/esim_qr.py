"""The eSIM's QR code: its image, and the email attachment that carries it.

A phone installs an eSIM by scanning the QR code of its LPA activation code
(``LPA:1$smdp.example.com$ABC-123``); the ``esim.ready`` email attaches it and shows it
inline.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import qrcode
from qrcode.constants import ERROR_CORRECT_M
from qrcode.image.pil import PilImage

from providers.base import Attachment

#: The eSIM QR code: module size in pixels, quiet zone in modules, error correction.
QR_BOX_SIZE = 10
QR_BORDER = 4
QR_ERROR_CORRECTION = ERROR_CORRECT_M
#: The QR attachment's file name and Content-ID (the HTML shows ``cid:esim-qr``).
QR_FILENAME = "esim-qr.png"
QR_CONTENT_ID = "esim-qr"


def qr_png(text: str) -> bytes:
    """A PNG of the QR code of ``text`` (same text, same bytes)."""
    code = qrcode.QRCode(
        error_correction=QR_ERROR_CORRECTION, box_size=QR_BOX_SIZE, border=QR_BORDER
    )
    code.add_data(text)
    code.make(fit=True)
    buffer = io.BytesIO()
    code.make_image(image_factory=PilImage).save(buffer, format="PNG")
    return buffer.getvalue()


def esim_qr_attachments(data: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """The ``esim.ready`` email's attachment: the QR code of the data's
    ``activation_code``, shown inline by the HTML (``cid:esim-qr``)."""
    return (
        Attachment(
            filename=QR_FILENAME,
            content_type="image/png",
            data=qr_png(str(data["activation_code"]).strip()),
            content_id=QR_CONTENT_ID,
        ),
    )
