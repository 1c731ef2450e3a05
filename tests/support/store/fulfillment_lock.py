"""``herald worker --import tests.support.store.fulfillment_lock``: the payment and
store-fulfillment queues with a 3 s lock, so the runs of a worker process that died are
restarted within seconds rather than the default 30 (the FLUSHALL test restarts such workers).

3 s rather than 1 s: on a loaded machine a live run's lock must not lapse, or a second
run of the same order would start beside the first."""

import dataclasses
from datetime import timedelta

from actors.queues import registry

for _name in ("payment", "store-fulfillment"):
    registry.declare(dataclasses.replace(registry.spec(_name),
                                         lock_duration=timedelta(seconds=3)))
