"""``--import bench.unlimited``: the notification queues with the providers' rate limits
lifted, so the end-to-end benchmark measures herald rather than the 30/min email cap."""

import dataclasses

from actors.queues import registry

for _name in ("notification-email", "notification-sms"):
    registry.declare(dataclasses.replace(registry.spec(_name), rate_limit=None))
