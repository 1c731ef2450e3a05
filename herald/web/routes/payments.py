"""``/v1/payments``: payments for store orders and activations, the gateway's completion,
and the operator's settlement replay (docs/api.md, "Payments and activations"). The work is in
``actors.payments``; routes only validate and translate."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from actors import payments
from herald.text import SingleLine
from herald.web.auth import protected_router
from herald.web.errors import api_error, found
from models.payments import payment_view

router = protected_router(["payments"])


class PaymentIn(BaseModel):
    """A payment for exactly one of a store order or an activation."""

    model_config = ConfigDict(extra="forbid")
    order_id: SingleLine | None = Field(default=None, min_length=1, max_length=36)
    activation_id: SingleLine | None = Field(default=None, min_length=1, max_length=36)
    #: A decimal string, like "50.00".
    amount: SingleLine = Field(min_length=1, max_length=32, examples=["50.00"])
    currency: SingleLine = Field(pattern=r"^[A-Z]{3}$")
    gateway: SingleLine = Field(default="mock", max_length=32)

    @field_validator("amount", mode="before")
    @classmethod
    def _amount_as_text(cls, value: Any) -> Any:
        # a JSON number would be read as a binary float (4.6 is 4.5999…): say what to send
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise PydanticCustomError(
                "decimal_string", 'must be a decimal string, like "4.60", not a JSON number')
        return value


def _translated(error: Exception) -> Exception:
    """The API error for one of ``actors.payments``' refusals."""
    if isinstance(error, payments.PaymentNotFound):
        return api_error(404, f"{error.kind}_not_found", str(error))
    if isinstance(error, payments.PaymentConflict):
        return api_error(409, "payment_conflict", str(error))
    return api_error(422, "invalid_payment", str(error))


REFUSALS = (payments.PaymentNotFound, payments.PaymentConflict, payments.InvalidPayment)


@router.post("/payments", status_code=201, summary="Create a payment")
def create_payment(body: PaymentIn) -> dict[str, Any]:
    """A ``pending`` payment for a store order (its amount and currency) or a pending
    activation."""
    try:
        payment = payments.create_payment(**body.model_dump())
    except REFUSALS as error:
        raise _translated(error) from None
    return payment_view(payment)


@router.get("/payments/{payment_id}", summary="A payment")
def get_payment(payment_id: str) -> dict[str, Any]:
    """Status, amount, what it pays for and when it completed and settled."""
    return payment_view(found(payments.get_payment(payment_id), "payment",
                                       payment_id))


@router.post("/payments/{payment_id}/complete", status_code=202,
             summary="The gateway's completion")
def complete_payment(payment_id: str, response: Response) -> dict[str, Any]:
    """202 with the payment once its settlement is queued; 200 when it was settled
    already (nothing queued again)."""
    try:
        payment, queued = payments.complete_payment(payment_id)
    except REFUSALS as error:
        raise _translated(error) from None
    if queued is None:
        response.status_code = 200
    return payment_view(payment)


@router.post("/payments/{payment_id}/settle", status_code=202,
             summary="Run a payment's settlement again")
def replay_settlement(payment_id: str) -> dict[str, Any]:
    """The operator's repair: settlement runs again for a completed or settled payment,
    re-doing its handoff (idempotent); 202 with the payment and the settlement job."""
    try:
        payment, result = payments.replay_settlement(payment_id)
    except REFUSALS as error:
        raise _translated(error) from None
    return {**payment_view(payment),
            "settlement": {"job_id": result.job_id, "status": result.status}}
