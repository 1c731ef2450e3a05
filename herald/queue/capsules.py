"""Capsules: the queues a worker process starts together, after one startup step, with
one failure policy and one drain bound (docs/queue.md#capsules). An application declares
them on its registry (``registry.declare_capsules``); :mod:`herald.queue.worker` runs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from enum import StrEnum


class OnFailure(StrEnum):
    """What a failed startup step of a capsule does to its process."""

    #: Nothing of the process runs: every capsule's workers stop, the producer clients
    #: close, and the process exits with :data:`STARTUP_FAILED`.
    STOP_ALL = "stop_all"
    #: Only this capsule's queues stay unconsumed; the others run on, the producer
    #: clients stay open, and the worker's ``/readyz`` names the capsule.
    STOP_CAPSULE = "stop_capsule"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capsule:
    """Queues a worker process starts together, after one startup step, and drains with
    one bound (the longest ``shutdown_timeout`` of its queues; none if one has none)."""

    name: str
    #: The capsule's queues; a queue belongs to one capsule at most.
    queues: tuple[str, ...] = ()
    #: A capsule without queues of its own (a startup step only) runs in a process that
    #: runs any of these queues.
    runs_with: tuple[str, ...] = ()
    #: Builds what the capsule's actors need; raising is a startup failure.
    startup: Callable[[], None] | None = None
    on_failure: OnFailure = OnFailure.STOP_ALL
    #: Asked by every readiness probe while the capsule runs: True, or why the capsule
    #: cannot do its work now (a missing renderer); it should answer from a cache, quickly.
    readiness: Callable[[], bool | str] | None = None

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ValueError("Capsule needs a name")
        if isinstance(self.queues, str) or isinstance(self.runs_with, str):
            raise TypeError(f"Capsule {self.name!r}: queues and runs_with are "
                            "tuples of queue names")
        object.__setattr__(self, "on_failure", OnFailure(self.on_failure))


def plan_capsules(queues: Sequence[str], capsules: Sequence[Capsule],
                  ) -> list[tuple[Capsule, list[str]]]:
    """The capsules a process running ``queues`` starts, in order, each with its queues of
    the process; queues of no capsule form a last capsule with no startup step."""
    owners = capsule_owners(capsules)
    planned = []
    for capsule in capsules:
        mine = [queue for queue in queues if owners.get(queue) is capsule]
        if mine or any(queue in queues for queue in capsule.runs_with):
            planned.append((capsule, mine))
    rest = [queue for queue in queues if queue not in owners]
    if rest:
        planned.append((Capsule(name="queues of no capsule", queues=tuple(rest)), rest))
    return planned


def capsule_owners(capsules: Iterable[Capsule]) -> dict[str, Capsule]:
    """The capsule of each queue in one, by queue name; ``ValueError`` when a queue is in
    two capsules."""
    owners: dict[str, Capsule] = {}
    for capsule in capsules:
        for queue in capsule.queues:
            if queue in owners:
                raise ValueError(f"queue {queue!r} is in capsules "
                                 f"{owners[queue].name!r} and {capsule.name!r}")
            owners[queue] = capsule
    return owners


# the queues of the capsule whose startup step runs now, in this process
_starting: ContextVar[tuple[str, ...] | None] = ContextVar("herald_capsule_queues",
                                                           default=None)


def capsule_queues() -> tuple[str, ...] | None:
    """The queues of its capsule this process runs, asked from a startup step while it
    runs: a step that builds something per queue builds only theirs (an email worker
    need not build the SMS provider). None outside a worker's start (a step called
    directly): build for every queue."""
    return _starting.get()


@contextlib.contextmanager
def starting(queues: Sequence[str]) -> Iterator[None]:
    """Within the block, :func:`capsule_queues` answers ``queues`` (the worker runs each
    capsule's step in one)."""
    token = _starting.set(tuple(queues))
    try:
        yield
    finally:
        _starting.reset(token)
