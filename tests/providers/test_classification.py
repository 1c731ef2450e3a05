"""Every row of every adapter's classification table, produced through the fake servers.

For each row the failure it names is made to happen at a fake (tests/support/providers/),
the real adapter sends, and the result must carry the kind this test expects — which is
also the row's — and the failure code. A row no fake can produce is listed in
NOT_PRODUCED with the reason; a row neither produced nor listed fails
``test_every_row_is_produced_or_listed_as_not_producible``, so a new row comes with its
case, and changing a row's kind means changing the expectation here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import pytest

from herald.settings import Settings
from providers import (
    Attachment,
    Channel,
    FailureKind,
    OneSignalProvider,
    OutboundMessage,
    SendResult,
    SmtpProvider,
    TaqnyatProvider,
    TwilioProvider,
)
from providers.classification import (
    HTTP_STATUSES,
    ONESIGNAL,
    SMTP,
    SMTP_AFTER_DATA,
    TAQNYAT,
    TWILIO,
    Rule,
    Table,
)
from tests.support.providers.fakes import FakeApi, FakeOneSignal, FakeTaqnyat, FakeTwilio
from tests.support.providers.smtp_relay import (
    Relay,
    authenticate,
    greeting_server,
    start_relay,
)
from tests.support.services import find_free_port

TWILIO_SID = "AC" + "0123456789abcdef" * 2
TWILIO_TOKEN = "twilio-test-token"
TAQNYAT_KEY, TAQNYAT_SENDER = "taqnyat-test-key", "Herald"
ONESIGNAL_APP, ONESIGNAL_KEY = "5eb5a37e-b458-11e3-ac11-000c2940e62c", "onesignal-test-key"
#: A well-formed number Taqnyat lists as rejected; an external id with no device.
TAQNYAT_REJECTED, NO_DEVICE = "966511111111", "acct-without-device"
#: Short enough to keep the walk quick, long enough for a loopback answer.
SHORT_TIMEOUT_S = 0.3

SMS = OutboundMessage(channel=Channel.SMS, to="+966500000001", text="Code 1234",
                      idempotency_key="del-walk")
EMAIL = OutboundMessage(channel=Channel.EMAIL, to="amina@example.com", subject="Hi",
                        text="Hello", idempotency_key="del-walk")
PUSH = OutboundMessage(channel=Channel.PUSH, to="acct-42", text="Hi",
                       idempotency_key="del-walk")


@dataclass
class Fakes:
    """The fake servers one case may use."""

    twilio: FakeTwilio
    taqnyat: FakeTaqnyat
    onesignal: FakeOneSignal
    relay: Relay
    smtp_port: int


@dataclass(frozen=True)
class Case:
    """How to make a row's failure happen, and the kind and failure code it must carry."""

    produce: Callable[[Fakes], SendResult]
    kind: FailureKind
    code: str


T, R, X, A = (FailureKind.TRANSIENT, FailureKind.REFUSED, FailureKind.TERMINAL,
              FailureKind.AMBIGUOUS)


# -- sending through each adapter ---------------------------------------------------------
def unreachable() -> str:
    return f"http://127.0.0.1:{find_free_port()}"


def twilio(f: Fakes, message: OutboundMessage = SMS, *, base_url: str | None = None,
           timeout_s: float = 10.0, **overrides: str) -> SendResult:
    fields = {"twilio_account_sid": TWILIO_SID, "twilio_auth_token": TWILIO_TOKEN,
              "twilio_from_number": "+15005550006",
              "twilio_base_url": base_url if base_url is not None else f.twilio.url}
    return TwilioProvider(Settings(**{**fields, **overrides}),
                          timeout_s=timeout_s).send(message)


def taqnyat(f: Fakes, message: OutboundMessage = SMS, *, base_url: str | None = None,
            timeout_s: float = 10.0, **overrides: str) -> SendResult:
    fields = {"taqnyat_api_key": TAQNYAT_KEY, "taqnyat_sender": TAQNYAT_SENDER,
              "taqnyat_base_url": base_url or f.taqnyat.url}
    with closing(TaqnyatProvider(Settings(**{**fields, **overrides}),
                                 timeout_s=timeout_s)) as provider:
        return provider.send(message)


def onesignal(f: Fakes, message: OutboundMessage = PUSH, *, base_url: str | None = None,
              timeout_s: float = 10.0, **overrides: str) -> SendResult:
    fields = {"onesignal_app_id": ONESIGNAL_APP, "onesignal_api_key": ONESIGNAL_KEY,
              "onesignal_base_url": base_url or f.onesignal.url}
    with closing(OneSignalProvider(Settings(**{**fields, **overrides}),
                                   timeout_s=timeout_s)) as provider:
        return provider.send(message)


def smtp(port: int, message: OutboundMessage = EMAIL, *, deadline_s: float = 5.0,
         **overrides: Any) -> SendResult:
    settings = Settings(**{"smtp_host": "127.0.0.1", "smtp_port": port,
                           "smtp_starttls": False, **overrides})
    return SmtpProvider(settings, deadline_s=deadline_s).send(message)


def after(prepare: Callable[[Fakes], None],
          send: Callable[[Fakes], SendResult]) -> Callable[[Fakes], SendResult]:
    """Prepare the fakes, then send."""
    def produce(f: Fakes) -> SendResult:
        prepare(f)
        return send(f)
    return produce


def forced(fake: Callable[[Fakes], FakeApi], status: int, body: dict[str, Any],
           send: Callable[[Fakes], SendResult]) -> Callable[[Fakes], SendResult]:
    """Make the fake answer the next request with ``status`` and ``body``, then send."""
    return after(lambda f: fake(f).fail_next(status, body=body), send)


def relay_says(field: str, reply: str) -> Callable[[Fakes], SendResult]:
    """The relay answers ``reply`` at one stage (``mail_reply``, ``rcpt_reply`` …)."""
    def produce(f: Fakes) -> SendResult:
        setattr(f.relay, field, reply)
        return smtp(f.smtp_port)
    return produce


def greeted(reply: str | None, deadline_s: float = 5.0) -> Callable[[Fakes], SendResult]:
    """Send to a server that greets with ``reply`` (None: never greets)."""
    def produce(f: Fakes) -> SendResult:
        with greeting_server(reply) as port:
            return smtp(port, deadline_s=deadline_s)
    return produce


def rejecting_login(f: Fakes) -> SendResult:
    _, controller = start_relay(authenticator=authenticate, auth_required=True,
                                     auth_require_tls=False)
    try:
        return smtp(controller.port, smtp_username="herald", smtp_password="wrong")
    finally:
        controller.stop()


# -- the cases, row by row -------------------------------------------------------------
CASES: dict[tuple[str, str, str], Case] = {}
#: Status a Twilio error code arrives with (others: 400).
TWILIO_CODE_STATUS = {"20003": 401, "20404": 404, "20429": 429}
#: What each Twilio error code means for the chain.
TWILIO_CODE_KINDS = {
    **dict.fromkeys(["20429", "21611"], T),
    **dict.fromkeys(["20003", "20005", "20404", "21212", "21408", "21606", "21608",
                     "21612", "21659"], R),
    **dict.fromkeys(["21211", "21214", "21604", "21614", "21610", "21602", "21617"], X),
}
#: What each HTTP status row means, for every HTTP adapter.
STATUS_KINDS = {"301": R, "302": R, "307": R, "308": R, "3xx": A,
                "401": R, "403": R, "404": R, "408": T, "429": T, "4xx": X,
                "504": A, "5xx": T}
#: A status of each class row.
CLASS_STATUS = {"3xx": 303, "4xx": 422, "5xx": 500}
#: Taqnyat / OneSignal error sentences the fakes do not say on their own.
UNCLASSIFIED = "Something the tables do not name"

for _code in TWILIO.errors:
    _status = TWILIO_CODE_STATUS.get(_code, 400)
    CASES["twilio", "errors", _code] = Case(forced(
        lambda f: f.twilio, _status,
        {"code": int(_code), "message": f"Twilio error {_code}", "status": _status},
        twilio), TWILIO_CODE_KINDS[_code], f"twilio_{_code}")

for _key in HTTP_STATUSES:
    _status = CLASS_STATUS.get(_key) or int(_key)
    CASES["twilio", "statuses", _key] = Case(forced(
        lambda f: f.twilio, _status, {"message": UNCLASSIFIED, "status": _status}, twilio),
        STATUS_KINDS[_key], f"twilio_{_status}")
    CASES["taqnyat", "statuses", _key] = Case(forced(
        lambda f: f.taqnyat, _status, {"statusCode": _status, "message": UNCLASSIFIED},
        taqnyat), STATUS_KINDS[_key], f"http_{_status}")
    CASES["onesignal", "statuses", _key] = Case(forced(
        lambda f: f.onesignal, _status, {"errors": [UNCLASSIFIED]}, onesignal),
        STATUS_KINDS[_key], f"http_{_status}")

CASES.update({
    # Twilio: what the adapter finds itself; its transport (requests, under the SDK)
    ("twilio", "outcomes", "not_configured"): Case(
        lambda f: twilio(f, twilio_from_number=""), R, "not_configured"),
    ("twilio", "outcomes", "unsupported_channel"): Case(
        lambda f: twilio(f, EMAIL), R, "unsupported_channel"),
    ("twilio", "exceptions", "NewConnectionError"): Case(
        lambda f: twilio(f, base_url=unreachable()), T, "connection"),
    ("twilio", "exceptions", "SSLError"): Case(
        lambda f: twilio(f, base_url=f.twilio.url.replace("http:", "https:")), T, "tls"),
    ("twilio", "exceptions", "ReadTimeout"): Case(after(
        lambda f: f.twilio.hang_next(),
        lambda f: twilio(f, timeout_s=SHORT_TIMEOUT_S)), A, "timeout"),
    ("twilio", "exceptions", "ProtocolError"): Case(after(
        lambda f: f.twilio.drop_next(), twilio), A, "connection_lost"),
    ("twilio", "exceptions", "InvalidURL"): Case(
        lambda f: twilio(f, base_url="http://"), R, "not_configured"),
    ("twilio", "exceptions", "MissingSchema"): Case(
        lambda f: twilio(f, base_url="no-scheme"), R, "not_configured"),
    ("twilio", "exceptions", "InvalidSchema"): Case(
        lambda f: twilio(f, base_url="ftp://127.0.0.1:1"), R, "not_configured"),

    # Taqnyat
    ("taqnyat", "outcomes", "not_configured"): Case(
        lambda f: taqnyat(f, taqnyat_sender=""), R, "not_configured"),
    ("taqnyat", "outcomes", "unsupported_channel"): Case(
        lambda f: taqnyat(f, EMAIL), R, "unsupported_channel"),
    ("taqnyat", "outcomes", "recipient_rejected"): Case(
        lambda f: taqnyat(f, OutboundMessage(channel=Channel.SMS, to="+" + TAQNYAT_REJECTED,
                                             text="Hi")), R, "recipient_rejected"),
    ("taqnyat", "errors", "sender name is not active"): Case(
        lambda f: taqnyat(f, taqnyat_sender="Unregistered"), R, "http_400"),
    ("taqnyat", "errors", "invalid recipients"): Case(
        lambda f: taqnyat(f, OutboundMessage(channel=Channel.SMS, to="12", text="Hi")),
        X, "http_400"),
    ("taqnyat", "errors", "message body is empty"): Case(
        lambda f: taqnyat(f, OutboundMessage(channel=Channel.SMS, to=SMS.to, text="")),
        X, "http_400"),

    # OneSignal
    ("onesignal", "outcomes", "not_configured"): Case(
        lambda f: onesignal(f, onesignal_api_key=""), R, "not_configured"),
    ("onesignal", "outcomes", "attachments_unsupported"): Case(
        lambda f: onesignal(f, OutboundMessage(
            channel=Channel.EMAIL, to=EMAIL.to, subject="eSIM", text="Scan",
            attachments=(Attachment(filename="qr.png", content_type="image/png",
                                    data=b"png"),))), R, "attachments_unsupported"),
    ("onesignal", "outcomes", "cc_unsupported"): Case(
        lambda f: onesignal(f, OutboundMessage(channel=Channel.EMAIL, to=EMAIL.to,
                                               cc=("ops@example.com",), subject="Hi",
                                               text="Hi")), R, "cc_unsupported"),
    ("onesignal", "outcomes", "no_recipients"): Case(
        lambda f: onesignal(f, OutboundMessage(channel=Channel.PUSH, to=NO_DEVICE,
                                               text="Hi")), R, "no_recipients"),
    ("onesignal", "outcomes", "bad_response"): Case(
        forced(lambda f: f.onesignal, 200, {}, onesignal), A, "bad_response"),
    ("onesignal", "errors", "app_id not found"): Case(
        lambda f: onesignal(f, onesignal_app_id="another-app"), R, "http_400"),
    ("onesignal", "errors", "not configured"): Case(
        lambda f: onesignal(f, OutboundMessage(channel=Channel.EMAIL, to=EMAIL.to,
                                               subject="Hi", text="Hi")), R, "http_400"),
    ("onesignal", "errors", "invalid phone number"): Case(
        lambda f: onesignal(f, OutboundMessage(channel=Channel.SMS, to="+12", text="Hi")),
        X, "http_400"),
    ("onesignal", "errors", "must have english language content"): Case(
        lambda f: onesignal(f, OutboundMessage(channel=Channel.PUSH, to="acct-42", text="")),
        X, "http_400"),
    ("onesignal", "errors", "must have email_subject and email_body"): Case(
        forced(lambda f: f.onesignal, 400, {"errors": [
            "Email notifications must have email_subject and email_body"]}, onesignal),
        X, "http_400"),

    # SMTP: replies by stage, then the transport before and after the DATA command
    ("smtp", "outcomes", "unsupported_channel"): Case(
        lambda f: smtp(f.smtp_port, SMS), R, "unsupported_channel"),
    ("smtp", "statuses", "* 4xx"): Case(relay_says("rcpt_reply", "451 4.3.0 Try later"),
                                        T, "smtp_451"),
    ("smtp", "statuses", "connect 5xx"): Case(greeted("554 5.7.1 No SMTP service here"),
                                              R, "smtp_554"),
    ("smtp", "statuses", "auth 5xx"): Case(rejecting_login, R, "smtp_535"),
    ("smtp", "statuses", "mail 5xx"): Case(
        relay_says("mail_reply", "553 5.7.1 Sender address rejected"), R, "smtp_553"),
    ("smtp", "statuses", "rcpt 5.7.x"): Case(
        relay_says("rcpt_reply", "550 5.7.1 Relaying denied"), R, "smtp_550"),
    ("smtp", "statuses", "rcpt 554"): Case(
        relay_says("rcpt_reply", "554 Relay access denied"), R, "smtp_554"),
    ("smtp", "statuses", "rcpt 5xx"): Case(
        relay_says("rcpt_reply", "550 5.1.1 User unknown"), X, "smtp_550"),
    ("smtp", "statuses", "data 5.1.x"): Case(
        relay_says("data_reply", "550 5.1.1 Mailbox unavailable"), X, "smtp_550"),
    ("smtp", "statuses", "data 5xx"): Case(
        relay_says("data_reply", "552 5.3.4 Message size exceeds fixed limit"), R, "smtp_552"),
    ("smtp", "statuses", "* *"): Case(greeted("300 What is this"), T, "smtp_300"),
    ("smtp", "exceptions", "SMTPConnectError"): Case(
        lambda f: smtp(find_free_port()), T, "connection"),
    ("smtp", "exceptions", "TimeoutError"): Case(
        greeted(None, deadline_s=SHORT_TIMEOUT_S), T, "timeout"),
    ("smtp", "exceptions", "OSError"): Case(greeted("220 hello, and goodbye"), T, "connection"),
    ("smtp", "exceptions", "SMTPException"): Case(
        lambda f: smtp(f.smtp_port, smtp_starttls=True), R, "smtp_config"),
    ("smtp after data", "exceptions", "TimeoutError"): Case(after(
        lambda f: setattr(f.relay, "data_delay_s", 3.0),
        lambda f: smtp(f.smtp_port, deadline_s=SHORT_TIMEOUT_S)), A, "timeout"),
    ("smtp after data", "exceptions", "OSError"): Case(after(
        lambda f: setattr(f.relay, "drop_after_data", True),
        lambda f: smtp(f.smtp_port)), A, "connection_lost"),
})

# httpx's rows, for both adapters that speak through providers/http.py
for _name, _send, _fake, _key_setting in (
        ("taqnyat", taqnyat, lambda f: f.taqnyat, "taqnyat_api_key"),
        ("onesignal", onesignal, lambda f: f.onesignal, "onesignal_api_key")):
    CASES.update({
        (_name, "exceptions", "ConnectError"): Case(
            lambda f, send=_send: send(f, base_url=unreachable()), T, "connection"),
        (_name, "exceptions", "ReadTimeout"): Case(after(
            lambda f, fake=_fake: fake(f).hang_next(),
            lambda f, send=_send: send(f, timeout_s=SHORT_TIMEOUT_S)), A, "timeout"),
        (_name, "exceptions", "RemoteProtocolError"): Case(after(
            lambda f, fake=_fake: fake(f).drop_next(), _send), A, "connection_lost"),
        (_name, "exceptions", "ReadError"): Case(after(
            lambda f, fake=_fake: fake(f).reset_next(), _send), A, "connection_reset"),
        (_name, "exceptions", "LocalProtocolError"): Case(
            lambda f, send=_send, key=_key_setting: send(f, **{key: "bad\nkey"}),
            R, "not_configured"),
        (_name, "exceptions", "UnicodeEncodeError"): Case(
            lambda f, send=_send, key=_key_setting: send(f, **{key: "مفتاح"}),
            R, "not_configured"),
        (_name, "exceptions", "UnsupportedProtocol"): Case(
            lambda f, send=_send: send(f, base_url="ftp://127.0.0.1:1"), R, "not_configured"),
    })

#: Rows no fake here can produce, and why.
NOT_PRODUCED = {
    **{(name, "exceptions", error): why for name in ("taqnyat", "onesignal")
       for error, why in {
           "ConnectTimeout": "needs an address that drops SYNs; tests reach loopback only",
           "PoolTimeout": "needs every pooled connection busy past the pool timeout",
           "ProxyError": "no proxy is configured",
           "WriteTimeout": "needs a peer that stops reading a body larger than the "
                           "socket buffers",
           "WriteError": "needs the connection to fail mid-body",
           "DecodingError": "the fakes answer plain JSON",
           "HTTPError": "the fallback for httpx errors no row names",
       }.items()},
    ("twilio", "exceptions", "ConnectTimeout"): "needs an address that drops SYNs",
    ("twilio", "exceptions", "ProxyError"): "no proxy is configured",
    ("twilio", "exceptions", "ChunkedEncodingError"): "the fake answers with a length",
    ("twilio", "exceptions", "RequestException"): "the fallback for requests errors no "
                                                  "row names",
    ("smtp", "exceptions", "SMTPConnectTimeoutError"): "needs an address that drops SYNs; "
                                                       "a silent server is the deadline",
    ("smtp after data", "exceptions", "SMTPException"): "the fallback for what aiosmtplib "
                                                        "raises during DATA besides a "
                                                        "timeout or a lost connection",
}

TABLES: dict[str, Table] = {"twilio": TWILIO, "taqnyat": TAQNYAT, "onesignal": ONESIGNAL,
                            "smtp": SMTP, "smtp after data": SMTP_AFTER_DATA}


def rows() -> Iterator[tuple[tuple[str, str, str], Rule]]:
    """Every row of every table: (table, section, key) and its rule."""
    for name, table in TABLES.items():
        for section in ("outcomes", "errors", "statuses"):
            mapping: dict[str, Rule] = dict(getattr(table, section))
            for key, rule in mapping.items():
                yield (name, section, key), rule
        for row in table.exceptions:
            yield (name, "exceptions", row.error.__name__), row.rule


RULES = dict(rows())


@pytest.fixture(scope="module")
def fakes() -> Iterator[Fakes]:
    with FakeTwilio(account_sid=TWILIO_SID, auth_token=TWILIO_TOKEN) as twilio_fake, \
            FakeTaqnyat(api_key=TAQNYAT_KEY, sender=TAQNYAT_SENDER,
                        rejected_numbers=frozenset({TAQNYAT_REJECTED})) as taqnyat_fake, \
            FakeOneSignal(app_id=ONESIGNAL_APP, api_key=ONESIGNAL_KEY,
                          unknown_external_ids=frozenset({NO_DEVICE}),
                          unconfigured_channels=frozenset({"email"})) as onesignal_fake:
        relay, controller = start_relay()
        try:
            yield Fakes(twilio_fake, taqnyat_fake, onesignal_fake, relay, controller.port)
        finally:
            controller.stop()


@pytest.fixture
def fresh(fakes: Fakes) -> Fakes:
    """The shared fakes with what earlier cases told them forgotten."""
    fakes.relay.reset()
    for fake in (fakes.twilio, fakes.taqnyat, fakes.onesignal):
        fake.forget_told()
    return fakes


def test_every_row_is_produced_or_listed_as_not_producible() -> None:
    walked = set(CASES) | set(NOT_PRODUCED)

    assert sorted(set(RULES) - walked) == []
    assert sorted(walked - set(RULES)) == []  # no case for a row that is gone
    assert not set(CASES) & set(NOT_PRODUCED)


# the relay refusing a login wants AUTH; without TLS is fine on loopback
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
@pytest.mark.parametrize("row", sorted(CASES), ids=" / ".join)
def test_the_row_classifies_the_failure_the_fake_produces(
        fresh: Fakes, row: tuple[str, str, str]) -> None:
    case = CASES[row]

    result = case.produce(fresh)

    assert case.kind is RULES[row].kind, "the table and this test disagree on the kind"
    assert (result.accepted, result.failure_kind, result.failure_code) == (
        False, case.kind, case.code)
