"""A QR code's modules: qrcode's symbol, with its mask chosen without qrcode's slow search.

``qrcode.QRCode.make`` picks the symbol's mask (ISO/IEC 18004 defines eight) by placing
the data eight times and scoring each result module by module in Python: ~85 % of its
time for an eSIM activation code (bench/README.md, "The eSIM QR code"). Here qrcode
segments the text and fits the version; the codewords are made as its ``create_data``
makes them, on tables (:func:`_codewords`); the symbol is held as one integer
(:class:`Grid`): the data goes where qrcode's placement puts it (noted once per version,
:class:`Layout`), each mask is an XOR, and each penalty rule a few shifts, ANDs and bit
counts over the whole symbol at once. The score is qrcode's
``qrcode.util.lost_point`` as qrcode computes it (format and version information light
while scoring, nothing counted beyond the symbol's edge), and a tie goes to the lower
mask as there, so :func:`qr_modules` returns the modules ``QRCode.make`` would, one for
one (tests/pipeline/test_esim_qr.py compares them).

qrcode (which imports Pillow) is imported on the first QR code a process makes, not with
this module: most workers never make one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import compress
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from qrcode.main import QRCode
    from qrcode.util import BitBuffer, QRData

#: Masks a symbol may use (ISO/IEC 18004 numbers them 0–7).
MASKS = range(8)

#: A finder-like pattern with four light modules after or before it (penalty rule 3); the
#: two are each other's mirror image, so the direction a line is read in does not matter.
_FINDER_LIKE = ("10111010000", "00001011101")
#: Binary digits to the bytes 0 and 1: ``itertools.compress`` selectors, or bools through
#: ``map(bool, …)``.
_SELECTORS = bytes.maketrans(b"01", b"\x00\x01")


def qr_modules(text: str, error_correction: int) -> list[list[bool]]:
    """The modules of the QR code of ``text`` (True: dark), without the quiet zone: the
    symbol ``QRCode.make(fit=True)`` makes at ``error_correction`` (a
    ``qrcode.constants`` level), the smallest version that holds the text."""
    import qrcode  # here: see the module's docstring

    code = qrcode.QRCode(error_correction=error_correction, border=0)
    code.add_data(text)
    code.best_fit()
    layout = Layout.of_version(code.version)
    codewords = _codewords(code.version, error_correction, code.data_list)
    # each data bit, first codeword's highest first, to its module; the remainder modules
    # after the last codeword stay light (before the mask), as qrcode leaves them
    digits = format(int.from_bytes(bytes(codewords), "big"), f"0{8 * len(codewords)}b")
    unmasked = layout.scored | sum(compress(layout.data, digits.encode().translate(_SELECTORS)))
    symbols = [unmasked ^ flip for flip in layout.flips]
    scores = [layout.grid.penalty(symbol) for symbol in symbols]
    mask = scores.index(min(scores))  # the lowest penalty; on a tie the lower mask
    # the chosen symbol with its format and version information, which it was scored
    # without (light)
    return layout.grid.unpack(symbols[mask] | _information(code.version, error_correction,
                                                           mask))


def _codewords(version: int, error_correction: int, data_list: Sequence[QRData]) -> list[int]:
    """The symbol's codewords, as ``qrcode.util.create_data`` makes them: the data's bits
    (as qrcode writes each segment), terminated and padded, in qrcode's blocks, each
    followed by its Reed-Solomon error correction, interleaved. Here the bits are
    gathered as text and the error correction divided on logarithm tables, where qrcode
    puts each bit and divides polynomial objects (three quarters of its encoding)."""
    from qrcode import base, util

    bits = _Bits()
    for segment in data_list:
        bits.put(segment.mode, 4)
        bits.put(len(segment), util.length_in_bits(segment.mode, version))
        segment.write(cast("BitBuffer", bits))  # it only calls put()
    blocks = base.rs_blocks(version, error_correction)
    capacity = 8 * sum(block.data_count for block in blocks)
    if bits.length > capacity:  # best_fit chose the version: it fits
        raise ValueError(f"{bits.length} bits do not fit in {capacity}")
    bits.put(0, min(capacity - bits.length, 4))  # the terminator
    bits.put(0, -bits.length % 8)  # to a whole codeword
    padding = bytes((util.PAD0, util.PAD1) * capacity)[:(capacity - bits.length) // 8]
    data = bits.to_bytes() + padding
    data_blocks, ec_blocks = [], []
    for block in blocks:
        data_blocks.append(data[:block.data_count])
        data = data[block.data_count:]
        ec_blocks.append(_error_correction(data_blocks[-1],
                                           block.total_count - block.data_count))
    return [*_interleaved(data_blocks), *_interleaved(ec_blocks)]


class _Bits:
    """A bit buffer with qrcode's ``BitBuffer.put``, kept as binary digits."""

    def __init__(self) -> None:
        self.digits: list[str] = []
        self.length = 0

    def put(self, number: int, length: int) -> None:
        """Append ``number``'s ``length`` lowest bits, highest first."""
        if length:
            self.digits.append(format(number, f"0{length}b")[-length:])
            self.length += length

    def to_bytes(self) -> bytes:
        """The bits, eight to a byte (their length a multiple of 8)."""
        return int("".join(self.digits), 2).to_bytes(self.length // 8, "big")


def _error_correction(data: Sequence[int], count: int) -> list[int]:
    """The ``count`` Reed-Solomon error correction codewords of a block: the remainder of
    the data (times x^count) divided by qrcode's generator polynomial, in GF(256) as
    qrcode's tables define it."""
    from qrcode import base

    generator = _generator_logs(count)
    remainder = [0] * count
    for codeword in data:
        factor = codeword ^ remainder[0]
        remainder = [*remainder[1:], 0]
        if factor:
            shift = base.LOG_TABLE[factor]
            remainder = [r ^ base.EXP_TABLE[(g + shift) % 255] if g is not None else r
                         for r, g in zip(remainder, generator, strict=True)]
    return remainder


@cache
def _generator_logs(count: int) -> tuple[int | None, ...]:
    """The logarithms of qrcode's generator polynomial of ``count`` error correction
    codewords, its leading 1 left out (None: a zero coefficient)."""
    from qrcode import LUT, base

    if count in LUT.rsPoly_LUT:
        coefficients = list(LUT.rsPoly_LUT[count])
    else:
        polynomial = base.Polynomial([1], 0)
        for power in range(count):
            polynomial = polynomial * base.Polynomial([1, base.gexp(power)], 0)
        coefficients = list(polynomial)
    return tuple(base.LOG_TABLE[c] if c else None for c in coefficients[1:])


def _interleaved(blocks: Sequence[Sequence[int]]) -> list[int]:
    """The blocks' codewords, the first of each block, then the second of each…"""
    longest = max(len(block) for block in blocks)
    return [block[index] for index in range(longest) for block in blocks
            if index < len(block)]


@dataclass(frozen=True)
class Layout:
    """Where a version's modules are, as qrcode lays them out: the function patterns'
    dark modules (format and version information light, as scored), the data modules in
    the order qrcode fills them, and what each mask flips."""

    grid: Grid
    #: the dark modules before the data, as a symbol
    scored: int
    #: each data module, in qrcode's order, as a symbol of that module alone
    data: tuple[int, ...]
    #: by mask, the data modules it darkens or lightens, as a symbol
    flips: tuple[int, ...]

    @classmethod
    @cache
    def of_version(cls, version: int) -> Layout:
        """The layout of a version (noted from qrcode's own placement, once a process)."""
        from qrcode import util
        from qrcode.main import QRCode

        grid = Grid.of_version(version)
        blank = _without_data(version, 0, test=True, mask=0)
        scored = grid.pack(blank.modules)
        # qrcode's placement walked over rows that note each module it fills
        filled: list[tuple[int, int]] = []
        blank.modules = [_NotedRow(row, modules, filled)
                         for row, modules in enumerate(blank.modules)]
        QRCode.map_data(blank, [], 0)
        data = tuple(grid.bit(row, col) for row, col in filled)
        flips = tuple(sum(grid.bit(row, col) for row, col in filled
                          if util.mask_func(mask)(row, col)) for mask in MASKS)
        return cls(grid=grid, scored=scored, data=data, flips=flips)


class _NotedRow(list[bool | None]):
    """A row of modules that notes, in order, each one set in it."""

    def __init__(self, row: int, modules: list[bool | None],
                 noted: list[tuple[int, int]]) -> None:
        super().__init__(modules)
        self.row, self.noted = row, noted

    def __setitem__(self, col: int, value: bool | None) -> None:  # type: ignore[override]
        self.noted.append((self.row, col))
        super().__setitem__(col, value)


def _without_data(version: int, error_correction: int, *, test: bool,
                  mask: int) -> QRCode[Any]:
    """qrcode's symbol of a version as ``makeImpl(test, mask)`` lays it out, with no data
    placed: the data modules left None."""
    from qrcode.main import QRCode

    class _DataLeftEmpty(QRCode[Any]):
        def map_data(self, data: Sequence[int], mask_pattern: int) -> None:
            """Place no data."""

    blank = _DataLeftEmpty(version=version, error_correction=error_correction)
    blank.data_cache = []  # nothing to encode
    blank.makeImpl(test, mask)
    return blank


@cache
def _information(version: int, error_correction: int, mask: int) -> int:
    """The dark modules of a symbol's format information (its error correction level and
    mask), version information (version 7 and up) and dark module, as a symbol (with the
    function patterns, already there)."""
    blank = _without_data(version, error_correction, test=False, mask=mask)
    return Grid.of_version(version).pack(blank.modules)


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

    def bit(self, row: int, col: int) -> int:
        """The symbol of one dark module."""
        return 1 << (row * self.size + self.size - 1 - col)

    def pack(self, modules: Sequence[Sequence[bool | None]]) -> int:
        """The symbol of a module matrix (True dark; False or None light)."""
        return int("".join("1" if dark else "0" for row in reversed(modules) for dark in row),
                   2)

    def unpack(self, symbol: int) -> list[list[bool]]:
        """The module matrix of a symbol (True dark)."""
        modules = format(symbol, f"0{self.size * self.size}b").encode().translate(_SELECTORS)
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
