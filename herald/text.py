"""Which characters a free-text field of the API may hold (docs/api.md, "Errors":
``control_character``).

Text a client sends ends up in X12 segments, email headers, log lines, file names and
templates, where a control character splits, ends or corrupts what it is written into.
The API therefore refuses them where the text enters, with a 422 naming the field, by one
rule in two variants:

- :data:`SingleLine` (names, ids, codes, addresses, numbers written as text): no
  control character at all — nothing of C0 (``U+0000``–``U+001F``, so no tab, line feed
  or carriage return), DEL (``U+007F``), C1 (``U+0080``–``U+009F``), nor the Unicode line
  and paragraph separators (``U+2028``, ``U+2029``), which some readers take as line breaks.
- :data:`MultiLine` (text a person writes over several lines: delivery notes, the string
  values of an event's ``data``): the same, except that a tab and a line feed are allowed,
  and a carriage return only as the first half of a CRLF line ending (as a browser's form
  sends it). The text is kept as sent.

:data:`JSON_TEXT` applies the rule to every string of a JSON value (an event's ``data``):
object keys single-line, string values multi-line; :data:`JSON_LINE` wants every string
single-line, and :func:`json_line_except` the same but for the values of the top-level
keys it names (a supplier's ``sftp`` settings, whose ``host_key`` holds one OpenSSH key
per line). The message names the path inside it.

The check runs on the text as sent, before any trimming of whitespace, so a field never
passes because a control character sat at its end.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

#: The pydantic error type, and the API's error code, of a refused control character.
ERROR_TYPE = "control_character"

#: C0, DEL, C1 and the Unicode line/paragraph separators.
_SINGLE_LINE_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: The same, less tab and line feed, and less a carriage return right before a line feed.
_MULTI_LINE_REFUSED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]|\r(?!\n)")


def control_character(value: str, *, multiline: bool = False) -> str | None:
    """The first character of ``value`` a field may not hold, as ``U+000A``, or None when
    every character may stay (see the module docstring for the two rules)."""
    refused = (_MULTI_LINE_REFUSED if multiline else _SINGLE_LINE_REFUSED).search(value)
    return None if refused is None else f"U+{ord(refused.group()[0]):04X}"


def _refusal(char: str, where: str = "") -> PydanticCustomError:
    at = f" at {where}" if where else ""
    return PydanticCustomError(
        ERROR_TYPE, "holds the control character {char}{at}, which this field does not "
        "accept", {"char": char, "at": at})


def _single_line(value: Any) -> Any:
    # not a string: the field's own type refuses it after this
    if isinstance(value, str) and (char := control_character(value)):
        raise _refusal(char)
    return value


def _multi_line(value: Any) -> Any:
    if isinstance(value, str) and (char := control_character(value, multiline=True)):
        raise _refusal(char)
    return value


def _json_text(value: Any) -> Any:
    problem = _first_in_json(value, "", multiline=True)
    if problem is not None:
        raise _refusal(*problem)
    return value


def _json_line(value: Any) -> Any:
    problem = _first_in_json(value, "", multiline=False)
    if problem is not None:
        raise _refusal(*problem)
    return value


def _json_line_except(multiline: frozenset[str], value: Any) -> Any:
    if not isinstance(value, dict):
        return _json_line(value)
    for key, item in value.items():
        if isinstance(key, str) and (char := control_character(key)):
            raise _refusal(char, "a key")
        problem = _first_in_json(item, str(key), multiline=key in multiline)
        if problem is not None:
            raise _refusal(*problem)
    return value


def _first_in_json(value: Any, path: str, *, multiline: bool) -> tuple[str, str] | None:
    """The first refused character in a JSON value and where (``items[2].name``)."""
    if isinstance(value, str):
        char = control_character(value, multiline=multiline)
        return None if char is None else (char, path or "its value")
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and (char := control_character(key)):
                # where, not the key itself: an error never repeats the rejected input
                return char, f"a key of {path}" if path else "a key"
            inner = f"{path}.{key}" if path else str(key)
            if (problem := _first_in_json(item, inner, multiline=multiline)) is not None:
                return problem
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if (problem := _first_in_json(item, f"{path}[{index}]",
                                          multiline=multiline)) is not None:
                return problem
    return None


#: The single-line check as ``Annotated`` metadata, for a type with constraints of its own:
#: ``Annotated[str, StringConstraints(…), SINGLE_LINE]`` (after them, so that it runs
#: first and the constraints still apply as written).
SINGLE_LINE = BeforeValidator(_single_line)
#: The multi-line check, likewise.
MULTI_LINE = BeforeValidator(_multi_line)
#: Text on one line: no control character (module docstring).
SingleLine = Annotated[str, SINGLE_LINE]
#: Text over lines: tab, line feed and CRLF allowed, no other control character.
MultiLine = Annotated[str, MULTI_LINE]
#: A JSON value whose keys are :data:`SingleLine` and string values :data:`MultiLine`.
JSON_TEXT = BeforeValidator(_json_text)
#: A JSON value whose every string (keys and values) is :data:`SingleLine`.
JSON_LINE = BeforeValidator(_json_line)


def json_line_except(*multiline: str) -> BeforeValidator:
    """:data:`JSON_LINE` for a JSON object, except that the strings under the top-level
    keys ``multiline`` are :data:`MultiLine` (tab, line feed, CRLF allowed)."""
    return BeforeValidator(functools.partial(_json_line_except, frozenset(multiline)))
