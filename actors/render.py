"""Rendering a notification for one channel: the event-type catalogue and its templates.

Channel workers render a delivery right before dispatch: :func:`render` turns an
event's ``data`` and the recipient's ``account`` into a :class:`Rendered` message for one
channel and locale, attachments included (the ``esim.ready`` email carries the eSIM QR
code). The HTTP layer calls
:func:`validate_event_data` before it persists anything, so an event that could never
render is answered with 422 instead of failing later in a worker.

Templates live in the repository's ``templates/`` directory::

    templates/notifications/_base_email.html          shared HTML email layout
    templates/notifications/_macros.html              button, code box, detail row
    templates/notifications/<type>/<locale>/
        email_subject.txt  email.html  email.txt      when the type has the email channel
        sms.txt                                       when it has sms
        in_app.txt                                    when it has in_app

Templates see two variables: ``data`` (the event's data) and ``account`` (``locale``,
maybe ``display_name``). Undefined names fail loudly (``StrictUndefined``), so every
optional value is read through a ``default`` filter; the data is checked up front
against its type's model (:class:`EventData`). Two filters help: ``money``
(``amount|money(currency)``) and ``http_url`` (a link only when it is an http(s) URL).

The catalogue (:data:`EVENT_TYPES`)
-----------------------------------
``account.welcome``
    email, sms, in_app; transactional. Requires nothing. Optional: ``get_started_url``.
``payment.receipt``
    email; transactional. Requires ``amount``, ``currency``, ``order_id``. Optional:
    ``description``, ``paid_at``, ``payment_method``, ``receipt_url``.
``esim.ready``
    email (with the QR code attached and shown inline), sms; transactional. Requires
    ``iccid``, ``activation_code``. Optional: ``plan_name``.
``promo.offer``
    email, sms; marketing (``transactional: false``). Requires ``headline``, ``code``.
    Optional: ``body``, ``valid_until``, ``url``, ``unsubscribe_url``.

Each type's data model refuses unknown keys, blank required texts, texts over their
length (``headline`` 200 characters, ``code`` 64, ``body`` 2,000, URLs 2,048, ...),
and amounts that are not finite, not a number, negative or past four decimals; the
model classes below are the reference.

``activation_code`` is the eSIM's LPA string (``LPA:1$smdp.example.com$ABC-123``); the
email shows it as a QR code and, for manual installation, as its SM-DP+ address and
matching id. ``amount`` is in major units (``12.5`` or ``"12.50"``), shown with the
currency's usual number of decimals.

Every type ships in ``en`` and ``ar`` (right-to-left). Nothing here logs: rendered
text, data values and account details are personal data (see :mod:`herald.logs`), and
:class:`RenderError` messages name event types, channels, template files and data keys,
never values.
"""

from __future__ import annotations

import io
import re
import traceback
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias, get_args

import jinja2
import qrcode
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)
from pydantic_core import PydanticCustomError
from qrcode.constants import ERROR_CORRECT_M
from qrcode.image.pil import PilImage

from herald.queue.errors import Permanent
from providers.base import Attachment

#: The template directory beside the ``actors`` package: the checkout's ``templates/``, or
#: the copy a wheel installs next to ``actors/`` (pyproject.toml lists it as package data).
TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "templates"
#: Where the notification templates live, relative to :data:`TEMPLATES_DIR`.
NOTIFICATIONS_DIR = "notifications"

#: The locales every template ships in; an account's locale is one of them.
Locale = Literal["en", "ar"]
SUPPORTED_LOCALES: tuple[str, ...] = get_args(Locale)
DEFAULT_LOCALE = "en"

#: Longest SMS text :func:`render` returns, in characters (about seven UCS-2 segments).
SMS_MAX_CHARS = 480

#: The eSIM QR code: module size in pixels, quiet zone in modules, error correction.
QR_BOX_SIZE = 10
QR_BORDER = 4
QR_ERROR_CORRECTION = ERROR_CORRECT_M
#: The QR attachment's file name and Content-ID (the HTML shows ``cid:esim-qr``).
QR_FILENAME = "esim-qr.png"
QR_CONTENT_ID = "esim-qr"


# ---------------------------------------------------------------------------------------
# The catalogue: each type's channels, category and data model


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must not be blank")
    return value


#: A required text is a string, not blank, with a length limit:
#: ``Annotated[str, StringConstraints(max_length=…), NOT_BLANK]``; an optional one is
#: ``Annotated[str | None, StringConstraints(max_length=…)]`` (a string, or null).
NOT_BLANK = AfterValidator(_not_blank)

#: Longest URL accepted in event data (the de facto limit of browsers and mail clients).
URL_MAX_CHARS = 2048
Url: TypeAlias = Annotated[str | None, StringConstraints(max_length=URL_MAX_CHARS)]
#: A money amount in major units: ``12.5`` or ``"12.50"``, finite, not negative.
Amount = Annotated[Decimal, Field(ge=0, max_digits=18, decimal_places=4)]


class EventData(BaseModel):
    """The data of one event type. Unknown keys are refused (a misspelt optional key would
    otherwise vanish silently); numbers must be finite; every text has a length limit."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class WelcomeData(EventData):
    """``account.welcome``: nothing required."""

    get_started_url: Url = None


class ReceiptData(EventData):
    """``payment.receipt``: what was paid, in which currency, for which order."""

    amount: Amount
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{3}$")]
    order_id: Annotated[str, StringConstraints(max_length=128), NOT_BLANK]
    description: Annotated[str | None, StringConstraints(max_length=500)] = None
    paid_at: Annotated[str | None, StringConstraints(max_length=64)] = None
    payment_method: Annotated[str | None, StringConstraints(max_length=64)] = None
    receipt_url: Url = None


class EsimReadyData(EventData):
    """``esim.ready``: the eSIM's ICCID and its LPA activation code."""

    iccid: Annotated[str, StringConstraints(max_length=32), NOT_BLANK]
    activation_code: Annotated[str, StringConstraints(max_length=512), NOT_BLANK]
    plan_name: Annotated[str | None, StringConstraints(max_length=100)] = None


class PromoData(EventData):
    """``promo.offer``: a headline and a code."""

    headline: Annotated[str, StringConstraints(max_length=200), NOT_BLANK]
    code: Annotated[str, StringConstraints(max_length=64), NOT_BLANK]
    body: Annotated[str | None, StringConstraints(max_length=2000)] = None
    valid_until: Annotated[str | None, StringConstraints(max_length=64)] = None
    url: Url = None
    unsubscribe_url: Url = None


@dataclass(frozen=True, kw_only=True)
class EventType:
    """One event type of the catalogue: its channels, its category and its data model.

    The type owns its category: a transactional type reaches accounts that opted out of
    marketing, a marketing one never does.
    """

    name: str
    channels: tuple[str, ...]
    transactional: bool
    data: type[EventData]

    @property
    def required_data(self) -> tuple[str, ...]:
        """The data keys the type requires, in declaration order."""
        return tuple(key for key, field in self.data.model_fields.items() if field.is_required())

    @property
    def optional_data(self) -> tuple[str, ...]:
        """The data keys the templates use when present."""
        return tuple(key for key, field in self.data.model_fields.items()
                     if not field.is_required())


EVENT_TYPES: dict[str, EventType] = {
    spec.name: spec
    for spec in (
        EventType(name="account.welcome", channels=("email", "sms", "in_app"),
                  transactional=True, data=WelcomeData),
        EventType(name="payment.receipt", channels=("email",), transactional=True,
                  data=ReceiptData),
        EventType(name="esim.ready", channels=("email", "sms"), transactional=True,
                  data=EsimReadyData),
        EventType(name="promo.offer", channels=("email", "sms"), transactional=False,
                  data=PromoData),
    )
}


@dataclass(frozen=True, kw_only=True)
class Rendered:
    """A message ready for a provider: ``subject`` and ``html`` are set for email only."""

    channel: str
    locale: str
    subject: str | None
    text: str
    html: str | None
    attachments: tuple[Attachment, ...]


class UnknownEventType(ValueError):
    """An event type that the catalogue does not know (the HTTP layer answers 422)."""

    def __str__(self) -> str:
        return f"unknown event type {self.args[0]!r}"


class InvalidEventData(ValueError):
    """Event data that does not fit its type's model; ``keys`` names the keys at fault
    (in the order found) and the message says what is wrong with each, never a value."""

    def __init__(self, event_type: str, problems: list[tuple[str, str]]) -> None:
        super().__init__(f"{event_type} event data: "
                         + "; ".join(f"{key}: {message}" for key, message in problems))
        self.event_type = event_type
        self.keys = tuple(key for key, _ in problems)


class RenderError(Permanent):
    """A template could not be rendered (missing data, channel the type lacks, SMS too long).

    Permanent for the job: another attempt would render the same data the same way.
    """


def event_type(name: str) -> EventType:
    """The catalogue entry for ``name``; :class:`UnknownEventType` when there is none."""
    return _lookup(name)


def _lookup(name: str) -> EventType:
    # event_type() under another name: render()'s parameter of that name shadows it.
    try:
        return EVENT_TYPES[name]
    except (KeyError, TypeError):
        raise UnknownEventType(name) from None


#: Longest data key repeated in an error message (an unknown key is the client's text).
_KEY_MAX_CHARS = 64


def validate_event_data(name: str, data: Mapping[str, Any]) -> None:
    """Check ``data`` against the type's model: required keys present and not blank, every
    value of its type and length, numbers finite, no unknown key.

    Raises :class:`UnknownEventType` for an unknown type and :class:`InvalidEventData`
    (a ``ValueError`` naming each key at fault) otherwise; both before anything is stored.
    """
    spec = _lookup(name)
    if not isinstance(data, Mapping):
        raise ValueError(f"{name} event data must be an object")
    try:
        spec.data.model_validate(data)
    except ValidationError as error:
        problems = [(".".join(str(part) for part in problem["loc"])[:_KEY_MAX_CHARS],
                     problem["msg"]) for problem in error.errors(include_input=False)]
        raise InvalidEventData(name, problems) from None


def resolve_locale(locale: str | None) -> str:
    """The supported locale to render ``locale`` in: itself, its base language, or ``en``.

    ``"ar-SA"`` → ``"ar"``, ``"en_GB"`` → ``"en"``, ``"fr"`` or ``None`` → ``"en"``.
    """
    if not locale or not isinstance(locale, str):
        return DEFAULT_LOCALE
    tag = locale.strip().replace("_", "-").lower()
    for candidate in (tag, tag.split("-", 1)[0]):
        if candidate in SUPPORTED_LOCALES:
            return candidate
    return DEFAULT_LOCALE


# ---------------------------------------------------------------------------------------
# The Jinja2 environment


#: Digits after the decimal point for currencies that do not use two (ISO 4217).
_CURRENCY_DECIMALS = {
    "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
    "CLP": 0, "ISK": 0, "JPY": 0, "KRW": 0, "UGX": 0, "VND": 0, "XAF": 0, "XOF": 0,
}


def format_money(amount: Any, currency: Any) -> str:
    """``12.5, "sar"`` → ``"12.50 SAR"``; an amount that is not a number is shown as given."""
    code = str(currency).strip().upper()
    if isinstance(amount, bool):
        return f"{amount} {code}"
    try:
        value = Decimal(str(amount).strip())
    except (InvalidOperation, ValueError):
        return f"{amount} {code}"
    if not value.is_finite():
        return f"{amount} {code}"
    places = _CURRENCY_DECIMALS.get(code, 2)
    return f"{value:,.{places}f} {code}"


def http_url(value: Any) -> str:
    """``value`` when it is an http(s) URL, else ``""``: templates link nothing else."""
    url = str(value).strip()
    return url if url.lower().startswith(("https://", "http://")) else ""


class _Environment(jinja2.Environment):
    """A Jinja2 environment whose templates keep their globals in a plain dict.

    Jinja2 gives each template a ChainMap over the environment's globals and copies and
    searches it on every render (the context, each ``{% import %}``): a quarter of a
    channel worker's email render (bench/README.md, "The worker's path"). Our
    environment's globals are set when it is built and never after, so a snapshot taken
    when a template loads is all it would ever see.
    """

    def make_globals(self, d: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
        return {**self.globals, **(d or {})}


@cache
def environment() -> jinja2.Environment:
    """The shared, cached Jinja2 environment over :data:`TEMPLATES_DIR`."""
    env = _Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=jinja2.select_autoescape(
            enabled_extensions=("html",), default_for_string=False, default=False
        ),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        # templates ship with the code: no stat of each file on every render
        auto_reload=False,
    )
    env.filters["money"] = format_money
    env.filters["http_url"] = http_url
    return env


def template_name(event_type: str, locale: str, file: str) -> str:
    """The loader name of one template file, e.g. ``notifications/esim.ready/ar/sms.txt``."""
    return f"{NOTIFICATIONS_DIR}/{event_type}/{locale}/{file}"


def _where(exc: BaseException, name: str) -> str:
    """``name`` or, when the traceback shows it, the template file and line that failed."""
    where = name
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if path.is_relative_to(TEMPLATES_DIR) and frame.lineno:
            where = f"{path.relative_to(TEMPLATES_DIR).as_posix()}, line {frame.lineno}"
    return where


#: Account keys templates may read (besides the catalogue's data keys).
ACCOUNT_KEYS = ("locale", "display_name")

_UNDEFINED_NAME = re.compile(r"has no attribute '([^']*)'|^'([^']*)' is undefined")


def _undefined(exc: jinja2.UndefinedError, spec: EventType) -> str:
    """Describe an undefined value by its key only when that key is a schema name.

    Jinja names the key it looked up, and a template that indexes with data
    (``labels[data.plan]``) would put a *value* there; only catalogue and account keys,
    which are never personal data, are repeated.
    """
    match = _UNDEFINED_NAME.search(exc.message or "")
    key = next((group for group in match.groups() if group), None) if match else None
    if key in (*spec.required_data, *spec.optional_data, *ACCOUNT_KEYS):
        return f"undefined value {key!r} (use a default filter for optional data)"
    return "undefined value"


def _render_file(spec: EventType, locale: str, file: str, context: dict[str, Any]) -> str:
    """Render one template file; any failure becomes a :class:`RenderError` without values.

    Exception messages from inside a template may quote the data (``int('a@b.c')``), so
    they are replaced by the template file and line, the exception's class and, for an
    undefined value, its key when it is a schema name; the original is not chained.
    """
    name = template_name(spec.name, locale, file)
    try:
        return environment().get_template(name).render(context)
    except jinja2.TemplateNotFound as exc:
        error = RenderError(f"template {exc.name} not found")
    except jinja2.UndefinedError as exc:
        error = RenderError(f"{_where(exc, name)}: {_undefined(exc, spec)}")
    except jinja2.TemplateSyntaxError as exc:
        error = RenderError(f"{exc.name or name}, line {exc.lineno}: syntax error")
    except Exception as exc:
        error = RenderError(f"{_where(exc, name)}: {type(exc).__name__} while rendering")
    raise error


_BLANK_LINES = re.compile(r"\n{3,}")


def _clean_text(text: str) -> str:
    """Strip trailing spaces from every line, keep at most one blank line in a row."""
    lines = "\n".join(line.rstrip() for line in text.strip().splitlines())
    return _BLANK_LINES.sub("\n\n", lines)


# ---------------------------------------------------------------------------------------
# Attachments


def qr_png(text: str) -> bytes:
    """A PNG of the QR code of ``text`` (same text, same bytes)."""
    code = qrcode.QRCode(
        error_correction=QR_ERROR_CORRECTION, box_size=QR_BOX_SIZE, border=QR_BORDER
    )
    code.add_data(text)
    code.make(fit=True)
    buffer = io.BytesIO()
    code.make_image(image_factory=PilImage).save(buffer, format="PNG")
    return buffer.getvalue()


def _esim_qr(data: Mapping[str, Any]) -> tuple[Attachment, ...]:
    return (
        Attachment(
            filename=QR_FILENAME,
            content_type="image/png",
            data=qr_png(str(data["activation_code"]).strip()),
            content_id=QR_CONTENT_ID,
        ),
    )


AttachmentBuilder = Callable[[Mapping[str, Any]], tuple[Attachment, ...]]

#: Attachment builders by (event type, channel).
_ATTACHMENTS: dict[tuple[str, str], AttachmentBuilder] = {
    ("esim.ready", "email"): _esim_qr,
}


# ---------------------------------------------------------------------------------------
# Rendering


#: Push has no templates of its own: it shows the in-app text, else the SMS text.
PUSH_SOURCES = ("in_app", "sms")


def template_channel(spec: EventType, channel: str) -> str | None:
    """Whose templates render ``channel`` for this type (None: the type cannot)."""
    if channel in spec.channels:
        return channel
    if channel == "push":
        return next((c for c in PUSH_SOURCES if c in spec.channels), None)
    return None


def render(
    event_type: str,
    channel: str,
    locale: str | None,
    data: Mapping[str, Any],
    account: Mapping[str, Any] | None = None,
) -> Rendered:
    """Render ``event_type`` for ``channel`` in ``locale`` (else the account's, else ``en``).

    Email gets a one-line subject, HTML and a plain-text alternative (plus attachments);
    SMS and in-app get stripped text only. Raises :class:`UnknownEventType` for an unknown
    type and :class:`RenderError` when the type lacks the channel, required data is
    missing, a template fails, or an SMS is longer than :data:`SMS_MAX_CHARS`.
    """
    spec = _lookup(event_type)
    source = template_channel(spec, channel)
    if source is None:
        raise RenderError(f"{event_type} has no {channel!r} channel")
    try:
        validate_event_data(event_type, data)
    except ValueError as exc:
        raise RenderError(str(exc)) from None
    account = dict(account or {})
    resolved = resolve_locale(locale or account.get("locale"))
    context = {"data": dict(data), "account": account}

    subject: str | None
    html: str | None
    if channel == "email":
        subject = " ".join(_render_file(spec, resolved, "email_subject.txt", context).split())
        if not subject:
            raise RenderError(f"{template_name(event_type, resolved, 'email_subject.txt')} "
                              "renders an empty subject")
        html = _render_file(spec, resolved, "email.html", context).strip() + "\n"
        text = _clean_text(_render_file(spec, resolved, "email.txt", context))
    else:
        subject = html = None
        text = _render_file(spec, resolved, f"{source}.txt", context).strip()
        if channel == "sms" and len(text) > SMS_MAX_CHARS:
            raise RenderError(f"{event_type} sms ({resolved}) renders {len(text)} characters; "
                              f"the limit is {SMS_MAX_CHARS}")
    if not text:
        raise RenderError(f"{event_type} {channel} ({resolved}) renders empty text")

    build = _ATTACHMENTS.get((event_type, channel))
    attachments = build(data) if build else ()
    return Rendered(channel=channel, locale=resolved, subject=subject, text=text, html=html,
                    attachments=attachments)
