"""``--import bench.unlimited``: the notification queues with the providers' rate limits
lifted, so the end-to-end benchmark measures herald rather than the 30/min email cap."""

import dataclasses

import actors  # noqa: F401  (registers herald's queue table)
from herald.queue import registry

for _name in ("notification-email", "notification-sms"):
    registry.declare(dataclasses.replace(registry.get_spec(_name), rate_limit=None))
