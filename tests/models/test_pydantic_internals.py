"""herald relies on a few pydantic, SQLModel and SQLAlchemy internals
(models/pydantic_internals.py); these tests pin them to the supported versions, so an
upgrade that moves one fails here."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pydantic
import pytest
import sqlalchemy
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from sqlmodel import Session, SQLModel, create_engine, select

from models.base import utcnow
from models.notifications import Account, Delivery, Notification
from models.pydantic_internals import (
    INSTANCE_SLOTS,
    SUPPORTED_PYDANTIC,
    SUPPORTED_SQLALCHEMY,
    SUPPORTED_SQLMODEL,
    construct,
    field_values,
    set_field_values,
)

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"
SUPPORTED = {"pydantic": SUPPORTED_PYDANTIC, "sqlmodel": SUPPORTED_SQLMODEL,
             "sqlalchemy": SUPPORTED_SQLALCHEMY}


def dependency(name: str) -> Requirement:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    return next(Requirement(d) for d in dependencies if Requirement(d).name == name)


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_the_installed_version_is_one_the_internals_were_checked_against(name: str) -> None:
    assert version(name) in SpecifierSet(",".join(SUPPORTED[name]))


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_the_package_depends_on_exactly_the_supported_range(name: str) -> None:
    assert dependency(name).specifier == SpecifierSet(",".join(SUPPORTED[name]))


def delivery_values() -> dict[str, Any]:
    """Every field of a delivery, as a row read back from the database holds them."""
    now = utcnow()
    return {"id": "d-1", "notification_id": "n-1", "channel": "sms", "outcome": "queued",
            "reason": None, "provider": None, "provider_message_id": None, "attempts": 0,
            "last_error": None, "claimed_at": None, "queued_at": None, "attempts_log": None,
            "not_before": None, "fallback_provider": None, "fallback_message_id": None,
            "created_at": now, "updated_at": now}


def test_a_table_model_keeps_its_loaded_values_in_its_field_values(fresh_sqlite: str) -> None:
    # Given a delivery built by its constructor
    engine = create_engine(fresh_sqlite)
    SQLModel.metadata.create_all(engine)
    account = Account()
    notification = Notification(account_id=account.id, type="account.welcome",
                                occurrence="first", data={})
    delivery = Delivery(notification_id=notification.id, channel="email")
    # Then its field values hold every field, as its attributes read them
    assert {name: field_values(delivery)[name] for name in Delivery.model_fields} == {
        name: getattr(delivery, name) for name in Delivery.model_fields}

    with Session(engine) as session:
        session.add_all([account, notification, delivery])
        # When a commit expires its attributes
        session.commit()
        # Then the field values lack them, until the ORM loads them again
        assert "channel" not in field_values(delivery)
        assert delivery.channel == "email"
        assert field_values(delivery)["channel"] == "email"
    engine.dispose()


def test_construct_builds_what_model_construct_builds() -> None:
    # Given every value of a delivery, three of them given by the caller
    values = delivery_values()
    given = {"id", "notification_id", "channel"}

    # When it is built both ways
    ours = construct(Delivery, dict(values), set(given))
    theirs = Delivery.model_construct(given, **values)

    # Then the instances hold the same: values, fields set, and pydantic's other slots
    assert pydantic.BaseModel.__slots__ == INSTANCE_SLOTS
    for slot in INSTANCE_SLOTS:
        assert getattr(ours, slot) == getattr(theirs, slot), slot
    assert ours.model_fields_set == given
    assert ours.model_dump() == theirs.model_dump() == values


def test_sqlmodels_new_sets_only_pydantics_private_attributes() -> None:
    # construct skips SQLModel's __new__: anything more it set would be missing
    bare = Delivery.__new__(Delivery)

    assert vars(bare) == {}
    assert (bare.__pydantic_fields_set__, bare.__pydantic_extra__,
            bare.__pydantic_private__) == (set(), None, None)


def test_a_constructed_row_reads_like_a_row_and_has_no_orm_state() -> None:
    values = delivery_values()
    row = construct(Delivery, dict(values), set())

    # SQLAlchemy's instrumented attributes read the values without the ORM's state
    assert (row.id, row.channel, row.created_at) == ("d-1", "sms", values["created_at"])
    assert Delivery.channel.__get__(row, Delivery) == "sms"
    with pytest.raises(sqlalchemy.exc.NoInspectionAvailable):
        sqlalchemy.inspect(row)


def test_set_field_values_is_read_back_but_never_flushed(fresh_sqlite: str) -> None:
    # Given a constructed row
    row = construct(Delivery, delivery_values(), set())
    # When two of its values are written
    set_field_values(row, {"outcome": "suppressed", "reason": "inactive"})
    # Then its attributes and its dump read them
    assert (row.outcome, row.reason) == ("suppressed", "inactive")
    assert row.model_dump()["outcome"] == "suppressed"

    # Given a delivery a session tracks
    engine = create_engine(fresh_sqlite)
    SQLModel.metadata.create_all(engine)
    account = Account()
    notification = Notification(account_id=account.id, type="account.welcome",
                                occurrence="first", data={})
    delivery = Delivery(notification_id=notification.id, channel="in_app")
    with Session(engine) as session:
        session.add_all([account, notification, delivery])
        session.commit()
        session.refresh(delivery)
        # When its outcome is written past the ORM
        set_field_values(delivery, {"outcome": "suppressed"})
        # Then the instance reads it, and the session has nothing to write
        assert delivery.outcome == "suppressed"
        assert not session.dirty
        session.commit()
    with Session(engine) as session:
        stored = session.exec(select(Delivery.outcome)).one()
    assert stored == "queued"
    engine.dispose()
