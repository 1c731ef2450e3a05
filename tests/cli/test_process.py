"""herald.process: the worker's batch scheduling policy."""

from __future__ import annotations

import os
import threading

import pytest

from herald.process import schedule_as_batch


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux only")
def test_batch_scheduling_applies_to_the_thread_and_the_threads_it_starts() -> None:
    # Given a thread of its own (the policy is per thread: the test process keeps its own)
    seen: dict[str, int | bool] = {}

    def child() -> None:
        seen["child"] = os.sched_getscheduler(0)

    def run() -> None:
        # When it asks for batch scheduling, then starts a thread
        seen["applied"] = schedule_as_batch()
        seen["self"] = os.sched_getscheduler(0)
        started = threading.Thread(target=child)
        started.start()
        started.join()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    # Then both run under SCHED_BATCH, and the caller's thread is left as it was
    assert seen == {"applied": True, "self": os.SCHED_BATCH, "child": os.SCHED_BATCH}
    assert os.sched_getscheduler(0) != os.SCHED_BATCH


def test_a_refused_policy_leaves_the_process_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a kernel that refuses the call (a container's seccomp policy, say)
    def refuse(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse, raising=False)
    monkeypatch.setattr(os, "SCHED_BATCH", 3, raising=False)
    # Then the worker runs on, as before
    assert schedule_as_batch() is False
