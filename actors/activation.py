"""The activation queue: a SIM activated with a telecom operator in three steps,
``initiate → verify_identity → complete``, one job per step
(docs/state-machines.md#activations).

:func:`create_activation` persists the activation as ``(initiate, pending)``; nothing
runs until its payment settles (:mod:`actors.payments`), which adds the ``initiate`` job.
Each step's job (id ``{activationId}-{step}``) runs the step through the operator adapter
the activation's ``operator_slug`` names, records the attempt, moves the activation on
and adds the next step's job. A transient operator failure is raised again, so the queue
retries it with its backoff (on the last attempt the activation fails); a rejection fails
the activation at once (``Permanent``). Every activation write goes through
:func:`models.activations.transition_activation`, guarded by the (step, status) the run
expects, so a repeated or late job changes nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from sqlmodel import Session, col, select

from actors.orchestration import E164
from actors.queues import registry
from herald.db import session as db_session
from herald.queue import EnqueueResult, Permanent, enqueue, is_last_attempt
from models.activations import (
    NEXT_STEP,
    Activation,
    ActivationStatus,
    ActivationStep,
    ActivationStepRecord,
    StepOutcome,
    close_step_record,
    open_step_record,
    step_records,
    transition_activation,
)
from models.base import ID_LENGTH, utcnow
from models.notifications import Account
from models.payments import Payment, PaymentStatus
from providers.operators import (
    Operator,
    OperatorRejected,
    StepRequest,
    StepResult,
    TransientOperatorError,
    operators,
)

log = logging.getLogger("herald.activation")

ACTIVATION_QUEUE = "activation"


class ActivationNotFound(LookupError):
    """No activation (or no account, when creating one) has this id."""


class InvalidActivation(ValueError):
    """The activation cannot be accepted as given; nothing was persisted."""


class ActivationJob(BaseModel):
    """One step's job, in the camelCase shape other producers of activation jobs use."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              serialize_by_alias=True)

    type: Literal["activation"] = "activation"
    activation_id: str = Field(min_length=1, max_length=ID_LENGTH)
    #: The account the activation belongs to.
    user_id: str = Field(min_length=1, max_length=ID_LENGTH)
    operator_slug: str = Field(min_length=1, max_length=32)
    step: ActivationStep
    created_at: datetime


def step_job_id(activation_id: str, step: ActivationStep | str) -> str:
    """The job id of one step of one activation: ``{activationId}-{step}``."""
    return f"{activation_id}-{ActivationStep(step).value}"


def storable_id(value: str) -> bool:
    """True when ``value`` can be an id column's value (PostgreSQL text refuses NUL)."""
    return 0 < len(value) <= ID_LENGTH and "\x00" not in value


# -- creating and reading -------------------------------------------------------------------
def create_activation(*, account_id: str, operator_slug: str, msisdn: str) -> Activation:
    """Persist a new activation as ``(initiate, pending)``: it waits for its payment.

    :class:`InvalidActivation` for an msisdn that is not E.164 or an operator that is not
    known and enabled (``OPERATORS``); :class:`ActivationNotFound` for an unknown account.
    Nothing is written on either.
    """
    if not E164.match(msisdn):
        raise InvalidActivation("msisdn: not an E.164 number (like +966501234567)")
    if operator_slug not in operators.enabled() or operator_slug not in operators.classes:
        raise InvalidActivation(f"operator_slug: unknown or disabled operator {operator_slug!r}")
    if not storable_id(account_id):
        raise ActivationNotFound(f"no account with id {account_id}")
    with db_session() as session:
        if session.get(Account, account_id) is None:
            raise ActivationNotFound(f"no account with id {account_id}")
        activation = Activation(account_id=account_id, operator_slug=operator_slug,
                                msisdn=msisdn)
        session.add(activation)
    log.info("activation created", extra={"activation_id": activation.id})
    return activation


def get_activation(activation_id: str) -> tuple[Activation, list[ActivationStepRecord]] | None:
    """An activation and its step attempts (oldest first), or None."""
    if not storable_id(activation_id):
        return None
    with db_session() as session:
        activation = session.get(Activation, activation_id)
        if activation is None:
            return None
        return activation, step_records(session, activation_id)


# -- running the steps --------------------------------------------------------------------
def enqueue_step(activation: Activation, step: ActivationStep) -> EnqueueResult:
    """Add the job of ``step`` (id ``{activationId}-{step}``); a retained failed one is
    retried in place, a live or completed one is left alone (``duplicated``)."""
    job = ActivationJob(activation_id=activation.id, user_id=activation.account_id,
                        operator_slug=activation.operator_slug, step=step,
                        created_at=utcnow())
    return enqueue(run_activation_step, job, job_id=step_job_id(activation.id, step),
                   retry_failed=True)


def hand_on(activation: Activation) -> EnqueueResult | None:
    """Add the job of the step an unfinished activation stands at (idempotent by its job
    id): how settlement starts ``initiate``, and how a run that finds its step already
    done makes sure the next one was added. None for a finished activation."""
    if activation.status in (ActivationStatus.COMPLETED, ActivationStatus.FAILED):
        return None
    return enqueue_step(activation, ActivationStep(activation.step))


def _has_settled_payment(session: Session, activation_id: str) -> bool:
    found = session.exec(select(Payment.id).where(
        col(Payment.activation_id) == activation_id,
        col(Payment.status) == PaymentStatus.SETTLED.value).limit(1)).first()
    return found is not None


def _begin(job: ActivationJob) -> tuple[Activation, str] | Activation | None:
    """Enter this step: ``(step, running)`` and a running attempt record, committed before
    the operator is called. Returns the activation and the record's id; the activation
    alone when it is elsewhere (this step done, or failed); None when it does not exist."""
    step = ActivationStep(job.step)
    expect = ([ActivationStatus.PENDING, ActivationStatus.RUNNING]
              if step is ActivationStep.INITIATE else [ActivationStatus.RUNNING])
    with db_session() as session:
        activation = session.get(Activation, job.activation_id)
        if activation is None:
            return None
        if (activation.status == ActivationStatus.PENDING
                and not _has_settled_payment(session, activation.id)):
            raise Permanent(f"activation {activation.id} has no settled payment")
        if not transition_activation(session, activation.id, expect_step=step,
                                     expect_status=expect, step=step,
                                     status=ActivationStatus.RUNNING):
            return activation
        record_id = open_step_record(session, activation.id, step)
        session.refresh(activation)
        return activation, record_id


def _end(activation: Activation, step: ActivationStep, record_id: str, *,
         outcome: StepOutcome, detail: str | None,
         result: StepResult | None = None) -> Activation:
    """Close the attempt's record and, for a completed or failed step, move the activation
    on, in one transaction; returns the activation as it stands after."""
    following = NEXT_STEP[step]
    with db_session() as session:
        # the record first: the activation's webhook message, written with its move,
        # shows the step as it ended
        close_step_record(session, record_id, outcome, detail)
        if outcome is StepOutcome.COMPLETED:
            transition_activation(
                session, activation.id, expect_step=step,
                expect_status=[ActivationStatus.RUNNING], step=following or step,
                status=ActivationStatus.RUNNING if following else ActivationStatus.COMPLETED,
                operator_ref=result.operator_ref if result else None)
        elif outcome is StepOutcome.FAILED:
            transition_activation(session, activation.id, expect_step=step,
                                  expect_status=[ActivationStatus.RUNNING], step=step,
                                  status=ActivationStatus.FAILED, failed_reason=detail)
        current = session.get(Activation, activation.id)
        assert current is not None
        session.refresh(current)
        return current


def _operator(activation: Activation) -> Operator:
    try:
        return operators.get(activation.operator_slug)
    except KeyError:
        raise OperatorRejected(f"operator {activation.operator_slug!r} is not enabled "
                               "(OPERATORS)") from None


def _call(activation: Activation, step: ActivationStep) -> StepResult:
    operator = _operator(activation)
    request = StepRequest(activation_id=activation.id, msisdn=activation.msisdn,
                          operator_ref=activation.operator_ref)
    method = {ActivationStep.INITIATE: operator.initiate,
              ActivationStep.VERIFY_IDENTITY: operator.verify_identity,
              ActivationStep.COMPLETE: operator.complete}[step]
    return method(request)


@registry.actor(queue=ACTIVATION_QUEUE, payload=ActivationJob)
def run_activation_step(job: ActivationJob) -> dict[str, Any]:
    """Run one step of one activation (see the module's docstring)."""
    step = ActivationStep(job.step)
    begun = _begin(job)
    if begun is None:
        raise Permanent(f"activation {job.activation_id} does not exist")
    if isinstance(begun, Activation):
        # a repeat of a step already done: make sure the step it stands at was added
        hand_on(begun)
        return {"activation_id": job.activation_id, "step": step.value,
                "skipped": f"activation is at {begun.step} ({begun.status})"}
    activation, record_id = begun
    try:
        result = _call(activation, step)
    except TransientOperatorError as error:
        final = is_last_attempt()
        _end(activation, step, record_id, detail=str(error),
             outcome=StepOutcome.FAILED if final else StepOutcome.RETRYING)
        raise
    except OperatorRejected as error:
        _end(activation, step, record_id, outcome=StepOutcome.FAILED, detail=str(error))
        raise Permanent(str(error)) from error
    after = _end(activation, step, record_id, outcome=StepOutcome.COMPLETED,
                 detail=result.detail, result=result)
    hand_on(after)
    log.info("activation step done", extra={"activation_id": activation.id,
                                            "step": step.value})
    return {"activation_id": activation.id, "step": step.value, "now": after.step,
            "status": after.status}
