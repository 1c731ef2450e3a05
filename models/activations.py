"""Operator activations: a SIM activated with a telecom operator in three steps,
``initiate → verify_identity → complete`` (docs/state-machines.md#activations).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlmodel import Field, SQLModel

from models.base import id_field, timestamp_field


class ActivationStep(StrEnum):
    """The steps, in order."""

    INITIATE = "initiate"
    VERIFY_IDENTITY = "verify_identity"
    COMPLETE = "complete"


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
    #: ``running``, ``completed`` or ``failed``.
    status: str = Field(max_length=16)
    detail: str | None = Field(default=None, max_length=500)
    at: datetime = timestamp_field()
