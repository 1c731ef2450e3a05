"""Which deliveries an account's preferences let through: the resolution matrix (type ×
category × channel × required) through the API and a real channel worker, and the
document read when the worker runs, not when the event arrived (docs/api.md#preferences)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from herald.queue import running_worker
from herald.web import create_app
from providers.mock import MockProvider
from tests.support.pipeline.steps import account, event, settled
from tests.support.preferences.steps import patch_preferences, put_preferences, recorded
from tests.support.waiting import wait_for

QUEUES = ["notification-email", "notification-sms"]

WELCOME = ("account.welcome", {})
PROMO = ("promo.offer", {"headline": "Spring sale", "code": "SPRING10"})
ESIM = ("esim.ready", {"iccid": "8966000000000000001", "activation_code": "LPA:1$smdp.io$AB-1"})
RECEIPT = ("payment.receipt", {"amount": "12.50", "currency": "SAR", "order_id": "1001"})

#: Each case: the account's fields, its preference document, the event (type and data) and
#: its ``transactional`` (None: the type's own), and what each delivery must end as:
#: ``sent`` / ``delivered``, another gate's reason, or the setting that blocked it.
MATRIX: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, dict[str, Any]],
                        bool | None, dict[str, str]]] = {
    "nothing set: every channel on": (
        {}, {}, PROMO, None, {"email": "sent", "sms": "sent"}),
    "a channel off": (
        {}, {"channels": {"sms": False}}, WELCOME, None,
        {"email": "sent", "sms": "channels.sms", "in_app": "delivered"}),
    "in-app off": (
        {}, {"channels": {"in_app": False}}, WELCOME, None,
        {"email": "sent", "sms": "sent", "in_app": "channels.in_app"}),
    "a category on beats its channel off": (
        {}, {"channels": {"email": False, "in_app": False},
             "categories": {"transactional": {"email": True, "in_app": True}}}, WELCOME, None,
        {"email": "sent", "sms": "sent", "in_app": "delivered"}),
    "a category off": (
        {}, {"categories": {"marketing": {"sms": False}}}, PROMO, None,
        {"email": "sent", "sms": "categories.marketing.sms"}),
    "the category is the notification's, not its type's": (
        {}, {"categories": {"marketing": {"email": False, "in_app": False}}}, WELCOME, False,
        {"email": "categories.marketing.email", "sms": "sent",
         "in_app": "categories.marketing.in_app"}),
    "the other category is left alone": (
        {}, {"categories": {"marketing": {"email": False, "in_app": False}}}, WELCOME, None,
        {"email": "sent", "sms": "sent", "in_app": "delivered"}),
    "a type on beats its category off": (
        {}, {"categories": {"marketing": {"sms": False}},
             "types": {"promo.offer": {"sms": True}}}, PROMO, None,
        {"email": "sent", "sms": "sent"}),
    "a type off beats its channel on": (
        {}, {"channels": {"email": True}, "types": {"promo.offer": {"email": False}}}, PROMO,
        None, {"email": "types.promo.offer.email", "sms": "sent"}),
    "a type off beats its category on": (
        {}, {"categories": {"transactional": {"sms": True, "in_app": True}},
             "types": {"account.welcome": {"sms": False, "in_app": False}}}, WELCOME, None,
        {"email": "sent", "sms": "types.account.welcome.sms",
         "in_app": "types.account.welcome.in_app"}),
    "a type on beats its channel off": (
        {}, {"channels": {"email": False, "in_app": False},
             "types": {"account.welcome": {"in_app": True}}}, WELCOME, None,
        {"email": "channels.email", "sms": "sent", "in_app": "delivered"}),
    "another type's setting does not apply": (
        {}, {"types": {"promo.offer": {"email": False, "sms": False}}}, WELCOME, None,
        {"email": "sent", "sms": "sent", "in_app": "delivered"}),
    "a required channel beats its channel off": (
        {}, {"channels": {"email": False, "sms": False}}, ESIM, None,
        {"email": "sent", "sms": "channels.sms"}),
    "a required channel beats its category off": (
        {}, {"categories": {"transactional": {"email": False}}}, RECEIPT, None,
        {"email": "sent"}),
    "a required type's other channel may be off": (
        {}, {"types": {"esim.ready": {"sms": False}}}, ESIM, None,
        {"email": "sent", "sms": "types.esim.ready.sms"}),
    "the marketing opt-out comes first": (
        {"marketing_opt_out": True}, {"types": {"promo.offer": {"email": True}}}, PROMO, None,
        {"email": "opted_out", "sms": "opted_out"}),
    "an inactive account comes first": (
        {"active": False}, {"channels": {"sms": False}}, WELCOME, None,
        {"email": "inactive", "sms": "inactive", "in_app": "inactive"}),
}


def expected_record(expected: str) -> tuple[str, str | None, str | None]:
    """A case's expectation as the delivery records it: outcome, reason, last error."""
    if expected in ("sent", "delivered"):
        return expected, None, None
    if "." in expected:
        return "suppressed", "preference", f"preference {expected}"
    return "suppressed", expected, None


def test_the_most_specific_setting_wins_and_required_channels_always_go(
        pipeline: None) -> None:
    client = TestClient(create_app())
    # Given an account per case with its document, put whole or merged into an empty one
    notifications = {}
    for i, (name, (fields, document, (type_, data), transactional, _)) in enumerate(
            MATRIX.items()):
        account_id = account(client, **fields)
        (put_preferences if i % 2 else patch_preferences)(client, account_id, document)
        # When its event arrives
        extra = {} if transactional is None else {"transactional": transactional}
        notifications[name] = event(client, account_id, type_, f"case-{i}", data=data,
                                    **extra)
    # and the channel workers run
    with running_worker(QUEUES):
        for notification in notifications.values():
            wait_for(lambda n=notification: settled(client, n["id"]), timeout=30,
                     what="every delivery to settle")

    # Then each delivery ends as the most specific setting says, a required one sent
    got = {name: {d["channel"]: recorded(d["id"]) for d in n["deliveries"]}
           for name, n in notifications.items()}
    want = {name: {channel: expected_record(e) for channel, e in case[-1].items()}
            for name, case in MATRIX.items()}
    assert got == want
    # and the provider received exactly the deliveries that went out
    sent = sum(e == "sent" for case in MATRIX.values() for e in case[-1].values())
    assert len(MockProvider.sends()) == sent


def test_the_document_at_the_time_of_sending_counts(pipeline: None) -> None:
    client = TestClient(create_app())
    # Given two accounts: one with everything on, one with SMS off
    turned_off, turned_on = account(client), account(client)
    put_preferences(client, turned_on, {"channels": {"sms": False}})
    # and a promotion queued for each while that holds
    later_off = event(client, turned_off, PROMO[0], "spring", data=PROMO[1])
    later_on = event(client, turned_on, PROMO[0], "spring", data=PROMO[1])
    # When the first turns promotions by SMS off, and the second removes its setting,
    # before any worker runs
    patch_preferences(client, turned_off, {"types": {"promo.offer": {"sms": False}}})
    patch_preferences(client, turned_on, {"channels": {"sms": None}})
    with running_worker(QUEUES):
        for n in (later_off, later_on):
            wait_for(lambda n=n: settled(client, n["id"]), timeout=30,
                     what="every delivery to settle")

    # Then the worker obeyed the documents as they were when it sent
    def by_channel(n: dict[str, Any]) -> dict[str, tuple[str, str | None, str | None]]:
        return {d["channel"]: recorded(d["id"]) for d in n["deliveries"]}

    assert by_channel(later_off) == {
        "email": ("sent", None, None),
        "sms": ("suppressed", "preference", "preference types.promo.offer.sms")}
    assert by_channel(later_on) == {"email": ("sent", None, None),
                                    "sms": ("sent", None, None)}
