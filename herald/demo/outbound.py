"""The demo's outbound phase: a digest (docs/api.md#digests) and a webhook endpoint
receiving signed messages (docs/api.md#webhooks), through the HTTP API and the real
workers in this process.

1. A receiver starts on loopback: the customer's system. It checks each message's
   Standard Webhooks signature with the endpoint's secret, as a customer's code would
   (its own few lines, not herald's signer), and notes each ``webhook-id``.
2. ``POST /v1/webhook-endpoints`` subscribes it to ``delivery.sent``.
3. ``--digest-events N`` ``account.activity`` events for one account go into one digest:
   each 202 answer names the digest and how many items it holds. A digest closes when it
   holds ``max_items`` (50) or when its window (an hour) ends; with fewer events the
   phase moves this process's queue time to the close (docs/queue.md#queue-time).
4. The close makes one notification listing every event (email + in-app); the email
   worker sends it, and the relay POSTs the ``delivery.sent`` message, signed.

It checks that the digest made exactly one notification holding all N events, that its
email was sent, and that the receiver got that delivery's message once, its signature
verified. Like the other phases it runs on its own key prefix.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rich.console import Console

from herald.demo.notifications import environment, own_namespace

#: Events the phase fires unless told otherwise: one full digest (``max_items``).
DEFAULT_DIGEST_EVENTS = 50
MAX_DIGEST_EVENTS = 1000
#: The queues this phase runs: the close, the email and the relay.
QUEUES = ("notification-orchestration", "notification-email", "webhook-delivery")
#: How long the digest gets to close, be sent, and its message to arrive.
DEADLINE_S = 60.0


class Receiver:
    """What the demo's receiver saw: each message's id, type and whether it verified."""

    def __init__(self) -> None:
        self.secret = ""
        #: (webhook-id, type, the resource's id, signature verified) of each message
        self.seen: list[tuple[str, str, str, bool]] = []
        self.lock = threading.Lock()
        self.url = ""

    def verified(self, headers: dict[str, str], body: bytes) -> bool:
        """True when one of the ``v1,`` signatures is the HMAC-SHA256 of
        ``{id}.{timestamp}.{body}`` under the endpoint's secret (Standard Webhooks)."""
        key = base64.b64decode(self.secret.removeprefix("whsec_"))
        signed = f"{headers.get('webhook-id')}.{headers.get('webhook-timestamp')}.".encode()
        expected = base64.b64encode(hmac.new(key, signed + body, hashlib.sha256).digest())
        return any(hmac.compare_digest(part.removeprefix("v1,").encode(), expected)
                   for part in headers.get("webhook-signature", "").split())


@contextlib.contextmanager
def receiving() -> Iterator[Receiver]:
    """The receiver, listening on 127.0.0.1 until the block ends."""
    import json

    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            headers = {name.lower(): value for name, value in self.headers.items()}
            message = json.loads(body)
            with receiver.lock:
                receiver.seen.append((headers.get("webhook-id", ""), message.get("type", ""),
                                      message.get("data", {}).get("id", ""),
                                      receiver.verified(headers, body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/herald-demo"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def run_outbound(events: int, console: Console) -> int:
    """Run the outbound phase; 0 when the digest made one message with every event, its
    email was sent, and its webhook message arrived once, verified."""
    from actors.queues import registry

    if not 1 <= events <= MAX_DIGEST_EVENTS:
        console.print(f"[red]--digest-events must be 0 or between 1 and {MAX_DIGEST_EVENTS}[/]")
        return 2
    # the receiver is on loopback over plain HTTP: both allowed for this phase only
    with environment(WEBHOOK_ALLOW_HTTP="1", WEBHOOK_ALLOW_PRIVATE="1"), \
            own_namespace(QUEUES) as prefix, \
            registry.redeclared(("notification-email",), rate_limit=None), \
            receiving() as receiver:
        return _run(events, console, prefix, receiver)


def _max_items() -> int:
    """The events at which an ``account.activity`` digest closes early."""
    from actors.event_catalogue import EVENT_TYPES

    digest = EVENT_TYPES["account.activity"].digest
    assert digest is not None  # the type is digested
    return digest.max_items


def _post(client: Any, path: str, body: dict[str, Any], want: int) -> dict[str, Any]:
    answer = client.post(path, json=body)
    if answer.status_code != want:
        raise RuntimeError(f"POST {path} answered {answer.status_code}: {answer.text[:300]}")
    return dict(answer.json())


def _bucket(bucket_id: str) -> Any:
    from herald.db import session as db_session
    from models.digests import DigestBucket

    with db_session() as session:
        return session.get(DigestBucket, bucket_id)


def _notification(client: Any, notification_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/notifications/{notification_id}").json())


def _run(events: int, console: Console, prefix: str, receiver: Receiver) -> int:
    from herald.db import migrate
    from herald.demo.orders import api_client

    migrate()
    client = api_client()
    run_id = uuid.uuid4().hex[:8]
    console.print(f"[bold]digest and webhooks[/]: {events} account.activity events into one "
                  f"digest, its email's delivery.sent to a receiver at {receiver.url} "
                  f"(jobs under the key prefix {prefix!r})")
    endpoint = _post(client, "/v1/webhook-endpoints", {
        "url": receiver.url, "events": ["delivery.sent"],
        "description": f"herald demo {run_id}"}, 201)
    receiver.secret = endpoint["secret"]
    try:
        return _send_digest(events, console, client, run_id, endpoint, receiver)
    finally:
        # its receiver stops with the demo: nothing may be sent to its URL afterwards
        client.delete(f"/v1/webhook-endpoints/{endpoint['id']}")


def _send_digest(events: int, console: Console, client: Any, run_id: str,
                 endpoint: dict[str, Any], receiver: Receiver) -> int:
    from herald.queue import current_app, running_worker
    from models.base import queue_now

    console.print(f"  endpoint {endpoint['id']} subscribed to delivery.sent; its secret "
                  f"{endpoint['secret'][:10]}… shown once")
    person = _post(client, "/v1/accounts", {"email": f"activity.{run_id}@example.com",
                                            "locale": "en"}, 201)
    digest: dict[str, Any] = {}
    for n in range(events):
        digest = _post(client, "/v1/events", {
            "type": "account.activity", "account_id": person["id"],
            "occurrence": f"{run_id}-{n}",
            "data": {"text": f"Ticket #{1000 + n} was updated", "url": f"https://example.com/t/{n}"},
        }, 202)["digest"]
    console.print(f"  digest {digest['id']}: {digest['items']} items, closes at "
                  f"{digest['closes_at']}")
    with running_worker(list(QUEUES)):
        bucket = _bucket(digest["id"])
        full = digest["items"] >= _max_items()  # then it closes at once, on its own
        if bucket is not None and bucket.status == "open" and not full:
            ahead = bucket.closes_at - queue_now() + timedelta(seconds=1)
            current_app().time.advance(max(ahead, timedelta(0)))
            console.print(f"  fewer than max_items: queue time moved "
                          f"{ahead.total_seconds():,.0f} s ahead, to the digest's close")
        notification = _wait_for_message(client, digest["id"], receiver)
    problems = _check(notification, events, receiver, digest["id"])
    for problem in problems:
        console.print(f"[red]✗ {problem}[/]")
    if not problems:
        console.print(f"[green]✓ {events} events became one digest message (email sent, in-app "
                      f"delivered); its delivery.sent webhook arrived once, signature "
                      f"verified ({len(receiver.seen)} received)[/]")
    return 1 if problems else 0


def _wait_for_message(client: Any, bucket_id: str, receiver: Receiver) -> dict[str, Any] | None:
    """The digest's notification once its email was sent and the receiver got a message
    (None at the deadline)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        bucket = _bucket(bucket_id)
        if bucket is not None and bucket.notification_id:
            notification = _notification(client, bucket.notification_id)
            email = [d for d in notification["deliveries"] if d["channel"] == "email"]
            if email and email[0]["outcome"] == "sent" and receiver.seen:
                return notification
        time.sleep(0.1)
    return None


def _check(notification: dict[str, Any] | None, events: int, receiver: Receiver,
           bucket_id: str) -> list[str]:
    """The problems found (none: the story went as told)."""
    from herald.db import session as db_session
    from models.notifications import Notification

    if notification is None:
        return [f"digest {bucket_id} was not sent, or its webhook did not arrive, within "
                f"{DEADLINE_S:.0f} s"]
    problems = []
    with db_session() as session:
        stored = session.get(Notification, notification["id"])
        listed = len((stored.data or {}).get("events", [])) if stored else 0
    if listed != events:
        problems.append(f"the digest message lists {listed} events, not {events}")
    email = next(d for d in notification["deliveries"] if d["channel"] == "email")
    mine = {seen[0] for seen in receiver.seen if seen[1:3] == ("delivery.sent", email["id"])}
    if len(mine) != 1:
        problems.append(f"{len(mine)} delivery.sent messages of the digest email arrived, "
                        "not 1")
    if not all(seen[3] for seen in receiver.seen):
        problems.append("a message's signature did not verify")
    if email["outcome"] != "sent":
        problems.append(f"the digest email is {email['outcome']}")
    return problems
