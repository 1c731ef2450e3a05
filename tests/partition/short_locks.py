"""``herald worker --import tests.partition.short_locks``: the partition tests' clocks.

The notification queues' job lock is 3 s (30 s in production) and a delivery's claim goes
stale after 6 s (60 s), the same ratio, so a partition outlasts both in seconds instead
of minutes. store-fulfillment's lock is 1 s, as in the crash tests. supplier-dispatch's
is 8 s (120 s): still longer than the SFTP operation timeout the test gives these workers
(SFTP_OPERATION_TIMEOUT_S 3 s; 30 s) plus the lock's extension period, so a cut-off upload
has aborted before another worker restarts its run, as in production
(docs/failure-modes.md#partition).
"""

import dataclasses

# the notification queues: a 3 s lock, claims stale after 6 s
import tests.support.pipeline.short_lock
import tests.support.store.short_lock  # noqa: F401  (store-fulfillment: a 1 s lock)
from actors.queues import registry
from tests.partition.timings import DISPATCH_LOCK

registry.declare(dataclasses.replace(registry.spec("supplier-dispatch"),
                                     lock_duration=DISPATCH_LOCK))
