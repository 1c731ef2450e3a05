"""Buckets under concurrency, on both databases (docs/pipeline.md#digests): concurrent
events of one key land in one bucket, a repeated occurrence racing itself is one item, and
the embedded default's SQLite digests and closes as PostgreSQL does."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from actors.digests import DigestResult, close_due_digests, trigger_digested
from actors.event_catalogue import EVENT_TYPES
from actors.orchestration import create_account
from herald import db, settings
from tests.support.digests.steps import (
    ACTIVITY,
    buckets_of,
    digest_activity,
    items_of,
    messages_of,
    move_time,
)
from tests.support.pipeline.steps import account
from tests.support.queue_app import close_queue_app, install_queue_app


def accept(account_id: str, occurrence: str) -> DigestResult:
    return trigger_digested(account_id=account_id, type=ACTIVITY, occurrence=occurrence,
                            data={"text": f"activity {occurrence}"})


def test_concurrent_events_of_one_account_land_in_one_bucket(client: TestClient) -> None:
    # Given an account with no digest open
    account_id = account(client)
    # When 40 events arrive at once, ten of them one occurrence sent four times
    occurrences = [f"e-{n}" for n in range(30)] + ["same"] * 10
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda o: accept(account_id, o), occurrences))
    # Then one bucket holds one item per distinct occurrence
    [bucket] = buckets_of(account_id)
    assert {r.bucket_id for r in results} == {bucket.id}
    assert bucket.item_count == 31 == len(items_of(account_id))
    assert sum(r.created for r in results) == 31
    # and each new event saw its own count: none was lost or doubled
    assert sorted(r.items for r in results if r.created) == list(range(1, 32))


def test_a_data_key_makes_one_digest_per_value_of_the_field(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given activity digested per account and link
    digest_activity(monkeypatch, key="data.url")
    account_id = account(client)
    # When events for two links arrive, interleaved
    for n in range(6):
        trigger_digested(account_id=account_id, type=ACTIVITY, occurrence=f"e-{n}",
                         data={"text": f"comment {n}", "url": f"https://app.example.com/{n % 2}"})
    # Then each link has its digest of three events
    buckets = buckets_of(account_id)
    assert sorted(b.key for b in buckets) == ["url=https://app.example.com/0",
                                              "url=https://app.example.com/1"]
    assert [b.item_count for b in buckets] == [3, 3]


def test_a_type_digested_by_an_unknown_field_is_refused() -> None:
    # Given a digest keyed on a field the type's data does not have / Then it cannot exist
    spec = EVENT_TYPES[ACTIVITY]
    assert spec.digest is not None
    with pytest.raises(ValueError, match="digest key"):
        dataclasses.replace(spec, digest=dataclasses.replace(spec.digest, key="data.colour"))


def test_a_digested_type_cannot_be_sent_as_a_batch(client: TestClient) -> None:
    # Given an account / When a batch of activity is asked for
    response = client.post("/v1/batches", json={"type": ACTIVITY, "account_ids": [account(client)],
                                                "data": {"text": "hello"}})
    # Then it is refused: a digest is made of events, one by one
    assert response.status_code == 422
    assert "digested" in response.json()["error"]["message"]


@pytest.fixture
def on_sqlite(monkeypatch: pytest.MonkeyPatch, fresh_sqlite: str,
              redis_url: str) -> Iterator[None]:
    """herald on a SQLite file of its own (the embedded default's database)."""
    for name, value in {"DATABASE_URL": fresh_sqlite, "REDIS_URL": redis_url,
                        "QUEUE_PREFIX": f"s{uuid.uuid4().hex[:10]}",
                        "EMAIL_PROVIDER": "mock", "LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(name, value)
    settings.reset_settings()
    db.reset_engine()
    db.migrate(fresh_sqlite)
    install_queue_app()
    yield
    db.reset_engine()
    close_queue_app()
    settings.reset_settings()


def test_sqlite_digests_concurrent_events_and_closes_each_bucket_once(on_sqlite: None) -> None:
    # Given an account on SQLite
    account_id = create_account(email="sqlite@example.com").id
    # When events arrive at once, one repeated
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda o: accept(account_id, o),
                                [f"e-{n}" for n in range(12)] + ["e-0"]))
    # Then they joined one bucket, the repeat adding nothing
    [bucket] = buckets_of(account_id)
    assert {r.bucket_id for r in results} == {bucket.id}
    assert bucket.item_count == 12
    # and when the window ends, two sweeps close it once: one message of 12 events
    move_time(timedelta(hours=1, seconds=1))
    with ThreadPoolExecutor(max_workers=2) as pool:
        closed = list(pool.map(lambda _: close_due_digests(), range(2)))
    assert sum(closed) == 1
    [message] = messages_of(account_id)
    assert len(message.data["events"]) == 12
    assert buckets_of(account_id)[0].notification_id == message.id
