"""The event-type catalogue: each type's channels, category and data model.

The HTTP layer calls :func:`validate_event_data` before it persists anything, so an event
that could never render is answered with 422 instead of failing later in a worker
(:mod:`actors.render` renders it; docs/pipeline.md lists the types).

The catalogue (:data:`EVENT_TYPES`)
-----------------------------------
``account.welcome``
    email, sms, in_app; transactional. Requires nothing. Optional: ``get_started_url``.
``payment.receipt``
    email (required); transactional. Requires ``amount``, ``currency``, ``order_id``. Optional:
    ``description``, ``paid_at``, ``payment_method``, ``receipt_url``.
``esim.ready``
    email (required; with the QR code attached and shown inline), sms; transactional. Requires
    ``iccid``, ``activation_code``. Optional: ``plan_name``.
``promo.offer``
    email, sms; marketing (``transactional: false``). Requires ``headline``, ``code``.
    Optional: ``body``, ``valid_until``, ``url``, ``unsubscribe_url``.
``account.activity``
    email, in_app; marketing. Requires ``text`` (the item's line). Optional: ``url``.
    Digested per account over ACTIVITY_DIGEST_WINDOW_S (:class:`Digest`,
    docs/api.md#digests): its events become one message, whose data is
    :class:`DigestMessageData` (the events, oldest first).

Each type's data model refuses unknown keys, blank required texts, texts over their
length (``headline`` 200 characters, ``code`` 64, ``body`` 2,000, URLs 2,048, ...),
and amounts that are not finite, not a number, negative or past four decimals; the
model classes below are the reference.

``activation_code`` is the eSIM's LPA string (``LPA:1$smdp.example.com$ABC-123``); the
email shows it as a QR code and, for manual installation, as its SM-DP+ address and
matching id. ``amount`` is in major units (``12.5`` or ``"12.50"``), shown with the
currency's usual number of decimals.

:class:`InvalidEventData` messages name event types and data keys, never values: event
data is personal data (see :mod:`herald.logs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, TypeAlias

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from actors.currencies import known_currency
from herald.settings import get_settings
from models.digests import DigestMode


def _currency(value: str) -> str:
    try:
        return known_currency(value)
    except ValueError as error:  # pydantic would prefix "Value error, "
        raise PydanticCustomError("unknown_currency", str(error)) from None


#: An ISO 4217 code herald knows (:mod:`actors.currencies`), any case, kept upper case.
Currency = Annotated[str, AfterValidator(_currency)]


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
    currency: Currency
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


class ActivityData(EventData):
    """``account.activity``: one line of activity, maybe with a link."""

    text: Annotated[str, StringConstraints(max_length=500), NOT_BLANK]
    url: Url = None


class DigestEvent(BaseModel):
    """One event of a digest message: its occurrence, its data (the type's model) and when
    it was accepted (ISO 8601)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    occurrence: str
    data: dict[str, Any]
    at: str


class DigestMessageData(EventData):
    """The data of a digested type's message: its events, oldest first, and how many of
    the newest the message lists (``shown``; the rest are counted, "and K more")."""

    events: Annotated[list[DigestEvent], Field(min_length=1)]
    shown: Annotated[int, Field(ge=1)]


@dataclass(frozen=True, kw_only=True)
class Digest:
    """How a digested type's events become one message (docs/api.md#digests).

    Events of one account with the same ``key`` — ``"account"``, or ``"data.<field>"``
    for the value of one data field — join one bucket, which closes ``window()`` after
    its first event (or at once when it holds ``max_items``). ``collect`` sends one
    message at the close; ``lookback`` sends the first event at once and the repeats of
    the window together at the close (nothing when none came).
    """

    key: str
    #: The window, read when a bucket opens (a setting may name it).
    window: Callable[[], timedelta]
    mode: DigestMode = DigestMode.COLLECT
    #: Events at which a bucket closes early; the message lists at most this many.
    max_items: int = 50

    def key_of(self, account_id: str, data: Mapping[str, Any]) -> str:
        """The bucket key of an event with this ``data``: ``account``, or
        ``<field>=<value>``."""
        if self.key == "account":
            return "account"
        field = self.key.removeprefix("data.")
        return f"{field}={data.get(field)}"[:255]


def _activity_window() -> timedelta:
    return timedelta(seconds=get_settings().activity_digest_window_s)


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
    #: Channels on which the type always goes out: preferences cannot turn it off there,
    #: and quiet hours do not hold it (docs/api.md#preferences).
    required_channels: tuple[str, ...] = ()
    #: Seconds an urgent SMS of this type waits for its ``delivered`` receipt before it
    #: is sent once more through the next provider (None: never;
    #: docs/pipeline.md#delivery-report-fallback). SMS_FALLBACK_AFTER_S overrides it.
    fallback_after_s: float | None = None
    #: Its events are collected into one message (None: each event is its own).
    digest: Digest | None = None

    def __post_init__(self) -> None:
        if self.digest is not None and self.digest.key != "account" and (
                self.digest.key.removeprefix("data.") not in self.data.model_fields
                or not self.digest.key.startswith("data.")):
            raise ValueError(f"{self.name}: digest key must be account or data.<field>")
        # in-app's preferences are settled in SQL as the event is persisted, which reads
        # no catalogue (models.notifications._in_app_gate): no type may require in-app
        if "in_app" in self.required_channels:
            raise ValueError(f"{self.name}: in_app cannot be a required channel")

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
                  data=ReceiptData, required_channels=("email",)),
        EventType(name="esim.ready", channels=("email", "sms"), transactional=True,
                  data=EsimReadyData, required_channels=("email",)),
        EventType(name="promo.offer", channels=("email", "sms"), transactional=False,
                  data=PromoData),
        EventType(name="account.activity", channels=("email", "in_app"), transactional=False,
                  data=ActivityData, digest=Digest(key="account", window=_activity_window)),
    )
}


def fallback_after_s(name: str) -> float | None:
    """How long an urgent SMS of the type ``name`` waits for its ``delivered`` receipt
    before the delivery-report fallback: SMS_FALLBACK_AFTER_S's value for it, else the
    type's own :attr:`EventType.fallback_after_s` (None: no fallback, or unknown type)."""
    wait = get_settings().sms_fallback_waits_s.get(name)
    if wait is not None:
        return wait
    spec = EVENT_TYPES.get(name)
    return spec.fallback_after_s if spec is not None else None


def fallback_setting_problem() -> str | None:
    """Why SMS_FALLBACK_AFTER_S cannot work, or None: each type it names must be in the
    catalogue and carry SMS (the worker's start refuses it otherwise)."""
    for name in get_settings().sms_fallback_waits_s:
        spec = EVENT_TYPES.get(name)
        if spec is None:
            return (f"SMS_FALLBACK_AFTER_S: unknown event type {name!r} "
                    f"(known: {', '.join(EVENT_TYPES)})")
        if "sms" not in spec.channels:
            return f"SMS_FALLBACK_AFTER_S: {name} is never sent by SMS"
    return None


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


def event_type(name: str) -> EventType:
    """The catalogue entry for ``name``; :class:`UnknownEventType` when there is none."""
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
    _validate(name, event_type(name).data, data)


def validate_message_data(name: str, data: Mapping[str, Any]) -> None:
    """Check the data of a notification of the type ``name`` (what its templates render):
    the event's data (:func:`validate_event_data`), or for a digested type a
    :class:`DigestMessageData` whose every event's data fits the type's model. Raises as
    :func:`validate_event_data` does."""
    spec = event_type(name)
    if spec.digest is None:
        _validate(name, spec.data, data)
        return
    _validate(name, DigestMessageData, data)
    for index, event in enumerate(data["events"]):
        try:
            _validate(name, spec.data, event["data"])
        except InvalidEventData as error:
            raise InvalidEventData(name, [(f"events.{index}.data.{key}", "invalid")
                                          for key in error.keys]) from None


def _validate(name: str, model: type[BaseModel], data: Mapping[str, Any]) -> None:
    if not isinstance(data, Mapping):
        raise ValueError(f"{name} event data must be an object")
    try:
        model.model_validate(data)
    except ValidationError as error:
        problems = [(".".join(str(part) for part in problem["loc"])[:_KEY_MAX_CHARS],
                     problem["msg"]) for problem in error.errors(include_input=False)]
        raise InvalidEventData(name, problems) from None
