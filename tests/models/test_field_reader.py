"""``FieldReader`` reads a row's fields from its loaded values, and through the ORM when
one is not loaded (an attribute expired by a commit); ``snapshot`` rows read like any
other. The bulk event path and the views rely on both."""

from __future__ import annotations

import pytest
from sqlmodel import Session, SQLModel, create_engine

from models.base import FieldReader, snapshot, utcnow
from models.notifications import Account, Delivery, Notification

READ = FieldReader("id", "channel", "outcome", "attempts")


def test_expired_fields_are_read_through_the_orm(fresh_sqlite: str) -> None:
    # Given a delivery whose attributes a commit expired
    engine = create_engine(fresh_sqlite)
    SQLModel.metadata.create_all(engine)
    with Session(engine) as session:
        account = Account()
        notification = Notification(account_id=account.id, type="account.welcome",
                                    occurrence="first", data={})
        delivery = Delivery(notification_id=notification.id, channel="email",
                            outcome="queued")
        session.add_all([account, notification, delivery])
        session.commit()
        assert "channel" not in delivery.__dict__  # expired: not loaded

        # When the reader reads it, it gets the stored values, not an error
        assert READ(delivery) == (delivery.id, "email", "queued", 0)
    engine.dispose()


def test_a_snapshot_reads_its_given_values_and_its_defaults() -> None:
    now = utcnow()
    delivery = snapshot(Delivery, id="d-1", notification_id="n-1", channel="sms",
                        created_at=now, updated_at=now)

    assert READ(delivery) == ("d-1", "sms", "queued", 0)  # outcome and attempts defaulted
    assert (delivery.channel, delivery.provider, delivery.created_at) == ("sms", None, now)


def test_one_field_is_refused() -> None:
    with pytest.raises(ValueError, match="two fields or more"):
        FieldReader("id")
