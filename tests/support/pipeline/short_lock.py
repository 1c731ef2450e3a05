"""``herald worker --import tests.support.pipeline.short_lock``: notification-email with a 1 s lock
and no rate limit, so a run whose worker is killed is restarted a second later (tests
that kill workers on purpose)."""

import dataclasses
from datetime import timedelta

from actors.queues import registry

registry.declare(dataclasses.replace(registry.spec("notification-email"),
                                     lock_duration=timedelta(seconds=1), rate_limit=None))
