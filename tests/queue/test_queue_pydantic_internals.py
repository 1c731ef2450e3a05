"""The queue library calls pydantic's validator and serializer directly
(herald/queue/pydantic_internals.py); these tests pin that to the supported pydantic range
and to what model_validate and model_dump_json give, so an upgrade that changes either
fails here."""

from __future__ import annotations

import tomllib
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from pydantic import BaseModel, Field, ValidationError

from herald.queue.pydantic_internals import SUPPORTED_PYDANTIC, dump_json, validate

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


class Line(BaseModel):
    sku: str
    quantity: int = 1


class Order(BaseModel):
    order_id: uuid.UUID
    placed_at: datetime
    total: Decimal
    lines: list[Line]
    note: str | None = Field(default=None, alias="comment")


PAYLOAD = {"order_id": "0b9a3c4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e",
           "placed_at": "2026-12-04T23:00:00+00:00", "total": "12.50",
           "lines": [{"sku": "A-1", "quantity": "3"}, {"sku": "B-2"}], "comment": "leave it"}


def supported() -> SpecifierSet:
    return SpecifierSet(",".join(SUPPORTED_PYDANTIC))


def test_the_installed_pydantic_is_one_the_internals_were_checked_against() -> None:
    assert version("pydantic") in supported()


def test_the_package_depends_on_exactly_the_supported_range() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    pydantic = next(Requirement(d) for d in dependencies if Requirement(d).name == "pydantic")
    assert pydantic.specifier == supported()


def test_validate_converts_a_payload_as_model_validate_does() -> None:
    # Given a payload of strings that the model converts (a UUID, a datetime, a decimal,
    # an int inside a nested list, an alias, a default)
    # When it is validated through the fence
    order = validate(Order, PAYLOAD)
    # Then the instance is model_validate's, field for field
    assert order == Order.model_validate(PAYLOAD)
    assert order.lines[0].quantity == 3 and order.lines[1].quantity == 1
    assert order.placed_at == datetime(2026, 12, 4, 23, tzinfo=UTC)
    assert order.note == "leave it"


def test_validate_refuses_a_payload_as_model_validate_does() -> None:
    # Given a payload with a wrong type and a missing field
    bad = {**PAYLOAD, "total": "a lot", "lines": [{"quantity": 2}]}
    # When it is validated through the fence, Then pydantic's own error says the same
    with pytest.raises(ValidationError) as fenced:
        validate(Order, bad)
    with pytest.raises(ValidationError) as public:
        Order.model_validate(bad)
    assert fenced.value.errors() == public.value.errors()
    assert {e["loc"] for e in fenced.value.errors()} == {("total",), ("lines", 0, "sku")}


def test_dump_json_writes_what_model_dump_json_writes() -> None:
    # Given a model with converted values, a nested list and an aliased field
    order = Order.model_validate(PAYLOAD)
    # When it is written through the fence, Then the text is model_dump_json's, byte for
    # byte (field names, not aliases; a decimal as a string; the datetime in ISO form)
    assert dump_json(order) == order.model_dump_json()
    assert '"note":"leave it"' in dump_json(order)
    assert '"total":"12.50"' in dump_json(order)
