"""Old import path of the queue registry, kept for existing code; new code imports from
:mod:`herald.queue` (or :mod:`herald.queue.registry`)."""

from herald.queue.registry import *  # noqa: F403
from herald.queue.registry import __all__ as __all__
