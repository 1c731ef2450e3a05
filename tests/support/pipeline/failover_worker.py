"""``herald worker --import tests.support.pipeline.failover_worker``: notification-email
with a 1 s lock (a killed run restarts a second later), retries 1 s apart at first and no
rate limit, for the failover tests' worker processes."""

import dataclasses

from actors.queues import registry
from herald.queue import SECOND

registry.declare(dataclasses.replace(registry.spec("notification-email"),
                                     lock_duration=SECOND, backoff_base=SECOND,
                                     rate_limit=None))
