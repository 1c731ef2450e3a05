"""The telecom operator contract: the activation job's three steps and the package
sync's catalog, one adapter per operator, chosen by ``operator_slug``.

A step raises :class:`TransientOperatorError` when trying again may help, and
:class:`OperatorRejected` when it will not (the activation fails, no retries).
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Protocol, runtime_checkable

from providers.plugins import PluginRegistry


@dataclasses.dataclass(frozen=True)
class StepRequest:
    """What one activation step sends to the operator."""

    activation_id: str
    msisdn: str
    #: The operator's reference from ``initiate`` (None for ``initiate`` itself).
    operator_ref: str | None = None


@dataclasses.dataclass(frozen=True)
class StepResult:
    """What the operator answered; ``operator_ref`` is set by ``initiate``."""

    operator_ref: str | None = None
    detail: str | None = None


@dataclasses.dataclass(frozen=True)
class Package:
    """One package as an operator's catalog lists it."""

    code: str
    name: str
    price: Decimal
    currency: str


class OperatorError(Exception):
    """A classified operator failure."""


class TransientOperatorError(OperatorError):
    """Worth trying again (the step retries with backoff)."""


class OperatorRejected(OperatorError):
    """The operator refused for good (the activation fails, no retries)."""


@runtime_checkable
class Operator(Protocol):
    """A telecom operator adapter."""

    slug: str

    def initiate(self, request: StepRequest) -> StepResult:
        """Start an activation; the result carries the operator's reference."""

    def verify_identity(self, request: StepRequest) -> StepResult:
        """Check the subscriber's identity for the activation."""

    def complete(self, request: StepRequest) -> StepResult:
        """Finish the activation: the line is live."""

    def packages(self) -> list[Package]:
        """The packages it sells now."""


#: The plugins, by name; ``OPERATORS`` says which are enabled.
operators = PluginRegistry[Operator]({
    "mock": ("providers.operator_mock", "MockOperator"),
}, lambda settings: settings.operators)
