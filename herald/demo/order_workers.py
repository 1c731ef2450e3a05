"""What the order phase's worker processes change in the queue table, nothing else:
``herald worker --import herald.demo.order_workers payment store-fulfillment``.

The payment and store-fulfillment locks last 1 s instead of 30 s, so a run whose worker
process died (``mock-crash`` ends it on purpose) is taken over by the restarted worker a
second later rather than half a minute later. Every run of those queues is safe to
restart: settlement and its handoff are idempotent by their job ids, and a restarted
issuance reconciles with the provider instead of issuing again.

Only the demo's own workers import this module (under the demo's key prefix); the queues
of every other process keep the table's values.
"""

from __future__ import annotations

import dataclasses

import actors.queues  # noqa: F401  (registers herald's queue table)
from actors.queues import registry
from herald.queue import SECOND

#: The queues the order phase's worker process runs, and their lock while it does.
ORDER_QUEUES = ("payment", "store-fulfillment")
DEMO_LOCK = SECOND

for _name in ORDER_QUEUES:
    registry.declare(dataclasses.replace(registry.spec(_name), lock_duration=DEMO_LOCK))
