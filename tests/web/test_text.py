"""The one rule for control characters in free text (herald/text.py): what a single-line
field and a multi-line one accept."""

from __future__ import annotations

import pytest

from herald.text import control_character


@pytest.mark.parametrize(("text", "single", "multi"), [
    ("Bistro Nord, 12 Quai — café", None, None),
    ("line\nfeed", "U+000A", None),
    ("tab\there", "U+0009", None),
    ("crlf\r\nending", "U+000D", None),
    ("lone\rcarriage return", "U+000D", "U+000D"),
    ("ends with a carriage return\r", "U+000D", "U+000D"),
    ("nul\x00", "U+0000", "U+0000"),
    ("escape\x1b[31m", "U+001B", "U+001B"),
    ("form\x0cfeed", "U+000C", "U+000C"),
    ("delete\x7f", "U+007F", "U+007F"),
    ("next line\x85", "U+0085", "U+0085"),
    ("line\u2028separator", "U+2028", "U+2028"),
])
def test_single_line_text_takes_no_control_character_and_multi_line_only_tab_lf_crlf(
        text: str, single: str | None, multi: str | None) -> None:
    assert control_character(text) == single
    assert control_character(text, multiline=True) == multi
