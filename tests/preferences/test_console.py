"""The operator console's drill-down of a delivery a preference blocked says which
setting blocked it (docs/console.md#search)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from herald import settings
from herald.queue import running_worker
from herald.web import create_app
from tests.support.pipeline.steps import account, event, settled
from tests.support.preferences.steps import put_preferences
from tests.support.waiting import wait_for

ADMIN = {"Authorization": "Bearer preferences-admin-token"}


def drill_down(client: TestClient, delivery_id: str) -> dict[str, Any]:
    """The console's search result of one delivery."""
    answer = client.get("/admin/search", params={"q": delivery_id}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    (found,) = [r for r in answer.json()["results"]
                if r["kind"] == "delivery" and r["id"] == delivery_id]
    return dict(found)


def test_the_drill_down_names_the_setting_that_blocked_a_delivery(
        pipeline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADMIN_TOKEN", ADMIN["Authorization"].split()[1])
    settings.reset_settings()
    client = TestClient(create_app())
    # Given an account that turned promotions by SMS off, and in-app altogether
    account_id = account(client)
    put_preferences(client, account_id, {"channels": {"in_app": False},
                                         "types": {"promo.offer": {"sms": False}}})
    # When a promotion and a welcome reach it and the workers run
    promo = event(client, account_id, "promo.offer", "spring",
                  data={"headline": "Spring sale", "code": "SPRING10"})
    welcome = event(client, account_id)
    with running_worker(["notification-email", "notification-sms"]):
        for n in (promo, welcome):
            wait_for(lambda n=n: settled(client, n["id"]), timeout=30,
                     what="every delivery to settle")
    ids = {(n["type"], d["channel"]): d["id"] for n in (promo, welcome)
           for d in n["deliveries"]}

    # Then each blocked delivery's drill-down says the setting, in its summary and timeline
    sms = drill_down(client, ids["promo.offer", "sms"])
    assert sms["summary"] == "sms delivery: suppressed (preference types.promo.offer.sms)"
    outcome = sms["timeline"][-1]
    assert (outcome["event"], outcome["detail"]["reason"], outcome["detail"]["last_error"]) == (
        "suppressed", "preference", "preference types.promo.offer.sms")
    in_app = drill_down(client, ids["account.welcome", "in_app"])
    assert in_app["summary"] == "in_app delivery: suppressed (preference channels.in_app)"
    # and one that went out says so as before
    assert drill_down(client, ids["promo.offer", "email"])["summary"].startswith(
        "email delivery: sent")
