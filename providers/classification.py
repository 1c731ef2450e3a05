"""How each adapter's send failures are classified: one table per adapter, data not code.

A table maps what the adapter can see of a failure — an HTTP status, the provider's own
error code or phrase, an SMTP reply code at a stage of the transaction, an exception of
its transport, a failure the adapter finds itself — to a :class:`Rule`: the
:class:`~providers.base.FailureKind` and a short reason. Adapters look their failures up
here and keep no classification of their own; tests/providers/test_classification.py
walks the rows through the fake servers, and docs/pipeline.md ("How each provider's
failures are classified") summarises them.

The kinds decide what a provider chain may do: a *definite* failure (transient, refused,
terminal) certainly left nothing at the provider, so moving to the next provider cannot
send twice; an *ambiguous* one may have been accepted, so only the same provider is tried
again. The reasoning the rows follow:

- **Ambiguity is about when, not what.** Anything that fails after the request left
  herald may have been accepted: an HTTP read timeout, the connection lost before the
  answer, a success answer that cannot be used; for SMTP, a connection loss or timeout
  once the DATA command was issued. Where herald cannot tell whether the request was
  complete (aiosmtplib does not say whether a loss came before the 354 or after the final
  dot; requests' "Connection aborted" does not say whether the request was all written),
  it counts the failure as ambiguous: the price is a retry at the same provider instead
  of a failover, never a second message.
- **A write timeout or write error is definite** (httpx ``WriteTimeout``/``WriteError``):
  the request body was not all sent, and no HTTP server acts on a request whose body is
  short of its Content-Length. A connect timeout, a refused or reset connect, a DNS or
  TLS failure and a pool timeout all come before anything was written.
- **HTTP 429 and 5xx are transient**, as the provider answered that it did not take the
  request — except **504**: a gateway timed out waiting for the service behind it, which
  may have taken the request; it is ambiguous.
- **Refused** is this provider's problem, not the message's: bad credentials (401/403,
  SMTP 530/534/535), an endpoint that does not exist (404: a wrong base URL or account),
  a sender the provider has not registered, a destination it does not serve, a feature
  the adapter lacks (attachments, Cc), configuration missing. Another provider may send.
- **Terminal** is the message's problem, which every provider would meet: an invalid or
  unsubscribed recipient, content rejected as invalid. An HTTP 4xx that no row names
  stays terminal: a request the provider found invalid is most likely invalid anywhere,
  and an answer nobody has classified should not fan out to every provider of a chain.
- **SMTP 5xx** depends on what the relay is refusing. The issue lists SMTP 5xx among the
  failures that move on, and most are about us: a 5xx to the greeting, EHLO or STARTTLS,
  to AUTH or to MAIL FROM, and a policy refusal (enhanced status 5.7.x: relay access
  denied, sender policy) at RCPT TO are refused. A 5xx *about the recipient* — at RCPT
  TO, 550/551/553 mailbox unknown, unavailable or malformed — or an addressing status
  (5.1.x) after DATA is terminal: every relay would meet the same mailbox. Any other 5xx
  at the end of DATA (552 over this relay's size limit, its content policy) is refused:
  another relay may take it. SMTP 4xx is transient wherever it comes.
- **A success answer without the id herald needs** is ambiguous where a retry is safe
  (OneSignal deduplicates by the delivery id); Taqnyat, which takes no idempotency key,
  counts a 2xx whose body cannot be read as accepted without an id, since any retry
  would send the message a second time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import aiosmtplib
import httpx
import requests
from urllib3.exceptions import NewConnectionError, ProtocolError

from providers.base import FailureKind, SendResult

TRANSIENT, REFUSED = FailureKind.TRANSIENT, FailureKind.REFUSED
TERMINAL, AMBIGUOUS = FailureKind.TERMINAL, FailureKind.AMBIGUOUS

#: How deep :func:`raised_from` follows an exception's causes (a guard against cycles).
CAUSE_DEPTH = 8

@dataclass(frozen=True)
class Rule:
    """One row's verdict: the failure's kind and why."""

    kind: FailureKind
    reason: str

    def result(self, code: str, message: str) -> SendResult:
        """The failed :class:`SendResult` of this kind under ``code``."""
        return SendResult.failed(self.kind, code, message)


@dataclass(frozen=True)
class ExceptionRow:
    """A transport exception (or one it was raised from) → its failure code and rule."""

    error: type[BaseException]
    code: str
    rule: Rule


@dataclass(frozen=True, kw_only=True)
class Table:
    """One adapter's classification. Lookups are in the order the fields are listed."""

    provider: str
    #: Failures the adapter finds itself before or after asking the provider, by the
    #: failure code it gives them (``not_configured``, ``attachments_unsupported``, …).
    outcomes: Mapping[str, Rule] = field(default_factory=dict)
    #: The provider's own errors, which win over the status they come with: exact codes
    #: (Twilio's numbers), or lower-case phrases found in the error message.
    errors: Mapping[str, Rule] = field(default_factory=dict)
    errors_are_phrases: bool = False
    #: Status → rule: an exact status ("404", SMTP "rcpt 554") first, then its class
    #: ("5xx"). SMTP keys are "<stage> <code>" (see :func:`smtp_reply`).
    statuses: Mapping[str, Rule] = field(default_factory=dict)
    #: Transport exceptions, first match wins.
    exceptions: tuple[ExceptionRow, ...] = ()

    def outcome(self, code: str, message: str) -> SendResult:
        """A failure the adapter found itself, classified by its ``code``'s row."""
        return self.outcomes[code].result(code, message)

    def answer(self, status: int, code: str, message: str, *,
               error: str | int | None = None) -> SendResult:
        """A failed answer: the provider's ``error`` row if it has one, else ``status``'s."""
        return self.answer_rule(status, error).result(code, message)

    def answer_rule(self, status: int, error: str | int | None = None) -> Rule:
        """The row that classifies an answer with ``status`` and the provider's ``error``."""
        rule = self.error_rule(error)
        if rule is not None:
            return rule
        return self.statuses.get(str(status)) or self.statuses[f"{status // 100}xx"]

    def error_rule(self, error: str | int | None) -> Rule | None:
        """The row for the provider's own error code or message, if one names it."""
        if error is None:
            return None
        if not self.errors_are_phrases:
            return self.errors.get(str(error))
        text = str(error).lower()
        return next((rule for phrase, rule in self.errors.items() if phrase in text), None)

    def exception(self, error: BaseException, message: str) -> SendResult:
        """A transport exception, classified by the first row it (or a cause) matches."""
        row = self.exception_row(error)
        return row.rule.result(row.code, message)

    def exception_row(self, error: BaseException) -> ExceptionRow:
        """The first row whose type ``error`` or one of its causes is an instance of."""
        chain = list(raised_from(error))
        for row in self.exceptions:
            if any(isinstance(cause, row.error) for cause in chain):
                return row
        raise error  # no row: a bug, and bugs raise (providers/base.py)


def raised_from(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what it was raised from or while handling, innermost last
    (``requests`` wraps urllib3's errors, which wrap the socket's)."""
    current: BaseException | None = error
    for _ in range(CAUSE_DEPTH):
        if current is None:
            return
        yield current
        current = current.__cause__ or current.__context__


# -- HTTP, shared by the HTTP adapters -----------------------------------------------------
#: HTTP statuses of a failed answer (the adapters' own error rows come first).
HTTP_STATUSES: Mapping[str, Rule] = MappingProxyType({
    **dict.fromkeys(["301", "302", "307", "308"], Rule(
        REFUSED, "the base URL redirects (moved or wrong); herald does not follow a "
                 "redirect, and the provider did not act on the request")),
    "3xx": Rule(AMBIGUOUS, "another redirect, which may follow a create (303 See Other)"),
    "401": Rule(REFUSED, "bad credentials: this provider's account, not the message"),
    "403": Rule(REFUSED, "forbidden: this provider's account or permissions"),
    "404": Rule(REFUSED, "no such endpoint: the base URL or the account is wrong"),
    "408": Rule(TRANSIENT, "the provider gave up reading the request: not accepted"),
    "429": Rule(TRANSIENT, "rate limited: not accepted, may pass later"),
    "504": Rule(AMBIGUOUS, "a gateway timed out waiting for the provider, which may "
                           "have accepted"),
    "4xx": Rule(TERMINAL, "the provider found the request invalid (message or recipient)"),
    "5xx": Rule(TRANSIENT, "the provider failed: not accepted, may pass later"),
})

#: httpx's transport errors, and what building the request raises (Taqnyat, OneSignal:
#: providers/http.py).
HTTPX_ERRORS: tuple[ExceptionRow, ...] = (
    ExceptionRow(httpx.ConnectTimeout, "connect_timeout",
                 Rule(TRANSIENT, "no connection within the timeout: nothing was sent")),
    ExceptionRow(httpx.ConnectError, "connection",
                 Rule(TRANSIENT, "connect refused or reset, DNS or TLS failure: nothing "
                                 "was sent")),
    ExceptionRow(httpx.PoolTimeout, "pool_timeout",
                 Rule(TRANSIENT, "no free connection in the pool: nothing was sent")),
    ExceptionRow(httpx.ProxyError, "connection",
                 Rule(TRANSIENT, "the proxy refused the connection: nothing was sent")),
    ExceptionRow(httpx.WriteTimeout, "write_timeout",
                 Rule(TRANSIENT, "the request was not all written; no server acts on "
                                 "half a request")),
    ExceptionRow(httpx.WriteError, "connection",
                 Rule(TRANSIENT, "the connection failed while writing the request; no "
                                 "server acts on half a request")),
    ExceptionRow(httpx.UnsupportedProtocol, "not_configured",
                 Rule(REFUSED, "the base URL's scheme is not http(s)")),
    ExceptionRow(httpx.LocalProtocolError, "not_configured",
                 Rule(REFUSED, "herald could not form the request (a setting such as the "
                               "API key is malformed)")),
    ExceptionRow(UnicodeEncodeError, "not_configured",
                 Rule(REFUSED, "a header value (such as the API key) is not ASCII")),
    ExceptionRow(httpx.ReadTimeout, "timeout",
                 Rule(AMBIGUOUS, "no answer within the timeout after the request was sent")),
    ExceptionRow(httpx.RemoteProtocolError, "connection_lost",
                 Rule(AMBIGUOUS, "the provider closed the connection after the request, "
                                 "before a complete answer")),
    ExceptionRow(httpx.ReadError, "connection_reset",
                 Rule(AMBIGUOUS, "the connection was reset while waiting for the answer")),
    ExceptionRow(httpx.DecodingError, "bad_response",
                 Rule(AMBIGUOUS, "an answer came that could not be decoded")),
    ExceptionRow(httpx.HTTPError, "connection",
                 Rule(AMBIGUOUS, "another transport failure: the request may have gone")),
)

#: requests' (and urllib3's) transport errors, as the Twilio SDK raises them.
REQUESTS_ERRORS: tuple[ExceptionRow, ...] = (
    ExceptionRow(requests.ConnectTimeout, "connect_timeout",
                 Rule(TRANSIENT, "no connection within the timeout: nothing was sent")),
    ExceptionRow(requests.exceptions.SSLError, "tls",
                 Rule(TRANSIENT, "the TLS handshake failed: nothing was sent")),
    ExceptionRow(requests.exceptions.ProxyError, "connection",
                 Rule(TRANSIENT, "the proxy refused the connection: nothing was sent")),
    ExceptionRow(NewConnectionError, "connection",
                 Rule(TRANSIENT, "connect refused or DNS failure: nothing was sent")),
    ExceptionRow(requests.ReadTimeout, "timeout",
                 Rule(AMBIGUOUS, "no answer within the timeout after the request was sent")),
    ExceptionRow(ProtocolError, "connection_lost",
                 Rule(AMBIGUOUS, "the connection was lost after the request was sent, "
                                 "before a complete answer")),
    ExceptionRow(requests.exceptions.ChunkedEncodingError, "connection_lost",
                 Rule(AMBIGUOUS, "the answer was cut off")),
    ExceptionRow(requests.exceptions.InvalidURL, "not_configured",
                 Rule(REFUSED, "the base URL is not a valid URL")),
    ExceptionRow(requests.exceptions.MissingSchema, "not_configured",
                 Rule(REFUSED, "the base URL has no scheme")),
    ExceptionRow(requests.exceptions.InvalidSchema, "not_configured",
                 Rule(REFUSED, "the base URL's scheme is not http(s)")),
    ExceptionRow(requests.RequestException, "connection",
                 Rule(AMBIGUOUS, "another transport failure: the request may have gone")),
)

#: What an adapter says when it is not set up, or handed a channel it does not carry.
_NOT_CONFIGURED = Rule(REFUSED, "the provider's settings are missing")
_UNSUPPORTED_CHANNEL = Rule(REFUSED, "this provider does not carry the channel")

# -- the adapters ------------------------------------------------------------------------
TWILIO = Table(
    provider="twilio",
    outcomes=MappingProxyType({"not_configured": _NOT_CONFIGURED,
                               "unsupported_channel": _UNSUPPORTED_CHANNEL}),
    errors=MappingProxyType({
        "20429": Rule(TRANSIENT, "too many requests"),
        "21611": Rule(TRANSIENT, "the sender's queue is full"),
        "20003": Rule(REFUSED, "authentication failed: this account's credentials"),
        "20005": Rule(REFUSED, "this Twilio account is not active"),
        "20404": Rule(REFUSED, "no such resource: the account SID or base URL is wrong"),
        "21212": Rule(REFUSED, "the 'From' number is not valid"),
        "21408": Rule(REFUSED, "permission to send to this region is not enabled"),
        "21606": Rule(REFUSED, "the 'From' number is not a valid sender for this account"),
        "21608": Rule(REFUSED, "a trial account can only send to verified numbers"),
        "21612": Rule(REFUSED, "Twilio cannot route to this number from this sender"),
        "21659": Rule(REFUSED, "the 'From' is not a Twilio number or verified sender"),
        "21211": Rule(TERMINAL, "the 'To' number is not a valid phone number"),
        "21214": Rule(TERMINAL, "the 'To' number cannot be reached"),
        "21604": Rule(TERMINAL, "the message has no 'To' number"),
        "21614": Rule(TERMINAL, "the 'To' number is not a mobile number"),
        "21610": Rule(TERMINAL, "the recipient unsubscribed (STOP): no provider may send"),
        "21602": Rule(TERMINAL, "the message has no body"),
        "21617": Rule(TERMINAL, "the body exceeds the 1600-character limit"),
    }),
    statuses=HTTP_STATUSES,
    exceptions=REQUESTS_ERRORS,
)

TAQNYAT = Table(
    provider="taqnyat",
    outcomes=MappingProxyType({
        "not_configured": _NOT_CONFIGURED,
        "unsupported_channel": _UNSUPPORTED_CHANNEL,
        "recipient_rejected": Rule(REFUSED, "a 201 listing the well-formed number as "
                                            "rejected: a destination Taqnyat does not "
                                            "serve"),
    }),
    errors=MappingProxyType({
        "sender name is not active": Rule(REFUSED, "the sender name is not registered "
                                                   "with Taqnyat"),
        "invalid recipients": Rule(TERMINAL, "the recipient is not a valid number"),
        "message body is empty": Rule(TERMINAL, "the message has no body"),
    }),
    errors_are_phrases=True,
    statuses=HTTP_STATUSES,
    exceptions=HTTPX_ERRORS,
)

ONESIGNAL = Table(
    provider="onesignal",
    outcomes=MappingProxyType({
        "not_configured": _NOT_CONFIGURED,
        "attachments_unsupported": Rule(REFUSED, "OneSignal email cannot carry "
                                                 "attachments; SMTP can"),
        "cc_unsupported": Rule(REFUSED, "OneSignal email cannot carry a Cc; SMTP can"),
        "no_recipients": Rule(REFUSED, "a 200 that created nothing: OneSignal has no "
                                       "subscription for the recipient"),
        "bad_response": Rule(AMBIGUOUS, "a success answer without an id: perhaps "
                                        "created (the retry is deduplicated)"),
    }),
    errors=MappingProxyType({
        "app_id not found": Rule(REFUSED, "the app id is not this account's"),
        "not configured": Rule(REFUSED, "the app has this channel not set up"),
        "invalid phone number": Rule(TERMINAL, "the recipient is not a valid number"),
        "must have english language content": Rule(TERMINAL, "the message has no text"),
        "must have email_subject and email_body": Rule(TERMINAL, "the email has no "
                                                                 "subject or body"),
    }),
    errors_are_phrases=True,
    statuses=HTTP_STATUSES,
    exceptions=HTTPX_ERRORS,
)


# -- SMTP --------------------------------------------------------------------------------
#: The stages of an SMTP transaction a reply can refuse at, by the aiosmtplib exception
#: that carries the reply (first match wins; STARTTLS raises the base class).
SMTP_STAGES: tuple[tuple[type[aiosmtplib.SMTPException], str], ...] = (
    (aiosmtplib.SMTPAuthenticationError, "auth"),
    (aiosmtplib.SMTPSenderRefused, "mail"),
    (aiosmtplib.SMTPRecipientRefused, "rcpt"),
    (aiosmtplib.SMTPDataError, "data"),
    (aiosmtplib.SMTPException, "connect"),
)
#: An enhanced status code at the start of a reply's text (RFC 3463): class.subject.detail.
_ENHANCED_STATUS = re.compile(r"^\s*([245])\.(\d{1,3})\.\d{1,3}\b")

SMTP = Table(
    provider="smtp",
    outcomes=MappingProxyType({"unsupported_channel": _UNSUPPORTED_CHANNEL}),
    statuses=MappingProxyType({
        "* 4xx": Rule(TRANSIENT, "the relay says try again later (greylisting, busy, "
                                 "temporary auth failure)"),
        "connect 5xx": Rule(REFUSED, "the relay will not serve herald (greeting, EHLO or "
                                     "STARTTLS refused)"),
        "auth 5xx": Rule(REFUSED, "the relay refused the credentials (530/534/535)"),
        "mail 5xx": Rule(REFUSED, "the relay refused the sender (authentication "
                                  "required, sender not allowed)"),
        "rcpt 5.7.x": Rule(REFUSED, "a policy refusal at RCPT TO is about herald (relay "
                                    "access denied): another relay may be allowed"),
        "rcpt 554": Rule(REFUSED, "transaction failed at RCPT TO: relay access denied"),
        "rcpt 5xx": Rule(TERMINAL, "the recipient's mailbox is unknown, unavailable or "
                                   "its address malformed (550/551/553)"),
        "data 5.1.x": Rule(TERMINAL, "the recipient's address refused after the message"),
        "data 5xx": Rule(REFUSED, "the relay refused the message (its size limit, its "
                                  "content or sender policy): another relay may take it"),
        "* *": Rule(TRANSIENT, "an unexpected reply before the message was accepted"),
    }),
    exceptions=(
        ExceptionRow(aiosmtplib.SMTPConnectTimeoutError, "connect_timeout",
                     Rule(TRANSIENT, "no connection within the deadline: nothing was sent")),
        ExceptionRow(aiosmtplib.SMTPConnectError, "connection",
                     Rule(TRANSIENT, "connect refused or failed: nothing was sent")),
        ExceptionRow(TimeoutError, "timeout",
                     Rule(TRANSIENT, "no answer before the message was sent")),
        ExceptionRow(OSError, "connection",
                     Rule(TRANSIENT, "disconnected, reset or TLS failure before the "
                                     "message was sent")),
        ExceptionRow(aiosmtplib.SMTPException, "smtp_config",
                     Rule(REFUSED, "the relay lacks an extension the settings require "
                                   "(STARTTLS, AUTH)")),
    ),
)

#: The SMTP transport's failures once the DATA command was issued: the relay may have
#: the whole message (herald cannot see whether the loss came before the final dot).
SMTP_AFTER_DATA = Table(
    provider="smtp",
    exceptions=(
        ExceptionRow(TimeoutError, "timeout",
                     Rule(AMBIGUOUS, "no answer to the message: the relay may have it")),
        ExceptionRow(OSError, "connection_lost",
                     Rule(AMBIGUOUS, "the connection was lost during DATA: the relay "
                                     "may have the message")),
        ExceptionRow(aiosmtplib.SMTPException, "connection_lost",
                     Rule(AMBIGUOUS, "the transaction broke during DATA: the relay may "
                                     "have the message")),
    ),
)


def smtp_stage(error: aiosmtplib.SMTPException) -> str:
    """The stage (``connect``, ``auth``, ``mail``, ``rcpt``, ``data``) a reply refused at."""
    return next(stage for kind, stage in SMTP_STAGES if isinstance(error, kind))


def smtp_reply_rule(stage: str, code: int, text: str) -> Rule:
    """The SMTP row for reply ``code`` (with ``text``) at ``stage``: by the enhanced
    status class, then the exact code, then the code's class, first at the stage, then
    at any stage (``*``)."""
    enhanced = _ENHANCED_STATUS.match(text)
    keys = [f"{code}", f"{code // 100}xx"]
    if enhanced:
        keys.insert(0, f"{enhanced[1]}.{enhanced[2]}.x")
    for where in (stage, "*"):
        for key in keys:
            rule = SMTP.statuses.get(f"{where} {key}")
            if rule is not None:
                return rule
    return SMTP.statuses["* *"]


def smtp_reply(stage: str, code: int, text: str, message: str) -> SendResult:
    """An SMTP reply refusing at ``stage``, as ``smtp_<code>`` (see :func:`smtp_reply_rule`)."""
    return smtp_reply_rule(stage, code, text).result(f"smtp_{code}", message)


def smtp_exception(error: BaseException, message: str, *, data_started: bool) -> SendResult:
    """The SMTP transport's ``error``: ambiguous once the DATA command was issued."""
    return (SMTP_AFTER_DATA if data_started else SMTP).exception(error, message)
