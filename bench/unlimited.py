"""``--import bench.unlimited``: the notification queues with the providers' rate limits
lifted, so the end-to-end benchmark measures herald rather than the 30/min email cap."""

import dataclasses

import actors  # noqa: F401  (registers herald's queue table)
from herald.queue import declare, get_spec

for _name in ("notification-email", "notification-sms"):
    declare(dataclasses.replace(get_spec(_name), rate_limit=None))
