"""The locales notifications are written in, and the one a message is rendered in.

Every event type's templates ship in each of :data:`SUPPORTED_LOCALES` (``ar`` is written
right to left); an account's locale is one of them.
"""

from __future__ import annotations

from typing import Literal, get_args

#: The locales every template ships in; an account's locale is one of them.
Locale = Literal["en", "ar"]
SUPPORTED_LOCALES: tuple[str, ...] = get_args(Locale)
DEFAULT_LOCALE = "en"


def resolve_locale(locale: str | None) -> str:
    """The supported locale to render ``locale`` in: itself, its base language, or ``en``.

    ``"ar-SA"`` → ``"ar"``, ``"en_GB"`` → ``"en"``, ``"fr"`` or ``None`` → ``"en"``.
    """
    if not locale or not isinstance(locale, str):
        return DEFAULT_LOCALE
    tag = locale.strip().replace("_", "-").lower()
    for candidate in (tag, tag.split("-", 1)[0]):
        if candidate in SUPPORTED_LOCALES:
            return candidate
    return DEFAULT_LOCALE
