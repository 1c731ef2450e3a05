"""The eSIM's QR code: its image, and the email attachment that carries it.

A phone installs an eSIM by scanning the QR code of its LPA activation code
(``LPA:1$smdp.example.com$ABC-123``); the ``esim.ready`` email attaches it and shows it
inline.

The image is written here as a 1-bit grayscale PNG straight from the code's modules
(:func:`actors.qr_code.qr_modules`): the pixels qrcode's Pillow image gave, at a small part
of the CPU (bench/README.md, "The eSIM QR code"). Importing this module imports neither
qrcode nor Pillow.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any

from actors.qr_code import qr_modules
from providers.base import Attachment

#: The eSIM QR code: module size in pixels, quiet zone in modules, error correction
#: (``qrcode.constants.ERROR_CORRECT_M``, 15 % of the code recoverable; its value here, so
#: that importing this module does not import qrcode).
QR_BOX_SIZE = 10
QR_BORDER = 4
QR_ERROR_CORRECTION = 0
#: The QR attachment's file name and Content-ID (the HTML shows ``cid:esim-qr``).
QR_FILENAME = "esim-qr.png"
QR_CONTENT_ID = "esim-qr"

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: A module's pixel bits in a row, by the module's digit (1 dark): black is 0 in a 1-bit
#: grayscale PNG.
_PIXELS = str.maketrans({"1": "0" * QR_BOX_SIZE, "0": "1" * QR_BOX_SIZE})
#: Modules as bytes (``bytes(row)`` of bools: 0 light, 1 dark) to their digits: one
#: translation a row rather than a step a module.
_DIGITS = bytes.maketrans(b"\x00\x01", b"01")
#: zlib's level: a fast one (the image is under a kilobyte at any level; 6, the default,
#: takes five times as long for a third fewer bytes).
_COMPRESSION = 3


def qr_png(text: str) -> bytes:
    """A PNG of the QR code of ``text`` (same text, same bytes): black modules of
    :data:`QR_BOX_SIZE` pixels on white, inside a white quiet zone of :data:`QR_BORDER`
    modules; 1-bit grayscale."""
    modules = qr_modules(text, QR_ERROR_CORRECTION)
    side = (len(modules) + 2 * QR_BORDER) * QR_BOX_SIZE
    row_bytes = (side + 7) // 8
    padding = 8 * row_bytes - side  # a row ends on a byte: its last bits are unused

    def scanline(bits: str) -> bytes:
        # filter type 0 (none), then the row's pixels, eight to a byte
        return b"\x00" + (int(bits, 2) << padding).to_bytes(row_bytes, "big")

    quiet = "0" * QR_BORDER
    white = scanline("1" * side) * (QR_BORDER * QR_BOX_SIZE)
    rows = [scanline((quiet + bytes(row).translate(_DIGITS).decode() + quiet)
                     .translate(_PIXELS)) * QR_BOX_SIZE for row in modules]
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)  # 1 bit, grayscale
    pixels = zlib.compress(b"".join((white, *rows, white)), _COMPRESSION)
    return b"".join((_PNG_SIGNATURE, _chunk(b"IHDR", header), _chunk(b"IDAT", pixels),
                     _chunk(b"IEND", b"")))


def _chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC of type and data."""
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data)))


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
