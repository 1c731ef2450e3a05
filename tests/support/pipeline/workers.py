"""Worker processes for the pipeline tests that need several, or need to kill one."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.support.processes import spawn_herald

#: The module the failover tests' workers import (notification-email, 1 s lock and backoff).
FAILOVER_WORKER = "tests.support.pipeline.failover_worker"
#: The module the fallback tests' workers import (notification-sms, 1 s lock and backoff).
FALLBACK_WORKER = "tests.support.pipeline.fallback_worker"


def email_worker() -> subprocess.Popen[bytes]:
    """One ``herald worker`` process on notification-email (:data:`FAILOVER_WORKER`)."""
    return spawn_herald("worker", "--import", FAILOVER_WORKER, "notification-email")


@contextmanager
def email_workers(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` email worker processes, killed at the end (the list may be changed: a
    test that kills one puts its replacement in it)."""
    with _processes(email_worker, count) as processes:
        yield processes


def sms_worker() -> subprocess.Popen[bytes]:
    """One ``herald worker`` process on notification-sms (:data:`FALLBACK_WORKER`)."""
    return spawn_herald("worker", "--import", FALLBACK_WORKER, "notification-sms")


@contextmanager
def sms_workers(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` SMS worker processes, killed at the end (the list may be changed)."""
    with _processes(sms_worker, count) as processes:
        yield processes


@contextmanager
def _processes(spawn: Callable[[], subprocess.Popen[bytes]], count: int
               ) -> Iterator[list[subprocess.Popen[bytes]]]:
    processes = [spawn() for _ in range(count)]
    try:
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=10)
