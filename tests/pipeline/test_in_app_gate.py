"""In-app deliveries obey the gates email and SMS obey: an inactive account, and an
opted-out account sent a marketing event, get no in-app message. In-app has no queue, so
its gate is settled when the event is persisted (docs/pipeline.md#events), one at a time
and in bulk, on PostgreSQL and on the embedded SQLite; the 202 and a later GET agree, and
list the deliveries in one order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from herald import db, settings
from herald.web import create_app
from tests.support.pipeline.steps import account

#: Each recipient: its account's fields, the event's ``transactional``, and what its
#: in-app delivery must be (outcome, reason).
RECIPIENTS: dict[str, tuple[dict[str, Any], bool | None, tuple[str, str | None]]] = {
    "opted out, sent as marketing": ({"marketing_opt_out": True}, False,
                                     ("suppressed", "opted_out")),
    "opted out, transactional": ({"marketing_opt_out": True}, None, ("delivered", None)),
    "inactive": ({"active": False}, None, ("suppressed", "inactive")),
    "inactive, sent as marketing": ({"active": False}, False, ("suppressed", "inactive")),
    "open, sent as marketing": ({}, False, ("delivered", None)),
}


@pytest.fixture(params=["postgresql", "sqlite"])
def client(request: pytest.FixtureRequest, pipeline: None, monkeypatch: pytest.MonkeyPatch,
           tmp_path: Path) -> Iterator[TestClient]:
    """The app on PostgreSQL, or on the embedded default's SQLite file."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/herald.db"
        db.migrate(url)
        monkeypatch.setenv("DATABASE_URL", url)
        settings.reset_settings()
        db.reset_engine()
    with TestClient(create_app()) as test_client:
        yield test_client
    db.reset_engine()


def post_events(client: TestClient, events: list[dict[str, Any]],
                bulk: bool) -> list[dict[str, Any]]:
    """The notifications the API answered for ``events``, one request each or in one."""
    if not bulk:
        answers = [client.post("/v1/events", json=e) for e in events]
        assert all(a.status_code == 202 for a in answers), [a.text for a in answers]
        return [a.json() for a in answers]
    answer = client.post("/v1/events/bulk", json={"events": events})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert all(r["status"] == 202 for r in results), results
    return [r["notification"] for r in results]


def in_app(notification: dict[str, Any]) -> tuple[str, str | None]:
    (found,) = [d for d in notification["deliveries"] if d["channel"] == "in_app"]
    return found["outcome"], found["reason"]


@pytest.mark.parametrize("bulk", [False, True], ids=["one at a time", "bulk"])
def test_in_app_is_gated_like_email_and_sms_when_the_event_is_persisted(
        client: TestClient, bulk: bool) -> None:
    # Given accounts inactive, opted out and open
    events = [{"type": "account.welcome", "account_id": account(client, **fields),
               "occurrence": "signup",
               **({} if transactional is None else {"transactional": transactional})}
              for fields, transactional, _ in RECIPIENTS.values()]

    # When a welcome event is posted for each
    answered = post_events(client, events, bulk)

    # Then each in-app delivery is what the gates say, in the 202 and when read again
    expected = {name: outcome for name, (_, _, outcome) in RECIPIENTS.items()}
    assert dict(zip(RECIPIENTS, map(in_app, answered), strict=True)) == expected
    read = [client.get(f"/v1/notifications/{n['id']}").json() for n in answered]
    assert dict(zip(RECIPIENTS, map(in_app, read), strict=True)) == expected
    # And the GET lists the deliveries exactly as the 202 did, in the same order
    assert read == answered


def test_deliveries_come_back_in_one_order_whatever_order_they_were_asked_in(
        client: TestClient) -> None:
    # Given an event that asks for its channels in another order than the type's
    event = {"type": "account.welcome", "account_id": account(client),
             "occurrence": "signup", "channels": ["in_app", "sms", "email"]}

    # When it is posted, then read back
    (answered,) = post_events(client, [event], bulk=False)
    read = client.get(f"/v1/notifications/{answered['id']}").json()

    # Then both list the deliveries in the channels' one order (email, SMS, in-app, push)
    assert [d["channel"] for d in answered["deliveries"]] == ["email", "sms", "in_app"]
    assert read["deliveries"] == answered["deliveries"]
