"""In-app deliveries obey the account's preferences too. In-app has no channel job: its
gate is settled in the statement that persists the event, on PostgreSQL and on the
embedded SQLite, for single events, bulk events and batches alike
(docs/pipeline.md#events)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import col, select

from actors.batches import run
from herald.db import session as db_session
from models.notifications import Delivery, Notification
from tests.pipeline.test_in_app_gate import client, post_events
from tests.support.pipeline.steps import account
from tests.support.preferences.steps import put_preferences, recorded

__all__ = ["client"]

#: Each case: the account's document, the welcome event's ``transactional`` (None: the
#: type's own, transactional), and its in-app delivery: ``delivered`` or the setting
#: that blocked it.
CASES: dict[str, tuple[dict[str, Any], bool | None, str]] = {
    "nothing set": ({}, None, "delivered"),
    "another channel off": ({"channels": {"email": False, "sms": False}}, None, "delivered"),
    "in-app off": ({"channels": {"in_app": False}}, None, "channels.in_app"),
    "its category off": ({"categories": {"transactional": {"in_app": False}}}, None,
                         "categories.transactional.in_app"),
    "the other category off": ({"categories": {"marketing": {"in_app": False}}}, None,
                               "delivered"),
    "sent as marketing, marketing off": ({"categories": {"marketing": {"in_app": False}}},
                                         False, "categories.marketing.in_app"),
    "its category on beats the channel off": (
        {"channels": {"in_app": False}, "categories": {"transactional": {"in_app": True}}},
        None, "delivered"),
    "its type off beats its category on": (
        {"categories": {"transactional": {"in_app": True}},
         "types": {"account.welcome": {"in_app": False}}}, None,
        "types.account.welcome.in_app"),
    "its type on beats its category off": (
        {"categories": {"transactional": {"in_app": False}},
         "types": {"account.welcome": {"in_app": True}}}, None, "delivered"),
    "its type on beats the channel off": (
        {"channels": {"in_app": False}, "types": {"account.welcome": {"in_app": True}}},
        None, "delivered"),
    "another type off": ({"types": {"promo.offer": {"sms": False}}}, None, "delivered"),
}


def record(expected: str) -> tuple[str, str | None, str | None]:
    """The in-app delivery a case expects: outcome, reason, last error."""
    if expected == "delivered":
        return "delivered", None, None
    return "suppressed", "preference", f"preference {expected}"


def in_app_id(notification: dict[str, Any]) -> str:
    (found,) = [d for d in notification["deliveries"] if d["channel"] == "in_app"]
    return str(found["id"])


@pytest.mark.parametrize("bulk", [False, True], ids=["one at a time", "bulk"])
def test_in_app_follows_the_most_specific_setting_as_the_event_is_persisted(
        client: TestClient, bulk: bool) -> None:
    # Given an account per case with its document
    events = []
    for name, (document, transactional, _) in CASES.items():
        account_id = account(client)
        put_preferences(client, account_id, document)
        events.append({"type": "account.welcome", "account_id": account_id,
                       "occurrence": name, **({} if transactional is None
                                              else {"transactional": transactional})})
    # When a welcome event is posted for each
    answered = post_events(client, events, bulk)

    # Then each in-app delivery is settled as its document says, in the 202 and as stored
    want = {name: record(expected) for name, (_, _, expected) in CASES.items()}
    assert {name: (d["outcome"], d["reason"]) for name, d in zip(CASES, (
        next(d for d in n["deliveries"] if d["channel"] == "in_app") for n in answered),
        strict=True)} == {name: w[:2] for name, w in want.items()}
    assert {name: recorded(in_app_id(n)) for name, n in zip(CASES, answered,
                                                             strict=True)} == want


def test_a_batch_obeys_each_accounts_preferences_for_in_app(client: TestClient) -> None:
    # Given an account per case (a batch sends its type's own category)
    accounts = {}
    for name, (document, transactional, _) in CASES.items():
        if transactional is None:
            accounts[name] = account(client)
            put_preferences(client, accounts[name], document)
    # When a welcome batch to all of them runs
    response = client.post("/v1/batches", json={"type": "account.welcome", "data": {},
                                                  "account_ids": list(accounts.values())})
    assert response.status_code == 201, response.text
    run(response.json()["id"])

    # Then each account's in-app delivery is settled as its own document says
    with db_session() as session:
        in_app = dict(session.exec(
            select(Notification.account_id, Delivery.id)
            .join(Delivery, col(Delivery.notification_id) == col(Notification.id))
            .where(Notification.batch_id == response.json()["id"],
                   Delivery.channel == "in_app")).all())
    assert {name: recorded(in_app[account_id]) for name, account_id in accounts.items()} == {
        name: record(CASES[name][2]) for name in accounts}


def test_no_type_can_require_in_app() -> None:
    # in-app's gate is settled in SQL that reads no catalogue, so a required in-app
    # channel could not be honoured: declaring one is refused at once
    from actors.event_catalogue import EventType, WelcomeData

    with pytest.raises(ValueError, match="in_app cannot be a required channel"):
        EventType(name="account.alert", channels=("in_app",), transactional=True,
                  data=WelcomeData, required_channels=("in_app",))
