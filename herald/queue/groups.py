"""Worker groups: the queues a worker process starts together, after one startup step,
with one failure policy and one drain bound (docs/queue.md#lifecycle). An application
declares them on its registry (``registry.declare_groups``); :mod:`herald.queue.worker`
runs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum


class OnFailure(StrEnum):
    """What a failed startup step of a group does to its process."""

    #: Nothing of the process runs: every group's workers stop, the producer clients
    #: close, and the process exits with :data:`STARTUP_FAILED`.
    STOP_ALL = "stop_all"
    #: Only this group's queues stay unconsumed; the others run on, the producer
    #: clients stay open, and the worker's ``/readyz`` names the group.
    STOP_GROUP = "stop_group"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerGroup:
    """Queues a worker process starts together, after one startup step, and drains with
    one bound (the longest ``shutdown_timeout`` of its queues; none if one has none)."""

    name: str
    #: The group's queues; a queue belongs to one group at most.
    queues: tuple[str, ...] = ()
    #: A group without queues of its own (a startup step only) runs in a process that
    #: runs any of these queues.
    runs_with: tuple[str, ...] = ()
    #: Builds what the group's actors need; raising is a startup failure.
    startup: Callable[[], None] | None = None
    on_failure: OnFailure = OnFailure.STOP_ALL
    #: Asked by every readiness probe while the group runs: True, or why the group cannot
    #: do its work now (a missing renderer); it should answer from a cache, quickly.
    readiness: Callable[[], bool | str] | None = None

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ValueError("WorkerGroup needs a name")
        if isinstance(self.queues, str) or isinstance(self.runs_with, str):
            raise TypeError(f"WorkerGroup {self.name!r}: queues and runs_with are "
                            "tuples of queue names")
        object.__setattr__(self, "on_failure", OnFailure(self.on_failure))


def plan_groups(queues: Sequence[str], groups: Sequence[WorkerGroup],
                ) -> list[tuple[WorkerGroup, list[str]]]:
    """The groups a process running ``queues`` starts, in order, each with its queues of
    the process; queues of no group form a last group with no startup step."""
    owners = group_owners(groups)
    planned = []
    for group in groups:
        mine = [queue for queue in queues if owners.get(queue) is group]
        if mine or any(queue in queues for queue in group.runs_with):
            planned.append((group, mine))
    rest = [queue for queue in queues if queue not in owners]
    if rest:
        planned.append((WorkerGroup(name="ungrouped queues", queues=tuple(rest)), rest))
    return planned


def group_owners(groups: Iterable[WorkerGroup]) -> dict[str, WorkerGroup]:
    """The group of each grouped queue, by queue name; ``ValueError`` when a queue is in
    two groups."""
    owners: dict[str, WorkerGroup] = {}
    for group in groups:
        for queue in group.queues:
            if queue in owners:
                raise ValueError(f"queue {queue!r} is in worker groups "
                                 f"{owners[queue].name!r} and {group.name!r}")
            owners[queue] = group
    return owners
