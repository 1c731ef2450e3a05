"""A notification whose every send fails, through real workers, with herald's logging at
DEBUG (docs/deployment.md, "Logging"): the account's address and number, and the provider's token,
appear nowhere in what the workers, the queue and Dramatiq wrote."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from herald.queue import queue, running_worker
from herald.web import create_app
from providers.mock import MockProvider
from tests.support.log_capture import herald_log_buffer, leaks
from tests.support.pipeline.steps import account, event
from tests.support.providers.fakes import FakeTwilio, use_herald_env
from tests.support.waiting import wait_for

EMAIL = "pipeline.leak.41c@example.com"
PHONE = "+966507774321"
TWILIO_SID = "AC" + "0123456789abcdef" * 2
TWILIO_TOKEN = "twilio-pipeline-secret-2e7a"


@pytest.fixture
def herald_log() -> Iterator[io.StringIO]:
    """herald's configured logging (JSON lines, DEBUG) written to a buffer."""
    with herald_log_buffer("json") as out:
        yield out


def test_failing_sends_through_real_workers_log_no_address_number_or_token(
        pipeline: None, herald_log: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    client = TestClient(create_app())
    with FakeTwilio(account_sid=TWILIO_SID, auth_token=TWILIO_TOKEN,
                    invalid_numbers=frozenset({PHONE})) as twilio:
        # Given Twilio refusing the account's number (echoing it) and the mock provider
        # failing its email once, then for good
        use_herald_env(monkeypatch, sms_provider="twilio", twilio_account_sid=TWILIO_SID,
                       twilio_auth_token=TWILIO_TOKEN, twilio_from_number="+15005550006",
                       twilio_base_url=twilio.url)
        MockProvider.script(EMAIL, "terminal")
        created = event(client, account(client, email=EMAIL, phone=PHONE),
                        channels=["email", "sms"])
        ids = {d["channel"]: d["id"] for d in created["deliveries"]}
        # When the workers run them
        with running_worker(["notification-email", "notification-sms"]):
            wait_for(lambda: all(queue(f"notification-{channel}").get(ids[channel]).state
                                 == "failed" for channel in ("email", "sms")),
                     timeout=30, what="both jobs to fail")
    # Then the failures were logged, by ids
    output = herald_log.getvalue()
    assert output.count('"outcome": "failed"') >= 2, output[-2000:]
    assert ids["sms"] in output and ids["email"] in output
    # and nothing personal or secret was
    assert leaks(output, EMAIL, PHONE, TWILIO_TOKEN) == []
