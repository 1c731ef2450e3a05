"""X12 EDI for the Sysco transport: the 850 purchase order we send, the 855 purchase order
acknowledgment and the 997 functional acknowledgment we read back (docs/suppliers.md#x12).

Pure text in, text out: nothing here opens a connection except
:class:`RedisControlNumbers`, which is handed a Redis client by its caller.

- :func:`write_850` turns a :class:`~providers.suppliers.PurchaseOrderDocument` into one
  interchange (ISA/GS/ST 850 … SE/GE/IEA, version 004010) and names its file;
  :func:`problem_850` says beforehand, by the same checks, why it would refuse a document
  (placement asks it, so an order Sysco cannot be sent is refused when it is placed), and
  :func:`item_problem` why it would refuse every line of an item (asked when a catalog
  item is mapped to a Sysco supplier, alternates included).
- :func:`parse_envelope` splits any interchange into groups, transaction sets and segments,
  reading the separators from its ISA header and checking every trailer count.
- :func:`parse_855` and :func:`parse_997` read the two acknowledgments on top of it.

The writer raises :class:`X12ValidationError` (a permanent dispatch failure) for a
document it cannot express; the parsers raise :class:`X12ParseError` for input that is not
the X12 they expect.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Literal, Protocol

from providers.suppliers import DocumentLine, PermanentDispatchError, PurchaseOrderDocument

if TYPE_CHECKING:
    import redis

#: The separators the writer uses; the parsers read them from each file's ISA header.
ELEMENT_SEPARATOR = "*"
SUB_ELEMENT_SEPARATOR = ">"
SEGMENT_TERMINATOR = "~"

#: ISA12 and GS08: the X12 release the writer speaks.
ISA_VERSION = "00401"
GS_VERSION = "004010"

#: Control numbers are nine digits; the allocator wraps from here back to 1.
MAX_CONTROL_NUMBER = 999_999_999

#: The transaction set control number (ST02/SE02): one set per interchange, so one value.
TRANSACTION_CONTROL_NUMBER = "0001"

Usage = Literal["P", "T"]

# Our unit names (lower-cased, trimmed) → X12 unit-of-measure codes (element 355).
# The X12 codes themselves are accepted too, so a catalog may store "CA" directly.
_UNIT_ALIASES: dict[str, tuple[str, ...]] = {
    "CA": ("case", "cases", "cs"),
    "EA": ("each", "ea", "unit", "units"),
    "LB": ("pound", "pounds", "lb", "lbs"),
    "BX": ("box", "boxes"),
    "KG": ("kilogram", "kilograms", "kg", "kgs"),
    "DZ": ("dozen", "dozens", "dz"),
    "GA": ("gallon", "gallons", "gal"),
    "OZ": ("ounce", "ounces", "oz"),
    "GR": ("gram", "grams", "g"),
    "LT": ("liter", "liters", "litre", "litres", "l"),
    "QT": ("quart", "quarts", "qt"),
    "PT": ("pint", "pints", "pt"),
    "BG": ("bag", "bags"),
    "BO": ("bottle", "bottles"),
    "CN": ("can", "cans"),
    "CT": ("carton", "cartons"),
    "PK": ("pack", "packs", "package", "packages"),
    "PC": ("piece", "pieces", "pc"),
    "BH": ("bunch", "bunches"),
    "JR": ("jar", "jars"),
    "TY": ("tray", "trays"),
    "BE": ("bundle", "bundles"),
}
UNIT_CODES: Mapping[str, str] = {
    alias: code
    for code, aliases in _UNIT_ALIASES.items()
    for alias in (code.lower(), *aliases)
}

#: ACK01 line status codes an 855 may carry, and what each means.
ACK_CODES: Mapping[str, str] = {
    "IA": "item accepted",
    "IB": "item back-ordered",
    "IR": "item rejected",
    "IC": "item accepted, changes made",
    "IP": "item accepted, price changed",
    "IQ": "item accepted, quantity changed",
    "DR": "item accepted, date rescheduled",
    "BP": "item accepted, partial shipment, balance back-ordered",
    "SP": "item accepted, schedule date pending",
}
#: Codes that say nothing of the line ships: a line acknowledged only with these is
#: handed to its alternate supplier.
NOT_SHIPPING_CODES = frozenset({"IB", "IR"})
#: Codes that say some or all of the line waits for stock.
BACKORDER_CODES = frozenset({"IB", "BP"})

_AK5_CODES = frozenset({"A", "E", "M", "R", "W", "X"})
_AK9_CODES = frozenset({"A", "E", "M", "P", "R", "W", "X"})
_ACCEPTED_997 = frozenset({"A", "E"})

_SEPARATORS = frozenset(ELEMENT_SEPARATOR + SUB_ELEMENT_SEPARATOR + SEGMENT_TERMINATOR)
_SEGMENT_ID = re.compile(r"[A-Z][A-Z0-9]{1,2}")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_WHITESPACE = re.compile(r"\s+")
#: The date :func:`problem_850` writes with: no check depends on it.
_ANY_TIME = datetime(2000, 1, 1)


class X12ValidationError(PermanentDispatchError):
    """A purchase order the 850 cannot express (an unknown unit, an identifier holding a
    separator or too long for its element, no lines); retrying cannot help."""


class X12ParseError(ValueError):
    """Input that is not the X12 document it was read as."""

    permanent = True


# --------------------------------------------------------------------------- 850 writer


@dataclasses.dataclass(frozen=True, kw_only=True)
class Edi850:
    """One written 850 interchange: its text, its file name and its counts."""

    text: str
    #: ``PO_<restaurant slug>_<order number slug>_<ISA13>.edi``; the dispatch's reference.
    file_name: str
    #: SE01: the segments from ST through SE inclusive.
    segment_count: int
    #: The number of PO1 segments (CTT01).
    line_count: int
    #: ISA13 / IEA02 (zero-padded to nine digits in the file).
    interchange_control_number: int
    #: GS06 / GE02 (the same value as ISA13, unpadded); a 997's AK102 echoes it.
    group_control_number: int
    #: ST02 / SE02.
    transaction_control_number: str
    #: The document's line item ids in PO1 order: PO101 ``n`` is ``line_item_ids[n - 1]``.
    line_item_ids: tuple[str, ...]

    @property
    def control_numbers(self) -> dict[str, str]:
        """The three control numbers as they are written in the file."""
        return {
            "interchange": f"{self.interchange_control_number:09d}",
            "group": str(self.group_control_number),
            "transaction": self.transaction_control_number,
        }

    def audit(self) -> dict[str, object]:
        """The keys the 850 adds to the submission's audit event."""
        return {
            "segmentCount": self.segment_count,
            "lineCount": self.line_count,
            "controlNumbers": self.control_numbers,
        }


def write_850(document: PurchaseOrderDocument, *, sender_id: str, receiver_id: str,
              control_number: int, usage: Usage, now: datetime,
              sender_qualifier: str = "ZZ", receiver_qualifier: str = "ZZ",
              newline: bool = True) -> Edi850:
    """Write ``document`` as one X12 004010 850 interchange.

    ``control_number`` (1…999,999,999, from a :class:`ControlNumberAllocator`) becomes
    ISA13/IEA02 and GS06/GE02; ``usage`` is ISA15 (``P`` production, ``T`` test); ``now``
    dates the envelope and BEG05 in its own wall-clock time. Segments end with ``~``,
    followed by a newline unless ``newline`` is false. Free text (names, notes, the
    location) is made safe: separators and control characters become spaces, accents are
    dropped, and it is cut at its element's maximum length. Identifiers (ids, the order
    number, SKUs, the email) are never altered: one that cannot be written exactly raises
    :class:`X12ValidationError`, as does a unit with no X12 code or a document without
    lines. Nothing is written before every check passed.
    """
    if usage not in ("P", "T"):
        raise X12ValidationError(f"usage indicator must be 'P' or 'T', not {usage!r}")
    _check_control_number(control_number)
    sender = _identifier(sender_id, "sender id", 15)
    receiver = _identifier(receiver_id, "receiver id", 15)
    body = _transaction_body(document, now)
    segment_count = 1 + len(body) + 1
    segments = [
        _isa(_identifier(sender_qualifier, "sender qualifier", 2), sender,
             _identifier(receiver_qualifier, "receiver qualifier", 2), receiver,
             control_number, usage, now),
        _gs(sender, receiver, control_number, now),
        ["ST", "850", TRANSACTION_CONTROL_NUMBER], *body,
        ["SE", str(segment_count), TRANSACTION_CONTROL_NUMBER],
        ["GE", "1", str(control_number)],
        ["IEA", "1", f"{control_number:09d}"],
    ]
    terminator = SEGMENT_TERMINATOR + ("\n" if newline else "")
    text = "".join(ELEMENT_SEPARATOR.join(segment) + terminator for segment in segments)
    return Edi850(
        text=text,
        file_name=file_name_850(document, control_number),
        segment_count=segment_count,
        line_count=len(document.lines),
        interchange_control_number=control_number,
        group_control_number=control_number,
        transaction_control_number=TRANSACTION_CONTROL_NUMBER,
        line_item_ids=tuple(line.line_item_id for line in document.lines),
    )


def problem_850(document: PurchaseOrderDocument) -> str | None:
    """Why :func:`write_850` would refuse ``document`` (the message of its
    :class:`X12ValidationError`: an identifier it cannot write exactly, a unit with no X12
    code, a quantity, no lines…), or None when the document can be written. It runs the
    writer's own checks of the document, so the two never disagree; the envelope's
    arguments (ids, control number, usage) are the writer's caller's to get right."""
    try:
        _transaction_body(document, _ANY_TIME)
    except X12ValidationError as error:
        return str(error)
    return None


def item_problem(*, supplier_sku: str, supplier_product_code: str | None, unit: str
                 ) -> str | None:
    """Why no 850 could carry an item known to its supplier by ``supplier_sku`` (and
    ``supplier_product_code``) in ``unit`` — the checks :func:`write_850` runs on each
    line's PO1 — or None when every order of it can be written."""
    line = DocumentLine(line_item_id="", catalog_item_id="", name="", quantity=Decimal(1),
                        supplier_sku=supplier_sku, unit=unit,
                        supplier_product_code=supplier_product_code)
    try:
        _po1_loop(1, line, field="item")
    except X12ValidationError as error:
        return str(error)
    return None


def file_name_850(document: PurchaseOrderDocument, control_number: int) -> str:
    """The 850's file name: ``PO_<restaurant slug>_<order number slug>_<ISA13>.edi``,
    where a slug keeps lower-case ASCII letters, digits and single dashes. The same
    document and control number always give the same name."""
    restaurant = _slug(document.restaurant_name)[:40].strip("-") or "restaurant"
    order = _slug(document.order_number) or "order"
    return f"PO_{restaurant}_{order}_{control_number:09d}.edi"


def x12_unit(unit: str) -> str:
    """The X12 unit-of-measure code for one of our unit names (``case`` → ``CA``; see
    :data:`UNIT_CODES`); an unknown unit raises :class:`X12ValidationError`."""
    code = UNIT_CODES.get(unit.strip().lower().rstrip("."))
    if code is None:
        raise X12ValidationError(
            f"unit {unit!r} has no X12 unit-of-measure code; known units: "
            + ", ".join(sorted(UNIT_CODES)))
    return code


def _isa(sender_qualifier: str, sender_id: str, receiver_qualifier: str, receiver_id: str,
         control_number: int, usage: Usage, now: datetime) -> list[str]:
    """The ISA header: every element padded to its fixed width (106 characters with the
    terminator)."""
    return [
        "ISA", "00", " " * 10, "00", " " * 10,
        sender_qualifier.ljust(2), sender_id.ljust(15),
        receiver_qualifier.ljust(2), receiver_id.ljust(15),
        now.strftime("%y%m%d"), now.strftime("%H%M"), "U", ISA_VERSION,
        f"{control_number:09d}", "0", usage, SUB_ELEMENT_SEPARATOR,
    ]


def _gs(sender_id: str, receiver_id: str, control_number: int, now: datetime) -> list[str]:
    """The functional group header of a purchase order (PO) group."""
    return ["GS", "PO", sender_id, receiver_id, now.strftime("%Y%m%d"), now.strftime("%H%M"),
            str(control_number), "X", GS_VERSION]


def _transaction_body(document: PurchaseOrderDocument, now: datetime) -> list[list[str]]:
    """The 850's segments between ST and SE: BEG, contact, notes, ship-to, lines, CTT."""
    if not document.lines:
        raise X12ValidationError("a purchase order needs at least one line")
    order_number = _identifier(document.order_number, "order number", 22)
    body = [["BEG", "00", "SA", order_number, "", now.strftime("%Y%m%d")]]
    if document.placed_by_email:
        body.append(["PER", "BD", "", "EM",
                     _identifier(document.placed_by_email, "placed-by email", 80)])
    body.extend(_notes(document.delivery_notes))
    body.extend(_ship_to(document))
    for number, line in enumerate(document.lines, start=1):
        body.extend(_po1_loop(number, line))
    body.append(["CTT", str(len(document.lines))])
    return body


def _notes(notes: str | None) -> list[list[str]]:
    """Delivery notes as an N9 loop: one MSG per line of text, each at most 264 chars."""
    lines = [_text(part, 264) for part in (notes or "").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return []
    return [["N9", "L1", "DELIVERY NOTES"], *(["MSG", line] for line in lines)]


def _ship_to(document: PurchaseOrderDocument) -> list[list[str]]:
    """The ship-to N1 loop: the restaurant's name and id, and its location as N3."""
    name = _text(document.restaurant_name, 60)
    if not name:
        raise X12ValidationError(
            f"restaurant name {document.restaurant_name!r} has no printable text")
    loop = [["N1", "ST", name, "92", _identifier(document.restaurant_id, "restaurant id", 80)]]
    location = _text(document.restaurant_location or "", 110)
    if location:
        loop.append(["N3", *_chunks(location, 55)])
    return loop


def _po1_loop(number: int, line: DocumentLine, field: str | None = None) -> list[list[str]]:
    """One PO1 (line number, quantity, unit, VN SKU, VP product code) and its PID name;
    ``field`` names the line in errors (``line <number>`` by default)."""
    field = field or f"line {number}"
    po1 = ["PO1", str(number), _quantity(line.quantity, field), x12_unit(line.unit), "", "",
           "VN", _identifier(line.supplier_sku, f"{field} supplier SKU", 48)]
    if line.supplier_product_code:
        po1 += ["VP", _identifier(line.supplier_product_code, f"{field} product code", 48)]
    description = _text(line.name, 80)
    return [po1, ["PID", "F", "", "", "", description]] if description else [po1]


def _quantity(quantity: Decimal, field: str) -> str:
    """A positive quantity as an X12 decimal (no exponent, no trailing zeros, ≤ 15 digits)."""
    if not isinstance(quantity, Decimal) or not quantity.is_finite() or quantity <= 0:
        raise X12ValidationError(f"{field}: quantity must be a positive number, not {quantity!r}")
    written = format(quantity.normalize(), "f")
    if len(written.replace(".", "")) > 15:
        raise X12ValidationError(f"{field}: quantity {written} has more than 15 digits")
    return written


def _identifier(value: str, field: str, max_length: int) -> str:
    """An identifier written exactly as given, or :class:`X12ValidationError` when it is
    empty, too long, or holds a separator, a control character or non-ASCII text."""
    value = value.strip()
    if not value:
        raise X12ValidationError(f"{field} is empty")
    if len(value) > max_length:
        raise X12ValidationError(
            f"{field} {value!r} is longer than the {max_length} characters X12 allows")
    bad = [char for char in value
           if char in _SEPARATORS or not (" " <= char <= "~")]
    if bad:
        raise X12ValidationError(
            f"{field} {value!r} contains {bad[0]!r}, which an X12 file cannot carry "
            "(separators are * > ~)")
    return value


def _text(value: str, max_length: int) -> str:
    """Free text made safe for an element: ASCII only, separators and control characters
    turned into spaces, runs of spaces collapsed, cut at ``max_length``."""
    ascii_text = (unicodedata.normalize("NFKD", value)
                  .encode("ascii", "ignore").decode("ascii"))
    for separator in _SEPARATORS:
        ascii_text = ascii_text.replace(separator, " ")
    ascii_text = _CONTROL_CHARS.sub(" ", ascii_text)
    return _WHITESPACE.sub(" ", ascii_text).strip()[:max_length].rstrip()


def _chunks(text: str, size: int) -> list[str]:
    """``text`` in consecutive pieces of at most ``size`` characters."""
    return [text[start:start + size].strip() for start in range(0, len(text), size)]


def _slug(value: str) -> str:
    """Lower-case ASCII letters and digits, other runs turned into one dash."""
    ascii_text = (unicodedata.normalize("NFKD", value)
                  .encode("ascii", "ignore").decode("ascii").lower())
    return re.sub(r"[^a-z0-9]+", "-", ascii_text).strip("-")


def _check_control_number(control_number: int) -> None:
    if (isinstance(control_number, bool) or not isinstance(control_number, int)
            or not 1 <= control_number <= MAX_CONTROL_NUMBER):
        raise X12ValidationError(
            f"control number must be an integer from 1 to {MAX_CONTROL_NUMBER}, "
            f"not {control_number!r}")


# ------------------------------------------------------------------- control numbers


class ControlNumberAllocator(Protocol):
    """Hands out interchange control numbers (ISA13): each call a number no other caller
    got, increasing until it wraps from 999,999,999 to 1."""

    def allocate(self) -> int:
        """The next control number."""
        ...


_ALLOCATE_LUA = """
local number = redis.call('INCR', KEYS[1])
if number > tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], 1)
  number = 1
end
return number
"""


class RedisControlNumbers:
    """A :class:`ControlNumberAllocator` on one Redis key, ``<prefix>:x12:isa13:<scope>``.

    The increment and the wrap run as one script, so concurrent processes never receive
    the same number. The counter lives only in Redis: a Redis that loses its data starts
    again at 1.
    """

    def __init__(self, client: redis.Redis, prefix: str, scope: str = "default") -> None:
        if not prefix or not scope:
            raise ValueError("a control number key needs a prefix and a scope")
        self.key = f"{prefix}:x12:isa13:{scope}"
        self._script = client.register_script(_ALLOCATE_LUA)

    def allocate(self) -> int:
        """The next control number (1 after 999,999,999)."""
        return int(self._script(keys=[self.key], args=[MAX_CONTROL_NUMBER]))


# --------------------------------------------------------------------------- envelope


@dataclasses.dataclass(frozen=True)
class Separators:
    """The three delimiters of one interchange, as its ISA header declares them."""

    element: str
    sub_element: str
    segment: str


@dataclasses.dataclass(frozen=True)
class Segment:
    """One segment: its id (``PO1``) and its elements, without the id."""

    id: str
    elements: tuple[str, ...]

    def get(self, position: int) -> str:
        """Element ``position`` (1-based, ``PO1`` element 2 is ``PO102``); ``""`` when the
        segment stops before it."""
        return self.elements[position - 1] if 0 < position <= len(self.elements) else ""


@dataclasses.dataclass(frozen=True)
class TransactionSet:
    """ST … SE: the set's id code (``850``), its control number and every segment from ST
    through SE inclusive."""

    code: str
    control_number: str
    segments: tuple[Segment, ...]

    @property
    def body(self) -> tuple[Segment, ...]:
        """The segments between ST and SE."""
        return self.segments[1:-1]


@dataclasses.dataclass(frozen=True)
class FunctionalGroup:
    """GS … GE: the functional id (``PO``, ``PR``, ``FA``), GS06 and its sets."""

    header: Segment
    transaction_sets: tuple[TransactionSet, ...]

    @property
    def functional_id(self) -> str:
        """GS01."""
        return self.header.get(1)

    @property
    def control_number(self) -> str:
        """GS06."""
        return self.header.get(6)


@dataclasses.dataclass(frozen=True)
class Interchange:
    """ISA … IEA, with the separators it was read with."""

    separators: Separators
    header: Segment
    groups: tuple[FunctionalGroup, ...]

    @property
    def sender_id(self) -> str:
        """ISA06 without its padding."""
        return self.header.get(6).strip()

    @property
    def receiver_id(self) -> str:
        """ISA08 without its padding."""
        return self.header.get(8).strip()

    @property
    def control_number(self) -> str:
        """ISA13 as written (nine digits)."""
        return self.header.get(13)

    @property
    def usage(self) -> str:
        """ISA15: ``P`` production, ``T`` test."""
        return self.header.get(15)

    def transaction_sets(self) -> Iterator[TransactionSet]:
        """Every transaction set of every group, in file order."""
        for group in self.groups:
            yield from group.transaction_sets


def parse_envelope(text: str) -> Interchange:
    """Split one interchange into groups, transaction sets and segments.

    The separators are read from the ISA header (element separator after ``ISA``,
    sub-element separator in ISA16, the segment terminator right after it), so files
    using other delimiters than ours parse too; whitespace around segments (line breaks)
    is ignored. Every envelope count and control number is checked — SE01 against the
    real segment count, SE02 = ST02, GE01/GE02, IEA01/IEA02 — and any mismatch, missing
    envelope segment or text after IEA raises :class:`X12ParseError`.
    """
    text = text.lstrip("\ufeff \t\r\n")
    separators = _detect_separators(text)
    segments = _split_segments(text, separators)
    return _assemble(segments, separators)


def _detect_separators(text: str) -> Separators:
    """The delimiters an ISA header declares, or :class:`X12ParseError`."""
    if not text.startswith("ISA") or len(text) < 4:
        raise X12ParseError("not an X12 interchange: it does not start with an ISA segment")
    element = text[3]
    if element.isalnum() or element.isspace():
        raise X12ParseError(f"ISA declares {element!r} as its element separator")
    position = 3
    for _ in range(15):
        position = text.find(element, position + 1)
        if position < 0:
            raise X12ParseError("the ISA header has fewer than 16 elements")
    # ISA16 is one character after the 16th separator; the terminator follows it.
    if len(text) < position + 3:
        raise X12ParseError("the ISA header is cut short")
    sub_element, segment = text[position + 1], text[position + 2]
    if sub_element.isalnum() or segment.isalnum() or segment == " ":
        raise X12ParseError(
            f"the ISA header declares {sub_element!r} / {segment!r} as its sub-element "
            "separator / segment terminator")
    if len({element, sub_element, segment}) != 3:
        raise X12ParseError("the ISA header declares the same character for two separators")
    return Separators(element, sub_element, segment)


def _split_segments(text: str, separators: Separators) -> list[Segment]:
    """Every segment of the text, each checked to start with a segment id."""
    segments = []
    for raw in text.split(separators.segment):
        raw = raw.strip("\r\n\t ")
        if not raw:
            continue
        parts = raw.split(separators.element)
        if not _SEGMENT_ID.fullmatch(parts[0]):
            raise X12ParseError(f"{raw[:40]!r} is not an X12 segment")
        segments.append(Segment(parts[0], tuple(parts[1:])))
    return segments


def _assemble(segments: list[Segment], separators: Separators) -> Interchange:
    """Nest the flat segment list into ISA/GS/ST envelopes, checking every trailer."""
    stream = _Stream(segments)
    isa = stream.take("ISA")
    if len(isa.elements) != 16:
        raise X12ParseError(f"the ISA header has {len(isa.elements)} elements, not 16")
    groups = []
    while stream.peek() == "GS":
        groups.append(_group(stream))
    iea = stream.take("IEA")
    _expect(iea.get(1), str(len(groups)), "IEA01 (number of groups)")
    _expect(iea.get(2), isa.get(13), "IEA02 (ISA13)")
    if stream.peek() is not None:
        raise X12ParseError(f"unexpected {stream.peek()} segment after IEA")
    if not groups:
        raise X12ParseError("the interchange holds no functional group")
    return Interchange(separators, isa, tuple(groups))


def _group(stream: _Stream) -> FunctionalGroup:
    gs = stream.take("GS")
    sets = []
    while stream.peek() == "ST":
        sets.append(_transaction_set(stream))
    ge = stream.take("GE")
    _expect(ge.get(1), str(len(sets)), "GE01 (number of transaction sets)")
    _expect(ge.get(2), gs.get(6), "GE02 (GS06)")
    return FunctionalGroup(gs, tuple(sets))


def _transaction_set(stream: _Stream) -> TransactionSet:
    st = stream.take("ST")
    segments = [st]
    while stream.peek() not in ("SE", "GE", "IEA", "ST", "GS", None):
        segments.append(stream.take())
    se = stream.take("SE")
    segments.append(se)
    _expect(se.get(1), str(len(segments)), f"SE01 (segment count of {st.get(1)} set)")
    _expect(se.get(2), st.get(2), "SE02 (ST02)")
    return TransactionSet(st.get(1), st.get(2), tuple(segments))


def _expect(found: str, wanted: str, what: str) -> None:
    if found.strip() != wanted.strip():
        raise X12ParseError(f"{what} is {found!r}, expected {wanted!r}")


class _Stream:
    """A cursor over the flat segment list."""

    def __init__(self, segments: Sequence[Segment]) -> None:
        self._segments = segments
        self._next = 0

    def peek(self) -> str | None:
        if self._next < len(self._segments):
            return self._segments[self._next].id
        return None

    def take(self, expected: str | None = None) -> Segment:
        found = self.peek()
        if found is None:
            raise X12ParseError(f"the file ends where {expected or 'a segment'} was expected")
        if expected is not None and found != expected:
            raise X12ParseError(f"expected {expected}, found {found}")
        self._next += 1
        return self._segments[self._next - 1]


# ------------------------------------------------------------------------------- 855


@dataclasses.dataclass(frozen=True)
class LineAck:
    """One ACK segment: a status code for some quantity of the line."""

    code: str
    quantity: Decimal | None
    unit: str
    #: ACK05 when present (the date ACK04 qualifies, e.g. the rescheduled ship date).
    date: date | None
    product_ids: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class AckLine:
    """One PO1 loop of an 855: the line as the supplier echoes it and its ACKs."""

    #: PO101: the 850's line number (``"1"`` is the document's first line).
    line_number: str
    ordered_quantity: Decimal | None
    unit: str
    #: Product ids by qualifier (``{"VN": sku, "VP": product code}``).
    product_ids: Mapping[str, str]
    acks: tuple[LineAck, ...]

    @property
    def supplier_sku(self) -> str | None:
        """The VN product id of the PO1 (or of an ACK when the PO1 has none)."""
        for ids in (self.product_ids, *(ack.product_ids for ack in self.acks)):
            if "VN" in ids:
                return ids["VN"]
        return None

    @property
    def codes(self) -> tuple[str, ...]:
        """The ACK01 codes in file order."""
        return tuple(ack.code for ack in self.acks)

    @property
    def not_shipping(self) -> bool:
        """True when nothing of the line ships: it has ACKs and every one is IB or IR."""
        return bool(self.acks) and all(code in NOT_SHIPPING_CODES for code in self.codes)

    @property
    def backordered(self) -> bool:
        """True when some of the line waits for stock (an IB or BP among its ACKs)."""
        return any(code in BACKORDER_CODES for code in self.codes)

    @property
    def reroute_code(self) -> str | None:
        """The code a reroute of this line carries: IB before IR; None while it ships."""
        if not self.not_shipping:
            return None
        return "IB" if "IB" in self.codes else "IR"


@dataclasses.dataclass(frozen=True)
class Ack855:
    """A purchase order acknowledgment (one 855 transaction set)."""

    control_number: str
    #: BAK01 (``00`` original, ``05`` replace, …).
    purpose: str
    #: BAK02: ``AC`` with detail and change, ``AD`` with detail, ``AK`` no detail,
    #: ``RD`` rejected with detail, ``RJ`` rejected without detail, ….
    ack_type: str
    #: BAK03: our order number, as BEG03 sent it.
    po_number: str
    #: BAK04: the purchase order's date.
    po_date: date
    #: BAK08 when present: the supplier's own order number.
    seller_order_number: str
    lines: tuple[AckLine, ...]

    @property
    def order_rejected(self) -> bool:
        """True when the supplier rejected the whole order without line detail (RJ)."""
        return self.ack_type == "RJ"

    def not_shipping_lines(self) -> tuple[AckLine, ...]:
        """The lines to hand to an alternate supplier (see :attr:`AckLine.not_shipping`)."""
        return tuple(line for line in self.lines if line.not_shipping)

    def backordered_lines(self) -> tuple[AckLine, ...]:
        """The lines some of which waits for stock (IB or BP)."""
        return tuple(line for line in self.lines if line.backordered)

    def line(self, line_number: str | int) -> AckLine | None:
        """The acknowledgment of PO1 line ``line_number``, if the 855 has one."""
        wanted = str(line_number)
        return next((line for line in self.lines if line.line_number == wanted), None)


def parse_855(text: str) -> Ack855:
    """The one 855 in ``text``: BAK's type, PO number and date, and every PO1 loop with its
    ACK segments. An ACK01 outside the nine codes of :data:`ACK_CODES`, an ACK outside a
    PO1 loop, a CTT01 that disagrees with the PO1 count, a malformed number or date, or a
    file holding anything but exactly one 855 raises :class:`X12ParseError`."""
    return _read_855(_only_set(parse_envelope(text), "855"))


def parse_997(text: str) -> Ack997:
    """The one 997 in ``text``: the group it answers (AK1), each transaction set's verdict
    (AK2/AK5 with the AK3/AK4 error notes) and the group's verdict (AK9). A missing AK1 or
    AK9, an AK5/AK9 code X12 does not define, or a file holding anything but exactly one
    997 raises :class:`X12ParseError`."""
    return _read_997(_only_set(parse_envelope(text), "997"))


def parse_acknowledgments(text: str) -> tuple[Ack855 | Ack997, ...]:
    """Every 855 and 997 of one interchange, in file order; any other transaction set or
    unreadable input raises :class:`X12ParseError`."""
    readers: dict[str, Callable[[TransactionSet], Ack855 | Ack997]] = {"855": _read_855,
                                                                       "997": _read_997}
    documents: list[Ack855 | Ack997] = []
    for transaction in parse_envelope(text).transaction_sets():
        reader = readers.get(transaction.code)
        if reader is None:
            raise X12ParseError(
                f"transaction set {transaction.code!r} is not an 855 or a 997")
        documents.append(reader(transaction))
    return tuple(documents)


def _only_set(interchange: Interchange, code: str) -> TransactionSet:
    sets = list(interchange.transaction_sets())
    codes = [transaction.code for transaction in sets]
    if codes != [code]:
        raise X12ParseError(
            f"expected exactly one {code} transaction set, found {', '.join(codes) or 'none'}")
    return sets[0]


def _read_855(transaction: TransactionSet) -> Ack855:
    body = transaction.body
    if not body or body[0].id != "BAK":
        raise X12ParseError("an 855 must start with a BAK segment")
    bak = body[0]
    po_number = bak.get(3).strip()
    if not po_number:
        raise X12ParseError("BAK03 (purchase order number) is empty")
    lines = _ack_lines(body[1:])
    return Ack855(
        control_number=transaction.control_number,
        purpose=bak.get(1),
        ack_type=bak.get(2),
        po_number=po_number,
        po_date=_date(bak.get(4), "BAK04"),
        seller_order_number=bak.get(8),
        lines=lines,
    )


def _ack_lines(segments: Iterable[Segment]) -> tuple[AckLine, ...]:
    """The PO1 loops: each PO1 with the ACKs that follow it."""
    loops: list[tuple[Segment, list[LineAck]]] = []
    for segment in segments:
        if segment.id == "PO1":
            loops.append((segment, []))
        elif segment.id == "ACK":
            if not loops:
                raise X12ParseError("an ACK segment comes before any PO1")
            loops[-1][1].append(_line_ack(segment))
        elif segment.id == "CTT":
            _expect(segment.get(1), str(len(loops)), "CTT01 (number of PO1 lines)")
    return tuple(
        AckLine(line_number=po1.get(1).strip(),
                ordered_quantity=_decimal(po1.get(2), "PO102"),
                unit=po1.get(3),
                product_ids=_product_ids(po1, 6),
                acks=tuple(acks))
        for po1, acks in loops)


def _line_ack(segment: Segment) -> LineAck:
    code = segment.get(1)
    if code not in ACK_CODES:
        raise X12ParseError(
            f"ACK01 {code!r} is not one of {' '.join(ACK_CODES)}")
    return LineAck(code=code, quantity=_decimal(segment.get(2), "ACK02"),
                   unit=segment.get(3),
                   date=_date(segment.get(5), "ACK05") if segment.get(5) else None,
                   product_ids=_product_ids(segment, 7))


def _product_ids(segment: Segment, first: int) -> dict[str, str]:
    """Qualifier/id pairs from element ``first`` on (PO106/107…, ACK07/08…)."""
    pairs = {}
    for position in range(first, len(segment.elements) + 1, 2):
        qualifier, value = segment.get(position), segment.get(position + 1)
        if qualifier and value:
            pairs[qualifier] = value
    return pairs


def _decimal(value: str, element: str) -> Decimal | None:
    if not value:
        return None
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise X12ParseError(f"{element} {value!r} is not a number") from None
    if not number.is_finite():
        raise X12ParseError(f"{element} {value!r} is not a number")
    return number


def _date(value: str, element: str) -> date:
    try:
        return datetime.strptime(value, "%Y%m%d").date()
    except ValueError:
        raise X12ParseError(f"{element} {value!r} is not a CCYYMMDD date") from None


# ------------------------------------------------------------------------------- 997


@dataclasses.dataclass(frozen=True)
class SetAck:
    """One AK2 loop: the verdict on one transaction set we sent."""

    #: AK201: the set's id code (``850``).
    code: str
    #: AK202: its ST02.
    control_number: str
    #: AK501: ``A`` accepted, ``E`` accepted with errors, ``R`` rejected, ….
    status: str
    #: AK502…AK506 and the AK3/AK4 notes, as the supplier wrote them.
    errors: tuple[str, ...]

    @property
    def accepted(self) -> bool:
        """True for A (accepted) and E (accepted, errors noted)."""
        return self.status in _ACCEPTED_997


@dataclasses.dataclass(frozen=True)
class Ack997:
    """A functional acknowledgment: the verdict on one functional group we sent."""

    control_number: str
    #: AK101: the group's functional id (``PO`` for our 850s).
    functional_id: str
    #: AK102: the group's GS06 (our 850's control number, unpadded).
    group_control_number: str
    transaction_sets: tuple[SetAck, ...]
    #: AK901: ``A`` accepted, ``E`` with errors, ``P`` partially, ``R`` rejected, ….
    status: str
    #: AK902, AK903, AK904: sets included, received, accepted.
    included: int
    received: int
    accepted_count: int

    @property
    def accepted(self) -> bool:
        """True when the whole group was accepted (AK901 A or E)."""
        return self.status in _ACCEPTED_997


def _read_997(transaction: TransactionSet) -> Ack997:
    body = list(transaction.body)
    if not body or body[0].id != "AK1":
        raise X12ParseError("a 997 must start with an AK1 segment")
    ak1 = body[0]
    ak9 = next((segment for segment in body if segment.id == "AK9"), None)
    if ak9 is None:
        raise X12ParseError("a 997 must end with an AK9 segment")
    if ak9.get(1) not in _AK9_CODES:
        raise X12ParseError(f"AK901 {ak9.get(1)!r} is not one of {' '.join(sorted(_AK9_CODES))}")
    return Ack997(
        control_number=transaction.control_number,
        functional_id=ak1.get(1),
        group_control_number=ak1.get(2),
        transaction_sets=_set_acks(body[1:]),
        status=ak9.get(1),
        included=_count(ak9.get(2), "AK902"),
        received=_count(ak9.get(3), "AK903"),
        accepted_count=_count(ak9.get(4), "AK904"),
    )


def _set_acks(segments: Iterable[Segment]) -> tuple[SetAck, ...]:
    """The AK2 loops: AK2 opens one, AK3/AK4 add notes, AK5 closes it with its verdict."""
    acks: list[SetAck] = []
    open_set: Segment | None = None
    notes: list[str] = []
    for segment in segments:
        if segment.id == "AK2":
            open_set, notes = segment, []
        elif segment.id in ("AK3", "AK4") and open_set is not None:
            notes.append(segment.id + " " + " ".join(e for e in segment.elements if e))
        elif segment.id == "AK5":
            if open_set is None:
                raise X12ParseError("an AK5 segment comes without its AK2")
            status = segment.get(1)
            if status not in _AK5_CODES:
                raise X12ParseError(
                    f"AK501 {status!r} is not one of {' '.join(sorted(_AK5_CODES))}")
            codes = [e for e in segment.elements[1:] if e]
            acks.append(SetAck(open_set.get(1), open_set.get(2), status, (*codes, *notes)))
            open_set = None
    if open_set is not None:
        raise X12ParseError("an AK2 loop has no AK5")
    return tuple(acks)


def _count(value: str, element: str) -> int:
    if not value.isdigit():
        raise X12ParseError(f"{element} {value!r} is not a count")
    return int(value)
