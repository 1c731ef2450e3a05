"""Local HTTP servers speaking the Twilio, Taqnyat and OneSignal APIs, and test helpers.

Each fake is a real ``ThreadingHTTPServer`` on 127.0.0.1 and a free port, used as a
context manager. It records every request it receives (``requests``), keeps what it
"sent" (``messages`` / ``notifications``), answers with the provider's JSON shapes, and
can be told to fail the next requests (``fail_next(503)``, ``fail_next(429)``), to read
the next request and never answer it (``hang_next()``), or to read it and close the
connection without an answer (``drop_next()``) or reset it (``reset_next()``).
"""

from __future__ import annotations

import base64
import json
import re
import socket
import struct
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs

import pytest

from herald import settings
from providers import reset_providers
from tests.support.queue_app import close_queue_app, install_queue_app

#: A valid-looking E.164 number (the fakes accept ``+`` and 8–15 digits).
E164 = re.compile(r"^\+[1-9]\d{7,14}$")

Answer = tuple[int, dict[str, Any]]
#: What a fake does with a request it was told to mistreat (``hang_next``, ``drop_next``).
HANG, DROP, RESET = "hang", "drop", "reset"
Action = Answer | str
#: Longest a hung request is held (the fake's exit releases it sooner).
HANG_LIMIT_S = 30.0


@dataclass(frozen=True)
class RecordedRequest:
    """One request a fake received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)

    def form(self) -> dict[str, str]:
        """The body parsed as a form (one value per field)."""
        return {key: values[0] for key, values in parse_qs(self.body.decode()).items()}


class FakeApi:
    """A threaded HTTP server that records requests and answers through :meth:`answer`."""

    #: The error body a forced failure carries, by status (subclasses fill it in).
    error_bodies: dict[int, dict[str, Any]] = {}

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._forced: deque[Action] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        # a short poll interval: shutdown() waits up to one interval
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        name=type(self).__name__, daemon=True)

    @property
    def url(self) -> str:
        """The server's base URL."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._closing.set()  # release hung requests
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def fail_next(self, status: int, times: int = 1, *,
                  body: dict[str, Any] | None = None) -> None:
        """Answer the next ``times`` requests with ``status`` and ``body`` (by default the
        provider's error body for that status)."""
        answer = body if body is not None else self.error_bodies.get(status, {})
        with self._lock:
            self._forced.extend([(status, answer)] * times)

    def forget_told(self) -> None:
        """Drop the failures, hangs and drops told for the next requests."""
        with self._lock:
            self._forced.clear()

    def hang_next(self, times: int = 1) -> None:
        """Read the next ``times`` requests whole and never answer them (until the fake
        exits): the client's read timeout fires after the request was sent."""
        with self._lock:
            self._forced.extend([HANG] * times)

    def drop_next(self, times: int = 1) -> None:
        """Read the next ``times`` requests whole, then close the connection unanswered."""
        with self._lock:
            self._forced.extend([DROP] * times)

    def reset_next(self, times: int = 1) -> None:
        """Read the next ``times`` requests whole, then reset the connection (a TCP RST,
        not a clean close)."""
        with self._lock:
            self._forced.extend([RESET] * times)

    def answer(self, request: RecordedRequest) -> Answer:
        """The status and JSON body for ``request`` (subclasses implement the API)."""
        raise NotImplementedError

    def _handle(self, request: RecordedRequest) -> Action:
        with self._lock:
            self.requests.append(request)
            forced = self._forced.popleft() if self._forced else None
        return forced if forced is not None else self.answer(request)


def _handler_for(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real APIs

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = RecordedRequest(
                method=self.command, path=self.path,
                headers={key.lower(): value for key, value in self.headers.items()},
                body=self.rfile.read(length))
            action = api._handle(request)
            if isinstance(action, str):
                if action == HANG:
                    api._closing.wait(HANG_LIMIT_S)
                elif action == RESET:  # linger 0: close() sends RST instead of FIN
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.connection.close()
                self.close_connection = True  # no answer: the socket closes
                return
            status, body = action
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep pytest output clean

    return Handler


class FakeTwilio(FakeApi):
    """Twilio's Messages API: ``POST /2010-04-01/Accounts/{Sid}/Messages.json``."""

    error_bodies = {
        429: {"code": 20429, "message": "Too Many Requests",
              "more_info": "https://www.twilio.com/docs/errors/20429", "status": 429},
        503: {"code": 20503, "message": "Service Unavailable",
              "more_info": "https://www.twilio.com/docs/errors/20503", "status": 503},
    }
    _PATH = re.compile(r"^/2010-04-01/Accounts/(?P<sid>AC[0-9a-f]{32})/Messages\.json$")

    def __init__(self, *, account_sid: str, auth_token: str,
                 invalid_numbers: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.invalid_numbers = invalid_numbers
        #: The messages Twilio accepted, as it answered them.
        self.messages: list[dict[str, Any]] = []

    def answer(self, request: RecordedRequest) -> Answer:
        match = self._PATH.match(request.path)
        if request.method != "POST" or not match:
            return 404, _twilio_error(20404, "The requested resource was not found", 404)
        expected = "Basic " + base64.b64encode(
            f"{self.account_sid}:{self.auth_token}".encode()).decode()
        if request.headers.get("authorization") != expected \
                or match["sid"] != self.account_sid:
            return 401, _twilio_error(20003, "Authenticate", 401)
        form = request.form()
        to = form.get("To", "")
        if not to:
            return 400, _twilio_error(21604, "A 'To' phone number is required.", 400)
        if to in self.invalid_numbers or not E164.match(to):
            return 400, _twilio_error(
                21211, f"Invalid 'To' Phone Number: {to}. The 'To' number {to} is not a "
                "valid phone number.", 400)
        sid = "SM" + uuid.uuid4().hex
        now = formatdate(usegmt=True).replace("GMT", "+0000")
        uri = f"/2010-04-01/Accounts/{self.account_sid}/Messages/{sid}"
        message = {
            "account_sid": self.account_sid, "api_version": "2010-04-01",
            "body": form.get("Body", ""), "date_created": now, "date_sent": None,
            "date_updated": now, "direction": "outbound-api", "error_code": None,
            "error_message": None, "from": form.get("From"), "messaging_service_sid": None,
            "num_media": "0", "num_segments": "1", "price": None, "price_unit": "USD",
            "sid": sid, "status": "queued", "to": to, "uri": f"{uri}.json",
            "subresource_uris": {"media": f"{uri}/Media.json"},
        }
        with self._lock:
            self.messages.append(message)
        return 201, message


def _twilio_error(code: int, message: str, status: int) -> dict[str, Any]:
    return {"code": code, "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}", "status": status}


class FakeTaqnyat(FakeApi):
    """Taqnyat's REST API: ``POST /v1/messages`` with a Bearer token."""

    error_bodies = {
        429: {"statusCode": 429, "message": "Too many requests"},
        503: {"statusCode": 503, "message": "Service unavailable"},
    }

    def __init__(self, *, api_key: str, sender: str,
                 rejected_numbers: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.api_key = api_key
        self.sender = sender
        #: Well-formed numbers Taqnyat lists as rejected (e.g. blocked destinations).
        self.rejected_numbers = rejected_numbers
        #: The messages Taqnyat accepted: the request bodies plus the messageId given.
        self.messages: list[dict[str, Any]] = []

    def answer(self, request: RecordedRequest) -> Answer:
        if request.method != "POST" or request.path != "/v1/messages":
            return 404, {"statusCode": 404, "message": "Not Found"}
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"statusCode": 401, "message": "Unauthorized, invalid token"}
        body = request.json()
        recipients = [str(number) for number in body.get("recipients", [])]
        if not recipients or not all(re.fullmatch(r"[1-9]\d{7,14}", n) for n in recipients):
            return 400, {"statusCode": 400, "message": "Invalid recipients format"}
        if body.get("sender") != self.sender:
            return 400, {"statusCode": 400, "message": "Sender name is not active"}
        if not body.get("body"):
            return 400, {"statusCode": 400, "message": "Message body is empty"}
        accepted = [n for n in recipients if n not in self.rejected_numbers]
        rejected = [n for n in recipients if n in self.rejected_numbers]
        message_id = int(time.time() * 1000) + len(self.requests)
        if accepted:
            with self._lock:
                self.messages.append({**body, "messageId": message_id})
        return 201, {
            "statusCode": 201, "messageId": message_id, "cost": 0.05 * len(accepted),
            "currency": "SAR", "totalCount": len(recipients), "msgLength": 1,
            "accepted": "[" + "".join(f"{n}," for n in accepted) + "]",
            "rejected": "[" + "".join(f"{n}," for n in rejected) + "]",
        }


class FakeOneSignal(FakeApi):
    """OneSignal's Create Message API: ``POST /notifications``, ``Authorization: Key …``."""

    error_bodies = {
        429: {"errors": ["API rate limit exceeded"]},
        503: {"errors": ["Service temporarily unavailable"]},
    }

    def __init__(self, *, app_id: str, api_key: str,
                 unknown_external_ids: frozenset[str] = frozenset(),
                 unconfigured_channels: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.app_id = app_id
        self.api_key = api_key
        #: Channels the app has not set up (no email domain, no SMS sender): a 400.
        self.unconfigured_channels = unconfigured_channels
        #: External ids with no subscribed device: a 200 that created nothing.
        self.unknown_external_ids = unknown_external_ids
        #: The notifications OneSignal created (request bodies plus the id given).
        self.notifications: list[dict[str, Any]] = []
        self._by_idempotency_key: dict[str, str] = {}

    def answer(self, request: RecordedRequest) -> Answer:
        if request.method != "POST" or request.path != "/notifications":
            return 404, {"errors": ["Not Found"]}
        if request.headers.get("authorization") != f"Key {self.api_key}":
            return 403, {"errors": ["Access denied.  Please include an 'Authorization: Key "
                                    "…' header with a valid API key"]}
        body = request.json()
        if body.get("app_id") != self.app_id:
            return 400, {"errors": ["app_id not found. You may be missing a Content-Type: "
                                    "application/json header."]}
        if body.get("target_channel") in self.unconfigured_channels:
            return 400, {"errors": [f"{body['target_channel']} is not configured for this "
                                    "app"]}
        problem = _onesignal_problem(body)
        if problem:
            return 400, {"errors": [problem]}
        external_ids = body.get("include_aliases", {}).get("external_id", [])
        unknown = [e for e in external_ids if e in self.unknown_external_ids]
        if unknown and len(unknown) == len(external_ids):
            return 200, {"id": "", "errors": {"invalid_aliases": {"external_id": unknown}}}
        key = body.get("idempotency_key")
        with self._lock:
            if key and key in self._by_idempotency_key:  # a repeat: same answer, no send
                return 200, {"id": self._by_idempotency_key[key], "external_id": None}
            notification_id = str(uuid.uuid4())
            if key:
                self._by_idempotency_key[key] = notification_id
            self.notifications.append({**body, "id": notification_id})
        return 200, {"id": notification_id, "external_id": None}


def _onesignal_problem(body: dict[str, Any]) -> str | None:
    channel = body.get("target_channel")
    if channel == "email":
        if not body.get("email_to") or not body.get("email_subject") \
                or not body.get("email_body"):
            return "Email notifications must have email_subject and email_body"
    elif channel in ("sms", "push"):
        if not body.get("contents", {}).get("en"):
            return "Message Notifications must have English language content"
        if channel == "sms" and not all(E164.match(n) for n in
                                        body.get("include_phone_numbers", [])):
            return "Invalid phone number format"
    else:
        return "target_channel must be one of email, sms, push"
    return None


def use_herald_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> settings.Settings:
    """Set herald's environment and drop every cached settings object, client, provider."""
    for name, value in env.items():
        monkeypatch.setenv(name.upper(), value)
    forget_herald_state()
    return settings.get_settings()


def forget_herald_state() -> None:
    """Drop cached settings and built providers; install a queue App on the settings
    (when they name a Redis: no test starts the embedded one)."""
    reset_providers()
    settings.reset_settings()
    if settings.get_settings().embedded_redis:
        close_queue_app()
    else:
        install_queue_app()
