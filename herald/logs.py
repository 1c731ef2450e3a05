"""Process logging: one line per record, JSON or text, with structured fields.

``LOG_FORMAT=json`` writes one JSON object per line (``ts``, ``level``, ``logger``,
``msg``, then every field passed with ``extra=``); ``text`` writes the same as a
readable line ending in ``key=value`` pairs::

    log.info("delivery sent", extra={"queue": "notification-email", "job_id": job_id,
                                      "outcome": "sent"})

**Rule: logs carry ids, never personal data.** Log a delivery id, an account id, a
queue name, a job id — never an email address, a phone number, a name, a message body
or rendered template, a client IP address, or a payload that may contain one of them.
Log shippers keep lines for months, outside any deletion request's reach. The same
goes for error messages you log: a provider error that echoes the recipient is logged
by its code, not its text. This is also why a few chatty libraries are held at WARNING
below (Twilio's client logs request bodies, phone numbers included), why uvicorn's
access lines lose the client address and the query string, and why the database engines
hide bound parameters (:mod:`herald.db.engine`).

Records go to stderr, so a command's own output on stdout (``herald queues``) stays
clean for pipes; Procfile runners collect both.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any, TextIO

from herald.settings import Settings, get_settings

#: Loggers that are too chatty (or too indiscreet) at INFO; held at WARNING. (``mail.log``
#: is aiosmtpd's, the demo's mail sink: it logs every envelope's addresses.)
QUIET_LOGGERS = ("pika", "urllib3", "httpx", "httpcore", "twilio", "alembic.runtime.plugins",
                 "mail.log")

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
#: (uvicorn adds ``color_message``, the message again with terminal colour codes.)
_RECORD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", (), None))
) | {"message", "asctime", "taskName", "color_message"}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller attached with ``extra=``, in the order they were given."""
    return {key: value for key, value in vars(record).items()
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_")}


#: The second last formatted and its ``YYYY-MM-DDTHH:MM:SS.`` text: records come many to a
#: second, and formatting the date was a third of a text line's formatting cost. One tuple,
#: swapped whole, so threads formatting at once never read a half-updated cache.
_second_text: tuple[int, str] = (-1, "")


def _timestamp(record: logging.LogRecord) -> str:
    """The record's time in UTC as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (milliseconds truncated)."""
    global _second_text
    # rounded to the microsecond first, as datetime.fromtimestamp does
    created = record.created
    second = int(created)
    micro = round((created - second) * 1_000_000)
    if micro >= 1_000_000:
        second, micro = second + 1, micro - 1_000_000
    cached = _second_text
    if cached[0] != second:
        cached = _second_text = (second, time.strftime("%Y-%m-%dT%H:%M:%S.",
                                                       time.gmtime(second)))
    return f"{cached[1]}{micro // 1000:03d}Z"


#: One encoder for every JSON line and value (``json.dumps`` with options builds a new
#: encoder per call).
_encode_json = json.JSONEncoder(default=str, ensure_ascii=False).encode


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line; exceptions go in ``exc`` as text."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return _encode_json(entry)


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger>: <msg> key=value …``, then any traceback on following lines."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        pairs = " ".join(f"{key}={_text_value(value)}"
                         for key, value in extra_fields(record).items())
        if pairs:
            line = f"{line} {pairs}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        if record.stack_info:
            line = f"{line}\n{self.formatStack(record.stack_info)}"
        return line


#: What makes a text value need quotes: whitespace (as ``str.isspace`` sees it), a quote
#: or an ``=``. One regex search instead of a Python loop over the characters.
_NEEDS_QUOTES = re.compile(r'[\s"=]')


def _text_value(value: Any) -> str:
    """``value`` as one ``key=value`` token: as is when it has no space, quote or ``=``
    (JSON for what is not a string), else as a JSON string."""
    text = value if isinstance(value, str) else _encode_json(value)
    if not text or _NEEDS_QUOTES.search(text):
        return _encode_json(text)
    return text


class _AccessLogFilter(logging.Filter):
    """Rewrites uvicorn's access records to drop the client address and the query string
    (``/admin/search?q=`` takes an email address or a phone number; a token may ride in
    one): the line keeps the method, the path and the status."""

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn passes (client_addr, method, full_path, http_version, status_code).
        if isinstance(record.args, tuple) and len(record.args) == 5:
            _client, method, path, _version, status = record.args
            record.msg = "%s %s %s"
            record.args = (method, str(path).partition("?")[0], status)
        return True


class _DramatiqMessageFilter(logging.Filter):
    """Dramatiq formats a message as ``actor(args…)``, its payload, which may hold an
    address (an email retry's envelope); its records name the message by actor and id."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("dramatiq") and isinstance(record.args, tuple):
            record.args = tuple(_message_name(arg) for arg in record.args)
        return True


def _message_name(arg: Any) -> Any:
    """A Dramatiq message (duck-typed: herald.logs imports no queue code) as
    ``actor[message id]``; anything else as it is."""
    message_id, actor = getattr(arg, "message_id", None), getattr(arg, "actor_name", None)
    if isinstance(message_id, str) and isinstance(actor, str):
        return f"{actor}[{message_id}]"
    return arg


class _HeraldHandler(logging.StreamHandler[TextIO]):
    """Marks the handler configure_logging installed, so a second call replaces it."""


def configure_logging(settings: Settings | None = None, *, stream: TextIO | None = None) -> None:
    """Configure the root logger from ``LOG_LEVEL`` and ``LOG_FORMAT``.

    Idempotent: calling it again replaces herald's handler instead of adding one, so
    every record is written exactly once. ``stream`` defaults to stderr.
    """
    settings = settings or get_settings()
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _HeraldHandler):
            root.removeHandler(handler)
            handler.close()
    handler = _HeraldHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.log_format == "json" else TextFormatter())
    handler.addFilter(_DramatiqMessageFilter())
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _AccessLogFilter) for f in access.filters):
        access.addFilter(_AccessLogFilter())
    logging.captureWarnings(True)
