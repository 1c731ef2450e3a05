"""``herald up``'s honcho manager (herald/supervisor.py) over real processes: a stop that
comes as the processes start still stops them, and a process that does not drain is
killed only once the grace period is over."""

from __future__ import annotations

import io
import signal
import time
from collections.abc import Iterator
from datetime import timedelta

import honcho.manager
import pytest
from honcho.printer import Printer

from herald.supervisor import StopSignals, graceful_manager

#: Seconds a test's processes would run if nothing stopped them.
LONG_S = 30


@pytest.fixture(autouse=True)
def handlers_restored() -> Iterator[None]:
    """StopSignals and honcho's loop install SIGTERM/SIGINT handlers: the test's come back."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


def test_a_stop_that_came_as_the_processes_started_stops_them_all() -> None:
    # Given a SIGTERM received just before the manager's loop took the signals over
    stops = StopSignals()
    stops.received.append(signal.SIGTERM)
    manager = graceful_manager(Printer(io.StringIO()), timedelta(seconds=LONG_S), stops)
    manager.add_process("web", f"sleep {LONG_S}")
    manager.add_process("worker", f"sleep {LONG_S}")

    # When the loop runs
    began = time.monotonic()
    manager.loop()

    # Then every process was stopped once started, long before it would have ended, and
    # the manager answers as for a SIGTERM
    assert time.monotonic() - began < LONG_S / 2
    assert manager.returncodes() == {"web": -signal.SIGTERM, "worker": -signal.SIGTERM}
    assert manager.returncode == 128 + signal.SIGTERM


def test_a_process_that_does_not_drain_is_killed_after_the_grace_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given honcho's own wait before killing made 0 s, and a grace of 2 s
    monkeypatch.setattr(honcho.manager, "KILL_WAIT", 0)
    grace = timedelta(seconds=2)
    manager = graceful_manager(Printer(io.StringIO()), grace, StopSignals())
    # And a process that ignores SIGTERM beside one that ends on its own
    manager.add_process("quick", "sleep 1; exit 0")
    manager.add_process("stubborn", f"trap '' TERM; sleep {LONG_S}")

    # When the quick one ends, so that the others are stopped
    began = time.monotonic()
    manager.loop()

    # Then the stubborn one was killed, but not before the grace had passed
    assert manager.returncodes() == {"quick": 0, "stubborn": -signal.SIGKILL}
    assert 1 + grace.total_seconds() <= time.monotonic() - began < LONG_S / 2
