"""A repeatable schedule as an application declares it (:class:`Schedule`); the clock that
fires schedules is :mod:`herald.queue.schedules` (docs/queue.md#schedules)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter

from herald.queue.job_actor import JobActor


@dataclasses.dataclass(frozen=True, kw_only=True)
class Schedule:
    """A job that repeats: every ``every`` or per ``cron`` (exactly one of them)."""

    name: str
    actor: JobActor[Any]
    payload: dict[str, Any] = dataclasses.field(default_factory=dict)
    every: timedelta | None = None
    cron: str | None = None
    #: Asked at each sync: the schedule exists only while it returns True (None: always
    #: on). The application's own switch, read from its own configuration.
    feature_gate: Callable[[], bool] | None = None
    #: Also add one job when the clock starts.
    run_at_start: bool = False
    #: The jobs' group key (docs/queue.md#groups): the queue's limit for it bounds them.
    group: str | None = None
    #: Held by a tick's job until it ends: a tick that falls due while the previous one's
    #: job is still waiting or running adds nothing (runs never overlap or pile up).
    dedup_id: str | None = None

    def enqueue_options(self) -> dict[str, Any]:
        """The options every job of the schedule is added with (its group, its dedup id)."""
        return {"group": self.group, "dedup_id": self.dedup_id}

    def __post_init__(self) -> None:
        if (self.every is None) == (self.cron is None):
            raise ValueError(f"schedule {self.name!r}: give every or cron, exactly one")
        if self.every is not None and self.every < timedelta(milliseconds=100):
            raise ValueError(f"schedule {self.name!r}: every must be at least 100 ms")
        if self.cron is not None and not croniter.is_valid(self.cron):
            raise ValueError(f"schedule {self.name!r}: invalid cron {self.cron!r}")
        self.actor.validate(self.payload)  # a bad payload fails at declaration

    def enabled(self) -> bool:
        """True unless its feature gate is off."""
        return self.feature_gate is None or bool(self.feature_gate())

    def following(self, due_ms: int) -> int:
        """The due time after ``due_ms``."""
        if self.every is not None:
            return due_ms + self._step_ms()
        assert self.cron is not None  # exactly one of every and cron (checked at declaration)
        start = datetime.fromtimestamp(due_ms / 1000, tz=UTC)
        return int(croniter(self.cron, start).get_next(datetime).timestamp() * 1000)

    def first(self, now: int) -> int:
        """The first due time from ``now`` (intervals align to multiples of ``every``)."""
        if self.every is not None:
            return (now // self._step_ms() + 1) * self._step_ms()
        return self.following(now)

    def latest(self, due_ms: int, now: int) -> tuple[int, int]:
        """The latest tick at or after ``due_ms`` that is due by ``now``, and how many
        due ticks came before it (ticks no clock fired)."""
        if self.every is not None:
            skipped = max(0, (now - due_ms) // self._step_ms())
            return due_ms + skipped * self._step_ms(), skipped
        skipped = 0
        while (following := self.following(due_ms)) <= now:
            due_ms, skipped = following, skipped + 1
        return due_ms, skipped

    def _step_ms(self) -> int:
        assert self.every is not None
        return int(self.every.total_seconds() * 1000)
