"""How the demo writes its summary: lines a person reads, within :data:`WIDTH` columns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: The widest line the demo writes: its tables and lines fit a terminal of 100 columns
#: (a narrower terminal gets its own width).
WIDTH = 100


def counts_text(counts: Mapping[str, int], order: Iterable[str] | None = None) -> str:
    """``{"completed": 3, "failed": 0}`` as ``3 completed``: the non-zero counts, in
    ``order`` (else the mapping's), or ``none``."""
    names = list(order) if order is not None else list(counts)
    parts = [f"{counts[name]} {name}" for name in names if counts.get(name)]
    return ", ".join(parts) or "none"
