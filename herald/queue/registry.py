"""The queue registry: every queue declared once, with all of its values.

Producers, workers, the clock, the CLI and the operator views read queues from here and
nothing else. An application lists its queues in a queue table (:func:`provide_queues`,
herald's own is ``actors/queues.py``) or declares them one by one (:func:`declare`); the
library itself declares none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any

from herald.queue.errors import UnknownQueue

__all__ = ["DAY", "HOUR", "MAX_GROUP_LENGTH", "MINUTE", "NORMAL_PRIORITY", "PRIORITY_RANGE",
           "SECOND", "URGENT_PRIORITY", "Backoff", "Keep", "QueueSpec", "QueueTable",
           "Retention", "all_specs", "declare", "get_spec", "group_key_problem", "names",
           "provide_queues", "redeclared", "reset_registry"]

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)

#: The two priorities herald's producers use: urgent, and everything else (docs/queue.md#priority).
URGENT_PRIORITY = 1
NORMAL_PRIORITY = 5
#: Lowest and highest priority a job may carry.
PRIORITY_RANGE = range(1, 11)


class Backoff(StrEnum):
    """How the wait before attempt k grows."""

    #: ``base × 2^(k−2)``: 1 s, 2 s, 4 s … for base 1 s.
    EXPONENTIAL = "exponential"
    #: ``base`` before every retry.
    FIXED = "fixed"
    #: No automatic retry schedule (the queue runs its own, like email-retry).
    NONE = "none"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Keep:
    """How many finished records of one kind to keep: by count, by age, or both."""

    #: Keep at most this many (None: no count limit).
    count: int | None = None
    #: Keep none older than this (None: no age limit).
    age: timedelta | None = None
    #: Remove the record as soon as the job finishes (when a database row is the durable one).
    remove: bool = False

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 0:
            raise ValueError("Keep.count must be >= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Retention:
    """Retention of completed and failed job records."""

    completed: Keep = Keep(count=1000, age=DAY)
    failed: Keep = Keep(count=5000, age=7 * DAY)


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueueSpec:
    """One queue's whole configuration. Only ``name`` is required."""

    name: str
    #: Jobs one worker process runs at once on this queue (independent of other queues).
    concurrency: int = 1
    #: ``(max_jobs, window)`` across all processes, or None.
    rate_limit: tuple[int, timedelta] | None = None
    #: Attempts before a job fails for good (failed attempts; deferrals do not count).
    attempts: int = 3
    backoff: Backoff = Backoff.EXPONENTIAL
    backoff_base: timedelta = SECOND
    retention: Retention = Retention()
    #: How long a started job's lock lasts before it counts as stalled (extended while it runs).
    lock_duration: timedelta = 30 * SECOND
    #: Longest one run may take (None: no limit).
    time_limit: timedelta | None = None
    #: Starts allowed, stalled restarts and deferrals included (None: unbounded).
    max_started_attempts: int | None = None
    #: Seconds a worker waits for in-flight jobs at shutdown before forcing (None: no bound).
    shutdown_timeout: timedelta | None = None
    #: Most jobs of one group key active at once across all processes, per group
    #: (docs/queue.md#groups). Not hashed: a mapping has no hash.
    group_limits: Mapping[str, int] = dataclasses.field(default_factory=dict, hash=False)
    #: The limit of a group not in ``group_limits`` (None: such groups are unlimited).
    default_group_limit: int | None = None

    def __post_init__(self) -> None:
        problems = []
        if not self.name or any(c in self.name for c in " :{}"):
            problems.append("name must be non-empty without spaces, ':' or braces")
        if self.concurrency < 1:
            problems.append("concurrency must be >= 1")
        if self.attempts < 1:
            problems.append("attempts must be >= 1")
        if self.rate_limit is not None:
            count, window = self.rate_limit
            if count < 1 or window <= timedelta(0):
                problems.append("rate_limit must be (max_jobs >= 1, window > 0)")
        if self.lock_duration < SECOND:
            problems.append("lock_duration must be at least 1 s")
        if self.max_started_attempts is not None and self.max_started_attempts < 1:
            problems.append("max_started_attempts must be >= 1")
        problems += _group_problems(self.group_limits, self.default_group_limit)
        if not problems:
            # a copy nobody can change: the spec stays what was declared
            object.__setattr__(self, "group_limits",
                               types.MappingProxyType(dict(self.group_limits)))
        if problems:
            raise ValueError(f"QueueSpec {self.name!r}: " + "; ".join(problems))

    def group_limit(self, group: str) -> int | None:
        """How many jobs of ``group`` may be active at once (None: no limit)."""
        return self.group_limits.get(group, self.default_group_limit)


#: Longest group key a job may carry.
MAX_GROUP_LENGTH = 200


def group_key_problem(group: object) -> str | None:
    """What is wrong with ``group`` as a job's group key, or None when it is a good one
    (a non-empty string of at most :data:`MAX_GROUP_LENGTH` characters)."""
    if not isinstance(group, str) or not 1 <= len(group) <= MAX_GROUP_LENGTH:
        return f"a group key must be a string of 1..{MAX_GROUP_LENGTH} characters"
    return None


def _is_limit(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _group_problems(limits: Mapping[str, int], default: int | None) -> list[str]:
    problems = []
    if not isinstance(limits, Mapping):
        return ["group_limits must map group keys to limits"]
    for group, limit in limits.items():
        if (problem := group_key_problem(group)) is not None:
            problems.append(f"group_limits: {problem} (got {group!r})")
        elif not _is_limit(limit):
            problems.append(f"group_limits[{group!r}] must be an integer >= 1")
    if default is not None and not _is_limit(default):
        problems.append("default_group_limit must be None or an integer >= 1")
    return problems


#: Lists an application's queues (see :func:`provide_queues`); it reads the application's
#: own configuration, which the library never sees.
QueueTable = Callable[[], Iterable[QueueSpec]]

_lock = threading.Lock()
_declared: dict[str, QueueSpec] = {}
_tables: list[QueueTable] = []
_tabled: dict[str, QueueSpec] | None = None


def provide_queues(table: QueueTable) -> QueueTable:
    """Register an application's queue table: ``table()`` lists its queues, called again
    after :func:`reset_registry`. A queue given to
    :func:`declare` under the same name replaces the table's. Registering the same table
    twice is harmless."""
    global _tabled
    with _lock:
        if table not in _tables:
            _tables.append(table)
            _tabled = None
    return table


def _from_tables() -> dict[str, QueueSpec]:
    global _tabled
    if _tabled is None:
        _tabled = {spec.name: spec for table in _tables for spec in table()}
    return _tabled


def declare(spec: QueueSpec) -> QueueSpec:
    """Declare (or redeclare) a queue; returns the spec. Builtins can be overridden too."""
    with _lock:
        _declared[spec.name] = spec
    return spec


@contextlib.contextmanager
def redeclared(names: Iterable[str], **changes: Any) -> Iterator[None]:
    """Run the block with these queues' specs changed (``rate_limit=None`` lifts their
    rate limits, say), in this process; the specs before it are declared again after."""
    saved = [get_spec(name) for name in names]
    for spec in saved:
        declare(dataclasses.replace(spec, **changes))
    try:
        yield
    finally:
        for spec in saved:
            declare(spec)


def get_spec(name: str) -> QueueSpec:
    """The spec of queue ``name``; :class:`UnknownQueue` (a KeyError) when undeclared."""
    with _lock:
        spec = _declared.get(name) or _from_tables().get(name)
    if spec is None:
        raise UnknownQueue(name)
    return spec


def all_specs() -> list[QueueSpec]:
    """Every queue: the queue tables' first, in their order, then those declared."""
    with _lock:
        merged = dict(_from_tables())
        merged.update(_declared)
    return list(merged.values())


def names() -> Iterator[str]:
    """The names of every declared queue."""
    return (spec.name for spec in all_specs())


def reset_registry() -> None:
    """Forget declared queues; the queue tables are called again on next use (tests)."""
    global _tabled
    with _lock:
        _declared.clear()
        _tabled = None
