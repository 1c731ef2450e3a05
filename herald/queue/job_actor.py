"""Job functions: a :class:`JobActor` runs one job of a queue, with the pydantic model of
its payload. ``@registry.actor(...)`` (:meth:`~herald.queue.registry.Registry.actor`)
declares one; installing an :class:`~herald.queue.app.App` binds its registries' actors to
its broker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Generic, TypeVar

import dramatiq
from dramatiq.middleware import CurrentMessage
from pydantic import BaseModel, ValidationError

from herald.queue.errors import InvalidMessage, InvalidPayload
from herald.queue.pydantic_internals import dump_json, validate

M = TypeVar("M", bound=BaseModel)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActorOptions:
    """Per-actor overrides of the queue's values (retry and retention)."""

    attempts: int | None = None
    backoff_base: timedelta | None = None
    max_started_attempts: int | None = None
    remove_on_complete: bool = False
    remove_on_fail: bool = False


class JobActor(Generic[M]):
    """A function that runs one job of a queue, with the pydantic model of its payload."""

    def __init__(self, fn: Callable[[M], Any], *, queue: str, payload: type[M],
                 name: str, options: ActorOptions,
                 on_exhausted: Callable[[M, str], None] | None = None) -> None:
        self.fn = fn
        self.on_exhausted = on_exhausted
        self.queue = queue
        self.model = payload
        self.name = name
        self.options = options
        #: the broker this actor was last bound to (None before an App was installed)
        self.broker: dramatiq.Broker | None = None
        self.__doc__ = fn.__doc__

    def __call__(self, job: M) -> Any:
        """Run the function directly (no queue), e.g. in a unit test."""
        return self.fn(job)

    def validate(self, payload: dict[str, Any] | BaseModel) -> str:
        """The payload as JSON text; :class:`InvalidPayload` when it fails the model."""
        # pydantic's validator and serializer called directly (pydantic_internals.py): half
        # the cost of model_validate and model_dump_json, paid for every job of a bulk add
        model_type = self.model
        try:
            model = payload if isinstance(payload, model_type) else validate(model_type, payload)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}"
                                 for e in error.errors())
            raise InvalidPayload(f"{self.name}: invalid payload: {problems}") from None
        return dump_json(model)

    def run_message(self, payload: Any) -> None:
        """What the worker runs: validate the consumed payload, then call the function.

        The return value goes on the message for the ledger (not back to Dramatiq, which
        would warn that no results backend stores it).
        """
        try:
            job = self.model.model_validate(payload)
        except ValidationError as error:
            raise InvalidMessage(f"{self.name}: payload failed validation: "
                                 f"{error.error_count()} problem(s): "
                                 f"{error.errors()[0]['msg']}") from None
        result = self.fn(job)
        message = CurrentMessage.get_current_message()
        if message is not None and result is not None:
            message.options["herald_result"] = result

    def bind(self, broker: dramatiq.Broker, time_limit: timedelta | None
             ) -> dramatiq.Actor[Any, Any]:
        """Declare this actor on a Dramatiq broker, each run bounded by ``time_limit`` (its
        queue's; None: unbounded); its jobs go to that broker from now on."""
        options = {} if time_limit is None else {
            "time_limit": int(time_limit.total_seconds() * 1000)}
        self.broker = broker
        return dramatiq.Actor(self.run_message, broker=broker, actor_name=self.name,
                              queue_name=self.queue, priority=0, options=options)

    def run_exhausted(self, payload: Any, reason: str) -> None:
        """Run the ``on_exhausted`` hook, if the actor has one, on the job's payload."""
        if self.on_exhausted is not None:
            self.on_exhausted(self.model.model_validate(payload), reason)
