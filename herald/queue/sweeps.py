"""Named sweeps: the repairs ``herald sweep`` runs on demand.

A queue that repairs state left behind by crashes or lost jobs (stuck handoffs, stale
dispatches) registers its sweep here; the queue layer knows only the name and that the
function returns how many items it handled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()
_sweeps: dict[str, Callable[[], int]] = {}


def register_sweep(name: str, run: Callable[[], int]) -> Callable[[], int]:
    """Make ``run`` available to ``herald sweep`` as ``name`` (redeclaring replaces it)."""
    with _lock:
        _sweeps[name] = run
    return run


def registered_sweeps() -> dict[str, Callable[[], int]]:
    """Every registered sweep, by name, in registration order."""
    with _lock:
        return dict(_sweeps)
