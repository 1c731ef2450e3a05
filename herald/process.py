"""Process-wide tuning for herald's long-running processes (``herald web``'s and
``herald worker``'s): the garbage collector's pace, the worker's CPU scheduling policy
(bench/README.md, "Tuning the processes"), and the dependencies' warnings every start
would print."""

from __future__ import annotations

import gc
import logging
import os
import sys
import warnings

log = logging.getLogger("herald.process")

#: Allocations (net of frees) between two collections of the youngest generation; the
#: interpreter's default is 700.
YOUNG_COLLECTION_EVERY = 10_000


def tune_garbage_collector() -> None:
    """Set the collector for a process whose startup is done: what exists now (modules,
    the app, its models and statements) is never collected again, and young collections
    come every :data:`YOUNG_COLLECTION_EVERY` allocations. Cycles are still collected.

    Why: each collection of the oldest generation walks every object it holds, and a
    loaded app holds hundreds of thousands that live as long as the process. A bulk
    request of 1,000 events allocates enough to start dozens of collections; on the
    default settings they were a third of its CPU time (bench/README.md, "The HTTP front
    door"). Call it last in startup, once the imports and the app are built.
    """
    # No collection first: with the collector paused through startup (herald/cli.py)
    # every object is still young, so one pass would walk all of them — about a tenth of
    # a worker's start — to free some 1,300 objects of startup garbage, which stay frozen.
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, 10, 10)


def schedule_as_batch() -> bool:
    """Ask Linux to schedule this thread, and every thread it starts from now on, as a
    batch workload (``SCHED_BATCH``, nice value unchanged: the same share of the CPU).
    True when applied; elsewhere, or when the kernel refuses, nothing changes (False).

    For ``herald worker``, called before its threads start. Why: a worker process hands
    every job between its own threads (the consumer wakes a worker thread, whose end
    wakes the consumer), and under the default policy a woken thread may preempt the
    thread that woke it while that one still holds the GIL; it then runs only to wait
    for the GIL, and both pay two context switches for nothing. A batch thread, once
    woken, waits for the running one to block or its time slice to end (sched(7): for
    non-interactive work that wants no such preemptions). Jobs start a little later under
    load (at most a time slice); bench/README.md, "The worker's path", has the CPU saved.
    """
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None:  # not Linux
        return False
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError as error:  # a container's seccomp policy, say: run on as before
        log.info("batch scheduling not applied: %s", error)
        return False
    return True


def quiet_known_warnings() -> None:
    """Silence the warnings herald's dependencies print on every start that tell an
    operator nothing they can act on — asyncssh touching cryptography's deprecated DSA
    classes as it is imported (five ``CryptographyDeprecationWarning: DSA is deprecated``
    lines). Only that category, that message, from asyncssh's modules; every other
    warning still shows. Call it at a process's start, before asyncssh is imported.

    A process started with ``-W`` or ``PYTHONWARNINGS`` keeps exactly the filters it was
    given: whoever asks for warnings sees them all.
    """
    if sys.warnoptions:
        return
    try:
        from cryptography.utils import CryptographyDeprecationWarning
    except ImportError:  # pragma: no cover - asyncssh requires cryptography
        return
    warnings.filterwarnings("ignore", message="DSA is deprecated",
                            category=CryptographyDeprecationWarning, module=r"asyncssh\.")
