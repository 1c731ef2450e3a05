"""A QR code's modules: qrcode's symbol, with its mask chosen without qrcode's slow search.

``qrcode.QRCode.make`` picks the symbol's mask (ISO/IEC 18004 defines eight) by placing
the data eight times and scoring each result module by module in Python: four fifths of
its time for an eSIM activation code (bench/README.md, "The eSIM QR code"). Here the data
is placed once, by qrcode, and the symbol is held as one integer (:class:`Grid`): each
mask is an XOR, and each penalty rule a few shifts, ANDs and bit counts over the whole
symbol at once. The score is qrcode's ``qrcode.util.lost_point`` as qrcode computes it
(format and version information light while scoring, nothing counted beyond the symbol's
edge), and a tie goes to the lower mask as there, so :func:`qr_modules` returns the
modules ``QRCode.make`` would, one for one (tests/pipeline/test_esim_qr.py compares
them).

qrcode (which imports Pillow) is imported on the first QR code a process makes, not with
this module: most workers never make one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import cast

#: Masks a symbol may use (ISO/IEC 18004 numbers them 0–7).
MASKS = range(8)

#: A finder-like pattern with four light modules after or before it (penalty rule 3); the
#: two are each other's mirror image, so the direction a line is read in does not matter.
_FINDER_LIKE = ("10111010000", "00001011101")
#: Modules as bytes (``bytes(row)`` of bools: 0 light, 1 dark) to binary digits, one
#: translation a row rather than one step a module; and back.
DIGITS = bytes.maketrans(b"\x00\x01", b"01")
_BYTES = bytes.maketrans(b"01", b"\x00\x01")


def qr_modules(text: str, error_correction: int) -> list[list[bool]]:
    """The modules of the QR code of ``text`` (True: dark), without the quiet zone: the
    symbol ``QRCode.make(fit=True)`` makes at ``error_correction`` (a
    ``qrcode.constants`` level), the smallest version that holds the text."""
    import qrcode  # here: see the module's docstring

    code = qrcode.QRCode(error_correction=error_correction, border=0)
    code.add_data(text)
    code.best_fit()
    grid = Grid.of_version(code.version)
    flips = _mask_flips(code.version)
    # the data placed once, under mask 0, as qrcode scores a symbol (test=True: format and
    # version information light), then taken back to unmasked
    code.makeImpl(True, 0)
    unmasked = grid.pack(cast("list[list[bool]]", code.modules)) ^ flips[0]  # all set
    symbols = [unmasked ^ flip for flip in flips]
    scores = [grid.penalty(symbol) for symbol in symbols]
    mask = scores.index(min(scores))  # the lowest penalty; on a tie the lower mask
    # the chosen symbol, with the format and version information makeImpl(False, mask)
    # writes over the light modules it was scored with
    modules = grid.unpack(symbols[mask])
    code.modules = cast("list[list[bool | None]]", modules)  # written in place below
    code.setup_type_info(False, mask)
    if code.version >= 7:
        code.setup_type_number(False)
    return modules


@dataclass(frozen=True)
class Grid:
    """A ``size`` × ``size`` symbol held as one integer: row ``r``, column ``c`` is bit
    ``r * size + size - 1 - c`` (1 dark), so a row's bits read left to right; shifting by
    1 moves along a row, by ``size`` down a column. Each mask below marks where a window
    may start so that it stays within its row or column."""

    size: int
    #: every module
    every: int
    #: a run of five along a row / down a column (rule 1)
    run_along: int
    run_down: int
    #: a 2×2 block (rule 2)
    block: int
    #: a finder-like pattern along a row / down a column (rule 3)
    finder_along: int
    finder_down: int

    @classmethod
    @cache
    def of_version(cls, version: int) -> Grid:
        """The grid of a version's symbol (4 × version + 17 modules a side)."""
        size = version * 4 + 17

        def starts(rows: int, columns: int) -> int:
            # windows starting in the first ``rows`` rows, ``columns`` columns from the right
            row = (1 << columns) - 1
            return sum(row << (r * size) for r in range(rows))

        return cls(size=size, every=starts(size, size),
                   run_along=starts(size, size - 4), run_down=starts(size - 4, size),
                   block=starts(size - 1, size - 1),
                   finder_along=starts(size, size - 10), finder_down=starts(size - 10, size))

    def pack(self, modules: Sequence[Sequence[bool]]) -> int:
        """The symbol of a module matrix (True dark)."""
        return int(b"".join(map(bytes, reversed(modules))).translate(DIGITS), 2)

    def unpack(self, symbol: int) -> list[list[bool]]:
        """The module matrix of a symbol (True dark)."""
        modules = format(symbol, f"0{self.size * self.size}b").encode().translate(_BYTES)
        rows = [list(map(bool, modules[start:start + self.size]))
                for start in range(0, len(modules), self.size)]
        return rows[::-1]

    def penalty(self, symbol: int) -> int:
        """qrcode's ``lost_point`` of the symbol."""
        size = self.size
        along = ~(symbol ^ (symbol >> 1))  # a module like the next one in its row
        down = ~(symbol ^ (symbol >> size))  # a module like the one below it
        # rule 1: each run of five or more alike, along a row or down a column, costs its
        # length - 2: a run of L sets L - 4 neighbouring start bits, its first one counts 2
        level1 = 0
        for alike, step, where in ((along, 1, self.run_along), (down, size, self.run_down)):
            runs = alike & (alike >> step) & (alike >> 2 * step) & (alike >> 3 * step) & where
            level1 += runs.bit_count() + 2 * (runs & ~(runs << step)).bit_count()
        # rule 2: each 2×2 block of one colour costs 3
        level2 = (down & (down >> 1) & along & self.block).bit_count()
        # rule 3: each finder-like pattern, along a row or down a column, costs 40
        level3 = sum(self._matches(symbol, pattern, step, where)
                     for pattern in _FINDER_LIKE
                     for step, where in ((1, self.finder_along), (size, self.finder_down)))
        # rule 4: the dark share's distance from half, in steps of 5 %, computed with
        # qrcode's float operations (another rounding could pick another mask)
        dark = (symbol & self.every).bit_count()
        level4 = int(abs(float(dark) / size**2 * 100 - 50) / 5)
        return level1 + 3 * level2 + 40 * level3 + 10 * level4

    @staticmethod
    def _matches(symbol: int, pattern: str, step: int, where: int) -> int:
        """How many windows of ``len(pattern)`` modules, ``step`` apart, show ``pattern``."""
        hits = where
        for offset, bit in enumerate(pattern):
            shifted = symbol >> (offset * step)
            hits &= shifted if bit == "1" else ~shifted
        return hits.bit_count()


@cache
def _mask_flips(version: int) -> tuple[int, ...]:
    """For each mask, the data modules it darkens or lightens (as a symbol): the modules
    qrcode's ``map_data`` fills, where the mask's condition holds."""
    from qrcode import util
    from qrcode.main import QRCode

    class _DataLeftEmpty(QRCode):  # type: ignore[type-arg]
        def map_data(self, data: Sequence[int], mask_pattern: int) -> None:
            """Place no data: the modules left None are the data's."""

    blank = _DataLeftEmpty(version=version)
    blank.data_cache = []  # nothing to encode: no data is placed
    blank.makeImpl(True, 0)
    grid = Grid.of_version(version)
    data_modules = [(row, col) for row, modules in enumerate(blank.modules)
                    for col, module in enumerate(modules) if module is None]
    flips = []
    for mask in MASKS:
        applies = util.mask_func(mask)
        flips.append(sum(1 << (row * grid.size + grid.size - 1 - col)
                         for row, col in data_modules if applies(row, col)))
    return tuple(flips)
