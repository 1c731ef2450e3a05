"""Queue specs and the :class:`Registry` an application declares on.

A :class:`QueueSpec` is one queue with all of its values. A :class:`Registry` holds an
application's declarations: its queues (listed in a queue table, :meth:`Registry.provide`
— herald's own is ``actors/queues.py`` — or declared one by one, :meth:`Registry.declare`),
actors, schedules, sweeps and capsules. The App built with it is what producers,
workers, the clock, the CLI and the operator views read them from; the library itself
declares none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any, Protocol, cast

from herald.queue.capsules import Capsule, capsule_owners
from herald.queue.dramatiq_internals import installed_broker
from herald.queue.errors import NoAppInstalled, UnknownQueue
from herald.queue.job_actor import ActorOptions, JobActor, M
from herald.queue.schedule_spec import Schedule

#: The attribute of a broker that names the App it belongs to.
APP_ATTRIBUTE = "herald_app"
#: Why a library function that needs the wiring failed outside an App.
NO_APP = ("no herald.queue App is installed in this process: build one from a QueueConfig "
          "and call its install() (docs/queue.md#the-app)")

__all__ = ["DAY", "HOUR", "MAX_GROUP_LENGTH", "MINUTE", "NORMAL_PRIORITY", "PRIORITY_RANGE",
           "SECOND", "URGENT_PRIORITY", "Backoff", "Keep", "QueueSpec", "QueueTable",
           "Registry", "Retention", "group_key_problem"]

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


def job_options(options: ActorOptions, spec: QueueSpec) -> dict[str, Any]:
    """The retry and retention values a new job carries: the actor's overrides, else the
    queue's."""
    base = options.backoff_base or spec.backoff_base
    return {"attempts": options.attempts or spec.attempts, "backoff": spec.backoff,
            "backoff_base_ms": int(base.total_seconds() * 1000),
            "max_started_attempts": options.max_started_attempts or spec.max_started_attempts,
            "remove_on_complete": options.remove_on_complete or spec.retention.completed.remove,
            "remove_on_fail": options.remove_on_fail or spec.retention.failed.remove}


#: Lists an application's queues (see :meth:`Registry.provide`); it reads the
#: application's own configuration, which the library never sees.
QueueTable = Callable[[], Iterable[QueueSpec]]


class Registry:
    """An application's declarations, without I/O: its queues (declared one by one or
    listed by queue tables), its actors, its schedules, its sweeps and its capsules.

    An :class:`~herald.queue.app.App` built with registries reads them: the queue tables
    once, when the App is built; everything else as it is at each use, so a queue
    declared (or an actor added) later is seen at once (docs/queue.md#registry).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._declared: dict[str, QueueSpec] = {}
        self._tables: list[QueueTable] = []
        self._actors: dict[str, JobActor[Any]] = {}
        self._schedules: dict[str, Schedule] = {}
        self._sweeps: dict[str, Callable[[], int]] = {}
        self._capsules: dict[str, Capsule] = {}

    # -- queues ---------------------------------------------------------------------
    def provide(self, table: QueueTable) -> QueueTable:
        """Add a queue table: ``table()`` lists queues, called by each App built with
        this registry. A queue given to :meth:`declare` under the same name replaces the
        table's. Adding the same table twice is harmless."""
        with self._lock:
            if table not in self._tables:
                self._tables.append(table)
        return table

    def declare(self, spec: QueueSpec) -> QueueSpec:
        """Declare (or redeclare) a queue; returns the spec."""
        with self._lock:
            self._declared[spec.name] = spec
        return spec

    def table_specs(self) -> dict[str, QueueSpec]:
        """The queues the tables list now, by name (each table is called)."""
        with self._lock:
            tables = list(self._tables)
        return {spec.name: spec for table in tables for spec in table()}

    def declared_specs(self) -> dict[str, QueueSpec]:
        """The queues given to :meth:`declare`, by name."""
        with self._lock:
            return dict(self._declared)

    def spec(self, name: str) -> QueueSpec:
        """Queue ``name`` as declared, else as the tables list it now;
        :class:`UnknownQueue` (a KeyError) when neither has it."""
        spec = self.declared_specs().get(name) or self.table_specs().get(name)
        if spec is None:
            raise UnknownQueue(name)
        return spec

    def knows(self, name: str) -> bool:
        """True when queue ``name`` is declared here or listed by a table."""
        return name in self.declared_specs() or name in self.table_specs()

    @contextlib.contextmanager
    def redeclared(self, names: Iterable[str], **changes: Any) -> Iterator[None]:
        """Run the block with these queues' specs changed (``rate_limit=None`` lifts
        their rate limits, say); the specs before it are declared again after."""
        saved = [self.spec(name) for name in names]
        for spec in saved:
            self.declare(dataclasses.replace(spec, **changes))
        try:
            yield
        finally:
            for spec in saved:
                self.declare(spec)

    # -- actors ---------------------------------------------------------------------
    def actor(self, *, queue: str, payload: type[M], name: str | None = None,
              attempts: int | None = None, backoff_base: timedelta | None = None,
              max_started_attempts: int | None = None, remove_on_complete: bool = False,
              remove_on_fail: bool = False,
              on_exhausted: Callable[[M, str], None] | None = None,
              ) -> Callable[[Callable[[M], Any]], JobActor[M]]:
        """Declare a job function on ``queue`` whose payload is validated by ``payload``.

        The queue must be known here (:meth:`declare`, :meth:`provide`) or to the
        installed App; the keyword overrides replace the queue's values for this actor's
        jobs only. ``on_exhausted(job, reason)`` runs when a job fails for good without
        running, because it was started more than ``max_started_attempts`` times (stalls,
        deferrals). An actor declared while an App that reads this registry is installed
        is bound to its broker at once.
        """
        self._check_queue(queue)  # fail now on an undeclared queue

        def decorate(fn: Callable[[M], Any]) -> JobActor[M]:
            options = ActorOptions(attempts=attempts, backoff_base=backoff_base,
                                   max_started_attempts=max_started_attempts,
                                   remove_on_complete=remove_on_complete,
                                   remove_on_fail=remove_on_fail)
            job_actor = JobActor(fn, queue=queue, payload=payload, name=name or fn.__name__,
                                 options=options, on_exhausted=on_exhausted)
            with self._lock:
                self._actors[job_actor.name] = job_actor
            app: Declarations | None = getattr(installed_broker(), APP_ATTRIBUTE, None)
            if app is not None and app.reads(self):
                app.bind(job_actor)
            return job_actor

        return decorate

    def _check_queue(self, queue: str) -> None:
        if self.knows(queue):
            return
        app: Declarations | None = getattr(installed_broker(), APP_ATTRIBUTE, None)
        if app is None:
            raise UnknownQueue(queue)
        app.spec(queue)  # an actor of this registry on a queue of another one

    def actors(self) -> dict[str, JobActor[Any]]:
        """Every actor declared here, by name, in declaration order."""
        with self._lock:
            return dict(self._actors)

    # -- schedules, sweeps, capsules ------------------------------------------------
    def schedule(self, item: Schedule) -> Schedule:
        """Declare (or redeclare) a schedule; returns it."""
        with self._lock:
            self._schedules[item.name] = item
        return item

    def schedules(self) -> dict[str, Schedule]:
        """Every schedule declared here, by name, in declaration order."""
        with self._lock:
            return dict(self._schedules)

    def sweep(self, name: str, run: Callable[[], int]) -> Callable[[], int]:
        """Make ``run`` available to ``herald sweep`` as ``name`` (redeclaring replaces
        it); ``run()`` returns how many items it handled."""
        with self._lock:
            self._sweeps[name] = run
        return run

    def sweeps(self) -> dict[str, Callable[[], int]]:
        """Every sweep declared here, by name, in declaration order."""
        with self._lock:
            return dict(self._sweeps)

    def declare_capsules(self, *capsules: Capsule) -> None:
        """Declare capsules (a capsule of the same name is replaced); a queue already in
        another capsule is refused with ``ValueError`` and nothing is declared."""
        with self._lock:
            merged = dict(self._capsules)
            for capsule in capsules:
                merged[capsule.name] = capsule
            capsule_owners(merged.values())
            self._capsules = merged

    def capsules(self) -> dict[str, Capsule]:
        """Every capsule declared here, by name, in declaration order."""
        with self._lock:
            return dict(self._capsules)


class Declarations(Protocol):
    """What the broker, its middleware and its consumers read of an App: its registries'
    declarations merged (:class:`~herald.queue.app.App` is one)."""

    def spec(self, name: str) -> QueueSpec: ...

    def specs(self) -> list[QueueSpec]: ...

    def actor(self, name: str) -> JobActor[Any]: ...

    def reads(self, registry: Registry) -> bool: ...

    def bind(self, job_actor: JobActor[Any]) -> None: ...


def declarations_of(broker: object = None) -> Declarations:
    """The declarations of the App ``broker`` belongs to, else of the installed App;
    :class:`NoAppInstalled` when there is neither."""
    for candidate in (broker, installed_broker()):
        app = getattr(candidate, APP_ATTRIBUTE, None)
        if app is not None:
            return cast(Declarations, app)  # only an App sets the attribute
    raise NoAppInstalled(NO_APP)
