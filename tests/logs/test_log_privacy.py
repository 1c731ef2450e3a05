"""Nothing personal or secret in the logs (docs/deployment.md#logging): the error paths
driven for real — failing provider sends, a refused SFTP login, failed database inserts,
searches by email and phone, access lines of requests with query strings — with herald's
own logging at DEBUG, and every address, phone number, token and password the test used
looked for in what was written."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from dramatiq import Message
from dramatiq.broker import MessageProxy
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from herald.demo.sftp_server import start_sftp_server
from herald.queue.middleware import report
from herald.settings import Settings
from providers import (
    Channel,
    MockProvider,
    OneSignalProvider,
    OutboundMessage,
    SmtpProvider,
    TaqnyatProvider,
    TwilioProvider,
)
from providers.sftp import SftpConfigError, sftp_session
from tests.support.log_capture import herald_log_buffer, leaks
from tests.support.processes import REPO
from tests.support.providers.fakes import (
    FakeOneSignal,
    FakeTaqnyat,
    FakeTwilio,
    forget_herald_state,
    use_herald_env,
)
from tests.support.providers.smtp_relay import authenticate, start_relay
from tests.support.services import find_free_port
from tests.support.waiting import wait_for

# Every value below is unique to this test, so finding it anywhere in a log is a leak.
EMAIL = "leaky.person.7f3@example.com"
PHONE = "+966507771234"
TWILIO_TOKEN = "twilio-secret-9c1e"
TAQNYAT_KEY = "taqnyat-secret-4b2d"
ONESIGNAL_KEY = "onesignal-secret-77aa"
SMTP_PASSWORD = "smtp-secret-31f0"
SFTP_PASSWORD = "sftp-secret-e5d2"
API_TOKEN = "api-secret-0a9b"
ADMIN_TOKEN = "admin-secret-6c3f"
QUERY_TOKEN = "query-secret-58de"
WRONG = "wrong-secret-d04c"


@pytest.fixture
def herald_log() -> Iterator[io.StringIO]:
    """herald's configured logging (text lines, DEBUG) written to a buffer."""
    with herald_log_buffer("text") as out:
        yield out


def sms(to: str = PHONE) -> OutboundMessage:
    return OutboundMessage(channel=Channel.SMS, to=to, text="Your code is 4821",
                           idempotency_key="del-privacy-1")


def email(to: str = EMAIL) -> OutboundMessage:
    return OutboundMessage(channel=Channel.EMAIL, to=to, subject="Welcome",
                           text="Hello", idempotency_key="del-privacy-2")


def logged_as_the_ledger_does(result: Any) -> str:
    """Log a failed send as the worker does (its reason is the failure message); return
    the message so the caller checks it too."""
    reason = f"{result.failure_code}: {result.failure_message}"
    report("notification-sms", "job-privacy", "failed", "send", reason=reason)
    return reason


def test_failing_provider_sends_and_a_refused_sftp_login_log_no_address_or_secret(
        herald_log: io.StringIO, monkeypatch: pytest.MonkeyPatch, redis_url: str,
        tmp_path: Path) -> None:
    reasons: list[str] = []
    # Twilio: the number refused (Twilio echoes it), then a wrong token
    with FakeTwilio(account_sid="AC" + "0123456789abcdef" * 2, auth_token=TWILIO_TOKEN,
                    invalid_numbers=frozenset({PHONE})) as twilio:
        fields = {"twilio_account_sid": "AC" + "0123456789abcdef" * 2,
                  "twilio_from_number": "+15005550006", "twilio_base_url": twilio.url}
        for token in (TWILIO_TOKEN, WRONG):
            result = TwilioProvider(Settings(**fields, twilio_auth_token=token)).send(sms())
            assert not result.accepted
            reasons.append(logged_as_the_ledger_does(result))
    # Taqnyat: the number rejected, then a wrong key
    with FakeTaqnyat(api_key=TAQNYAT_KEY, sender="Herald",
                     rejected_numbers=frozenset({PHONE.lstrip("+")})) as taqnyat:
        for key in (TAQNYAT_KEY, WRONG):
            with closing(TaqnyatProvider(Settings(
                    taqnyat_api_key=key, taqnyat_sender="Herald",
                    taqnyat_base_url=taqnyat.url))) as provider:
                result = provider.send(sms())
            assert not result.accepted
            reasons.append(logged_as_the_ledger_does(result))
    # OneSignal: a refused request, then a wrong key
    with FakeOneSignal(app_id="5eb5a37e-b458-11e3-ac11-000c2940e62c",
                       api_key=ONESIGNAL_KEY) as onesignal:
        empty_sms = OutboundMessage(channel=Channel.SMS, to=PHONE, text="")
        for key, message in ((ONESIGNAL_KEY, empty_sms), (WRONG, email())):
            with closing(OneSignalProvider(Settings(
                    onesignal_app_id="5eb5a37e-b458-11e3-ac11-000c2940e62c",
                    onesignal_api_key=key, onesignal_base_url=onesignal.url))) as provider:
                result = provider.send(message)
            assert not result.accepted
            reasons.append(logged_as_the_ledger_does(result))
    # SMTP: the relay refuses the recipient, naming it; then a refused login
    relay, controller = start_relay()
    try:
        relay.rcpt_reply = f"550 5.1.1 <{EMAIL}>: Recipient address rejected"
        result = SmtpProvider(Settings(smtp_host="127.0.0.1", smtp_port=controller.port,
                                       smtp_starttls=False)).send(email())
        assert not result.accepted
        reasons.append(logged_as_the_ledger_does(result))
    finally:
        controller.stop()
    relay, controller = start_relay(authenticator=authenticate, auth_required=True,
                                    auth_require_tls=False)
    try:
        result = SmtpProvider(Settings(smtp_host="127.0.0.1", smtp_port=controller.port,
                                       smtp_starttls=False, smtp_username="herald",
                                       smtp_password=SMTP_PASSWORD)).send(email())
        assert not result.accepted
        reasons.append(logged_as_the_ledger_does(result))
    finally:
        controller.stop()
    # the mock provider's failure modes
    use_herald_env(monkeypatch, REDIS_URL=redis_url,
                   QUEUE_PREFIX=f"test-privacy-{uuid.uuid4().hex[:8]}")
    try:
        for behaviour in ("terminal", "transient:1"):
            MockProvider.script(PHONE, behaviour)
            result = MockProvider().send(sms())
            assert not result.accepted
            reasons.append(logged_as_the_ledger_does(result))
    finally:
        MockProvider.reset()
        forget_herald_state()
    # SFTP: a refused login, logged as the dispatch job logs a failed attempt
    with start_sftp_server(tmp_path / "sftp") as server, \
            pytest.raises(SftpConfigError) as refused, \
            sftp_session(server.settings(password=SFTP_PASSWORD)) as session:
        session.put("/outbound", "850_1.x12", b"ISA~")
    reasons.append(str(refused.value))
    report("supplier-dispatch", "job-privacy-sftp", "failed", "dispatch",
           reason=str(refused.value))

    # Dramatiq's consumer names a message it cannot ack by its payload: an email retry's
    # envelope (its own line, through its own logger and message classes)
    envelope = Message(queue_name="email-retry", actor_name="retry_email",
                       args=({"envelope": {"to": [EMAIL]}},), kwargs={}, options={})
    logging.getLogger("dramatiq.worker.ConsumerThread").warning(
        "Failed to post_process_message(%s) due to a connection error: %s",
        MessageProxy(envelope), "Connection reset")

    output = herald_log.getvalue()
    assert f"post_process_message(retry_email[{envelope.message_id}])" in output
    assert output.count("job failed") == len(reasons)  # the log was captured
    secrets = (EMAIL, PHONE, TWILIO_TOKEN, TAQNYAT_KEY, ONESIGNAL_KEY, SMTP_PASSWORD,
               SFTP_PASSWORD, WRONG)
    assert leaks(output, *secrets) == []
    assert [reason for reason in reasons if leaks(reason, *secrets)] == []


def test_a_failed_insert_in_a_job_logs_neither_its_parameters_nor_its_row(
        herald_log: io.StringIO, fresh_postgres: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from herald import db
    from models.notifications import Account

    # Given herald's engine on a database where an account's email is unique
    db.migrate(fresh_postgres)
    use_herald_env(monkeypatch, DATABASE_URL=fresh_postgres)
    with db.get_engine().begin() as connection:
        connection.execute(text("CREATE UNIQUE INDEX privacy_email ON accounts (email)"))
    try:
        # When a job inserts the same account twice and fails with the database's error
        with db.session() as session:
            session.add(Account(email=EMAIL, phone=PHONE))
        with pytest.raises(IntegrityError) as duplicate, db.session() as session:
            session.add(Account(email=EMAIL, phone=PHONE))
    finally:
        db.reset_engine()
        forget_herald_state()
    error = str(duplicate.value)
    report("notification-orchestration", "job-privacy-db", "failed", "persist", reason=error)

    # Then the error's statement carries no bound parameter, and the log line not the
    # row the database quotes in its DETAIL
    assert "[SQL:" in error and leaks(error.partition("[SQL:")[2], EMAIL, PHONE) == []
    output = herald_log.getvalue()
    assert "job failed" in output and "UniqueViolation" in output
    assert leaks(output, EMAIL, PHONE) == []


# -- a real `herald web` ---------------------------------------------------------------------
def _request(base: str, method: str, path: str, body: dict[str, Any] | None = None,
             token: str = API_TOKEN) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{base}{path}", data=data, method=method, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _answers(base: str) -> bool:
    try:
        return _request(base, "GET", "/healthz") == 200
    except OSError:
        return False


@pytest.fixture
def web(fresh_postgres: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``herald web`` at LOG_LEVEL=DEBUG on a fresh database in which an account's email
    is unique (so a second account with it is a duplicate insert) and a supplier named
    "Refused" breaks a check: its base URL and its stderr."""
    from herald import db

    db.migrate(fresh_postgres)
    engine = create_engine(fresh_postgres)
    with engine.begin() as connection:
        connection.execute(text("CREATE UNIQUE INDEX privacy_email ON accounts (email)"))
        connection.execute(text("ALTER TABLE suppliers ADD CONSTRAINT privacy_refused "
                                "CHECK (name <> 'Refused')"))
    engine.dispose()
    port = find_free_port()
    log = tmp_path / "web.log"
    env = {**os.environ, "DATABASE_URL": fresh_postgres, "REDIS_URL": redis_url,
           "BROKER": "redis", "PORT": str(port), "WEB_CONCURRENCY": "1",
           "LOG_LEVEL": "DEBUG", "LOG_FORMAT": "text", "API_TOKEN": API_TOKEN,
           "ADMIN_TOKEN": ADMIN_TOKEN}
    with log.open("wb") as output:
        process = subprocess.Popen([sys.executable, "-m", "herald.cli", "web", "--host",
                                    "127.0.0.1"], cwd=REPO, env=env,
                                   stdout=subprocess.DEVNULL, stderr=output)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: process.poll() is not None or _answers(base),
                 timeout=60, what="herald web to answer")
        assert process.poll() is None, log.read_text()[-2000:]
        yield base, log
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_herald_web_logs_no_query_string_address_or_bound_parameter(
        web: tuple[str, Path]) -> None:
    base, log = web
    account = {"email": EMAIL, "phone": PHONE}
    supplier = {"name": "Refused", "type": "sysco", "sftp": {
        "host": "sftp.supplier.test", "username": "herald", "password": SFTP_PASSWORD,
        "outbound_dir": "/in", "inbound_dir": "/out", "archive_dir": "/archive",
        "trust_on_first_use": True}}

    # a created account, then the same again: a duplicate insert
    assert _request(base, "POST", "/v1/accounts", account) == 201
    assert _request(base, "POST", "/v1/accounts", account) == 500
    # a supplier insert that fails, its SFTP password among the row's values
    assert _request(base, "POST", "/v1/suppliers", supplier) == 500
    # searches by email and phone, and a token in a query string (signed in, and not)
    for q in (EMAIL, PHONE):
        path = "/admin/search?" + urllib.parse.urlencode({"q": q})
        assert _request(base, "GET", path, token=ADMIN_TOKEN) == 200
        assert _request(base, "GET", path, token=WRONG) == 401
    assert _request(base, "GET", f"/healthz?token={QUERY_TOKEN}") == 200

    output = ""

    def written() -> bool:
        nonlocal output
        output = log.read_text()
        return output.count("GET /admin/search") == 4 and "GET /healthz 200" in output

    wait_for(written, timeout=10, what="the access lines")
    assert output.count("database error") == 2
    assert leaks(output, EMAIL, PHONE, SFTP_PASSWORD, API_TOKEN, ADMIN_TOKEN, QUERY_TOKEN,
                 WRONG) == []
