"""Queue time: the one "now" a ledger reads.

Every time the ledger stores or compares — when a delayed job falls due, lock deadlines,
finish times, retention ages, the recent-failure window, throughput minutes — is read
from its :class:`QueueTime`: the wall clock plus an offset that is 0 in every herald
process. (The `herald clock` process, which fires schedules, is another thing: it reads
queue time like everything else.)

A test of a long schedule (hours or days between attempts) moves the offset forward with
:meth:`QueueTime.advance` instead of waiting: delayed jobs whose time has come are then
due, and a worker in the same process starts them at its next look at the queue, at most
one second later (its longest block on an empty queue). The offset belongs to one
:class:`~herald.queue.app.App` in one process: it moves the Redis broker's delays, not
RabbitMQ's delay timers, and not another process's queue time
(docs/queue.md#queue-time).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta


class QueueTime:
    """The wall clock plus an offset that only moves forward."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset_ms = 0

    def now_ms(self) -> int:
        """Milliseconds since the epoch in queue time: the wall clock plus the offset
        :meth:`advance` added (0 unless a test moved it)."""
        return int(time.time() * 1000) + self._offset_ms

    def advance(self, by: timedelta) -> int:
        """Move queue time forward by ``by`` and return the new total offset in ms. It
        never goes back: a negative ``by`` raises ValueError."""
        step = int(by.total_seconds() * 1000)
        if step < 0:
            raise ValueError("queue time only moves forward")
        with self._lock:
            self._offset_ms += step
            return self._offset_ms
