"""``/v1/accounts/{id}/preferences``: the stored document read, replaced and merge-patched;
what cannot be stored is refused with a 422 naming the key at fault, and changes nothing
(docs/api.md#preferences)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from actors.event_catalogue import EVENT_TYPES
from herald import settings
from herald.web import create_app
from tests.support.pipeline.steps import account

EMPTY = {"channels": {}, "categories": {}, "types": {}}
#: A document that every refused request below must leave as it is.
STORED = {"channels": {"sms": False}, "categories": {"marketing": {"email": False}},
          "types": {"promo.offer": {"push": True}}}


@pytest.fixture
def client(pipeline: None) -> TestClient:
    return TestClient(create_app())


def url(account_id: str) -> str:
    return f"/v1/accounts/{account_id}/preferences"


def read(client: TestClient, account_id: str) -> dict[str, Any]:
    response = client.get(url(account_id))
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_new_account_has_every_level_present_and_empty(client: TestClient) -> None:
    assert read(client, account(client)) == EMPTY


def test_put_replaces_the_whole_document(client: TestClient) -> None:
    # Given an account with a document
    account_id = account(client)
    assert client.put(url(account_id), json=STORED).json() == STORED
    # When another document is put
    answer = client.put(url(account_id), json={"types": {"esim.ready": {"sms": False}}})
    # Then it replaces the first whole: the levels it leaves out are empty
    expected = EMPTY | {"types": {"esim.ready": {"sms": False}}}
    assert (answer.status_code, answer.json()) == (200, expected)
    assert read(client, account_id) == expected


#: Each case: a merge patch applied to :data:`STORED`, and the document it leaves.
PATCHES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "a new setting merges beside the others": (
        {"channels": {"email": False}},
        STORED | {"channels": {"sms": False, "email": False}}),
    "a setting changes in place": (
        {"categories": {"marketing": {"email": True}}},
        STORED | {"categories": {"marketing": {"email": True}}}),
    "null removes one setting": (
        {"channels": {"sms": None}}, STORED | {"channels": {}}),
    "a type left with no setting is removed": (
        {"types": {"promo.offer": {"push": None}}}, STORED | {"types": {}}),
    "null removes a whole level": (
        {"categories": None, "types": {"account.welcome": {"sms": False}}},
        STORED | {"categories": {}, "types": {"promo.offer": {"push": True},
                                              "account.welcome": {"sms": False}}}),
    "an empty patch changes nothing": ({}, STORED),
}


@pytest.mark.parametrize("patch, expected", PATCHES.values(), ids=PATCHES.keys())
def test_patch_merges_nested_objects_and_null_removes_a_setting(
        client: TestClient, patch: dict[str, Any], expected: dict[str, Any]) -> None:
    # Given an account with a document
    account_id = account(client)
    client.put(url(account_id), json=STORED)
    # When a merge patch is sent
    answer = client.patch(url(account_id), json=patch,
                          headers={"Content-Type": "application/merge-patch+json"})
    # Then the stored document is the merge
    assert (answer.status_code, answer.json()) == (200, expected)
    assert read(client, account_id) == expected


#: Each case: a document (or merge patch) that cannot be stored, and the place the 422
#: names (its ``details[0].loc`` past ``body``).
REFUSED: dict[str, tuple[Any, list[str]]] = {
    "a required channel off": ({"types": {"esim.ready": {"email": False}}},
                               ["types", "esim.ready", "email"]),
    "another required channel off": ({"types": {"payment.receipt": {"email": False}}},
                                     ["types", "payment.receipt", "email"]),
    "an unknown type": ({"types": {"promo.offr": {"email": False}}}, ["types", "promo.offr"]),
    "an unknown channel": ({"channels": {"fax": False}}, ["channels", "fax"]),
    "an unknown category": ({"categories": {"billing": {"sms": False}}},
                            ["categories", "billing"]),
    "a value that is not a boolean": ({"channels": {"sms": "no"}}, ["channels", "sms"]),
    "an unknown level": ({"devices": {"sms": False}}, ["devices"]),
    "a level that is not an object": ({"types": ["promo.offer"]}, ["types"]),
}


@pytest.mark.parametrize("method", ["put", "patch"])
@pytest.mark.parametrize("document, where", REFUSED.values(), ids=REFUSED.keys())
def test_a_document_that_cannot_be_stored_is_422_naming_the_key_and_changes_nothing(
        client: TestClient, method: str, document: Any, where: list[str]) -> None:
    # Given an account with a document
    account_id = account(client)
    client.put(url(account_id), json=STORED)
    # When a document that cannot be stored is put, or merged into it
    answer = client.request(method.upper(), url(account_id), json=document)
    # Then it is refused, naming the place at fault (and never a value)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["loc"][1:len(where) + 1] == where, error
    assert error["message"].startswith(".".join(where)), error
    assert '"no"' not in answer.text and "'no'" not in answer.text
    # and nothing changed
    assert read(client, account_id) == STORED


def test_turning_a_required_channel_off_says_which_type_and_channel(
        client: TestClient) -> None:
    answer = client.put(url(account(client)), json={"types": {"esim.ready": {"email": False}}})
    assert answer.status_code == 422
    assert answer.json()["error"]["message"] == (
        "types.esim.ready.email: esim.ready is required on email: preferences cannot "
        "turn it off")


def test_a_required_channel_may_be_on(client: TestClient) -> None:
    account_id = account(client)
    document = EMPTY | {"types": {"esim.ready": {"email": True, "sms": False}}}
    assert client.put(url(account_id), json=document).json() == document


@pytest.mark.parametrize("method", ["get", "put", "patch"])
def test_an_unknown_account_is_404(client: TestClient, method: str) -> None:
    answer = client.request(method.upper(), url("no-such-account"),
                            json=None if method == "get" else {})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "account_not_found"


def test_the_routes_need_the_api_token(client: TestClient,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    account_id = account(client)
    monkeypatch.setenv("API_TOKEN", "preferences-token")
    settings.reset_settings()
    for method in ("GET", "PUT", "PATCH"):
        answer = client.request(method, url(account_id), json=STORED)
        assert answer.status_code == 401, (method, answer.text)
    answer = client.put(url(account_id), json=STORED,
                        headers={"Authorization": "Bearer preferences-token"})
    assert (answer.status_code, answer.json()) == (200, STORED)


def test_concurrent_patches_all_land(client: TestClient) -> None:
    # Given an account, and one patch per (type, channel), sent from four threads at once
    account_id = account(client)
    patches = [{"types": {type_: {channel: True}}} for type_ in EVENT_TYPES
               for channel in ("email", "sms", "push", "in_app")]
    start = threading.Barrier(4)

    def send(mine: list[dict[str, Any]]) -> list[int]:
        start.wait()
        return [client.patch(url(account_id), json=patch).status_code for patch in mine]

    with ThreadPoolExecutor(4) as pool:
        statuses = [s for done in pool.map(send, [patches[i::4] for i in range(4)])
                    for s in done]
    # Then every patch was answered 200, and none was lost to another's write
    assert statuses == [200] * len(patches)
    assert read(client, account_id)["types"] == {
        type_: dict.fromkeys(("email", "sms", "push", "in_app"), True) for type_ in EVENT_TYPES}
