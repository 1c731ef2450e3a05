"""herald's own logging captured in a buffer, and a search of what it wrote for values
that must never appear there (docs/deployment.md, "Logging")."""

from __future__ import annotations

import contextlib
import io
import logging
import urllib.parse
from collections.abc import Iterator

from herald.logs import configure_logging
from herald.settings import Settings


@contextlib.contextmanager
def herald_log_buffer(log_format: str) -> Iterator[io.StringIO]:
    """herald's configured logging (``text`` or ``json`` lines, at DEBUG) written to a
    buffer while the block runs; the root logger's handlers and level restored after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    configure_logging(Settings(log_format=log_format, log_level="DEBUG"), stream=out)
    try:
        yield out
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.captureWarnings(False)


def leaks(output: str, *values: str) -> list[str]:
    """The values found in ``output`` (a phone number also as bare digits, an email in any
    case; percent-encoded too, as a query string carries them)."""
    lowered = output.lower()
    found = []
    for value in values:
        forms = {value, value.lstrip("+"), urllib.parse.quote(value, safe=""),
                 urllib.parse.quote_plus(value)}
        if any(form.lower() in lowered for form in forms):
            found.append(value)
    return found
