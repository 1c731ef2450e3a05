"""The delivery's hot-path statements (``herald.db.Prepared``) on real PostgreSQL and SQLite:
the same transitions, types converted both ways, errors and transactions as
``Connection.execute`` has them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import Engine, Float, Numeric, cast, event, func, literal, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from herald import db
from herald.db import Prepared, libpq
from herald.settings import reset_settings
from models.base import new_id, snapshot, utcnow
from models.notifications import (
    Account,
    ClaimVerdict,
    Delivery,
    Notification,
    Outcome,
    claim_delivery,
    persist_notification,
    record_delivery_outcome,
    stamp_handoffs,
    still_claimed,
)


@pytest.fixture
def database(monkeypatch: pytest.MonkeyPatch, empty_database: str) -> Iterator[str]:
    """A migrated, empty database of each kind, as herald's engines."""
    monkeypatch.setenv("DATABASE_URL", empty_database)
    reset_settings()
    db.reset_engine()
    db.migrate()
    yield empty_database
    db.reset_engine()
    reset_settings()


def _notification(account_id: str, occurrence: str = "signup",
                  channels: tuple[str, ...] = ("email", "sms"),
                  ) -> tuple[Notification, list[Delivery]]:
    now = utcnow()
    notification = snapshot(Notification, id=new_id(), account_id=account_id,
                            type="account.welcome", occurrence=occurrence, urgency="normal",
                            transactional=False, data={"plan": "gold", "n": [1, 2]},
                            batch_id=None, created_at=now)
    deliveries = [snapshot(Delivery, id=new_id(), notification_id=notification.id,
                           channel=channel, outcome=Outcome.QUEUED.value, created_at=now,
                           updated_at=now) for channel in channels]
    return notification, deliveries


def _account() -> str:
    with db.session() as session:
        account = Account(email="a@example.com", phone="+966501234567", locale="ar")
        session.add(account)
        session.flush()
        return account.id


def _stored(delivery_id: str) -> Delivery:
    with db.session() as session:
        found = session.get(Delivery, delivery_id)
        assert found is not None
        return found


def test_a_delivery_goes_from_claim_to_sent_the_same_way_on_both(database: str) -> None:
    notification, (email, sms) = _notification(_account())
    persist_notification(notification, [email, sms])
    with db.autocommit() as connection:
        stamp_handoffs(connection, [email.id, sms.id])
        claim = claim_delivery(connection, email.id)
        # the recipient comes back with the claim, every value in its Python type
        assert claim.verdict is ClaimVerdict.CLAIMED and claim.recipient is not None
        assert claim.recipient == {
            "type": "account.welcome", "data": {"plan": "gold", "n": [1, 2]},
            "transactional": False, "active": True, "marketing_opt_out": False,
            "email": "a@example.com", "phone": "+966501234567",
            "push_subscription_id": None, "locale": "ar", "urgency": "normal",
            "preferences": None, "timezone": None, "quiet_hours": None, "attempts_log": None}
        assert claim.token is not None and still_claimed(connection, email.id, claim.token)
        # a live claim turns a second attempt away until it would be stale
        busy = claim_delivery(connection, email.id)
        assert busy.verdict is ClaimVerdict.BUSY and busy.retry_in is not None
        assert timedelta(seconds=59) < busy.retry_in <= timedelta(seconds=60)
        # an older attempt's token writes nothing; this attempt's does
        stale = claim.token - timedelta(seconds=1)
        assert not record_delivery_outcome(connection, email.id, token=stale,
                                           outcome=Outcome.FAILED_TERMINAL, reason="x")
        assert record_delivery_outcome(connection, email.id, token=claim.token,
                                       outcome=Outcome.SENT, provider="mock",
                                       provider_message_id="m-1", count_attempt=True)
        assert claim_delivery(connection, email.id).verdict is ClaimVerdict.FINAL
        assert claim_delivery(connection, new_id()).verdict is ClaimVerdict.MISSING
    sent = _stored(email.id)
    assert (sent.outcome, sent.provider_message_id, sent.attempts) == ("sent", "m-1", 1)
    # timestamps come back aware and in UTC, equal to what was written
    assert sent.claimed_at == claim.token and sent.claimed_at.tzinfo is UTC
    assert sent.queued_at is not None and _stored(sms.id).queued_at == sent.queued_at
    assert _stored(sms.id).outcome == "queued"


def test_a_refused_notification_persists_nothing(database: str) -> None:
    account_id = _account()
    persist_notification(*_notification(account_id))
    # the same (account, type, occurrence) again, and an account that does not exist
    for refused in (_notification(account_id), _notification(new_id(), occurrence="x")):
        with pytest.raises(IntegrityError):
            persist_notification(*refused)
    with db.session() as session:
        counts = [session.execute(select(func.count()).select_from(model)).scalar_one()
                  for model in (Notification, Delivery)]
    assert counts == [1, 2]


def test_a_write_in_a_transaction_lands_only_when_it_commits(database: str) -> None:
    notification, deliveries = _notification(_account())
    persist_notification(notification, deliveries)
    delivery_id = deliveries[0].id
    with db.get_engine().connect() as connection:
        stamp_handoffs(connection, [delivery_id])  # the caller commits, or not
        connection.rollback()
    assert _stored(delivery_id).queued_at is None
    with db.get_engine().connect() as connection:
        stamp_handoffs(connection, [delivery_id])
        connection.commit()
    assert _stored(delivery_id).queued_at is not None
    # a session's helpers run in its transaction, and commit it
    with db.session() as session:
        assert claim_delivery(session, delivery_id).verdict is ClaimVerdict.CLAIMED
    assert _stored(delivery_id).outcome == "sending"


def test_statement_listeners_see_the_hot_path(database: str) -> None:
    seen: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        seen.append(statement.split()[0])

    event.listen(Engine, "before_cursor_execute", count)
    try:
        notification, deliveries = _notification(_account())
        persist_notification(notification, deliveries)
        with db.autocommit() as connection:
            claim_delivery(connection, deliveries[0].id)
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    # PostgreSQL: the notification's INSERT rides in a WITH of its deliveries' INSERT
    persisted = ["WITH"] if db.is_postgres() else ["INSERT", "INSERT"]
    claimed = ["UPDATE"] if db.is_postgres() else ["UPDATE", "SELECT"]
    assert seen[-len(persisted + claimed):] == persisted + claimed


def test_pyformat_placeholders_become_libpq_numbers() -> None:
    statement = libpq.Statement.from_pyformat(
        b"UPDATE t SET a = %(now)s, b = %(now)s WHERE id = %(id)s AND c LIKE 'x%%'")
    assert statement.sql == b"UPDATE t SET a = $1, b = $1 WHERE id = $2 AND c LIKE 'x%'"
    assert statement.names == ("now", "id")


def _postgres_only() -> None:
    if not db.is_postgres():
        pytest.skip("statements go to libpq directly on PostgreSQL only")


def test_statements_are_prepared_again_after_a_deallocate_all(database: str) -> None:
    _postgres_only()
    notification, deliveries = _notification(_account())
    persist_notification(notification, deliveries)
    with db.autocommit() as connection:
        claim = claim_delivery(connection, deliveries[0].id)
        assert claim.token is not None and still_claimed(connection, deliveries[0].id,
                                                         claim.token)
        # e.g. a pooler's reset, or psycopg clearing its own cache after a DROP
        connection.exec_driver_sql("DEALLOCATE ALL")
        assert still_claimed(connection, deliveries[0].id, claim.token)
        assert record_delivery_outcome(connection, deliveries[0].id, token=claim.token,
                                       outcome=Outcome.SENT, provider="mock")
    assert _stored(deliveries[0].id).outcome == "sent"


def test_a_connection_the_server_dropped_is_replaced(database: str) -> None:
    _postgres_only()
    notification, deliveries = _notification(_account())
    persist_notification(notification, deliveries)
    with db.autocommit() as connection:
        backend = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        with db.get_engine().connect() as other:
            other.execute(select(func.pg_terminate_backend(backend)))
        with pytest.raises(DBAPIError) as raised:
            claim_delivery(connection, deliveries[0].id)
        assert raised.value.connection_invalidated
    # nothing was claimed, and the pool hands out a working connection again
    with db.autocommit() as connection:
        assert claim_delivery(connection, deliveries[0].id).verdict is ClaimVerdict.CLAIMED


def test_numeric_columns_read_as_the_types_they_declare(database: str) -> None:
    # Given a statement compiled before it first runs (PostgreSQL's numeric readers
    # otherwise choose by the result's type code)
    amount = Prepared(select(cast(literal("12.3400"), Numeric(18, 4)).label("decimal"),
                             cast(literal("0.25"), Numeric(18, 4, asdecimal=False))
                             .label("float"),
                             cast(literal("1.5"), Float()).label("double")))

    # Then each reads as its type says, on each database
    with db.autocommit() as connection:
        row = amount.run(connection, {}).first()
    assert row == {"decimal": Decimal("12.3400"), "float": 0.25, "double": 1.5}
    assert (type(row["decimal"]), type(row["float"]), type(row["double"])) == (
        Decimal, float, float)
