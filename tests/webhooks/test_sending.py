"""One webhook message sent: signed so that the ``standardwebhooks`` package verifies it
(with both secrets during a rotation), sent to the address the guard checked and never
to what the name resolves to later, and each kind of answer read as the attempt it is
(docs/api.md#webhooks)."""

from __future__ import annotations

import ipaddress
import json
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from models.webhooks import new_secret
from providers import webhook_http
from providers.webhook_connections import Connections
from providers.webhook_http import Attempt, post_message, retry_after_s
from providers.webhook_target import Target, check_target
from tests.support.waiting import wait_for
from tests.webhooks.receiver import Receiver, running_receiver

BODY = json.dumps({"type": "delivery.sent", "timestamp": "2026-12-05T03:00:00Z",
                   "data": {"id": "d1"}}).encode()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as receiver:
        yield receiver


@pytest.fixture
def client() -> Iterator[Connections]:
    connections = Connections()
    yield connections
    connections.close()


def target(receiver: Receiver) -> Target:
    return check_target(receiver.url, allow_http=True, allow_private=True)


def send(client: Connections, target: Target, secrets: list[str],
         msg_id: str = "msg_1") -> Attempt:
    return post_message(client, target, msg_id=msg_id, timestamp=int(time.time()),
                        body=BODY, secrets=secrets)


def test_a_message_verifies_with_standard_webhooks(receiver: Receiver,
                                                   client: Connections) -> None:
    secret = new_secret()
    receiver.secrets = [secret, new_secret()]
    attempt = send(client, target(receiver), [secret], msg_id="msg_abc")
    assert attempt.ok and attempt.status_code == 200
    (got,) = receiver.received
    assert got.verified_by == (secret,) and got.headers["webhook-id"] == "msg_abc"
    assert got.payload == json.loads(BODY)


def test_during_a_rotation_both_secrets_verify(receiver: Receiver,
                                               client: Connections) -> None:
    old, new = new_secret(), new_secret()
    receiver.secrets = [old, new]
    send(client, target(receiver), [new, old])
    (got,) = receiver.received
    assert got.verified_by == (old, new)
    assert len(got.headers["webhook-signature"].split(" ")) == 2


def test_the_send_goes_to_the_checked_address_not_a_new_resolution(
        receiver: Receiver, client: Connections) -> None:
    # Given a target checked when its name resolved to the receiver's address; the name
    # resolves to nothing now (a rebinding DNS server could answer anything)
    port = urlsplit(receiver.url).port
    pinned = Target(url=f"http://hooks.invalid:{port}/hooks", scheme="http",
                    host="hooks.invalid", port=port or 80,
                    address=ipaddress.ip_address("127.0.0.1"))
    # When the message is sent
    attempt = send(client, pinned, [new_secret()])
    # Then it reached the checked address, naming the host it was meant for
    assert attempt.ok
    assert receiver.received[0].headers["host"] == f"hooks.invalid:{port}"


def tls_contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context whose certificate names hooks.test only, and a client context
    trusting that certificate as a root."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=hooks.test", "-addext", "subjectAltName=DNS:hooks.test",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    return served, ssl.create_default_context(cafile=str(cert))


def pinned(receiver: Receiver, host: str) -> Target:
    """``host``'s URL on the receiver's port, checked as resolving to 127.0.0.1."""
    parts = urlsplit(receiver.url)
    port = parts.port or 443
    return Target(url=f"{parts.scheme}://{host}:{port}/hooks", scheme=parts.scheme,
                  host=host, port=port, address=ipaddress.ip_address("127.0.0.1"))


def test_https_goes_to_the_checked_address_and_verifies_the_host_name(
        tmp_path: Path) -> None:
    # Given a TLS receiver whose certificate names hooks.test only, trusted as a root
    served, trusted = tls_contexts(tmp_path)
    with running_receiver(tls=served) as receiver:
        port = urlsplit(receiver.url).port or 443
        connections = Connections(trusted)
        # When a message is sent to hooks.test, pinned to the receiver's address
        attempt = send(connections, pinned(receiver, "hooks.test"), [new_secret()])
        # Then it arrived over TLS, naming its host
        assert attempt.ok, attempt.error
        assert receiver.received[0].headers["host"] == f"hooks.test:{port}"
        # And a host name the certificate does not carry is refused before any request
        refused = send(connections, pinned(receiver, "other.test"), [new_secret()])
        assert (refused.ok, refused.status_code) == (False, None)
        assert refused.error is not None and "certificate" in refused.error.lower()
        assert len(receiver.received) == 1
    connections.close()


def test_over_tls_too_an_attempt_reads_64_kib_and_lasts_its_deadline_at_most(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a TLS receiver that streams an endless body, then trickles a body a byte a
    # second, and the attempt's deadline made 2 s
    monkeypatch.setattr(webhook_http, "SEND_TIMEOUT_S", 2.0)
    served, trusted = tls_contexts(tmp_path)
    connections = Connections(trusted)
    with running_receiver(tls=served) as receiver:
        target = pinned(receiver, "hooks.test")
        endless = receiver.stream("close")
        trickled = receiver.trickle(b"0123456789", every_s=1.0, at_once=(
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n"))
        # When a message is sent to each
        too_large = send(connections, target, [new_secret()])
        started = time.monotonic()
        too_slow = send(connections, target, [new_secret()])
        took = time.monotonic() - started
        # Then the first stopped at 64 KiB, the second at its deadline, each connection
        # closed under the receiver's writing
        assert (too_large.status_code, too_large.error) == (
            200, "answer_too_large: the answer went past 64 KiB")
        assert (too_slow.status_code, too_slow.error) == (
            200, "timeout: no complete answer within 2 s")
        assert too_slow.duration_ms <= 2_500 and took < 3.5
        wait_for(lambda: endless.ended is not None and trickled.ended is not None,
                 timeout=10, what="the receiver's writing to end")
        assert endless.ended != "done" and trickled.ended != "done"
        assert endless.written < 16 * 1024 * 1024
    connections.close()


@pytest.mark.parametrize(("status", "headers", "retry_after"), [
    (500, {}, None), (302, {"location": "https://elsewhere.example/"}, None),
    (410, {}, None), (429, {"retry-after": "7"}, 7.0), (503, {"retry-after": "30"}, 30.0),
])
def test_an_answer_that_is_no_2xx_is_a_failed_attempt(
        receiver: Receiver, client: Connections, status: int, headers: dict[str, str],
        retry_after: float | None) -> None:
    receiver.answer(status, headers)
    attempt = send(client, target(receiver), [new_secret()])
    assert (attempt.ok, attempt.status_code, attempt.retry_after_s) == (
        False, status, retry_after)
    assert len(receiver.received) == 1  # a redirect is not followed


def test_no_answer_is_a_failed_attempt_without_a_status(client: Connections) -> None:
    closed = check_target("http://127.0.0.1:9/hooks", allow_http=True, allow_private=True)
    attempt = send(client, closed, [new_secret()])
    assert (attempt.ok, attempt.status_code) == (False, None)
    assert attempt.error


def test_retry_after_reads_seconds_and_dates() -> None:
    from datetime import UTC, datetime
    now = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
    assert retry_after_s("120", now) == 120
    assert retry_after_s("Sat, 05 Dec 2026 03:01:00 GMT", now) == 60
    assert retry_after_s("soon", now) is None and retry_after_s(None, now) is None
    assert retry_after_s("99999999", now) == 86_400
