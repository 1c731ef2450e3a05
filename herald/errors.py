"""Old import path of the queue library's errors, kept for existing code; new code imports
from :mod:`herald.queue` (or :mod:`herald.queue.errors`)."""

from herald.queue.errors import *  # noqa: F403
from herald.queue.errors import __all__ as __all__
