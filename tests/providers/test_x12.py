"""The X12 850 writer, the 855/997 parsers and the control-number allocator on a real
Redis. The 855/997 fixtures under ``tests/providers/x12/`` are hand-written the way a
supplier's translator writes them (different separators, line breaks or none)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import redis

from providers.suppliers import DocumentLine, PurchaseOrderDocument, is_permanent_failure
from providers.x12 import (
    MAX_CONTROL_NUMBER,
    Ack855,
    Ack997,
    RedisControlNumbers,
    X12ParseError,
    X12ValidationError,
    parse_855,
    parse_997,
    parse_acknowledgments,
    parse_envelope,
    write_850,
)

FIXTURES = Path(__file__).parent / "x12"
NOW = datetime(2025, 3, 4, 5, 6)

# (unit as the catalog stores it, quantity, the X12 code and quantity the 850 must carry)
EIGHT_LINES = [
    ("case", "4", "CA", "4"), ("each", "12", "EA", "12"), ("lb", "10.50", "LB", "10.5"),
    ("Box", "2", "BX", "2"), ("kilogram", "1.5", "KG", "1.5"), ("dozen", "3", "DZ", "3"),
    ("gallons", "2", "GA", "2"), ("pound", "1E+1", "LB", "10"),
]


def document(*, lines: list[tuple[str, str]] | None = None, order_number: str = "ORD-1001",
             restaurant_name: str = "Joe's Diner", location: str | None = "12 Main St",
             notes: str | None = None, sku: str | None = None) -> PurchaseOrderDocument:
    """A purchase order for one supplier; ``lines`` are (unit, quantity) pairs."""
    pairs = lines if lines is not None else [(unit, qty) for unit, qty, _, _ in EIGHT_LINES]
    return PurchaseOrderDocument(
        order_id=str(uuid.uuid4()), dispatch_id=str(uuid.uuid4()), order_number=order_number,
        restaurant_id="b0f5c7de-0000-4000-8000-000000000001", restaurant_name=restaurant_name,
        restaurant_location=location, placed_by_email="chef@joes.example",
        delivery_notes=notes,
        lines=tuple(
            DocumentLine(line_item_id=f"line-{n}", catalog_item_id=f"item-{n}",
                         name=f"Item {n}", supplier_sku=sku or f"SKU{n:04d}",
                         supplier_product_code=f"PC-{n}" if n % 2 else None,
                         quantity=Decimal(quantity), unit=unit)
            for n, (unit, quantity) in enumerate(pairs, start=1)),
    )


def raw_segments(text: str) -> list[list[str]]:
    """The file split by hand on ``~`` and ``*`` — independent of the parser under test."""
    return [segment.strip().split("*") for segment in text.split("~") if segment.strip()]


def write(doc: PurchaseOrderDocument, control_number: int = 42, usage: str = "T"):
    return write_850(doc, sender_id="HERALDPURCH", receiver_id="SYSCOEDI",
                     control_number=control_number, usage=usage, now=NOW)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the 850


def test_eight_lines_make_one_850_a_supplier_can_check_end_to_end() -> None:
    doc = document()
    edi = write(doc)

    interchange = parse_envelope(edi.text)
    assert (interchange.sender_id, interchange.receiver_id) == ("HERALDPURCH", "SYSCOEDI")
    assert interchange.usage == "T"
    assert [group.functional_id for group in interchange.groups] == ["PO"]
    [transaction] = interchange.transaction_sets()
    assert transaction.code == "850"

    segments = raw_segments(edi.text)
    ids = [segment[0] for segment in segments]
    st, se = ids.index("ST"), ids.index("SE")
    isa, gs, ge, iea = segments[0], segments[1], segments[-2], segments[-1]
    assert int(segments[se][1]) == se - st + 1 == edi.segment_count
    assert segments[se][2] == segments[st][2]
    assert ge[2] == gs[6] and ge[1] == "1"
    assert iea[2] == isa[13] == "000000042" and iea[1] == "1"

    by_id = {segment[0]: segment for segment in segments}
    assert by_id["BEG"][1:4] == ["00", "SA", "ORD-1001"]
    assert by_id["BEG"][5] == "20250304"
    assert by_id["N1"][1:3] == ["ST", "Joe's Diner"]
    po1s = [segment for segment in segments if segment[0] == "PO1"]
    assert [po1[1] for po1 in po1s] == [str(n) for n in range(1, 9)]
    assert [(po1[2], po1[3]) for po1 in po1s] == [
        (written, code) for _, _, code, written in EIGHT_LINES]
    assert [(po1[6], po1[7]) for po1 in po1s] == [("VN", f"SKU{n:04d}") for n in range(1, 9)]
    assert po1s[0][8:10] == ["VP", "PC-1"] and len(po1s[1]) == 8
    assert by_id["CTT"][1] == "8"
    assert ids.count("ST") == 1 and ids.count("ISA") == 1

    assert edi.line_count == 8
    assert edi.file_name == "PO_joe-s-diner_ord-1001_000000042.edi"
    assert edi.line_item_ids == tuple(f"line-{n}" for n in range(1, 9))
    assert edi.audit() == {
        "segmentCount": edi.segment_count, "lineCount": 8,
        "controlNumbers": {"interchange": "000000042", "group": "42", "transaction": "0001"},
    }


@pytest.mark.parametrize("sender, receiver", [("H", "S"), ("HERALDPURCHASER", "SYSCO")])
def test_the_isa_header_has_its_fixed_width_whatever_the_ids(sender: str, receiver: str) -> None:
    edi = write_850(document(), sender_id=sender, receiver_id=receiver, control_number=7,
                    usage="P", now=NOW)

    isa = edi.text[:edi.text.index("~") + 1]
    assert len(isa) == 106
    elements = isa[:-1].split("*")
    assert [len(e) for e in elements[1:]] == [2, 10, 2, 10, 2, 15, 2, 15, 6, 4, 1, 5, 9, 1, 1, 1]
    assert elements[6].rstrip() == sender and elements[8].rstrip() == receiver
    assert (elements[13], elements[15], elements[16]) == ("000000007", "P", ">")


def test_separators_inside_free_text_cannot_break_the_file() -> None:
    doc = document(restaurant_name="Joe's *Star* ~Diner> & Bar",
                   location="Unit 4*B ~ 12 Main St", notes="Back door~ring twice\n* before 7am")
    edi = write(doc)

    interchange = parse_envelope(edi.text)
    [transaction] = interchange.transaction_sets()
    by_id: dict[str, list] = {}
    for segment in transaction.segments:
        by_id.setdefault(segment.id, []).append(segment)
    [n1] = by_id["N1"]
    assert n1.elements == ("ST", "Joe's Star Diner & Bar", "92",
                           "b0f5c7de-0000-4000-8000-000000000001")
    assert [n3.elements for n3 in by_id["N3"]] == [("Unit 4 B 12 Main St",)]
    assert [msg.get(1) for msg in by_id["MSG"]] == ["Back door ring twice", "before 7am"]
    assert len(by_id["PO1"]) == 8


@pytest.mark.parametrize("change, field", [
    ({"sku": "AB*12"}, "supplier SKU"),
    ({"order_number": "ORD~1"}, "order number"),
    ({"order_number": "X" * 23}, "order number"),
    ({"restaurant_name": "***"}, "restaurant name"),
])
def test_identifiers_that_cannot_be_written_exactly_are_refused(change: dict, field: str) -> None:
    with pytest.raises(X12ValidationError, match=field) as raised:
        write(document(**change))
    assert is_permanent_failure(raised.value)


def test_an_unknown_unit_is_a_permanent_error_naming_the_unit() -> None:
    with pytest.raises(X12ValidationError, match="'crate'") as raised:
        write(document(lines=[("case", "1"), ("crate", "2")]))
    assert is_permanent_failure(raised.value)


@pytest.mark.parametrize("arguments, message", [
    ({"usage": "X"}, "usage indicator"),
    ({"control_number": 0}, "control number"),
    ({"control_number": MAX_CONTROL_NUMBER + 1}, "control number"),
])
def test_bad_envelope_arguments_are_refused(arguments: dict, message: str) -> None:
    values = {"sender_id": "HERALD", "receiver_id": "SYSCO", "control_number": 1,
              "usage": "T", "now": NOW, **arguments}
    with pytest.raises(X12ValidationError, match=message):
        write_850(document(), **values)


def test_a_quantity_that_is_not_positive_is_refused() -> None:
    with pytest.raises(X12ValidationError, match="line 1: quantity"):
        write(document(lines=[("case", "0")]))


# ------------------------------------------------------------------- control numbers


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


def test_concurrent_allocations_never_share_a_number_and_each_caller_sees_them_rise(
        client: redis.Redis) -> None:
    prefix = f"test-x12-{uuid.uuid4().hex}"
    per_thread: list[list[int]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def allocate(numbers: list[int]) -> None:
        allocator = RedisControlNumbers(client, prefix)
        start.wait()
        for _ in range(50):
            numbers.append(allocator.allocate())

    threads = [threading.Thread(target=allocate, args=(numbers,)) for numbers in per_thread]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    every = [number for numbers in per_thread for number in numbers]
    assert sorted(every) == list(range(1, 401))
    assert all(numbers == sorted(numbers) for numbers in per_thread)

    # each interchange gets the next number in its ISA13
    allocator = RedisControlNumbers(client, prefix)
    first, second = (write(document(), allocator.allocate()) for _ in range(2))
    assert (first.text.split("*")[13], second.text.split("*")[13]) == ("000000401",
                                                                        "000000402")
    assert first.file_name != second.file_name


def test_the_allocator_wraps_after_nine_digits(client: redis.Redis) -> None:
    allocator = RedisControlNumbers(client, f"test-x12-{uuid.uuid4().hex}", scope="sysco")
    client.set(allocator.key, MAX_CONTROL_NUMBER - 1)

    assert [allocator.allocate() for _ in range(3)] == [MAX_CONTROL_NUMBER, 1, 2]


# ------------------------------------------------------------------------------- 855


def test_an_855_with_back_orders_says_which_lines_do_not_ship() -> None:
    ack = parse_855((FIXTURES / "855_backorder.edi").read_text())

    assert (ack.purpose, ack.ack_type, ack.po_number) == ("00", "AC", "ORD-1001")
    assert (ack.po_date, ack.seller_order_number) == (date(2025, 3, 4), "SYS-889201")
    assert [line.line_number for line in ack.lines] == ["1", "2", "3", "4", "5"]
    assert [line.codes for line in ack.lines] == [
        ("IA",), ("IB",), ("IA", "IB"), ("IR",), ("DR",)]
    assert [(line.line_number, line.reroute_code) for line in ack.not_shipping_lines()] == [
        ("2", "IB"), ("4", "IR")]
    assert [line.line_number for line in ack.backordered_lines()] == ["2", "3"]
    split = ack.line(3)
    assert split is not None and split.supplier_sku == "2200190"
    assert [(a.quantity, a.unit) for a in split.acks] == [(Decimal(6), "LB"), (Decimal(4), "LB")]
    assert ack.line(5).acks[0].date == date(2025, 3, 10)  # type: ignore[union-attr]
    assert ack.line(1).product_ids == {"VN": "1000234", "VP": "TOM-ROMA"}  # type: ignore[union-attr]
    assert not ack.order_rejected


@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_an_855_with_other_separators_is_read_from_its_isa_header(line_end: str) -> None:
    text = (FIXTURES / "855_accept_pipes.edi").read_text().replace("\n", line_end)

    ack = parse_855(text)

    assert parse_envelope(text).separators.element == "|"
    assert (ack.ack_type, ack.po_number, ack.seller_order_number) == (
        "AD", "ORD-1002", "SYS-889202")
    assert [(line.line_number, line.ordered_quantity, line.unit, line.supplier_sku, line.codes)
            for line in ack.lines] == [
        ("1", Decimal("12"), "EA", "5500123", ("IA",)),
        ("2", Decimal("1.5"), "KG", "5500456", ("IA",))]
    assert ack.not_shipping_lines() == () and ack.backordered_lines() == ()


# ------------------------------------------------------------------------------- 997


def test_a_997_says_whether_our_group_was_accepted() -> None:
    accepted = parse_997((FIXTURES / "997_accepted.edi").read_text())
    rejected = parse_997((FIXTURES / "997_rejected.edi").read_text())

    assert (accepted.functional_id, accepted.group_control_number) == ("PO", "42")
    assert accepted.accepted and [s.accepted for s in accepted.transaction_sets] == [True]
    assert (accepted.included, accepted.received, accepted.accepted_count) == (1, 1, 1)

    assert rejected.group_control_number == "43"
    assert not rejected.accepted and rejected.status == "R"
    [set_ack] = rejected.transaction_sets
    assert (set_ack.code, set_ack.control_number, set_ack.accepted) == ("850", "0001", False)
    assert set_ack.errors == ("5", "AK3 PO1 6 8", "AK4 3 355 7 CX")
    assert rejected.accepted_count == 0


def test_acknowledgments_are_told_apart_by_their_transaction_set() -> None:
    kinds = [type(document).__name__
             for name in ("855_backorder.edi", "997_accepted.edi")
             for document in parse_acknowledgments((FIXTURES / name).read_text())]
    assert kinds == [Ack855.__name__, Ack997.__name__]


# ------------------------------------------------------------------------ bad input


def _fixture(name: str, *changes: tuple[str, str]) -> str:
    """A fixture with each (old, new) replacement applied; each old text must occur."""
    text = (FIXTURES / name).read_text()
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("text, message", [
    ("", "does not start with an ISA"),
    ("Dear Sysco, please send tomatoes.", "does not start with an ISA"),
    (_fixture("855_backorder.edi")[:60], "fewer than 16 elements"),
    (_fixture("855_backorder.edi", ("SE*16*", "SE*15*")), "SE01"),
    (_fixture("855_backorder.edi", ("GE*1*4711", "GE*1*4712")), "GE02"),
    (_fixture("855_backorder.edi", ("IEA*1*000004711", "IEA*1*000004799")), "IEA02"),
    (_fixture("855_backorder.edi", ("ACK*IR", "ACK*ZZ")), "ACK01 'ZZ'"),
    (_fixture("855_backorder.edi", ("CTT*5", "CTT*4")), "CTT01"),
    (_fixture("855_backorder.edi", ("20250304****", "2025-03-04****")), "BAK04"),
    (_fixture("855_backorder.edi", ("IEA*1*000004711~\n", "IEA*1*000004711~\nGS*PR~")),
     "after IEA"),
    (_fixture("855_backorder.edi", ("ACK*IB*2*CA~", "ACK*IB*two*CA~")), "ACK02"),
    (_fixture("997_accepted.edi"), "exactly one 855"),
])
def test_input_that_is_not_a_valid_855_raises_one_error(text: str, message: str) -> None:
    with pytest.raises(X12ParseError, match=message):
        parse_855(text)


@pytest.mark.parametrize("text, message", [
    (_fixture("997_accepted.edi", ("AK9*A*1*1*1~\n", ""), ("SE*6*", "SE*5*")), "AK9"),
    (_fixture("997_accepted.edi", ("AK5*A", "AK5*Q")), "AK501"),
    (_fixture("855_backorder.edi"), "exactly one 997"),
])
def test_input_that_is_not_a_valid_997_raises_one_error(text: str, message: str) -> None:
    with pytest.raises(X12ParseError, match=message):
        parse_997(text)
