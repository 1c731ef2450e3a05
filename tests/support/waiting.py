"""Waiting on a condition with a deadline (never a bare sleep-and-hope)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], timeout: float = 20.0, every: float = 0.02,
             what: str = "condition") -> object:
    """Poll ``condition`` until it is truthy and return its value; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
