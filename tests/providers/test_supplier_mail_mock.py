"""Supplier email on the embedded default with no SMTP_HOST (the README's tour, which has
no mail relay) goes to the mock provider's mail store, as notification email does;
anywhere else, or once SMTP_HOST is set, it goes through SMTP."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from herald.settings import Settings
from providers.mock import MockProvider
from providers.supplier_mail import mail_goes_to_mock, send_supplier_email
from tests.support.purchasing.documents import COSTCO, COSTCO_CC, SENDER, line, order
from tests.support.queue_app import close_queue_app, follow_settings
from tests.support.reset import reset_herald


@pytest.fixture
def mock_store(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Iterator[None]:
    """The mock's mail store on the test Redis, under a queue prefix of its own."""
    monkeypatch.delenv("SMTP_HOST", raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("QUEUE_PREFIX", f"sm{uuid.uuid4().hex[:10]}")
    reset_herald()
    follow_settings()
    yield
    MockProvider.reset()
    reset_herald()
    close_queue_app()


def test_only_the_embedded_default_without_smtp_host_mails_the_mock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMTP_HOST", raising=False)
    assert mail_goes_to_mock(Settings(redis_url="", redis_sentinels=""))
    # SMTP_HOST set, even to its default: the operator means that relay
    assert not mail_goes_to_mock(Settings(redis_url="", redis_sentinels="",
                                          smtp_host="localhost"))
    # a deployment (its own Redis or Sentinels) with SMTP_HOST forgotten fails loudly
    assert not mail_goes_to_mock(Settings(redis_url="redis://redis.example:6379/0"))
    assert not mail_goes_to_mock(Settings(redis_url="", redis_sentinels="s1:26379"))


@pytest.mark.usefixtures("mock_store")
def test_the_order_email_lands_in_the_mock_mail_store_whole() -> None:
    # Given settings like the tour's: embedded Redis, no SMTP_HOST (the send itself uses
    # this process's mock store, on the test Redis)
    settings = Settings(redis_url="", redis_sentinels="", email_from=SENDER)
    document = order(line(1), line(2))

    # When the order is emailed to Costco
    sent = send_supplier_email(document, to=COSTCO, cc=COSTCO_CC,
                               supplier_name="Costco Business Center", settings=settings)

    # Then one message is in the mock's store, with every line, and it is the reference
    [record] = MockProvider.sends()
    assert record["outcome"] == "ok"
    assert sent.reference == record["provider_message_id"]
    assert (record["channel"], record["to"], record["cc"], record["from"]) == (
        "email", COSTCO, list(COSTCO_CC), SENDER)
    assert record["subject"] == "Purchase order PO-1042 — Lucille Downtown"
    assert record["html"] is True
    for expected in ("PO-1042", "Lucille Downtown", "CO-7001", "CO-7002",
                     "Costco Business Center"):
        assert expected in record["text"]
    assert sent.audit == {"subject": record["subject"], "recipients": [COSTCO, *COSTCO_CC]}
