"""Operator activations: a SIM activated with a telecom operator in three steps,
``initiate → verify_identity → complete`` (docs/state-machines.md#activations).

An activation is a (step, status) pair: ``(initiate, pending)`` until its payment
settles, ``(<step>, running)`` while the steps run, ``(complete, completed)`` at the end,
``(<step>, failed)`` when a step failed for good. Every write to an activation goes
through :func:`transition_activation`, guarded by the (step, status) it expects; each
step attempt is one :class:`ActivationStepRecord`, opened ``running`` and closed with how
it ended.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import update
from sqlmodel import Field, Session, SQLModel, col, select

from models.base import id_field, timestamp_field, utcnow
from models.webhooks import write_event_messages


class ActivationStep(StrEnum):
    """The steps, in order."""

    INITIATE = "initiate"
    VERIFY_IDENTITY = "verify_identity"
    COMPLETE = "complete"


#: Each step's successor (None after the last).
NEXT_STEP: dict[ActivationStep, ActivationStep | None] = {
    ActivationStep.INITIATE: ActivationStep.VERIFY_IDENTITY,
    ActivationStep.VERIFY_IDENTITY: ActivationStep.COMPLETE,
    ActivationStep.COMPLETE: None,
}


class ActivationStatus(StrEnum):
    """Where an activation stands."""

    #: Waiting for its payment to settle.
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class Activation(SQLModel, table=True):
    """One activation: its operator, number, current step and status."""

    __tablename__ = "activations"

    id: str = id_field()
    account_id: str = Field(foreign_key="accounts.id", max_length=36, index=True)
    operator_slug: str = Field(max_length=32)
    msisdn: str = Field(max_length=20)
    step: str = Field(default=ActivationStep.INITIATE.value, max_length=24)
    status: str = Field(default=ActivationStatus.PENDING.value, max_length=16)
    #: The operator's reference for the activation, once initiate returned it.
    operator_ref: str | None = Field(default=None, max_length=255)
    failed_reason: str | None = Field(default=None, max_length=500)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()


class ActivationStepRecord(SQLModel, table=True):
    """One step's run: the history ``GET /v1/activations/{id}`` shows, oldest first."""

    __tablename__ = "activation_steps"

    id: str = id_field()
    activation_id: str = Field(foreign_key="activations.id", max_length=36, index=True)
    step: str = Field(max_length=24)
    #: ``running``, then ``completed``, ``failed`` or ``retrying`` (a transient failure
    #: with attempts left: the step runs again).
    status: str = Field(max_length=16)
    detail: str | None = Field(default=None, max_length=500)
    at: datetime = timestamp_field()


class StepOutcome(StrEnum):
    """How one step attempt (one :class:`ActivationStepRecord`) stands."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    RETRYING = "retrying"


#: The webhook event of each status an activation enters that has one
#: (docs/api.md#webhooks).
ACTIVATION_EVENTS = {ActivationStatus.COMPLETED: "activation.completed",
                     ActivationStatus.FAILED: "activation.failed"}


# -- the activation as the API shows it --------------------------------------------------------
def step_records(session: Session, activation_id: str) -> list[ActivationStepRecord]:
    """An activation's step attempts, oldest first, as the database has them now (a
    record closed in this transaction shows as it ended)."""
    return list(session.exec(select(ActivationStepRecord)
                             .where(col(ActivationStepRecord.activation_id) == activation_id)
                             .order_by(col(ActivationStepRecord.at),
                                       col(ActivationStepRecord.id))
                             .execution_options(populate_existing=True)).all())


def activation_view(activation: Activation,
                    records: list[ActivationStepRecord]) -> dict[str, Any]:
    """An activation as JSON, with its step history (``GET /v1/activations/{id}``)."""
    return {"id": activation.id, "account_id": activation.account_id,
            "operator_slug": activation.operator_slug, "msisdn": activation.msisdn,
            "step": activation.step, "status": activation.status,
            "operator_ref": activation.operator_ref,
            "failed_reason": activation.failed_reason,
            "steps": [{"step": r.step, "status": r.status, "at": r.at.isoformat()}
                      for r in records],
            "created_at": activation.created_at.isoformat(),
            "updated_at": activation.updated_at.isoformat()}


def _view(session: Session, activation_id: str) -> dict[str, Any]:
    activation = session.get(Activation, activation_id, populate_existing=True)
    assert activation is not None  # its row was just updated
    return activation_view(activation, step_records(session, activation_id))


# -- the activation's transition helper -------------------------------------------------------
def transition_activation(session: Session, activation_id: str, *,
                          expect_step: ActivationStep,
                          expect_status: Collection[ActivationStatus],
                          step: ActivationStep, status: ActivationStatus,
                          operator_ref: str | None = None, failed_reason: str | None = None,
                          now: datetime | None = None) -> bool:
    """Move an activation from (``expect_step``, one of ``expect_status``) to (``step``,
    ``status``) in the caller's transaction, setting ``operator_ref`` and
    ``failed_reason`` when given. One conditional UPDATE decides: False, with nothing
    written, when the activation is elsewhere (a step already past, a failed or completed
    activation, a missing one). Entering ``completed`` or ``failed`` writes its webhook
    messages (:data:`ACTIVATION_EVENTS`) in that transaction, handed to the relay after
    it commits."""
    values: dict[str, object] = {"step": step.value, "status": status.value,
                                 "updated_at": now or utcnow()}
    if operator_ref is not None:
        values["operator_ref"] = operator_ref
    if failed_reason is not None:
        values["failed_reason"] = failed_reason[:500]
    result = session.exec(
        update(Activation)
        .where(col(Activation.id) == activation_id,
               col(Activation.step) == expect_step.value,
               col(Activation.status).in_([s.value for s in expect_status]))
        .values(**values))
    if result.rowcount != 1:
        return False
    event = ACTIVATION_EVENTS.get(status)
    if event is not None:
        write_event_messages(session, event, lambda: _view(session, activation_id))
    return True


def open_step_record(session: Session, activation_id: str, step: ActivationStep) -> str:
    """Add a ``running`` record of one step attempt in the caller's transaction; its id."""
    record = ActivationStepRecord(activation_id=activation_id, step=step.value,
                                  status=StepOutcome.RUNNING.value)
    session.add(record)
    return record.id


def close_step_record(session: Session, record_id: str, outcome: StepOutcome,
                      detail: str | None = None, *, now: datetime | None = None) -> None:
    """Write how a running step attempt ended (and when) in the caller's transaction; a
    record already closed is left as it is."""
    session.execute(update(ActivationStepRecord)
                    .where(col(ActivationStepRecord.id) == record_id,
                           col(ActivationStepRecord.status) == StepOutcome.RUNNING.value)
                    .values(status=outcome.value, at=now or utcnow(),
                            detail=None if detail is None else detail[:500]))
