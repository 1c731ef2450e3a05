"""``herald worker --import tests.partition.short_locks``: the partition tests' clocks.

notification-email's job lock is 3 s (30 s in production) and a delivery's claim goes
stale after 6 s (60 s), the same ratio, so a partition outlasts both in seconds instead
of minutes. store-fulfillment's lock is 1 s, as in the crash tests. supplier-dispatch's
is 8 s (120 s): still longer than the SFTP operation timeout the test gives these workers
(SFTP_OPERATION_TIMEOUT_S 3 s; 30 s) plus the lock's extension period, so a cut-off upload
has aborted before another worker restarts its run, as in production
(docs/failure-modes.md#partition).
"""

import dataclasses

import tests.support.store.short_lock  # noqa: F401  (store-fulfillment: a 1 s lock)
from actors.queues import registry
from models.notifications import claim_delivery
from tests.partition.timings import CLAIM_STALE_AFTER, DISPATCH_LOCK, EMAIL_LOCK

registry.declare(dataclasses.replace(registry.spec("notification-email"),
                                     lock_duration=EMAIL_LOCK))
registry.declare(dataclasses.replace(registry.spec("supplier-dispatch"),
                                     lock_duration=DISPATCH_LOCK))
# the channel worker claims with the default staleness; this process's default is shorter
assert claim_delivery.__kwdefaults__ is not None
claim_delivery.__kwdefaults__["stale_after"] = CLAIM_STALE_AFTER
