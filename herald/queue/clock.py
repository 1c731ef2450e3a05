"""The queue library's clock: the one "now" a ledger reads.

Every time the ledger stores or compares — when a delayed job falls due, lock deadlines,
finish times, retention ages, the recent-failure window, throughput minutes — comes from
its :class:`Clock`. It is the wall clock plus an offset that is 0 in every herald process.

A test of a long schedule (hours or days between attempts) moves the offset forward with
:meth:`Clock.advance` instead of waiting: delayed jobs whose time has come are then due,
and a worker in the same process starts them at its next look at the queue, at most one
second later (its longest block on an empty queue). The offset belongs to one
:class:`~herald.queue.app.App` in one process: it moves the Redis broker's delays, not
RabbitMQ's delay timers, and not the clock of another process (docs/queue.md#the-clock).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta


class Clock:
    """The wall clock plus an offset that only moves forward."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset_ms = 0

    def now_ms(self) -> int:
        """Milliseconds since the epoch as the ledger sees them: the wall clock plus the
        offset :meth:`advance` added (0 unless a test moved it)."""
        return int(time.time() * 1000) + self._offset_ms

    def advance(self, by: timedelta) -> int:
        """Move this clock forward by ``by`` and return the new total offset in ms. The
        clock never goes back: a negative ``by`` raises ValueError."""
        step = int(by.total_seconds() * 1000)
        if step < 0:
            raise ValueError("the queue clock only moves forward")
        with self._lock:
            self._offset_ms += step
            return self._offset_ms
