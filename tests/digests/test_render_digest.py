"""A digest's message as the reader sees it (docs/api.md#digests): its events newest
first, at most ``shown`` of them and "and K more", in English and Arabic; a message whose
event lacks its text is a permanent render error, as any type's missing data is."""

from __future__ import annotations

import re
from typing import Any

import pytest

from actors.render import RenderError, render
from herald.queue import Permanent

ARABIC = re.compile(r"[\u0600-\u06FF]")


def digest(count: int, shown: int = 50) -> dict[str, Any]:
    return {"events": [{"occurrence": f"o-{n}", "at": "2026-12-01T09:00:00+00:00",
                        "data": {"text": f"Item {n}"}} for n in range(count)],
            "shown": shown}


def test_the_email_lists_the_newest_first_and_counts_the_rest() -> None:
    # Given a digest of 12 events that lists 5
    # When its email is rendered in English
    email = render("account.activity", "email", "en", digest(12, shown=5))
    # Then the 5 newest are listed, newest first, and the other 7 counted
    assert email.subject == "12 new activities on your account"
    assert [line for line in email.text.splitlines() if line.startswith("- ")] == [
        f"- Item {n}" for n in (11, 10, 9, 8, 7)]
    assert "and 7 more" in email.text
    assert email.html is not None and "and 7 more" in email.html
    assert "Item 6" not in email.html and "Item 11" in email.html


def test_the_arabic_email_and_in_app_text_read_right_to_left() -> None:
    # Given the same digest / When it is rendered in Arabic
    email = render("account.activity", "email", "ar", digest(3, shown=2))
    in_app = render("account.activity", "in_app", "ar", digest(3, shown=2))
    # Then subject and text are Arabic, the HTML right to left, the rest counted
    assert email.subject is not None and ARABIC.search(email.subject)
    assert email.html is not None and '<html lang="ar" dir="rtl">' in email.html
    assert "و1 غيرها" in email.text
    assert ARABIC.search(in_app.text) and "Item 2" in in_app.text


def test_a_single_event_reads_as_one_activity() -> None:
    # Given a digest of one event (lookback's first, sent at once)
    email = render("account.activity", "email", "en", digest(1))
    in_app = render("account.activity", "in_app", "en", digest(1))
    # Then it reads as one activity, with nothing counted
    assert email.subject == "New activity on your account"
    assert in_app.text == "Item 0"
    assert "more" not in email.text


def test_an_event_without_its_text_is_a_permanent_render_error() -> None:
    # Given a digest whose second event lost its text
    data = digest(2)
    del data["events"][1]["data"]["text"]
    # When a worker renders it / Then the failure names the key and is permanent
    with pytest.raises(RenderError, match=r"events\.1\.data\.text") as caught:
        render("account.activity", "email", "en", data)
    assert isinstance(caught.value, Permanent)
