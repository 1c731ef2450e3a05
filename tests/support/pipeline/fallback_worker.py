"""``herald worker --import tests.support.pipeline.fallback_worker``: notification-sms
with a 1 s lock (a killed run restarts a second later), retries 1 s apart at first and no
rate limit, for the delivery-report fallback tests' worker processes."""

import dataclasses

from actors.queues import registry
from herald.queue import SECOND

registry.declare(dataclasses.replace(registry.spec("notification-sms"),
                                     lock_duration=SECOND, backoff_base=SECOND,
                                     rate_limit=None))
