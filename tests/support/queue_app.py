"""A test's own queue App: built from herald's settings as the test set them, installed
for the test, closed after (the queue library keeps no state a test must reset)."""

from __future__ import annotations

from herald.queue import App, Registry, installed_app
from herald.queue_app import build_queue_app
from herald.settings import get_settings


def install_queue_app(*extra: Registry) -> App:
    """Close the installed App, if any, and install a new one on the settings as they
    are now (the test's REDIS_URL, BROKER, QUEUE_PREFIX...). It reads herald's registry,
    the registries the App it replaces read (a test's own queues stay declared) and
    ``extra``."""
    previous = installed_app()
    kept = previous.registries if previous is not None else ()
    close_queue_app()
    return build_queue_app(get_settings(), extra=(*kept, *extra)).install()


def close_queue_app() -> None:
    """Close the installed App, if any: its clients close and no App is installed."""
    app = installed_app()
    if app is not None:
        app.close()


def follow_settings(*extra: Registry) -> App | None:
    """Install a new App (reading ``extra`` too, see :func:`install_queue_app`) when the
    settings name a Redis (REDIS_URL, REDIS_SENTINELS); else close the installed one and
    leave none: no test starts the embedded Redis."""
    if get_settings().embedded_redis:
        close_queue_app()
        return None
    return install_queue_app(*extra)
