"""Worker processes for the pipeline tests that need several, or need to kill one."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.processes import spawn_herald

#: The module the failover tests' workers import (notification-email, 1 s lock and backoff).
FAILOVER_WORKER = "tests.support.pipeline.failover_worker"


def email_worker() -> subprocess.Popen[bytes]:
    """One ``herald worker`` process on notification-email (:data:`FAILOVER_WORKER`)."""
    return spawn_herald("worker", "--import", FAILOVER_WORKER, "notification-email")


@contextmanager
def email_workers(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` email worker processes, killed at the end (the list may be changed: a
    test that kills one puts its replacement in it)."""
    processes = [email_worker() for _ in range(count)]
    try:
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=10)
