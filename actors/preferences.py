"""An account's notification preferences: the document, its checks, what it blocks
(docs/api.md#preferences).

The document has three levels, each a map of channel → on/off::

    {"channels": {"sms": false},
     "categories": {"marketing": {"email": false}},
     "types": {"promo.offer": {"email": true}}}

A setting left out is on. For one delivery the most specific setting given wins: its
type's, then its category's (``marketing`` for a notification that is not
transactional, ``transactional`` otherwise), then its channel's. A channel in the type's
:attr:`~actors.event_catalogue.EventType.required_channels` is always on: a document
that turns one off is refused. ``marketing_opt_out`` is a gate of its own, before this
one (docs/pipeline.md#channel-workers).

The channel workers decide with :func:`blocking_setting`; in-app deliveries are decided
by the same rules in SQL as they are persisted (:func:`models.notifications._in_app_gate`).

Errors name keys, never values: a preference is the account's own data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError
from sqlmodel import select

from actors.event_catalogue import EVENT_TYPES
from herald.db import session as db_session
from models.base import utcnow
from models.notifications import Account

#: The channels a preference may name.
ChannelName = Literal["email", "sms", "push", "in_app"]
#: The categories a preference may name: a notification is one or the other.
CategoryName = Literal["marketing", "transactional"]
#: Channel → on (true) or off (false); a channel left out is on.
Switches = dict[ChannelName, StrictBool]
#: Longest client key repeated in an error (an unknown type is the client's text).
_KEY_MAX_CHARS = 64


class PreferenceDocument(BaseModel):
    """An account's preferences: channel, category and type switches (unset = on)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    channels: Switches = Field(default_factory=dict,
                               description="Channel → on/off, for every notification.")
    categories: dict[CategoryName, Switches] = Field(
        default_factory=dict, description="Category (marketing, transactional) → channel "
                                          "→ on/off; beats `channels`.")
    types: dict[Annotated[str, Field(max_length=_KEY_MAX_CHARS)], Switches] = Field(
        default_factory=dict, description="Event type → channel → on/off; beats "
                                          "`categories` and `channels`. A type's required "
                                          "channels cannot be turned off.")

    def stored(self) -> dict[str, Any]:
        """The document as stored and answered: each level present (``{}`` where empty),
        a type or category left with no switch dropped."""
        return {"channels": dict(self.channels),
                "categories": {name: dict(s) for name, s in self.categories.items() if s},
                "types": {name: dict(s) for name, s in self.types.items() if s}}


class InvalidPreferences(ValueError):
    """A document that cannot be stored. ``problems`` are pydantic-shaped (``loc``,
    ``msg``, ``type``), located from the document's root; none quotes a value."""

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(
            f"{'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}"
            for problem in problems))
        self.problems = problems


def _cut(key: object) -> str:
    return str(key)[:_KEY_MAX_CHARS]


def parse_document(raw: Any) -> PreferenceDocument:
    """The document ``raw`` (decoded JSON) as checked: only the three levels, known
    channels and categories, catalogue types, booleans (``"no"`` is not one), and no
    type's required channel turned off. :class:`InvalidPreferences` otherwise, naming
    each key at fault."""
    try:
        document = PreferenceDocument.model_validate(raw)
    except ValidationError as error:
        raise InvalidPreferences([
            {"loc": tuple(_cut(part) for part in problem["loc"]), "msg": problem["msg"],
             "type": problem["type"]} for problem in error.errors(include_input=False)
        ]) from None
    problems: list[dict[str, Any]] = []
    for name, switches in document.types.items():
        spec = EVENT_TYPES.get(name)
        if spec is None:
            problems.append({"loc": ("types", _cut(name)), "type": "unknown_event_type",
                             "msg": f"unknown event type (the types: {', '.join(EVENT_TYPES)})"})
            continue
        off = {channel for channel, on in switches.items() if not on}
        for channel in spec.required_channels:
            if channel in off:
                problems.append({"loc": ("types", name, channel), "type": "required_channel",
                                 "msg": f"{name} is required on {channel}: preferences "
                                        "cannot turn it off"})
    if problems:
        raise InvalidPreferences(problems)
    return document


def merge_patch(target: Any, patch: Any) -> Any:
    """``patch`` applied to ``target`` as a JSON merge patch (RFC 7396): objects merge key
    by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


# -- what it blocks ----------------------------------------------------------------------
def category_of(transactional: bool) -> CategoryName:
    """A notification's category: ``marketing`` unless it is sent as transactional."""
    return "transactional" if transactional else "marketing"


def _switch(level: Any, key: str, channel: str) -> bool | None:
    # read defensively: a stored document is checked when written, but this runs on
    # whatever the row holds
    switches = level.get(key) if isinstance(level, Mapping) else None
    value = switches.get(channel) if isinstance(switches, Mapping) else None
    return value if isinstance(value, bool) else None


def blocking_setting(preferences: Mapping[str, Any] | None, type_name: str,
                     transactional: bool, channel: str) -> str | None:
    """The setting that turns this delivery off — ``types.promo.offer.sms``,
    ``categories.marketing.sms`` or ``channels.sms`` — or None when it may go: the most
    specific setting given wins, unset is on, and a type's required channel is always
    on."""
    spec = EVENT_TYPES.get(type_name)
    if not preferences or (spec is not None and channel in spec.required_channels):
        return None
    category = category_of(transactional)
    for level, key in (("types", type_name), ("categories", category)):
        value = _switch(preferences.get(level), key, channel)
        if value is not None:
            return None if value else f"{level}.{key}.{channel}"
    value = _switch(preferences, "channels", channel)
    return f"channels.{channel}" if value is False else None


# -- reading and writing an account's ----------------------------------------------------
def read_preferences(account_id: str) -> dict[str, Any] | None:
    """The account's document as stored (each level present); None when there is no
    such account."""
    with db_session() as session:
        found = session.exec(select(Account.id, Account.preferences)
                             .where(Account.id == account_id)).first()
    if found is None:
        return None
    return PreferenceDocument.model_construct(**(found[1] or {})).stored()


def write_preferences(account_id: str, raw: Any, *, merge: bool) -> dict[str, Any] | None:
    """Replace the account's document with ``raw`` or, with ``merge``, apply ``raw`` to
    it as a JSON merge patch; returns the document stored, or None when there is no such
    account. The account row is locked from read to write, so two concurrent patches
    both land. Nothing changes when the result is invalid (:class:`InvalidPreferences`)."""
    with db_session() as session:
        account = session.get(Account, account_id, with_for_update=True)
        if account is None:
            return None
        document = parse_document(merge_patch(account.preferences or {}, raw) if merge
                                  else raw).stored()
        account.preferences = document
        account.updated_at = utcnow()
        session.add(account)
        return document
