"""Rendering a notification for one channel from its type's templates.

Channel workers render a delivery right before dispatch: :func:`render` turns an
event's ``data`` and the recipient's ``account`` into a :class:`Rendered` message for one
channel and locale, attachments included (the ``esim.ready`` email carries the eSIM QR
code, :mod:`actors.esim_qr`). The event types, their channels and data models are the
catalogue's (:mod:`actors.event_catalogue`); the locales are :mod:`actors.locales`'.

Templates live in the repository's ``templates/`` directory::

    templates/notifications/_base_email.html          shared HTML email layout
    templates/notifications/_macros.html              button, code box, detail row
    templates/notifications/<type>/<locale>/
        email_subject.txt  email.html  email.txt      when the type has the email channel
        sms.txt                                       when it has sms
        in_app.txt                                    when it has in_app

Templates see two variables: ``data`` (the event's data) and ``account`` (``locale``,
maybe ``display_name``). Undefined names fail loudly (``StrictUndefined``), so every
optional value is read through a ``default`` filter; the data is checked up front
against its type's model. Two filters help (:mod:`actors.template_filters`): ``money``
(``amount|money(currency)``) and ``http_url`` (a link only when it is an http(s) URL).

Nothing here logs: rendered text, data values and account details are personal data (see
:mod:`herald.logs`), and :class:`RenderError` messages name event types, channels,
template files and data keys, never values.
"""

from __future__ import annotations

import hashlib
import re
import traceback
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from actors import event_catalogue
from actors.esim_qr import esim_qr_attachments
from actors.event_catalogue import EventType, validate_message_data
from actors.locales import resolve_locale
from actors.template_filters import format_money, http_url
from herald.queue import Permanent
from providers.base import Attachment

#: The template directory beside the ``actors`` package: the checkout's ``templates/``, or
#: the copy a wheel installs next to ``actors/`` (pyproject.toml lists it as package data).
TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "templates"
#: Where the notification templates live, relative to :data:`TEMPLATES_DIR`.
NOTIFICATIONS_DIR = "notifications"

#: Longest SMS text :func:`render` returns, in characters (about seven UCS-2 segments).
SMS_MAX_CHARS = 480


@dataclass(frozen=True, kw_only=True)
class Rendered:
    """A message ready for a provider: ``subject`` and ``html`` are set for email only."""

    channel: str
    locale: str
    subject: str | None
    text: str
    html: str | None
    attachments: tuple[Attachment, ...]


class RenderError(Permanent):
    """A template could not be rendered (missing data, channel the type lacks, SMS too long).

    Permanent for the job: another attempt would render the same data the same way.
    """


# ---------------------------------------------------------------------------------------
# The Jinja2 environment


class _Environment(jinja2.Environment):
    """A Jinja2 environment whose templates keep their globals in a plain dict.

    Jinja2 gives each template a ChainMap over the environment's globals and copies and
    searches it on every render (the context, each ``{% import %}``): a quarter of a
    channel worker's email render (bench/README.md, "The worker's path"). Our
    environment's globals are set when it is built and never after, so a snapshot taken
    when a template loads is all it would ever see.
    """

    def make_globals(self, d: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
        return {**self.globals, **(d or {})}


#: The environment's options that shape the code a template compiles to.
_COMPILE_OPTIONS: dict[str, Any] = {"trim_blocks": True, "lstrip_blocks": True,
                                    "keep_trailing_newline": False}


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Templates compiled once per host and kept for the next start of a worker (a
    restart, a second process), in Jinja2's per-user directory under the temporary
    directory; None where that directory cannot be used safely: each start compiles.

    A cached template is used only for the same source (Jinja2 checks its checksum), and
    the file names carry the options and Jinja2 version it was compiled with."""
    options = ",".join(f"{name}={value}" for name, value in sorted(_COMPILE_OPTIONS.items()))
    tag = hashlib.sha1(options.encode(), usedforsecurity=False).hexdigest()[:8]
    try:
        return jinja2.FileSystemBytecodeCache(
            pattern=f"herald-{jinja2.__version__}-{tag}-%s.cache")
    except (RuntimeError, OSError):  # not writable, or not this user's own
        return None


@cache
def environment() -> jinja2.Environment:
    """The shared, cached Jinja2 environment over :data:`TEMPLATES_DIR`."""
    env = _Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=jinja2.select_autoescape(
            enabled_extensions=("html",), default_for_string=False, default=False
        ),
        undefined=jinja2.StrictUndefined,
        # templates ship with the code: no stat of each file on every render
        auto_reload=False,
        bytecode_cache=_bytecode_cache(),
        **_COMPILE_OPTIONS,
    )
    env.filters["money"] = format_money
    env.filters["http_url"] = http_url
    return env


def template_name(event_type: str, locale: str, file: str) -> str:
    """The loader name of one template file, e.g. ``notifications/esim.ready/ar/sms.txt``."""
    return f"{NOTIFICATIONS_DIR}/{event_type}/{locale}/{file}"


def _where(exc: BaseException, name: str) -> str:
    """``name`` or, when the traceback shows it, the template file and line that failed."""
    where = name
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if path.is_relative_to(TEMPLATES_DIR) and frame.lineno:
            where = f"{path.relative_to(TEMPLATES_DIR).as_posix()}, line {frame.lineno}"
    return where


#: Account keys templates may read (besides the catalogue's data keys).
ACCOUNT_KEYS = ("locale", "display_name")

_UNDEFINED_NAME = re.compile(r"has no attribute '([^']*)'|^'([^']*)' is undefined")


def _undefined(exc: jinja2.UndefinedError, spec: EventType) -> str:
    """Describe an undefined value by its key only when that key is a schema name.

    Jinja names the key it looked up, and a template that indexes with data
    (``labels[data.plan]``) would put a *value* there; only catalogue and account keys,
    which are never personal data, are repeated.
    """
    match = _UNDEFINED_NAME.search(exc.message or "")
    key = next((group for group in match.groups() if group), None) if match else None
    if key in (*spec.required_data, *spec.optional_data, *ACCOUNT_KEYS):
        return f"undefined value {key!r} (use a default filter for optional data)"
    return "undefined value"


def _render_file(spec: EventType, locale: str, file: str, context: dict[str, Any]) -> str:
    """Render one template file; any failure becomes a :class:`RenderError` without values.

    Exception messages from inside a template may quote the data (``int('a@b.c')``), so
    they are replaced by the template file and line, the exception's class and, for an
    undefined value, its key when it is a schema name; the original is not chained.
    """
    name = template_name(spec.name, locale, file)
    try:
        return environment().get_template(name).render(context)
    except jinja2.TemplateNotFound as exc:
        error = RenderError(f"template {exc.name} not found")
    except jinja2.UndefinedError as exc:
        error = RenderError(f"{_where(exc, name)}: {_undefined(exc, spec)}")
    except jinja2.TemplateSyntaxError as exc:
        error = RenderError(f"{exc.name or name}, line {exc.lineno}: syntax error")
    except Exception as exc:
        error = RenderError(f"{_where(exc, name)}: {type(exc).__name__} while rendering")
    raise error


_BLANK_LINES = re.compile(r"\n{3,}")


def _clean_text(text: str) -> str:
    """Strip trailing spaces from every line, keep at most one blank line in a row."""
    lines = "\n".join(line.rstrip() for line in text.strip().splitlines())
    return _BLANK_LINES.sub("\n\n", lines)


# ---------------------------------------------------------------------------------------
# Attachments


AttachmentBuilder = Callable[[Mapping[str, Any]], tuple[Attachment, ...]]

#: Attachment builders by (event type, channel).
_ATTACHMENTS: dict[tuple[str, str], AttachmentBuilder] = {
    ("esim.ready", "email"): esim_qr_attachments,
}


# ---------------------------------------------------------------------------------------
# Rendering


#: Push has no templates of its own: it shows the in-app text, else the SMS text.
PUSH_SOURCES = ("in_app", "sms")


def template_channel(spec: EventType, channel: str) -> str | None:
    """Whose templates render ``channel`` for this type (None: the type cannot)."""
    if channel in spec.channels:
        return channel
    if channel == "push":
        return next((c for c in PUSH_SOURCES if c in spec.channels), None)
    return None


def render(
    event_type: str,
    channel: str,
    locale: str | None,
    data: Mapping[str, Any],
    account: Mapping[str, Any] | None = None,
) -> Rendered:
    """Render ``event_type`` for ``channel`` in ``locale`` (else the account's, else ``en``).

    Email gets a one-line subject, HTML and a plain-text alternative (plus attachments);
    SMS and in-app get stripped text only. Raises
    :class:`~actors.event_catalogue.UnknownEventType` for an unknown type and
    :class:`RenderError` when the type lacks the channel, required data is missing, a
    template fails, or an SMS is longer than :data:`SMS_MAX_CHARS`.
    """
    spec = event_catalogue.event_type(event_type)
    source = template_channel(spec, channel)
    if source is None:
        raise RenderError(f"{event_type} has no {channel!r} channel")
    try:
        validate_message_data(event_type, data)
    except ValueError as exc:
        raise RenderError(str(exc)) from None
    account = dict(account or {})
    resolved = resolve_locale(locale or account.get("locale"))
    context = {"data": dict(data), "account": account}

    subject: str | None
    html: str | None
    if channel == "email":
        subject = " ".join(_render_file(spec, resolved, "email_subject.txt", context).split())
        if not subject:
            raise RenderError(f"{template_name(event_type, resolved, 'email_subject.txt')} "
                              "renders an empty subject")
        html = _render_file(spec, resolved, "email.html", context).strip() + "\n"
        text = _clean_text(_render_file(spec, resolved, "email.txt", context))
    else:
        subject = html = None
        text = _render_file(spec, resolved, f"{source}.txt", context).strip()
        if channel == "sms" and len(text) > SMS_MAX_CHARS:
            raise RenderError(f"{event_type} sms ({resolved}) renders {len(text)} characters; "
                              f"the limit is {SMS_MAX_CHARS}")
    if not text:
        raise RenderError(f"{event_type} {channel} ({resolved}) renders empty text")

    build = _ATTACHMENTS.get((event_type, channel))
    attachments = build(data) if build else ()
    return Rendered(channel=channel, locale=resolved, subject=subject, text=text, html=html,
                    attachments=attachments)
