"""An account's ``timezone`` and ``quiet_hours`` through ``/v1/accounts`` (docs/api.md#quiet-hours):
stored as given, cleared by null, and a bad value refused with 422 naming the field,
nothing changed."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

WEEKLY = {"fri": [{"start": "23:00", "end": "09:00"}],
          "sat": [{"start": "12:00", "end": "14:00"}, {"start": "23:00", "end": "10:00"}]}


def create(client: TestClient, **fields: Any) -> Any:
    return client.post("/v1/accounts", json={"email": "amal@example.com", **fields})


def test_timezone_and_quiet_hours_are_stored_shown_and_cleared(client: TestClient) -> None:
    # Given an account created with a time zone and daily quiet hours
    created = create(client, timezone="Europe/Berlin",
                     quiet_hours={"start": "22:00", "end": "07:30"})
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["timezone"], body["quiet_hours"]) == (
        "Europe/Berlin", {"start": "22:00", "end": "07:30"})
    # When they change to per-weekday windows and another zone
    changed = client.patch(f"/v1/accounts/{body['id']}",
                           json={"timezone": "America/New_York", "quiet_hours": WEEKLY})
    assert changed.status_code == 200, changed.text
    assert (changed.json()["timezone"], changed.json()["quiet_hours"]) == (
        "America/New_York", WEEKLY)
    # When a PATCH leaves them out they stay; null clears them
    assert client.patch(f"/v1/accounts/{body['id']}",
                        json={"locale": "ar"}).json()["quiet_hours"] == WEEKLY
    cleared = client.patch(f"/v1/accounts/{body['id']}",
                           json={"timezone": None, "quiet_hours": None}).json()
    assert (cleared["timezone"], cleared["quiet_hours"]) == (None, None)
    # and an account created without them has none
    plain = create(client).json()
    assert (plain["timezone"], plain["quiet_hours"]) == (None, None)


BAD = [
    ({"timezone": "Mars/Olympus_Mons"}, "timezone: not a known IANA time zone"),
    ({"timezone": "../../../etc/passwd"}, "timezone: not a known IANA time zone"),
    ({"timezone": "Europe/../../etc/hosts"}, "timezone: not a known IANA time zone"),
    ({"quiet_hours": {"start": "22:00", "end": "22:00"}}, "start and end are the same"),
    ({"quiet_hours": {"start": "25:00", "end": "07:00"}}, "quiet_hours.start: not a time"),
    ({"quiet_hours": {"mon": [{"start": "22:00"}]}}, "quiet_hours.mon[0]: must be"),
    ({"quiet_hours": {"someday": []}}, "quiet_hours: unknown key 'someday'"),
    ({"quiet_hours": {"mon": "22:00-07:00"}}, "quiet_hours.mon: must be a list"),
]


@pytest.mark.parametrize(("fields", "message"), BAD)
def test_a_bad_timezone_or_quiet_hours_is_422_naming_the_field_and_changes_nothing(
        client: TestClient, fields: dict[str, Any], message: str) -> None:
    # A create is refused
    refused = create(client, **fields)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "invalid_account"
    assert message in refused.json()["error"]["message"]
    # and a change is refused, the account as it was
    account = create(client, timezone="Asia/Riyadh",
                     quiet_hours={"start": "22:00", "end": "07:00"}).json()
    patched = client.patch(f"/v1/accounts/{account['id']}", json={**fields, "locale": "ar"})
    assert patched.status_code == 422, patched.text
    assert message in patched.json()["error"]["message"]
    again = client.patch(f"/v1/accounts/{account['id']}", json={}).json()
    assert (again["timezone"], again["quiet_hours"], again["locale"]) == (
        "Asia/Riyadh", {"start": "22:00", "end": "07:00"}, "en")


@pytest.mark.parametrize("value", [7, ["22:00", "07:00"], "22:00-07:00", True])
def test_a_quiet_hours_of_the_wrong_type_is_422(client: TestClient, value: Any) -> None:
    response = create(client, quiet_hours=value)
    assert response.status_code == 422, response.text
