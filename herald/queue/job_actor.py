"""Job functions: ``@actor`` declares one on a queue with the pydantic model of its payload.

Declared actors are kept here, by name; installing an :class:`~herald.queue.app.App` binds
each of them to its broker, and an actor declared after that is bound at once.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Generic, TypeVar

import dramatiq
from dramatiq.middleware import CurrentMessage
from pydantic import BaseModel, ValidationError

from herald.queue.dramatiq_internals import installed_broker
from herald.queue.errors import InvalidMessage, InvalidPayload
from herald.queue.pydantic_internals import dump_json, validate
from herald.queue.registry import QueueSpec, get_spec

M = TypeVar("M", bound=BaseModel)

_lock = threading.RLock()
_actors: dict[str, JobActor[Any]] = {}


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

    def bind(self, broker: dramatiq.Broker) -> dramatiq.Actor[Any, Any]:
        """Declare this actor on a Dramatiq broker; its jobs go to that broker from now on."""
        spec = get_spec(self.queue)
        time_limit = {} if spec.time_limit is None else {
            "time_limit": int(spec.time_limit.total_seconds() * 1000)}
        self.broker = broker
        return dramatiq.Actor(self.run_message, broker=broker, actor_name=self.name,
                              queue_name=self.queue, priority=0, options=time_limit)


def actor(*, queue: str, payload: type[M], name: str | None = None,
          attempts: int | None = None, backoff_base: timedelta | None = None,
          max_started_attempts: int | None = None, remove_on_complete: bool = False,
          remove_on_fail: bool = False, on_exhausted: Callable[[M, str], None] | None = None,
          ) -> Callable[[Callable[[M], Any]], JobActor[M]]:
    """Declare a job function on ``queue`` whose payload is validated by ``payload``.

    The queue must be in the registry (:func:`herald.queue.registry.declare`); the keyword
    overrides replace the queue's values for this actor's jobs only. ``on_exhausted(job,
    reason)`` runs when a job fails for good without running, because it was started more
    than ``max_started_attempts`` times (stalls, deferrals).
    """
    get_spec(queue)  # fail now on an undeclared queue

    def decorate(fn: Callable[[M], Any]) -> JobActor[M]:
        job_actor = JobActor(fn, queue=queue, payload=payload, name=name or fn.__name__,
                             options=ActorOptions(attempts=attempts, backoff_base=backoff_base,
                                                  max_started_attempts=max_started_attempts,
                                                  remove_on_complete=remove_on_complete,
                                                  remove_on_fail=remove_on_fail),
                             on_exhausted=on_exhausted)
        with _lock:
            _actors[job_actor.name] = job_actor
            broker = installed_broker()
            if broker is not None:
                job_actor.bind(broker)
        return job_actor

    return decorate


def exhausted_hook(actor_name: str, payload: Any, reason: str) -> None:
    """Run the named actor's ``on_exhausted`` hook, if it has one."""
    with _lock:
        job_actor = _actors.get(actor_name)
    if job_actor is not None and job_actor.on_exhausted is not None:
        job_actor.on_exhausted(job_actor.model.model_validate(payload), reason)


def declared_actors() -> list[JobActor[Any]]:
    """Every actor declared so far in this process."""
    with _lock:
        return list(_actors.values())


def job_options(options: ActorOptions, spec: QueueSpec) -> dict[str, Any]:
    """The retry and retention values a new job carries: the actor's overrides, else the
    queue's."""
    base = options.backoff_base or spec.backoff_base
    return {"attempts": options.attempts or spec.attempts, "backoff": spec.backoff,
            "backoff_base_ms": int(base.total_seconds() * 1000),
            "max_started_attempts": options.max_started_attempts or spec.max_started_attempts,
            "remove_on_complete": options.remove_on_complete or spec.retention.completed.remove,
            "remove_on_fail": options.remove_on_fail or spec.retention.failed.remove}


def declared_actor(name: str) -> JobActor[Any]:
    """The actor declared under ``name`` (KeyError when none is)."""
    with _lock:
        return _actors[name]
