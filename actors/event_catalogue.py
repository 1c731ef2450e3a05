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

from collections.abc import Mapping
from dataclasses import dataclass
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

from herald.settings import get_settings


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
    #: Channels on which the type always goes out: preferences cannot turn it off there,
    #: and quiet hours do not hold it (docs/api.md#preferences).
    required_channels: tuple[str, ...] = ()
    #: Seconds an urgent SMS of this type waits for its ``delivered`` receipt before it
    #: is sent once more through the next provider (None: never;
    #: docs/pipeline.md#delivery-report-fallback). SMS_FALLBACK_AFTER_S overrides it.
    fallback_after_s: float | None = None

    def __post_init__(self) -> None:
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
    spec = event_type(name)
    if not isinstance(data, Mapping):
        raise ValueError(f"{name} event data must be an object")
    try:
        spec.data.model_validate(data)
    except ValidationError as error:
        problems = [(".".join(str(part) for part in problem["loc"])[:_KEY_MAX_CHARS],
                     problem["msg"]) for problem in error.errors(include_input=False)]
        raise InvalidEventData(name, problems) from None
