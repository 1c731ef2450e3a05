"""``herald worker --import tests.support.pipeline.short_lock``: notification-email with a 1 s lock
and no rate limit, so a run whose worker is killed is restarted a second later (tests
that kill workers on purpose)."""

import dataclasses
from datetime import timedelta

from herald.queue import declare, get_spec

declare(dataclasses.replace(get_spec("notification-email"),
                                     lock_duration=timedelta(seconds=1), rate_limit=None))
