"""The queue library's clock: the one "now" the ledger reads.

Every time the ledger stores or compares — when a delayed job falls due, lock deadlines,
finish times, retention ages, the recent-failure window, throughput minutes — comes from
:func:`now_ms`. It is the wall clock plus an offset that is 0 in every herald process.

A test of a long schedule (hours or days between attempts) moves the offset forward with
:func:`advance` instead of waiting: delayed jobs whose time has come are then due, and a
worker in the same process starts them at its next look at the queue, at most one
second later (its longest block on an empty queue). The offset belongs to the process:
it moves the Redis broker's delays, not RabbitMQ's delay timers, and not the clock of
another process (docs/queue.md#the-clock).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

_lock = threading.Lock()
_offset_ms = 0


def now_ms() -> int:
    """Milliseconds since the epoch as the ledger sees them: the wall clock plus the
    offset :func:`advance` added (0 unless a test moved it)."""
    return int(time.time() * 1000) + _offset_ms


def advance(by: timedelta) -> int:
    """Move this process's queue clock forward by ``by`` and return the new total offset
    in ms. The clock never goes back: a negative ``by`` raises ValueError."""
    global _offset_ms
    step = int(by.total_seconds() * 1000)
    if step < 0:
        raise ValueError("the queue clock only moves forward")
    with _lock:
        _offset_ms += step
        return _offset_ms


def reset() -> None:
    """Put the queue clock back on the wall clock (offset 0)."""
    global _offset_ms
    with _lock:
        _offset_ms = 0
