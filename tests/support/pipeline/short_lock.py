"""``herald worker --import tests.support.pipeline.short_lock``: the notification queues
with a 3 s job lock (30 s in production) and deliveries' claims stale after 6 s (60 s),
the same ratio, so the jobs and claims of a worker process that died are taken over in
seconds instead of a minute (the crash and partition tests). A test module must never
import this: it changes its process's queue table and claim staleness."""

import dataclasses

from actors.queues import registry
from models.notifications import claim_delivery
from tests.support.pipeline.timings import CLAIM_STALE_AFTER, NOTIFICATION_LOCK

for queue in ("notification-email", "notification-sms", "notification-orchestration"):
    registry.declare(dataclasses.replace(registry.spec(queue), lock_duration=NOTIFICATION_LOCK))
# the channel worker claims with the default staleness; this process's default is shorter
assert claim_delivery.__kwdefaults__ is not None
claim_delivery.__kwdefaults__["stale_after"] = CLAIM_STALE_AFTER
