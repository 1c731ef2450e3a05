"""Quiet hours: when an account wants no normal-urgency email, SMS or push, read on its
own clock, and the hold that keeps such a delivery queued until they end
(docs/api.md#quiet-hours, docs/pipeline.md#channel-workers).

A document is one daily window, ``{"start": "22:00", "end": "08:00"}``, or windows per
weekday, ``{"mon": [{"start": "12:00", "end": "13:00"}], "fri": [...]}`` (a weekday left
out has none). A window whose end is not after its start crosses midnight and belongs to
the weekday it starts on.

A window covers the instants from its start to its end on the account's wall clock
(``zoneinfo``), with two rules for the days the clocks change:

- a start or end that does not exist (the hour skipped when clocks go forward) is the
  first instant after the gap;
- a start or end that exists twice (the hour repeated when clocks go back): the start is
  the first of the two, the end the second, so the window holds through the repeated hour.

Windows that touch or overlap hold as one: a delivery held at 23:30 by 22:00–00:00 and
00:00–07:00 waits until 07:00.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, available_timezones

from sqlalchemy import update
from sqlmodel import Session, col, select

from actors.event_catalogue import EVENT_TYPES
from herald.queue import Defer
from models.base import queue_now
from models.notifications import Account, Db, Delivery, Notification, Outcome, hold_delivery

log = logging.getLogger("herald.quiet_hours")

#: Weekday keys of a per-weekday document, Monday first (``date.weekday()`` order).
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: The most windows one weekday may have.
MAX_WINDOWS_PER_DAY = 8
#: The channels quiet hours hold; in-app has no channel job, so it is never held.
HELD_CHANNELS = frozenset({"email", "sms", "push"})
#: The urgency quiet hours hold (urgent events go at once).
HELD_URGENCY = "normal"
#: The longest name a time zone may have (the column's length).
MAX_TIMEZONE_LENGTH = 64

_HH_MM = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
_MINUTES_PER_WEEK = 7 * 24 * 60


@dataclasses.dataclass(frozen=True, slots=True)
class LocalWindow:
    """One window on the wall clock; ``end <= start`` crosses midnight."""

    start: time
    end: time


@dataclasses.dataclass(frozen=True, slots=True)
class QuietHours:
    """An account's windows per weekday, Monday first."""

    days: tuple[tuple[LocalWindow, ...], ...]

    @classmethod
    def parse(cls, document: Any) -> QuietHours:
        """The windows of a quiet-hours document; ValueError naming the part that is
        wrong (``quiet_hours.mon[0].start: …``) when it is malformed or holds a window
        whose start equals its end."""
        if not isinstance(document, dict) or not document:
            raise ValueError('quiet_hours: must be {"start": "HH:MM", "end": "HH:MM"} or '
                             'windows per weekday ({"mon": [{"start", "end"}], …})')
        if set(document) <= {"start", "end"}:
            window = _window(document, "quiet_hours")
            quiet = cls(days=((window,),) * 7)
        else:
            if {"start", "end"} & set(document):
                raise ValueError("quiet_hours: give start and end (every day) or weekdays, "
                                 "not both")
            unknown = sorted(str(key) for key in document if key not in WEEKDAYS)
            if unknown:
                raise ValueError(f"quiet_hours: unknown key {unknown[0]!r} (the keys: start "
                                 f"and end, or weekdays {', '.join(WEEKDAYS)})")
            quiet = cls(days=tuple(_day(document.get(day, []), f"quiet_hours.{day}")
                                   for day in WEEKDAYS))
        return quiet

    def covers_whole_week(self) -> bool:
        """True when no minute of the week is left outside every window (wall clock)."""
        covered = bytearray(_MINUTES_PER_WEEK)
        for day, windows in enumerate(self.days):
            for window in windows:
                start = day * 1440 + _minutes(window.start)
                length = (_minutes(window.end) - _minutes(window.start)) % 1440
                for minute in range(start, start + length):
                    covered[minute % _MINUTES_PER_WEEK] = 1
        return all(covered)


def check_quiet_hours(document: Any) -> None:
    """ValueError naming the part that is wrong unless ``document`` is a quiet-hours
    document (:meth:`QuietHours.parse`) that leaves some minute of the week free: a hold
    must end."""
    if QuietHours.parse(document).covers_whole_week():
        raise ValueError("quiet_hours: the windows cover the whole week; nothing could "
                         "ever be sent")


def _minutes(moment: time) -> int:
    return moment.hour * 60 + moment.minute


def _day(windows: Any, where: str) -> tuple[LocalWindow, ...]:
    if not isinstance(windows, list):
        raise ValueError(f"{where}: must be a list of windows")
    if len(windows) > MAX_WINDOWS_PER_DAY:
        raise ValueError(f"{where}: at most {MAX_WINDOWS_PER_DAY} windows a day")
    return tuple(_window(window, f"{where}[{i}]") for i, window in enumerate(windows))


def _window(window: Any, where: str) -> LocalWindow:
    if not isinstance(window, dict) or set(window) != {"start", "end"}:
        raise ValueError(f'{where}: must be {{"start": "HH:MM", "end": "HH:MM"}}')
    start, end = _time(window["start"], f"{where}.start"), _time(window["end"], f"{where}.end")
    if start == end:
        raise ValueError(f"{where}: start and end are the same time")
    return LocalWindow(start=start, end=end)


def _time(value: Any, where: str) -> time:
    match = _HH_MM.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{where}: not a time HH:MM (00:00 to 23:59)")
    return time(int(match[1]), int(match[2]))


# -- time zones -------------------------------------------------------------------------
@functools.cache
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


def check_timezone(name: Any) -> None:
    """ValueError naming the field unless ``name`` is an IANA time zone this machine's
    tz database holds. Only names listed there pass, so no name reaches the file system."""
    if not isinstance(name, str) or len(name) > MAX_TIMEZONE_LENGTH \
            or name not in _known_zones():
        raise ValueError("timezone: not a known IANA time zone (like Europe/Berlin or "
                         "America/New_York)")


def zone(name: str | None) -> ZoneInfo:
    """The account's time zone: UTC when it has none, or when its name is not in the tz
    database (checked when stored; a row written by hand, or a zone since removed)."""
    return ZoneInfo(name if name is not None and name in _known_zones() else "UTC")


# -- the window maths -------------------------------------------------------------------
def _instant(day: date, wall: time, tz: ZoneInfo, *, end: bool) -> datetime:
    """The UTC instant ``wall`` on ``day`` means in ``tz``, by the module's rules for the
    days the clocks change."""
    local = datetime.combine(day, wall, tzinfo=tz)
    first, second = local.astimezone(UTC), local.replace(fold=1).astimezone(UTC)
    if first == second:
        return first
    if first < second:  # the time exists twice (clocks went back)
        return second if end else first
    # the time does not exist: fold=0 reads it with the offset before the change (the
    # later instant), fold=1 with the offset after (the earlier one); the change lies
    # between
    return _change_between(second, first, tz)


def _change_between(before: datetime, after: datetime, tz: ZoneInfo) -> datetime:
    """The first instant in (before, after] on the offset ``after`` has: the end of the
    skipped hour (offsets change on whole seconds)."""
    offset = after.astimezone(tz).utcoffset()
    low, high = int(before.timestamp()), int(after.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, tz).utcoffset() == offset:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


def _spans(quiet: QuietHours, tz: ZoneInfo, around: date) -> list[tuple[datetime, datetime]]:
    """The windows as UTC spans, from the day before ``around`` to 9 days after it (a
    hold chained over back-to-back windows ends within a week: some minute of every
    week is free), in start order."""
    spans = []
    for offset in range(-1, 10):
        day = around + timedelta(days=offset)
        for window in quiet.days[day.weekday()]:
            end_day = day if window.end > window.start else day + timedelta(days=1)
            start = _instant(day, window.start, tz, end=False)
            end = _instant(end_day, window.end, tz, end=True)
            if end > start:  # a window inside a skipped hour is empty
                spans.append((start, end))
    return sorted(spans)


def hold_end(quiet: QuietHours, tz: ZoneInfo, instant: datetime) -> datetime | None:
    """When the hold of a message sent at ``instant`` ends (UTC): the end of the window
    it falls in, or of the windows that touch or overlap it after; None when ``instant``
    is outside every window. Windows include their start, not their end."""
    end: datetime | None = None
    for start, stop in _spans(quiet, tz, instant.astimezone(tz).date()):
        if end is None:
            if start <= instant < stop:
                end = stop
        elif start <= end:
            end = max(end, stop)
        else:
            break
    return end


# -- the hold -----------------------------------------------------------------------------
class Recipient(Protocol):
    """What a hold reads of the recipient the claim read
    (:class:`actors.notifications.Recipient`)."""

    @property
    def type(self) -> str: ...
    @property
    def urgency(self) -> str: ...
    @property
    def timezone(self) -> str | None: ...
    @property
    def quiet_hours(self) -> dict[str, Any] | None: ...


def held_until(recipient: Recipient, channel: str, instant: datetime) -> datetime | None:
    """When a delivery on ``channel`` sent at ``instant`` may go, if the account's quiet
    hours hold it (None: it goes now). Only normal-urgency email, SMS and push are held,
    never a channel the event type requires (docs/api.md#quiet-hours)."""
    if recipient.quiet_hours is None or recipient.urgency != HELD_URGENCY \
            or channel not in HELD_CHANNELS:
        return None
    spec = EVENT_TYPES.get(recipient.type)
    if spec is not None and channel in spec.required_channels:
        return None
    try:
        quiet = QuietHours.parse(recipient.quiet_hours)
    except ValueError:  # checked when stored: an old or hand-written row is not held
        return None
    return hold_end(quiet, zone(recipient.timezone), instant)


def hold_if_quiet(db: Db, delivery_id: str, token: datetime, recipient: Recipient,
                  channel: str) -> dict[str, Any] | None:
    """Hold a claimed delivery that the account's quiet hours cover at this moment
    (queue time, :func:`herald.queue.now_ms`): write it back ``queued`` with
    ``not_before`` set and the claim released, then raise ``Defer`` until then, so the
    next run claims and reads everything again (preferences and the account's state then
    decide). Returns None when nothing holds it; the channel job's answer when the claim
    was taken over before the hold was written."""
    if recipient.quiet_hours is None:  # most accounts: no clock read on the hot path
        return None
    now = queue_now()
    until = held_until(recipient, channel, now)
    if until is None:
        return None
    if not hold_delivery(db, delivery_id, token, until):
        return {"delivery_id": delivery_id, "skipped": "claim taken over"}
    log.info("delivery held by quiet hours", extra={"delivery_id": delivery_id,
                                                   "not_before": until.isoformat()})
    # a hold is no attempt: its start is given back, so holds never use up the job's
    # max_started_attempts (docs/queue.md#permanent-and-defer)
    raise Defer(until - now, reason="quiet hours", count_start=False)


# -- releasing holds the account no longer wants ------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class _HeldRecipient:
    """What :func:`held_until` reads, for a held delivery of an account being changed."""

    type: str
    urgency: str
    timezone: str | None
    quiet_hours: dict[str, Any] | None


@dataclasses.dataclass(frozen=True, slots=True)
class Release:
    """A held delivery whose hold an account change shortened: ``not_before`` is its new
    end (None: it may go now)."""

    delivery: Delivery
    not_before: datetime | None


def release_holds(session: Session, account: Account) -> list[Release]:
    """In the transaction that changes the account's quiet hours or time zone (flushed,
    not committed): each of its deliveries held past now whose hold the new settings end
    sooner — no window covers it any more, or the window it is in ends earlier — gets
    that new ``not_before`` (NULL: now), written by a conditional UPDATE that only moves
    a delivery still held as it was read (never one a worker has claimed since). Returns
    those deliveries: their delayed jobs must be brought forward once this commits. A
    hold the new settings make longer is left alone: its job runs at the old end and the
    worker holds it again."""
    now = queue_now()
    rows = session.exec(
        select(Delivery, Notification.type, Notification.urgency)
        .join(Notification, col(Notification.id) == col(Delivery.notification_id))
        .where(col(Notification.account_id) == account.id,
               col(Delivery.outcome) == Outcome.QUEUED.value,
               col(Delivery.not_before) > now)).all()
    released = []
    for delivery, type_name, urgency in rows:
        held = delivery.not_before
        assert held is not None  # selected held past now
        until = held_until(_HeldRecipient(type_name, urgency, account.timezone,
                                          account.quiet_hours), delivery.channel, now)
        if until is not None and until >= held:
            continue
        moved = session.exec(update(Delivery).where(
            col(Delivery.id) == delivery.id, col(Delivery.outcome) == Outcome.QUEUED.value,
            col(Delivery.not_before) == held).values(not_before=until)).rowcount
        if moved:
            released.append(Release(delivery, until))
    return released
