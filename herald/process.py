"""Process-wide tuning for herald's long-running processes (``herald web``'s and
``herald worker``'s): the garbage collector's pace (README.md, "Deployment")."""

from __future__ import annotations

import gc

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
    gc.collect()  # what startup left unreachable is freed, not frozen
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, 10, 10)
