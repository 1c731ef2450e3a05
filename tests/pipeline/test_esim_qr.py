"""The eSIM QR code image: the same picture qrcode's Pillow image gave, made cheaply.

The PNG is written straight from the modules, and the modules come from
:mod:`actors.qr_code`, which scores the masks itself: these tests hold both to what
qrcode and Pillow made before (``QRCode.make``, its Pillow image saved as PNG), pixel for
pixel and module for module. Pure unit tests, apart from one fresh interpreter that checks
what importing the renderer loads; no service is needed.
"""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys

import pytest
import qrcode
from PIL import Image
from qrcode import constants, util
from qrcode.image.pil import PilImage

from actors.esim_qr import QR_BORDER, QR_BOX_SIZE, QR_ERROR_CORRECTION, qr_png
from actors.qr_code import Grid, _codewords, qr_modules
from tests.support.processes import REPO

#: Activation codes of the shapes the email carries: the mock provider's, a short one, one
#: that is not an LPA string, one in Arabic script (byte mode, UTF-8), and one long enough
#: for a version 7+ symbol (which carries version information).
PAYLOADS = ("LPA:1$smdp.mock-esim.invalid$3F2A9C01D4E5B6A7",
            "LPA:1$smdp.example.com$ABC-123", "OPAQUE-CODE-42", "رمز-التفعيل-٤٢",
            "LPA:1$rsp.truphone.com$" + "QR-G-5C-1LS-1W1Z9P7" * 8)


def pillow_png(text: str) -> bytes:
    """The QR code's PNG as it was made before: qrcode's Pillow image, saved."""
    code = qrcode.QRCode(error_correction=QR_ERROR_CORRECTION, box_size=QR_BOX_SIZE,
                         border=QR_BORDER)
    code.add_data(text)
    code.make(fit=True)
    buffer = io.BytesIO()
    code.make_image(image_factory=PilImage).save(buffer, format="PNG")
    return buffer.getvalue()


def qrcode_modules(text: str, error_correction: int) -> list[list[bool]]:
    code = qrcode.QRCode(error_correction=error_correction, border=0)
    code.add_data(text)
    code.make(fit=True)
    return code.modules


@pytest.mark.parametrize("text", PAYLOADS)
def test_the_png_shows_the_pixels_the_pillow_image_showed(text: str) -> None:
    # Given an activation code
    # When its QR code is drawn now and as it was before
    now = Image.open(io.BytesIO(qr_png(text)))
    before = Image.open(io.BytesIO(pillow_png(text)))
    # Then both are black-and-white PNGs of the same size and the same pixels
    assert (now.format, now.mode) == (before.format, before.mode) == ("PNG", "1")
    assert now.size == before.size
    assert now.tobytes() == before.tobytes()
    # and the size is the symbol's modules and quiet zone at the module size, the quiet
    # zone all white
    modules = len(qrcode_modules(text, QR_ERROR_CORRECTION))
    side = (modules + 2 * QR_BORDER) * QR_BOX_SIZE
    assert now.size == (side, side)
    pixels = now.convert("L")
    quiet = QR_BORDER * QR_BOX_SIZE
    for x in range(side):
        for y in (*range(quiet), *range(side - quiet, side)):
            assert pixels.getpixel((x, y)) == pixels.getpixel((y, x)) == 255


def test_the_version_seven_payload_carries_version_information() -> None:
    # Given the longest payload above, then its symbol is version 7 or more (so the test
    # above covered the version information's modules)
    assert len(qrcode_modules(PAYLOADS[-1], QR_ERROR_CORRECTION)) >= 7 * 4 + 17


def test_the_modules_are_qrcodes_at_every_level_and_size() -> None:
    # Given texts of every kind of character and of many lengths (versions 1 to ~12)
    chance = random.Random(29)
    alphabet = "0123456789ABCDEFXYZ $%*+-./:abcdefé€ر"
    texts = ["".join(chance.choice(alphabet) for _ in range(chance.randint(1, 150)))
             for _ in range(24)]
    # When each is encoded at each error correction level
    levels = (constants.ERROR_CORRECT_L, constants.ERROR_CORRECT_M,
              constants.ERROR_CORRECT_Q, constants.ERROR_CORRECT_H)
    differing = [(text, level) for text in texts for level in levels
                 if qr_modules(text, level) != qrcode_modules(text, level)]
    # Then every symbol is the one qrcode makes, mask included
    assert differing == []


def test_the_codewords_are_qrcodes_at_every_level_up_to_version_40() -> None:
    # Given texts of mixed modes and digits only, up to the largest symbols
    chance = random.Random(4)
    texts = [*("".join(chance.choice("0123456789ABC $:abcé") for _ in range(length))
               for length in (1, 17, 90, 300, 900)),
             *("".join(chance.choice("0123456789") for _ in range(length))
               for length in (7, 250, 1500, 3000))]
    for text in texts:
        for level in (constants.ERROR_CORRECT_L, constants.ERROR_CORRECT_M,
                      constants.ERROR_CORRECT_Q, constants.ERROR_CORRECT_H):
            code = qrcode.QRCode(error_correction=level)
            code.add_data(text)
            try:
                code.best_fit()
            except ValueError:  # more than version 40 holds at this level
                continue
            # Then the data and error correction codewords are qrcode's, in its order
            assert (_codewords(code.version, level, code.data_list)
                    == util.create_data(code.version, level, code.data_list)), (text, level)


def test_the_penalty_is_qrcodes_for_any_symbol() -> None:
    # Given symbols of random modules, light or dark in every proportion
    chance = random.Random(18004)
    for version in (1, 2, 4, 7, 13):
        grid = Grid.of_version(version)
        for _ in range(25):
            share = chance.random()
            modules = [[chance.random() < share for _ in range(grid.size)]
                       for _ in range(grid.size)]
            # Then the penalty is qrcode's lost point, and the symbol reads back whole
            assert grid.penalty(grid.pack(modules)) == util.lost_point(modules)
            assert grid.unpack(grid.pack(modules)) == modules


def test_the_error_correction_is_qrcodes_level_m() -> None:
    # Then the level, kept as a number so that qrcode is not imported with the module,
    # is qrcode's M
    assert QR_ERROR_CORRECTION == constants.ERROR_CORRECT_M


def test_importing_the_renderer_imports_neither_qrcode_nor_pillow() -> None:
    # Given a fresh interpreter
    # When it imports the renderer (as every email worker does at its start)
    probe = ("import json, sys\n"
             "import actors.render, actors.esim_qr\n"
             "print(json.dumps(sorted(m for m in sys.modules"
             " if m.split('.')[0] in ('qrcode', 'PIL'))))\n")
    found = subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True,
                           capture_output=True, text=True,
                           env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    # Then neither qrcode nor Pillow is loaded: they come with the first QR code
    assert json.loads(found.stdout) == []
