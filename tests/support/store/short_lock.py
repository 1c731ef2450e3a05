"""``herald worker --import tests.support.store.short_lock``: store-fulfillment with a 1 s lock, so
a run whose worker process died is restarted a second later (the crash tests)."""

import dataclasses
from datetime import timedelta

from actors.queues import registry

registry.declare(dataclasses.replace(registry.spec("store-fulfillment"),
                                     lock_duration=timedelta(seconds=1)))
