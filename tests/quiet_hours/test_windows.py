"""The window maths of quiet hours (actors/quiet_hours.py, docs/api.md#quiet-hours): when a
message sent at an instant is held, and until when, on the account's own clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from actors.quiet_hours import (
    WEEKDAYS,
    QuietHours,
    check_quiet_hours,
    check_timezone,
    hold_end,
)

NIGHTS = {"start": "22:00", "end": "08:00"}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def ends(document: dict[str, Any], zone: str, sent_at: str) -> str | None:
    """When a message sent at ``sent_at`` (UTC) may go, as UTC ISO text (None: at once)."""
    end = hold_end(QuietHours.parse(document), ZoneInfo(zone), utc(sent_at))
    return None if end is None else end.replace(tzinfo=None).isoformat()


# Each row: the quiet hours, the zone, when the message is sent (UTC), when it may go (UTC)
CASES = [
    # a daily window crossing midnight, on UTC: start included, end excluded
    ("nights, before", NIGHTS, "UTC", "2026-06-01T21:59:59", None),
    ("nights, at the start", NIGHTS, "UTC", "2026-06-01T22:00:00", "2026-06-02T08:00:00"),
    ("nights, after midnight", NIGHTS, "UTC", "2026-06-02T07:59:00", "2026-06-02T08:00:00"),
    ("nights, at the end", NIGHTS, "UTC", "2026-06-02T08:00:00", None),
    # the account's own clock: 22:00 in Riyadh (UTC+3) is 19:00 UTC
    ("Riyadh", NIGHTS, "Asia/Riyadh", "2026-06-01T19:30:00", "2026-06-02T05:00:00"),
    ("Riyadh, its day", NIGHTS, "Asia/Riyadh", "2026-06-01T18:59:00", None),
    # New York springs forward on 2026-03-08 at 02:00 EST (07:00 UTC) to 03:00 EDT
    ("NY spring, night across the change", NIGHTS, "America/New_York",
     "2026-03-08T04:00:00", "2026-03-08T12:00:00"),  # 08:00 EDT
    ("NY spring, end in the skipped hour: first instant after it",
     {"start": "22:00", "end": "02:30"}, "America/New_York",
     "2026-03-08T06:59:59", "2026-03-08T07:00:00"),  # 03:00 EDT
    ("NY spring, start in the skipped hour: not before the gap ends",
     {"start": "02:30", "end": "04:00"}, "America/New_York", "2026-03-08T06:59:59", None),
    ("NY spring, start in the skipped hour: from the gap's end",
     {"start": "02:30", "end": "04:00"}, "America/New_York",
     "2026-03-08T07:00:00", "2026-03-08T08:00:00"),  # 04:00 EDT
    # New York falls back on 2026-11-01 at 02:00 EDT (06:00 UTC) to 01:00 EST
    ("NY fall, night across the change", NIGHTS, "America/New_York",
     "2026-11-01T03:00:00", "2026-11-01T13:00:00"),  # 08:00 EST
    ("NY fall, an end that comes twice: the second",
     {"start": "22:00", "end": "01:30"}, "America/New_York",
     "2026-11-01T05:40:00", "2026-11-01T06:30:00"),  # 01:30 EST, not 01:30 EDT (05:30)
    ("NY fall, a start that comes twice: the first",
     {"start": "01:30", "end": "03:00"}, "America/New_York",
     "2026-11-01T05:30:00", "2026-11-01T08:00:00"),  # 01:30 EDT → 03:00 EST
    # Berlin springs forward on 2026-03-29 at 02:00 CET (01:00 UTC) to 03:00 CEST
    ("Berlin spring, night", NIGHTS, "Europe/Berlin",
     "2026-03-28T22:00:00", "2026-03-29T06:00:00"),  # 23:00 CET → 08:00 CEST
    ("Berlin spring, end in the skipped hour", {"start": "23:00", "end": "02:15"},
     "Europe/Berlin", "2026-03-28T23:30:00", "2026-03-29T01:00:00"),  # 03:00 CEST
    # Berlin falls back on 2026-10-25 at 03:00 CEST (01:00 UTC) to 02:00 CET
    ("Berlin fall, night", NIGHTS, "Europe/Berlin",
     "2026-10-24T21:00:00", "2026-10-25T07:00:00"),  # 23:00 CEST → 08:00 CET
    ("Berlin fall, an end that comes twice: the second", {"start": "00:00", "end": "02:30"},
     "Europe/Berlin", "2026-10-25T00:10:00", "2026-10-25T01:30:00"),  # 02:30 CET
    # per weekday: a window crossing midnight belongs to the day it starts on
    ("Friday night into Saturday", {"fri": [{"start": "23:00", "end": "09:00"}]}, "UTC",
     "2026-06-06T08:00:00", "2026-06-06T09:00:00"),  # Saturday 08:00
    ("Saturday night: no window", {"fri": [{"start": "23:00", "end": "09:00"}]}, "UTC",
     "2026-06-06T23:30:00", None),
    ("Thursday night: no window", {"fri": [{"start": "23:00", "end": "09:00"}]}, "UTC",
     "2026-06-04T23:30:00", None),
    ("two windows on one day", {"wed": [{"start": "12:00", "end": "13:00"},
                                        {"start": "18:00", "end": "19:00"}]}, "UTC",
     "2026-06-03T18:30:00", "2026-06-03T19:00:00"),
    # back to back and overlapping windows hold as one
    ("back to back over midnight, overlapping in the morning",
     {"mon": [{"start": "22:00", "end": "00:00"}],
      "tue": [{"start": "00:00", "end": "07:00"}, {"start": "06:00", "end": "09:00"}]},
     "UTC", "2026-06-01T23:00:00", "2026-06-02T09:00:00"),
    ("a week of nights chained by day windows",
     {day: [{"start": "20:00", "end": "08:00"}] for day in WEEKDAYS}
     | {"sat": [{"start": "20:00", "end": "08:00"}, {"start": "08:00", "end": "20:00"}]},
     "UTC", "2026-06-06T12:00:00", "2026-06-07T08:00:00"),  # Saturday noon → Sunday 08:00
]


@pytest.mark.parametrize(("document", "zone", "sent_at", "may_go_at"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_when_a_message_may_go(document: dict[str, Any], zone: str, sent_at: str,
                               may_go_at: str | None) -> None:
    assert ends(document, zone, sent_at) == may_go_at


# -- documents that are refused, each naming its fault --------------------------------------
REFUSED = [
    ("not an object", ["22:00", "08:00"], "quiet_hours: must be"),
    ("empty", {}, "quiet_hours: must be"),
    ("start only", {"start": "22:00"}, "quiet_hours: must be"),
    ("start equals end", {"start": "22:00", "end": "22:00"}, "start and end are the same"),
    ("hour 24", {"start": "24:00", "end": "08:00"}, "quiet_hours.start: not a time"),
    ("one digit", {"start": "9:00", "end": "10:00"}, "quiet_hours.start: not a time"),
    ("seconds", {"start": "09:00:00", "end": "10:00"}, "quiet_hours.start: not a time"),
    ("a number", {"start": 900, "end": "10:00"}, "quiet_hours.start: not a time"),
    ("unknown weekday", {"monday": []}, "unknown key 'monday'"),
    ("mixed forms", {"start": "22:00", "end": "08:00", "mon": []}, "or weekdays, not both"),
    ("weekday not a list", {"mon": {"start": "22:00", "end": "08:00"}},
     "quiet_hours.mon: must be a list"),
    ("a bad window in a list", {"tue": [{"start": "22:00", "end": "08:00"},
                                        {"start": "x", "end": "08:00"}]},
     "quiet_hours.tue[1].start: not a time"),
    ("extra key in a window", {"mon": [{"start": "1:00", "end": "2:00", "x": 1}]},
     "quiet_hours.mon[0]: must be"),
    ("too many windows", {"mon": [{"start": f"{h:02}:00", "end": f"{h:02}:30"}
                                  for h in range(9)]}, "at most 8 windows"),
]


@pytest.mark.parametrize(("document", "message"), [case[1:] for case in REFUSED],
                         ids=[case[0] for case in REFUSED])
def test_a_malformed_document_is_refused_naming_its_fault(document: Any, message: str) -> None:
    with pytest.raises(ValueError, match=r"^quiet_hours") as refused:
        check_quiet_hours(document)
    assert message in str(refused.value)


def test_windows_that_leave_no_minute_free_are_refused() -> None:
    # 00:00–23:59 leaves one minute a day: accepted
    check_quiet_hours({"start": "00:00", "end": "23:59"})
    # two windows a day that chain around the clock leave none
    with pytest.raises(ValueError, match="cover the whole week"):
        check_quiet_hours({day: [{"start": "08:00", "end": "20:00"},
                                 {"start": "20:00", "end": "08:00"}] for day in WEEKDAYS})


@pytest.mark.parametrize("name", ["Mars/Base", "../../etc/passwd", "/etc/localtime",
                                  "America/../UTC", "", "x" * 65, 7, "utc "])
def test_an_unknown_time_zone_is_refused_naming_the_field(name: Any) -> None:
    with pytest.raises(ValueError, match=r"^timezone: not a known IANA time zone"):
        check_timezone(name)


@pytest.mark.parametrize("name", ["UTC", "Europe/Berlin", "America/New_York", "Asia/Riyadh"])
def test_iana_names_are_accepted(name: str) -> None:
    check_timezone(name)


# -- properties over any windows, zone and instant ---------------------------------------
ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata",
         "America/Santiago"]
times = st.builds(lambda h, m: f"{h:02}:{m:02}", st.integers(0, 23),
                  st.sampled_from([0, 15, 30, 59]))
windows = st.builds(lambda s, e: {"start": s, "end": e}, times, times).filter(
    lambda w: w["start"] != w["end"])
documents = st.one_of(windows, st.dictionaries(st.sampled_from(WEEKDAYS),
                                               st.lists(windows, max_size=3), min_size=1))
instants = st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31),
                        timezones=st.just(UTC))


@hypothesis_settings(max_examples=300, deadline=None)
@given(documents, st.sampled_from(ZONES), instants)
def test_a_hold_ends_after_the_send_outside_every_window(
        document: dict[str, Any], zone: str, sent_at: datetime) -> None:
    try:
        check_quiet_hours(document)
    except ValueError:
        return  # covers the week: refused when stored
    quiet, tz = QuietHours.parse(document), ZoneInfo(zone)
    end = hold_end(quiet, tz, sent_at)
    if end is None:
        return
    # the hold ends later, within a week and a day, at an instant no window holds
    assert sent_at < end <= sent_at + timedelta(days=8)
    assert hold_end(quiet, tz, end) is None
    # and every instant in between is held to the same end
    middle = sent_at + (end - sent_at) / 2
    assert hold_end(quiet, tz, middle) == end
